"""``manowar worker`` as a real process against the Temporal dev server and a SQLite file:
it completes a job and stops cleanly on SIGTERM, and a worker SIGKILLed in the middle of a
batched consolidation is replaced by a fresh one that finishes the job with every duplicate
superseded exactly once."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import uuid
from pathlib import Path

import pytest

from manowar_memory._util import DAY_MS, now_ms
from manowar_memory.jobs.batched import JOB_MARKER_KEY
from manowar_memory.records import MemoryRecord
from manowar_memory.stores.sqlite import SQLiteStore

pytestmark = pytest.mark.temporal

AGENT = "0xworker0001"
CONTENTS = ("likes tea", "lives in Lisbon", "uses vim")


def seed(store: SQLiteStore, users: int, copies: int) -> int:
    """``users`` users, each with ``copies`` rows of every content; returns the duplicates."""
    now = now_ms()
    rows = [MemoryRecord(id=f"w_{u}_{c}_{k}", agent_wallet=AGENT, user_address=f"user{u:02d}", content=text,
                         created_at=now - (k + 1) * DAY_MS, updated_at=now - (k + 1) * DAY_MS)
            for u in range(users) for c, text in enumerate(CONTENTS) for k in range(copies)]
    store.add_memories(rows)
    return users * len(CONTENTS) * (copies - 1)


async def start_worker(db: Path, queue: str, address: str) -> asyncio.subprocess.Process:
    """``manowar worker`` on ``queue``; the address comes from TEMPORAL_ADDRESS. Returns once it polls."""
    env = {**os.environ, "TEMPORAL_ADDRESS": address, "PYTHONUNBUFFERED": "1"}
    env.pop("TEMPORAL_NAMESPACE", None)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "manowar_memory.cli", "worker", "--store", f"sqlite:///{db}", "--task-queue", queue,
        "--heartbeat-every", "0.5", "--sticky-timeout", "1", env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), 60)
    assert line.startswith(b"worker ready:"), line
    assert f"task_queue={queue}".encode() in line and b"namespace=default" in line
    return proc


@pytest.fixture
async def client(temporal_address):
    from temporalio.client import Client

    return await Client.connect(temporal_address)


async def test_worker_command_runs_a_job_and_stops_on_sigterm(client, temporal_address, tmp_path):
    from manowar_memory.jobs.temporal import start_temporal_job

    db = tmp_path / "memory.db"
    store = SQLiteStore(db)
    expected = seed(store, users=3, copies=3)
    queue = f"manowar-cli-{uuid.uuid4().hex[:10]}"
    proc = await start_worker(db, queue, temporal_address)
    try:
        job = await start_temporal_job(client, store, "consolidate", {"agent_wallet": AGENT}, task_queue=queue,
                                       batch_size=4, batches_per_run=2)
        result = await asyncio.wait_for(client.get_workflow_handle(job.temporal_workflow_id).result(), 60)
        assert result["consolidated"] == expected
        record = store.get_job(job.job_id)
        assert record.status == "completed" and record.data["consolidated"] == expected
        assert sum(r.status == "superseded" for r in store.iter_memories(AGENT)) == expected
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        out = await asyncio.wait_for(proc.stdout.read(), 60)
        rc = await asyncio.wait_for(proc.wait(), 60)
        store.close()
    assert rc == 0, out.decode(errors="replace")
    assert b"worker stopped" in out


async def _activity_retried(client, workflow_id: str) -> bool:
    """Whether any activity of the workflow's run chain ran more than once."""
    desc = await client.get_workflow_handle(workflow_id).describe()
    run_id = desc.raw_info.first_run_id or desc.run_id
    while run_id:
        history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
        run_id = ""
        for event in history.events:
            if event.HasField("activity_task_started_event_attributes") and \
                    event.activity_task_started_event_attributes.attempt > 1:
                return True
            if event.HasField("workflow_execution_continued_as_new_event_attributes"):
                run_id = event.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
    return False


