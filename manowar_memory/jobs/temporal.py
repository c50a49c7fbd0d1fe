"""Run the maintenance jobs on Temporal: activities, a worker factory, and job start/status.

The activities call the same job functions as :func:`~manowar_memory.jobs.run_job`, in a
thread, heartbeating every ``heartbeat_every`` seconds (and on progress) with
``{processed}``. Bad input (``InvalidInputError``/``NotFoundError``) fails without retries;
other errors are retried by the workflow's policy (2 s initial, ×2, ≤ 120 s, 5 attempts).
The activity writes the job record (``execution: "temporal"``) when the job finishes.

    client = await temporalio.client.Client.connect("127.0.0.1:7233")
    async with create_worker(client, store, task_queue="manowar.memory"):
        job = await start_temporal_job(client, store, "decay_update", {"half_life_days": 30},
                                       task_queue="manowar.memory")
        result = await client.get_workflow_handle(job.temporal_workflow_id).result()
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from temporalio import activity
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from .._util import now_ms
from ..errors import InvalidInputError, NotFoundError
from ..records import Job
from . import core
from ._store import StoreAdapter, job_store
from .runner import _agent_of, execute_job, new_job_id, parse_params
from .temporal_workflows import MemoryJobWorkflow, SkillPromotionWorkflow

__all__ = [
    "DEFAULT_TASK_QUEUE", "MemoryActivities", "create_worker", "get_temporal_job", "start_skill_promotion",
    "start_temporal_job",
]

DEFAULT_TASK_QUEUE = "manowar.memory.activities"


def _merge(reports: list[dict[str, Any]]) -> dict[str, Any]:
    if len(reports) == 1:
        return reports[0]
    merged: dict[str, Any] = {}
    for rep in reports:
        for key, value in rep.items():
            if isinstance(value, bool) or key not in merged:
                merged[key] = value if not isinstance(value, (dict, list)) else (dict(value) if isinstance(value, dict) else list(value))
            elif isinstance(value, (int, float)):
                merged[key] += value
            elif isinstance(value, dict):
                merged[key].update(value)
            elif isinstance(value, list):
                merged[key] = (merged[key] + value)[:200]
    return merged


def _processed(report: Mapping[str, Any]) -> int:
    for key in ("consolidated", "patterns", "memoriesArchived", "updated", "deleted", "restored"):
        if isinstance(report.get(key), int):
            return int(report[key])
    return 0


class MemoryActivities:
    """The activities, bound to one store (a Store, a MemoryEngine or a JobStore adapter)."""

    def __init__(self, store: Any, *, heartbeat_every: float = 30.0) -> None:
        self.store: StoreAdapter = job_store(store)
        self.heartbeat_every = heartbeat_every

    async def _run_with_heartbeat(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        processed = 0
        loop = asyncio.get_running_loop()

        def progress(n: int) -> None:
            nonlocal processed
            processed += n
            loop.call_soon_threadsafe(activity.heartbeat, {"processed": processed})

        task = asyncio.ensure_future(asyncio.to_thread(fn, *args, progress=progress, **kwargs))
        while True:
            done, _ = await asyncio.wait({task}, timeout=self.heartbeat_every)
            if done:
                break
            activity.heartbeat({"processed": processed})
        result = task.result()
        activity.heartbeat({"processed": processed, "done": True})
        return result

    @activity.defn(name="manowar_memory_job")
    async def run_job(self, request: dict[str, Any]) -> dict[str, Any]:
        job_type = request["type"]
        try:
            params = parse_params(job_type, request.get("params"))
            report = await self._run_with_heartbeat(
                execute_job, self.store, job_type, params, dry_run=bool(request.get("dryRun")))
        except (InvalidInputError, NotFoundError) as exc:
            raise ApplicationError(str(exc), type=type(exc).__name__, non_retryable=True) from exc
        report = {**report, "processed": _processed(report)}
        if request.get("finalize", True) and request.get("jobId"):
            full = _merge([*(request.get("partials") or []), report])
            job = self.store.get_job(request["jobId"])
            if job is not None:
                data = {**(job.data or {}), **full, "dryRun": bool(request.get("dryRun"))}
                self.store.put_job(job.model_copy(update={
                    "status": "completed", "completed_at": now_ms(), "data": data,
                    "temporal_run_id": job.temporal_run_id or activity.info().workflow_run_id}))
            return full
        return report

    @activity.defn(name="manowar_memory_job_failed")
    async def mark_failed(self, request: dict[str, Any]) -> None:
        job = self.store.get_job(request.get("jobId") or "") if request.get("jobId") else None
        if job is not None:
            self.store.put_job(job.model_copy(update={"status": "failed", "error": request.get("error"),
                                                      "completed_at": now_ms()}))

    @activity.defn(name="manowar_validate_pattern")
    async def validate_pattern(self, pattern_id: str) -> dict[str, Any]:
        return await asyncio.to_thread(core.validate_pattern, self.store, pattern_id)

    @activity.defn(name="manowar_promote_pattern")
    async def promote_pattern(self, request: dict[str, Any]) -> dict[str, Any]:
        return await asyncio.to_thread(core.promote_pattern, self.store, request["patternId"], request["skillName"])

    def all(self) -> list[Any]:
        return [self.run_job, self.mark_failed, self.validate_pattern, self.promote_pattern]


def create_worker(client: Client, store: Any, *, task_queue: str = DEFAULT_TASK_QUEUE,
                  heartbeat_every: float = 30.0, **worker_kwargs: Any) -> Worker:
    """A worker serving the memory workflows and activities on ``task_queue``
    (use ``async with`` or ``await worker.run()``)."""
    acts = MemoryActivities(store, heartbeat_every=heartbeat_every)
    runner = SandboxedWorkflowRunner(
        restrictions=SandboxRestrictions.default.with_passthrough_modules("manowar_memory"))
    return Worker(client, task_queue=task_queue, workflows=[MemoryJobWorkflow, SkillPromotionWorkflow],
                  activities=acts.all(), workflow_runner=runner, **worker_kwargs)


async def start_temporal_job(client: Client, store: Any, type: str, params: Mapping[str, Any] | None = None, *,
                             task_queue: str = DEFAULT_TASK_QUEUE, dry_run: bool = False,
                             start_paused: bool = False) -> Job:
    """Write a running ``execution: "temporal"`` job record and start its workflow
    (id ``memory-job:{jobId}``). A start failure marks the record failed and returns it."""
    model = parse_params(type, params)
    s = job_store(store)
    now = now_ms()
    dumped = model.model_dump(mode="json")
    job_id = new_job_id(type, dumped, now)
    job = Job(job_id=job_id, type=type, execution="temporal", status="running", agent_wallet=_agent_of(model),  # type: ignore[arg-type]
              temporal_workflow_id=f"memory-job:{job_id}", data={"input": dumped, "dryRun": dry_run}, created_at=now)
    s.put_job(job)
    try:
        handle = await client.start_workflow(
            MemoryJobWorkflow.run,
            {"jobId": job_id, "type": type, "params": dumped, "dryRun": dry_run, "startPaused": start_paused},
            id=job.temporal_workflow_id, task_queue=task_queue, memo={"memoryJobId": job_id, "memoryJobType": type},
        )
    except Exception as exc:  # noqa: BLE001 - recorded on the job
        job = job.model_copy(update={"status": "failed", "error": str(exc), "completed_at": now_ms()})
        s.put_job(job)
        return job
    latest = s.get_job(job_id) or job  # a fast worker may already have completed it
    job = latest.model_copy(update={"temporal_run_id": handle.first_execution_run_id or handle.result_run_id})
    s.put_job(job)
    return job


async def get_temporal_job(client: Client, store: Any, job_id: str) -> Job | None:
    """The job record, with ``data.temporalState`` refreshed from the workflow's state query
    while the record is still running."""
    s = job_store(store)
    job = s.get_job(job_id)
    if job is None or job.execution != "temporal" or job.status != "running" or not job.temporal_workflow_id:
        return job
    try:
        state = await client.get_workflow_handle(job.temporal_workflow_id).query(MemoryJobWorkflow.get_state)
    except Exception:  # noqa: BLE001 - a failed query leaves the record as is
        return job
    job = s.get_job(job_id) or job
    return job.model_copy(update={"data": {**(job.data or {}), "temporalState": state}})


async def start_skill_promotion(client: Client, pattern_id: str, skill_name: str, *,
                                task_queue: str = DEFAULT_TASK_QUEUE, workflow_id: str | None = None) -> dict[str, Any]:
    """Run SkillPromotionWorkflow and wait for its result."""
    wid = workflow_id or f"memory-skill:{pattern_id}:{now_ms()}"
    try:
        return await client.execute_workflow(SkillPromotionWorkflow.run, {"patternId": pattern_id, "skillName": skill_name},
                                             id=wid, task_queue=task_queue)
    except WorkflowFailureError as exc:
        return {"success": False, "processed": 0, "errors": [str(exc.cause or exc)]}
