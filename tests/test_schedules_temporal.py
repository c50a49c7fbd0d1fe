"""Maintenance schedules as real Temporal schedules on the dev server (TEMPORAL_ADDRESS):
the table with its crons, time zone, catch-up window and overlap policies; pause, resume and
replace; a triggered run that a worker executes and whose job record completes; delete."""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import timedelta

import pytest

from manowar_memory._util import now_ms
from manowar_memory.jobs import ScheduleNotFoundError, ScheduleSettings, install_schedules, remove_schedules
from manowar_memory.jobs.schedules import next_fire_times, schedule_table
from manowar_memory.records import MemoryRecord
from manowar_memory.stores.sqlite import SQLiteStore

pytestmark = pytest.mark.temporal

AGENT = "0xMixedCase01"
IDS = {"memory-daily-consolidation", "memory-hourly-decay", "memory-daily-cleanup",
       f"memory-daily-patterns:{AGENT}", f"memory-weekly-archive:{AGENT}"}


async def _until(check, what: str, deadline_s: float = 20.0):
    """Poll ``check`` (async, returns a value or None) until it gives a value; fail with ``what``."""
    end = time.monotonic() + deadline_s
    while True:
        value = await check()
        if value:
            return value
        if time.monotonic() > end:
            pytest.fail(f"Temporal never reported {what}")
        await asyncio.sleep(0.1)


@pytest.fixture
async def env(temporal_address):
    from temporalio.client import Client

    from manowar_memory.jobs.temporal import create_worker
    from manowar_memory.jobs.temporal_schedules import TemporalSchedules

    client = await Client.connect(temporal_address)
    store = SQLiteStore(":memory:")
    queue = f"manowar-sched-{uuid.uuid4().hex[:10]}"
    backend = TemporalSchedules(client, task_queue=queue, id_prefix=f"{queue}/", store=store,
                                settings=ScheduleSettings())
    async with create_worker(client, store, task_queue=queue, heartbeat_every=1.0):
        try:
            yield client, store, backend
        finally:
            for sid in IDS:
                await backend.adelete(sid)
    store.close()


async def test_the_table_on_temporal(env) -> None:
    from temporalio.client import ScheduleOverlapPolicy

    client, _store, backend = env
    settings = ScheduleSettings.from_env({"MEMORY_HOURLY_DECAY_CRON": "*/20 * * * *"})
    await install_schedules(backend, schedule_table([AGENT], settings))
    listed = await _until(lambda: _all_listed(backend), "the five schedules in its list")
    assert {i.schedule_id for i in listed} == IDS
    by_id = {i.schedule_id: i for i in listed}
    assert by_id["memory-hourly-decay"].schedule.cron == "*/20 * * * *"
    assert by_id[f"memory-weekly-archive:{AGENT}"].schedule.overlap == "buffer_one"
    for sid, info in by_id.items():
        raw = await client.get_schedule_handle(backend.temporal_id(sid)).describe()
        want = ScheduleOverlapPolicy.BUFFER_ONE if sid.startswith("memory-weekly-archive") else ScheduleOverlapPolicy.SKIP
        assert raw.schedule.policy.overlap == want, sid
        assert raw.schedule.policy.catchup_window == timedelta(minutes=30)
        assert raw.schedule.spec.time_zone_name == "UTC"
        assert not raw.schedule.state.paused
        # the server reads the cron as the inline backend (cronsim) does
        server = [int(t.timestamp() * 1000) for t in raw.info.next_action_times[:3]]
        assert len(server) == 3 and server == next_fire_times(info.schedule.cron, server[0] - 1, count=3), sid
        assert info.next_fire_at == server[0]


async def _all_listed(backend):
    listed = await backend.alist()
    return listed if {i.schedule_id for i in listed} == IDS else None


async def test_pause_resume_and_replace_keep_state(env) -> None:
    _client, _store, backend = env
    (decay,) = [s for s in schedule_table([], ScheduleSettings()) if s.schedule_id == "memory-hourly-decay"]
    await backend.acreate(decay)
    paused = await backend.apause("memory-hourly-decay", note="maintenance window")
    assert paused.paused and paused.note == "maintenance window"
    replaced = await backend.acreate(decay.model_copy(update={"cron": "15 * * * *"}))
    assert replaced.paused and replaced.schedule.cron == "15 * * * *"
    assert replaced.next_fire_at % 3_600_000 == 15 * 60_000  # the new cron is in place
    resumed = await backend.aresume("memory-hourly-decay")
    assert not resumed.paused and resumed.next_fire_at % 3_600_000 == 15 * 60_000
    with pytest.raises(ScheduleNotFoundError):
        await backend.apause("memory-nope")


