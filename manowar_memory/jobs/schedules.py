"""Maintenance schedules: the schedule table, its settings, and the inline backend.

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
import re
import socket
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, Protocol, runtime_checkable
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic.alias_generators import to_camel

from .._util import DAY_MS, now_ms
from ..errors import ConfigurationError, InvalidInputError, ManowarError, NotFoundError, StoreError
from ..records import Job, JobType
from ..redaction import install_log_redaction
from ..stores import MaintenanceStore, ScheduleStore, missing_role_methods
from ._store import job_store, store_of
from .runner import parse_params, run_job

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

OverlapPolicy = Literal["skip", "buffer_one"]

#: a valid expression, shown in every cron error
CRON_EXAMPLE = "0 2 * * *"
#: ids the reference used before per-agent archives; removed by :func:`remove_schedules`
LEGACY_SCHEDULE_IDS = ("memory-weekly-archive",)

#: ScheduleSettings field -> environment variable
SCHEDULE_ENV: dict[str, str] = {
    "consolidation_cron": "MEMORY_DAILY_CONSOLIDATION_CRON",
    "patterns_cron": "MEMORY_DAILY_PATTERNS_CRON",
    "archive_cron": "MEMORY_WEEKLY_ARCHIVE_CRON",
    "decay_cron": "MEMORY_HOURLY_DECAY_CRON",
    "cleanup_cron": "MEMORY_DAILY_CLEANUP_CRON",
    "timezone": "MEMORY_SCHEDULE_TIMEZONE",
    "catchup_window_s": "MEMORY_SCHEDULE_CATCHUP_WINDOW_SECONDS",
    "max_run_s": "MEMORY_SCHEDULE_MAX_RUN_SECONDS",
    "auto_schedules": "MEMORY_AUTO_SCHEDULES",
    "auto_schedule_limit": "MEMORY_AUTO_SCHEDULE_LIMIT",
}

_MISSED_SCAN_LIMIT = 10_000  # fire times counted one by one before jumping to the window


class InvalidCronError(ConfigurationError):
    """A cron expression that cannot be used; the message names the setting and shows a valid one."""


class ScheduleNotFoundError(NotFoundError):
    """No schedule has this id."""


# --------------------------------------------------------------------------- cron


_ITEM = r"(\*|\d{1,2}(-\d{1,2})?|[A-Za-z]{3}(-[A-Za-z]{3})?)(/\d{1,2})?"
_FIELD = re.compile(rf"^{_ITEM}(,{_ITEM})*$")


def validate_cron(expr: str, *, setting: str = "cron") -> str:
    """Check a 5-field cron expression (minute hour day-of-month month day-of-week) and return
    it with its spaces normalised. Both backends read it the same way, so the extensions
    only one of them knows (seconds or year fields, ``@daily``, ``L``, ``#``) are refused.
    Raises :class:`InvalidCronError` naming ``setting``."""
    hint = f"use 5 fields (minute hour day-of-month month day-of-week), e.g. {setting}={CRON_EXAMPLE!r} for daily at 02:00"
    if not isinstance(expr, str) or not expr.strip():
        raise InvalidCronError(f"{setting} is empty; {hint}")
    fields = expr.split()
    if len(fields) != 5:
        raise InvalidCronError(f"{setting}={expr!r} has {len(fields)} fields; {hint}")
    bad = [f for f in fields if not _FIELD.match(f)]
    if bad:
        raise InvalidCronError(f"{setting}={expr!r}: field {bad[0]!r} uses syntax outside plain cron; {hint}")
    text = " ".join(fields)
    try:
        next(iter(CronSim(text, datetime(2000, 1, 1, tzinfo=UTC))))
    except (CronSimError, StopIteration) as exc:
        raise InvalidCronError(f"{setting}={expr!r} is not a valid cron expression ({exc or 'never fires'}); {hint}") from None
    return text


def _zone(name: str, setting: str = "timezone") -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ConfigurationError(f"{setting}={name!r} is not an IANA time zone; use e.g. 'UTC' or 'Europe/Berlin'") from exc


def _fire_iter(cron: str, tz: str, after_ms: int) -> Iterator[int]:
    start = datetime.fromtimestamp(after_ms / 1000, tz=_zone(tz))
    for dt in CronSim(cron, start):
        yield int(dt.timestamp() * 1000)


def next_fire_times(cron: str, after_ms: int, *, tz: str = "UTC", count: int = 1) -> list[int]:
    """The next ``count`` fire times (epoch ms) strictly after ``after_ms``."""
    it = _fire_iter(validate_cron(cron), tz, after_ms)
    return [next(it) for _ in range(count)]


# --------------------------------------------------------------------------- settings


class ScheduleSettings(BaseModel):
    """What the schedule table is built from. :meth:`from_env` reads the ``MEMORY_*``
    variables of :data:`SCHEDULE_ENV`; a value that cannot work raises
    :class:`~manowar_memory.errors.ConfigurationError` naming the variable."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    consolidation_cron: str = Field("0 2 * * *", description="consolidation (MEMORY_DAILY_CONSOLIDATION_CRON)")
    patterns_cron: str = Field("0 2 * * *", description="per-agent pattern extraction (MEMORY_DAILY_PATTERNS_CRON)")
    archive_cron: str = Field("0 3 * * 0", description="per-agent archive (MEMORY_WEEKLY_ARCHIVE_CRON)")
    decay_cron: str = Field("0 * * * *", description="decay update (MEMORY_HOURLY_DECAY_CRON)")
    cleanup_cron: str = Field("0 2 * * *", description="cleanup (MEMORY_DAILY_CLEANUP_CRON)")
    timezone: str = Field("UTC", description="IANA zone the crons are read in (MEMORY_SCHEDULE_TIMEZONE)")
    catchup_window_s: float = Field(
        1800.0, ge=10.0, description="fire times missed by more than this are dropped, not replayed "
        "(MEMORY_SCHEDULE_CATCHUP_WINDOW_SECONDS; Temporal's minimum is 10 s)")
    max_run_s: float = Field(
        6 * 3600.0, gt=0, description="inline: a run still marked running after this long is treated as dead "
        "(MEMORY_SCHEDULE_MAX_RUN_SECONDS); Temporal: the scheduled workflow's run timeout")
    auto_schedules: bool = Field(True, description="create the table at worker startup (MEMORY_AUTO_SCHEDULES)")
    auto_schedule_limit: int = Field(250, ge=0, description="most agents given per-agent schedules (MEMORY_AUTO_SCHEDULE_LIMIT)")
    decay_half_life_days: float = Field(30.0, gt=0)
    cleanup_older_than_days: float = Field(90.0, gt=0)
    patterns_window_days: float = Field(1.0, gt=0)
    archive_window_days: float = Field(7.0, gt=0)
    archive_compress: bool = True

    @field_validator("consolidation_cron", "patterns_cron", "archive_cron", "decay_cron", "cleanup_cron")
    @classmethod
    def _cron(cls, value: str, info: Any) -> str:
        return validate_cron(value, setting=SCHEDULE_ENV[info.field_name])

    @field_validator("timezone")
    @classmethod
    def _tz(cls, value: str) -> str:
        _zone(value, SCHEDULE_ENV["timezone"])
        return value

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> ScheduleSettings:
        """Defaults, then the environment (``environ`` or ``os.environ``), then ``overrides``."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for field, name in SCHEDULE_ENV.items():
            raw = env.get(name)
            if raw is None or not raw.strip():
                continue
            if field == "auto_schedules":  # as the reference: on unless set to false
                values[field] = raw.strip().lower() not in ("false", "0", "no", "off")
            else:
                values[field] = raw.strip()
        values.update(overrides)
        try:
            return cls(**values)
        except ValidationError as exc:
            err = exc.errors()[0]
            field = str(err["loc"][0]) if err.get("loc") else "?"
            name = SCHEDULE_ENV.get(field, field)
            raise ConfigurationError(f"{name}={values.get(field)!r}: {err['msg']}") from None


# --------------------------------------------------------------------------- schedules


def normalize_wallets(wallets: Iterable[str]) -> list[str]:
    """Drop empty and duplicate wallets, keeping each exactly as written (case included:
    the jobs match wallets exactly)."""
    return list(dict.fromkeys(w for w in wallets if isinstance(w, str) and w.strip()))


class MaintenanceSchedule(BaseModel):
    """One schedule: which job, with which parameters, when, and what to do on overlap.

    ``all_agents`` (consolidate only): the job gets every agent in the store, found when it
    runs. ``window_days`` (patterns_extract, archive_create): the job gets the window of that
    many days ending at the run's fire time.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, alias_generator=to_camel, populate_by_name=True)

    schedule_id: str = Field(min_length=1, max_length=400)
    job_type: JobType
    params: dict[str, Any] = Field(default_factory=dict, description="the job's parameters (snake_case)")
    cron: str
    timezone: str = "UTC"
    overlap: OverlapPolicy = "skip"
    catchup_window_s: float = Field(1800.0, ge=10.0)
    all_agents: bool = False
    window_days: float | None = Field(None, gt=0)
    note: str = ""

    @model_validator(mode="after")
    def _check(self) -> MaintenanceSchedule:
        validate_cron(self.cron, setting=f"cron of schedule {self.schedule_id!r}")
        _zone(self.timezone, f"timezone of schedule {self.schedule_id!r}")
        # ConfigurationError, not ValueError: pydantic passes it through unwrapped
        if self.all_agents and self.job_type != "consolidate":
            raise ConfigurationError(f"schedule {self.schedule_id!r}: all_agents is only for consolidate")
        if self.window_days is not None and self.job_type not in ("patterns_extract", "archive_create"):
            raise ConfigurationError(f"schedule {self.schedule_id!r}: window_days is only for patterns_extract "
                                     "and archive_create")
        try:
            self.params_for(0, lambda: ["agent"])  # the resolved parameters must be valid for the job
        except InvalidInputError as exc:
            raise ConfigurationError(str(exc)) from None
        return self

    def params_for(self, fire_at: int, agent_wallets: Callable[[], Sequence[str]] | None = None) -> dict[str, Any]:
        """The job parameters of the run fired at ``fire_at`` (epoch ms), validated."""
        params = dict(self.params)
        if self.window_days is not None:
            key = "date_range" if self.job_type == "archive_create" else "time_range"
            params.pop("window_days", None)
            params[key] = {"start": fire_at - int(self.window_days * DAY_MS), "end": fire_at}
        if self.all_agents:
            if agent_wallets is None:
                raise InvalidInputError(f"schedule {self.schedule_id!r} needs the store's agents")
            params.pop("agent_wallet", None)
            params["agent_wallets"] = list(agent_wallets())
        try:
            return parse_params(self.job_type, params).model_dump(mode="json", exclude_none=True)
        except InvalidInputError as exc:
            raise InvalidInputError(f"schedule {self.schedule_id!r}: {exc}") from None


class ScheduleInfo(BaseModel):
    """A schedule as a backend reports it."""

    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True)

    schedule: MaintenanceSchedule
    backend: Literal["inline", "temporal"]
    paused: bool = False
    note: str | None = None
    next_fire_at: int | None = Field(None, description="next fire time, epoch ms")
    last_fire_at: int | None = Field(None, description="fire time of the latest run started")
    last_job_id: str | None = None
    last_workflow_id: str | None = Field(None, description="temporal: the workflow the latest run started")
    last_status: str | None = None
    last_error: str | None = Field(None, description="inline: the error of the latest run, when it failed")
    running: bool = False
    buffered: bool = Field(False, description="a run is queued behind the running one (buffer_one)")
    skipped: int = Field(0, description="fire times skipped because a run was still going")
    missed: int = Field(0, description="fire times dropped because they were older than the catch-up window")

    @property
    def schedule_id(self) -> str:
        return self.schedule.schedule_id


