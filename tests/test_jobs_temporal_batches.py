"""Batched maintenance on the real Temporal dev server: consolidate and decay_update in small
batches with continue-as-new give what the inline job gives on the same data; job records
follow the workflow's real end (completed, terminated, cancelled)."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from manowar_memory._util import DAY_MS, now_ms
from manowar_memory.jobs import run_job
from manowar_memory.records import MemoryRecord
from manowar_memory.stores.sqlite import SQLiteStore

temporal = pytest.mark.temporal

AGENTS = ("0xagentA001", "0xagentB002")


def seed_duplicates(store, now: int) -> int:
    """Rows of two agents, seven users each (one of them no user), with duplicates inside a
    user, the same text across users and across modes and HAIs (not duplicates), ties on
    createdAt, and rows already superseded or deleted. Returns how many rows consolidation must supersede."""
    rows = []
    expected = 0
    for agent in AGENTS:
        for u, user in enumerate([None, *(f"user{n}" for n in range(6))]):
            for c, content in enumerate(["likes tea", "lives in Lisbon", "uses vim"]):
                copies = (u + c) % 4  # 0..3 copies beyond the first
                expected += copies
                for k in range(copies + 1):
                    created = now - (10 + k) * DAY_MS if k != 1 else now - 10 * DAY_MS  # k=1 ties with k=0
                    rows.append(MemoryRecord(id=f"{agent}_{u}_{c}_{k}", agent_wallet=agent, user_address=user,
                                             content=content if k % 2 == 0 else f"  {content.upper()} ",
                                             created_at=created, updated_at=created, last_accessed_at=created))
            # the same text in HAI h1 (twice), HAI h2 and global: one duplicate, in h1 only
            for name, mode, hai, copies in (("h1", "local", "h1", 2), ("h2", "local", "h2", 1),
                                             ("g", "global", None, 1)):
                expected += copies - 1
                for k in range(copies):
                    created = now - (20 + k) * DAY_MS
                    rows.append(MemoryRecord(id=f"{agent}_{u}_{name}_{k}", agent_wallet=agent, user_address=user,
                                             mode=mode, hai_id=hai, content="likes tea", created_at=created,
                                             updated_at=created, last_accessed_at=created))
            gone = MemoryRecord(id=f"{agent}_{u}_old", agent_wallet=agent, user_address=user, content="likes tea",
                                created_at=now - 50 * DAY_MS, updated_at=now - 50 * DAY_MS, decay_score=0.01,
                                metadata={"status": "superseded" if u % 2 else "deleted"})
            rows.append(gone)
    store.add_memories(rows)
    return expected


def snapshot(store) -> dict[str, tuple]:
    return {r.id: (r.status, r.metadata.get("supersededBy"), r.metadata.get("duplicateFingerprint"), r.decay_score)
            for agent in AGENTS for r in store.iter_memories(agent)}


async def run_chain(client, workflow_id: str) -> list[str]:
    """The run ids of a workflow from its first run, following continue-as-new in the histories."""
    desc = await client.get_workflow_handle(workflow_id).describe()
    first = desc.raw_info.first_run_id or desc.run_id
    runs = [first]
    while True:
        history = await client.get_workflow_handle(workflow_id, run_id=runs[-1]).fetch_history()
        last = history.events[-1]
        if not last.HasField("workflow_execution_continued_as_new_event_attributes"):
            return runs
        runs.append(last.workflow_execution_continued_as_new_event_attributes.new_execution_run_id)


@pytest.fixture
async def client(temporal_address):
    from temporalio.client import Client

    return await Client.connect(temporal_address)


@pytest.fixture
async def worker_store(client):
    from manowar_memory.jobs.temporal import create_worker

    store = SQLiteStore(":memory:")
    queue = f"manowar-test-{uuid.uuid4().hex[:12]}"
    async with create_worker(client, store, task_queue=queue, heartbeat_every=1.0):
        yield store, queue
    store.close()


@pytest.fixture(params=["sqlite", "mongo"])
async def batch_store(request, client):
    """The store the worker uses: SQLite in memory, or MongoDB (both have their own batch reads)."""
    from manowar_memory.jobs.temporal import create_worker

    if request.param == "mongo":
        request.getfixturevalue("mongo_uri")
        from manowar_memory.stores.mongo import MongoStore

        db = request.getfixturevalue("mongo_db")
        store = MongoStore(client=db.client, database=db.name)
    else:
        store = SQLiteStore(":memory:")
    queue = f"manowar-test-{uuid.uuid4().hex[:12]}"
    async with create_worker(client, store, task_queue=queue, heartbeat_every=1.0):
        yield store, queue
    store.close()


@temporal
async def test_batched_consolidation_with_continue_as_new_matches_inline(client, batch_store):
    from manowar_memory.jobs.temporal import get_temporal_job, start_temporal_job

    store, queue = batch_store
    now = now_ms()
    expected = seed_duplicates(store, now)
    inline_store = SQLiteStore(":memory:")
    seed_duplicates(inline_store, now)
    inline = run_job(inline_store, "consolidate", {"agent_wallets": list(AGENTS)})
    assert inline.data["consolidated"] == expected > 0

    job = await start_temporal_job(client, store, "consolidate", {"agent_wallets": list(AGENTS)}, task_queue=queue,
                                   batch_size=6, batches_per_run=3)
    result = await client.get_workflow_handle(job.temporal_workflow_id).result()
    runs = await run_chain(client, job.temporal_workflow_id)
    assert len(runs) > 1 and result["temporalRuns"] == len(runs)
    assert result["batches"] > 3
    for key in ("consolidated", "duplicateGroups", "scanned", "byAgent"):
        assert result[key] == inline.data[key], key
    assert sorted(result["supersededIds"]) == sorted(inline.data["supersededIds"])
    assert snapshot(store) == snapshot(inline_store)
    record = await get_temporal_job(client, store, job.job_id)
    assert record.status == "completed" and record.data["consolidated"] == expected
    assert record.temporal_run_id == runs[-1]
    inline_store.close()


@temporal
async def test_batched_decay_with_continue_as_new_matches_inline(client, batch_store):
    from manowar_memory.jobs.temporal import start_temporal_job

    store, queue = batch_store
    now = now_ms()

    def seed(s) -> None:
        rows = [MemoryRecord(id=f"d{i}", agent_wallet=AGENTS[i % 2], content=f"fact {i}", created_at=now - i * DAY_MS,
                             updated_at=now - i * DAY_MS, decay_score=0.9,
                             metadata={"status": "superseded"} if i % 5 == 3 else
                             ({"status": "deleted"} if i % 7 == 6 else {}))
                for i in range(23)]
        s.add_memories(rows)

    seed(store)
    inline_store = SQLiteStore(":memory:")
    seed(inline_store)
    inline = run_job(inline_store, "decay_update", {"half_life_days": 10})
    job = await start_temporal_job(client, store, "decay_update", {"half_life_days": 10}, task_queue=queue,
                                   batch_size=4, batches_per_run=2)
    result = await client.get_workflow_handle(job.temporal_workflow_id).result()
    assert len(await run_chain(client, job.temporal_workflow_id)) > 1
    assert result["updated"] == inline.data["updated"] == 17
    assert result["skippedInactive"] == inline.data["skippedInactive"] == 6
    assert result["avgDecayScore"] == pytest.approx(inline.data["avgDecayScore"], rel=1e-5)
    assert "_scoreSum" not in result
    ours = {r.id: r.decay_score for r in store.iter_memories()}
    theirs = {r.id: r.decay_score for r in inline_store.iter_memories()}
    assert ours.keys() == theirs.keys()
    for key, score in theirs.items():
        assert ours[key] == pytest.approx(score, rel=1e-5), key
    assert ours["d3"] == 0.9 and ours["d5"] == pytest.approx(0.5 ** 0.5, rel=1e-5)
    assert store.get_job(job.job_id).status == "completed"
    inline_store.close()


def test_rerunning_a_consolidation_batch_counts_but_does_not_rewrite():
    """A batch that runs again (its worker died after writing) reports the same rows and
    writes nothing new: the rows carry the job id."""
    from manowar_memory.jobs.batched import run_job_batch

    store = SQLiteStore(":memory:")
    now = now_ms()
    seed_duplicates(store, now)
    params = {"agent_wallets": list(AGENTS)}
    first = run_job_batch(store, "consolidate", params, None, None, batch_size=6, now=now, job_id="memjob_x")
    before = snapshot(store)
    revs = {r.id: r.updated_at for r in store.iter_memories()}
    again = run_job_batch(store, "consolidate", params, None, None, batch_size=6, now=now + 5, job_id="memjob_x")
    assert again == first and first["report"]["consolidated"] > 0
    assert snapshot(store) == before
    assert {r.id: r.updated_at for r in store.iter_memories()} == revs, "nothing was written twice"
    other = run_job_batch(store, "consolidate", params, None, None, batch_size=6, now=now, job_id="memjob_other")
    assert other["report"]["consolidated"] == 0, "another job does not count this job's rows"
    store.close()


@temporal
async def test_record_of_terminated_and_cancelled_workflows_becomes_failed(client, worker_store):
    from temporalio.client import WorkflowFailureError

    from manowar_memory.jobs.temporal import get_temporal_job, start_temporal_job

    store, queue = worker_store
    store.add_memories([MemoryRecord(id="r1", agent_wallet=AGENTS[0], content="x")])
    ended = {}
    for how in ("terminate", "cancel"):
        job = await start_temporal_job(client, store, "decay_update", {"half_life_days": 5}, task_queue=queue,
                                       start_paused=True)
        handle = client.get_workflow_handle(job.temporal_workflow_id)
        running = await get_temporal_job(client, store, job.job_id)
        assert running.status == "running" and running.data["temporalState"]["paused"] is True
        if how == "terminate":
            await handle.terminate(reason="operator stopped it")
        else:
            await handle.cancel()
        with pytest.raises(WorkflowFailureError):
            await asyncio.wait_for(handle.result(), 30)
        assert store.get_job(job.job_id).status == "running", "nothing wrote the record yet"
        ended[how] = await get_temporal_job(client, store, job.job_id)
        stored = store.get_job(job.job_id)
        assert stored == ended[how], "the refreshed record is persisted"
        assert stored.status == "failed" and stored.completed_at is not None
    assert ended["terminate"].error == "workflow terminated: operator stopped it"
    assert ended["terminate"].data["temporalStatus"] == "TERMINATED"
    assert ended["cancel"].error.startswith("workflow cancelled")
    assert ended["cancel"].data["temporalStatus"] == "CANCELED"
    assert store.get_memory("r1").decay_score == 1.0, "neither job ran"


@temporal
async def test_completed_workflow_fills_a_record_left_running(client, worker_store):
    from manowar_memory.jobs.temporal import get_temporal_job, start_temporal_job

    store, queue = worker_store
    store.add_memories([MemoryRecord(id="r1", agent_wallet=AGENTS[0], content="x", created_at=now_ms() - 5 * DAY_MS)])
    job = await start_temporal_job(client, store, "decay_update", {"half_life_days": 5}, task_queue=queue)
    result = await client.get_workflow_handle(job.temporal_workflow_id).result()
    # as if the worker died between finishing the workflow and writing the record
    store.put_job(job.model_copy(update={"status": "running", "completed_at": None, "data": {"input": {}}}))
    record = await get_temporal_job(client, store, job.job_id)
    assert record.status == "completed" and record.data["updated"] == result["updated"] == 1
    assert record.data["temporalStatus"] == "COMPLETED" and record.completed_at is not None
    assert store.get_job(job.job_id).status == "completed"


@temporal
@pytest.mark.redis
async def test_batches_invalidate_the_engines_query_cache_for_the_changed_user(client, redis_url, redis_key_prefix,
                                                                              redis_client):
    from manowar_memory import MemoryEngine, Scope
    from manowar_memory.cache.redis import RedisCache
    from manowar_memory.jobs.temporal import create_worker, start_temporal_job

    engine = MemoryEngine(store=SQLiteStore(":memory:"), embedder="fake", extractor=None,
                          cache=RedisCache(redis_url, prefix=redis_key_prefix, socket_timeout=2.0))
    alice, bob = (Scope(agent_wallet=AGENTS[0], user_address=u) for u in ("alice", "bob"))

    def ids(query, scope):
        before = engine.query_cache_hits
        result = engine.search_layers(query, scope, ["vectors"], limit=10)
        return {c.id for hits in result.layers.values() for c in hits}, engine.query_cache_hits > before

    (old,) = engine.ingest(alice, [{"content": "Alice drinks green tea", "created_at": now_ms() - 2 * DAY_MS}])
    (new,) = engine.ingest(alice, [{"content": "alice drinks green tea", "created_at": now_ms() - DAY_MS}])
    (bobs,) = engine.ingest(bob, [{"content": "Bob drinks black coffee", "created_at": now_ms() - DAY_MS}])
    assert ids("green tea", alice) == ({old, new}, False)
    assert ids("green tea", alice) == ({old, new}, True)
    assert ids("black coffee", bob) == ({bobs}, False)
    queue = f"manowar-test-{uuid.uuid4().hex[:12]}"
    async with create_worker(client, engine, task_queue=queue):
        job = await start_temporal_job(client, engine, "consolidate", {"agent_wallet": AGENTS[0]}, task_queue=queue,
                                       batch_size=1)
        result = await client.get_workflow_handle(job.temporal_workflow_id).result()
    assert result["consolidated"] == 1 and result["batches"] == 2
    assert ids("green tea", alice) == ({new}, False), "alice's cached answer was dropped"
    assert ids("black coffee", bob) == ({bobs}, True), "bob's was not touched"
    engine.close()


class _PlainStore:
    """A store known to the batches only through its roles: no name, no private members."""

    def __init__(self, inner: SQLiteStore) -> None:
        self._inner = inner

    def __getattr__(self, name: str):
        if name in ("name", "_conn", "memory"):
            raise AttributeError(name)
        return getattr(self._inner, name)


@pytest.mark.parametrize("job_type, params, batch_size", [
    ("consolidate", {"agent_wallets": list(AGENTS)}, 5),
    ("decay_update", {"half_life_days": 7}, 4),
])
def test_batches_over_any_store_add_up_to_the_inline_job(job_type, params, batch_size):
    from manowar_memory.jobs.batched import run_job_batch

    now = now_ms()
    inline_store, plain = SQLiteStore(":memory:"), SQLiteStore(":memory:")
    for s in (inline_store, plain):
        seed_duplicates(s, now)
    inline = run_job(inline_store, job_type, params)
    groups: dict[tuple, int] = {}
    for r in plain.iter_memories():
        groups[(r.agent_wallet, r.user_address)] = groups.get((r.agent_wallet, r.user_address), 0) + 1
    bound = batch_size if job_type == "decay_update" else max(batch_size, *groups.values())  # whole groups
    store = _PlainStore(plain)
    out = run_job_batch(store, job_type, params, None, None, batch_size=batch_size, now=now, job_id="memjob_p")
    batches = 1
    while out["cursor"] is not None:
        assert 0 < out["rows"] <= bound, "a batch stays bounded"
        out = run_job_batch(store, job_type, params, out["cursor"], out["report"], batch_size=batch_size, now=now,
                            job_id="memjob_p")
        batches += 1
    assert batches > 3
    report = out["report"]
    keys = (("consolidated", "duplicateGroups", "scanned", "byAgent") if job_type == "consolidate"
            else ("updated", "skippedInactive"))
    for key in keys:
        assert report[key] == inline.data[key], key
    if job_type == "decay_update":
        assert report["avgDecayScore"] == pytest.approx(inline.data["avgDecayScore"], rel=1e-5)
    else:
        assert snapshot(plain) == snapshot(inline_store)
    inline_store.close()
    plain.close()
