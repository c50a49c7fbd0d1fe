"""Maintenance schedules, inline backend, on the embedded store and on a real mongod: the
schedule table and its settings, cron / catch-up / overlap semantics with an injected clock
(no sleeps), the fixed reference quirks (hard-coded crons, lower-cased wallets, frozen agent
list and date range), and the ``manowar schedules`` command."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime

import pytest
from click.testing import CliRunner

from manowar_memory._util import DAY_MS
from manowar_memory.errors import ConfigurationError, ManowarError, StoreError
from manowar_memory.jobs import (
    InlineSchedules,
    InvalidCronError,
    MaintenanceSchedule,
    ScheduleNotFoundError,
    ScheduleSettings,
    discover_agent_wallets,
    ensure_default_schedules,
    run_job,
    schedule_table,
)
from manowar_memory.jobs.schedules import SCHEDULE_ENV, next_fire_times, normalize_wallets
from manowar_memory.records import MemoryRecord
from manowar_memory.stores.sqlite import SQLiteStore

MIN = 60_000
HOUR = 60 * MIN
T0 = int(datetime(2026, 1, 5, tzinfo=UTC).timestamp() * 1000)  # a Monday, 00:00 UTC
SUNDAY_0300 = T0 + 6 * DAY_MS + 3 * HOUR  # first weekly-archive fire after T0


class Clock:
    def __init__(self, t: int) -> None:
        self.t = t

    def __call__(self) -> int:
        return self.t


def make_store(request, kind):
    if kind == "sqlite":
        return SQLiteStore(":memory:")
    from manowar_memory.stores.mongo import MongoStore

    db = request.getfixturevalue("mongo_db")
    return MongoStore(client=db.client, database=db.name, vector_search="local")


@pytest.fixture(params=["sqlite", pytest.param("mongo", marks=pytest.mark.mongo)])
def store(request):
    s = make_store(request, request.param)
    yield s
    s.close()


def _row(agent: str, content: str, created: int, user: str = "u1") -> MemoryRecord:
    return MemoryRecord(id=MemoryRecord.make_id(agent, content + user, created), agent_wallet=agent,
                        user_address=user, content=content, created_at=created, updated_at=created,
                        last_accessed_at=created)


def _decay(schedule_id: str = "decay", overlap: str = "skip", cron: str = "0 * * * *") -> MaintenanceSchedule:
    return MaintenanceSchedule(schedule_id=schedule_id, job_type="decay_update", params={"half_life_days": 30},
                               cron=cron, overlap=overlap)  # type: ignore[arg-type]


# ------------------------------------------------------------------ settings and the table


def test_defaults_are_the_reference_table() -> None:
    table = {s.schedule_id: s for s in schedule_table(["0xAbC"], ScheduleSettings.from_env({}))}
    got = {sid: (s.job_type, s.cron, s.overlap, s.timezone, s.catchup_window_s) for sid, s in table.items()}
    assert got == {
        "memory-daily-consolidation": ("consolidate", "0 2 * * *", "skip", "UTC", 1800.0),
        "memory-hourly-decay": ("decay_update", "0 * * * *", "skip", "UTC", 1800.0),
        "memory-daily-cleanup": ("cleanup", "0 2 * * *", "skip", "UTC", 1800.0),
        "memory-daily-patterns:0xAbC": ("patterns_extract", "0 2 * * *", "skip", "UTC", 1800.0),
        "memory-weekly-archive:0xAbC": ("archive_create", "0 3 * * 0", "buffer_one", "UTC", 1800.0),
    }
    assert table["memory-hourly-decay"].params == {"half_life_days": 30.0}
    assert table["memory-daily-cleanup"].params == {"older_than_days": 90.0}
    assert table["memory-daily-consolidation"].all_agents
    assert table["memory-daily-patterns:0xAbC"].window_days == 1.0
    assert table["memory-weekly-archive:0xAbC"].window_days == 7.0


def test_cron_environment_variables_are_real_overrides(store) -> None:
    env = {
        "MEMORY_DAILY_CONSOLIDATION_CRON": "5 1 * * *", "MEMORY_DAILY_PATTERNS_CRON": "10 1 * * *",
        "MEMORY_WEEKLY_ARCHIVE_CRON": "0 4 * * 6", "MEMORY_HOURLY_DECAY_CRON": "*/15 * * * *",
        "MEMORY_DAILY_CLEANUP_CRON": "45 3 * * *", "MEMORY_SCHEDULE_CATCHUP_WINDOW_SECONDS": "600",
    }
    settings = ScheduleSettings.from_env(env)
    crons = {s.schedule_id.split(":")[0]: (s.cron, s.catchup_window_s) for s in schedule_table(["a"], settings)}
    assert crons == {
        "memory-daily-consolidation": ("5 1 * * *", 600.0), "memory-daily-patterns": ("10 1 * * *", 600.0),
        "memory-weekly-archive": ("0 4 * * 6", 600.0), "memory-hourly-decay": ("*/15 * * * *", 600.0),
        "memory-daily-cleanup": ("45 3 * * *", 600.0),
    }
    clock = Clock(T0)
    sched = InlineSchedules(store, clock=clock, settings=settings)
    sched.install(s for s in schedule_table([], settings) if s.schedule_id == "memory-hourly-decay")
    assert sched.describe("memory-hourly-decay").next_fire_at == T0 + 15 * MIN
    clock.t = T0 + 15 * MIN
    assert [j.data["scheduledAt"] for j in sched.run_due()] == [T0 + 15 * MIN]


def test_timezone_setting_moves_the_fire_times() -> None:
    berlin = ScheduleSettings.from_env({"MEMORY_SCHEDULE_TIMEZONE": "Europe/Berlin"})
    (consolidation,) = [s for s in schedule_table([], berlin) if s.schedule_id == "memory-daily-consolidation"]
    # 02:00 in Berlin is 01:00 UTC in January
    assert next_fire_times(consolidation.cron, T0, tz=consolidation.timezone) == [T0 + HOUR]


@pytest.mark.parametrize("value", ["61 * * * *", "0 2 * * * *", "@daily", "0 0 L * *", "0 2 * *", "  "])
def test_a_bad_cron_names_the_setting_and_shows_a_valid_one(value: str) -> None:
    with pytest.raises(InvalidCronError) as err:
        if value.strip():
            ScheduleSettings.from_env({"MEMORY_HOURLY_DECAY_CRON": value})
        else:  # a blank variable counts as unset, so give the blank value directly
            ScheduleSettings(decay_cron=value)
    assert isinstance(err.value, ConfigurationError) and isinstance(err.value, ManowarError)
    assert "MEMORY_HOURLY_DECAY_CRON" in str(err.value) and "'0 2 * * *'" in str(err.value)


def test_bad_environment_values_name_their_variable() -> None:
    with pytest.raises(InvalidCronError, match="MEMORY_WEEKLY_ARCHIVE_CRON"):
        ScheduleSettings.from_env({"MEMORY_WEEKLY_ARCHIVE_CRON": "0 3 * * 8"})
    with pytest.raises(ConfigurationError, match="MEMORY_SCHEDULE_TIMEZONE"):
        ScheduleSettings.from_env({"MEMORY_SCHEDULE_TIMEZONE": "Mars/Olympus"})
    with pytest.raises(ConfigurationError, match="MEMORY_SCHEDULE_CATCHUP_WINDOW_SECONDS"):
        ScheduleSettings.from_env({"MEMORY_SCHEDULE_CATCHUP_WINDOW_SECONDS": "5"})
    with pytest.raises(ConfigurationError, match="MEMORY_AUTO_SCHEDULE_LIMIT"):
        ScheduleSettings.from_env({"MEMORY_AUTO_SCHEDULE_LIMIT": "many"})
    assert set(SCHEDULE_ENV.values()) >= {"MEMORY_DAILY_CONSOLIDATION_CRON", "MEMORY_WEEKLY_ARCHIVE_CRON",
                                          "MEMORY_HOURLY_DECAY_CRON", "MEMORY_AUTO_SCHEDULES"}


def test_a_bad_schedule_definition_is_refused() -> None:
    with pytest.raises(InvalidCronError, match="'mine'"):
        MaintenanceSchedule(schedule_id="mine", job_type="decay_update", cron="every hour")
    with pytest.raises(ConfigurationError, match=r"(?s)schedule 'c'.*older_than"):
        MaintenanceSchedule(schedule_id="c", job_type="cleanup", params={"older_than": 90}, cron="0 2 * * *")
    with pytest.raises(ConfigurationError, match="all_agents is only for consolidate"):
        MaintenanceSchedule(schedule_id="d", job_type="decay_update", all_agents=True, cron="0 2 * * *")


def test_wallets_keep_their_case() -> None:
    assert normalize_wallets(["0xAbCdEf", " ", "", "0xAbCdEf", "0xabcdef"]) == ["0xAbCdEf", "0xabcdef"]
    ids = [s.schedule_id for s in schedule_table(["0xAbCdEf"], ScheduleSettings())]
    assert "memory-daily-patterns:0xAbCdEf" in ids and "memory-weekly-archive:0xAbCdEf" in ids


def test_discover_agent_wallets_exact_and_capped(store) -> None:
    store.add_memories([_row("0xBbB", "x", T0), _row("0xAaA", "y", T0), _row("0xBbB", "z", T0)])
    assert discover_agent_wallets(store) == ["0xAaA", "0xBbB"]
    assert discover_agent_wallets(store, limit=1) == ["0xAaA"]


async def test_auto_schedules_can_be_switched_off(store) -> None:
    backend = InlineSchedules(store, clock=Clock(T0))
    store.add_memories([_row("0xAaA", "y", T0)])
    off = ScheduleSettings.from_env({"MEMORY_AUTO_SCHEDULES": "false"})
    assert await ensure_default_schedules(backend, store, off) == [] and backend.list() == []
    on = ScheduleSettings.from_env({"MEMORY_AUTO_SCHEDULE_LIMIT": "5"})
    created = await ensure_default_schedules(backend, store, on)
    assert {i.schedule_id for i in created} == {i.schedule_id for i in backend.list()} == {
        "memory-daily-consolidation", "memory-hourly-decay", "memory-daily-cleanup",
        "memory-daily-patterns:0xAaA", "memory-weekly-archive:0xAaA"}


# ------------------------------------------------------------------ the fixed quirks, run for real


def test_archive_schedule_covers_a_mixed_case_agent(store) -> None:
    agent = "0xAbCdEf12"
    store.add_memories([_row(agent, f"fact {i}", T0 + i * HOUR) for i in range(3)])
    sched = InlineSchedules(store, clock=Clock(T0))
    sched.install(s for s in schedule_table([agent], ScheduleSettings()) if s.job_type == "archive_create")
    (job,) = sched.run_due(SUNDAY_0300)
    assert job.status == "completed", job.error
    assert job.data["memoriesArchived"] == 3 and job.agent_wallet == agent


def test_archive_window_is_computed_at_each_fire_time(store) -> None:
    agent = "0xAgent"
    week1 = [_row(agent, f"w1 {i}", T0 + DAY_MS + i * HOUR) for i in range(2)]
    week2 = [_row(agent, f"w2 {i}", SUNDAY_0300 + DAY_MS + i * HOUR) for i in range(3)]
    store.add_memories(week1 + week2)
    sched = InlineSchedules(store, clock=Clock(T0))
    sched.install(s for s in schedule_table([agent], ScheduleSettings()) if s.job_type == "archive_create")
    (first,) = sched.run_due(SUNDAY_0300)
    (second,) = sched.run_due(SUNDAY_0300 + 7 * DAY_MS)
    assert first.data["memoriesArchived"] == 2 and second.data["memoriesArchived"] == 3
    assert second.data["scheduledAt"] == SUNDAY_0300 + 7 * DAY_MS
    assert second.data["input"]["date_range"] == {"start": SUNDAY_0300, "end": SUNDAY_0300 + 7 * DAY_MS}


def test_consolidation_finds_its_agents_when_it_runs(store) -> None:
    sched = InlineSchedules(store, clock=Clock(T0))
    sched.install(s for s in schedule_table([], ScheduleSettings()) if s.job_type == "consolidate")
    # agents that appear after the schedule was created are consolidated too
    for agent in ("0xAaA", "0xBbB"):
        store.add_memories([_row(agent, "likes tea", T0 + i * MIN) for i in range(2)])
    (job,) = sched.run_due(T0 + 2 * HOUR)
    assert job.status == "completed", job.error
    assert sorted(job.data["input"]["agent_wallets"]) == ["0xAaA", "0xBbB"]
    assert job.data["consolidated"] == 2 and job.data["scheduleId"] == "memory-daily-consolidation"


# ------------------------------------------------------------------ cron, catch-up, pause, trigger


def test_catch_up_window_drops_old_fire_times_instead_of_replaying_them(store) -> None:
    sched = InlineSchedules(store, clock=Clock(T0))
    sched.create(_decay())
    assert sched.describe("decay").next_fire_at == T0 + HOUR
    jobs = sched.run_due(T0 + 5 * HOUR + 10 * MIN)  # 01:00..04:00 are more than 30 min late
    assert [j.data["scheduledAt"] for j in jobs] == [T0 + 5 * HOUR]
    info = sched.describe("decay")
    assert info.missed == 4 and info.next_fire_at == T0 + 6 * HOUR and info.last_status == "completed"
    assert sched.run_due(T0 + 5 * HOUR + 10 * MIN) == [] and sched.run_due(T0 + 6 * HOUR - 1) == []
    late = sched.run_due(T0 + 6 * HOUR + 20 * MIN)  # 20 min late: still inside the window
    assert [j.data["scheduledAt"] for j in late] == [T0 + 6 * HOUR]
    assert sched.describe("decay").missed == 4


def test_pause_stops_firing_and_resume_does_not_replay(store) -> None:
    clock = Clock(T0)
    sched = InlineSchedules(store, clock=clock)
    sched.create(_decay())
    clock.t = T0 + 30 * MIN
    assert sched.pause("decay", note="maintenance window").paused
    assert sched.run_due(T0 + HOUR) == [] and sched.run_due(T0 + 2 * HOUR) == []
    assert sched.describe("decay").note == "maintenance window"
    clock.t = T0 + 3 * HOUR + 30 * MIN
    info = sched.resume("decay")
    assert not info.paused and info.next_fire_at == T0 + 4 * HOUR
    assert sched.run_due() == []
    assert len(sched.run_due(T0 + 4 * HOUR)) == 1


def test_trigger_runs_now_and_keeps_the_next_fire_time(store) -> None:
    clock = Clock(T0 + 10 * MIN)
    sched = InlineSchedules(store, clock=clock)
    sched.create(_decay())
    job = sched.trigger("decay")
    assert job is not None and job.status == "completed"
    assert job.data["scheduleId"] == "decay" and job.data["scheduleRun"] == "trigger"
    assert job.data["scheduledAt"] == T0 + 10 * MIN
    assert sched.describe("decay").next_fire_at == T0 + HOUR
    with pytest.raises(ScheduleNotFoundError, match="manowar schedules list"):
        sched.trigger("nope")


def test_create_replaces_in_place_and_keeps_a_pause(store) -> None:
    clock = Clock(T0)
    sched = InlineSchedules(store, clock=clock)
    sched.create(_decay())
    sched.pause("decay", note="hold")
    info = sched.create(_decay(cron="30 * * * *"))
    assert [i.schedule_id for i in sched.list()] == ["decay"]
    assert info.schedule.cron == "30 * * * *" and info.next_fire_at == T0 + 30 * MIN
    assert info.paused and info.note == "hold"
    assert sched.delete("decay") is True and sched.delete("decay") is False
    with pytest.raises(ScheduleNotFoundError):
        sched.describe("decay")


# ------------------------------------------------------------------ overlap policies


class BlockingRunner:
    """Runs the real job, but holds the first run until released (no sleeps, no timing)."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.release = threading.Event()
        self.calls = 0

    def __call__(self, target, job_type, params):
        self.calls += 1
        if self.calls == 1:
            self.started.set()
            assert self.release.wait(30), "the test never released the first run"
        return run_job(target, job_type, params)