def schedule_table(agent_wallets: Iterable[str] = (), settings: ScheduleSettings | None = None) -> list[MaintenanceSchedule]:
    """The reference's schedule table: consolidation, decay and cleanup, plus pattern
    extraction and an archive per agent (wallets kept exactly as given)."""
    s = settings if settings is not None else ScheduleSettings.from_env()
    common: dict[str, Any] = {"timezone": s.timezone, "catchup_window_s": s.catchup_window_s}
    table = [
        MaintenanceSchedule(schedule_id="memory-daily-consolidation", job_type="consolidate", all_agents=True,
                            cron=s.consolidation_cron, overlap="skip", note="consolidate every agent", **common),
        MaintenanceSchedule(schedule_id="memory-hourly-decay", job_type="decay_update",
                            params={"half_life_days": s.decay_half_life_days}, cron=s.decay_cron, overlap="skip",
                            note="recompute decay scores", **common),
        MaintenanceSchedule(schedule_id="memory-daily-cleanup", job_type="cleanup",
                            params={"older_than_days": s.cleanup_older_than_days}, cron=s.cleanup_cron,
                            overlap="skip", note="delete expired rows", **common),
    ]
    for wallet in normalize_wallets(agent_wallets):
        table.append(MaintenanceSchedule(
            schedule_id=f"memory-daily-patterns:{wallet}", job_type="patterns_extract", params={"agent_wallet": wallet},
            window_days=s.patterns_window_days, cron=s.patterns_cron, overlap="skip",
            note=f"extract tool-sequence patterns of {wallet}", **common))
        table.append(MaintenanceSchedule(
            schedule_id=f"memory-weekly-archive:{wallet}", job_type="archive_create",
            params={"agent_wallet": wallet, "compress": s.archive_compress}, window_days=s.archive_window_days,
            cron=s.archive_cron, overlap="buffer_one", note=f"archive the week of {wallet}", **common))
    return table


