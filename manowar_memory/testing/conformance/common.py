"""What the role suites share: the test data (scope corpus, records, sessions, transcripts,
patterns) and :class:`_RoleConformance`, the ``store`` fixture every suite overrides."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any

from ..._util import DAY_MS, now_ms
from ...filters import normalize_filters
from ...records import (
    MemoryRecord,
    Message,
    Pattern,
    PatternStep,
    PatternTrigger,
    Session,
    Transcript,
    WorkingMemory,
)
from ...scope import Scope
from ...stores.base import MemoryQuery, Store

try:
    import pytest
except ImportError as exc:  # pragma: no cover - only without the dev extra
    from ...errors import MissingDependencyError

    raise MissingDependencyError("pytest", "dev", "The store conformance suite") from exc


__all__ = ["AGENT", "MODEL", "OTHER_AGENT", "OTHER_MODEL", "SCOPE_CASES", "T0", "make_record", "unit_vector"]

AGENT = "agent-A"


OTHER_AGENT = "agent-B"


MODEL = "conformance:4"


OTHER_MODEL = "conformance-other:4"


T0 = 1_700_000_000_000  # fixed creation times keep orderings deterministic


def unit_vector(*values: float) -> list[float]:
    """A normalised vector (the suite uses 4 dimensions)."""
    norm = math.sqrt(sum(v * v for v in values)) or 1.0
    return [v / norm for v in values]


def make_record(
    content: str,
    *,
    agent: str = AGENT,
    user: str | None = None,
    thread: str | None = None,
    mode: str | None = None,
    hai: str | None = None,
    source: str = "knowledge",
    created_at: int = T0,
    metadata: dict[str, Any] | None = None,
    embedding: Sequence[float] | None = (1.0, 0.0, 0.0, 0.0),
    model: str | None = MODEL,
    record_id: str | None = None,
) -> MemoryRecord:
    """A memory row with the suite's defaults (agent A, no user, a 4-d embedding of MODEL)."""
    return MemoryRecord(
        id=record_id or MemoryRecord.make_id(agent, content, created_at),
        agent_wallet=agent, user_address=user, thread_id=thread, mode=mode, hai_id=hai,  # type: ignore[arg-type]
        content=content, source=source, embedding=list(embedding) if embedding is not None else None,  # type: ignore[arg-type]
        embedding_model=model if embedding is not None else None, created_at=created_at, updated_at=created_at,
        last_accessed_at=created_at, metadata=metadata or {},
    )


def _q(agent: str = AGENT, user: str | None = None, thread: str | None = None, mode: str | None = None,
       hai: str | None = None, *, filters: dict[str, Any] | None = None, durable: bool = True,
       sources: tuple[str, ...] | None = None, exclude_sources: tuple[str, ...] = (),
       active_only: bool = True) -> MemoryQuery:
    scope = Scope(agent_wallet=agent, user_address=user, thread_id=thread, mode=mode, hai_id=hai)  # type: ignore[arg-type]
    return MemoryQuery(scope=scope, filters=normalize_filters(filters), durable=durable, sources=sources,
                       exclude_sources=exclude_sources, active_only=active_only)


# The scope corpus: name -> record kwargs. Every row says "zebra" (keyword lane) and has an
# embedding of MODEL (vector lane), so all read paths can be checked against one expectation.
_SCOPE_ROWS: dict[str, dict[str, Any]] = {
    "shared": {},
    "u1": {"user": "u1"},
    "u2": {"user": "u2"},
    "other_agent": {"agent": OTHER_AGENT},
    "u1_t1": {"user": "u1", "thread": "t1"},
    "u1_t2": {"user": "u1", "thread": "t2"},
    "global": {"mode": "global"},
    "local_h1": {"mode": "local", "hai": "h1"},
    "local_h2": {"mode": "local", "hai": "h2"},
    "u1_deleted": {"user": "u1", "metadata": {"status": "deleted"}},
    "u1_superseded": {"user": "u1", "metadata": {"status": "superseded"}},
    "u1_archived": {"user": "u1", "metadata": {"status": "archived"}},
    "u1_fact": {"user": "u1", "source": "fact", "metadata": {"factHash": "h-fact"}},
    "u1_app": {"user": "u1", "metadata": {"app_id": "app-x", "tags": {"lang": "py"}, "rank": 3, "flag": True}},
}


_WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet",
          "kilo", "lima", "mike", "november"]


_U1_DURABLE = {"shared", "u1", "u1_t1", "u1_t2", "global", "local_h1", "local_h2", "u1_archived", "u1_fact", "u1_app"}


_NO_USER = {"shared", "global", "local_h1", "local_h2"}


SCOPE_CASES: list[tuple[str, dict[str, Any], set[str]]] = [
    ("no user: only user-less rows", {}, _NO_USER),
    ("user: own rows plus user-less rows", {"user": "u1"}, _U1_DURABLE),
    ("other user", {"user": "u2"}, {"u2"} | _NO_USER),
    ("durable read ignores the thread", {"user": "u1", "thread": "t1"}, _U1_DURABLE),
    ("non-durable read narrows to the thread", {"user": "u1", "thread": "t1", "durable": False}, {"u1_t1"}),
    ("non-durable read without a thread", {"user": "u1", "durable": False}, _U1_DURABLE),
    ("mode", {"mode": "global"}, {"global"}),
    ("mode and hai", {"mode": "local", "hai": "h1"}, {"local_h1"}),
    ("hai without mode", {"hai": "h2"}, {"local_h2"}),
    ("other agent", {"agent": OTHER_AGENT}, {"other_agent"}),
    ("unknown agent", {"agent": "agent-nobody", "user": "u1"}, set()),
    ("active_only=False shows deleted and superseded", {"user": "u1", "active_only": False},
     _U1_DURABLE | {"u1_deleted", "u1_superseded"}),
    ("metadata equality", {"user": "u1", "filters": {"metadata.app_id": "app-x"}}, {"u1_app"}),
    ("alias appId", {"user": "u1", "filters": {"appId": "app-x"}}, {"u1_app"}),
    ("metadata list", {"user": "u1", "filters": {"metadata.app_id": ["app-y", "app-x"]}}, {"u1_app"}),
    ("metadata null matches missing", {"user": "u1", "filters": {"metadata.app_id": None}}, _U1_DURABLE - {"u1_app"}),
    ("list with null", {"user": "u1", "filters": {"metadata.app_id": ["app-x", None]}}, _U1_DURABLE),
    ("nested metadata path", {"user": "u1", "filters": {"metadata.tags.lang": "py"}}, {"u1_app"}),
    ("numeric metadata", {"user": "u1", "filters": {"metadata.rank": 3}}, {"u1_app"}),
    ("numeric metadata, float form", {"user": "u1", "filters": {"metadata.rank": 3.0}}, {"u1_app"}),
    ("no match", {"user": "u1", "filters": {"metadata.app_id": "app-none"}}, set()),
    ("a string never equals a number", {"user": "u1", "filters": {"metadata.rank": "3"}}, set()),
    ("boolean", {"user": "u1", "filters": {"metadata.flag": True}}, {"u1_app"}),
    ("true never equals 1", {"user": "u1", "filters": {"metadata.flag": 1}}, set()),
    ("a number never equals true", {"user": "u1", "filters": {"metadata.rank": True}}, set()),
    ("status filter on top of active_only", {"user": "u1", "filters": {"metadata.status": "archived"}},
     {"u1_archived"}),
    ("status filter cannot resurrect deleted rows", {"user": "u1", "filters": {"metadata.status": "deleted"}}, set()),
    ("source filter", {"user": "u1", "filters": {"source": "fact"}}, {"u1_fact"}),
    ("sources", {"user": "u1", "sources": ("fact",)}, {"u1_fact"}),
    ("exclude_sources", {"user": "u1", "exclude_sources": ("fact",)}, _U1_DURABLE - {"u1_fact"}),
    ("userAddress filter narrows to own rows", {"user": "u1", "filters": {"userAddress": "u1"}},
     {"u1", "u1_t1", "u1_t2", "u1_archived", "u1_fact", "u1_app"}),
    ("threadId filter on a durable read", {"user": "u1", "filters": {"threadId": "t2"}}, {"u1_t2"}),
    ("scopeKind filter", {"filters": {"scopeKind": "local"}}, {"local_h1", "local_h2"}),
    ("scopeId is the hai", {"filters": {"scopeId": "h1"}}, {"local_h1"}),
    ("scopeId is the agent without a hai", {"filters": {"scopeId": AGENT}}, {"shared", "global"}),
    ("agentWallet filter equal to the scope", {"user": "u1", "filters": {"agentWallet": AGENT}}, _U1_DURABLE),
    ("agentWallet filter cannot widen the scope", {"user": "u1", "filters": {"agentWallet": OTHER_AGENT}}, set()),
]


