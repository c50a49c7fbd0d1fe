"""The approximate path of the vector index: same answers as the exact scan on small sets,
in sync with upserts and removals, saved beside a SQLite file and reused only at the same
revision, and never crossing a scope, on both stores (the threshold forced low)."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from manowar_memory import Scope, SQLiteStore
from manowar_memory.stores._ann import AnnGroup
from manowar_memory.stores._vectors import VectorIndex
from manowar_memory.stores.base import MemoryQuery
from manowar_memory.testing.conformance import MODEL, make_record

DIMS = 16
AGENT = "agent-A"


def _unit(rng: np.random.Generator, n: int) -> np.ndarray:
    x = rng.standard_normal((n, DIMS)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.fixture
def low_threshold(monkeypatch):
    """ANN from 50 allowed rows on, every list probed (results must then equal the exact scan)."""
    monkeypatch.setattr(VectorIndex, "ann_threshold", 50)
    monkeypatch.setattr(AnnGroup, "min_scan", 10**9)


@pytest.fixture
def partial_probe(monkeypatch):
    """ANN from 50 allowed rows on, probing only a few lists (a truly approximate search)."""
    monkeypatch.setattr(VectorIndex, "ann_threshold", 50)
    monkeypatch.setattr(AnnGroup, "min_scan", 16)
    monkeypatch.setattr(AnnGroup, "scan_fraction", 0.0)


def _pair(rows: list[tuple[int, np.ndarray, str | None, str, bool]]) -> tuple[VectorIndex, VectorIndex]:
    ann, exact = VectorIndex(DIMS), VectorIndex(DIMS, ann_threshold=0)
    for key, vec, user, source, active in rows:
        for index in (ann, exact):
            index.upsert(key, vec, agent=AGENT, user=user, mode=None, hai=None, source=source, active=active)
    return ann, exact


def _queries() -> list[MemoryQuery]:
    return [
        MemoryQuery(scope=Scope(agent_wallet=AGENT, user_address="u1")),
        MemoryQuery(scope=Scope(agent_wallet=AGENT, user_address="u2"), active_only=True),
        MemoryQuery(scope=Scope(agent_wallet=AGENT, user_address="u1"), sources=["chat"]),
        MemoryQuery(scope=Scope(agent_wallet=AGENT), exclude_sources=["file"]),
    ]


def _same(ann: VectorIndex, exact: VectorIndex, rng: np.random.Generator, k: int = 10) -> None:
    for query in _queries():
        for q in _unit(rng, 10):
            got = ann.top(q, ann.mask(query), k)
            want = exact.top(q, exact.mask(query), k)
            assert [key for key, _ in got] == [key for key, _ in want]
            assert np.allclose([s for _, s in got], [s for _, s in want], atol=1e-6)


def _rows(rng: np.random.Generator, n: int, start: int = 0) -> list[tuple[int, np.ndarray, str | None, str, bool]]:
    users = ["u1", "u2", None]
    return [
        (start + i, v, users[i % 3], ("chat", "file")[i % 5 == 0], i % 7 != 0)
        for i, v in enumerate(_unit(rng, n))
    ]


def test_ann_equals_exact_on_small_sets(low_threshold) -> None:
    rng = np.random.default_rng(1)
    ann, exact = _pair(_rows(rng, 900))
    _same(ann, exact, rng)
    assert len(ann.ann) == 3  # every (agent, user) group got its own approximate index
    assert not exact.ann


def test_ann_follows_removals_and_updates(low_threshold) -> None:
    rng = np.random.default_rng(2)
    rows = _rows(rng, 900)
    ann, exact = _pair(rows)
    _same(ann, exact, rng)
    for key in range(0, 900, 4):
        ann.remove(key)
        exact.remove(key)
    moved = _unit(rng, 60)
    for n, key in enumerate(range(1, 900, 15)):  # new vectors, some rows change user
        for index in (ann, exact):
            index.upsert(key, moved[n], agent=AGENT, user="u1", mode=None, hai=None, source="chat", active=True)
    _same(ann, exact, rng)
    for gid, group in ann.ann.items():
        assert group.ntotal == ann.group_sizes[gid]  # removed rows left the ANN index too
    everyone = MemoryQuery(scope=Scope(agent_wallet=AGENT, user_address="u1"))
    for key in (0, 4, 8):  # a removed row is never found, even by its own vector
        assert key not in {k for k, _ in ann.top(rows[key][1], ann.mask(everyone), 5)}
    for n, key in enumerate(range(1, 900, 15)):
        assert ann.top(moved[n], ann.mask(everyone), 1)[0][0] == key


def test_group_is_rebuilt_when_it_has_doubled(low_threshold) -> None:
    rng = np.random.default_rng(3)
    ann, exact = _pair([(i, v, "u1", "chat", True) for i, v in enumerate(_unit(rng, 100))])
    _same(ann, exact, rng)
    (group,) = ann.ann.values()
    assert group.trained_on == 100
    for index in (ann, exact):
        for key, v in enumerate(_unit(np.random.default_rng(4), 300), start=100):
            index.upsert(key, v, agent=AGENT, user="u1", mode=None, hai=None, source="chat", active=True)
    _same(ann, exact, rng)
    (group,) = ann.ann.values()
    assert group.trained_on == 400 and group.ntotal == 400


def test_partial_probe_never_leaves_the_mask(partial_probe) -> None:
    rng = np.random.default_rng(5)
    ann, _ = _pair(_rows(rng, 3000))
    query = MemoryQuery(scope=Scope(agent_wallet=AGENT, user_address="u1"), sources=["chat"], active_only=True)
    mask = ann.mask(query)
    for q in _unit(rng, 20):
        got = ann.top(q, mask, 10)
        assert len(got) == 10
        assert all(mask[ann.position[key]] for key, _ in got)
    assert ann.ann


def test_a_wholly_allowed_group_is_searched_without_a_filter(low_threshold, monkeypatch) -> None:
    """When the mask allows every live row of a group, faiss gets no ID filter (the index holds
    exactly those rows); as soon as one row is not allowed, the filter is back."""
    filtered: list[bool] = []
    search = AnnGroup.search

    def spy(self: AnnGroup, q: np.ndarray, k: int, allowed: np.ndarray | None, share: float) -> np.ndarray | None:
        filtered.append(allowed is not None)
        return search(self, q, k, allowed, share)

    monkeypatch.setattr(AnnGroup, "search", spy)
    rng = np.random.default_rng(6)
    rows = [(i, v, "u1", "chat", True) for i, v in enumerate(_unit(rng, 300))]
    ann, exact = _pair(rows)
    for index in (ann, exact):
        index.remove(7)  # a dead row: removed from the ANN index, so still no filter needed
    query = MemoryQuery(scope=Scope(agent_wallet=AGENT, user_address="u1"))
    for q in [rows[7][1], *_unit(rng, 5)]:
        got, want = ann.top(q, ann.mask(query), 10), exact.top(q, exact.mask(query), 10)
        assert [key for key, _ in got] == [key for key, _ in want]
        assert 7 not in {key for key, _ in got}
    assert filtered and not any(filtered)
    filtered.clear()
    for index in (ann, exact):
        index.upsert(3, rows[3][1], agent=AGENT, user="u1", mode=None, hai=None, source="chat", active=False)
    got = ann.top(rows[3][1], ann.mask(query), 10)
    assert [key for key, _ in got] == [key for key, _ in exact.top(rows[3][1], exact.mask(query), 10)]
    assert 3 not in {key for key, _ in got} and filtered == [True]


def test_ann_threshold_is_validated() -> None:
    with pytest.raises(ValueError, match="ann_threshold"):
        VectorIndex(DIMS, ann_threshold=-1)


# ----------------------------------------------------------------------------- on the stores


def _records(rng: np.random.Generator, n: int, *, user: str, agent: str = AGENT, tag: str = "") -> list:
    return [
        make_record(f"{tag}{user}-{agent}-{i}", agent=agent, user=user, embedding=v.tolist(), created_at=1 + i)
        for i, v in enumerate(_unit(rng, n))
    ]


def _check_isolation(store, vectors_of_others: np.ndarray) -> None:
    """Alice's queries are the exact vectors of Bob's and of another agent's rows: none come back."""
    alice = MemoryQuery(scope=Scope(agent_wallet=AGENT, user_address="alice"))
    for q in vectors_of_others:
        hits, info = store.vector_search(alice, q.tolist(), MODEL, 10)
        assert len(hits) == 10 and info.candidates == 200
        assert {h.record.user_address for h in hits} == {"alice"}
        assert {h.record.agent_wallet for h in hits} == {AGENT}