def _in_thread(fn, *args):
    out: dict = {}

    def target():
        try:
            out["value"] = fn(*args)
        except BaseException as exc:  # noqa: BLE001 - re-raised by the test
            out["error"] = exc

    thread = threading.Thread(target=target)
    thread.start()
    return thread, out


def _first_run_held(store, overlap: str) -> tuple[BlockingRunner, threading.Thread, dict]:
    """The decay schedule's T0 + 1 h run, started on a thread and held inside its job."""
    runner = BlockingRunner()
    first = InlineSchedules(store, clock=Clock(T0), runner=runner)
    first.create(_decay(overlap=overlap))
    thread, out = _in_thread(first.run_due, T0 + HOUR)
    assert runner.started.wait(30)
    return runner, thread, out


def test_skip_starts_nothing_while_the_previous_run_is_going(store) -> None:
    runner, thread, out = _first_run_held(store, "skip")
    other = InlineSchedules(store, clock=Clock(T0 + 2 * HOUR), runner=runner)  # e.g. another process
    try:
        assert other.run_due() == []
        assert other.trigger("decay") is None
        info = other.describe("decay")
        assert info.running and info.skipped == 2 and not info.buffered
    finally:
        runner.release.set()
        thread.join(30)
    assert "error" not in out, out.get("error")
    assert [j.data["scheduledAt"] for j in out["value"]] == [T0 + HOUR]
    info = other.describe("decay")
    assert not info.running and info.last_status == "completed" and runner.calls == 1
    assert len(other.run_due(T0 + 3 * HOUR)) == 1


