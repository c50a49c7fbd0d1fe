"""Two ``manowar worker`` processes on one task queue over the replica set: the one running a
batch of a batched consolidation is SIGKILLed; the other, already polling, runs the lost batch
again and the job completes once, superseding exactly what the inline job supersedes on the
same data."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import uuid

import pytest

from manowar_memory.jobs import run_job
from manowar_memory.jobs.batched import JOB_MARKER_KEY
from manowar_memory.stores.sqlite import SQLiteStore

from test_temporal_worker import AGENT, _activity_retried, seed

pytestmark = [pytest.mark.cluster, pytest.mark.mongo, pytest.mark.temporal, pytest.mark.xdist_group("replica-set")]


async def start_worker(store_uri: str, queue: str, address: str) -> asyncio.subprocess.Process:
    """``manowar worker --store STORE_URI`` on ``queue``; returns once it polls."""
    env = {**os.environ, "TEMPORAL_ADDRESS": address, "PYTHONUNBUFFERED": "1"}
    env.pop("TEMPORAL_NAMESPACE", None)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "manowar_memory.cli", "worker", "--store", store_uri, "--task-queue", queue,
        "--heartbeat-every", "0.5", "--sticky-timeout", "1", env=env, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT)
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), 60)
    assert line.startswith(b"worker ready:"), line
    return proc


def outcome(store) -> dict[str, tuple]:
    """Per row content and user: its status and what superseded it (ids differ in nothing)."""
    return {r.id: (r.status, r.metadata.get("supersededBy")) for r in store.iter_memories(AGENT)}


async def test_two_workers_one_killed_mid_batch_job_completes_once_as_inline(replica_set, cluster_db,
                                                                            temporal_address):
    from temporalio.client import Client

    from manowar_memory.jobs.temporal import get_temporal_job, start_temporal_job
    from manowar_memory.jobs.temporal_workflows import MemoryJobWorkflow
    from manowar_memory.stores.mongo import MongoStore

    client = await Client.connect(temporal_address)
    uri = f"mongodb://{','.join(replica_set.hosts)}/{cluster_db}?replicaSet={replica_set.name}"
    store = MongoStore(uri)
    expected = seed(store, users=6, copies=4)  # 12 rows a user, one user per batch: 6 batches
    inline_store = SQLiteStore(":memory:")
    for row in store.iter_memories(AGENT):  # the same rows, ids and times
        inline_store.add_memories([row])
    inline = run_job(inline_store, "consolidate", {"agent_wallet": AGENT})
    assert inline.data["consolidated"] == expected > 0

    queue = f"manowar-two-{uuid.uuid4().hex[:10]}"
    workers = [await start_worker(uri, queue, temporal_address) for _ in range(2)]
    try:
        job = await start_temporal_job(
            client, store, "consolidate", {"agent_wallet": AGENT}, task_queue=queue, batch_size=12,
            batches_per_run=2, heartbeat_timeout=2, retry_initial_interval=0.2, batch_delay=1.0)
        handle = client.get_workflow_handle(job.temporal_workflow_id)

        async def running_batch_worker() -> int:
            """The pid of the worker holding a batch that has written its rows but not reported."""
            while True:
                marked = sum(r.metadata.get(JOB_MARKER_KEY) == job.job_id for r in store.iter_memories(AGENT))
                state = await handle.query(MemoryJobWorkflow.get_state)
                if 0 < state["processed"] < marked < expected:
                    pending = (await handle.describe()).raw_description.pending_activities
                    identity = pending[0].last_worker_identity if pending else ""
                    if identity.partition("@")[0].isdigit():
                        return int(identity.partition("@")[0])
                await asyncio.sleep(0.05)

        pid = await asyncio.wait_for(running_batch_worker(), 60)
        victim = next(w for w in workers if w.pid == pid)
        survivor = next(w for w in workers if w.pid != pid)
        os.kill(pid, signal.SIGKILL)
        await victim.wait()
        result = await asyncio.wait_for(handle.result(), 90)
        assert survivor.returncode is None, "the other worker kept serving"
    finally:
        for proc in workers:
            if proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
                await asyncio.wait_for(proc.wait(), 60)
    assert await _activity_retried(client, job.temporal_workflow_id), "the killed batch ran again"
    assert result["temporalRuns"] > 1
    for key in ("consolidated", "duplicateGroups", "scanned", "byAgent"):
        assert result[key] == inline.data[key], key
    assert sorted(result["supersededIds"]) == sorted(inline.data["supersededIds"])
    assert outcome(store) == outcome(inline_store)
    superseded = [r for r in store.iter_memories(AGENT) if r.status == "superseded"]
    assert len({r.metadata["supersededAt"] for r in superseded}) == 1, "one job timestamp: the job ran once"
    record = await get_temporal_job(client, store, job.job_id)
    assert record.status == "completed" and record.data["consolidated"] == expected
    store.close()
    inline_store.close()