async def test_triggered_runs_write_and_complete_their_job_records(env) -> None:
    client, store, backend = env
    now = now_ms()
    rows = [MemoryRecord(id=f"m{i}", agent_wallet=AGENT, user_address="u", content="likes tea",
                         created_at=now - (i + 1) * 60_000, updated_at=now - (i + 1) * 60_000,
                         last_accessed_at=now) for i in range(3)]
    store.add_memories(rows)
    table = {s.schedule_id: s for s in schedule_table([AGENT], ScheduleSettings())}
    for sid in ("memory-daily-consolidation", f"memory-weekly-archive:{AGENT}"):
        await backend.acreate(table[sid])
        await backend.atrigger(sid)
        info = await _until(lambda sid=sid: _last_run(backend, sid), f"a run of {sid}")
        result = await client.get_workflow_handle(info.last_workflow_id).result()
        record = store.get_job(info.last_job_id)
        assert record is not None and record.execution == "temporal" and record.status == "completed", record
        assert record.data["scheduleId"] == sid and record.temporal_workflow_id == f"memory-job:{record.job_id}"
        if sid == "memory-daily-consolidation":
            assert record.data["input"]["agent_wallets"] == [AGENT]  # found when it ran, case kept
            assert result["consolidated"] == record.data["consolidated"] == 2
        else:
            rng = record.data["input"]["date_range"]
            assert rng["end"] == record.data["scheduledAt"] and rng["end"] - rng["start"] == 7 * 86_400_000
            assert result["memoriesArchived"] == record.data["memoriesArchived"] == 3
        assert (await backend.adescribe(sid)).last_status == "completed"


async def _last_run(backend, sid):
    info = await backend.adescribe(sid)
    return info if info.last_workflow_id else None


async def test_delete_removes_the_schedules(env) -> None:
    _client, _store, backend = env
    await install_schedules(backend, schedule_table([AGENT], ScheduleSettings()))
    await _until(lambda: _all_listed(backend), "the five schedules in its list")
    assert set(await remove_schedules(backend)) == IDS
    for sid in IDS:
        with pytest.raises(ScheduleNotFoundError):
            await backend.adescribe(sid)
        assert await backend.adelete(sid) is False


async def test_the_worker_creates_the_table_at_startup_unless_switched_off(temporal_address, monkeypatch) -> None:
    from temporalio.client import Client

    from manowar_memory.jobs.temporal import run_worker
    from manowar_memory.jobs.temporal_schedules import TemporalSchedules

    client = await Client.connect(temporal_address)
    store = SQLiteStore(":memory:")
    store.add_memories([MemoryRecord(id="m1", agent_wallet=AGENT, content="x", created_at=1, updated_at=1,
                                     last_accessed_at=1)])
    queue = f"manowar-boot-{uuid.uuid4().hex[:10]}"
    backend = TemporalSchedules(client, task_queue=queue, id_prefix=f"{queue}/", settings=ScheduleSettings())

    async def start_and_stop(prefix: str) -> None:
        stop = asyncio.Event()
        await run_worker(store, address=temporal_address, task_queue=queue, stop=stop, on_ready=stop.set,
                         schedules=True, schedule_id_prefix=prefix)

    try:
        monkeypatch.setenv("MEMORY_AUTO_SCHEDULES", "false")
        await start_and_stop(f"{queue}/")
        with pytest.raises(ScheduleNotFoundError):
            await backend.adescribe("memory-hourly-decay")
        monkeypatch.delenv("MEMORY_AUTO_SCHEDULES")
        await start_and_stop(f"{queue}/")
        for sid in IDS:  # per-agent schedules for the agent found in the store, case kept
            assert (await backend.adescribe(sid)).schedule.schedule_id == sid
    finally:
        for sid in IDS:
            await backend.adelete(sid)
        store.close()


async def test_list_never_shows_another_prefix_schedules(env) -> None:
    from manowar_memory.jobs.temporal_schedules import TemporalSchedules

    client, _store, backend = env
    (decay,) = [s for s in schedule_table([], ScheduleSettings()) if s.schedule_id == "memory-hourly-decay"]
    marker = f"owned by {backend.id_prefix}"
    await backend.acreate(decay.model_copy(update={"note": marker}))
    await _until(lambda: _listed(backend, "memory-hourly-decay"), "the schedule in its list")
    # a deployment without a prefix does not see (so cannot delete) the prefixed schedule
    unprefixed = TemporalSchedules(client, task_queue=backend.task_queue, settings=ScheduleSettings())
    assert marker not in {i.schedule.note for i in await unprefixed.alist()}
    assert (await backend.adescribe("memory-hourly-decay")).schedule.note == marker


async def _listed(backend, sid):
    return any(i.schedule_id == sid for i in await backend.alist())
