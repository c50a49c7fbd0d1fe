"""The REST API: a FastAPI app over one engine, every request acting through ``engine.scoped``.

Each request's scope is its scope fields (``agentWallet``, ``userAddress``, ``threadId``,
``mode``, ``haiId``, ``filters``, with the reference's aliases) normalised by
:meth:`Scope.from_dict`, with the API key's agent (and user) filled in: a key can never name
another agent. Errors are RFC 9457 problem details (``application/problem+json``) carrying
the engine error's message, never a stack trace.

One convention: request and response bodies are camelCase (``factType``, ``contextUsage``,
``jobId``; requests also take the snake_case names); keys inside user data (``metadata``) and
maps keyed by data (layer names, lanes, reasons) are left as they are. Every malformed request
is a 400 problem: malformed JSON, a body of the wrong shape or type, a missing field and a value
the engine refuses (empty content, a bad filter) alike. 400 rather than 422 because malformed
JSON is not "well-formed content" (RFC 9110, 15.5.21) and a client has nothing to do differently
between a field of the wrong type and an empty one: the problem's ``detail`` says what was wrong.
``/docs`` (Swagger UI) and ``/redoc`` load their scripts from the app itself, so they work offline.
"""


import contextlib
import copy
import email.message
import functools
import ipaddress
import json
import logging
import operator
import re
import types
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping, Sequence
from typing import Annotated, Any, Literal, TypeVar, Union, get_args, get_origin

from fastapi import APIRouter, Depends, FastAPI, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer
from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError, create_model
from pydantic.alias_generators import to_camel
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Send
from starlette.types import Scope as AsgiScope

from .. import errors
from .._util import now_ms
from .._version import __version__
from ..engine import ForgetReport, MemoryEngine, PostTurnResult, PreTurnResult, RememberResult
from ..jobs.schedules import ScheduleInfo
from ..records import Job
from ..scoped import ScopedMemory
from ..tools import TOOL_GROUPS, catalog, memory_tools, memory_view
from .auth import ApiKeys, KeyBinding, presented_key, scope_for

__all__ = ["DEFAULT_MAX_BODY_BYTES", "DOCS_ASSETS_PATH", "Problem", "camel_keys", "check_bind", "create_app", "is_loopback",
           "uvicorn_options"]

log = logging.getLogger("manowar_memory.server")

#: Largest request body accepted (bytes); larger ones get 413.
DEFAULT_MAX_BODY_BYTES = 1_000_000

LayerName = Literal["working", "scene", "graph", "patterns", "archives", "vectors"]
FactType = Literal["preference", "identity", "context", "skill", "relationship", "event"]
Source = Literal["fact", "session", "knowledge", "pattern", "archive"]
_M = TypeVar("_M", bound=BaseModel)
_MISSING = object()


# ---------------------------------------------------------------- problems


class Problem(BaseModel):
    """An RFC 9457 problem details body."""

    type: str = Field(description="A URI naming the kind of problem.")
    title: str = Field(description="Short summary of the kind of problem.")
    status: int = Field(description="The HTTP status code.")
    detail: str = Field(description="What went wrong, as the engine said it.")
    instance: str | None = Field(None, description="The request path.")


_PROBLEM_SCHEMA = Problem.model_json_schema()
_TITLES = {400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found", 405: "Method Not Allowed",
           409: "Conflict", 413: "Content Too Large", 422: "Unprocessable Content", 500: "Internal Server Error",
           502: "Bad Gateway", 503: "Service Unavailable"}
_DOCUMENTED = (400, 401, 403, 404, 413)
PROBLEM_RESPONSES: dict[int | str, dict[str, Any]] = {
    code: {"description": _TITLES[code], "content": {"application/problem+json": {"schema": _PROBLEM_SCHEMA}}}
    for code in _DOCUMENTED
}

# error class name -> HTTP status (tool errors carry the class name)
_STATUS_BY_NAME = {
    "NotFoundError": 404, "InvalidInputError": 400, "ScopeError": 400, "FilterError": 400,
    "ConfigurationError": 400, "MissingDependencyError": 400, "ToolCallError": 400, "AuthError": 401,
    "ForbiddenScopeError": 403, "ConflictError": 409, "EmbeddingError": 503, "PartialIngestError": 503, "RerankError": 503,
    "StoreError": 503, "PinningError": 502, "ExtractionError": 502,
}


def _problem(status: int, detail: str, request: Request | None, kind: str | None = None) -> JSONResponse:
    body = Problem(type=f"urn:manowar:error:{kind}" if kind else "about:blank", title=_TITLES.get(status, "Error"),
                   status=status, detail=detail, instance=request.url.path if request is not None else None)
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return JSONResponse(body.model_dump(), status_code=status, media_type="application/problem+json",
                        headers=headers)


_SNAKE = re.compile(r"^[a-z][a-z0-9]*(?:_[a-z0-9]+)+$")
_CAMEL_PART = re.compile(r"_([a-z0-9])")
#: keys whose value is user data (kept as the user wrote it)
_USER_DATA = frozenset({"metadata", "userMetadata", "user_metadata"})


