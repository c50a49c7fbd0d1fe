"""The conformance suite every :class:`~manowar_memory.stores.base.Store` must pass unchanged.

Subclass :class:`StoreConformance` in a pytest module and override the ``store`` fixture so it
yields an **empty** store (and closes it afterwards)::

    import pytest
    from manowar_memory import SQLiteStore
    from manowar_memory.testing import StoreConformance

    class TestMyStore(StoreConformance):
        @pytest.fixture
        def store(self):
            s = SQLiteStore(":memory:")
            yield s
            s.close()

Do not override the tests: ``test_no_overrides_DO_NOT_OVERRIDE`` fails if a subclass does
(a store that needs a different answer does not conform). The suite covers every method of
the protocol and the scope rules shared by all read paths: agent exact; a user sees their
rows and the agent's user-less rows, no user sees only user-less rows; the thread narrows only
non-durable reads; mode and hai when set; ``active_only`` hides deleted and superseded rows;
allowlisted filters (equality, lists, null, nested ``metadata.*`` paths); sources.

``StoreConformance`` is the union of one class per role of :mod:`manowar_memory.stores.base`:
:class:`MemoryRowsConformance`, :class:`ThreadsConformance`, :class:`ArtifactsConformance`,
:class:`CacheFencesConformance`, :class:`MaintenanceConformance` (what the jobs call) and
:class:`SchedulesConformance` (compare-and-set). A store must pass all of them; while you
build one, subclass a single role class the same way to check that role alone.

Needs pytest (``pip install "manowar-memory[dev]"``).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

try:
    import pytest
except ImportError as exc:  # pragma: no cover - only without the dev extra
    from ..errors import MissingDependencyError

    raise MissingDependencyError("pytest", "dev", "The store conformance suite") from exc

from .._util import DAY_MS, now_ms
from ..errors import ConflictError, StoreError
from ..filters import normalize_filters
from ..records import (
    Archive,
    Job,
    MemoryRecord,
    Message,
    Pattern,
    PatternStep,
    PatternTrigger,
    Session,
    Skill,
    Transcript,
    WorkingMemory,
)
from ..scope import Scope
from ..stores.base import MemoryQuery, Store, TurnBuilder, TurnRows

__all__ = [
    "ArtifactsConformance",
    "CacheFencesConformance",
    "MaintenanceConformance",
    "MemoryRowsConformance",
    "SchedulesConformance",
    "StoreConformance",
    "ThreadsConformance",
    "make_record",
    "unit_vector",
]

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



class MemoryRowsConformance(_RoleConformance):
    """The :class:`~manowar_memory.stores.base.MemoryRowStore` role: rows, facts, both lanes."""

    # ------------------------------------------------------------------ memory rows
    def test_add_and_get_round_trip(self, store: Store) -> None:
        meta = {"type": "note", "nested": {"a": [1, 2.5, "x", None, True]}, "unicode": "café ✓", "n": 7}
        rec = make_record("The user lives in Lisbon.", user="u1", thread="t1", mode="local", hai="h1",
                          source="fact", metadata=meta, embedding=[0.1, 0.2, 0.3, 0.4])
        rec = rec.model_copy(update={"decay_score": 0.75, "access_count": 3, "updated_at": T0 + 5,
                                     "last_accessed_at": T0 + 9})
        (rid,) = store.add_memories([rec])
        assert rid == rec.id
        got = store.get_memory(rid)
        assert got is not None
        for attr in ("id", "agent_wallet", "user_address", "thread_id", "mode", "hai_id", "content", "source",
                     "decay_score", "access_count", "created_at", "updated_at", "last_accessed_at", "metadata",
                     "embedding_model"):
            assert getattr(got, attr) == getattr(rec, attr), attr
        assert got.embedding == pytest.approx([0.1, 0.2, 0.3, 0.4], abs=1e-6)

    def test_add_returns_ids_in_order(self, store: Store) -> None:
        recs = [make_record(f"row number {i}", created_at=T0 + i) for i in range(5)]
        assert store.add_memories(recs) == [r.id for r in recs]
        assert store.add_memories([]) == []

    def test_colliding_id_gets_a_suffix(self, store: Store) -> None:
        first = make_record("same id one", record_id="vec_same")
        second = make_record("same id two", record_id="vec_same")
        third = make_record("same id three", record_id="vec_same")
        ids = store.add_memories([first, second]) + store.add_memories([third])
        assert ids[0] == "vec_same"
        assert len(set(ids)) == 3 and all(i.startswith("vec_same") for i in ids)
        assert [store.get_memory(i).content for i in ids] == ["same id one", "same id two", "same id three"]  # type: ignore[union-attr]

    def test_row_without_embedding(self, store: Store) -> None:
        (rid,) = store.add_memories([make_record("no vector here", embedding=None)])
        got = store.get_memory(rid)
        assert got is not None and got.embedding is None and got.embedding_model is None
        hits, _ = store.vector_search(_q(), [1.0, 0.0, 0.0, 0.0], MODEL, 10)
        assert hits == []
        assert [h.record.id for h in store.keyword_search(_q(), "vector", 5)] == [rid]

    def test_get_memory_with_a_query_enforces_scope_filters_and_status(self, store: Store) -> None:
        (rid,) = store.add_memories([make_record("scoped row", user="u1", metadata={"app_id": "x"})])
        (gone,) = store.add_memories([make_record("gone row", user="u1", metadata={"status": "deleted"})])
        assert store.get_memory(rid, _q(user="u1")) is not None
        assert store.get_memory(rid, _q(user="u2")) is None
        assert store.get_memory(rid, _q()) is None
        assert store.get_memory(rid, _q(agent=OTHER_AGENT, user="u1")) is None
        assert store.get_memory(rid, _q(user="u1", filters={"appId": "x"})) is not None
        assert store.get_memory(rid, _q(user="u1", filters={"appId": "y"})) is None
        assert store.get_memory(gone, _q(user="u1")) is None
        assert store.get_memory(gone, _q(user="u1", active_only=False)) is not None
        assert store.get_memory(gone) is not None  # no query: any row by id

    def test_update_memory(self, store: Store) -> None:
        (rid,) = store.add_memories([make_record("original text about kayaks", user="u1")])
        updated = store.update_memory(rid, {
            "content": "rewritten text about canoes", "metadata": {"status": "archived", "k": 1},
            "decay_score": 0.5, "access_count": 4, "updated_at": T0 + 100, "last_accessed_at": T0 + 200,
            "user_address": "u2", "thread_id": "t9", "created_at": T0 + 50, "source": "session",
        })
        assert updated is not None and updated.id == rid
        got = store.get_memory(rid)
        assert got == updated
        assert (got.content, got.metadata, got.decay_score, got.access_count, got.updated_at, got.last_accessed_at,
                got.user_address, got.thread_id, got.created_at, got.source) == (
            "rewritten text about canoes", {"status": "archived", "k": 1}, 0.5, 4, T0 + 100, T0 + 200, "u2", "t9",
            T0 + 50, "session")
        assert store.keyword_search(_q(user="u2"), "kayaks", 5) == []
        assert [h.record.id for h in store.keyword_search(_q(user="u2"), "canoes", 5)] == [rid]
        assert store.list_memories(_q(user="u1")) == []  # moved to u2

    def test_update_memory_status_hides_the_row(self, store: Store) -> None:
        (rid,) = store.add_memories([make_record("soon superseded", user="u1")])
        store.update_memory(rid, {"metadata": {"status": "superseded"}})
        assert store.list_memories(_q(user="u1")) == []
        assert store.keyword_search(_q(user="u1"), "superseded", 5) == []
        assert store.vector_search(_q(user="u1"), [1.0, 0.0, 0.0, 0.0], MODEL, 5)[0] == []
        assert store.count_memories(_q(user="u1", active_only=False)) == 1

    def test_update_memory_embedding_changes_vector_results(self, store: Store) -> None:
        a, b = store.add_memories([
            make_record("row a", embedding=[1.0, 0.0, 0.0, 0.0], created_at=T0),
            make_record("row b", embedding=[0.0, 1.0, 0.0, 0.0], created_at=T0 + 1),
        ])
        q = [1.0, 0.0, 0.0, 0.0]
        assert store.vector_search(_q(), q, MODEL, 2)[0][0].record.id == a
        store.update_memory(b, {"embedding": [1.0, 0.0, 0.0, 0.0]})
        store.update_memory(a, {"embedding": [0.0, 0.0, 1.0, 0.0]})
        hits, _ = store.vector_search(_q(), q, MODEL, 2)
        assert [h.record.id for h in hits] == [b, a]
        store.update_memory(b, {"embedding": [0.5, 0.5, 0.5, 0.5], "embedding_model": OTHER_MODEL})
        assert [h.record.id for h in store.vector_search(_q(), q, MODEL, 2)[0]] == [a]
        assert [h.record.id for h in store.vector_search(_q(), q, OTHER_MODEL, 2)[0]] == [b]

    def test_removing_an_embedding_removes_its_model_and_the_vector_hit(self, store: Store) -> None:
        kept, cleared = store.add_memories([make_record("kept row", created_at=T0),
                                            make_record("cleared row", created_at=T0 + 1)])
        assert {h.record.id for h in store.vector_search(_q(), unit_vector(1, 0, 0, 0), MODEL, 10)[0]} == {
            kept, cleared}
        store.update_memory(cleared, {"embedding": None})
        row = store.get_memory(cleared)
        assert row is not None and row.embedding is None and row.embedding_model is None
        for _ in range(2):  # and stays gone on the next search (a cache must not reload or resurrect it)
            assert [h.record.id for h in store.vector_search(_q(), unit_vector(1, 0, 0, 0), MODEL, 10)[0]] == [kept]

    def test_update_memory_rejects_unknown_fields_and_missing_rows(self, store: Store) -> None:
        (rid,) = store.add_memories([make_record("a row")])
        with pytest.raises(StoreError):
            store.update_memory(rid, {"agent_wallet": "someone-else"})
        with pytest.raises(StoreError):
            store.update_memory(rid, {"vectorId": "x"})
        assert store.update_memory("vec_missing", {"content": "x"}) is None
        assert store.update_memory(rid, {}) == store.get_memory(rid)

    def test_delete_memory(self, store: Store) -> None:
        keep, drop = store.add_memories([make_record("keep this walrus", created_at=T0),
                                         make_record("drop this walrus", created_at=T0 + 1)])
        assert store.delete_memory(drop) is True
        assert store.delete_memory(drop) is False
        assert store.delete_memory("vec_never") is False
        assert store.get_memory(drop) is None and store.get_memory(keep) is not None
        assert [r.id for r in store.list_memories(_q())] == [keep]
        assert store.count_memories(_q(active_only=False)) == 1
        assert [h.record.id for h in store.keyword_search(_q(), "walrus", 5)] == [keep]
        assert [h.record.id for h in store.vector_search(_q(), [1.0, 0.0, 0.0, 0.0], MODEL, 5)[0]] == [keep]
        assert [r.id for r in store.iter_memories()] == [keep]

    def test_find_fact_by_hash(self, store: Store) -> None:
        old, dup, deleted, not_fact, other = store.add_memories([
            make_record("fact old", source="fact", metadata={"factHash": "h1"}, created_at=T0),
            make_record("fact new", source="fact", metadata={"factHash": "h1"}, created_at=T0 + 10),
            make_record("fact deleted", source="fact", metadata={"factHash": "h1", "status": "deleted"},
                        created_at=T0 + 20),
            make_record("not a fact", source="knowledge", metadata={"factHash": "h2"}),
            make_record("other agent fact", agent=OTHER_AGENT, source="fact", metadata={"factHash": "h3"}),
        ])
        assert dup == old  # one active fact per hash: the second active row reinforced the first
        found = store.find_fact_by_hash(AGENT, "h1")
        assert found is not None and found.id == old and found.access_count == 1
        store.update_memory(old, {"metadata": {"factHash": "h1", "status": "superseded"}})
        assert store.find_fact_by_hash(AGENT, "h1") is None  # superseded and deleted rows are not found
        assert store.find_fact_by_hash(AGENT, "h2") is None
        assert store.find_fact_by_hash(AGENT, "h3") is None
        assert store.find_fact_by_hash(OTHER_AGENT, "h3").id == other  # type: ignore[union-attr]
        assert deleted and not_fact and len({old, deleted, not_fact, other}) == 4

    def test_add_fact_if_absent_inserts_once_then_reinforces(self, store: Store) -> None:
        first = make_record("The user likes tea.", source="fact", metadata={"factHash": "tea"}, created_at=T0)
        stored, inserted = store.add_fact_if_absent(first)
        assert inserted and stored.id == first.id and stored.content == "The user likes tea."
        again = make_record("the user likes tea.", source="fact", metadata={"factHash": "tea"}, created_at=T0 + 5)
        held, inserted = store.add_fact_if_absent(again)
        assert not inserted and held.id == first.id and held.content == "The user likes tea."
        row = store.get_memory(first.id)
        assert row is not None and (row.access_count, row.last_accessed_at) == (1, T0 + 5)
        other = make_record("tea, other agent", agent=OTHER_AGENT, source="fact", metadata={"factHash": "tea"})
        assert store.add_fact_if_absent(other)[1]  # the rule is per agent
        assert store.count_memories(_q(active_only=False)) == 1
        with pytest.raises(StoreError):
            store.add_fact_if_absent(make_record("not a fact", source="knowledge", metadata={"factHash": "x"}))

    def test_a_superseded_or_deleted_fact_frees_its_hash(self, store: Store) -> None:
        (a,) = store.add_memories([make_record("fact v1", source="fact", metadata={"factHash": "h"})])
        store.update_memory(a, {"metadata": {"factHash": "h", "status": "superseded"}})
        b, inserted = store.add_fact_if_absent(
            make_record("fact v2", source="fact", metadata={"factHash": "h"}, created_at=T0 + 1))
        assert inserted and b.id != a
        store.update_memory(b.id, {"metadata": {"factHash": "h", "status": "deleted"}})
        (c,) = store.add_memories([make_record("fact v3", source="fact", metadata={"factHash": "h"}, created_at=T0 + 2)])
        assert c not in (a, b.id)
        assert [r.id for r in store.list_memories(_q())] == [c]
        assert store.count_memories(_q(active_only=False)) == 3  # history kept
        with pytest.raises(ConflictError):  # re-activating a row would make a second active copy: permanent, 409
            store.update_memory(a, {"metadata": {"factHash": "h", "status": "active"}})
        assert store.get_memory(a).metadata["status"] == "superseded"  # type: ignore[union-attr]
        (k,) = store.add_memories([make_record("another fact", source="fact", metadata={"factHash": "k"})])
        with pytest.raises(ConflictError):  # nor may an edit give an active fact a taken hash
            store.update_memory(k, {"metadata": {"factHash": "h"}})
        assert store.find_fact_by_hash(AGENT, "k").id == k  # type: ignore[union-attr]

    def test_concurrent_add_fact_if_absent_keeps_one_row(self, store: Store) -> None:
        import concurrent.futures

        def add(n: int, trial: int) -> tuple[str, bool]:
            rec = make_record(f"fact {trial}", source="fact", metadata={"factHash": f"c{trial}"},
                              created_at=T0 + n, record_id=f"vec_fact_{trial}_{n}")
            stored, inserted = store.add_fact_if_absent(rec)
            return stored.id, inserted

        with concurrent.futures.ThreadPoolExecutor(max_workers=6) as pool:
            for trial in range(8):
                results = list(pool.map(lambda n, t=trial: add(n, t), range(6)))
                assert len({i for i, _ in results}) == 1 and sum(ins for _, ins in results) == 1
                held = store.find_fact_by_hash(AGENT, f"c{trial}")
                assert held is not None and held.access_count == 5
        assert store.count_memories(_q(active_only=False)) == 8

    def test_add_memories_if_absent_stores_each_id_once(self, store: Store) -> None:
        recs = [make_record(f"keyed row {i}", record_id=f"vec_key_{i}", created_at=T0 + i) for i in range(3)]
        assert store.add_memories_if_absent(recs[:2]) == [("vec_key_0", True), ("vec_key_1", True)]
        assert store.existing_memory_ids(["vec_key_0", "vec_key_1", "vec_key_2", "vec_nope"]) == {"vec_key_0",
                                                                                                  "vec_key_1"}
        again = [r.model_copy(update={"content": "changed"}) for r in recs]
        assert store.add_memories_if_absent(again) == [("vec_key_0", False), ("vec_key_1", False),
                                                       ("vec_key_2", True)]
        assert store.get_memory("vec_key_0").content == "keyed row 0"  # type: ignore[union-attr]
        assert store.get_memory("vec_key_2").content == "changed"  # type: ignore[union-attr]
        store.update_memory("vec_key_1", {"metadata": {"status": "deleted"}})
        assert store.add_memories_if_absent([recs[1]]) == [("vec_key_1", False)]  # a deleted row is not revived
        assert store.count_memories(_q(active_only=False)) == 3
        assert store.existing_memory_ids([]) == set() and store.add_memories_if_absent([]) == []
        fact = make_record("keyed fact", source="fact", metadata={"factHash": "kf"}, record_id="vec_fact_a")
        (held, _), = store.add_memories_if_absent([fact])
        dup = make_record("keyed fact", source="fact", metadata={"factHash": "kf"}, record_id="vec_fact_b")
        assert store.add_memories_if_absent([dup]) == [(held, False)]  # the one-active-fact rule holds
        assert store.get_memory(held).access_count == 1  # type: ignore[union-attr]

    def test_concurrent_add_memories_if_absent_keeps_one_row_per_id(self, store: Store) -> None:
        import concurrent.futures

        def run(n: int) -> list[tuple[str, bool]]:
            return store.add_memories_if_absent(
                [make_record(f"ingest item {i}", record_id=f"vec_ingest_{i}", created_at=T0 + n) for i in range(20)])

        with concurrent.futures.ThreadPoolExecutor(max_workers=6) as pool:
            results = list(pool.map(run, range(6)))
        for i in range(20):
            assert {r[i][0] for r in results} == {f"vec_ingest_{i}"}
            assert sum(r[i][1] for r in results) == 1
        assert store.count_memories(_q(active_only=False)) == 20

    def test_by_id_calls_naming_another_agent_touch_nothing(self, store: Store) -> None:
        """Every by-id method matches only the named agent's row: another agent naming the id
        reads nothing and changes nothing (on a sharded store the call goes to the other
        agent's shard, which does not hold the row)."""
        mine, theirs = store.add_memories([make_record("agent A's row", created_at=T0),
                                           make_record("agent B's row", agent=OTHER_AGENT, created_at=T0 + 1)])
        before = store.get_memory(mine)
        assert store.get_memory(mine, agent_wallet=OTHER_AGENT) is None
        assert store.get_memory(mine, _q(), agent_wallet=OTHER_AGENT) is None  # the agent and the query disagree
        assert store.get_memory(mine, agent_wallet=AGENT) == before
        assert store.existing_memory_ids([mine, theirs], agent_wallet=OTHER_AGENT) == {theirs}
        assert store.existing_memory_ids([mine, theirs], agent_wallet=AGENT) == {mine}
        assert store.update_memory(mine, {"content": "hijacked"}, agent_wallet=OTHER_AGENT) is None
        assert store.update_memory(mine, {}, agent_wallet=OTHER_AGENT) is None
        assert store.update_memories([(mine, {"decay_score": 0.1})], agent_wallet=OTHER_AGENT) == 0
        store.bump_access([mine], T0 + 50, agent_wallet=OTHER_AGENT)
        assert store.delete_memory(mine, agent_wallet=OTHER_AGENT) is False
        assert store.delete_memories([mine], agent_wallet=OTHER_AGENT) == 0
        assert store.get_memory(mine) == before  # untouched
        assert store.count_memories(_q(OTHER_AGENT, active_only=False)) == 1
        # the same calls naming the row's own agent do their work
        updated = store.update_memory(mine, {"content": "edited"}, agent_wallet=AGENT)
        assert updated is not None and updated.content == "edited"
        assert store.update_memories([(mine, {"decay_score": 0.5})], agent_wallet=AGENT) == 1
        store.bump_access([mine], T0 + 60, agent_wallet=AGENT)
        row = store.get_memory(mine, agent_wallet=AGENT)
        assert row is not None and (row.decay_score, row.access_count, row.last_accessed_at) == (0.5, 1, T0 + 60)
        assert store.get_memory(theirs, agent_wallet=OTHER_AGENT).access_count == 0  # type: ignore[union-attr]
        assert store.delete_memories([mine, theirs], agent_wallet=AGENT) == 1
        assert store.delete_memory(theirs, agent_wallet=OTHER_AGENT) is True
        assert store.count_memories(_q(active_only=False)) == store.count_memories(_q(OTHER_AGENT, active_only=False)) == 0

    def test_a_keyed_row_of_another_agent_is_not_taken_for_stored(self, store: Store) -> None:
        """``add_memories_if_absent`` and ``existing_memory_ids`` judge "already stored" within
        the record's agent: another agent's row with the same id is neither reported as this
        one nor changed (the engine's keyed ids hash the agent in, so they never collide)."""
        assert store.add_memories_if_absent([make_record("A's keyed row", record_id="vec_same_key")]) == [
            ("vec_same_key", True)]
        (other, inserted), = store.add_memories_if_absent(
            [make_record("B's keyed row", agent=OTHER_AGENT, record_id="vec_same_key")])
        assert inserted
        assert store.get_memory("vec_same_key", agent_wallet=AGENT).content == "A's keyed row"  # type: ignore[union-attr]
        assert store.get_memory(other, agent_wallet=OTHER_AGENT).content == "B's keyed row"  # type: ignore[union-attr]
        assert store.existing_memory_ids([other], agent_wallet=OTHER_AGENT) == {other}

    def test_bump_access(self, store: Store) -> None:
        a, b, c = store.add_memories([make_record(f"bump {i}", created_at=T0 + i) for i in range(3)])
        store.bump_access([a, b], T0 + 500)
        store.bump_access([a], T0 + 900)
        store.bump_access([], T0 + 1000)
        store.bump_access(["vec_unknown"], T0 + 1000)
        ra, rb, rc = (store.get_memory(i) for i in (a, b, c))
        assert (ra.access_count, ra.last_accessed_at) == (2, T0 + 900)  # type: ignore[union-attr]
        assert (rb.access_count, rb.last_accessed_at) == (1, T0 + 500)  # type: ignore[union-attr]
        assert (rc.access_count, rc.last_accessed_at) == (0, T0 + 2)  # type: ignore[union-attr]

    def test_list_memories_newest_first_with_limit(self, store: Store) -> None:
        recs = [make_record(f"list row {i}", created_at=T0 + i * 10) for i in (2, 0, 3, 1)]
        store.add_memories(recs)
        ordered = [r.content for r in store.list_memories(_q())]
        assert ordered == ["list row 3", "list row 2", "list row 1", "list row 0"]
        assert [r.content for r in store.list_memories(_q(), 2)] == ["list row 3", "list row 2"]
        assert store.count_memories(_q()) == 4

    @pytest.mark.parametrize("case", SCOPE_CASES, ids=[c[0] for c in SCOPE_CASES])
    def test_scope_rules_on_every_read_path(self, store: Store, case: tuple[str, dict[str, Any], set[str]]) -> None:
        _, kwargs, expected = case
        ids = self._load_scope_corpus(store)
        q = _q(**kwargs)
        listed = self._names(ids, [r.id for r in store.list_memories(q)])
        assert listed == expected, "list_memories"
        assert store.count_memories(q) == len(expected), "count_memories"
        keyword = self._names(ids, [h.record.id for h in store.keyword_search(q, "zebra", 100)])
        assert keyword == expected, "keyword_search"
        hits, info = store.vector_search(q, unit_vector(1.0, 0.5, 0.1, 0.0), MODEL, 100)
        assert self._names(ids, [h.record.id for h in hits]) == expected, "vector_search"
        assert info.candidates >= len(expected)
        for name, rid in ids.items():
            assert (store.get_memory(rid, q) is not None) == (name in expected), f"get_memory {name}"

    def test_iter_memories(self, store: Store) -> None:
        recs = [
            make_record("iter 0", created_at=T0),
            make_record("iter 1", created_at=T0 + DAY_MS, metadata={"status": "deleted"}),
            make_record("iter 2", created_at=T0 + 2 * DAY_MS, agent=OTHER_AGENT),
            make_record("iter 3", created_at=T0 + 3 * DAY_MS, user="u1", embedding=[0.0, 0.0, 0.0, 1.0]),
            make_record("iter 4", created_at=T0 + 4 * DAY_MS, embedding=None),
        ]
        store.add_memories(recs)
        everything = list(store.iter_memories(batch_size=2))
        assert [r.content for r in everything] == ["iter 0", "iter 1", "iter 2", "iter 3", "iter 4"]
        assert everything[3].embedding == pytest.approx([0.0, 0.0, 0.0, 1.0])
        assert everything[4].embedding is None
        assert [r.content for r in store.iter_memories(AGENT, batch_size=1)] == ["iter 0", "iter 1", "iter 3", "iter 4"]
        window = store.iter_memories(created_from=T0 + DAY_MS, created_to=T0 + 3 * DAY_MS)
        assert [r.content for r in window] == ["iter 1", "iter 2", "iter 3"]
        assert list(store.iter_memories("agent-nobody")) == []

    # ------------------------------------------------------------------ keyword lane
    def test_keyword_search(self, store: Store) -> None:
        both, one, none, other_user = store.add_memories([
            make_record("We went hiking in the alpine meadows", created_at=T0, user="u1"),
            make_record("The meadows were green in spring", created_at=T0 + 1, user="u1"),
            make_record("Completely unrelated sentence about taxes", created_at=T0 + 2, user="u1"),
            make_record("Alpine hiking with another user", created_at=T0 + 3, user="u2"),
        ])
        hits = store.keyword_search(_q(user="u1"), "alpine hiking", 10)
        assert [h.record.id for h in hits] == [both]
        hits = store.keyword_search(_q(user="u1"), "Alpine meadows hiking?", 10)
        assert [h.record.id for h in hits] == [both, one]
        assert all(h.score > 0 for h in hits) and hits[0].score >= hits[1].score
        assert len(store.keyword_search(_q(user="u1"), "meadows", 1)) == 1
        assert store.keyword_search(_q(user="u1"), "the and of it", 10) == []  # only stop words
        assert store.keyword_search(_q(user="u1"), "", 10) == []
        assert store.keyword_search(_q(user="u1"), "nonexistentword", 10) == []
        assert [h.record.id for h in store.keyword_search(_q(user="u2"), "hiking", 10)] == [other_user]
        assert [h.record.id for h in store.keyword_search(_q(user="u1"), "taxes", 10)] == [none]

    def test_keyword_search_stems_and_ignores_case(self, store: Store) -> None:
        (rid,) = store.add_memories([make_record("My dogs love running on the beach")])
        assert [h.record.id for h in store.keyword_search(_q(), "DOG runs", 5)] == [rid]

    def test_keyword_hits_carry_the_record(self, store: Store) -> None:
        (rid,) = store.add_memories([make_record("The octopus has three hearts", user="u1",
                                                 metadata={"confidence": 0.9})])
        (hit,) = store.keyword_search(_q(user="u1"), "octopus hearts", 5)
        assert hit.record.id == rid and hit.record.metadata == {"confidence": 0.9}
        assert hit.record.user_address == "u1" and hit.record.created_at == T0

    def test_keyword_search_finds_rows_by_their_context_below_content(self, store: Store) -> None:
        reply = make_record("Yes, we moved there in June", created_at=T0)
        reply.context = "Did you move to Lisbon?"
        about = make_record("Lisbon has steep hills", created_at=T0 + 1)
        unrelated = make_record("I like tea", created_at=T0 + 2)
        unrelated.context = "What do you drink?"
        reply_id, about_id, _ = store.add_memories([reply, about, unrelated])
        stored = store.get_memory(reply_id)
        assert stored is not None and stored.context == "Did you move to Lisbon?"
        assert stored.content == "Yes, we moved there in June"  # the context never leaks into content
        hits = store.keyword_search(_q(), "Lisbon", 10)
        # the context is searched, at a lower weight than the content
        assert [h.record.id for h in hits] == [about_id, reply_id]
        assert hits[1].record.context == "Did you move to Lisbon?"
        store.update_memory(reply_id, {"context": "Do you like Porto?"})
        assert [h.record.id for h in store.keyword_search(_q(), "Lisbon", 10)] == [about_id]
        assert [h.record.id for h in store.keyword_search(_q(), "Porto", 10)] == [reply_id]

    # ------------------------------------------------------------------ vector lane
    def test_vector_search_scores_and_order(self, store: Store) -> None:
        vectors = {
            "same": [1.0, 0.0, 0.0, 0.0],
            "close": unit_vector(0.9, 0.1, 0.0, 0.0),
            "orthogonal": [0.0, 1.0, 0.0, 0.0],
            "opposite": [-1.0, 0.0, 0.0, 0.0],
            "unnormalised": [3.0, 3.0, 0.0, 0.0],
        }
        ids = dict(zip(vectors, store.add_memories([
            make_record(f"vector {name}", embedding=v, created_at=T0 + i) for i, (name, v) in enumerate(vectors.items())
        ])))
        query = [2.0, 0.0, 0.0, 0.0]  # not normalised either
        hits, info = store.vector_search(_q(), query, MODEL, 10)
        names = {v: k for k, v in ids.items()}
        assert [names[h.record.id] for h in hits] == ["same", "close", "unnormalised", "orthogonal", "opposite"]
        expected = {"same": 1.0, "close": 0.9 / math.sqrt(0.82), "orthogonal": 0.0, "opposite": -1.0,
                    "unnormalised": 1 / math.sqrt(2)}
        for h in hits:
            assert h.score == pytest.approx((1 + expected[names[h.record.id]]) / 2, abs=1e-5)
        assert isinstance(info.method, str) and info.method and info.candidates >= 5
        top2, _ = store.vector_search(_q(), query, MODEL, 2)
        assert [names[h.record.id] for h in top2] == ["same", "close"]
        assert hits[0].record.content == "vector same" and hits[0].record.created_at == T0

    def test_vector_search_only_scores_rows_of_the_query_model(self, store: Store) -> None:
        mine, theirs = store.add_memories([
            make_record("mine", embedding=[1.0, 0.0, 0.0, 0.0], created_at=T0),
            make_record("theirs", embedding=[1.0, 0.0, 0.0, 0.0], model=OTHER_MODEL, created_at=T0 + 1),
        ])
        hits, info = store.vector_search(_q(), [1.0, 0.0, 0.0, 0.0], MODEL, 10)
        assert [h.record.id for h in hits] == [mine]
        assert info.skipped_other_models >= 1
        assert [h.record.id for h in store.vector_search(_q(), [1.0, 0.0, 0.0, 0.0], OTHER_MODEL, 10)[0]] == [theirs]
        assert store.vector_search(_q(), [1.0, 0.0, 0.0, 0.0], "never-used-model", 10)[0] == []

    def test_vector_search_rejects_a_query_of_the_wrong_dimension(self, store: Store) -> None:
        store.add_memories([make_record("four dims")])
        with pytest.raises(StoreError):
            store.vector_search(_q(), [1.0, 0.0, 0.0], MODEL, 5)

    def test_vector_search_sees_new_rows_and_deletes(self, store: Store) -> None:
        (a,) = store.add_memories([make_record("first", embedding=[0.0, 1.0, 0.0, 0.0])])
        q = [1.0, 0.0, 0.0, 0.0]
        assert [h.record.id for h in store.vector_search(_q(), q, MODEL, 5)[0]] == [a]
        (b,) = store.add_memories([make_record("second", embedding=[1.0, 0.0, 0.0, 0.0], created_at=T0 + 1)])
        assert [h.record.id for h in store.vector_search(_q(), q, MODEL, 5)[0]] == [b, a]
        store.delete_memory(b)
        assert [h.record.id for h in store.vector_search(_q(), q, MODEL, 5)[0]] == [a]

    def test_expired_rows_are_hidden_at_the_querys_now_on_every_read_path(self, store: Store) -> None:
        expiring = {"soon": T0 + 1000, "later": T0 + 5000, "text": "not a time", "none": None}
        ids = {name: store.add_memories([make_record(f"walrus {name}", created_at=T0 + i,
                                                     metadata={"expiresAt": at})])[0]
               for i, (name, at) in enumerate(expiring.items())}
        ids["plain"] = store.add_memories([make_record("walrus plain", created_at=T0 + 9)])[0]

        def seen(now: int, *, active_only: bool = True) -> dict[str, set[str]]:
            q = dataclasses.replace(_q(active_only=active_only), now=now)
            names = {v: k for k, v in ids.items()}
            return {
                "list": {names[r.id] for r in store.list_memories(q)},
                "keyword": {names[h.record.id] for h in store.keyword_search(q, "walrus", 10)},
                "vector": {names[h.record.id] for h in store.vector_search(q, [1.0, 0.0, 0.0, 0.0], MODEL, 10)[0]},
                "get": {n for n, i in ids.items() if store.get_memory(i, q) is not None},
                "count": {str(store.count_memories(q))},
            }

        everything = set(ids)
        assert seen(T0) == {**dict.fromkeys(["list", "keyword", "vector", "get"], everything), "count": {"5"}}
        at_soon = everything - {"soon"}  # expiresAt == now: expired
        assert seen(T0 + 1000) == {**dict.fromkeys(["list", "keyword", "vector", "get"], at_soon), "count": {"4"}}
        late = {"text", "none", "plain"}  # a non-number or null never expires
        assert seen(T0 + 10**9) == {**dict.fromkeys(["list", "keyword", "vector", "get"], late), "count": {"3"}}
        history = seen(T0 + 10**9, active_only=False)
        assert history["list"] == everything and history["count"] == {"5"}

    def test_rows_archived_by_the_expire_job_are_inactive_and_free_their_hash(self, store: Store) -> None:
        for status in ("expired", "forgotten"):
            (a,) = store.add_memories([make_record(f"fact {status}", source="fact", metadata={"factHash": status})])
            store.update_memory(a, {"metadata": {"factHash": status, "status": status}})
            assert store.find_fact_by_hash(AGENT, status) is None
            assert a not in {h.record.id for h in store.vector_search(_q(), [1.0, 0.0, 0.0, 0.0], MODEL, 10)[0]}
            b, inserted = store.add_fact_if_absent(
                make_record(f"fact {status} again", source="fact", metadata={"factHash": status}, created_at=T0 + 1))
            assert inserted and b.id != a
        assert store.count_memories(_q()) == 2 and store.count_memories(_q(active_only=False)) == 4



class ThreadsConformance(_RoleConformance):
    """The :class:`~manowar_memory.stores.base.ThreadStore` role: sessions and transcripts."""

    # ------------------------------------------------------------------ sessions
    def test_session_round_trip_and_replace(self, store: Store) -> None:
        s = self._session("s1", user="u1", thread="t1", metadata={"app_id": "x"}, state={"step": 2})
        store.upsert_session(s)
        assert store.get_session("s1", AGENT) == s
        assert store.get_session("s1", OTHER_AGENT) is None
        assert store.get_session("s2", AGENT) is None
        changed = s.model_copy(
            update={"working_memory": WorkingMemory(context=["a", "b"]), "expires_at": s.expires_at + 5}
        )
        store.upsert_session(changed)
        assert store.get_session("s1", AGENT) == changed
        assert len(store.find_sessions(_q(user="u1"), 10)) == 1
        other = self._session("s1", agent=OTHER_AGENT)  # same id, other agent: a separate session
        store.upsert_session(other)
        assert store.get_session("s1", OTHER_AGENT) == other and store.get_session("s1", AGENT) == changed

    def test_expired_sessions_are_invisible_and_purged(self, store: Store) -> None:
        now = now_ms()
        store.upsert_session(self._session("live", expires_in=DAY_MS))
        store.upsert_session(self._session("later", expires_in=3 * DAY_MS))
        store.upsert_session(self._session("dead", expires_in=-60_000))
        assert store.get_session("dead", AGENT) is None
        assert {s.session_id for s in store.find_sessions(_q(), 10)} == {"live", "later"}
        assert store.purge_expired_sessions(now + 2 * DAY_MS) in (1, 2)  # "dead" may already be gone (TTL)
        assert store.get_session("live", AGENT) is None and store.get_session("later", AGENT) is not None
        assert store.purge_expired_sessions(now + 2 * DAY_MS) == 0

    def test_find_sessions_scope_order_and_limit(self, store: Store) -> None:
        now = now_ms()
        rows: list[tuple[str, dict[str, Any]]] = [  # most recently used first
            ("app", {"user": "u1", "metadata": {"app_id": "x"}, "state": {"topic": "travel"}}),
            ("u1_t1", {"user": "u1", "thread": "t1"}), ("u1_t2", {"user": "u1", "thread": "t2"}),
            ("local", {"mode": "local", "hai": "h1"}), ("shared", {}), ("u2", {"user": "u2"}),
            ("other", {"agent": OTHER_AGENT}), ("deleted", {"user": "u1", "metadata": {"status": "deleted"}}),
        ]
        for i, (sid, kw) in enumerate(rows):
            store.upsert_session(self._session(sid, last=now - (i + 1) * 1000, **kw))
        def names(q: MemoryQuery, n: int = 10) -> list[str]:
            return [s.session_id for s in store.find_sessions(q, n)]

        assert names(_q(user="u1")) == ["app", "u1_t1", "u1_t2", "local", "shared"]
        assert names(_q(user="u1", thread="t1", durable=False)) == ["u1_t1"]
        assert names(_q()) == ["local", "shared"]
        assert names(_q(mode="local", hai="h1")) == ["local"]
        assert names(_q(user="u1"), 2) == ["app", "u1_t1"]
        assert names(_q(user="u1", active_only=False), 1) == ["app"]
        assert "deleted" in names(_q(user="u1", active_only=False))
        assert names(_q(user="u1", filters={"appId": "x"})) == ["app"]
        assert names(_q(user="u1", filters={"workingMemory.state.topic": "travel"})) == ["app"]

    # ------------------------------------------------------------------ transcripts
    def test_transcript_round_trip_and_replace(self, store: Store) -> None:
        t = self._transcript("s1", summary="a summary", messages=[("user", "book a flight"), ("tool", "flight found"),
                                                                  ("assistant", "done")])
        store.upsert_transcript(t)
        assert store.get_transcript("s1", AGENT) == t
        assert store.get_transcript("s-missing", AGENT) is None
        assert store.get_transcript("s1", OTHER_AGENT) is None
        t2 = t.model_copy(update={"messages": t.messages[:1], "summary": None, "created_at": T0 + 99})
        store.upsert_transcript(t2)
        assert store.get_transcript("s1", AGENT) == t2
        assert len(store.search_transcripts(_q(user="u1"), None, 10)) == 1
        other = self._transcript("s1", agent=OTHER_AGENT, summary="same session id, another agent")
        store.upsert_transcript(other)  # session ids are unique per agent: a separate transcript
        assert store.get_transcript("s1", OTHER_AGENT) == other and store.get_transcript("s1", AGENT) == t2

    @classmethod
    def _turn_builder(cls, tag: str, calls: list[str] | None = None, fail: bool = False,
                      agent: str = AGENT) -> TurnBuilder:
        """A builder appending one message ``tag`` to the transcript ``turns`` and one line to the
        working session ``turns-w``, with a session row of its own."""
        def build(existing: Transcript | None, live: Session | None) -> TurnRows:
            if calls is not None:
                calls.append(tag)
            if fail:
                raise RuntimeError(f"turn {tag} refused")
            base = existing or cls._transcript("turns", agent=agent).model_copy(update={"messages": []})
            msg = Message(role="user", content=tag, timestamp=T0 + len(base.messages))
            session = live or cls._session("turns-w", agent=agent, user="u1", thread="t1")
            lines = session.working_memory.context if live else []
            wm = session.working_memory.model_copy(update={"context": [*lines, tag]})
            return TurnRows(base.model_copy(update={"messages": [*base.messages, msg]}),
                            session.model_copy(update={"working_memory": wm}),
                            make_record(f"turn {tag}", agent=agent, user="u1", thread="t1", source="session",
                                        created_at=T0 + 1000 + len(base.messages)))
        return build

    def test_append_turn_writes_a_turn_once_and_all_or_nothing(self, store: Store) -> None:
        calls: list[str] = []
        first = store.append_turn(AGENT, "turns", "turns-w", "a", self._turn_builder("a", calls))
        assert first.created and first.seq == 1 and first.memory_id
        again = store.append_turn(AGENT, "turns", "turns-w", "a", self._turn_builder("a", calls))
        assert not again.created and again.seq == 1 and again.memory_id == first.memory_id
        assert calls == ["a"]  # a known turn id is not built again
        with pytest.raises(RuntimeError, match="refused"):
            store.append_turn(AGENT, "turns", "turns-w", "b", self._turn_builder("b", fail=True))
        second = store.append_turn(AGENT, "turns", "turns-w", "b", self._turn_builder("b"))
        assert second.created and second.seq == 2
        transcript = store.get_transcript("turns", AGENT)
        assert transcript is not None and [m.content for m in transcript.messages] == ["a", "b"]
        session = store.get_session("turns-w", AGENT)
        assert session is not None and session.working_memory.context == ["a", "b"]
        rows = store.list_memories(MemoryQuery(scope=Scope(agent_wallet=AGENT, user_address="u1")))
        assert sorted(r.content for r in rows) == ["turn a", "turn b"]
        # turn ids are per transcript and per agent
        assert store.append_turn(OTHER_AGENT, "turns", "turns-w", "a", self._turn_builder("a", agent=OTHER_AGENT)).created

    def test_erase_scope_removes_the_scopes_turn_ledger(self, store: Store) -> None:
        store.append_turn(AGENT, "turns", "turns-w", "a", self._turn_builder("a"))  # a turn of u1
        counts = store.erase_scope((AGENT, "u1", None, None))
        assert counts["turns"] == 1 and counts["memories"] == 1
        assert store.erase_scope((AGENT, "u1", None, None))["turns"] == 0
        # nothing remembers the turn id: the same id is a new turn now
        assert store.append_turn(AGENT, "turns", "turns-w", "a", self._turn_builder("a")).created

    def test_concurrent_append_turns_on_one_transcript_all_land_in_order(self, store: Store) -> None:
        writers, turns = 6, 5

        def write(w: int) -> list[int]:
            return [store.append_turn(AGENT, "turns", "turns-w", f"w{w}-{n}", self._turn_builder(f"w{w}-{n}")).seq
                    for n in range(turns)]

        with ThreadPoolExecutor(writers) as pool:
            seqs = [s for got in pool.map(write, range(writers)) for s in got]
        assert sorted(seqs) == list(range(1, writers * turns + 1))
        transcript = store.get_transcript("turns", AGENT)
        assert transcript is not None
        said = [m.content for m in transcript.messages]
        assert sorted(said) == sorted(f"w{w}-{n}" for w in range(writers) for n in range(turns))
        for w in range(writers):
            assert [t for t in said if t.startswith(f"w{w}-")] == [f"w{w}-{n}" for n in range(turns)]
        session = store.get_session("turns-w", AGENT)
        assert session is not None and session.working_memory.context == said

    def test_search_transcripts(self, store: Store) -> None:
        store.upsert_transcript(self._transcript("flight", messages=[("user", "Please book a flight to Lisbon")],
                                                 created_at=T0))
        store.upsert_transcript(self._transcript("summary-hit", summary="Trip planning for Lisbon and Porto",
                                                 messages=[("user", "thanks")], created_at=T0 + 1))
        store.upsert_transcript(self._transcript("other-thread", thread="t2", messages=[("user", "Lisbon again")],
                                                 created_at=T0 + 2))
        store.upsert_transcript(self._transcript("other-user", user="u2", messages=[("user", "Lisbon for u2")],
                                                 created_at=T0 + 3))
        store.upsert_transcript(self._transcript("unrelated", messages=[("user", "tax forms")], created_at=T0 + 4))
        hits = store.search_transcripts(_q(user="u1"), "Lisbon", 10)
        assert {t.session_id for t, _ in hits} == {"flight", "summary-hit", "other-thread"}
        assert all(score > 0 for _, score in hits)
        assert [s for _, s in hits] == sorted((s for _, s in hits), reverse=True)
        hits = store.search_transcripts(_q(user="u1", thread="t1", durable=False), "lisbon porto", 10)
        assert hits[0][0].session_id == "summary-hit"
        assert {t.session_id for t, _ in hits} == {"summary-hit", "flight"}
        newest = store.search_transcripts(_q(user="u1"), None, 2)
        assert [t.session_id for t, _ in newest] == ["unrelated", "other-thread"]
        assert store.search_transcripts(_q(user="u1"), "the of and", 10) == []
        assert store.search_transcripts(_q(user="u2"), "lisbon", 10)[0][0].session_id == "other-user"
        assert store.search_transcripts(_q(agent=OTHER_AGENT), "lisbon", 10) == []
        assert len(store.search_transcripts(_q(user="u1"), "lisbon", 1)) == 1

    def test_a_transcript_past_16_mb_round_trips_grows_and_is_searched_whole(self, store: Store) -> None:
        filler = "lorem ipsum dolor sit amet " * 40_000  # ~1 MiB
        wide = "café ✓ naïve 東京 " * 150_000  # ~3.3 MiB of multi-byte text, and as much again in its tool call
        parts = [("user", "aardvark question " + filler)] + [
            ("assistant" if i % 2 else "user", filler) for i in range(9)] + [("tool", wide), ("user", "closing")]
        big = self._transcript("long", summary="a long chat", messages=parts)
        assert len(big.model_dump_json().encode()) > 16 * 2**20
        store.upsert_transcript(big)
        assert store.get_transcript("long", AGENT) == big
        for word in ("aardvark", "closing"):  # the oldest message and the newest one are both searched
            assert [t.session_id for t, _ in store.search_transcripts(_q(user="u1"), word, 5)] == ["long"]
        grown = big.model_copy(update={"messages": [*big.messages, Message(role="assistant", content="zeppelin",
                                                                           timestamp=T0 + 99)]})
        store.upsert_transcript(grown)
        assert store.get_transcript("long", AGENT) == grown
        (hit, _), = store.search_transcripts(_q(user="u1"), "zeppelin", 5)
        assert hit == grown
        cleared = grown.model_copy(update={"messages": [], "summary": None})
        store.upsert_transcript(cleared)
        assert store.get_transcript("long", AGENT) == cleared
        assert store.search_transcripts(_q(user="u1"), "aardvark", 5) == []  # nothing of the old messages is left
        assert store.stats()["totalTranscripts"] == 1



class ArtifactsConformance(_RoleConformance):
    """The :class:`~manowar_memory.stores.base.ArtifactStore` role: patterns, archives, skills, jobs."""

    # ------------------------------------------------------------------ patterns
    def test_patterns(self, store: Store) -> None:
        p = self._pattern("p1", 0.5, created_at=T0, metadata={"tags": ["a"]})
        store.upsert_pattern(p)
        assert store.get_pattern("p1") == p
        assert store.get_pattern("p-missing") is None
        again = self._pattern("p1", 0.9, created_at=T0 + 500, summary="search, compare, then book")
        store.upsert_pattern(again)
        got = store.get_pattern("p1")
        assert got is not None and got.created_at == T0  # kept from the first insert
        assert (got.success_rate, got.summary, got.updated_at) == (0.9, "search, compare, then book", T0 + 500)
        store.upsert_pattern(self._pattern("p2", 0.7, created_at=T0 + 1))
        store.upsert_pattern(self._pattern("p3", 0.7, created_at=T0 + 2))
        store.upsert_pattern(self._pattern("p-user", 0.95, user="u1"))
        store.upsert_pattern(self._pattern("p-other", 1.0, agent=OTHER_AGENT))
        store.upsert_pattern(self._pattern("p-local", 0.99, mode="local", hai="h1"))
        assert [x.pattern_id for x in store.find_patterns(_q(), 10)] == ["p-local", "p1", "p3", "p2"]
        assert [x.pattern_id for x in store.find_patterns(_q(user="u1"), 10)] == ["p-local", "p-user", "p1", "p3", "p2"]
        assert [x.pattern_id for x in store.find_patterns(_q(mode="local", hai="h1"), 10)] == ["p-local"]
        assert [x.pattern_id for x in store.find_patterns(_q(user="u1"), 2)] == ["p-local", "p-user"]

    # ------------------------------------------------------------------ archives
    def test_archives(self, store: Store) -> None:
        def arc(aid: str, created: int, **kw: Any) -> Archive:
            return Archive(archive_id=aid, agent_wallet=kw.pop("agent", AGENT), summary=f"archive {aid}",
                           content="H4sIAAAA", date_range={"start": created - 10, "end": created},
                           metadata={"entryCount": 3, "topics": ["travel"]}, created_at=created, **kw)

        a1 = arc("a1", T0)
        store.add_archive(a1)
        store.add_archive(arc("a2", T0 + 10))
        store.add_archive(arc("a-user", T0 + 20, user_address="u1"))
        store.add_archive(arc("a-other", T0 + 30, agent=OTHER_AGENT))
        assert store.get_archive("a1") == a1
        assert store.get_archive("missing") is None
        store.update_archive("a1", {"ipfs_cid": "bafy123", "summary": "updated"})
        got = store.get_archive("a1")
        assert got is not None and (got.ipfs_cid, got.summary, got.content) == ("bafy123", "updated", "H4sIAAAA")
        with pytest.raises(StoreError):
            store.update_archive("missing", {"ipfs_cid": "x"})
        assert [a.archive_id for a in store.find_archives(_q(), 10)] == ["a2", "a1"]
        assert [a.archive_id for a in store.find_archives(_q(user="u1"), 10)] == ["a-user", "a2", "a1"]
        assert [a.archive_id for a in store.find_archives(_q(user="u1"), 1)] == ["a-user"]
        assert [a.archive_id for a in store.find_archives(_q(agent=OTHER_AGENT), 10)] == ["a-other"]

    # ------------------------------------------------------------------ skills
    def test_skills(self, store: Store) -> None:
        def skill(sid: str, rate: float, usage: int, agents: list[str], category: str = "learned") -> Skill:
            return Skill(skill_id=sid, name=f"skill {sid}", description="does things", category=category,
                         trigger={"type": "intent", "patterns": ["book"]}, spawn_config={"skillType": "learned"},
                         success_rate=rate, usage_count=usage, agents=agents, tags=["t"], created_at=T0)

        k1 = skill("k1", 0.8, 5, [AGENT])
        store.add_skill(k1)
        store.add_skill(skill("k2", 0.9, 1, [AGENT, OTHER_AGENT]))
        store.add_skill(skill("k3", 0.8, 9, [OTHER_AGENT], category="custom"))
        assert store.get_skill("k1") == k1 and store.get_skill("nope") is None
        assert [s.skill_id for s in store.list_skills(None, None, 10)] == ["k2", "k3", "k1"]
        assert [s.skill_id for s in store.list_skills(AGENT, None, 10)] == ["k2", "k1"]
        assert [s.skill_id for s in store.list_skills(None, "custom", 10)] == ["k3"]
        assert [s.skill_id for s in store.list_skills(OTHER_AGENT, "learned", 10)] == ["k2"]
        assert [s.skill_id for s in store.list_skills(None, None, 1)] == ["k2"]

    # ------------------------------------------------------------------ jobs
    def test_jobs(self, store: Store) -> None:
        job = Job(job_id="j1", type="consolidate", agent_wallet=AGENT, data={"n": 1}, created_at=T0)
        store.put_job(job)
        assert store.get_job("j1") == job
        done = job.model_copy(update={"status": "completed", "completed_at": T0 + 5, "data": {"merged": 2}})
        store.put_job(done)
        assert store.get_job("j1") == done
        failed = Job(job_id="j2", type="cleanup", status="failed", error="boom", created_at=T0)
        store.put_job(failed)
        assert store.get_job("j2") == failed and store.get_job("j3") is None



class CacheFencesConformance(_RoleConformance):
    """The :class:`~manowar_memory.stores.base.CacheFenceStore` role."""

    # ------------------------------------------------------------------ cache fences
    def test_cache_fences_start_at_zero_and_count_bumps(self, store: Store) -> None:
        assert store.cache_fences(["*", "a=x"]) == {"*": 0, "a=x": 0}
        assert store.cache_fences([]) == {}
        assert [store.bump_cache_fence("a=x") for _ in range(3)] == [1, 2, 3]
        assert store.cache_fences(["a=x", "a=X", "a=x"]) == {"a=x": 3, "a=X": 0}

    def test_concurrent_fence_bumps_are_all_counted(self, store: Store) -> None:
        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(lambda _: store.bump_cache_fence("a=racy"), range(40)))
        assert store.cache_fences(["a=racy"]) == {"a=racy": 40}