def test_sqlite_scope_isolation_under_ann(partial_probe) -> None:
    rng = np.random.default_rng(6)
    store = SQLiteStore(":memory:")
    try:
        store.add_memories(_records(rng, 200, user="alice"))
        bob, other = _records(rng, 200, user="bob"), _records(rng, 200, user="alice", agent="agent-B")
        store.add_memories(bob + other)
        _check_isolation(store, np.array([r.embedding for r in bob[:10] + other[:10]], dtype=np.float32))
        assert store._indexes[MODEL].ann  # the approximate path answered
    finally:
        store.close()


@pytest.mark.mongo
def test_mongo_scope_isolation_under_ann(partial_probe, mongo_db) -> None:
    from manowar_memory.stores.mongo import MongoStore

    rng = np.random.default_rng(7)
    store = MongoStore(client=mongo_db.client, database=mongo_db.name, vector_search="local")
    try:
        store.add_memories(_records(rng, 200, user="alice"))
        bob, other = _records(rng, 200, user="bob"), _records(rng, 200, user="alice", agent="agent-B")
        store.add_memories(bob + other)
        _check_isolation(store, np.array([r.embedding for r in bob[:10] + other[:10]], dtype=np.float32))
        assert store._partitions[(AGENT, "alice", MODEL)].ann  # the in-process cache answered through ANN
        store.delete_memories([r.id for r in bob[:5]])
        store.add_memories(_records(rng, 30, user="alice", tag="late-"))
        alice = MemoryQuery(scope=Scope(agent_wallet=AGENT, user_address="alice"))
        _, info = store.vector_search(alice, bob[0].embedding, MODEL, 10)
        assert info.candidates == 230
    finally:
        store.close()


