"""Temporal workflows for the maintenance jobs (deterministic code only: stdlib + temporalio).

``MemoryJobWorkflow`` runs one job through the ``manowar_memory_job`` activity (which runs
the same job function as the inline runner and writes the job record). Consolidation of
many agents runs in batches of 50 wallets with the pause check between batches; every job
checks pause before it starts. State is answered by the ``get_state`` query; ``pause`` and
``resume`` are signals. ``SkillPromotionWorkflow`` validates then promotes a pattern.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

__all__ = [
    "ACTIVITY_OPTIONS", "CONSOLIDATION_BATCH", "MemoryJobWorkflow", "NON_RETRYABLE", "SkillPromotionWorkflow",
]

CONSOLIDATION_BATCH = 50
NON_RETRYABLE = ["InvalidInputError", "NotFoundError", "ValidationError"]
RETRY = RetryPolicy(initial_interval=timedelta(seconds=2), backoff_coefficient=2.0,
                    maximum_interval=timedelta(seconds=120), maximum_attempts=5,
                    non_retryable_error_types=NON_RETRYABLE)
ACTIVITY_OPTIONS: dict[str, Any] = {
    "start_to_close_timeout": timedelta(minutes=30),
    "heartbeat_timeout": timedelta(seconds=60),
    "retry_policy": RETRY,
}


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
    """Input ``{jobId, type, params, dryRun, startPaused}``; returns the job's report."""

    def __init__(self) -> None:
        self._init_state()

    @workflow.run
    async def run(self, request: dict[str, Any]) -> dict[str, Any]:
        if request.get("startPaused"):
            self._touch(paused=True, status="paused")
        params = dict(request.get("params") or {})
        job_type = request["type"]
        if job_type == "consolidate":
            wallets = params.get("agent_wallets") or ([params["agent_wallet"]] if params.get("agent_wallet") else [])
            batches = [wallets[i:i + CONSOLIDATION_BATCH] for i in range(0, len(wallets), CONSOLIDATION_BATCH)] or [[]]
        else:
            batches = [None]
        reports: list[dict[str, Any]] = []
        try:
            for i, batch in enumerate(batches):
                await self._wait_unpaused()
                call_params = params if batch is None else {"agent_wallets": batch}
                report = await workflow.execute_activity(
                    "manowar_memory_job",
                    {**request, "params": call_params, "finalize": i == len(batches) - 1, "batches": len(batches),
                     "partials": reports},
                    **ACTIVITY_OPTIONS,
                )
                reports.append(report)
                self._touch(processed=self._state["processed"] + int(report.get("processed", 0)))
        except ActivityError as exc:
            message = _error_message(exc)
            self._touch(status="failed", errors=[*self._state["errors"], message])
            await workflow.execute_activity(
                "manowar_memory_job_failed", {"jobId": request.get("jobId"), "error": message},
                start_to_close_timeout=timedelta(minutes=1), retry_policy=RetryPolicy(maximum_attempts=3),
            )
            raise ApplicationError(message, type="MemoryJobError") from exc
        result = reports[-1]
        self._touch(status="completed", result=result)
        return result


@workflow.defn(name="ManowarSkillPromotion")
class SkillPromotionWorkflow(_StateMixin):
    """Input ``{patternId, skillName}``: validate, then (when valid) promote."""

    def __init__(self) -> None:
        self._init_state()

    @workflow.run
    async def run(self, request: dict[str, Any]) -> dict[str, Any]:
        await self._wait_unpaused()
        validation = await workflow.execute_activity("manowar_validate_pattern", request["patternId"], **ACTIVITY_OPTIONS)
        if not validation.get("valid"):
            result = {"success": False, "processed": 0, "errors": [validation.get("reason") or "Pattern validation failed"]}
            self._touch(status="completed", result=result)
            return result
        promoted = await workflow.execute_activity("manowar_promote_pattern", request, **ACTIVITY_OPTIONS)
        result = {"success": bool(promoted.get("promoted")), "processed": 1, **promoted}
        self._touch(status="completed", processed=1, result=result)
        return result