def discover_agent_wallets(store: Any, limit: int | None = None) -> list[str]:
    """The agents that have anything stored (memory, transcripts, patterns, archives, sessions),
    exactly as stored, at most ``limit`` (a warning says how many were left out)."""
    inner = store_of(store)
    if missing := missing_role_methods(inner, MaintenanceStore):
        raise ConfigurationError(f"{type(inner).__name__} cannot list its agents (it lacks {', '.join(missing)}); "
                                 "pass the agent wallets explicitly")
    wallets = list(inner.list_agent_wallets(None if limit is None else limit + 1))
    if limit is not None and len(wallets) > limit:
        log.warning("more than %d agents: only the first %d get per-agent schedules; raise "
                    "MEMORY_AUTO_SCHEDULE_LIMIT to cover them all", limit, limit)
        wallets = wallets[:limit]
    return wallets


@runtime_checkable
class ScheduleBackend(Protocol):
    """The schedule operations both backends implement (async, so Temporal fits)."""

    name: str

    async def alist(self) -> list[ScheduleInfo]:
        """Every schedule of this backend."""
        ...

    async def adescribe(self, schedule_id: str) -> ScheduleInfo:
        """One schedule; :class:`ScheduleNotFoundError` when it does not exist."""
        ...

    async def acreate(self, schedule: MaintenanceSchedule) -> ScheduleInfo:
        """Create, or replace in place the schedule with that id (its pause is kept)."""
        ...

    async def adelete(self, schedule_id: str) -> bool:
        """Delete; False when there was none."""
        ...

    async def apause(self, schedule_id: str, note: str | None = None) -> ScheduleInfo:
        """Stop firing until resumed."""
        ...

    async def aresume(self, schedule_id: str, note: str | None = None) -> ScheduleInfo:
        """Fire again from now on (fire times that passed while paused are not replayed)."""
        ...

    async def atrigger(self, schedule_id: str) -> None:
        """Run the schedule's job now, under its overlap policy."""
        ...