def camel_keys(value: Any) -> Any:
    """``value`` (JSON data) with every snake_case key camelCased, except inside user metadata."""
    if isinstance(value, dict):
        return {(_CAMEL_PART.sub(lambda m: m.group(1).upper(), k) if isinstance(k, str) and _SNAKE.match(k) else k):
                (v if k in _USER_DATA else camel_keys(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [camel_keys(v) for v in value]
    return value


_REST_MODELS: dict[type[BaseModel], type[BaseModel]] = {}


def _rest_annotation(annotation: Any) -> Any:
    """``annotation`` with every tool result model in it replaced by its camelCase REST twin."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return rest_model(annotation)
    args = get_args(annotation)
    if not args:
        return annotation
    new = tuple(_rest_annotation(a) for a in args)
    if new == args:
        return annotation
    origin = get_origin(annotation)
    if origin is Union or origin is types.UnionType:
        return functools.reduce(operator.or_, new)
    return origin[new if len(new) > 1 else new[0]]


def rest_model(model: type[BaseModel]) -> type[BaseModel]:
    """The REST twin of a tool result ``model``: the same fields, descriptions and ``extra``
    policy, named in camelCase (``rank_score`` -> ``rankScore``) as the REST API answers them."""
    if model not in _REST_MODELS:
        fields: dict[str, Any] = {}
        for name, info in model.model_fields.items():
            twin = copy.copy(info)
            twin.annotation = _rest_annotation(info.annotation)
            fields[name] = (twin.annotation, twin)
        config = ConfigDict(alias_generator=to_camel, populate_by_name=True,
                            extra=model.model_config.get("extra"))
        _REST_MODELS[model] = create_model(model.__name__, __config__=config, __doc__=model.__doc__,
                                           __module__=model.__module__, **fields)
    return _REST_MODELS[model]


def _tool_response(name: str) -> dict[str, Any]:
    """The route options of a route answering the tool ``name``'s result: its typed REST model,
    and fields the tool left out left out of the answer too."""
    model = next(d.result_model for d in catalog(TOOL_GROUPS) if d.name == name)
    return {"response_model": rest_model(model), "response_model_exclude_unset": True}


def _one_validation_status(schema: dict[str, Any]) -> dict[str, Any]:
    """The OpenAPI document without FastAPI's 422 responses: a malformed request is a 400 problem."""
    for path in schema.get("paths", {}).values():
        for operation in path.values():
            if isinstance(operation, dict):
                operation.get("responses", {}).pop("422", None)
    components = schema.get("components", {}).get("schemas", {})
    text = json.dumps(schema.get("paths", {}))
    for name in ("HTTPValidationError", "ValidationError"):
        if f"#/components/schemas/{name}" not in text:
            components.pop(name, None)
    return schema


def _status_of(exc: BaseException) -> tuple[int, str, str]:
    if isinstance(exc, errors.ToolCallError):
        err = (exc.payload or {}).get("error", {}) if isinstance(getattr(exc, "payload", None), dict) else {}
        kind = str(err.get("type") or "ToolCallError")
        return _STATUS_BY_NAME.get(kind, 400), str(err.get("message") or exc), kind
    for cls in type(exc).__mro__:
        if cls.__name__ in _STATUS_BY_NAME:
            return _STATUS_BY_NAME[cls.__name__], str(exc), type(exc).__name__
    return 500, "internal error", "InternalError"


#: deepest JSON nesting (objects and arrays) a request body may have; deeper ones get 400 before parsing
MAX_JSON_DEPTH = 256
_JSON_OPEN, _JSON_CLOSE, _JSON_QUOTE, _JSON_ESCAPE = frozenset(b"[{"), frozenset(b"]}"), ord('"'), ord("\\")


class _DepthScanner:
    """The nesting depth of a JSON body fed in chunks, outside strings. A body whose opening
    brackets, counted at C speed, do not exceed the limit cannot be too deep, so the byte-by-byte
    scan runs only on the rare body with more of them than that."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.brackets = 0
        self.held: list[bytes] = []  # chunks not scanned yet
        self.depth = 0
        self.in_string = self.escaped = False

    def too_deep(self, chunk: bytes) -> bool:
        self.held.append(chunk)
        self.brackets += chunk.count(b"[") + chunk.count(b"{")
        if self.brackets <= self.limit:
            return False
        held, self.held = self.held, []
        for part in held:
            for byte in part:
                if self.in_string:
                    if self.escaped:
                        self.escaped = False
                    elif byte == _JSON_ESCAPE:
                        self.escaped = True
                    elif byte == _JSON_QUOTE:
                        self.in_string = False
                elif byte == _JSON_QUOTE:
                    self.in_string = True
                elif byte in _JSON_OPEN:
                    self.depth += 1
                    if self.depth > self.limit:
                        return True
                elif byte in _JSON_CLOSE:
                    self.depth -= 1
        return False


class _TooDeep(StarletteHTTPException):
    """A JSON body nested deeper than :data:`MAX_JSON_DEPTH` (refused before any parser recurses)."""

    def __init__(self) -> None:
        super().__init__(400, f"the JSON body is nested deeper than {MAX_JSON_DEPTH} levels: send flatter data")


class _TooLarge(StarletteHTTPException):
    """A streamed body went over the limit. An HTTP exception, so FastAPI's body reader lets it
    through (it turns any other error while reading into 400) and the app answers 413."""

    def __init__(self, max_bytes: int) -> None:
        super().__init__(413, f"the request body is larger than {max_bytes} bytes")


class BodyLimit:
    """ASGI middleware: a request body over ``max_bytes`` gets 413 (declared, or counted while it
    streams in, with or without a content length), and one nested deeper than
    :data:`MAX_JSON_DEPTH` gets 400, both before the app parses it."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: AsgiScope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = 0
                if declared > self.max_bytes:
                    await self._reject(scope, send)
                    return
        seen = 0
        started = False
        scanner = _DepthScanner(MAX_JSON_DEPTH)

        async def counting_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                chunk = message.get("body", b"")
                seen += len(chunk)
                if seen > self.max_bytes:
                    raise _TooLarge(self.max_bytes)
                if chunk and scanner.too_deep(chunk):
                    raise _TooDeep
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counting_receive, tracking_send)
        except (_TooLarge, _TooDeep) as exc:  # raised where the app did not answer for it
            if not started:
                await self._reject(scope, send, exc.status_code, exc.detail)

    async def _reject(self, scope: AsgiScope, send: Send, status: int = 413, detail: str | None = None) -> None:
        body = Problem(type="about:blank", title=_TITLES[status], status=status,
                       detail=detail or f"the request body is larger than {self.max_bytes} bytes",
                       instance=scope.get("path")).model_dump_json().encode()
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/problem+json"),
                                (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})


# ---------------------------------------------------------------- the lean path of hot routes


def _json_body(raw: bytes, content_type: str | None) -> Any:
    """A JSON body as FastAPI reads one for a body model: parsed when the content type is
    ``application/json`` or ``application/*+json``, the raw bytes under another type (which then
    fail validation), ``_MISSING`` when empty; malformed JSON is a 400 (as every malformed request)."""
    if not raw:
        return _MISSING
    if content_type != "application/json":
        if not content_type:
            return raw
        message = email.message.Message()
        message["content-type"] = content_type
        subtype = message.get_content_subtype()
        if message.get_content_maintype() != "application" or not (subtype == "json" or subtype.endswith("+json")):
            return raw
    try:
        return json.loads(raw)
    except UnicodeDecodeError:
        raise errors.InvalidInputError("the request body is not UTF-8: send JSON encoded as UTF-8") from None
    except json.JSONDecodeError as exc:
        raise RequestValidationError([{"type": "json_invalid", "loc": ("body", exc.pos), "msg": "JSON decode error",
                                       "input": {}, "ctx": {"error": exc.msg}}], body=exc.doc) from exc


def _validate_body(model: type[_M], data: Any) -> _M:
    """``data`` validated as ``model``; errors are located under ``body`` as FastAPI locates them."""
    if data is _MISSING:
        raise RequestValidationError([{"type": "missing", "loc": ("body",), "msg": "Field required", "input": None}])
    try:
        return model.model_validate(data, from_attributes=True)  # as FastAPI validates a body field
    except ValidationError as exc:
        raise RequestValidationError([{**e, "loc": ("body", *e["loc"])} for e in exc.errors(include_url=False)],
                                     body=data) from exc


def _served_by(handler: Callable[[Request], Coroutine[Any, Any, Response]]) -> type[APIRoute]:
    """A route class documented from its endpoint's signature like any route (OpenAPI, security
    schemes, 400 response) whose requests go straight to ``handler``, skipping FastAPI's
    per-request dependency solving and body re-validation (FastAPI's custom-route hook)."""

    class ServedRoute(APIRoute):
        def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
            return handler

    return ServedRoute


# ---------------------------------------------------------------- request models


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True)


