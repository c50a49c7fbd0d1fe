"""The REST API's request and response bodies: camelCase on the wire, snake_case accepted in
requests, every request body refusing unknown fields (a typo is a 400, not a silent no-op)."""

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from .. import errors
from ..engine import PostTurnResult, PreTurnResult
from ..jobs.schedules import ScheduleInfo
from ..records import Job

__all__ = ["AddBody", "ArchiveSyncBody", "AssembleBody", "CompressBody", "CompressResult", "EvalBody", "EvalCase",
           "FactType", "ForgetBody", "ItemPatchBody", "JobBody", "LayerName", "LoopBody", "LoopResult", "MessageIn",
           "PromoteBody", "RecordBody", "RememberBody", "RerankBody", "ResolveBody", "ScheduleCreateBody",
           "ScheduleDeleted", "ScheduleJobType", "ScheduleList", "ScheduleNoteBody", "ScheduleTriggered", "ScopeFields",
           "ScopeQuery", "SearchBody", "Source", "TranscriptIndexBody", "TranscriptIndexResult", "TranscriptStoreBody",
           "VectorIndexBody", "VectorSearchBody", "WorkingPatchBody", "WorkingSession", "both_scopes", "message_dicts"]

LayerName = Literal["working", "scene", "graph", "patterns", "archives", "vectors"]
FactType = Literal["preference", "identity", "context", "skill", "relationship", "event"]
Source = Literal["fact", "session", "knowledge", "pattern", "archive"]


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


def message_dicts(items: Sequence[MessageIn]) -> list[dict[str, Any]]:
    """The messages of a body as the engine takes them (unset optional fields left out)."""
    return [m.model_dump(exclude_none=True) for m in items]


def both_scopes(body: Mapping[str, Any], query: Mapping[str, Any]) -> dict[str, Any]:
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
