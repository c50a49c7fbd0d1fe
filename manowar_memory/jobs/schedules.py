"""Maintenance schedules: the schedule table, its settings, and the inline backend.

The inline backend is here; the table, its settings and the backend protocol are in
:mod:`manowar_memory.jobs.schedule_table`, the cron helpers in :mod:`manowar_memory.jobs.cron`
(all re-exported here, the public path).

The table (manowar-behaviour §9.9), every cron coming from :class:`ScheduleSettings`:

* ``memory-daily-consolidation``: consolidate every agent found at run time;
  ``MEMORY_DAILY_CONSOLIDATION_CRON`` (``0 2 * * *``), overlap skip.
* ``memory-hourly-decay``: decay_update, half-life 30 days; ``MEMORY_HOURLY_DECAY_CRON``
  (``0 * * * *``), skip.
* ``memory-daily-cleanup``: cleanup older than 90 days; ``MEMORY_DAILY_CLEANUP_CRON``
  (``0 2 * * *``), skip.
* ``memory-daily-patterns:{agent}``: patterns_extract over the day before the fire time;
  ``MEMORY_DAILY_PATTERNS_CRON`` (``0 2 * * *``), skip.
* ``memory-weekly-archive:{agent}``: archive_create of the week before the fire time;
  ``MEMORY_WEEKLY_ARCHIVE_CRON`` (``0 3 * * 0``), buffer_one.

Timezone UTC (``MEMORY_SCHEDULE_TIMEZONE``), catch-up window 30 min
(``MEMORY_SCHEDULE_CATCHUP_WINDOW_SECONDS``). The reference's schedule quirks are fixed:

* the ``MEMORY_*_CRON`` names are real settings (the reference hard-coded them), and a bad
  expression fails at startup naming the setting;
* agent wallets are kept exactly as stored (the reference lower-cased them while the jobs
  match exactly, so mixed-case agents got no maintenance);
* consolidation finds its agents when it runs (the reference froze the list at creation);
* the pattern and archive windows are computed from each run's fire time (never frozen);
* re-creating a schedule replaces it in place and keeps an operator's pause (the reference
  deleted then created, leaving a gap and resetting pauses); cleanup has its own cron.

Two backends implement :class:`ScheduleBackend`: :class:`InlineSchedules` (the schedules
live in the store; :meth:`InlineSchedules.run_due` runs what is due) and
:class:`~manowar_memory.jobs.temporal_schedules.TemporalSchedules` (real Temporal schedules).

    schedules = InlineSchedules(engine)
    schedules.install(schedule_table(discover_agent_wallets(engine)))
    schedules.run_forever()          # or schedules.run_due() from your own timer
"""

from __future__ import annotations

import asyncio
import builtins
import copy
import logging
import math
import os
import socket
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from .._util import now_ms
from ..errors import ConfigurationError, InvalidInputError, ManowarError, StoreError
from ..records import Job
from ..redaction import install_log_redaction
from ..stores import MaintenanceStore, ScheduleStore, missing_role_methods
from ._store import job_store, store_of
from .cron import CRON_EXAMPLE, InvalidCronError, _fire_iter, next_fire_times, validate_cron
from .runner import run_job
from .schedule_table import (
    LEGACY_SCHEDULE_IDS,
    SCHEDULE_ENV,
    MaintenanceSchedule,
    OverlapPolicy,
    ScheduleBackend,
    ScheduleInfo,
    ScheduleNotFoundError,
    ScheduleSettings,
    discover_agent_wallets,
    ensure_default_schedules,
    install_schedules,
    normalize_wallets,
    remove_schedules,
    schedule_table,
)

__all__ = [
    "CRON_EXAMPLE",
    "LEGACY_SCHEDULE_IDS",
    "SCHEDULE_ENV",
    "InlineSchedules",
    "InvalidCronError",
    "MaintenanceSchedule",
    "OverlapPolicy",
    "ScheduleBackend",
    "ScheduleInfo",
    "ScheduleNotFoundError",
    "ScheduleSettings",
    "discover_agent_wallets",
    "ensure_default_schedules",
    "install_schedules",
    "next_fire_times",
    "normalize_wallets",
    "remove_schedules",
    "schedule_table",
    "validate_cron",
]

log = logging.getLogger("manowar_memory.schedules")
install_log_redaction(log)  # no credential reaches a log line

_MISSED_SCAN_LIMIT = 10_000  # fire times counted one by one before jumping to the window


# --------------------------------------------------------------------------- inline backend


@dataclass(frozen=True)
class _Claim:
    schedule: MaintenanceSchedule
    fire_at: int
    token: str
    kind: str  # "schedule" | "trigger" | "buffered"