class MaintenanceConformance(_RoleConformance):
    """The :class:`~manowar_memory.stores.base.MaintenanceStore` role: what the jobs call."""

    @staticmethod
    def _rows(store: Store) -> list[str]:
        """Seven rows in a known insertion order: five of agent A (one deleted), two of agent B."""
        records = [
            make_record("m0", created_at=T0 + 5),
            make_record("m1", user="u1", created_at=T0 + 1),
            make_record("m2", user="u2", created_at=T0 + 9, metadata={"status": "deleted"}),
            make_record("m3", agent=OTHER_AGENT, user="u1", created_at=T0),
            make_record("m4", user="u1", created_at=T0 + 3),
            make_record("m5", created_at=T0 + 2, embedding=None),
            make_record("m6", agent=OTHER_AGENT, created_at=T0 + 4),
        ]
        ids: list[str] = []
        for rec in records:  # one call each: insertion order is the order of these calls
            ids += store.add_memories([rec])
        return ids

    def test_page_memories_walks_every_row_once_in_insertion_order(self, store: Store) -> None:
        ids = self._rows(store)
        for agent, expected in ((AGENT, [ids[i] for i in (0, 1, 2, 4, 5)]), (None, ids)):
            seen: list[str] = []
            after: Any = None
            pages = 0
            while True:
                rows, nxt = store.page_memories(agent, after, 2)
                json.dumps(nxt)  # the cursor is JSON-safe (it travels in workflow state)
                assert all(r.embedding is None for r in rows)
                seen += [r.id for r in rows]
                pages += 1
                if len(rows) < 2:
                    break
                after = nxt
            assert seen == expected and pages == len(expected) // 2 + 1
            assert store.page_memories(agent, nxt, 2) == ([], nxt)

    def test_memory_user_counts_and_user_rows_cover_every_status(self, store: Store) -> None:
        ids = self._rows(store)
        assert store.memory_user_counts(AGENT) == {None: 2, "u1": 2, "u2": 1}
        assert store.memory_user_counts(OTHER_AGENT) == {"u1": 1, None: 1}
        assert store.memory_user_counts("agent-none") == {}
        rows = list(store.iter_user_memories(AGENT, ["u1", None]))
        assert [r.id for r in rows] == [ids[i] for i in (0, 1, 4, 5)]
        assert all(r.embedding is None and r.agent_wallet == AGENT for r in rows)
        assert [r.id for r in store.iter_user_memories(AGENT, ["u2"])] == [ids[2]]  # deleted rows too
        assert list(store.iter_user_memories(AGENT, [])) == []

    def test_update_memories_in_bulk(self, store: Store) -> None:
        a, b = store.add_memories([make_record("bulk a", created_at=T0), make_record("bulk b", created_at=T0 + 1)])
        updated = store.update_memories([
            (a, {"decay_score": 0.25, "updated_at": T0 + 50}),
            ("vec_missing", {"decay_score": 0.1}),
            (b, {"metadata": {"status": "superseded", "supersededBy": a}, "updated_at": T0 + 50}),
        ])
        assert updated == 2
        got_a, got_b = store.get_memory(a), store.get_memory(b)
        assert got_a is not None and got_a.decay_score == 0.25 and got_a.updated_at == T0 + 50
        assert got_b is not None and got_b.metadata == {"status": "superseded", "supersededBy": a}
        assert [r.id for r in store.list_memories(_q())] == [a]
        assert store.update_memories([]) == 0
        with pytest.raises(StoreError):
            store.update_memories([(a, {"decay_score": 0.5}), (a, {"agent_wallet": "x"})])
        assert store.get_memory(a).decay_score == 0.25  # type: ignore[union-attr]  # nothing was written

    def test_delete_memories(self, store: Store) -> None:
        a, b, c = store.add_memories([make_record(f"del {i}", created_at=T0 + i) for i in range(3)])
        assert store.delete_memories([a, "vec_missing", c]) == 2
        assert store.delete_memories([]) == 0
        assert [r.id for r in store.iter_memories()] == [b]
        assert [h.record.id for h in store.vector_search(_q(), [1.0, 0.0, 0.0, 0.0], MODEL, 5)[0]] == [b]

    def test_list_transcripts_in_a_time_range_oldest_first(self, store: Store) -> None:
        for i, sid in enumerate(("t-late", "t-early", "t-mid", "t-out")):
            store.upsert_transcript(self._transcript(sid, created_at=T0 + (30, 10, 20, 99)[i]))
        store.upsert_transcript(self._transcript("t-other", agent=OTHER_AGENT, created_at=T0 + 20))
        found = store.list_transcripts(AGENT, T0 + 10, T0 + 30)
        assert [t.session_id for t in found] == ["t-early", "t-mid", "t-late"]
        assert found[0] == self._transcript("t-early", created_at=T0 + 10)
        assert store.list_transcripts(AGENT, T0 + 31, T0 + 98) == []

    def test_old_transcripts_are_counted_scoped_and_deleted(self, store: Store) -> None:
        store.upsert_transcript(self._transcript("old-1", user="u1", created_at=T0))
        store.upsert_transcript(self._transcript("old-2", user=None, agent=OTHER_AGENT, created_at=T0 + 1))
        store.upsert_transcript(self._transcript("new", user="u2", created_at=T0 + 100))
        assert store.count_transcripts_older_than(T0 + 50) == 2
        assert sorted(store.old_transcript_scopes(T0 + 50), key=str) == sorted(
            [(AGENT, "u1", None, None), (OTHER_AGENT, None, None, None)], key=str)
        assert store.delete_transcripts_older_than(T0 + 50) == 2
        assert store.count_transcripts_older_than(T0 + 50) == 0 and store.old_transcript_scopes(T0 + 50) == []
        assert store.get_transcript("new", AGENT) is not None and store.get_transcript("old-1", AGENT) is None

    def test_stale_sessions_are_counted_scoped_and_deleted(self, store: Store) -> None:
        now = now_ms()
        later = now + 2 * DAY_MS  # "now" for the store: the first session has expired by then
        store.upsert_session(self._session("expiring", user="u1", expires_in=DAY_MS, last=now))
        store.upsert_session(self._session("unused", mode="local", hai="h1", expires_in=9 * DAY_MS, last=now - 5000))
        store.upsert_session(self._session("fresh", user="u2", expires_in=9 * DAY_MS, last=now))
        cutoff = now - 1000
        assert store.count_stale_sessions(later, cutoff) == 2
        assert sorted(store.stale_session_scopes(later, cutoff), key=str) == sorted(
            [(AGENT, "u1", None, None), (AGENT, None, "local", "h1")], key=str)
        assert store.count_stale_sessions(now, cutoff) == 1  # nothing has expired yet
        assert store.delete_sessions_older_than(cutoff) == 1
        assert store.purge_expired_sessions(later) == 1
        assert store.count_stale_sessions(later, cutoff) == 0 and store.stale_session_scopes(later, cutoff) == []
        assert [s.session_id for s in store.find_sessions(_q(user="u2"), 5)] == ["fresh"]

    def test_erase_scope_removes_exactly_one_scopes_data_with_its_index_entries(self, store: Store) -> None:
        def fill(user: str | None, mode: str | None = None, hai: str | None = None) -> list[str]:
            tag = f"{user}{mode}{hai}"
            ids = store.add_memories([
                make_record(f"zqsecret {tag} passport", user=user, mode=mode, hai=hai, embedding=[1.0, 0.0, 0.0, 0.0],
                            created_at=T0 + len(tag)),
                make_record(f"zqsecret {tag} contract", user=user, mode=mode, hai=hai, created_at=T0 + 1)])
            store.upsert_transcript(self._transcript(f"tr-{tag}", user=user, messages=[("user", f"zqsecret {tag}")])
                                    .model_copy(update={"mode": mode, "hai_id": hai}))
            store.upsert_session(self._session(f"s-{tag}", user=user, mode=mode, hai=hai))
            store.upsert_pattern(self._pattern(f"p-{tag}", 0.7, user=user, mode=mode, hai=hai))
            store.add_archive(Archive(archive_id=f"arc-{tag}", agent_wallet=AGENT, user_address=user, mode=mode,  # type: ignore[arg-type]
                                      hai_id=hai, summary="s", content="x", date_range={"start": T0, "end": T0},
                                      created_at=T0))
            return ids

        fill("u1")
        kept = fill("u2") + fill(None) + fill("u1", "local", "h1")
        counts = store.erase_scope((AGENT, "u1", None, None))
        assert counts == {"memories": 2, "transcripts": 1, "sessions": 1, "patterns": 1, "archives": 1, "turns": 0}
        assert store.erase_scope((AGENT, "u1", None, None)) == dict.fromkeys(counts, 0)
        assert sorted(r.id for r in store.iter_memories(AGENT)) == sorted(kept)
        assert store.get_transcript("tr-u1NoneNone", AGENT) is None and store.get_session("s-u1NoneNone", AGENT) is None
        assert store.get_pattern("p-u1NoneNone") is None and store.get_archive("arc-u1NoneNone") is None
        assert store.get_transcript("tr-u2NoneNone", AGENT) is not None and store.get_archive("arc-NoneNoneNone")
        u1 = _q(user="u1")  # still sees the shared rows and u1's rows of HAI h1, which are another scope
        left = {(None, None), ("u1", "local")}
        assert {(h.record.user_address, h.record.mode) for h in store.keyword_search(u1, "zqsecret passport", 10)} \
            == left
        assert {(h.record.user_address, h.record.mode)
                for h in store.vector_search(u1, [1.0, 0.0, 0.0, 0.0], MODEL, 10)[0]} == left
        assert {(t.user_address, t.mode) for t, _ in store.search_transcripts(_q(user="u1", thread="t1"), "zqsecret", 10)} \
            == left

    def test_list_agent_wallets_by_kind_then_name(self, store: Store) -> None:
        assert store.list_agent_wallets() == []
        store.add_memories([make_record("m", agent="agent-M2"), make_record("m", agent="agent-M1", created_at=T0 + 1)])
        store.upsert_transcript(self._transcript("t", agent="agent-T"))
        store.upsert_transcript(self._transcript("t", agent="agent-M2"))
        store.upsert_pattern(self._pattern("p", 0.5, agent="agent-P"))
        store.add_archive(Archive(archive_id="arc", agent_wallet="agent-A1", summary="s", content="x",
                                  date_range={"start": T0, "end": T0}, created_at=T0))
        store.upsert_session(self._session("s", agent="agent-S"))
        assert store.list_agent_wallets() == ["agent-M1", "agent-M2", "agent-T", "agent-P", "agent-A1", "agent-S"]
        assert store.list_agent_wallets(3) == ["agent-M1", "agent-M2", "agent-T"]