def test_buffer_one_queues_one_run_behind_the_running_one(store) -> None:
    runner, thread, out = _first_run_held(store, "buffer_one")
    other = InlineSchedules(store, clock=Clock(T0 + 3 * HOUR), runner=runner)
    try:
        assert other.run_due(T0 + 2 * HOUR) == []  # buffered
        assert other.describe("decay").buffered
        assert other.run_due(T0 + 3 * HOUR) == []  # the buffer holds one: this one is skipped
        assert other.describe("decay").skipped == 1
    finally:
        runner.release.set()
        thread.join(30)
    assert "error" not in out, out.get("error")
    jobs = out["value"]
    assert [(j.data["scheduledAt"], j.data["scheduleRun"]) for j in jobs] == [
        (T0 + HOUR, "schedule"), (T0 + 2 * HOUR, "buffered")]
    info = other.describe("decay")
    assert not info.buffered and not info.running and info.last_job_id == jobs[-1].job_id


class _Crash(BaseException):
    pass


def test_a_run_whose_process_died_stops_blocking_after_max_run(store) -> None:
    def crashing(*_args):
        raise _Crash()

    # only a process that really dies (BaseException here) leaves the run marked running; an
    # ordinary exception is recorded and released at once (see the next tests)
    dead = InlineSchedules(store, clock=Clock(T0), runner=crashing)
    dead.create(_decay())
    with pytest.raises(_Crash):
        dead.run_due(T0 + HOUR)  # leaves the run marked as running, as a killed process would
    patient = InlineSchedules(store, clock=Clock(T0), settings=ScheduleSettings(max_run_s=3600))
    assert patient.run_due(T0 + 2 * HOUR) == []  # 1 h after it started: maybe still going
    assert [j.data["scheduledAt"] for j in patient.run_due(T0 + 3 * HOUR)] == [T0 + 3 * HOUR]


