"""Memory tools for agents (``StructuredTool``, sync and async), bound to an engine and a scope.

:func:`create_manowar_tools` gives ``remember``, ``recall``, ``get_memory``,
``update_memory``, ``delete_memory`` and ``list_memories``. The model never chooses the
scope: every tool is bound to the one it was built with.

Any other engine operation becomes a tool through :func:`tools_from_callables`: plain
callables, ``(sync, async)`` pairs, :class:`ToolSpec`, or engine tool descriptions (objects
with ``name``, ``description``, ``args_schema``, ``func``, ``afunc``, as
``manowar_memory.jobs.job_tools(engine)`` returns). Scope arguments (``scope``,
``agent_wallet``, ``agent_wallets``, ``user_address``) are filled from the tool's scope and
hidden from the model; the rest of the schema is what the model fills in. This is how the
maintenance jobs join: :class:`ManowarToolkit` adds them with ``jobs=True``, and adds
whatever an ``engine.tools()`` method returns, with no change here.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from langchain_core.tools import BaseTool, BaseToolkit, StructuredTool, ToolException
from manowar_memory import Candidate, ManowarError, MemoryEngine, MemoryRecord, Scope
from manowar_memory.scope import ScopeLike
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, InstanceOf, create_model

from ._convert import coerce_scope

__all__ = [
    "BUILTIN_TOOLS",
    "SCOPE_ARGUMENTS",
    "ManowarToolkit",
    "ToolSpec",
    "create_manowar_tools",
    "tools_from_callables",
]

BUILTIN_TOOLS: tuple[str, ...] = ("remember", "recall", "get_memory", "update_memory", "delete_memory", "list_memories")
FactType = Literal["preference", "identity", "context", "skill", "relationship", "event"]


# ---------------------------------------------------------------- input schemas


class RememberInput(BaseModel):
    """Input of ``remember``."""

    content: str = Field(description="The durable fact to remember, as one standalone sentence.")
    fact_type: FactType | None = Field(None, description="Kind of fact; 'context' when unsure.")
    confidence: float | None = Field(None, ge=0, le=1, description="How sure you are (0-1).")
    importance: float | None = Field(None, ge=0, le=1, description="How much it matters later (0-1).")


class RecallInput(BaseModel):
    """Input of ``recall``."""

    query: str = Field(description="What to look for, in natural language.")
    k: int = Field(5, ge=1, le=50, description="Number of memories to return.")
    layers: list[Literal["working", "scene", "graph", "patterns", "archives", "vectors"]] | None = Field(
        None, description="Layers to search (default: graph and vectors)."
    )


class MemoryIdInput(BaseModel):
    """Input of ``get_memory``."""

    memory_id: str = Field(description="The memory id (as returned by recall or list_memories).")


class UpdateInput(BaseModel):
    """Input of ``update_memory``."""

    memory_id: str = Field(description="The memory id to change.")
    content: str | None = Field(None, description="New text (re-embedded).")
    metadata: dict[str, Any] | None = Field(None, description="Metadata keys to set (merged).")
    confidence: float | None = Field(None, ge=0, le=1, description="New confidence (0-1).")
    status: Literal["active", "superseded", "archived"] | None = Field(None, description="New status.")


class DeleteInput(BaseModel):
    """Input of ``delete_memory``."""

    memory_id: str = Field(description="The memory id to delete.")
    hard: bool = Field(False, description="Remove the row for good instead of marking it deleted.")


class ListInput(BaseModel):
    """Input of ``list_memories``."""

    limit: int = Field(20, ge=1, le=200, description="Most recent memories to list.")
    source: Literal["fact", "session", "knowledge", "pattern", "archive"] | None = Field(
        None, description="Only memories of this source (fact = durable facts)."
    )


# ---------------------------------------------------------------- formatting


def _jsonable(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", exclude={"embedding"} if isinstance(value, MemoryRecord) else None)
    if isinstance(value, Candidate):
        return {"id": value.id, "layer": value.layer, "text": value.text, "score": round(value.score, 6),
                "source": value.source, "created_at": value.created_at}
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


def format_result(value: Any) -> str:
    """A tool's return value as text for the model (strings as is, anything else as JSON)."""
    if isinstance(value, str):
        return value
    return json.dumps(_jsonable(value), ensure_ascii=False, default=str)


