"""Jobs, archives, patterns and the agent's schedules."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import InvalidInputError, NotFoundError
from ..jobs import archives, base, skills
from ..jobs._store import ChangedScopes, job_store
from ..jobs.pinning import ArchivePinParams, archive_pin
from ..jobs.runner import invalidate_changes, query_cache_of, run_job
from ..jobs.schedules import InlineSchedules, MaintenanceSchedule, ScheduleNotFoundError, schedule_table
from ..scope import owns, visible
from .core import ScopedCore, _positive

if TYPE_CHECKING:
    import builtins

    from ..jobs.schedules import InlineSchedules, ScheduleInfo
    from ..records import Job, Skill


class ScopedJobs(ScopedCore):
    """Jobs, archives, patterns and the agent's schedules."""

    def run_job(self, job_type: str, params: Mapping[str, Any] | None = None, *, dry_run: bool = False) -> Any:
        """Run a maintenance job on the rows this scope owns (on every row of its agent for an
        agent-level scope with ``agent_jobs``; never another agent's)."""
        return run_job(self._engine, job_type, self._job_params(job_type, params), dry_run=dry_run)

    def reembed(self, *, batch_size: int = 64, dry_run: bool = False) -> Any:
        """Give a vector of the engine's model to this scope's own rows that have none (every row
        of the agent for an agent-level scope with ``agent_jobs``); see :meth:`MemoryEngine.reembed`.
        Returns its :class:`~manowar_memory.engine.ReembedReport`."""
        return self._engine.reembed(self._scope.agent_wallet, owner=None if self.agent_wide_jobs else self._scope,
                                    batch_size=batch_size, dry_run=dry_run)

    def _own_archive(self, archive_id: str) -> Any:
        """An archive this scope may restore or pin: its own, or any of the agent's for agent-wide jobs."""
        archive = self.artifact("archive", archive_id)
        # an archive of one scope names its owner; one without (agent-wide, or older) holds every user's rows
        if not self.agent_wide_jobs and (archive.metadata.get("owner") is None or not owns(self._scope, archive)):
            raise NotFoundError(
                f"archive {archive_id!r} is not one of this scope's own archives: it holds rows of the whole agent, "
                "so only the application restores or pins it (an agent-level scope with agent_jobs=True)")
        return archive

    def restore_archive(self, archive_id: str, *, dry_run: bool = False, restore_deleted: bool = False) -> dict[str, Any]:
        """Bring back this scope's rows of an archive that no longer hold their archived state.
        Rows that still exist (superseded and soft-deleted ones too) stay as they are; rows
        deleted or erased since the archive was made stay gone unless ``restore_deleted``, which
        only the application passes. Rows of other scopes are never restored. Returns the report
        ``{archiveId, restored, skippedExisting, skippedDeleted, entryCount}``."""
        archive = self._own_archive(archive_id)
        changes = ChangedScopes()
        owner = self._owner()
        params = archives.ArchiveRestoreParams(archive_id=archive.archive_id, restore_deleted=restore_deleted,
                                               owner=base.Owner(**owner) if owner is not None else None)
        try:
            return archives.archive_restore(job_store(self._engine), params, dry_run=dry_run, changes=changes)
        finally:
            invalidate_changes(query_cache_of(self._engine), changes)

    def pin_archive(self, archive_id: str, *, dry_run: bool = False) -> dict[str, Any]:
        """Pin one of this scope's archives to IPFS (needs ``allow_pin``); idempotent."""
        self._check_pin()
        archive = self._own_archive(archive_id)
        return archive_pin(job_store(self._engine), ArchivePinParams(archive_id=archive.archive_id), dry_run=dry_run,
                           changes=ChangedScopes())

    def patterns(self, *, limit: int = 20, pattern_type: str | None = None,
                 min_success_rate: float | None = None) -> builtins.list[Any]:
        """Patterns visible in the scope, best success rate first (optionally of one type and
        at least a success rate)."""
        limit = _positive(limit, "limit")
        rows = self._engine.find_patterns(self._scope, self._max_scan)
        rows = [p for p in rows if visible(self._scope, p)
                and (pattern_type is None or p.pattern_type == pattern_type)
                and (min_success_rate is None or p.success_rate >= min_success_rate)]
        return rows[:limit]

    def job(self, job_id: str) -> Any:
        """A maintenance job record of this scope (a job of another user, or an agent-wide job
        seen from a user scope, is not); :class:`NotFoundError` otherwise."""
        found = self._engine.get_job(job_id) if isinstance(job_id, str) and job_id else None
        if found is None or found.agent_wallet != self._scope.agent_wallet or not self._sees_job(found):
            raise NotFoundError(f"job {job_id!r} does not exist for this agent")
        return found

    def _sees_job(self, job: Any) -> bool:
        if self.agent_wide_jobs:
            return True
        owner = ((job.data or {}).get("input") or {}).get("owner")
        return owner == self._owner()

    # ---------------------------------------------------------------- patterns, skills and the cache
    def validate_pattern(self, pattern_id: str) -> dict[str, Any]:
        """Whether a pattern visible here may become a skill: ``{patternId, valid, confidence,
        occurrences, successRate, toolSequence}`` (:class:`NotFoundError` for a pattern of
        another agent or user)."""
        self.artifact("pattern", pattern_id)
        return skills.validate_pattern(job_store(self._engine), pattern_id)

    def promote_pattern(self, pattern_id: str, skill_name: str) -> dict[str, Any]:
        """Validate a pattern visible here again and, when valid, make it the agent's skill
        ``skill_name`` (the same pattern and name twice returns the existing skill with
        ``promoted: False``); the cached queries it could change are invalidated."""
        self.artifact("pattern", pattern_id)
        changes = ChangedScopes()
        try:
            return skills.promote_pattern(job_store(self._engine), pattern_id, skill_name, changes=changes)
        finally:
            invalidate_changes(query_cache_of(self._engine), changes)

    def skills(self, *, category: str | None = None, limit: int = 20) -> builtins.list[Skill]:
        """The skills of this scope's agent (shared by all its users), optionally of one
        ``category``, at most ``limit`` (capped at 100)."""
        return skills.list_skills(job_store(self._engine), self._scope.agent_wallet, category, _positive(limit, "limit"))

    # ---------------------------------------------------------------- schedules of this agent (inline backend)
    def _schedules(self) -> InlineSchedules:
        return InlineSchedules(self._engine)

    def _is_mine(self, info: ScheduleInfo) -> bool:
        """A schedule acts for this agent only: its parameters name the agent (or a one-agent list)."""
        s = info.schedule
        agent = self._scope.agent_wallet
        return not s.all_agents and s.job_type != "cleanup" and (
            s.params.get("agent_wallet") == agent or s.params.get("agent_wallets") == [agent])

    def agent_schedules(self) -> builtins.list[ScheduleInfo]:
        """The inline maintenance schedules of this scope's agent
        (:class:`~manowar_memory.jobs.schedules.ScheduleInfo`), by id. Store-wide schedules
        (consolidation of every agent, decay of every agent, cleanup) are the application's."""
        return [i for i in self._schedules().list() if self._is_mine(i)]

    def agent_schedule(self, schedule_id: str) -> ScheduleInfo:
        """One schedule of this agent; :class:`NotFoundError` when missing or another's."""
        try:
            info = self._schedules().describe(schedule_id)
        except ScheduleNotFoundError:
            info = None
        if info is None or not self._is_mine(info):
            raise NotFoundError(f"schedule {schedule_id!r} does not exist for this agent")
        return info

    def create_agent_schedules(self, job_types: Sequence[str] | None = None) -> builtins.list[ScheduleInfo]:
        """Create (or replace, keeping a pause) this agent's schedules: daily consolidation
        (``memory-daily-consolidation:{agent}``), hourly decay (``memory-hourly-decay:{agent}``),
        daily pattern extraction and the weekly archive, with the crons and windows of
        :class:`~manowar_memory.jobs.schedules.ScheduleSettings`; ``job_types`` keeps only some."""
        self._require_agent_jobs("an agent schedule")
        agent = self._scope.agent_wallet
        table = []
        for s in schedule_table([agent]):
            if s.job_type == "cleanup":
                continue
            if s.all_agents or s.job_type == "decay_update":
                params = {**s.params, "agent_wallet": agent}
                s = MaintenanceSchedule.model_validate({**s.model_dump(), "schedule_id": f"{s.schedule_id}:{agent}",
                                                        "all_agents": False, "params": params,
                                                        "note": f"{s.job_type} of {agent}"})
            table.append(s)
        if job_types is not None:
            unknown = sorted(set(job_types) - {s.job_type for s in table})
            if unknown:
                raise InvalidInputError(f"no agent schedule for job type(s) {unknown}; use "
                                        f"{sorted({s.job_type for s in table})}")
            table = [s for s in table if s.job_type in set(job_types)]
        return self._schedules().install(table)

    def delete_agent_schedules(self) -> builtins.list[str]:
        """Delete every schedule of this agent; the ids deleted."""
        self._require_agent_jobs("an agent schedule")
        backend = self._schedules()
        return [i.schedule_id for i in self.agent_schedules() if backend.delete(i.schedule_id)]

    def pause_agent_schedule(self, schedule_id: str, note: str | None = None) -> ScheduleInfo:
        """Pause one of this agent's schedules (a run in progress finishes)."""
        self._require_agent_jobs("an agent schedule")
        self.agent_schedule(schedule_id)
        return self._schedules().pause(schedule_id, note)

    def resume_agent_schedule(self, schedule_id: str, note: str | None = None) -> ScheduleInfo:
        """Resume one of this agent's schedules from its next fire time."""
        self._require_agent_jobs("an agent schedule")
        self.agent_schedule(schedule_id)
        return self._schedules().resume(schedule_id, note)

    def trigger_agent_schedule(self, schedule_id: str) -> Job | None:
        """Run one of this agent's schedules now (inline, under its overlap policy): the job
        record, or None when a run of it is still going."""
        self._require_agent_jobs("an agent schedule")
        self.agent_schedule(schedule_id)
        return self._schedules().trigger(schedule_id)

    # ---------------------------------------------------------------- jobs on Temporal
    def _job_params(self, job_type: str, params: Mapping[str, Any] | None) -> dict[str, Any]:
        data = {**dict(params or {})}
        for key in ("agent_wallet", "agentWallet", "agent_wallets", "agentWallets"):
            if key in data and data[key] not in (None, self._scope.agent_wallet, [self._scope.agent_wallet]):
                raise InvalidInputError(f"{key} is bound to this scope's agent and cannot name another")
            data.pop(key, None)
        if job_type == "cleanup":
            raise InvalidInputError("cleanup acts on every agent of the store; run it from the application "
                                    "(manowar_memory.jobs.run_job), not through a scope")
        if job_type == "forget":
            raise InvalidInputError("forget erases a scope; the application calls engine.forget(scope) or "
                                    "ScopedMemory.forget(), never through a job of a scope")
        if "owner" in data:
            raise InvalidInputError("owner is bound to this scope and cannot be passed")
        if data.get("pin"):
            self._check_pin()
        data["agent_wallet"] = self._scope.agent_wallet
        data["owner"] = self._owner()
        return data

    async def astart_temporal_job(self, client: Any, job_type: str, params: Mapping[str, Any] | None = None, *,
                                  dry_run: bool = False, task_queue: str | None = None) -> Any:
        """Start a maintenance job of this scope's agent as a Temporal workflow (a worker,
        ``manowar worker``, runs it) and return its running record (``execution: "temporal"``)."""
        from ..jobs.temporal import DEFAULT_TASK_QUEUE, start_temporal_job

        return await start_temporal_job(client, self._engine, job_type, self._job_params(job_type, params),
                                        dry_run=dry_run, task_queue=task_queue or DEFAULT_TASK_QUEUE)

    async def arefresh_job(self, client: Any, job: Any) -> Any:
        """A job record of this agent brought in line with its Temporal workflow (unchanged
        when it is inline or finished, or Temporal cannot be reached)."""
        from ..jobs.temporal import refresh_temporal_job

        if job.agent_wallet != self._scope.agent_wallet:
            raise NotFoundError(f"job {job.job_id!r} does not exist for this agent")
        return await refresh_temporal_job(client, self._engine, job)
