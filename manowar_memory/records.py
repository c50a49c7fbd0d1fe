"""The stored shapes: memory rows (vectors and graph facts), sessions, transcripts,
patterns, archives, skills and job records.

Attributes are snake_case; ``model_dump(by_alias=True)`` gives the reference's
camelCase field names (``agentWallet``, ``decayScore``...), which is what filters
and the MongoDB store use. Every time is integer milliseconds since the epoch.
"""

from __future__ import annotations

from typing import Any, Literal, Self, TypeVar

from pydantic import BaseModel, ConfigDict, Field, field_serializer
from pydantic.alias_generators import to_camel

from ._util import content_hash, now_ms
from .redaction import redact_value
from .scope import Scope

__all__ = [
    "FACT_TYPES",
    "LAYERS",
    "Archive",
    "FactType",
    "Job",
    "JobStatus",
    "JobType",
    "Layer",
    "MemoryRecord",
    "MemorySource",
    "Message",
    "Pattern",
    "PatternStep",
    "PatternTrigger",
    "Session",
    "Skill",
    "Transcript",
    "WorkingMemory",
]

Layer = Literal["working", "scene", "graph", "patterns", "archives", "vectors"]
LAYERS: tuple[Layer, ...] = ("working", "scene", "graph", "patterns", "archives", "vectors")
MemorySource = Literal["session", "knowledge", "pattern", "archive", "fact"]
FactType = Literal["preference", "identity", "context", "skill", "relationship", "event"]
FACT_TYPES: tuple[str, ...] = ("preference", "identity", "context", "skill", "relationship", "event")
JobType = Literal["consolidate", "patterns_extract", "archive_create", "decay_update", "cleanup", "forget", "expire",
                  "reembed"]
JobStatus = Literal["running", "completed", "failed"]
Role = Literal["user", "assistant", "system", "tool"]


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    @classmethod
    def model_construct(  # type: ignore[override]  # pydantic's signature; its mypy plugin types it per model
        cls, _fields_set: set[str] | None = None, **values: Any
    ) -> Self:
        """Pydantic's ``model_construct`` (no validation), with a fast path for the call the
        stores make for every row they read: every field given by its Python name. That call
        gets the same instance pydantic builds (the fields in declaration order, all of them
        set) without pydantic's per-field alias search, which costs several times the rest of
        reading a row. Any other call goes to pydantic."""
        names = _FAST_NAMES.get(cls)
        if names is None:
            names = _FAST_NAMES[cls] = _fast_construct_names(cls)
        if _fields_set is not None or not names or values.keys() != names:
            return super().model_construct(_fields_set, **values)
        return adopt_fields(cls, {name: values[name] for name in cls.__pydantic_fields__})

    def to_doc(self) -> dict[str, Any]:
        """Plain data with the reference's camelCase names."""
        return self.model_dump(by_alias=True)


_FAST_NAMES: dict[type[BaseModel], frozenset[str]] = {}
_M = TypeVar("_M", bound=BaseModel)


def adopt_fields(cls: type[_M], values: dict[str, Any]) -> _M:
    """An instance of ``cls`` over ``values`` (every field by name, in declaration order, all
    of them set), which it takes as its own ``__dict__`` without copying or validating: the
    fast path of :meth:`_Model.model_construct`, and the SQLite store's row cache, which copies
    its cached fields for each read."""
    m = cls.__new__(cls)
    object.__setattr__(m, "__dict__", values)
    object.__setattr__(m, "__pydantic_fields_set__", set(values))
    object.__setattr__(m, "__pydantic_extra__", None)
    object.__setattr__(m, "__pydantic_private__", None)
    return m


def _fast_construct_names(cls: type[BaseModel]) -> frozenset[str]:
    """The field names of ``cls`` when the fast ``model_construct`` path gives what pydantic's
    does (no alias equal to another field's name, no post-init, no private attributes, no
    extras allowed); an empty set otherwise."""
    fields = cls.__pydantic_fields__
    names = frozenset(fields)
    aliases = {a for f in fields.values() for a in (f.alias, f.validation_alias) if a is not None}
    for name, f in fields.items():
        if any(a in names and a != name for a in (f.alias, f.validation_alias) if isinstance(a, str)):
            return frozenset()
    if any(not isinstance(a, str) for a in aliases) or cls.__pydantic_post_init__ or cls.__private_attributes__ \
            or cls.model_config.get("extra") == "allow" or cls.__pydantic_root_model__:
        return frozenset()
    return names


class _Scoped(_Model):
    agent_wallet: str
    user_address: str | None = None
    thread_id: str | None = None
    mode: Literal["global", "local"] | None = None
    hai_id: str | None = None

    @property
    def scope_kind(self) -> str | None:
        """The reference's ``scopeKind``: the mode."""
        return self.mode

    @property
    def scope_id(self) -> str:
        """The reference's ``scopeId``: hai_id when set, else the agent."""
        return self.hai_id or self.agent_wallet

    @staticmethod
    def scope_fields(scope: Scope) -> dict[str, Any]:
        """The scope columns a record written in ``scope`` carries."""
        return {
            "agent_wallet": scope.agent_wallet,
            "user_address": scope.user_address,
            "thread_id": scope.thread_id,
            "mode": scope.mode,
            "hai_id": scope.hai_id,
        }