class _RoleConformance:
    """The fixture and helpers the role suites share. Override only the ``store`` fixture."""

    @pytest.fixture
    def store(self) -> Iterator[Store]:
        """An empty store; closed after the test. Subclasses must override this."""
        raise NotImplementedError("override the `store` fixture to yield an empty store")

    # ------------------------------------------------------------------ helpers
    @staticmethod
    def _load_scope_corpus(store: Store) -> dict[str, str]:
        records = []
        for i, (name, kw) in enumerate(_SCOPE_ROWS.items()):
            angle = i * 0.2
            records.append(
                make_record(f"zebra {_WORDS[i]} row {name}", created_at=T0 + i * 1000,
                            embedding=unit_vector(math.cos(angle), math.sin(angle), 0.1, 0.0), **kw)
            )
        ids = store.add_memories(records)
        return dict(zip(_SCOPE_ROWS, ids))

    @staticmethod
    def _names(ids: dict[str, str], found: Sequence[str]) -> set[str]:
        by_id = {v: k for k, v in ids.items()}
        return {by_id.get(i, f"?{i}") for i in found}

    @staticmethod
    def _session(sid: str, *, agent: str = AGENT, user: str | None = None, thread: str | None = None,
                 mode: str | None = None, hai: str | None = None, expires_in: int = DAY_MS,
                 last: int | None = None, context: list[str] | None = None,
                 metadata: dict[str, Any] | None = None, state: dict[str, Any] | None = None) -> Session:
        now = now_ms()
        return Session(
            session_id=sid, agent_wallet=agent, user_address=user, thread_id=thread, mode=mode, hai_id=hai,  # type: ignore[arg-type]
            working_memory=WorkingMemory(context=context or ["user: hello"], entities={"city": "Lisbon"},
                                         state=state or {}),
            metadata=metadata or {}, created_at=now - 1000, expires_at=now + expires_in,
            last_accessed_at=last if last is not None else now,
        )

    @staticmethod
    def _transcript(sid: str, *, user: str | None = "u1", thread: str | None = "t1", summary: str | None = None,
                    messages: list[tuple[str, str]] | None = None, created_at: int = T0,
                    agent: str = AGENT, metadata: dict[str, Any] | None = None) -> Transcript:
        msgs = [Message(role=r, content=c, timestamp=created_at + i,  # type: ignore[arg-type]
                        tool_calls=[{"name": "search", "args": {"q": c}}] if r == "tool" else None)
                for i, (r, c) in enumerate(messages or [("user", "hello there"), ("assistant", "hi")])]
        return Transcript(session_id=sid, agent_wallet=agent, user_address=user, thread_id=thread, messages=msgs,
                          summary=summary, token_count=42, metadata=metadata or {"modelUsed": "m"},
                          created_at=created_at)

    @staticmethod
    def _pattern(pid: str, rate: float, *, agent: str = AGENT, user: str | None = None, created_at: int = T0,
                 summary: str = "search then book", mode: str | None = None, hai: str | None = None,
                 metadata: dict[str, Any] | None = None) -> Pattern:
        return Pattern(pattern_id=pid, agent_wallet=agent, user_address=user, mode=mode, hai_id=hai,  # type: ignore[arg-type]
                       trigger=PatternTrigger(type="intent", value="book travel"),
                       steps=[PatternStep(action="search", order=0), PatternStep(action="book", order=1,
                                                                                 params={"x": 1})],
                       summary=summary, success_rate=rate, execution_count=3, last_executed=created_at,
                       metadata=metadata or {}, created_at=created_at, updated_at=created_at)
