"""The maintenance schedule table (see :mod:`manowar_memory.jobs.schedules`): its settings, the
schedules, what a backend reports, the :class:`ScheduleBackend` protocol and the helpers that
install, remove and bootstrap the table on any backend."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic.alias_generators import to_camel

from .._util import DAY_MS
from ..errors import ConfigurationError, InvalidInputError, NotFoundError
from ..records import JobType
from ..redaction import install_log_redaction
from ..stores import MaintenanceStore, missing_role_methods
from ._store import store_of
from .cron import _zone, validate_cron
from .runner import parse_params

__all__ = [
    "LEGACY_SCHEDULE_IDS",
    "SCHEDULE_ENV",
    "MaintenanceSchedule",
    "OverlapPolicy",
    "ScheduleBackend",
    "ScheduleInfo",
    "ScheduleNotFoundError",
    "ScheduleSettings",
    "discover_agent_wallets",
    "ensure_default_schedules",
    "install_schedules",
    "normalize_wallets",
    "remove_schedules",
    "schedule_table",
]

log = logging.getLogger("manowar_memory.schedules")
install_log_redaction(log)  # no credential reaches a log line

OverlapPolicy = Literal["skip", "buffer_one"]

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


class ScheduleNotFoundError(NotFoundError):
    """No schedule has this id."""


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