def test_a_failing_run_is_recorded_released_and_does_not_strand_the_other_schedules(store) -> None:
    def runner(target, job_type, params):
        if params.get("half_life_days") == 7:
            raise StoreError("archives collection unavailable")
        return run_job(target, job_type, params)

    sched = InlineSchedules(store, clock=Clock(T0), runner=runner)
    sched.create(MaintenanceSchedule(schedule_id="a-failing", job_type="decay_update", params={"half_life_days": 7},
                                     cron="0 * * * *"))
    sched.create(_decay("b-fine"))
    jobs = sched.run_due(T0 + HOUR)  # both claimed in one tick: the failure of the first must not strand the second
    assert [(j.data["scheduleId"], j.status) for j in jobs] == [("a-failing", "failed"), ("b-fine", "completed")]
    assert "archives collection unavailable" in jobs[0].error
    failing = sched.describe("a-failing")
    assert not failing.running and failing.last_status == "failed" and failing.last_job_id == jobs[0].job_id
    assert "archives collection unavailable" in failing.last_error
    # released: it fires again at its next time, not after max_run_s
    assert [j.data["scheduleId"] for j in sched.run_due(T0 + 2 * HOUR)] == ["a-failing", "b-fine"]


def test_a_schedule_whose_state_cannot_be_saved_is_released_and_the_others_still_run(store, monkeypatch) -> None:
    sched = InlineSchedules(store, clock=Clock(T0))
    sched.create(_decay("a-stuck"))
    sched.create(_decay("b-fine"))
    finish = sched._finish

    def flaky_finish(schedule_id, claim, job):
        if schedule_id == "a-stuck":
            raise StoreError("schedules table is locked")
        return finish(schedule_id, claim, job)

    monkeypatch.setattr(sched, "_finish", flaky_finish)
    with pytest.raises(StoreError, match="locked"):
        sched.run_due(T0 + HOUR)  # raised only after every claimed schedule had its turn
    stuck, fine = sched.describe("a-stuck"), sched.describe("b-fine")
    assert not stuck.running and stuck.last_status == "failed" and "locked" in stuck.last_error
    assert not fine.running and fine.last_status == "completed" and fine.last_fire_at == T0 + HOUR
    monkeypatch.undo()
    assert [j.data["scheduleId"] for j in sched.run_due(T0 + 2 * HOUR)] == ["a-stuck", "b-fine"]