@pytest.fixture
def builds(monkeypatch) -> list[int]:
    """Rows of every ANN index built from now on."""
    seen: list[int] = []
    real_build = AnnGroup.build.__func__  # type: ignore[attr-defined]

    def counting_build(cls, vectors, labels, **kwargs):
        seen.append(len(labels))
        return real_build(cls, vectors, labels, **kwargs)

    monkeypatch.setattr(AnnGroup, "build", classmethod(counting_build))
    return seen


@pytest.mark.mongo
def test_mongo_reload_keeps_the_ann_index_in_sync(partial_probe, builds, mongo_db) -> None:
    from manowar_memory.stores.mongo import MongoStore

    rng = np.random.default_rng(9)
    store = MongoStore(client=mongo_db.client, database=mongo_db.name, vector_search="local",
                       vector_cache_reload_s=1e-6)  # every query reloads the partition
    alice = MemoryQuery(scope=Scope(agent_wallet=AGENT, user_address="alice"))
    try:
        rows = _records(rng, 200, user="alice")
        store.add_memories(rows)
        store.vector_search(alice, rows[0].embedding, MODEL, 10)
        assert builds == [200]
        store.delete_memories([r.id for r in rows[:20]])
        late = _records(rng, 20, user="alice", tag="late-")
        store.add_memories(late)
        for gone, new in zip(rows[:20], late):
            hits, _ = store.vector_search(alice, gone.embedding, MODEL, 10)
            assert gone.id not in {h.record.id for h in hits}
            hits, info = store.vector_search(alice, new.embedding, MODEL, 1)
            assert hits[0].record.id == new.id and info.candidates == 200
        assert builds == [200]  # reloaded many times, never rebuilt
        (group,) = store._partitions[(AGENT, "alice", MODEL)].ann.values()
        assert group.ntotal == 200
    finally:
        store.close()