def _record_line(rec: MemoryRecord) -> str:
    return f"- {rec.content} (id={rec.id}, source={rec.source}, status={rec.status})"


def _candidate_line(c: Candidate) -> str:
    return f"[{c.layer.upper()}] {c.text} (id={c.id}, score={c.score:.3f})"


def _validation_message(exc: Exception) -> str:
    """The arguments the model got wrong, in one line it can act on."""
    errors = getattr(exc, "errors", None)
    if callable(errors):
        try:
            parts = [f"{'.'.join(str(p) for p in e.get('loc', ())) or 'input'}: {e.get('msg')}" for e in errors()]
            return "Invalid tool input: " + "; ".join(parts)
        except Exception:
            pass
    return f"Invalid tool input: {exc}"


def _fail_soft(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turn the engine's errors (bad input, not found) into ToolException so the model reads them."""
    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def awrapper(*args: Any, **kwargs: Any) -> Any:
            try:
                return await fn(*args, **kwargs)
            except ManowarError as exc:
                raise ToolException(str(exc)) from exc

        return awrapper

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except ManowarError as exc:
            raise ToolException(str(exc)) from exc

    return wrapper


# ---------------------------------------------------------------- built-in tools


def create_manowar_tools(
    engine: MemoryEngine,
    scope: ScopeLike,
    *,
    include: Iterable[str] | None = None,
    name_prefix: str = "",
) -> list[BaseTool]:
    """The built-in memory tools bound to ``engine`` and ``scope`` (all of :data:`BUILTIN_TOOLS`
    unless ``include`` names a subset). ``name_prefix`` prefixes every tool name."""
    sc = coerce_scope(scope)
    wanted = list(BUILTIN_TOOLS if include is None else include)
    unknown = sorted(set(wanted) - set(BUILTIN_TOOLS))
    if unknown:
        raise ValueError(f"unknown tool(s) {unknown}; choose from {list(BUILTIN_TOOLS)}")

    def remember(content: str, fact_type: str | None = None, confidence: float | None = None,
                 importance: float | None = None) -> str:
        r = engine.remember(sc, content, fact_type=fact_type, confidence=confidence, importance=importance)
        return _remember_text(r.id, r.fact_type, r.deduplicated)

    async def aremember(content: str, fact_type: str | None = None, confidence: float | None = None,
                        importance: float | None = None) -> str:
        r = await engine.aremember(sc, content, fact_type=fact_type, confidence=confidence, importance=importance)
        return _remember_text(r.id, r.fact_type, r.deduplicated)

    def recall(query: str, k: int = 5, layers: list[str] | None = None) -> tuple[str, list[dict[str, Any]]]:
        found, notes = engine.search(query, sc, layers=tuple(layers or ("graph", "vectors")), k=k)
        return _recall_output(found, notes)

    async def arecall(query: str, k: int = 5, layers: list[str] | None = None) -> tuple[str, list[dict[str, Any]]]:
        found, notes = await engine.asearch(query, sc, layers=tuple(layers or ("graph", "vectors")), k=k)
        return _recall_output(found, notes)

    def get_memory(memory_id: str) -> str:
        return format_result(engine.get_item(sc, memory_id))

    async def aget_memory(memory_id: str) -> str:
        return format_result(await engine.aget_item(sc, memory_id))

    def update_memory(memory_id: str, content: str | None = None, metadata: dict[str, Any] | None = None,
                      confidence: float | None = None, status: str | None = None) -> str:
        rec = engine.update_item(sc, memory_id, content=content, metadata=metadata, confidence=confidence,
                                 status=status)
        return f"Updated memory {rec.id}: {rec.content}"

    async def aupdate_memory(memory_id: str, content: str | None = None, metadata: dict[str, Any] | None = None,
                             confidence: float | None = None, status: str | None = None) -> str:
        rec = await engine.aupdate_item(sc, memory_id, content=content, metadata=metadata, confidence=confidence,
                                        status=status)
        return f"Updated memory {rec.id}: {rec.content}"

    def delete_memory(memory_id: str, hard: bool = False) -> str:
        engine.delete_item(sc, memory_id, hard=hard)
        return f"Deleted memory {memory_id}" + (" for good." if hard else " (kept in history as deleted).")

    async def adelete_memory(memory_id: str, hard: bool = False) -> str:
        await engine.adelete_item(sc, memory_id, hard=hard)
        return f"Deleted memory {memory_id}" + (" for good." if hard else " (kept in history as deleted).")

    def list_memories(limit: int = 20, source: str | None = None) -> tuple[str, list[dict[str, Any]]]:
        return _list_output(engine.list_items(sc, sources=[source] if source else None, limit=limit))

    async def alist_memories(limit: int = 20, source: str | None = None) -> tuple[str, list[dict[str, Any]]]:
        rows = await asyncio.to_thread(engine.list_items, sc, sources=[source] if source else None, limit=limit)
        return _list_output(rows)

    table: dict[str, tuple[Callable[..., Any], Callable[..., Awaitable[Any]], type[BaseModel], str, bool]] = {
        "remember": (remember, aremember, RememberInput,
                     "Save a durable fact about the user or the task to long-term memory "
                     "(preferences, identity, relationships, lasting context). "
                     "Saving the same fact again reinforces it.",
                     False),
        "recall": (recall, arecall, RecallInput,
                   "Search long-term memory; returns the best matching memories with their ids and scores.", True),
        "get_memory": (get_memory, aget_memory, MemoryIdInput, "Read one memory by id, with its metadata.", False),
        "update_memory": (update_memory, aupdate_memory, UpdateInput,
                          "Correct a memory by id: new text, metadata, confidence or status.", False),
        "delete_memory": (delete_memory, adelete_memory, DeleteInput,
                          "Delete a memory by id (soft by default, kept in history).", False),
        "list_memories": (list_memories, alist_memories, ListInput,
                          "List the most recent memories (optionally one source), newest first, with ids.", True),
    }
    tools: list[BaseTool] = []
    for name in wanted:
        func, coro, schema, description, with_artifact = table[name]
        tools.append(StructuredTool.from_function(
            func=_fail_soft(func), coroutine=_fail_soft(coro), name=name_prefix + name, description=description,
            args_schema=schema, handle_tool_error=True, handle_validation_error=_validation_message,
            response_format="content_and_artifact" if with_artifact else "content",
        ))
    return tools


def _remember_text(memory_id: str, fact_type: str, deduplicated: bool) -> str:
    if deduplicated:
        return f"Already remembered; reinforced memory {memory_id} ({fact_type})."
    return f"Remembered as memory {memory_id} ({fact_type})."


def _recall_output(found: Sequence[Candidate], notes: Sequence[str]) -> tuple[str, list[dict[str, Any]]]:
    text = "\n".join(_candidate_line(c) for c in found) if found else "No matching memories."
    if notes:
        text += "\n(" + "; ".join(notes) + ")"
    return text, [_jsonable(c) for c in found]


def _list_output(rows: Sequence[MemoryRecord]) -> tuple[str, list[dict[str, Any]]]:
    text = "\n".join(_record_line(r) for r in rows) if rows else "No memories yet."
    return text, [_jsonable(r) for r in rows]


# ---------------------------------------------------------------- any engine callable as a tool


SCOPE_ARGUMENTS: dict[str, Callable[[Scope], Any]] = {
    "scope": lambda s: s,
    "agent_wallet": lambda s: s.agent_wallet,
    "agent_wallets": lambda s: [s.agent_wallet],
    "user_address": lambda s: s.user_address,
}
"""Arguments a tool never takes from the model: they come from the tool's scope."""


@dataclass(frozen=True)
class ToolSpec:
    """An engine operation to expose as a tool.

    ``func`` (sync) and/or ``coroutine`` (async); the name defaults to the function's
    name and the description to its docstring's first paragraph; the input schema is
    ``args_schema`` or else the signature. Arguments named in :data:`SCOPE_ARGUMENTS`
    (``scope``, ``agent_wallet``, ``agent_wallets``, ``user_address``) are filled from the
    tool's scope and hidden from the model.
    """

    func: Callable[..., Any] | None = None
    coroutine: Callable[..., Awaitable[Any]] | None = None
    name: str | None = None
    description: str | None = None
    args_schema: type[BaseModel] | None = None

    def __post_init__(self) -> None:
        if self.func is None and self.coroutine is None:
            raise ValueError("a ToolSpec needs func, coroutine or both")


def _model_name(name: str) -> str:
    return "".join(part.capitalize() for part in name.replace("-", "_").split("_")) + "Input"


def _signature_fields(fn: Callable[..., Any]) -> dict[str, tuple[Any, Any]]:
    try:
        signature = inspect.signature(fn, eval_str=True)  # resolve `from __future__ import annotations`
    except Exception:  # an annotation that cannot be evaluated: fall back to the raw one
        signature = inspect.signature(fn)
    fields: dict[str, tuple[Any, Any]] = {}
    for param in signature.parameters.values():
        if param.name == "self" or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        annotation = param.annotation if param.annotation is not inspect.Parameter.empty else Any
        if isinstance(annotation, str):
            annotation = Any
        fields[param.name] = (annotation, param.default if param.default is not inspect.Parameter.empty else ...)
    return fields


def _input_schema(name: str, spec: ToolSpec) -> tuple[type[BaseModel], set[str]]:
    """The schema the model sees (scope arguments removed) and the scope arguments to fill in."""
    if spec.args_schema is not None:
        all_fields: dict[str, Any] = {
            k: (f.annotation, f) for k, f in spec.args_schema.model_fields.items()
        }
        doc = spec.args_schema.__doc__
    else:
        ref = spec.func or spec.coroutine
        assert ref is not None
        all_fields = _signature_fields(ref)
        doc = None
    bound = {k for k in all_fields if k in SCOPE_ARGUMENTS}
    exposed = {k: v for k, v in all_fields.items() if k not in bound}
    schema = create_model(
        _model_name(name), __config__=ConfigDict(arbitrary_types_allowed=True), __doc__=doc, **exposed,
    )
    return schema, bound


def _as_spec(item: Any, name: str | None = None) -> ToolSpec:
    if isinstance(item, ToolSpec):
        if name is None or item.name:
            return item
        return ToolSpec(item.func, item.coroutine, name, item.description, item.args_schema)
    if isinstance(item, BaseTool):
        raise TypeError("already a tool; pass it to the agent directly")
    if isinstance(item, tuple) and len(item) == 2:
        return ToolSpec(func=item[0], coroutine=item[1], name=name)
    if not callable(item) and callable(getattr(item, "func", None)):
        # a tool description from the engine (e.g. manowar_memory.jobs.JobTool): name, description,
        # args_schema, func and afunc / coroutine
        return ToolSpec(
            func=item.func, coroutine=getattr(item, "afunc", None) or getattr(item, "coroutine", None),
            name=name or getattr(item, "name", None), description=getattr(item, "description", None),
            args_schema=getattr(item, "args_schema", None),
        )
    if callable(item):
        if inspect.iscoroutinefunction(item):
            return ToolSpec(coroutine=item, name=name)
        return ToolSpec(func=item, name=name)
    raise TypeError(
        f"cannot make a tool from {type(item).__name__}; pass a callable, a (sync, async) pair, a ToolSpec "
        "or an object with name, description, args_schema and func"
    )


def tools_from_callables(
    callables: Iterable[Any] | Mapping[str, Any],
    scope: ScopeLike,
    *,
    name_prefix: str = "",
) -> list[BaseTool]:
    """Tools from engine operations, bound to ``scope``.

    Each item is a callable, a ``(sync, async)`` pair, a :class:`ToolSpec`, or an object
    with ``name``, ``description``, ``args_schema``, ``func`` and ``afunc`` (what
    ``manowar_memory.jobs.job_tools(engine)`` returns); a ``{name: item}`` mapping names
    them. Scope arguments (:data:`SCOPE_ARGUMENTS`) are filled from ``scope`` and hidden
    from the model; results are shown to the model as text (JSON for structured values);
    the engine's errors become tool errors the model can read.
    """
    sc = coerce_scope(scope)
    items = list(callables.items()) if isinstance(callables, Mapping) else [(None, c) for c in callables]
    tools: list[BaseTool] = []
    for key, item in items:
        spec = _as_spec(item, key)
        ref = spec.func or spec.coroutine
        assert ref is not None
        name = spec.name or getattr(ref, "__name__", None) or "engine_tool"
        doc = inspect.getdoc(ref) or ""
        description = spec.description or doc.split("\n\n")[0].strip() or f"Run the memory engine's {name}."
        schema, bound = _input_schema(name, spec)
        func, coro = _runners(spec, {k: SCOPE_ARGUMENTS[k](sc) for k in bound})
        tools.append(StructuredTool(
            name=name_prefix + name, description=description, args_schema=schema, func=_fail_soft(func),
            coroutine=_fail_soft(coro), handle_tool_error=True, handle_validation_error=_validation_message,
        ))
    return tools


def _runners(spec: ToolSpec, bound: dict[str, Any]) -> tuple[Callable[..., str], Callable[..., Awaitable[str]]]:
    """The sync and async functions of a tool: the scope arguments added, the result as text;
    a missing side runs the other (sync in a worker thread, async on its own event loop)."""
    sync_fn, async_fn = spec.func, spec.coroutine

    def run(**kwargs: Any) -> str:
        if sync_fn is not None:
            return format_result(sync_fn(**{**kwargs, **bound}))
        return _run_sync(arun(**kwargs))

    async def arun(**kwargs: Any) -> str:
        if async_fn is not None:
            return format_result(await async_fn(**{**kwargs, **bound}))
        return await asyncio.to_thread(functools.partial(run, **kwargs))

    return run, arun


def _run_sync(awaitable: Awaitable[str]) -> str:
    """Run a coroutine from sync code, in a worker thread when a loop is already running."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(awaitable)  # type: ignore[arg-type]
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, awaitable).result()  # type: ignore[arg-type]


# ---------------------------------------------------------------- toolkit


def _job_tools(engine: MemoryEngine, jobs: bool | Sequence[str]) -> list[Any]:
    try:
        from manowar_memory.jobs import job_tools
    except ImportError as exc:
        raise ValueError(f"this manowar-memory has no maintenance jobs (manowar_memory.jobs): {exc}") from exc
    available = list(job_tools(engine))
    if jobs is True:
        # only jobs that can be confined to the toolkit's agent; the others act on every agent
        return [t for t in available if set(getattr(t.args_schema, "model_fields", {})) & set(SCOPE_ARGUMENTS)]
    wanted = list(jobs) if not isinstance(jobs, bool) else []
    names = {t.name: t for t in available}
    unknown = sorted(set(wanted) - set(names))
    if unknown:
        raise ValueError(f"unknown job tool(s) {unknown}; the engine offers {sorted(names)}")
    return [names[n] for n in wanted]


class ManowarToolkit(BaseToolkit):
    """All memory tools of an engine for one scope.

    The built-in tools (``include`` narrows them); then ``extra`` engine operations (see
    :func:`tools_from_callables`); then the maintenance jobs when ``jobs`` is set
    (``manowar_memory.jobs.job_tools``: ``True`` gives the jobs that can be confined to the
    scope's agent (consolidate, patterns_extract, archive_create, decay_update,
    list_skills), a list of names picks any, including the global ones such as
    ``memory_cleanup``); then, when the engine has a ``tools()`` method, everything it
    returns. Scope arguments of all of them are filled from ``scope``.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    engine: InstanceOf[MemoryEngine]
    scope: Annotated[InstanceOf[Scope], BeforeValidator(coerce_scope)]
    include: Sequence[str] | None = None
    extra: Sequence[Any] | Mapping[str, Any] = ()
    jobs: bool | Sequence[str] = False
    """Add the engine's maintenance-job tools (see the class docstring)."""
    engine_tools: bool = True
    """Add the engine's own ``tools()`` (when it has them)."""
    name_prefix: str = ""

    def get_tools(self) -> list[BaseTool]:
        """The tools, bound to this toolkit's engine and scope."""
        tools = create_manowar_tools(self.engine, self.scope, include=self.include, name_prefix=self.name_prefix)
        if self.extra:
            tools += tools_from_callables(self.extra, self.scope, name_prefix=self.name_prefix)
        if self.jobs:
            tools += tools_from_callables(_job_tools(self.engine, self.jobs), self.scope, name_prefix=self.name_prefix)
        provider = getattr(self.engine, "tools", None)
        if self.engine_tools and callable(provider):
            tools += tools_from_callables(provider(), self.scope, name_prefix=self.name_prefix)
        names = [t.name for t in tools]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"two tools share the name(s) {dupes}; rename one with ToolSpec(name=...)")
        return tools
