"""The maintenance schedules as real Temporal schedules.

Each :class:`~manowar_memory.jobs.schedules.MaintenanceSchedule` becomes a Temporal schedule
(cron spec in its time zone, catch-up window, overlap ``SKIP`` or ``BUFFER_ONE``) whose
action starts :class:`ScheduledMemoryJobWorkflow` on the memory task queue. That workflow
runs the ``manowar_schedule_prepare`` activity, which writes the run's job record
(``execution: "temporal"``, ``data.scheduleId``) with the agents and window resolved at the
fire time, then runs :class:`~manowar_memory.jobs.temporal_workflows.MemoryJobWorkflow` as a
child (id ``memory-job:{jobId}``), which completes the record as any Temporal job does.
Overlap applies to the parent, which lasts as long as its child.

    client = await Client.connect("127.0.0.1:7233")
    backend = TemporalSchedules(client, store=store)
    await install_schedules(backend, schedule_table(discover_agent_wallets(store)))
    # a worker from create_worker(client, store) serves the scheduled runs
"""

from __future__ import annotations

import asyncio
import hashlib
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from temporalio import activity, workflow
from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionExecutionStartWorkflow,
    ScheduleActionStartWorkflow,
    ScheduleAlreadyRunningError,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleSpec,
    ScheduleState,
    ScheduleUpdate,
    ScheduleUpdateInput,
)
from temporalio.common import RetryPolicy, SearchAttributeKey
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from .._util import now_ms
from ..errors import InvalidInputError
from ..records import Job
from ._store import job_store
from .runner import _agent_of, parse_params
from .schedules import MaintenanceSchedule, ScheduleInfo, ScheduleNotFoundError, ScheduleSettings
from .temporal_workflows import DEFAULT_TASK_QUEUE

__all__ = [
    "SCHEDULED_WORKFLOW", "ScheduleActivities", "ScheduledMemoryJobWorkflow", "TemporalSchedules",
    "scheduled_job_id",
]

#: workflow type the schedules start
SCHEDULED_WORKFLOW = "ManowarScheduledMemoryJob"
_OVERLAP = {"skip": ScheduleOverlapPolicy.SKIP, "buffer_one": ScheduleOverlapPolicy.BUFFER_ONE}
_OVERLAP_NAMES = {v: k for k, v in _OVERLAP.items()}
_SCHEDULED_START = SearchAttributeKey.for_datetime("TemporalScheduledStartTime")


def scheduled_job_id(workflow_id: str) -> str:
    """The job id of the scheduled run started as ``workflow_id`` (stable across retries)."""
    return "memjob_" + hashlib.sha256(f"schedule|{workflow_id}".encode()).hexdigest()[:32]


@workflow.defn(name=SCHEDULED_WORKFLOW)
class ScheduledMemoryJobWorkflow:
    """Input ``{schedule}`` (a MaintenanceSchedule as JSON): write the run's job record, then run
    the job as a ``MemoryJobWorkflow`` child; returns the job's report."""

    @workflow.run
    async def run(self, request: dict[str, Any]) -> dict[str, Any]:
        info = workflow.info()
        fired = info.typed_search_attributes.get(_SCHEDULED_START) or workflow.now()
        prepared = await workflow.execute_activity(
            "manowar_schedule_prepare",
            {**request, "workflowId": info.workflow_id, "firedAt": int(fired.timestamp() * 1000)},
            start_to_close_timeout=timedelta(minutes=5),
            retry_policy=RetryPolicy(initial_interval=timedelta(seconds=2), maximum_attempts=5,
                                     non_retryable_error_types=["InvalidInputError", "ConfigurationError"]),
        )
        if prepared.get("done"):
            return dict(prepared["report"])
        report: dict[str, Any] = await workflow.execute_child_workflow(
            "ManowarMemoryJob",
            {"jobId": prepared["jobId"], "type": prepared["type"], "params": prepared["params"]},
            id=prepared["workflowId"], task_queue=info.task_queue,
        )
        return report