class ScopeFields(_Body):
    """The scope of a request (the API key's agent and user are filled in when omitted)."""

    agent_wallet: str | None = Field(None, validation_alias=AliasChoices("agentWallet", "agent_wallet", "agent_id"),
                                     description="The agent (must be the API key's agent).")
    user_address: str | None = Field(None, validation_alias=AliasChoices("userAddress", "user_address", "user_id"),
                                     description="The user (must be the key's user when the key has one).")
    thread_id: str | None = Field(None, validation_alias=AliasChoices("threadId", "thread_id", "runId", "run_id"),
                                  description="The thread (narrows the working and scene layers).")
    mode: Literal["global", "local"] | None = Field(None, description="global or local (local needs haiId).")
    hai_id: str | None = Field(None, validation_alias=AliasChoices("haiId", "hai_id"), description="The HAI id.")
    filters: dict[str, Any] | None = Field(None, description="Allowlisted filters applied to every read.")

    def scope_data(self) -> dict[str, Any]:
        """The scope fields with the reference's names."""
        return {"agentWallet": self.agent_wallet, "userAddress": self.user_address, "threadId": self.thread_id,
                "mode": self.mode, "haiId": self.hai_id, "filters": self.filters}


class MessageIn(_Body):
    """One chat message."""

    role: str = Field(max_length=32, description="user, assistant, system or tool (common aliases map over).")
    content: str = Field(description="The message text.")
    timestamp: int | None = Field(None, ge=0, le=253_402_300_799_000, description="Epoch milliseconds.")


class AssembleBody(ScopeFields):
    """``context/assemble``: the packed memory context of a turn."""

    query: str = Field(description="The user's message the context is for.")
    layers: list[LayerName] | None = Field(None, description="Layers to search (default: all six).")
    limit: int | None = Field(None, ge=1, le=100, description="Hits per layer.")
    max_items: int | None = Field(None, ge=1, le=50)
    max_item_chars: int | None = Field(None, ge=20, le=4000)
    budget_chars: int | None = Field(None, ge=40, le=20_000)
    rerank: bool = False
    mmr: bool = False
    explain: bool = False


class RecordBody(ScopeFields):
    """``turns/record``: record a turn of the scope's thread (``threadId`` required)."""

    messages: list[MessageIn] = Field(min_length=1, max_length=200)
    tool_calls: list[dict[str, Any]] | None = Field(None, max_length=200)
    metadata: dict[str, Any] | None = None
    turn_id: str | None = Field(None, max_length=1000, description=(
        "The turn's id: a retry with the same id is stored once (the answer's created is false)."))
    extract_facts: bool = True


class RememberBody(ScopeFields):
    """``remember``: store a durable fact."""

    content: str
    fact_type: FactType | None = None
    confidence: float | None = Field(None, ge=0, le=1)
    importance: float | None = Field(None, ge=0, le=1)
    metadata: dict[str, Any] | None = None


class LoopBody(ScopeFields):
    """``loop``: record the turn's ``messages`` (when given), then assemble the context of ``query`` (when given)."""

    messages: list[MessageIn] | None = Field(None, max_length=200)
    tool_calls: list[dict[str, Any]] | None = Field(None, max_length=200)
    metadata: dict[str, Any] | None = None
    turn_id: str | None = Field(None, max_length=1000, description=(
        "The turn's id: a retry with the same id is stored once (the answer's created is false)."))
    extract_facts: bool = True
    query: str | None = None
    layers: list[LayerName] | None = None
    max_items: int | None = Field(None, ge=1, le=50)
    budget_chars: int | None = Field(None, ge=40, le=20_000)


class LoopResult(BaseModel):
    """What ``loop`` recorded and assembled."""

    recorded: PostTurnResult | None = None
    context: PreTurnResult | None = None


class SearchBody(ScopeFields):
    """A ranked search."""

    query: str
    limit: int = Field(5, ge=1, le=50)
    layers: list[LayerName] | None = None


class VectorSearchBody(ScopeFields):
    """``vector-search``: the vectors layer with decay and MMR."""

    query: str
    limit: int = Field(10, ge=1, le=50)


class VectorIndexBody(ScopeFields):
    """``vector-index``: add one row to the vectors layer."""

    content: str
    source: Source = "knowledge"
    metadata: dict[str, Any] | None = None


class AddBody(ScopeFields):
    """``add``: extract and store the facts of some messages (mem0 style)."""

    messages: list[MessageIn] = Field(min_length=1, max_length=200)
    metadata: dict[str, Any] | None = None


class TranscriptStoreBody(ScopeFields):
    """``transcript-store``: store messages in the thread's transcript (``threadId`` required)."""

    messages: list[MessageIn] = Field(min_length=1, max_length=500)


class RerankBody(_Body):
    """``rerank``: score documents against a query with the configured reranker."""

    query: str = Field(min_length=1)
    documents: list[str] = Field(min_length=1, max_length=200)
    top_k: int | None = Field(None, ge=1, le=200)


class ItemPatchBody(ScopeFields):
    """Change one of the scope's own rows."""

    content: str | None = None
    metadata: dict[str, Any] | None = None
    confidence: float | None = Field(None, ge=0, le=1)
    status: Literal["active", "superseded", "archived"] | None = None


class ResolveBody(ScopeFields):
    """Resolve a conflict about one of the scope's own rows."""

    resolution: Literal["supersede", "keep", "merge", "ignore"]
    winning_memory_id: str | None = None
    reason: str | None = Field(None, max_length=2000)


class JobBody(ScopeFields):
    """Run a maintenance job on the key's agent."""

    type: Literal["consolidate", "patterns_extract", "archive_create", "decay_update", "expire"]
    params: dict[str, Any] | None = None
    dry_run: bool = False
    execution: Literal["inline", "temporal"] = "inline"


class TranscriptIndexBody(ScopeFields):
    """``transcripts/index``: store a conversation of a thread and index each of its messages."""

    session_id: str | None = Field(None, min_length=1, max_length=512,
                                   description="The session (the thread when threadId is omitted).")
    messages: list[MessageIn] = Field(min_length=1, max_length=500)
    model: str | None = Field(None, max_length=200, validation_alias=AliasChoices("model", "modelUsed", "model_used"),
                              description="The model of the conversation (kept in the rows' metadata).")
    total_tokens: int | None = Field(None, ge=0, le=10**9,
                                     validation_alias=AliasChoices("totalTokens", "tokenCount", "total_tokens"))
    metadata: dict[str, Any] | None = None


class TranscriptIndexResult(BaseModel):
    """What ``transcripts/index`` stored."""

    indexed: bool = Field(description="False when no user or assistant message had text (nothing written).")
    messageCount: int  # noqa: N815 - the reference's names
    vectorCount: int  # noqa: N815


class WorkingPatchBody(ScopeFields):
    """Change a thread's working session: append (or with ``replace``, set) context lines, merge entities and state."""

    context: list[str] | None = Field(None, max_length=200, description="Lines to append to the working buffer.")
    entities: dict[str, Any] | None = None
    state: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    replace: bool = Field(False, description="Set context, entities, state and metadata instead of merging.")


class WorkingSession(BaseModel):
    """A thread's working session."""

    sessionId: str  # noqa: N815
    workingMemory: dict[str, Any]  # noqa: N815
    metadata: dict[str, Any]
    compressed: bool
    createdAt: int  # noqa: N815
    expiresAt: int  # noqa: N815
    lastAccessedAt: int  # noqa: N815


class CompressBody(ScopeFields):
    """Summarise a thread into one archive row of the scope (extractive: no model call)."""

    max_chars: int = Field(1800, ge=200, le=20_000, description="Longest summary, in characters.")


