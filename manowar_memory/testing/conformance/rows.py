"""The memory rows role of the conformance suite (:class:`MemoryRowsConformance`)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from ..._util import DAY_MS
from ...errors import ConflictError, StoreError
from ...stores.base import EarlierRows, EventDateRows, Store, TimeRangeRows

try:
    import pytest
except ImportError as exc:  # pragma: no cover - only without the dev extra
    from ...errors import MissingDependencyError

    raise MissingDependencyError("pytest", "dev", "The store conformance suite") from exc

from .common import (
    AGENT,
    MODEL,
    OTHER_AGENT,
    OTHER_MODEL,
    SCOPE_CASES,
    T0,
    _q,
    _RoleConformance,
    make_record,
    unit_vector,
)

__all__ = ["MemoryRowsConformance"]


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
        if isinstance(store, TimeRangeRows):  # optional capability
            ranged = store.memories_created_between(q, T0, T0 + DAY_MS, 100)
            assert self._names(ids, [r.id for r in ranged]) == expected, "memories_created_between"
        if isinstance(store, EarlierRows):  # optional capability
            earlier = store.memories_created_before(q, T0 + DAY_MS, 100)
            assert self._names(ids, [r.id for r in earlier]) == expected, "memories_created_before"

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

    def test_memories_created_between(self, store: Store) -> None:
        if not isinstance(store, TimeRangeRows):
            pytest.skip("optional capability TimeRangeRows not implemented")
        recs = [make_record(f"day row {i}", created_at=T0 + i * DAY_MS, embedding=unit_vector(1.0, i, 0.0, 0.0))
                for i in (3, 0, 2, 1, 4)]
        recs.append(make_record("day row gone", created_at=T0 + 2 * DAY_MS, metadata={"status": "deleted"}))
        recs.append(make_record("day row other agent", created_at=T0 + 2 * DAY_MS, agent=OTHER_AGENT))
        store.add_memories(recs)
        got = store.memories_created_between(_q(), T0 + DAY_MS, T0 + 4 * DAY_MS, 10)
        assert [r.content for r in got] == ["day row 1", "day row 2", "day row 3"]  # end exclusive, oldest first
        assert got[0].embedding == pytest.approx(unit_vector(1.0, 1.0, 0.0, 0.0), abs=1e-6)
        assert got[0].embedding_model == MODEL
        assert [r.content for r in store.memories_created_between(_q(), T0, T0 + 10 * DAY_MS, 2)] == [
            "day row 0", "day row 1"]
        assert store.memories_created_between(_q(), T0 + 4 * DAY_MS, T0 + DAY_MS, 10) == []
        assert store.memories_created_between(_q(), T0, T0 + 10 * DAY_MS, 0) == []
        assert store.memories_created_between(_q(OTHER_AGENT), T0, T0 + 10 * DAY_MS, 10)[0].content == (
            "day row other agent")

    def test_memories_created_before(self, store: Store) -> None:
        if not isinstance(store, EarlierRows):
            pytest.skip("optional capability EarlierRows not implemented")
        recs = [make_record(f"turn {i}", thread="t1", created_at=T0 + i * 1000, embedding=unit_vector(1.0, i, 0.0, 0.0))
                for i in (3, 0, 2, 1, 4)]
        recs.append(make_record("turn gone", thread="t1", created_at=T0 + 2500, metadata={"status": "deleted"}))
        recs.append(make_record("other thread", thread="t2", created_at=T0 + 2500))
        recs.append(make_record("other agent", thread="t1", created_at=T0 + 2500, agent=OTHER_AGENT))
        store.add_memories(recs)
        thread = _q(thread="t1", durable=False)
        got = store.memories_created_before(thread, T0 + 3000, 3)
        assert [r.content for r in got] == ["turn 2", "turn 1", "turn 0"]  # end exclusive, newest first
        assert got[0].embedding == pytest.approx(unit_vector(1.0, 2.0, 0.0, 0.0), abs=1e-6)
        assert got[0].embedding_model == MODEL
        assert [r.content for r in store.memories_created_before(thread, T0 + 10_000, 10)] == [
            "turn 4", "turn 3", "turn 2", "turn 1", "turn 0"]
        assert "other thread" in [r.content for r in store.memories_created_before(_q(), T0 + 3000, 10)]
        assert store.memories_created_before(thread, T0, 10) == []
        assert store.memories_created_before(thread, T0 + 10_000, 0) == []
        assert [r.content for r in store.memories_created_before(_q(OTHER_AGENT, thread="t1", durable=False),
                                                                 T0 + 10_000, 10)] == ["other agent"]

    def test_memories_dated_between(self, store: Store) -> None:
        if not isinstance(store, EventDateRows):
            pytest.skip("optional capability EventDateRows not implemented")
        june_12 = 1_686_528_000_000  # 2023-06-12T00:00Z
        later = T0 + 100 * DAY_MS  # recorded long after the events they tell
        rows = [("told later about the 12th", "2023-06-12", AGENT, None, None), ("a June fact", "2023-06", AGENT, None, None),
                ("a 2023 fact", "2023", AGENT, None, None), ("the 12th at dusk", "2023-06-12T18:30", AGENT, None, None),
                ("the 13th", "2023-06-13", AGENT, None, None), ("a July fact", "2023-07", AGENT, None, None),
                ("a 2022 fact", "2022", AGENT, None, None), ("gone", "2023-06-12", AGENT, None, "deleted"),
                ("other agent", "2023-06-12", OTHER_AGENT, None, None), ("user u2", "2023-06-12", AGENT, "u2", None),
                ("user u1", "2023-06-12", AGENT, "u1", None)]
        store.add_memories([
            make_record(text, created_at=later + i, agent=agent, user=user,
                        metadata={"eventDate": date, **({"status": status} if status else {})})
            for i, (text, date, agent, user, status) in enumerate(rows)
        ] + [make_record("recorded on the 12th, no event date", created_at=june_12 + 1000)])
        got = store.memories_dated_between(_q(), june_12, june_12 + DAY_MS, 10)
        assert [r.content for r in got] == ["a 2023 fact", "a June fact", "told later about the 12th",
                                            "the 12th at dusk"]  # by event date; coarse dates overlap the day
        assert got[0].embedding is not None and got[0].embedding_model == MODEL
        assert [r.content for r in store.memories_dated_between(_q(user="u1"), june_12, june_12 + DAY_MS, 10)] == [
            "a 2023 fact", "a June fact", "told later about the 12th", "user u1", "the 12th at dusk"]
        two_days = store.memories_dated_between(_q(), june_12, june_12 + 2 * DAY_MS, 10)
        assert "the 13th" in [r.content for r in two_days] and "a July fact" not in [r.content for r in two_days]
        assert [r.content for r in store.memories_dated_between(_q(), june_12, june_12 + DAY_MS, 2)] == [
            "a 2023 fact", "a June fact"]
        assert store.memories_dated_between(_q(), june_12 + DAY_MS, june_12, 10) == []
        assert store.memories_dated_between(_q(), june_12, june_12 + DAY_MS, 0) == []
        assert [r.content for r in store.memories_dated_between(_q(OTHER_AGENT), june_12, june_12 + DAY_MS, 10)] == [
            "other agent"]

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