def _top_ids(store: SQLiteStore, vectors: np.ndarray) -> list[list[str]]:
    alice = MemoryQuery(scope=Scope(agent_wallet=AGENT, user_address="alice"))
    return [[h.record.id for h in store.vector_search(alice, q.tolist(), MODEL, 5)[0]] for q in vectors]


def test_sqlite_file_store_saves_and_reuses_ann_only_at_its_revision(low_threshold, tmp_path, monkeypatch) -> None:
    rng = np.random.default_rng(8)
    path = tmp_path / "mem.db"
    saved = VectorIndex.persist_file(path, MODEL)
    queries = _unit(rng, 5)
    store = SQLiteStore(path)
    store.add_memories(_records(rng, 300, user="alice"))
    first = _top_ids(store, queries)
    store.close()
    assert saved.exists()

    def no_build(*args, **kwargs):
        raise AssertionError("rebuilt although a saved index of this revision exists")

    with monkeypatch.context() as m:
        m.setattr(AnnGroup, "build", no_build)
        store = SQLiteStore(path)
        assert _top_ids(store, queries) == first  # restored, relabelled to the new row positions
        assert store._indexes[MODEL].ann
        store.close()

    shutil.copy(saved, tmp_path / "old.npz")
    store = SQLiteStore(path)
    late = _records(rng, 1, user="alice", tag="late-")
    store.add_memories(late)
    store.close()
    shutil.copy(tmp_path / "old.npz", saved)  # a saved index older than the database
    builds: list[int] = []
    real_build = AnnGroup.build.__func__  # type: ignore[attr-defined]

    def counting_build(cls, vectors, labels, **kwargs):
        builds.append(len(labels))
        return real_build(cls, vectors, labels, **kwargs)

    monkeypatch.setattr(AnnGroup, "build", classmethod(counting_build))
    store = SQLiteStore(path)
    try:
        hits = _top_ids(store, np.array([late[0].embedding], dtype=np.float32))
        assert hits[0][0] == late[0].id  # the stale file was ignored: the new row is found
        assert builds == [301]
    finally:
        store.close()


def test_codes_follow_the_dimensions_and_both_kinds_equal_exact(low_threshold) -> None:
    """4-bit fast-scan codes where the dimensions divide, 8-bit scalar codes otherwise; with
    every list probed both give the exact scan's answers (candidates are re-scored exactly)."""
    rng = np.random.default_rng(11)
    for dims, kind in ((16, "pq4fs"), (15, "sq8")):
        x = rng.standard_normal((400, dims)).astype(np.float32)
        ann, exact = VectorIndex(dims), VectorIndex(dims, ann_threshold=0)
        for key, v in enumerate(x):
            for index in (ann, exact):
                index.upsert(key, v, agent=AGENT, user="u1", mode=None, hai=None, source="chat", active=True)
        query = MemoryQuery(scope=Scope(agent_wallet=AGENT, user_address="u1"))
        for q in rng.standard_normal((10, dims)).astype(np.float32):
            q /= np.linalg.norm(q)
            assert [k for k, _ in ann.top(q, ann.mask(query), 10)] == [k for k, _ in exact.top(q, exact.mask(query), 10)]
        (group,) = ann.ann.values()
        assert group.kind == kind == AnnGroup.kind_for(dims)
        assert group.nbytes > 0


def test_finds_tells_matching_labels_from_shuffled_ones() -> None:
    rng = np.random.default_rng(12)
    x = _unit(rng, 500)
    group = AnnGroup.build(x, np.arange(500, dtype=np.int64))
    probe = np.arange(0, 500, 31, dtype=np.int64)
    assert group.finds(x[probe], probe)
    assert group.relabel({i: (i + 250) % 500 for i in range(500)})  # every label now names another row
    assert not group.finds(x[probe], probe)
    assert group.finds(x[probe], (probe + 250) % 500)