def test_agents_that_cannot_be_listed_fail_the_consolidation_run_and_release_it(store, monkeypatch) -> None:
    sched = InlineSchedules(store, clock=Clock(T0))
    sched.create(MaintenanceSchedule(schedule_id="consolidate-all", job_type="consolidate", all_agents=True,
                                     cron="0 * * * *"))

    def unavailable(_limit=None):
        raise StoreError("agents index unavailable")

    monkeypatch.setattr(store, "list_agent_wallets", unavailable)
    [job] = sched.run_due(T0 + HOUR)
    assert job.status == "failed" and "agents index unavailable" in job.error
    info = sched.describe("consolidate-all")
    assert not info.running and info.last_status == "failed" and info.last_job_id == job.job_id


@pytest.mark.parametrize("corrupt", ["params", "unknown_field"])
def test_an_unreadable_stored_schedule_is_skipped_and_can_still_be_deleted(store, corrupt) -> None:
    sched = InlineSchedules(store, clock=Clock(T0))
    sched.create(_decay("a-broken"))
    sched.create(_decay("b-fine"))
    doc = store.get_schedule("a-broken")
    rev = doc.pop("rev")
    if corrupt == "params":  # fails the schedule's own check (ConfigurationError)
        doc["definition"]["params"] = {"half_life_days": 30, "field_from_a_newer_version": 1}
    else:  # fails pydantic's extra="forbid" (ValidationError)
        doc["definition"]["field_from_a_newer_version"] = 1
    assert store.save_schedule(doc, expected_rev=rev) is not None
    assert [i.schedule.schedule_id for i in sched.list()] == ["b-fine"]
    assert [j.data["scheduleId"] for j in sched.run_due(T0 + HOUR)] == ["b-fine"]
    assert sched.delete("a-broken") and store.get_schedule("a-broken") is None