class ScheduleActivities:
    """The activity of the scheduled runs, bound to one store (served by ``create_worker``)."""

    def __init__(self, store: Any) -> None:
        self.store = job_store(store)

    @activity.defn(name="manowar_schedule_prepare")
    async def prepare(self, request: dict[str, Any]) -> dict[str, Any]:
        return await asyncio.to_thread(self._prepare, request)

    def _prepare(self, request: dict[str, Any]) -> dict[str, Any]:
        sched = MaintenanceSchedule.model_validate(request["schedule"])
        fired_at = int(request["firedAt"])
        job_id = scheduled_job_id(request["workflowId"])
        child = f"memory-job:{job_id}"
        existing = self.store.get_job(job_id)
        if existing is not None:  # a retry of this activity: the record is already there
            if existing.status != "running":
                return {"done": True, "report": existing.data or {}}
            return {"jobId": job_id, "type": sched.job_type, "params": (existing.data or {}).get("input") or {},
                    "workflowId": child}
        extra = {"scheduleId": sched.schedule_id, "scheduledAt": fired_at, "scheduleWorkflowId": request["workflowId"]}
        base = Job(job_id=job_id, type=sched.job_type, execution="temporal", status="running",
                   temporal_workflow_id=child, data={"input": dict(sched.params), "dryRun": False, **extra},
                   created_at=now_ms())
        try:
            params = sched.params_for(fired_at, lambda: self.store.list_agent_wallets(None))
        except InvalidInputError as exc:
            self.store.put_job(base.model_copy(update={"status": "failed", "error": f"InvalidInputError: {exc}",
                                                       "completed_at": now_ms()}))
            raise ApplicationError(str(exc), type="InvalidInputError", non_retryable=True) from exc
        data = {**(base.data or {}), "input": params}
        if sched.all_agents and not params.get("agent_wallets"):
            report = {"consolidated": 0, "note": "no agents in the store", **data}
            self.store.put_job(base.model_copy(update={"status": "completed", "completed_at": now_ms(), "data": report,
                                                       "temporal_workflow_id": request["workflowId"]}))
            return {"done": True, "report": report}
        self.store.put_job(base.model_copy(update={
            "agent_wallet": _agent_of(parse_params(sched.job_type, params)), "data": data}))
        return {"jobId": job_id, "type": sched.job_type, "params": params, "workflowId": child}

    def all(self) -> list[Any]:
        return [self.prepare]


def _ms(dt: datetime | None) -> int | None:
    return int(dt.timestamp() * 1000) if dt is not None else None