async def install_schedules(backend: ScheduleBackend, schedules: Iterable[MaintenanceSchedule]) -> list[ScheduleInfo]:
    """Create (or replace) every schedule."""
    return [await backend.acreate(s) for s in schedules]


async def remove_schedules(backend: ScheduleBackend) -> list[str]:
    """Delete every schedule of the backend, and the reference's legacy ids; returns the ids deleted."""
    ids = [info.schedule_id for info in await backend.alist()]
    deleted = [sid for sid in ids if await backend.adelete(sid)]
    deleted += [sid for sid in LEGACY_SCHEDULE_IDS if sid not in ids and await backend.adelete(sid)]
    return deleted


async def ensure_default_schedules(backend: ScheduleBackend, store: Any,
                                   settings: ScheduleSettings | None = None) -> list[ScheduleInfo]:
    """Startup bootstrap: unless ``MEMORY_AUTO_SCHEDULES`` is false, create the table for the
    agents found in ``store`` (at most ``MEMORY_AUTO_SCHEDULE_LIMIT``)."""
    s = settings if settings is not None else ScheduleSettings.from_env()
    if not s.auto_schedules:
        return []
    wallets = await asyncio.to_thread(discover_agent_wallets, store, s.auto_schedule_limit)
    return await install_schedules(backend, schedule_table(wallets, s))


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
