"""Temporal workflows for the maintenance jobs (deterministic code only: stdlib + temporalio).

``MemoryJobWorkflow`` runs patterns_extract, archive_create and cleanup through the
``manowar_memory_job`` activity (the same job function as the inline runner; it writes the
job record). consolidate and decay_update run in bounded batches, one
``manowar_memory_job_batch`` activity per batch (see :mod:`manowar_memory.jobs.batched`),
checking pause before each batch; after ``batchesPerRun`` batches (or when Temporal suggests
it) the workflow continues as new, carrying the cursor, the accumulated report and the job's
fixed ``now``, so its history stays bounded. State is answered by the ``get_state`` query;
``pause`` and ``resume`` are signals. ``SkillPromotionWorkflow`` validates then promotes a pattern.

Request options (all optional): ``batchSize`` (rows per batch, default 5000),
``batchesPerRun`` (default 50), ``heartbeatTimeout`` / ``retryInitialInterval`` /
``startToCloseTimeout`` (seconds; defaults 60, 2 and 1800).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

__all__ = [
    "ACTIVITY_OPTIONS",
    "BATCHES_PER_RUN",
    "DEFAULT_TASK_QUEUE",
    "NON_RETRYABLE",
    "MemoryJobWorkflow",
    "SkillPromotionWorkflow",
    "activity_options",
]

#: the task queue the worker serves and the schedules start runs on, unless told otherwise
DEFAULT_TASK_QUEUE = "manowar.memory.activities"
#: batches a run executes before it continues as new
BATCHES_PER_RUN = 50
#: job types that run in batches (mirrors manowar_memory.jobs.batched.BATCHED_JOB_TYPES)
_BATCHED = ("consolidate", "decay_update")
NON_RETRYABLE = ["InvalidInputError", "NotFoundError", "ValidationError"]
RETRY = RetryPolicy(initial_interval=timedelta(seconds=2), backoff_coefficient=2.0,
                    maximum_interval=timedelta(seconds=120), maximum_attempts=5,
                    non_retryable_error_types=NON_RETRYABLE)
ACTIVITY_OPTIONS: dict[str, Any] = {
    "start_to_close_timeout": timedelta(minutes=30),
    "heartbeat_timeout": timedelta(seconds=60),
    "retry_policy": RETRY,
}


def activity_options(request: dict[str, Any]) -> dict[str, Any]:
    """ACTIVITY_OPTIONS with the request's ``heartbeatTimeout``, ``retryInitialInterval`` and
    ``startToCloseTimeout`` (seconds) applied."""
    opts = dict(ACTIVITY_OPTIONS)
    if request.get("heartbeatTimeout"):
        opts["heartbeat_timeout"] = timedelta(seconds=float(request["heartbeatTimeout"]))
    if request.get("startToCloseTimeout"):
        opts["start_to_close_timeout"] = timedelta(seconds=float(request["startToCloseTimeout"]))
    if request.get("retryInitialInterval"):
        opts["retry_policy"] = RetryPolicy(
            initial_interval=timedelta(seconds=float(request["retryInitialInterval"])), backoff_coefficient=2.0,
            maximum_interval=timedelta(seconds=120), maximum_attempts=5, non_retryable_error_types=NON_RETRYABLE)
    return opts


class _StateMixin:
    def _init_state(self) -> None:
        now = int(workflow.now().timestamp() * 1000)
        self._state: dict[str, Any] = {
            "workflowId": workflow.info().workflow_id, "status": "running", "startedAt": now, "updatedAt": now,
            "processed": 0, "errors": [], "paused": False, "result": None,
        }

    def _touch(self, **changes: Any) -> None:
        self._state.update(changes)
        self._state["updatedAt"] = int(workflow.now().timestamp() * 1000)

    @workflow.query
    def get_state(self) -> dict[str, Any]:
        return dict(self._state)

    @workflow.signal
    def pause(self) -> None:
        self._touch(paused=True, status="paused")

    @workflow.signal
    def resume(self) -> None:
        self._touch(paused=False, status="running")

    async def _wait_unpaused(self) -> None:
        await workflow.wait_condition(lambda: not self._state["paused"])


def _error_message(exc: BaseException) -> str:
    cause = exc.cause if isinstance(exc, ActivityError) and exc.cause is not None else exc
    return str(cause)


@workflow.defn(name="ManowarMemoryJob")
class MemoryJobWorkflow(_StateMixin):
    """Input ``{jobId, type, params, dryRun, startPaused}`` plus the batch options in the module
    docstring; returns the job's report (batched jobs add ``batches`` and ``temporalRuns``)."""

    def __init__(self) -> None:
        self._init_state()

    @workflow.run
    async def run(self, request: dict[str, Any]) -> dict[str, Any]:
        if request.get("startPaused"):
            self._touch(paused=True, status="paused")
        job_type = request["type"]
        try:
            if job_type in _BATCHED:
                return await self._run_batched(request)
            return await self._run_whole(request)
        except ActivityError as exc:
            message = _error_message(exc)
            self._touch(status="failed", errors=[*self._state["errors"], message])
            await workflow.execute_activity(
                "manowar_memory_job_failed", {"jobId": request.get("jobId"), "error": message},
                start_to_close_timeout=timedelta(minutes=1), retry_policy=RetryPolicy(maximum_attempts=3),
            )
            raise ApplicationError(message, type="MemoryJobError") from exc

    async def _run_whole(self, request: dict[str, Any]) -> dict[str, Any]:
        await self._wait_unpaused()
        report: dict[str, Any] = await workflow.execute_activity(
            "manowar_memory_job", request,
            **activity_options(request),
        )
        self._touch(processed=int(report.get("processed", 0)), status="completed", result=report)
        return report

    async def _run_batched(self, request: dict[str, Any]) -> dict[str, Any]:
        now = request.get("now") or int(workflow.now().timestamp() * 1000)
        cursor = request.get("cursor")
        report = request.get("report")
        run = int(request.get("run") or 0)
        batches = int(request.get("batchesDone") or 0)
        per_run = max(1, int(request.get("batchesPerRun") or BATCHES_PER_RUN))
        self._touch(processed=int((report or {}).get("processed", 0)), run=run, batches=batches)
        in_run = 0
        opts = activity_options(request)
        while True:
            await self._wait_unpaused()
            out = await workflow.execute_activity(
                "manowar_memory_job_batch",
                {"jobId": request.get("jobId"), "type": request["type"], "params": request.get("params"),
                 "dryRun": bool(request.get("dryRun")), "batchSize": request.get("batchSize"), "now": now,
                 "cursor": cursor, "report": report, "run": run, "batchDelay": request.get("batchDelay")},
                **opts,
            )
            cursor, report = out["cursor"], out["report"]
            batches += 1
            in_run += 1
            self._touch(processed=int(report.get("processed", 0)), batches=batches)
            if cursor is None:
                result = {**report, "batches": batches, "temporalRuns": run + 1}
                self._touch(status="completed", result=result)
                return result
            if in_run >= per_run or workflow.info().is_continue_as_new_suggested():
                await workflow.wait_condition(workflow.all_handlers_finished)
                workflow.continue_as_new({
                    **request, "now": now, "cursor": cursor, "report": report, "run": run + 1,
                    "batchesDone": batches, "startPaused": bool(self._state["paused"]),
                })


@workflow.defn(name="ManowarSkillPromotion")
class SkillPromotionWorkflow(_StateMixin):
    """Input ``{patternId, skillName}``: validate, then (when valid) promote."""

    def __init__(self) -> None:
        self._init_state()

    @workflow.run
    async def run(self, request: dict[str, Any]) -> dict[str, Any]:
        await self._wait_unpaused()
        validation = await workflow.execute_activity("manowar_validate_pattern", request["patternId"],
                                                     **activity_options(request))
        if not validation.get("valid"):
            result = {"success": False, "processed": 0, "errors": [validation.get("reason") or "Pattern validation failed"]}
            self._touch(status="completed", result=result)
            return result
        promoted = await workflow.execute_activity("manowar_promote_pattern", request, **activity_options(request))
        result = {"success": bool(promoted.get("promoted")), "processed": 1, **promoted}
        self._touch(status="completed", processed=1, result=result)
        return result