class CompressResult(BaseModel):
    """The summary a ``compress`` stored."""

    sessionId: str  # noqa: N815
    summary: str
    keyFacts: list[str]  # noqa: N815
    archiveRowId: str  # noqa: N815
    entitiesExtracted: int  # noqa: N815


class ForgetBody(ScopeFields):
    """Erase everything the scope owns (the key's user, or the user the body names for an agent key)."""


class ArchiveSyncBody(ScopeFields):
    """Pin one of the agent's archives to IPFS (Pinata; idempotent)."""

    dry_run: bool = False


ScheduleJobType = Literal["consolidate", "decay_update", "patterns_extract", "archive_create"]


class ScheduleCreateBody(ScopeFields):
    """Create (or replace) the key's agent's maintenance schedules."""

    job_types: list[ScheduleJobType] | None = Field(None, max_length=4, description="Only these (default: all four).")


class ScheduleNoteBody(ScopeFields):
    """Pause or resume one schedule."""

    note: str | None = Field(None, max_length=500)


class ScheduleList(BaseModel):
    """Schedules of the key's agent."""

    schedules: list[ScheduleInfo]


class ScheduleDeleted(BaseModel):
    """Schedule ids deleted."""

    deleted: list[str]


class ScheduleTriggered(BaseModel):
    """A schedule run now: its job, or none when a run of it was still going."""

    scheduleId: str  # noqa: N815
    started: bool
    job: Job | None = None


class PromoteBody(ScopeFields):
    """Promote a pattern into a skill."""

    skill_name: str = Field(min_length=1, max_length=200)
    validation_data: dict[str, Any] | None = None


class EvalCase(_Body):
    """One labelled query: the ids, or texts, of the memories a search should return."""

    query: str = Field(min_length=1)
    expected_ids: list[str] = Field(default_factory=list, max_length=100)
    expected_contents: list[str] = Field(default_factory=list, max_length=100,
                                         description="Texts a hit must contain (case-insensitive).")


class EvalBody(ScopeFields):
    """``evals/runs``: the retrieval evaluation of the scope on a labelled set."""

    test_cases: list[EvalCase] = Field(min_length=1, max_length=200)
    k: int = Field(5, ge=1, le=50)
    layers: list[LayerName] | None = None


def _both_scopes(body: Mapping[str, Any], query: Mapping[str, Any]) -> dict[str, Any]:
    """A write's scope from its body and its query string (as GET and DELETE take it): a field
    may be in either; given in both with different values, the request is refused."""
    merged = dict(body)
    for name, value in query.items():
        if value is None:
            continue
        if merged.get(name) not in (None, value):
            raise errors.InvalidInputError(
                f"{name} is {merged[name]!r} in the body and {value!r} in the query string; give it once")
        merged[name] = value
    return merged


class ScopeQuery(BaseModel):
    """Scope fields of a GET or DELETE (and of a PATCH, beside its body), from the query string."""

    agentWallet: str | None = None  # noqa: N815 - the reference's names
    userAddress: str | None = None  # noqa: N815
    threadId: str | None = None  # noqa: N815
    mode: Literal["global", "local"] | None = None
    haiId: str | None = None  # noqa: N815

    def scope_data(self) -> dict[str, Any]:
        """The scope fields with the reference's names."""
        return self.model_dump()


# ---------------------------------------------------------------- workflows (static manifests)


def _step(op: str, method: str, path: str, purpose: str) -> dict[str, str]:
    return {"operationId": op, "method": method, "path": path, "purpose": purpose}


WORKFLOWS: dict[str, dict[str, Any]] = {
    "agent_memory_loop": {
        "id": "agent_memory_loop", "hot": True, "returns": "compact prompt only",
        "steps": [_step("assembleContext", "POST", "/api/memory/context/assemble", "pack memory before the model call"),
                  _step("recordTurn", "POST", "/api/memory/turns/record", "record the turn after the model call")]},
    "memory_maintenance_loop": {
        "id": "memory_maintenance_loop", "hot": False, "returns": "metadata only",
        "steps": [_step("consolidate", "POST", "/api/memory/jobs", "type consolidate"),
                  _step("decayUpdate", "POST", "/api/memory/jobs", "type decay_update")]},
    "memory_pattern_loop": {
        "id": "memory_pattern_loop", "hot": False, "returns": "metadata only",
        "steps": [_step("patternsExtract", "POST", "/api/memory/jobs", "type patterns_extract"),
                  _step("validatePattern", "POST", "/api/memory/patterns/{patternId}/validate", "check a pattern"),
                  _step("promotePattern", "POST", "/api/memory/patterns/{patternId}/promote", "make it a skill")]},
    "memory_archive_loop": {
        "id": "memory_archive_loop", "hot": False, "returns": "metadata only",
        "steps": [_step("archiveCreate", "POST", "/api/memory/jobs", "type archive_create")]},
}


# ---------------------------------------------------------------- the app


def is_loopback(host: str) -> bool:
    """Whether ``host`` only listens on this machine."""
    if host in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, keys: ApiKeys) -> None:
    """Refuse to serve without API keys on an address other machines can reach."""
    if not keys and not is_loopback(host):
        raise errors.ConfigurationError(
            f"refusing to listen on {host} without API keys: configure keys (--keys FILE or $MANOWAR_API_KEYS) "
            "or listen on 127.0.0.1"
        )