class SchedulesConformance(_RoleConformance):
    """The :class:`~manowar_memory.stores.base.ScheduleStore` role: documents with compare-and-set."""

    def test_schedule_round_trip_replace_and_delete(self, store: Store) -> None:
        assert store.get_schedule("s1") is None and store.list_schedules() == []
        assert store.save_schedule({"scheduleId": "s1", "cron": "0 3 * * *", "params": {"x": [1, "ü"]}}) == 1
        assert store.get_schedule("s1") == {"scheduleId": "s1", "cron": "0 3 * * *", "params": {"x": [1, "ü"]},
                                            "rev": 1}
        assert store.save_schedule({"scheduleId": "s1", "cron": "0 4 * * *", "rev": 99}) == 2  # rev is the store's
        assert store.save_schedule({"scheduleId": "s0", "cron": "x"}) == 1
        assert [(d["scheduleId"], d["rev"]) for d in store.list_schedules()] == [("s0", 1), ("s1", 2)]
        assert store.get_schedule("s1")["cron"] == "0 4 * * *"  # type: ignore[index]
        assert store.delete_schedule("s1") is True and store.delete_schedule("s1") is False
        assert store.get_schedule("s1") is None

    def test_schedule_compare_and_set(self, store: Store) -> None:
        assert store.save_schedule({"scheduleId": "gone", "n": 1}, expected_rev=1) is None  # nothing to compare
        assert store.get_schedule("gone") is None
        store.save_schedule({"scheduleId": "s", "n": 1})
        assert store.save_schedule({"scheduleId": "s", "n": 2}, expected_rev=5) is None
        assert store.get_schedule("s") == {"scheduleId": "s", "n": 1, "rev": 1}
        assert store.save_schedule({"scheduleId": "s", "n": 2}, expected_rev=1) == 2
        assert store.get_schedule("s") == {"scheduleId": "s", "n": 2, "rev": 2}

    def test_concurrent_compare_and_set_lets_one_writer_win(self, store: Store) -> None:
        store.save_schedule({"scheduleId": "race", "owner": None})
        with ThreadPoolExecutor(max_workers=8) as pool:
            revs = list(pool.map(lambda i: store.save_schedule({"scheduleId": "race", "owner": i}, expected_rev=1),
                                 range(8)))
        winners = [i for i, rev in enumerate(revs) if rev is not None]
        assert len(winners) == 1 and revs[winners[0]] == 2
        assert store.get_schedule("race") == {"scheduleId": "race", "owner": winners[0], "rev": 2}