async def test_worker_killed_mid_consolidation_is_replaced_and_nothing_is_lost_or_doubled(
        client, temporal_address, tmp_path):
    from manowar_memory.jobs.temporal import get_temporal_job, start_temporal_job
    from manowar_memory.jobs.temporal_workflows import MemoryJobWorkflow

    db = tmp_path / "memory.db"
    store = SQLiteStore(db)
    expected = seed(store, users=6, copies=4)  # one user (12 rows) per batch: 6 batches
    queue = f"manowar-kill-{uuid.uuid4().hex[:10]}"
    first = await start_worker(db, queue, temporal_address)
    second = None
    try:
        job = await start_temporal_job(
            client, store, "consolidate", {"agent_wallet": AGENT}, task_queue=queue, batch_size=12,
            batches_per_run=2, heartbeat_timeout=2, retry_initial_interval=0.2, batch_delay=1.0)
        handle = client.get_workflow_handle(job.temporal_workflow_id)

        async def mid_batch() -> None:
            # a batch has written its rows but the workflow has not taken its report yet
            while True:
                marked = sum(r.metadata.get(JOB_MARKER_KEY) == job.job_id for r in store.iter_memories(AGENT))
                state = await handle.query(MemoryJobWorkflow.get_state)
                if 0 < state["processed"] < marked < expected:
                    return
                await asyncio.sleep(0.05)

        await asyncio.wait_for(mid_batch(), 60)
        first.kill()
        await first.wait()
        assert first.returncode == -signal.SIGKILL
        second = await start_worker(db, queue, temporal_address)
        result = await asyncio.wait_for(handle.result(), 90)
    finally:
        for proc in (first, second):
            if proc is not None and proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
                await asyncio.wait_for(proc.wait(), 60)
    assert await _activity_retried(client, job.temporal_workflow_id), "the killed batch ran again"
    assert result["consolidated"] == expected and result["temporalRuns"] > 1
    rows = list(store.iter_memories(AGENT))
    superseded = [r for r in rows if r.status == "superseded"]
    assert len(superseded) == expected
    assert all(r.metadata[JOB_MARKER_KEY] == job.job_id for r in superseded)
    assert len({r.metadata["supersededAt"] for r in superseded}) == 1, "one job timestamp for every batch"
    keepers: dict[tuple[str | None, str], list[str]] = {}
    for r in rows:
        if r.status == "active":
            keepers.setdefault((r.user_address, r.content), []).append(r.id)
    assert len(keepers) == 6 * len(CONTENTS) and all(len(ids) == 1 for ids in keepers.values())
    assert all(r.metadata["supersededBy"] in {ids[0] for ids in keepers.values()} for r in superseded)
    record = await get_temporal_job(client, store, job.job_id)
    assert record.status == "completed" and record.data["consolidated"] == expected
    assert record.data["byAgent"] == {AGENT: expected}
    store.close()


def test_an_unreachable_temporal_is_a_configuration_error_that_says_what_to_set() -> None:
    import asyncio

    from manowar_memory.errors import ConfigurationError
    from manowar_memory.jobs.temporal import connect_temporal

    with pytest.raises(ConfigurationError, match=r"cannot connect to Temporal at 127\.0\.0\.1:9.*TEMPORAL_ADDRESS"):
        asyncio.run(connect_temporal("127.0.0.1:9", "default"))


@pytest.mark.redis
def test_the_worker_with_redis_runs_jobs_on_an_engine_whose_query_cache_they_invalidate(redis_url) -> None:
    from manowar_memory.cli import _worker_target
    from manowar_memory.jobs.runner import query_cache_of
    from manowar_memory.stores.sqlite import SQLiteStore

    store = SQLiteStore(":memory:")
    try:
        assert _worker_target(store, None) is store and query_cache_of(store) is None
        engine = _worker_target(store, redis_url)
        assert engine.store is store and query_cache_of(engine) is not None
        assert engine.query_cache.cache.name == "redis"
        engine.close()
    finally:
        store.close()