def test_a_saved_index_of_other_codes_is_rebuilt(low_threshold, builds, tmp_path, monkeypatch) -> None:
    rng = np.random.default_rng(13)
    path = tmp_path / "mem.db"
    queries = _unit(rng, 3)
    store = SQLiteStore(path)
    store.add_memories(_records(rng, 300, user="alice"))
    first = _top_ids(store, queries)
    store.close()
    assert builds == [300]
    monkeypatch.setattr(AnnGroup, "fast_scan", False)
    store = SQLiteStore(path)
    try:
        assert _top_ids(store, queries) == first
        assert builds == [300, 300]  # the saved fast-scan index was not adopted as 8-bit codes
        (group,) = store._indexes[MODEL].ann.values()
        assert group.kind == "sq8"
    finally:
        store.close()
    store = SQLiteStore(path)  # the rebuilt index was saved, though the revision is the same
    try:
        assert _top_ids(store, queries) == first
        assert builds == [300, 300]
    finally:
        store.close()


def test_a_partly_allowed_group_probes_every_list_until_exact_is_cheaper() -> None:
    """A mask allowing less of the group than the scan fraction probes every list (the codes
    are far fewer bytes than the allowed rows' vectors); only a tiny share goes exact (None)."""
    rng = np.random.default_rng(14)
    x = _unit(rng, 2000)
    group = AnnGroup.build(x, np.arange(2000, dtype=np.int64))
    allowed = np.zeros(2000, dtype=bool)
    allowed[::5] = True  # 20 % of the group, under the scan fraction
    found = group.search(x[5], 50, allowed, 0.2)
    assert found is not None and len(found) == 50 and allowed[found].all()
    assert 5 in set(found.tolist())  # every list probed: the row itself is among the candidates
    tiny = np.zeros(2000, dtype=bool)
    tiny[:10] = True
    assert group.search(x[5], 50, tiny, 10 / 2000) is None


def test_top_with_the_scope_groups_known_equals_exact(low_threshold) -> None:
    """``groups_of`` names the groups a scope's mask can allow; with one of them live the pool
    skips the per-group count, with two it counts as before: both equal the exact scan."""
    rng = np.random.default_rng(15)
    rows = [(i, v, ("u1", "u2")[i % 2], "chat", i % 9 != 0) for i, v in enumerate(_unit(rng, 600))]
    ann, exact = _pair(rows)
    others, userless = _unit(rng, 100), _unit(rng, 100)
    for index in (ann, exact):  # another agent's rows: never in the scope's groups
        for key, v in enumerate(others, start=1000):
            index.upsert(key, v, agent="agent-B", user="u1", mode=None, hai=None, source="chat", active=True)
    queries = [MemoryQuery(scope=Scope(agent_wallet=AGENT, user_address="u1")),
               MemoryQuery(scope=Scope(agent_wallet=AGENT, user_address="u2"), active_only=True)]
    for query in queries:
        assert len(ann.groups_of(query)) == 1
        for q in _unit(rng, 5):
            got = ann.top(q, ann.mask(query), 10, ann.groups_of(query))
            assert [key for key, _ in got] == [key for key, _ in exact.top(q, exact.mask(query), 10)]
    for index in (ann, exact):  # now the agent's user-less rows: two live groups for each user
        for key, v in enumerate(userless, start=2000):
            index.upsert(key, v, agent=AGENT, user=None, mode=None, hai=None, source="chat", active=True)
    for query in queries:
        assert len(ann.groups_of(query)) == 2
        for q in _unit(rng, 5):
            got = ann.top(q, ann.mask(query), 10, ann.groups_of(query))
            assert [key for key, _ in got] == [key for key, _ in exact.top(q, exact.mask(query), 10)]
    assert ann.groups_of(MemoryQuery(scope=Scope(agent_wallet="nobody"))) == []