class MemoryRecord(_Scoped):
    """A row of the ``memory`` collection: a semantic vector row or a graph fact (``source='fact'``)."""

    id: str = Field(alias="vectorId")
    content: str
    context: str | None = Field(
        None,
        description="Text the row is found by but never shown: by default the messages it followed in its "
        "thread (see MemoryConfig.thread_context). The keyword lane indexes it at a lower weight than content.",
    )
    source: MemorySource = "knowledge"
    embedding: list[float] | None = None
    embedding_model: str | None = None
    decay_score: float = 1.0
    access_count: int = 0
    created_at: int = Field(default_factory=now_ms)
    updated_at: int = Field(default_factory=now_ms)
    last_accessed_at: int = Field(default_factory=now_ms)
    metadata: dict[str, Any] = Field(default_factory=dict)

    @staticmethod
    def make_id(agent_wallet: str, content: str, created_at: int) -> str:
        """``vec_`` + first 8 chars of the agent + ``_`` + H(content) + ``_`` + createdAt."""
        return f"vec_{agent_wallet[:8]}_{content_hash(content)}_{created_at}"

    @property
    def status(self) -> str:
        """``metadata.status`` (active when absent)."""
        return str(self.metadata.get("status") or "active")

    def to_doc(self) -> dict[str, Any]:
        doc = super().to_doc()
        doc["scopeKind"] = self.scope_kind
        doc["scopeId"] = self.scope_id
        return doc


class Message(_Model):
    """One chat message of a transcript."""

    role: Role
    content: str
    timestamp: int = Field(default_factory=now_ms)
    tool_calls: list[dict[str, Any]] | None = None


class Transcript(_Scoped):
    """A conversation session (scene layer), upserted by session id."""

    session_id: str
    messages: list[Message] = Field(default_factory=list)
    summary: str | None = None
    token_count: int = 0
    metadata: dict[str, Any] = Field(default_factory=dict)
    created_at: int = Field(default_factory=now_ms)


class WorkingMemory(_Model):
    """The working buffer of a thread: recent lines plus free-form entities and state."""

    context: list[str] = Field(default_factory=list)
    entities: dict[str, Any] = Field(default_factory=dict)
    state: dict[str, Any] = Field(default_factory=dict)


class Session(_Scoped):
    """A working-memory session of one thread, with an expiry."""

    session_id: str
    working_memory: WorkingMemory = Field(default_factory=WorkingMemory)
    metadata: dict[str, Any] = Field(default_factory=dict)
    compressed: bool = False
    created_at: int = Field(default_factory=now_ms)
    expires_at: int
    last_accessed_at: int = Field(default_factory=now_ms)


class PatternTrigger(_Model):
    """When a pattern applies."""

    type: Literal["intent", "keyword", "context", "state"] = "context"
    value: str
    conditions: dict[str, Any] | None = None


class PatternStep(_Model):
    """One step of a procedural pattern."""

    action: str
    order: int
    params: dict[str, Any] | None = None
    expected_outcome: str | None = None


class Pattern(_Scoped):
    """A procedural pattern (patterns layer), such as a repeated tool-call sequence."""

    pattern_id: str
    pattern_type: Literal["workflow", "decision", "response", "tool_sequence"] = "tool_sequence"
    trigger: PatternTrigger
    steps: list[PatternStep] = Field(default_factory=list)
    summary: str
    success_rate: float = 0.5
    execution_count: int = 0
    last_executed: int = Field(default_factory=now_ms)
    metadata: dict[str, Any] = Field(default_factory=dict)
    created_at: int = Field(default_factory=now_ms)
    updated_at: int = Field(default_factory=now_ms)


class Archive(_Scoped):
    """Compressed cold memory (archives layer)."""

    archive_id: str
    summary: str
    content: str
    compressed: bool = True
    date_range: dict[str, int]
    metadata: dict[str, Any] = Field(default_factory=dict)
    created_at: int = Field(default_factory=now_ms)
    ipfs_cid: str | None = None


class Skill(_Model):
    """A learned skill promoted from a validated pattern."""

    skill_id: str
    name: str
    description: str
    category: str = "learned"
    trigger: dict[str, Any] = Field(default_factory=dict)
    spawn_config: dict[str, Any] = Field(default_factory=dict)
    success_rate: float = 0.0
    usage_count: int = 0
    creator: str = "system"
    agents: list[str] = Field(default_factory=list)
    tags: list[str] = Field(default_factory=list)
    created_at: int = Field(default_factory=now_ms)
    updated_at: int | None = None


class Job(_Model):
    """A maintenance job record."""

    job_id: str
    type: JobType
    execution: Literal["inline", "temporal"] = "inline"
    status: JobStatus = "running"
    agent_wallet: str | None = None
    temporal_workflow_id: str | None = None
    temporal_run_id: str | None = None
    data: dict[str, Any] | None = None
    error: str | None = None
    created_at: int = Field(default_factory=now_ms)
    completed_at: int | None = None

    @field_serializer("data", "error")
    def _without_credentials(self, value: Any) -> Any:
        """A job document is never written (or shown) with a credential in it: an upstream
        that echoed a key into an error body ends up in ``error`` or a report in ``data``."""
        return redact_value(value)
