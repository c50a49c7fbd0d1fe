"""Concurrency: threads and processes (spawn) write and read the same scope at once, on the
file-backed SQLite store and on MongoDB. Nothing is lost or duplicated and counts add up:

* every row a writer inserted is there exactly once (ids unique, contents as written);
* rows inserted with the *same* id by every writer at once all survive, with distinct ids;
* concurrent access bumps of one row add up exactly;
* concurrent upserts of one session / one pattern leave exactly one document;
* readers running during the writes never fail and never see a count go down;
* engine-level writes (ingest, post_turn) from several processes add up too;
* threads and processes remembering the same fact at once store it once (the store's atomic
  insert-if-absent) and every other remember reinforces that row.
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
from collections import Counter
from typing import Any

import pytest

from manowar_memory import MemoryEngine, Pattern, Scope, Session, SQLiteStore, Transcript
from manowar_memory._util import now_ms
from manowar_memory.records import Message, PatternTrigger, WorkingMemory
from manowar_memory.stores.base import MemoryQuery
from manowar_memory.testing.conformance import MODEL, unit_vector
from manowar_memory.testing.conformance import make_record as _make_record

AGENT = "agent-concurrency"
USER = "u1"
T = 1_750_000_000_000
ROWS = 40  # per worker
BUMPS = 25  # per worker
THREADS = 4
PROCESSES = 3


def _open(spec: tuple[str, ...]) -> Any:
    if spec[0] == "sqlite":
        return SQLiteStore(spec[1])
    from manowar_memory.stores.mongo import MongoStore

    return MongoStore(spec[1], database=spec[2])


def make_record(*args: Any, **kwargs: Any) -> Any:
    return _make_record(*args, agent=AGENT, **kwargs)


def _query() -> MemoryQuery:
    return MemoryQuery(scope=Scope(agent_wallet=AGENT, user_address=USER))


def store_worker(spec: tuple[str, ...], wid: str, shared_id: str, store: Any = None) -> dict[str, Any]:
    """One writer/reader. Uses ``store`` when given (threads share it), else opens its own."""
    own = store is None
    store = _open(spec) if own else store
    q = _query()
    ids: list[str] = []
    counts: list[int] = []
    try:
        for i in range(ROWS):
            rec = make_record(f"worker {wid} row {i} zebra", user=USER, created_at=T + i,
                              embedding=unit_vector(1.0, (i % 7) / 7, len(wid) / 10, 0.5))
            if i % 10 == 9:  # some batches too
                batch = [rec] + [make_record(f"worker {wid} row {i} batch {j} zebra", user=USER, created_at=T + i)
                                 for j in range(3)]
                ids += store.add_memories(batch)
            else:
                ids += store.add_memories([rec])
            if i % 4 == 0:
                counts.append(store.count_memories(q))
                assert store.list_memories(q, 5)
                assert store.keyword_search(q, "zebra row", 5)
                hits, _ = store.vector_search(q, [1.0, 0.2, 0.1, 0.5], MODEL, 5)
                assert hits
        ids += store.add_memories([make_record("colliding row", user=USER, created_at=T, record_id="vec_collide")])
        for _ in range(BUMPS):
            store.bump_access([shared_id], now_ms())
        now = now_ms()
        for k in range(3):
            store.upsert_session(Session(
                session_id="shared-session", agent_wallet=AGENT, user_address=USER, thread_id="t-shared",
                working_memory=WorkingMemory(context=[f"{wid} {k}"], state={"writer": wid}), expires_at=now + 3_600_000,
            ))
        store.upsert_pattern(Pattern(pattern_id="shared-pattern", agent_wallet=AGENT, trigger=PatternTrigger(value="x"),
                                     summary=f"pattern by {wid}", success_rate=0.5))
        store.upsert_transcript(Transcript(session_id=f"transcript-{wid}", agent_wallet=AGENT, user_address=USER,
                                           messages=[Message(role="user", content=f"hello from {wid}")]))
        return {"ids": ids, "counts": counts}
    finally:
        if own:
            store.close()


def engine_worker(spec: tuple[str, ...], wid: str) -> dict[str, Any]:
    """Engine-level writes from one process: an ingest batch and two turns on its own thread."""
    engine = MemoryEngine(store=_open(spec), embedder="fake", extractor=None)
    try:
        scope = Scope(agent_wallet=AGENT, user_address=USER, thread_id=f"thread-{wid}")
        ids = engine.ingest(scope, [f"engine {wid} item {i}" for i in range(15)], batch_size=4)
        for turn in range(2):
            engine.post_turn(scope, [{"role": "user", "content": f"turn {turn} from {wid}"},
                                     {"role": "assistant", "content": f"ack {turn} {wid}"}])
        found = engine.pre_turn(f"engine {wid} item", scope)
        return {"ids": ids, "prompt": found.prompt}
    finally:
        engine.close()


@pytest.fixture(params=["sqlite-file", pytest.param("mongo", marks=pytest.mark.mongo)])
def spec(request: pytest.FixtureRequest, tmp_path):
    if request.param == "sqlite-file":
        path = str(tmp_path / "concurrency.db")
        SQLiteStore(path).close()  # migrate once
        yield ("sqlite", path)
        return
    uri = request.getfixturevalue("mongo_uri")
    db = request.getfixturevalue("mongo_store_db")  # indexes already built
    yield ("mongo", uri, db.name)


def _check(store: Any, results: list[dict[str, Any]], workers: list[str], shared_id: str) -> None:
    q = _query()
    expected_contents = Counter({"shared": 1, "colliding row": len(workers)})
    for wid in workers:
        for i in range(ROWS):
            expected_contents[f"worker {wid} row {i} zebra"] += 1
            if i % 10 == 9:
                for j in range(3):
                    expected_contents[f"worker {wid} row {i} batch {j} zebra"] += 1
    returned = [i for r in results for i in r["ids"]] + [shared_id]
    assert len(returned) == len(set(returned)), "two inserts got the same id"
    rows = store.list_memories(q)
    assert Counter(r.content for r in rows) == expected_contents, "rows lost or duplicated"
    assert sorted(r.id for r in rows) == sorted(returned), "the stored ids are not the ids the writers got"
    assert store.count_memories(q) == sum(expected_contents.values())
    assert sum(1 for r in store.iter_memories(AGENT) if r.user_address == USER) == sum(expected_contents.values())
    collide = sorted(r.id for r in rows if r.content == "colliding row")
    assert len(collide) == len(workers) and "vec_collide" in collide
    assert store.get_memory(shared_id).access_count == BUMPS * len(workers), "access bumps were lost"
    sessions = store.find_sessions(MemoryQuery(scope=Scope(agent_wallet=AGENT, user_address=USER)), 100)
    assert [s.session_id for s in sessions] == ["shared-session"]
    assert store.get_pattern("shared-pattern") is not None
    assert len(store.find_patterns(MemoryQuery(scope=Scope(agent_wallet=AGENT)), 100)) == 1
    transcripts = store.search_transcripts(MemoryQuery(scope=Scope(agent_wallet=AGENT, user_address=USER)), None, 100)
    assert sorted(t.session_id for t, _ in transcripts) == sorted(f"transcript-{w}" for w in workers)
    for r in results:
        assert r["counts"] == sorted(r["counts"]), "a reader saw the row count go down"


def _seed(store: Any) -> str:
    (shared_id,) = store.add_memories([make_record("shared", user=USER, created_at=T - 1)])
    return shared_id


def test_threads_share_one_store(spec) -> None:
    store = _open(spec)
    try:
        shared_id = _seed(store)
        workers = [f"thread{i}" for i in range(THREADS)]
        with concurrent.futures.ThreadPoolExecutor(max_workers=THREADS) as pool:
            results = list(pool.map(lambda w: store_worker(spec, w, shared_id, store), workers))
        _check(store, results, workers, shared_id)
    finally:
        store.close()


def test_threads_with_their_own_stores(spec) -> None:
    store = _open(spec)
    try:
        shared_id = _seed(store)
        workers = [f"own{i}" for i in range(THREADS)]
        with concurrent.futures.ThreadPoolExecutor(max_workers=THREADS) as pool:
            results = list(pool.map(lambda w: store_worker(spec, w, shared_id), workers))
        _check(store, results, workers, shared_id)
    finally:
        store.close()


@pytest.mark.slow
def test_processes_and_threads_together(spec) -> None:
    store = _open(spec)
    try:
        shared_id = _seed(store)
        proc_workers = [f"proc{i}" for i in range(PROCESSES)]
        thread_workers = [f"mixed{i}" for i in range(2)]
        ctx = multiprocessing.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(max_workers=PROCESSES, mp_context=ctx) as procs, \
                concurrent.futures.ThreadPoolExecutor(max_workers=2) as threads:
            futures = [procs.submit(store_worker, spec, w, shared_id) for w in proc_workers]
            futures += [threads.submit(store_worker, spec, w, shared_id, store) for w in thread_workers]
            results = [f.result(timeout=300) for f in futures]
        _check(store, results, proc_workers + thread_workers, shared_id)
    finally:
        store.close()


@pytest.mark.slow
def test_engines_in_several_processes(spec) -> None:
    workers = [f"eng{i}" for i in range(PROCESSES)]
    ctx = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(max_workers=PROCESSES, mp_context=ctx) as procs:
        results = [f.result(timeout=300) for f in [procs.submit(engine_worker, spec, w) for w in workers]]
    store = _open(spec)
    try:
        rows = store.list_memories(MemoryQuery(scope=Scope(agent_wallet=AGENT, user_address=USER)))
        ingested = Counter(r.content for r in rows if r.source == "knowledge")
        assert ingested == Counter({f"engine {w} item {i}": 1 for w in workers for i in range(15)})
        assert sorted(r.id for r in rows if r.source == "knowledge") == sorted(i for r in results for i in r["ids"])
        assert sum(1 for r in rows if r.source == "session") == 2 * len(workers)  # one summary row per turn
        q = MemoryQuery(scope=Scope(agent_wallet=AGENT, user_address=USER), durable=False)
        assert len(store.find_sessions(q, 100)) == len(workers)  # one working buffer per thread
        transcripts = store.search_transcripts(q, None, 100)
        assert len(transcripts) == len(workers) and all(len(t.messages) == 4 for t, _ in transcripts)
        assert all(f"engine {w} item" in r["prompt"] for w, r in zip(workers, results))
    finally:
        store.close()


FACTS = 12


def _check_one_row_per_fact(store: Any, scope: Scope, ids_by_worker: list[list[str]], remembers: int) -> None:
    """Each fact is stored once, every worker got that row's id, and the other remembers reinforced it."""
    rows = store.list_memories(MemoryQuery(scope=scope, sources=("fact",), active_only=False))
    by_content = Counter(r.content.lower() for r in rows)
    assert by_content == Counter({f"fact number {n}": 1 for n in range(FACTS)}), "a fact was stored twice"
    by_id = {r.id: r for r in rows}
    for n in range(FACTS):
        got = {ids[n] for ids in ids_by_worker}
        assert len(got) == 1 and got <= set(by_id), f"workers got different rows for fact {n}: {got}"
        assert by_id[got.pop()].access_count == remembers - 1  # every other remember reinforced it