@pytest.mark.parametrize("layout", ["runs", "scattered"])
def test_the_exact_scan_ranks_a_scope_written_in_runs_as_a_brute_force_does(layout: str) -> None:
    """A scope whose rows lie together (a conversation ingested at once) is scored over their span
    of the matrix, a scattered one through a gather: both rank as a brute force over its rows,
    ties (duplicate vectors) in row order."""
    rng = np.random.default_rng(23)
    index = VectorIndex(DIMS, ann_threshold=0)
    vectors = _unit(rng, 400)
    vectors[150] = vectors[120]  # a tie inside the scope
    users = [("u1" if 100 <= i < 160 else ("u2", "u3")[i % 2]) if layout == "runs" else ("u1", "u2", "u3")[i % 3]
             for i in range(400)]
    for key, (vec, user) in enumerate(zip(vectors, users, strict=True)):
        index.upsert(key, vec, agent=AGENT, user=user, mode=None, hai=None, source="chat", active=True)
    query = MemoryQuery(scope=Scope(agent_wallet=AGENT, user_address="u1"))
    mine = [i for i, user in enumerate(users) if user == "u1"]
    for q in [*_unit(rng, 8), vectors[120]]:
        scores = {i: float(vectors[i] @ q) for i in mine}
        want = sorted(mine, key=lambda i: (-scores[i], i))[:12]
        got = index.top(q, index.mask(query), 12)
        assert [key for key, _ in got] == want
        assert np.allclose([s for _, s in got], [scores[i] for i in want], atol=1e-6)


def test_a_cached_mask_is_reused_only_while_rows_stand_still_and_none_expires() -> None:
    """The mask of a query is kept, read-only, and given again for the same query; a write, a
    delete, an allowed row's expiry and a query for an earlier time each get a fresh one."""
    index = VectorIndex(DIMS)
    rng = np.random.default_rng(3)
    for n, vec in enumerate(_unit(rng, 4)):
        index.upsert(f"r{n}", vec, agent=AGENT, user="u1", mode=None, hai=None, source="chat", active=True,
                     expires_at=5_000.0 if n == 3 else None)
    query = MemoryQuery(scope=Scope(agent_wallet=AGENT, user_address="u1"), now=1_000)
    mask, count = index.mask_and_count(query)
    assert count == 4 and not mask.flags.writeable
    with pytest.raises(ValueError):
        mask[0] = False
    assert index.mask_and_count(query)[0] is mask  # nothing changed: the same array
    later = MemoryQuery(scope=query.scope, now=6_000)
    assert index.mask_and_count(later)[1] == 3  # r3 expired at 5,000: not the cached mask
    earlier = MemoryQuery(scope=query.scope, now=900)
    assert index.mask_and_count(earlier)[1] == 4  # made anew: r3 is allowed again before it expires
    index.remove("r0")
    assert index.mask_and_count(earlier)[1] == 3
    index.upsert("r9", _unit(rng, 1)[0], agent=AGENT, user="u1", mode=None, hai=None, source="chat", active=True)
    assert index.mask_and_count(earlier)[1] == 4
    assert index.mask_and_count(MemoryQuery(scope=query.scope, now=900, sources=["note"]))[1] == 0


def test_a_row_written_while_a_mask_is_made_neither_breaks_it_nor_is_hidden_by_its_cache() -> None:
    """SQLite's index takes new rows from other threads while a search builds its mask (writers
    do not hold ``lock``): the mask covers the rows it saw, and it is not cached as current, so
    the next search sees the new row. (A failure in CI: an IndexError, 78 rows against a mask of 76.)"""
    index = VectorIndex(4)
    query = MemoryQuery(scope=Scope(agent_wallet="a", user_address="u"))
    for i in range(3):
        index.upsert(f"k{i}", np.eye(4, dtype=np.float32)[i], agent="a", user="u", mode=None, hai=None,
                     source="turn", active=True)
    make = index._mask

    def mask_then_a_write(q: MemoryQuery, now: float) -> np.ndarray:
        mask = make(q, now)
        index.upsert("late", np.eye(4, dtype=np.float32)[3], agent="a", user="u", mode=None, hai=None,
                     source="turn", active=True)
        return mask

    index._mask = mask_then_a_write  # type: ignore[method-assign]
    mask, count = index.mask_and_count(query)
    assert mask.shape[0] == 3 and count == 3
    index._mask = make  # type: ignore[method-assign]
    mask, count = index.mask_and_count(query)
    assert count == 4 and [index.keys[i] for i in np.flatnonzero(mask)] == ["k0", "k1", "k2", "late"]