def create_app(engine: MemoryEngine, *, keys: ApiKeys | None = None, trust: str | None = None,
               max_body_bytes: int = DEFAULT_MAX_BODY_BYTES, title: str = "manowar-memory",
               temporal_address: str | None = None, temporal_namespace: str = "default",
               temporal_task_queue: str | None = None, agent_jobs: bool = False,
               allow_pin: bool = False) -> FastAPI:
    """The REST API over ``engine``. ``keys``: the API keys (none: every request names its own
    agent; serve that on loopback only, see :func:`check_bind`). ``trust``: the trust level of
    rows written through the API (None: the engine's default). ``temporal_address``: a Temporal
    server, which turns on ``execution: "temporal"`` for ``POST /api/memory/jobs`` (a
    ``manowar worker`` on the same store and task queue runs the workflows). ``agent_jobs``:
    agent-level keys run maintenance over every user's rows of their agent (otherwise every job
    acts on the caller's own rows); ``allow_pin``: callers may publish archives to IPFS. The
    engine's embedder loads at startup (:meth:`MemoryEngine.warm_up` in the app's lifespan)."""
    import asyncio


    keys = keys if keys is not None else ApiKeys()

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await asyncio.to_thread(engine.warm_up)  # the model loads at startup, not in the first request
        yield

    app = FastAPI(title=title, version=__version__, docs_url=None, redoc_url=None, lifespan=lifespan,
                  description="Layered long-term memory for LLM agents. Every request acts in one scope; an API "
                  "key acts for one agent (and optionally one user). Bodies are camelCase. Errors are RFC 9457 "
                  "problem details; every malformed request is a 400.")
    _serve_docs(app)

    default_openapi = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:  # FastAPI's document, built once, without its 422 responses
            app.openapi_schema = _one_validation_status(default_openapi())
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    app.state.engine = engine
    app.state.keys = keys
    app.add_middleware(BodyLimit, max_bytes=max_body_bytes)

    @app.exception_handler(errors.ManowarError)
    async def _manowar_error(request: Request, exc: errors.ManowarError) -> JSONResponse:
        status, detail, kind = _status_of(exc)
        if status >= 500:
            log.warning("%s %s failed: %s: %s", request.method, request.url.path, type(exc).__name__, exc)
        return _problem(status, detail, request, kind)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg')}" for e in exc.errors()[:10])
        return _problem(400, f"invalid request: {problems}", request, "InvalidInputError")

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        response = _problem(exc.status_code, str(exc.detail), request)
        response.headers.update(exc.headers or {})  # Allow on a 405
        return response

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.error("%s %s failed", request.method, request.url.path, exc_info=exc)
        return _problem(500, "internal error", request, "InternalError")

    bearer = HTTPBearer(auto_error=False, description="An API key as a bearer token.")
    header = APIKeyHeader(name="X-API-Key", auto_error=False, description="An API key.")

    async def tenant(creds: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
                     api_key: Annotated[str | None, Depends(header)]) -> KeyBinding | None:
        # async: a hash and a compare, run on the event loop rather than a worker thread (one thread hop less)
        if not keys:
            return None
        return keys.authenticate(api_key or (creds.credentials if creds is not None else None))

    Tenant = Annotated[KeyBinding | None, Depends(tenant)]  # noqa: N806 - type aliases
    Q = Annotated[ScopeQuery, Query()]  # noqa: N806

    def mem(binding: KeyBinding | None, data: Mapping[str, Any]) -> ScopedMemory:
        return engine.scoped(scope_for(data, binding), trust=trust, agent_jobs=agent_jobs, allow_pin=allow_pin)

    def tool(memory: ScopedMemory, name: str, **arguments: Any) -> dict[str, Any]:
        result = memory_tools(memory, include=[name])[0].call(**{k: v for k, v in arguments.items() if v is not None})
        return camel_keys(result)  # type: ignore[no-any-return]

    temporal: dict[str, Any] = {}  # the client, connected on first use in the server's event loop

    async def temporal_client() -> Any:
        if not temporal_address:
            raise errors.ConfigurationError(
                "this server runs jobs inline only: send execution 'inline', or start it with "
                "`manowar serve --temporal HOST:PORT` (and run `manowar worker` on the same store) to run jobs "
                "on Temporal")
        if "client" not in temporal:
            try:
                from ..jobs.temporal import connect_temporal
            except ImportError as exc:
                raise errors.MissingDependencyError("temporalio", "temporal", "Temporal jobs") from exc
            temporal["client"] = await connect_temporal(temporal_address, temporal_namespace)
        return temporal["client"]

    def job_view(job: Job) -> Job:
        return job.model_copy(update={"data": camel_keys(job.data)})  # the report's keys camelCase too

    def schedule_view(info: ScheduleInfo) -> ScheduleInfo:
        params = camel_keys(info.schedule.params)
        return info.model_copy(update={"schedule": info.schedule.model_copy(update={"params": params})})

    def thread_of(path_id: str, body_thread: str | None) -> str:
        if body_thread is not None and body_thread != path_id:
            raise errors.InvalidInputError(f"threadId {body_thread!r} differs from the session in the path {path_id!r}")
        return path_id

    def working_view(thread: str, session: Any) -> WorkingSession:
        return WorkingSession(sessionId=thread, workingMemory=session.working_memory.model_dump(mode="json"),
                              metadata=session.metadata, compressed=session.compressed, createdAt=session.created_at,
                              expiresAt=session.expires_at, lastAccessedAt=session.last_accessed_at)

    def msgs(items: Sequence[MessageIn]) -> list[dict[str, Any]]:
        return [m.model_dump(exclude_none=True) for m in items]

    r = APIRouter(prefix="/api/memory", responses=PROBLEM_RESPONSES)
    Id = Annotated[str, Path(min_length=1, max_length=512)]  # noqa: N806 - a type alias

    # ------------------------------------------------------------ loop
    def assemble_json(body: AssembleBody, key: KeyBinding | None) -> str:
        result = mem(key, body.scope_data()).context(
            body.query, layers=body.layers, limit=body.limit, max_items=body.max_items,
            max_item_chars=body.max_item_chars, budget_chars=body.budget_chars, rerank=body.rerank, mmr=body.mmr,
            explain=body.explain)
        return result.model_dump_json(by_alias=True)  # serialised once, from the engine's model (the response_model)

    async def assemble_served(request: Request) -> Response:
        # the hot path, as FastAPI would serve `assemble` but without its per-request dependency solving:
        # a malformed JSON body is refused first, then the key, then the body's fields
        data = _json_body(await request.body(), request.headers.get("content-type"))
        binding = keys.authenticate(presented_key(request.headers)) if keys else None
        body = _validate_body(AssembleBody, data)
        return Response(await run_in_threadpool(assemble_json, body, binding), media_type="application/json")

    def assemble(body: AssembleBody, key: Tenant) -> Any:
        # the documented signature of context/assemble (its OpenAPI operation); requests go to assemble_served
        return Response(assemble_json(body, key), media_type="application/json")

    r.add_api_route("/context/assemble", assemble, methods=["POST"], response_model=PreTurnResult, tags=["loop"],
                    summary="Assemble context (pre_turn)", route_class_override=_served_by(assemble_served))

    @r.post("/turns/record", response_model=PostTurnResult, tags=["loop"], summary="Record a turn (post_turn)")
    def record(body: RecordBody, key: Tenant) -> Any:
        return mem(key, body.scope_data()).post_turn(msgs(body.messages), body.tool_calls, metadata=body.metadata,
                                                     extract_facts=body.extract_facts, turn_id=body.turn_id)

    @r.post("/remember", response_model=RememberResult, tags=["loop"], summary="Remember a fact")
    def remember(body: RememberBody, key: Tenant) -> Any:
        return mem(key, body.scope_data()).remember(body.content, fact_type=body.fact_type, confidence=body.confidence,
                                                    importance=body.importance, metadata=body.metadata)

    @r.post("/loop", response_model=LoopResult, tags=["loop"], summary="Record then assemble")
    def loop(body: LoopBody, key: Tenant) -> Any:
        if not body.messages and body.query is None:
            raise errors.InvalidInputError("loop needs 'messages' (to record), 'query' (to assemble) or both")
        m = mem(key, body.scope_data())
        recorded = m.post_turn(msgs(body.messages), body.tool_calls, metadata=body.metadata,
                               extract_facts=body.extract_facts, turn_id=body.turn_id) if body.messages else None
        context = m.context(body.query, layers=body.layers, max_items=body.max_items,
                            budget_chars=body.budget_chars) if body.query is not None else None
        return LoopResult(recorded=recorded, context=context)

    # ------------------------------------------------------------ items
    @r.post("/items/search", tags=["items"], summary="Search memories", **_tool_response("memory_search"))
    def items_search(body: SearchBody, key: Tenant) -> dict[str, Any]:
        return tool(mem(key, body.scope_data()), "memory_search", query=body.query, k=body.limit, layers=body.layers)

    @r.get("/items/{memoryId}", tags=["items"], summary="Read a memory", **_tool_response("memory_get"))
    def item_get(memoryId: Id, q: Q, key: Tenant) -> dict[str, Any]:  # noqa: N803
        return tool(mem(key, q.scope_data()), "memory_get", memory_id=memoryId)

    @r.patch("/items/{memoryId}", tags=["items"], summary="Change one of your memories", **_tool_response("memory_update"),
             responses={409: {"description": "Another active fact of the scope has this text (ConflictError)",
                              "content": {"application/problem+json": {"schema": _PROBLEM_SCHEMA}}}})
    def item_patch(memoryId: Id, body: ItemPatchBody, q: Q, key: Tenant) -> dict[str, Any]:  # noqa: N803
        return tool(mem(key, _both_scopes(body.scope_data(), q.scope_data())), "memory_update", memory_id=memoryId,
                    content=body.content,
                    metadata=body.metadata, confidence=body.confidence, status=body.status)

    @r.delete("/items/{memoryId}", tags=["items"], summary="Delete one of your memories",
              **_tool_response("memory_delete"))
    def item_delete(memoryId: Id, q: Q, key: Tenant, hardDelete: bool = False) -> dict[str, Any]:  # noqa: N803
        return tool(mem(key, q.scope_data()), "memory_delete", memory_id=memoryId, hard=hardDelete)

    @r.post("/conflicts/{memoryId}/resolve", tags=["items"], summary="Resolve a conflict",
            **_tool_response("memory_resolve_conflict"))
    def resolve(memoryId: Id, body: ResolveBody, key: Tenant) -> dict[str, Any]:  # noqa: N803
        return tool(mem(key, body.scope_data()), "memory_resolve_conflict", memory_id=memoryId,
                    resolution=body.resolution, winning_memory_id=body.winning_memory_id, reason=body.reason)

    # ------------------------------------------------------------ jobs
    @r.post("/jobs", response_model=Job, tags=["jobs"], summary="Run a maintenance job (inline or on Temporal)")
    async def job_run(body: JobBody, key: Tenant) -> Any:
        m = mem(key, body.scope_data())
        if body.execution == "temporal":
            client = await temporal_client()
            return job_view(await m.astart_temporal_job(client, body.type, body.params, dry_run=body.dry_run,
                                                        task_queue=temporal_task_queue))
        return job_view(await asyncio.to_thread(m.run_job, body.type, body.params, dry_run=body.dry_run))

    @r.post("/forget", response_model=ForgetReport, tags=["items"],
            summary="Erase everything a scope owns (a user: every layer, archives, indexes)")
    async def forget(body: ForgetBody, key: Tenant) -> Any:
        return await mem(key, body.scope_data()).aforget()

    @r.get("/jobs/{jobId}", response_model=Job, tags=["jobs"], summary="Read a job")
    async def job_get(jobId: Id, q: Q, key: Tenant) -> Any:  # noqa: N803
        m = mem(key, q.scope_data())
        job = await asyncio.to_thread(m.job, jobId)
        if job.execution == "temporal" and job.status == "running" and temporal_address:
            job = await m.arefresh_job(await temporal_client(), job)
        return job_view(job)

    # ------------------------------------------------------------ schedules (inline, the key's agent only)
    @r.get("/schedules", response_model=ScheduleList, tags=["schedules"], summary="The agent's schedules")
    def schedules_list(q: Q, key: Tenant) -> Any:
        return ScheduleList(schedules=[schedule_view(s) for s in mem(key, q.scope_data()).agent_schedules()])

    @r.post("/schedules", response_model=ScheduleList, tags=["schedules"],
            summary="Create (or replace) the agent's schedules")
    def schedules_create(body: ScheduleCreateBody, key: Tenant) -> Any:
        created = mem(key, body.scope_data()).create_agent_schedules(body.job_types)
        return ScheduleList(schedules=[schedule_view(s) for s in created])

    @r.delete("/schedules", response_model=ScheduleDeleted, tags=["schedules"], summary="Delete the agent's schedules")
    def schedules_delete(q: Q, key: Tenant) -> Any:
        return ScheduleDeleted(deleted=mem(key, q.scope_data()).delete_agent_schedules())

    SchedId = Annotated[str, Path(min_length=1, max_length=400)]  # noqa: N806 - a type alias

    @r.post("/schedules/{scheduleId}/pause", response_model=ScheduleInfo, tags=["schedules"], summary="Pause a schedule")
    def schedule_pause(scheduleId: SchedId, body: ScheduleNoteBody, key: Tenant) -> Any:  # noqa: N803
        return schedule_view(mem(key, body.scope_data()).pause_agent_schedule(scheduleId, body.note))

    @r.post("/schedules/{scheduleId}/resume", response_model=ScheduleInfo, tags=["schedules"],
            summary="Resume a schedule")
    def schedule_resume(scheduleId: SchedId, body: ScheduleNoteBody, key: Tenant) -> Any:  # noqa: N803
        return schedule_view(mem(key, body.scope_data()).resume_agent_schedule(scheduleId, body.note))

    @r.post("/schedules/{scheduleId}/trigger", response_model=ScheduleTriggered, tags=["schedules"],
            summary="Run a schedule's job now")
    def schedule_trigger(scheduleId: SchedId, body: ScopeFields, key: Tenant) -> Any:  # noqa: N803
        job = mem(key, body.scope_data()).trigger_agent_schedule(scheduleId)
        return ScheduleTriggered(scheduleId=scheduleId, started=job is not None,
                                 job=job_view(job) if job is not None else None)

    # ------------------------------------------------------------ sessions and archives
    @r.post("/transcripts/index", response_model=TranscriptIndexResult, tags=["sessions"],
            summary="Store a conversation and index each message")
    def transcripts_index(body: TranscriptIndexBody, key: Tenant) -> Any:
        data = body.scope_data()
        thread = body.thread_id or body.session_id
        if thread is None:
            raise errors.InvalidInputError("transcripts/index needs 'threadId' or 'sessionId'")
        if body.session_id is not None:
            thread_of(body.session_id, body.thread_id)
        meta = {**(body.metadata or {}),
                **{k: v for k, v in (("model", body.model), ("totalTokens", body.total_tokens)) if v is not None}}
        m = mem(key, {**data, "threadId": thread})
        return m.index_transcript(msgs(body.messages), metadata=meta)

    @r.patch("/sessions/{sessionId}/working", response_model=WorkingSession, tags=["sessions"],
             summary="Change a thread's working session")
    def working_patch(sessionId: Id, body: WorkingPatchBody, key: Tenant) -> Any:  # noqa: N803
        thread = thread_of(sessionId, body.thread_id)
        session = mem(key, {**body.scope_data(), "threadId": thread}).update_working(
            context=body.context, entities=body.entities, state=body.state, metadata=body.metadata,
            replace=body.replace)
        return working_view(thread, session)

    @r.post("/sessions/{sessionId}/compress", response_model=CompressResult, tags=["sessions"],
            summary="Summarise a thread into an archive row")
    def compress(sessionId: Id, body: CompressBody, key: Tenant) -> Any:  # noqa: N803
        thread = thread_of(sessionId, body.thread_id)
        return mem(key, {**body.scope_data(), "threadId": thread}).compress_thread(max_chars=body.max_chars)

    @r.post("/archives/{archiveId}/sync", tags=["sessions"], summary="Pin an archive to IPFS (Pinata)",
            **_tool_response("memory_archive_pin"))
    def archive_sync(archiveId: Id, body: ArchiveSyncBody, key: Tenant) -> dict[str, Any]:  # noqa: N803
        return tool(mem(key, body.scope_data()), "memory_archive_pin", archive_id=archiveId, dry_run=body.dry_run)

    @r.get("/sessions/{sessionId}/working", tags=["sessions"], summary="A thread's messages (working memory)")
    def working(sessionId: Id, q: Q, key: Tenant) -> dict[str, Any]:  # noqa: N803
        messages = mem(key, {**q.scope_data(), "threadId": sessionId}).messages()
        if not messages:
            raise errors.NotFoundError(f"session {sessionId!r} has no messages in this scope")
        return {"sessionId": sessionId, "messages": [m.model_dump(mode="json", by_alias=True) for m in messages]}

    @r.post("/evals/runs", tags=["evals"], summary="Evaluate retrieval on a labelled set")
    def eval_run(body: EvalBody, key: Tenant) -> dict[str, Any]:
        m = mem(key, body.scope_data())
        layers = tuple(body.layers) if body.layers else ("graph", "vectors")
        results: list[dict[str, Any]] = []
        hit_rate, recall, mrr = 0, 0.0, 0.0
        for case in body.test_cases:
            if not case.expected_ids and not case.expected_contents:
                raise errors.InvalidInputError("every test case needs expectedIds or expectedContents")
            hits = m.search(case.query, k=body.k, layers=layers)
            wanted = [("id", x) for x in case.expected_ids] + [("text", x.lower()) for x in case.expected_contents]
            found: set[int] = set()
            first: int | None = None
            for rank, hit in enumerate(hits, start=1):
                for i, (kind, value) in enumerate(wanted):
                    if (hit.id == value) if kind == "id" else (value in (hit.text or "").lower()):
                        found.add(i)
                        first = first or rank
            hit_rate += first is not None
            recall += len(found) / len(wanted)
            mrr += 1 / first if first else 0.0
            results.append({"query": case.query, "hit": first is not None, "recall": len(found) / len(wanted),
                            "rank": first, "retrievedIds": [h.id for h in hits]})
        n = len(results)
        return {"cases": n, "k": body.k, "hitRate": hit_rate / n, "recall": recall / n, "mrr": mrr / n,
                "results": results}

    # ------------------------------------------------------------ workflows, patterns and skills
    @r.get("/workflows", tags=["workflows"], summary="The workflow manifests")
    def workflows() -> dict[str, Any]:
        return {"workflows": list(WORKFLOWS.values())}

    @r.get("/workflows/{workflowId}", tags=["workflows"], summary="One workflow manifest")
    def workflow(workflowId: Id) -> dict[str, Any]:  # noqa: N803
        if workflowId not in WORKFLOWS:
            raise errors.NotFoundError(f"workflow {workflowId!r} does not exist; use one of {sorted(WORKFLOWS)}")
        return WORKFLOWS[workflowId]

    @r.get("/patterns", tags=["patterns"], summary="List patterns")
    def patterns(q: Q, key: Tenant, limit: Annotated[int, Query(ge=1, le=200)] = 20,
                 patternType: Literal["workflow", "decision", "response", "tool_sequence"] | None = None,  # noqa: N803
                 minSuccessRate: Annotated[float | None, Query(ge=0, le=1)] = None) -> dict[str, Any]:  # noqa: N803
        rows = mem(key, q.scope_data()).patterns(limit=limit, pattern_type=patternType, min_success_rate=minSuccessRate)
        return {"patterns": [p.model_dump(mode="json", by_alias=True) for p in rows]}

    @r.get("/patterns/{patternId}", tags=["patterns"], summary="Read a pattern")
    def pattern(patternId: Id, q: Q, key: Tenant) -> dict[str, Any]:  # noqa: N803
        return {"pattern": mem(key, q.scope_data()).artifact("pattern", patternId).model_dump(mode="json", by_alias=True)}

    @r.post("/patterns/{patternId}/validate", tags=["patterns"], summary="Validate a pattern",
            **_tool_response("memory_validate_pattern"))
    def pattern_validate(patternId: Id, body: ScopeFields, key: Tenant) -> dict[str, Any]:  # noqa: N803
        return tool(mem(key, body.scope_data()), "memory_validate_pattern", pattern_id=patternId)

    @r.post("/patterns/{patternId}/promote", tags=["patterns"], summary="Promote a pattern into a skill",
            **_tool_response("memory_promote_pattern"))
    def pattern_promote(patternId: Id, body: PromoteBody, key: Tenant) -> dict[str, Any]:  # noqa: N803
        return tool(mem(key, body.scope_data()), "memory_promote_pattern", pattern_id=patternId,
                    skill_name=body.skill_name)

    @r.get("/skills", tags=["patterns"], summary="List skills", **_tool_response("memory_list_skills"))
    def skills(q: Q, key: Tenant, category: str | None = None,
               limit: Annotated[int, Query(ge=1, le=100)] = 20) -> dict[str, Any]:
        return tool(mem(key, q.scope_data()), "memory_list_skills", category=category, limit=limit)

    @r.get("/skills/{skillId}", tags=["patterns"], summary="Read a skill", **_tool_response("memory_get_skill"))
    def skill(skillId: Id, q: Q, key: Tenant) -> dict[str, Any]:  # noqa: N803
        return tool(mem(key, q.scope_data()), "memory_get_skill", skill_id=skillId)

    # ------------------------------------------------------------ compatibility
    @r.post("/add", tags=["compatibility"], summary="Extract and store facts from messages")
    def add(body: AddBody, key: Tenant) -> dict[str, Any]:
        data = body.scope_data()
        if not data.get("threadId"):
            data["threadId"] = f"api-{now_ms()}"
        m = mem(key, data)
        turn = m.post_turn(msgs(body.messages), metadata=body.metadata, extract_facts=True)
        flushed = m.flush(30.0)
        return {"success": True, "sessionId": turn.session_id, "factsIndexed": flushed.facts_indexed,
                "factsBumped": flushed.facts_reinforced}

    @r.post("/search", tags=["compatibility"], summary="Search facts", **_tool_response("memory_search"))
    def search(body: SearchBody, key: Tenant) -> dict[str, Any]:
        return tool(mem(key, body.scope_data()), "memory_search", query=body.query, k=body.limit,
                    layers=body.layers or ["graph"])

    @r.post("/vector-search", tags=["compatibility"], summary="Search the vectors layer")
    def vector_search(body: VectorSearchBody, key: Tenant) -> dict[str, Any]:
        m = mem(key, body.scope_data())
        hits = m.search(body.query, k=body.limit, layers=("vectors",), mmr=True, rerank=m.reranker is not None)
        return {"results": [camel_keys({"text": v["text"], **v["metadata"]})
                            for v in (memory_view(c, default_trust=m.default_trust) for c in hits)],
                "degradations": hits.degradations}

    @r.post("/vector-index", tags=["compatibility"], summary="Index one row in the vectors layer")
    def vector_index(body: VectorIndexBody, key: Tenant) -> dict[str, Any]:
        ids = mem(key, body.scope_data()).add([body.content], metadatas=[body.metadata], source=body.source)
        return {"success": True, "vectorId": ids[0]}

    @r.post("/transcript-store", response_model=PostTurnResult, tags=["compatibility"], summary="Store a transcript")
    def transcript_store(body: TranscriptStoreBody, key: Tenant) -> Any:
        return mem(key, body.scope_data()).post_turn(msgs(body.messages), extract_facts=False)

    @r.get("/transcript-get/{threadId}", tags=["compatibility"], summary="Read a thread's transcript")
    def transcript_get(threadId: Id, q: Q, key: Tenant) -> dict[str, Any]:  # noqa: N803
        data = {**q.scope_data(), "threadId": threadId}
        messages = mem(key, data).messages()
        if not messages:
            raise errors.NotFoundError(f"thread {threadId!r} has no transcript in this scope")
        return {"threadId": threadId, "messages": [m.model_dump(mode="json", by_alias=True) for m in messages]}

    @r.post("/rerank", tags=["compatibility"], summary="Rerank documents")
    def rerank(body: RerankBody, key: Tenant) -> dict[str, Any]:
        reranker = engine.reranker
        if reranker is None:
            raise errors.ConfigurationError("no reranker is configured on this server")
        results = reranker.rerank(body.query, body.documents, top_k=body.top_k)
        return {"results": [{"index": x.index, "score": x.score, "document": body.documents[x.index]} for x in results]}

    @r.post("/layers/search", tags=["compatibility"], summary="Search chosen layers",
            **_tool_response("memory_search"))
    def layers_search(body: SearchBody, key: Tenant) -> dict[str, Any]:
        return tool(mem(key, body.scope_data()), "memory_search", query=body.query, k=body.limit, layers=body.layers)

    # the catch-all below must not answer for a route of this API asked with another method
    # (GET /api/memory/remember is 405, not "cannot name another agent")
    exact: dict[str, set[str]] = {}
    deeper: set[str] = set()
    for route in r.routes:
        parts = getattr(route, "path", "").split("/")[3:]
        if len(parts) == 1:
            exact.setdefault(parts[0], set()).update(getattr(route, "methods", None) or ())
        elif parts:
            deeper.add(parts[0])

    @r.get("/{agentWallet}", tags=["compatibility"], summary="List an agent's newest facts",
           **_tool_response("memory_list"))
    def list_facts(agentWallet: Id, key: Tenant, userAddress: str | None = None,  # noqa: N803
                   limit: Annotated[int, Query(ge=1, le=200)] = 50) -> dict[str, Any]:
        if agentWallet in exact:
            allowed = ", ".join(sorted(exact[agentWallet]))
            raise StarletteHTTPException(405, f"/api/memory/{agentWallet} takes {allowed}, not GET",
                                         headers={"Allow": allowed})
        if agentWallet in deeper:
            raise StarletteHTTPException(404, f"/api/memory/{agentWallet} is not a resource: see /openapi.json")
        m = mem(key, {"agentWallet": agentWallet, "userAddress": userAddress})
        return tool(m, "memory_list", limit=limit, source="fact")

    app.include_router(r)

    # ------------------------------------------------------------ operations
    @app.get("/healthz", tags=["operations"], summary="Liveness")
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz", tags=["operations"], summary="Readiness of the store, cache and embedder",
             responses={503: {"description": "A dependency is down"}})
    def readyz() -> JSONResponse:
        embedder = engine.embedder
        checks = {"store": _check(lambda: engine.store.get_memory("readyz-probe")),
                  "cache": _check(lambda: _ping_cache(engine.cache)),
                  "embedder": "none" if embedder is None else _check(
                      lambda: embedder.embed(["readyz"], input_type="query"))}
        ok = all(v in ("ok", "none") for v in checks.values())
        return JSONResponse({"status": "ok" if ok else "unavailable", "checks": checks}, status_code=200 if ok else 503)

    return app