class TemporalSchedules:
    """:class:`~manowar_memory.jobs.schedules.ScheduleBackend` on a Temporal client.

    ``id_prefix`` is put before every schedule id on the server (several deployments, or
    tests, can share a namespace); ``store`` (optional) lets :meth:`adescribe` report the
    status of the last run from its job record.
    """

    name = "temporal"

    def __init__(self, client: Client, *, task_queue: str | None = None, id_prefix: str = "",
                 store: Any | None = None, settings: ScheduleSettings | None = None) -> None:
        self.client = client
        self.task_queue = task_queue or DEFAULT_TASK_QUEUE
        self.id_prefix = id_prefix
        self.store = job_store(store) if store is not None else None
        self.settings = settings if settings is not None else ScheduleSettings.from_env()

    def temporal_id(self, schedule_id: str) -> str:
        """The schedule's id on the Temporal server."""
        return self.id_prefix + schedule_id

    def to_temporal(self, schedule: MaintenanceSchedule) -> Schedule:
        """The Temporal schedule for ``schedule`` (starts unpaused)."""
        tid = self.temporal_id(schedule.schedule_id)
        return Schedule(
            action=ScheduleActionStartWorkflow(
                SCHEDULED_WORKFLOW, {"schedule": schedule.model_dump(mode="json")}, id=f"memory-schedule:{tid}",
                task_queue=self.task_queue, run_timeout=timedelta(seconds=self.settings.max_run_s),
                memo={"memoryScheduleId": schedule.schedule_id, "memoryJobType": schedule.job_type}),
            spec=ScheduleSpec(cron_expressions=[schedule.cron], time_zone_name=schedule.timezone),
            policy=SchedulePolicy(overlap=_OVERLAP[schedule.overlap],
                                  catchup_window=timedelta(seconds=schedule.catchup_window_s)),
            state=ScheduleState(note=schedule.note or None, paused=False),
        )

    def _not_found(self, schedule_id: str) -> ScheduleNotFoundError:
        return ScheduleNotFoundError(f"no Temporal schedule {self.temporal_id(schedule_id)!r}; see them with "
                                     "`manowar schedules list --backend temporal`")

    async def acreate(self, schedule: MaintenanceSchedule) -> ScheduleInfo:
        """Create the schedule, or replace the one with that id in place (keeping its pause)."""
        target = self.to_temporal(schedule)
        tid = self.temporal_id(schedule.schedule_id)
        try:
            await self.client.create_schedule(tid, target)
        except ScheduleAlreadyRunningError:
            def update(current: ScheduleUpdateInput) -> ScheduleUpdate:
                state = current.description.schedule.state
                keep = replace(target.state, paused=state.paused, note=state.note if state.paused else target.state.note)
                return ScheduleUpdate(schedule=replace(target, state=keep))

            await self.client.get_schedule_handle(tid).update(update)
        return await self.adescribe(schedule.schedule_id)

    async def adescribe(self, schedule_id: str) -> ScheduleInfo:
        try:
            desc = await self.client.get_schedule_handle(self.temporal_id(schedule_id)).describe()
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                raise self._not_found(schedule_id) from None
            raise
        action = desc.schedule.action
        if not isinstance(action, ScheduleActionStartWorkflow) or action.workflow != SCHEDULED_WORKFLOW:
            raise self._not_found(schedule_id)
        (request,) = await self.client.data_converter.decode(action.args)
        sched = MaintenanceSchedule.model_validate(request["schedule"])
        info = desc.info
        last = info.recent_actions[-1] if info.recent_actions else None
        started = last.action if last is not None else None
        last_workflow = started.workflow_id if isinstance(started, ScheduleActionExecutionStartWorkflow) else None
        last_job = scheduled_job_id(last_workflow) if last_workflow is not None else None
        status = None
        if last_job is not None and self.store is not None:
            record = await asyncio.to_thread(self.store.get_job, last_job)
            status = record.status if record is not None else None
        return ScheduleInfo(
            schedule=sched, backend="temporal", paused=desc.schedule.state.paused, note=desc.schedule.state.note,
            next_fire_at=_ms(info.next_action_times[0]) if info.next_action_times else None,
            last_fire_at=_ms(last.scheduled_at) if last is not None else None, last_job_id=last_job,
            last_workflow_id=last_workflow,
            last_status=status, running=bool(info.running_actions),
            skipped=info.num_actions_skipped_overlap, missed=info.num_actions_missed_catchup_window)

    async def alist(self) -> list[ScheduleInfo]:
        """The manowar schedules of this ``id_prefix`` (never another prefix's), from the
        server's visibility store, which can lag a create or delete by a moment."""
        out: list[ScheduleInfo] = []
        async for entry in await self.client.list_schedules():
            action = entry.schedule.action if entry.schedule is not None else None
            if not entry.id.startswith(self.id_prefix) or getattr(action, "workflow", None) != SCHEDULED_WORKFLOW:
                continue
            try:
                info = await self.adescribe(entry.id[len(self.id_prefix):])
            except ScheduleNotFoundError:
                continue  # deleted since it was listed
            if self.temporal_id(info.schedule_id) == entry.id:  # not another prefix's schedule
                out.append(info)
        return sorted(out, key=lambda i: i.schedule_id)

    async def _act(self, schedule_id: str, op: str, **kwargs: Any) -> None:
        handle = self.client.get_schedule_handle(self.temporal_id(schedule_id))
        try:
            await getattr(handle, op)(**kwargs)
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                raise self._not_found(schedule_id) from None
            raise

    async def adelete(self, schedule_id: str) -> bool:
        try:
            await self._act(schedule_id, "delete")
        except ScheduleNotFoundError:
            return False
        return True

    async def apause(self, schedule_id: str, note: str | None = None) -> ScheduleInfo:
        await self._act(schedule_id, "pause", note=note or "paused")
        return await self.adescribe(schedule_id)

    async def aresume(self, schedule_id: str, note: str | None = None) -> ScheduleInfo:
        await self._act(schedule_id, "unpause", note=note or "resumed")
        return await self.adescribe(schedule_id)

    async def atrigger(self, schedule_id: str) -> None:
        await self._act(schedule_id, "trigger")