def test_concurrent_remember_of_one_fact_stores_it_once_threads(spec) -> None:
    engine = MemoryEngine(store=_open(spec), embedder="fake", extractor=None)
    try:
        scope = Scope(agent_wallet=AGENT, user_address=USER)
        with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
            per_fact = [list(pool.map(lambda _, n=n: engine.remember(scope, f"fact number {n}"), range(8)))
                        for n in range(FACTS)]
        assert all(sum(not r.deduplicated for r in results) == 1 for results in per_fact)
        ids_by_worker = [[per_fact[n][w].id for n in range(FACTS)] for w in range(8)]
        _check_one_row_per_fact(engine.store, scope, ids_by_worker, 8)
    finally:
        engine.close()


def remember_worker(spec: tuple[str, ...], barrier: Any, out: Any, wid: int) -> None:
    """One process: wait for the others, then remember every fact (same order: maximal contention)."""
    engine = MemoryEngine(store=_open(spec), embedder="fake", extractor=None)
    try:
        scope = Scope(agent_wallet=AGENT, user_address=USER)
        barrier.wait(timeout=120)
        text = "FACT number {}  " if wid % 2 else "fact number {}"  # one fact: the hash trims and lower-cases
        out.put((wid, [engine.remember(scope, text.format(n)).id for n in range(FACTS)]))
    finally:
        engine.close()


@pytest.mark.slow
def test_concurrent_remember_of_one_fact_stores_it_once_processes(spec) -> None:
    ctx = multiprocessing.get_context("spawn")
    barrier, out = ctx.Barrier(PROCESSES + 1), ctx.Queue()
    procs = [ctx.Process(target=remember_worker, args=(spec, barrier, out, w)) for w in range(PROCESSES + 1)]
    for p in procs:
        p.start()
    try:
        results = dict(out.get(timeout=300) for _ in procs)
    finally:
        for p in procs:
            p.join(timeout=60)
    assert all(p.exitcode == 0 for p in procs)
    store = _open(spec)
    try:
        _check_one_row_per_fact(store, Scope(agent_wallet=AGENT, user_address=USER), list(results.values()),
                                len(procs))
    finally:
        store.close()