def test_run_forever_runs_due_schedules_on_worker_threads(store) -> None:
    sched = InlineSchedules(store, clock=Clock(T0))
    sched.create(_decay())
    sched.clock = Clock(T0 + HOUR)
    stop = threading.Event()
    seen = []

    def on_job(job):
        seen.append(job)
        stop.set()

    thread, out = _in_thread(lambda: sched.run_forever(poll_s=0.01, stop=stop, on_job=on_job))
    thread.join(30)  # returns once the run has been reported
    stop.set()
    assert not thread.is_alive() and "error" not in out
    assert [(j.data["scheduleId"], j.data["scheduledAt"], j.status) for j in seen] == [
        ("decay", T0 + HOUR, "completed")]
    assert sched.describe("decay").next_fire_at == T0 + 2 * HOUR


def test_a_store_without_schedule_support_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="cannot keep schedules"):
        InlineSchedules(object())


# ------------------------------------------------------------------ command line


def test_cli_schedules_round_trip(tmp_path, monkeypatch) -> None:
    from manowar_memory.cli import cli

    monkeypatch.setenv("MEMORY_HOURLY_DECAY_CRON", "*/20 * * * *")
    url = f"sqlite:///{tmp_path / 'memory.db'}"
    runner = CliRunner()

    def run(*args: str) -> str:
        result = runner.invoke(cli, ["schedules", *args, "--store", url], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return result.output

    run("create", "--agent", "0xAbC", "--no-discover")
    listed = {i["schedule"]["schedule_id"]: i for i in json.loads(run("list", "--json"))}
    assert set(listed) == {"memory-daily-consolidation", "memory-hourly-decay", "memory-daily-cleanup",
                           "memory-daily-patterns:0xAbC", "memory-weekly-archive:0xAbC"}
    assert listed["memory-hourly-decay"]["schedule"]["cron"] == "*/20 * * * *"
    assert listed["memory-weekly-archive:0xAbC"]["schedule"]["overlap"] == "buffer_one"
    assert "paused" in run("pause", "memory-hourly-decay")
    assert json.loads(run("list", "--json"))[3]["paused"] is True
    assert "active" in run("resume", "memory-hourly-decay")
    assert "completed" in run("trigger", "memory-hourly-decay")
    assert "deleted memory-hourly-decay" in run("delete", "--all")
    assert "no schedules" in run("list")
