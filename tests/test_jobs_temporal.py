"""Maintenance jobs on the real Temporal dev server (TEMPORAL_ADDRESS, default 127.0.0.1:7233):
the same job gives the same result as inline, the job record is written, and the pause /
resume signals and the state query work."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from manowar_memory._util import DAY_MS, now_ms
from manowar_memory.jobs import run_job
from manowar_memory.records import MemoryRecord, Pattern, PatternStep, PatternTrigger
from manowar_memory.stores.sqlite import SQLiteStore

pytestmark = pytest.mark.temporal

AGENT = "0xagent0001"


def _seed(store: SQLiteStore, now: int) -> None:
    rows = []
    for user in ("alice", "bob"):
        for i, content in enumerate(["likes tea", "likes tea", "likes tea", "works remotely"]):
            created = now - (i + 1) * DAY_MS
            rows.append(MemoryRecord(id=f"m_{user}_{i}", agent_wallet=AGENT, user_address=user, content=content,
                                     created_at=created, updated_at=created, last_accessed_at=created))
    store.add_memories(rows)


@pytest.fixture
async def temporal_env(temporal_address):
    from temporalio.client import Client

    from manowar_memory.jobs.temporal import create_worker

    client = await Client.connect(temporal_address)
    store = SQLiteStore(":memory:")
    queue = f"manowar-test-{uuid.uuid4().hex[:12]}"
    async with create_worker(client, store, task_queue=queue, heartbeat_every=1.0):
        yield client, store, queue
    store.close()


async def test_consolidate_on_temporal_matches_inline(temporal_env):
    from manowar_memory.jobs.temporal import start_temporal_job

    client, store, queue = temporal_env
    now = now_ms()
    _seed(store, now)
    inline_store = SQLiteStore(":memory:")
    _seed(inline_store, now)
    inline = run_job(inline_store, "consolidate", {"agent_wallet": AGENT})

    job = await start_temporal_job(client, store, "consolidate", {"agent_wallet": AGENT}, task_queue=queue)
    assert job.execution == "temporal" and job.temporal_workflow_id == f"memory-job:{job.job_id}"
    result = await client.get_workflow_handle(job.temporal_workflow_id).result()
    assert result["consolidated"] == inline.data["consolidated"] == 4
    assert sorted(result["supersededIds"]) == sorted(inline.data["supersededIds"])
    record = store.get_job(job.job_id)
    assert record.status == "completed" and record.data["consolidated"] == 4 and record.temporal_run_id
    status = lambda s: {r.id: r.status for r in s.iter_memories(AGENT)}  # noqa: E731
    assert status(store) == status(inline_store)
    inline_store.close()


async def test_pause_resume_and_state_query(temporal_env):
    from manowar_memory.jobs.temporal import get_temporal_job, start_temporal_job
    from manowar_memory.jobs.temporal_workflows import MemoryJobWorkflow

    client, store, queue = temporal_env
    _seed(store, now_ms())
    job = await start_temporal_job(client, store, "decay_update", {"half_life_days": 1}, task_queue=queue,
                                   start_paused=True)
    handle = client.get_workflow_handle(job.temporal_workflow_id)
    await asyncio.sleep(0.5)
    state = await handle.query(MemoryJobWorkflow.get_state)
    assert state["status"] == "paused" and state["processed"] == 0
    refreshed = await get_temporal_job(client, store, job.job_id)
    assert refreshed.status == "running" and refreshed.data["temporalState"]["paused"] is True
    assert all(r.decay_score == 1.0 for r in store.iter_memories(AGENT)), "nothing ran while paused"
    await handle.signal(MemoryJobWorkflow.resume)
    result = await handle.result()
    assert result["updated"] == 8
    state = await handle.query(MemoryJobWorkflow.get_state)
    assert state["status"] == "completed" and state["processed"] == 8
    assert store.get_memory("m_alice_0").decay_score == pytest.approx(0.5, abs=0.01)


async def test_invalid_job_fails_without_retry_and_records_failure(temporal_env):
    from temporalio.client import WorkflowFailureError

    from manowar_memory.jobs.temporal import start_temporal_job

    client, store, queue = temporal_env
    job = await start_temporal_job(client, store, "cleanup", {"older_than_days": 0}, task_queue=queue)
    with pytest.raises(WorkflowFailureError):
        await asyncio.wait_for(client.get_workflow_handle(job.temporal_workflow_id).result(), 30)
    record = store.get_job(job.job_id)
    assert record.status == "failed" and "older_than_days > 0" in record.error


async def test_skill_promotion_workflow(temporal_env):
    from manowar_memory.jobs.temporal import start_skill_promotion

    client, store, queue = temporal_env
    store.upsert_pattern(Pattern(pattern_id="pat_t", agent_wallet=AGENT, trigger=PatternTrigger(value="a"),
                                 steps=[PatternStep(action="a", order=0)], summary="a", success_rate=0.9,
                                 execution_count=8))
    ok = await start_skill_promotion(client, "pat_t", "Skill A", task_queue=queue)
    assert ok["success"] is True and ok["skillId"].startswith("skill_pat_t_")
    missing = await start_skill_promotion(client, "pat_missing", "Skill B", task_queue=queue)
    assert missing["success"] is False and missing["errors"]