#: where the Swagger UI and ReDoc assets are served from (the ``fastapi-offline`` package's files)
DOCS_ASSETS_PATH = "/docs-assets"


def _serve_docs(app: FastAPI) -> None:
    """``/docs`` (Swagger UI) and ``/redoc`` with their scripts and styles served by the app from the
    ``fastapi-offline`` package (a ``server`` extra), so the pages work without a network. Without
    that package the pages load them from a CDN, and the app says so in its log."""
    from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html

    try:
        from importlib.resources import files

        assets = files("fastapi_offline") / "static"
        from starlette.staticfiles import StaticFiles

        app.mount(DOCS_ASSETS_PATH, StaticFiles(directory=str(assets)), name="docs-assets")
        local = True
    except ImportError:
        log.warning("fastapi-offline is not installed: /docs and /redoc load their scripts from a CDN "
                    "(pip install \"manowar-memory[server]\" serves them locally)")
        local = False

    def urls(request: Request) -> tuple[str, str]:
        root = request.scope.get("root_path", "").rstrip("/")
        return root, f"{root}{DOCS_ASSETS_PATH}"

    @app.get("/docs", include_in_schema=False)
    async def swagger(request: Request) -> Response:
        root, base = urls(request)
        title, openapi_url, redirect = f"{app.title} - Swagger UI", f"{root}{app.openapi_url}", f"{root}/docs/oauth2-redirect"
        if not local:
            return get_swagger_ui_html(openapi_url=openapi_url, title=title, oauth2_redirect_url=redirect)
        return get_swagger_ui_html(openapi_url=openapi_url, title=title, oauth2_redirect_url=redirect,
                                   swagger_js_url=f"{base}/swagger-ui-bundle.js",
                                   swagger_css_url=f"{base}/swagger-ui.css", swagger_favicon_url=f"{base}/favicon.png")

    @app.get("/docs/oauth2-redirect", include_in_schema=False)
    async def swagger_redirect() -> Response:
        return get_swagger_ui_oauth2_redirect_html()

    @app.get("/redoc", include_in_schema=False)
    async def redoc(request: Request) -> Response:
        root, base = urls(request)
        title, openapi_url = f"{app.title} - ReDoc", f"{root}{app.openapi_url}"
        if not local:
            return get_redoc_html(openapi_url=openapi_url, title=title)
        return get_redoc_html(openapi_url=openapi_url, title=title, redoc_js_url=f"{base}/redoc.standalone.js",
                              redoc_favicon_url=f"{base}/favicon.png", with_google_fonts=False)


def uvicorn_options() -> dict[str, str]:
    """uvicorn's event loop and HTTP parser for a server: uvloop and httptools (the ``server``
    extra installs both, as ``uvicorn[standard]``), else asyncio and h11, named explicitly so
    the server can say what it runs on."""
    import importlib.util

    return {"loop": "uvloop" if importlib.util.find_spec("uvloop") else "asyncio",
            "http": "httptools" if importlib.util.find_spec("httptools") else "h11"}


def _check(fn: Callable[[], Any]) -> str:
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - reported, never raised
        return f"error: {type(exc).__name__}"
    return "ok"


def _ping_cache(cache: Any) -> None:
    client = getattr(cache, "client", None)
    if client is not None and hasattr(client, "ping"):
        client.ping()
    else:
        cache.get("readyz-probe")