class InlineSchedules:
    """Schedules kept in the store (SQLite or MongoDB) and run in this process.

    :meth:`run_due` runs every schedule whose fire time has come, through
    :func:`~manowar_memory.jobs.run_job`; :meth:`run_forever` calls it in a loop with the
    runs on worker threads. Several processes may tick the same store: a run is claimed by a
    compare-and-set on the schedule before it starts. Overlap: ``skip`` starts nothing while
    the previous run of that schedule is still going; ``buffer_one`` queues at most one run
    behind it (started as soon as it ends). Fire times older than the catch-up window are
    dropped, not replayed; of several fire times inside it, one runs (plus one buffered).
    A run whose process died stops blocking its schedule after ``max_run_s``
    (``MEMORY_SCHEDULE_MAX_RUN_SECONDS``, 6 h). Each run's job record has ``data.scheduleId``,
    ``data.scheduledAt`` (the fire time) and ``data.scheduleRun`` (schedule, buffered, trigger).

    ``clock`` (epoch ms) and ``runner`` (``run_job``'s signature) are injectable for tests.
    """

    name = "inline"

    def __init__(self, store: Any, *, settings: ScheduleSettings | None = None,
                 clock: Callable[[], int] = now_ms, runner: Callable[..., Job] = run_job) -> None:
        self.target = store  # what run_job gets (an engine keeps its cache invalidation)
        self.store = store_of(store)
        missing = missing_role_methods(self.store, ScheduleStore, MaintenanceStore)
        if missing:
            raise ConfigurationError(
                f"{type(self.store).__name__} cannot keep schedules (missing {', '.join(missing)}); use the "
                "SQLite or MongoDB store, or the Temporal backend")
        self.jobs = job_store(self.store)
        self.settings = settings if settings is not None else ScheduleSettings.from_env()
        self.clock = clock
        self.runner = runner
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"

    # -- reading --
    def _info(self, doc: Mapping[str, Any]) -> ScheduleInfo:
        running = doc.get("running")
        return ScheduleInfo(
            schedule=MaintenanceSchedule.model_validate(doc["definition"]), backend="inline",
            paused=bool(doc.get("paused")), note=doc.get("note"), next_fire_at=doc.get("nextFireAt"),
            last_fire_at=doc.get("lastFireAt"), last_job_id=doc.get("lastJobId"), last_status=doc.get("lastStatus"),
            last_error=doc.get("lastError"), running=bool(running) and self._alive(running, self.clock()),
            buffered=doc.get("bufferedFireAt") is not None, skipped=int(doc.get("skipped") or 0),
            missed=int(doc.get("missed") or 0))

    def _doc(self, schedule_id: str) -> dict[str, Any]:
        doc: dict[str, Any] | None = self.store.get_schedule(schedule_id)
        if doc is None:
            raise ScheduleNotFoundError(f"no schedule {schedule_id!r}; see them with `manowar schedules list`")
        return doc

    def list(self) -> list[ScheduleInfo]:
        """Every schedule in the store, by id; a stored definition that no longer validates is
        logged and left out (``delete`` still removes it)."""
        out = []
        for doc in sorted(self.store.list_schedules(), key=lambda d: d["scheduleId"]):
            try:
                out.append(self._info(doc))
            except (ManowarError, ValidationError, KeyError) as exc:
                log.warning("schedule %s is unreadable and left out: %s", doc.get("scheduleId"), exc)
        return out

    def describe(self, schedule_id: str) -> ScheduleInfo:
        """One schedule (:class:`ScheduleNotFoundError` when missing)."""
        return self._info(self._doc(schedule_id))

    # -- writing --
    def _update(self, schedule_id: str, change: Callable[[dict[str, Any]], dict[str, Any] | None]) -> dict[str, Any] | None:
        """Compare-and-set loop: ``change`` gets a copy of the stored doc and returns the new
        doc (or None for no change)."""
        for _ in range(100):
            current = self._doc(schedule_id)
            rev = current.pop("rev")
            new = change(copy.deepcopy(current))
            if new is None:
                return None
            new["updatedAt"] = self.clock()
            saved = self.store.save_schedule(new, expected_rev=rev)
            if saved is not None:
                return {**new, "rev": saved}
        raise StoreError(f"schedule {schedule_id!r} kept changing under concurrent updates; try again")

    def create(self, schedule: MaintenanceSchedule) -> ScheduleInfo:
        """Create the schedule, or replace the definition of the one with that id (its pause,
        running and buffered runs and counters are kept). The first fire time is the next one
        after now."""
        now = self.clock()
        nxt = next(_fire_iter(schedule.cron, schedule.timezone, now))
        definition = schedule.model_dump(mode="json")
        for _ in range(100):
            existing = self.store.get_schedule(schedule.schedule_id)
            base: dict[str, Any] = {
                "paused": False, "note": schedule.note or None, "running": None, "bufferedFireAt": None,
                "lastFireAt": None, "lastJobId": None, "lastStatus": None, "skipped": 0, "missed": 0,
                "createdAt": now}
            rev = None
            if existing is not None:
                rev = existing.pop("rev")
                base.update({k: v for k, v in existing.items() if k in base})
            doc = {**base, "scheduleId": schedule.schedule_id, "definition": definition, "nextFireAt": nxt,
                   "updatedAt": now}
            if existing is None or not existing.get("paused"):
                doc["note"] = schedule.note or None
            if self.store.save_schedule(doc, expected_rev=rev) is not None:
                return self.describe(schedule.schedule_id)
        raise StoreError(f"schedule {schedule.schedule_id!r} kept changing under concurrent updates; try again")

    def install(self, schedules: Iterable[MaintenanceSchedule]) -> builtins.list[ScheduleInfo]:
        """Create (or replace) every schedule."""
        return [self.create(s) for s in schedules]

    def delete(self, schedule_id: str) -> bool:
        """Delete the schedule (a run in progress finishes). False when there was none."""
        return bool(self.store.delete_schedule(schedule_id))

    def pause(self, schedule_id: str, note: str | None = None) -> ScheduleInfo:
        """Stop firing; a run in progress finishes."""
        self._update(schedule_id, lambda d: {**d, "paused": True, "note": note or "paused"})
        return self.describe(schedule_id)

    def resume(self, schedule_id: str, note: str | None = None) -> ScheduleInfo:
        """Fire again from the next fire time after now (nothing missed while paused is replayed)."""
        def change(d: dict[str, Any]) -> dict[str, Any]:
            sched = MaintenanceSchedule.model_validate(d["definition"])
            return {**d, "paused": False, "note": note, "nextFireAt": next(_fire_iter(sched.cron, sched.timezone, now))}
        now = self.clock()
        self._update(schedule_id, change)
        return self.describe(schedule_id)

    # -- running --
    def _alive(self, running: Mapping[str, Any] | None, now: int) -> bool:
        if not running:
            return False
        if now - int(running["startedAt"]) > self.settings.max_run_s * 1000:
            return False  # its process died or hangs: do not block the schedule forever
        job_id = running.get("jobId")
        job = self.jobs.get_job(job_id) if job_id else None
        return job is None or job.status == "running"

    def _due(self, sched: MaintenanceSchedule, next_fire_at: int, now: int) -> tuple[builtins.list[int], int, int]:
        """(fire times inside the catch-up window, fire times dropped, next fire time after now)."""
        window_start = now - int(sched.catchup_window_s * 1000)
        due: list[int] = []
        missed = 0
        t = next_fire_at
        it: Iterator[int] | None = None
        while t <= now:
            if t < window_start:
                missed += 1
                if missed >= _MISSED_SCAN_LIMIT:  # long outage: count no further, jump to the window
                    it = _fire_iter(sched.cron, sched.timezone, window_start - 1)
                    t = next(it)
                    continue
            else:
                due.append(t)
            if it is None:
                it = _fire_iter(sched.cron, sched.timezone, t)
            t = next(it)
        return due, missed, t

    def _claim(self, schedule_id: str, now: int, kind: str) -> _Claim | None:
        token = uuid.uuid4().hex
        claim: list[_Claim] = []

        def change(d: dict[str, Any]) -> dict[str, Any] | None:
            claim.clear()
            sched = MaintenanceSchedule.model_validate(d["definition"])
            alive = self._alive(d.get("running"), now)
            changed = False
            if d.get("running") and not alive:
                d["running"] = None  # finished without telling us, or dead: let the schedule go on
                changed = True
            if kind == "trigger":
                queue = [now]
            elif d.get("paused"):
                return d if changed else None
            else:
                queue, missed, nxt = self._due(sched, int(d["nextFireAt"]), now)
                if not queue and not missed and d["nextFireAt"] == nxt and not changed and not (
                        d.get("bufferedFireAt") is not None and not alive):
                    return None
                d["nextFireAt"] = nxt
                d["missed"] = int(d.get("missed") or 0) + missed
            kinds = [kind] * len(queue)
            if not alive and d.get("bufferedFireAt") is not None:
                queue.insert(0, int(d["bufferedFireAt"]))
                kinds.insert(0, "buffered")
                d["bufferedFireAt"] = None
            if not alive and queue:
                fire = queue.pop(0)
                d["running"] = {"token": token, "fireAt": fire, "startedAt": now, "owner": self.owner, "jobId": None}
                d["lastFireAt"] = fire
                claim.append(_Claim(sched, fire, token, kinds.pop(0)))
            for fire in queue:
                if sched.overlap == "buffer_one" and d.get("bufferedFireAt") is None:
                    d["bufferedFireAt"] = fire
                else:
                    d["skipped"] = int(d.get("skipped") or 0) + 1
            return d

        self._update(schedule_id, change)
        return claim[0] if claim else None

    def _execute(self, schedule_id: str, claim: _Claim | None) -> builtins.list[Job]:
        """Run a claimed schedule (and its buffered follow-up). A run that raises becomes a
        failed job record and its claim is released like any other, so the schedule fires
        again at its next time instead of looking busy for ``max_run_s``."""
        jobs: list[Job] = []
        while claim is not None:
            try:
                job = self._run_one(claim)
            except Exception as exc:  # noqa: BLE001 - recorded on the job and the schedule
                log.warning("scheduled run of %s failed: %s: %s", schedule_id, type(exc).__name__, exc)
                job = Job(job_id=f"memjob_sched_{claim.token}", type=claim.schedule.job_type, status="failed",
                          error=f"{type(exc).__name__}: {exc}",
                          data={"input": dict(claim.schedule.params), "scheduleId": schedule_id,
                                "scheduledAt": claim.fire_at, "scheduleRun": claim.kind},
                          completed_at=self.clock())
                try:
                    self.jobs.put_job(job)
                except Exception as put_exc:  # noqa: BLE001 - the schedule still records the failure
                    log.warning("could not record the failed run of %s: %s", schedule_id, put_exc)
            jobs.append(job)
            try:
                follow_up = self._finish(schedule_id, claim, job)
            except Exception as exc:
                self._release(schedule_id, claim, exc)
                raise
            claim = follow_up
        return jobs

    def _release(self, schedule_id: str, claim: _Claim, exc: BaseException) -> None:
        """Best effort after ``_finish`` failed: clear the claim (only if it is still ours) and
        mark the schedule failed, so it does not look busy for ``max_run_s``."""
        error = f"{type(exc).__name__}: {exc}"

        def change(d: dict[str, Any]) -> dict[str, Any] | None:
            if (d.get("running") or {}).get("token") != claim.token:
                return None
            return {**d, "running": None, "lastStatus": "failed", "lastError": error}

        try:
            self._update(schedule_id, change)
        except Exception as release_exc:  # noqa: BLE001 - the original error is re-raised by the caller
            log.error("could not release the claim of %s (it stays running until max_run_s): %s",
                      schedule_id, release_exc)

    def _run_one(self, claim: _Claim) -> Job:
        sched = claim.schedule
        extra = {"scheduleId": sched.schedule_id, "scheduledAt": claim.fire_at, "scheduleRun": claim.kind}
        try:
            params = sched.params_for(claim.fire_at, lambda: self.store.list_agent_wallets(None))
        except (InvalidInputError, StoreError) as exc:  # bad params, or the agents could not be listed
            job = Job(job_id=f"memjob_sched_{claim.token}", type=sched.job_type, status="failed",
                      error=f"{type(exc).__name__}: {exc}", data={"input": dict(sched.params), **extra},
                      completed_at=self.clock())
            self.jobs.put_job(job)
            return job
        if sched.all_agents and not params.get("agent_wallets"):
            job = Job(job_id=f"memjob_sched_{claim.token}", type=sched.job_type, status="completed",
                      data={"input": params, "consolidated": 0, "note": "no agents in the store", **extra},
                      completed_at=self.clock())
            self.jobs.put_job(job)
            return job
        job = self.runner(self.target, sched.job_type, params)
        job = job.model_copy(update={"data": {**(job.data or {}), **extra}})
        self.jobs.put_job(job)
        return job

    def _finish(self, schedule_id: str, claim: _Claim, job: Job) -> _Claim | None:
        now = self.clock()
        token = uuid.uuid4().hex
        follow: list[_Claim] = []

        def change(d: dict[str, Any]) -> dict[str, Any] | None:
            follow.clear()
            running = d.get("running") or {}
            if running.get("token") != claim.token:
                return None  # someone took over a run they thought dead; leave their state alone
            d.update(running=None, lastJobId=job.job_id, lastStatus=job.status,
                     lastError=job.error if job.status == "failed" else None)
            buffered = d.get("bufferedFireAt")
            if buffered is not None and not d.get("paused"):
                sched = MaintenanceSchedule.model_validate(d["definition"])
                d["bufferedFireAt"] = None
                d["running"] = {"token": token, "fireAt": buffered, "startedAt": now, "owner": self.owner, "jobId": None}
                d["lastFireAt"] = buffered
                follow.append(_Claim(sched, int(buffered), token, "buffered"))
            return d

        try:
            self._update(schedule_id, change)
        except ScheduleNotFoundError:
            return None  # deleted while it ran
        return follow[0] if follow else None

    def run_due(self, now: int | None = None) -> builtins.list[Job]:
        """Run every schedule that is due at ``now`` (default: the clock), one after the
        other, and return the job records of the runs (buffered follow-ups included). A run
        that raises is recorded as a failed job and its schedule released; when a schedule's
        state cannot be saved after its run, the other claimed schedules still run and the
        first such error is raised at the end."""
        at = self.clock() if now is None else now
        claims = self._claim_all(at)
        jobs: list[Job] = []
        errors: list[Exception] = []
        for sid, claim in claims:  # one schedule's trouble never strands the others' claims
            try:
                jobs.extend(self._execute(sid, claim))
            except Exception as exc:  # noqa: BLE001 - re-raised once every claim had its turn
                log.error("schedule %s could not finish its run: %s", sid, exc)
                errors.append(exc)
        if errors:
            raise errors[0]
        return jobs

    def _claim_all(self, now: int) -> builtins.list[tuple[str, _Claim]]:
        out = []
        for doc in sorted(self.store.list_schedules(), key=lambda d: d["scheduleId"]):
            try:
                claim = self._claim(doc["scheduleId"], now, "schedule")
            except ScheduleNotFoundError:
                continue
            except (ManowarError, ValidationError, KeyError) as exc:  # an unreadable definition must not stop the others
                log.warning("schedule %s is unreadable and skipped: %s", doc.get("scheduleId"), exc)
                continue
            if claim is not None:
                out.append((doc["scheduleId"], claim))
        return out

    def trigger(self, schedule_id: str) -> Job | None:
        """Run the schedule's job now, under its overlap policy: returns its record, or None
        when a run is still going (skip: dropped; buffer_one: queued behind it)."""
        claim = self._claim(schedule_id, self.clock(), "trigger")
        if claim is None:
            return None
        jobs = self._execute(schedule_id, claim)
        return jobs[0]

    def run_forever(self, *, poll_s: float = 30.0, stop: threading.Event | None = None, max_workers: int = 2,
                    on_job: Callable[[Job], None] | None = None) -> None:
        """Tick every ``poll_s`` seconds until ``stop`` is set; runs go to a pool of
        ``max_workers`` threads, so a long job never holds the other schedules back."""
        if not (math.isfinite(poll_s) and poll_s > 0):
            raise InvalidInputError(f"poll_s must be > 0 seconds, got {poll_s!r}")
        stop = stop or threading.Event()

        def work(sid: str, claim: _Claim) -> None:
            try:
                for job in self._execute(sid, claim):
                    if on_job is not None:
                        on_job(job)
            except Exception:  # one failed run must not stop the loop
                log.exception("scheduled run of %s failed", sid)

        with ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="manowar-schedule") as pool:
            while not stop.is_set():
                try:
                    for sid, claim in self._claim_all(self.clock()):
                        pool.submit(work, sid, claim)
                except Exception:  # a store outage is retried at the next tick
                    log.exception("schedule tick failed")
                stop.wait(poll_s)

    # -- the ScheduleBackend protocol --
    async def alist(self) -> builtins.list[ScheduleInfo]:
        return await asyncio.to_thread(self.list)

    async def adescribe(self, schedule_id: str) -> ScheduleInfo:
        return await asyncio.to_thread(self.describe, schedule_id)

    async def acreate(self, schedule: MaintenanceSchedule) -> ScheduleInfo:
        return await asyncio.to_thread(self.create, schedule)

    async def adelete(self, schedule_id: str) -> bool:
        return await asyncio.to_thread(self.delete, schedule_id)

    async def apause(self, schedule_id: str, note: str | None = None) -> ScheduleInfo:
        return await asyncio.to_thread(self.pause, schedule_id, note)

    async def aresume(self, schedule_id: str, note: str | None = None) -> ScheduleInfo:
        return await asyncio.to_thread(self.resume, schedule_id, note)

    async def atrigger(self, schedule_id: str) -> None:
        await asyncio.to_thread(self.trigger, schedule_id)