class StoreConformance(MemoryRowsConformance, ThreadsConformance, ArtifactsConformance, CacheFencesConformance,
                       MaintenanceConformance, SchedulesConformance):
    """Behaviour every store must have: every role suite, plus what spans the roles.
    Override only the ``store`` fixture."""

    # ------------------------------------------------------------------ protocol
    def test_implements_the_store_protocol(self, store: Store) -> None:
        assert isinstance(store, Store)
        assert isinstance(store.name, str) and store.name

    def test_empty_store_answers_every_read(self, store: Store) -> None:
        q = _q(user="u1", thread="t1")
        assert store.list_memories(q) == []
        assert store.count_memories(q) == 0
        assert store.keyword_search(q, "anything here", 5) == []
        hits, info = store.vector_search(q, [1.0, 0.0, 0.0, 0.0], MODEL, 5)
        assert hits == [] and isinstance(info.method, str)
        assert list(store.iter_memories()) == []
        assert store.get_memory("vec_nothing") is None
        assert store.find_fact_by_hash(AGENT, "nope") is None
        assert store.find_sessions(q, 5) == [] and store.get_session("s", AGENT) is None
        assert store.search_transcripts(q, None, 5) == [] and store.search_transcripts(q, "hello world", 5) == []
        assert store.get_transcript("s", AGENT) is None
        assert store.find_patterns(q, 5) == [] and store.get_pattern("p") is None
        assert store.find_archives(q, 5) == [] and store.get_archive("a") is None
        assert store.list_skills(None, None, 5) == [] and store.get_skill("k") is None
        assert store.get_job("j") is None
        assert store.purge_expired_sessions(now_ms()) == 0
        assert store.stats()["totalVectors"] == 0

    # ------------------------------------------------------------------ stats
    def test_stats(self, store: Store) -> None:
        store.add_memories([
            make_record("s1", created_at=T0, source="fact"),
            make_record("s2", created_at=T0 + 10, metadata={"status": "deleted"}),
            make_record("s3", created_at=T0 + 20, user="u1"),
            make_record("s4", created_at=T0 + 30, agent=OTHER_AGENT),
        ])
        store.upsert_session(self._session("sess"))
        store.upsert_transcript(self._transcript("tr"))
        store.upsert_pattern(self._pattern("p", 0.5))
        stats = store.stats(AGENT)
        assert stats["totalVectors"] == 3
        assert stats["avgDecayScore"] == pytest.approx(1.0)
        assert (stats["oldestVector"], stats["newestVector"]) == (T0, T0 + 20)
        assert stats["bySource"] == {"fact": 1, "knowledge": 2}
        assert stats["byStatus"] == {"active": 2, "deleted": 1}
        assert (stats["totalSessions"], stats["totalTranscripts"], stats["totalPatterns"], stats["totalArchives"]) == (
            1, 1, 1, 0)
        everything = store.stats()
        assert everything["totalVectors"] == 4 and everything["newestVector"] == T0 + 30

    def test_close_is_safe_to_call(self, store: Store) -> None:
        store.close()  # the fixture closes again afterwards

    # ------------------------------------------------------------------ guard
    def test_no_overrides_DO_NOT_OVERRIDE(self) -> None:  # noqa: N802 - the name warns subclass authors
        """Subclasses may only override fixtures: a store that needs another answer does not conform."""
        suites = set(StoreConformance.__mro__)
        base = {name: value for klass in reversed(StoreConformance.__mro__) for name, value in vars(klass).items()}
        overridden = []
        for klass in type(self).__mro__:
            if klass in suites:
                continue
            for name, value in vars(klass).items():
                if name.startswith("test") and name in base and value is not base[name]:
                    overridden.append(f"{klass.__name__}.{name}")
        assert not overridden, f"conformance tests must not be overridden: {overridden}"
