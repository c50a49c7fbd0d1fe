"""Run the maintenance jobs on Temporal: activities, a worker factory, and job start/status.

The activities call the same job functions as :func:`~manowar_memory.jobs.run_job`, in a
thread, heartbeating every ``heartbeat_every`` seconds (and on progress) with
``{processed}``. Bad input (``InvalidInputError``/``NotFoundError``) fails without retries;
other errors are retried by the workflow's policy (2 s initial, ×2, ≤ 120 s, 5 attempts).
The activity writes the job record (``execution: "temporal"``) when the job finishes.
consolidate and decay_update run in bounded batches with continue-as-new (see
:mod:`manowar_memory.jobs.temporal_workflows` and :mod:`manowar_memory.jobs.batched`).
:func:`get_temporal_job` refreshes a running record from the workflow's real status, and
:func:`run_worker` is what ``manowar worker`` runs.

    client = await temporalio.client.Client.connect("127.0.0.1:7233")
    async with create_worker(client, store, task_queue="manowar.memory"):
        job = await start_temporal_job(client, store, "decay_update", {"half_life_days": 30},
                                       task_queue="manowar.memory")
        result = await client.get_workflow_handle(job.temporal_workflow_id).result()
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any

from temporalio import activity
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError
from temporalio.exceptions import ActivityError, ApplicationError, ChildWorkflowError
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from .._util import now_ms
from ..errors import ConfigurationError, InvalidInputError, NotFoundError
from ..records import Job
from . import skills
from ._store import ChangedScopes, JobStore, job_store
from .batched import DEFAULT_BATCH_SIZE, run_job_batch
from .runner import _agent_of, execute_job, invalidate_changes, new_job_id, parse_params, query_cache_of
from .schedules import ensure_default_schedules
from .temporal_schedules import ScheduleActivities, ScheduledMemoryJobWorkflow, TemporalSchedules
from .temporal_workflows import DEFAULT_TASK_QUEUE, MemoryJobWorkflow, SkillPromotionWorkflow

__all__ = [
    "DEFAULT_TASK_QUEUE", "MemoryActivities", "connect_temporal", "create_worker", "get_temporal_job",
    "refresh_temporal_job", "run_worker", "start_skill_promotion", "start_temporal_job",
]

def _processed(report: Mapping[str, Any]) -> int:
    for key in ("consolidated", "patterns", "memoriesArchived", "updated", "deleted", "restored"):
        if isinstance(report.get(key), int):
            return int(report[key])
    return 0


class MemoryActivities:
    """The activities, bound to one store (a Store, a MemoryEngine or a JobStore adapter)."""

    def __init__(self, store: Any, *, heartbeat_every: float = 30.0) -> None:
        self.store: JobStore = job_store(store)
        self.heartbeat_every = heartbeat_every
        self.query_cache = query_cache_of(store)  # an engine's cache: told about the rows a batch changed

    def _heartbeat_interval(self) -> float:
        # well inside the activity's heartbeat timeout, whatever the worker was configured with
        timeout = activity.info().heartbeat_timeout
        return min(self.heartbeat_every, timeout.total_seconds() / 3) if timeout else self.heartbeat_every

    async def _run_with_heartbeat(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        processed = 0
        loop = asyncio.get_running_loop()
        every = self._heartbeat_interval()

        def progress(n: int) -> None:
            nonlocal processed
            processed += n
            loop.call_soon_threadsafe(activity.heartbeat, {"processed": processed})

        task = asyncio.ensure_future(asyncio.to_thread(fn, *args, progress=progress, **kwargs))
        while True:
            done, _ = await asyncio.wait({task}, timeout=every)
            if done:
                break
            activity.heartbeat({"processed": processed})
        result = task.result()
        activity.heartbeat({"processed": processed, "done": True})
        return result

    @activity.defn(name="manowar_memory_job")
    async def run_job(self, request: dict[str, Any]) -> dict[str, Any]:
        job_type = request["type"]
        changes = ChangedScopes()
        try:
            params = parse_params(job_type, request.get("params"))
            report = await self._run_with_heartbeat(
                execute_job, self.store, job_type, params, dry_run=bool(request.get("dryRun")), changes=changes)
        except (InvalidInputError, NotFoundError) as exc:
            raise ApplicationError(str(exc), type=type(exc).__name__, non_retryable=True) from exc
        finally:
            await asyncio.to_thread(invalidate_changes, self.query_cache, changes)
        report = {**report, "processed": _processed(report)}
        if request.get("jobId"):
            await asyncio.to_thread(self._complete, request["jobId"], report, bool(request.get("dryRun")),
                                    activity.info().workflow_run_id, False)
        return report

    def _complete(self, job_id: str, report: dict[str, Any], dry_run: bool, run_id: str | None,
                  latest_run: bool) -> None:
        """Write the completed job record (in a thread: store calls block). ``latest_run``: the
        record takes this run's id, else it keeps the one it has."""
        job = self.store.get_job(job_id)
        if job is not None:
            data = {**(job.data or {}), **report, "dryRun": dry_run}
            self.store.put_job(job.model_copy(update={
                "status": "completed", "completed_at": now_ms(), "data": data, "error": None,
                "temporal_run_id": run_id if latest_run else (job.temporal_run_id or run_id)}))

    @activity.defn(name="manowar_memory_job_batch")
    async def run_batch(self, request: dict[str, Any]) -> dict[str, Any]:
        """One batch of a batched job; on the last one, write the completed job record."""
        job_type = request["type"]
        changes = ChangedScopes()
        try:
            out: dict[str, Any] = await self._run_with_heartbeat(
                run_job_batch, self.store, job_type, request.get("params"), request.get("cursor"),
                request.get("report"), batch_size=int(request.get("batchSize") or DEFAULT_BATCH_SIZE),
                now=int(request["now"]), job_id=request.get("jobId"), dry_run=bool(request.get("dryRun")),
                changes=changes)
        except (InvalidInputError, NotFoundError) as exc:
            raise ApplicationError(str(exc), type=type(exc).__name__, non_retryable=True) from exc
        finally:
            await asyncio.to_thread(invalidate_changes, self.query_cache, changes)
        out["report"]["processed"] = _processed(out["report"])
        delay = float(request.get("batchDelay") or 0)
        if delay > 0:  # test hook: hold the batch after its writes, heartbeating, before reporting it
            loop = asyncio.get_running_loop()
            end = loop.time() + delay
            while (left := end - loop.time()) > 0:
                activity.heartbeat({"processed": out["report"]["processed"], "holding": True})
                await asyncio.sleep(min(left, self._heartbeat_interval()))
        if out["cursor"] is None and request.get("jobId"):
            await asyncio.to_thread(self._complete, request["jobId"], out["report"], bool(request.get("dryRun")),
                                    activity.info().workflow_run_id, True)
        return out

    @activity.defn(name="manowar_memory_job_failed")
    async def mark_failed(self, request: dict[str, Any]) -> None:
        if request.get("jobId"):
            await asyncio.to_thread(self._fail, request["jobId"], request.get("error"))

    def _fail(self, job_id: str, error: str | None) -> None:
        job = self.store.get_job(job_id)
        if job is not None:
            self.store.put_job(job.model_copy(update={"status": "failed", "error": error, "completed_at": now_ms()}))

    @activity.defn(name="manowar_validate_pattern")
    async def validate_pattern(self, pattern_id: str) -> dict[str, Any]:
        return await asyncio.to_thread(skills.validate_pattern, self.store, pattern_id)

    @activity.defn(name="manowar_promote_pattern")
    async def promote_pattern(self, request: dict[str, Any]) -> dict[str, Any]:
        return await asyncio.to_thread(skills.promote_pattern, self.store, request["patternId"], request["skillName"])

    def all(self) -> list[Any]:
        return [self.run_job, self.run_batch, self.mark_failed, self.validate_pattern, self.promote_pattern]


def create_worker(client: Client, store: Any, *, task_queue: str = DEFAULT_TASK_QUEUE,
                  heartbeat_every: float = 30.0, **worker_kwargs: Any) -> Worker:
    """A worker serving the memory workflows and activities on ``task_queue``
    (use ``async with`` or ``await worker.run()``), scheduled runs included."""
    acts = MemoryActivities(store, heartbeat_every=heartbeat_every)
    runner = SandboxedWorkflowRunner(
        restrictions=SandboxRestrictions.default.with_passthrough_modules("manowar_memory"))
    return Worker(client, task_queue=task_queue,
                  workflows=[MemoryJobWorkflow, SkillPromotionWorkflow, ScheduledMemoryJobWorkflow],
                  activities=[*acts.all(), *ScheduleActivities(store).all()], workflow_runner=runner, **worker_kwargs)


async def start_temporal_job(client: Client, store: Any, type: str, params: Mapping[str, Any] | None = None, *,  # noqa: A002
                             task_queue: str = DEFAULT_TASK_QUEUE, dry_run: bool = False,
                             start_paused: bool = False, batch_size: int | None = None,
                             batches_per_run: int | None = None, heartbeat_timeout: float | None = None,
                             retry_initial_interval: float | None = None, start_to_close_timeout: float | None = None,
                             batch_delay: float | None = None) -> Job:
    """Write a running ``execution: "temporal"`` job record and start its workflow
    (id ``memory-job:{jobId}``). A start failure marks the record failed and returns it.

    consolidate and decay_update run ``batch_size`` rows per activity (default 5000) and
    continue as new every ``batches_per_run`` batches (default 50). ``heartbeat_timeout``,
    ``retry_initial_interval`` and ``start_to_close_timeout`` (seconds; defaults 60, 2, 1800)
    tune how fast a batch lost with its worker is retried. ``batch_delay`` holds every batch
    that long after its writes (a test hook for crash recovery)."""
    for name, value in (("batch_size", batch_size), ("batches_per_run", batches_per_run)):
        if value is not None and value < 1:
            raise InvalidInputError(f"{name} must be >= 1, got {value}")
    for name, seconds in (("heartbeat_timeout", heartbeat_timeout), ("retry_initial_interval", retry_initial_interval),
                          ("start_to_close_timeout", start_to_close_timeout), ("batch_delay", batch_delay)):
        if seconds is not None and seconds < 0:
            raise InvalidInputError(f"{name} must be >= 0 seconds, got {seconds}")
    model = parse_params(type, params)
    s = job_store(store)
    now = now_ms()
    dumped = model.model_dump(mode="json")
    job_id = new_job_id(type, dumped, now)
    workflow_id = f"memory-job:{job_id}"
    job = Job(job_id=job_id, type=type, execution="temporal", status="running", agent_wallet=_agent_of(model),  # type: ignore[arg-type]
              temporal_workflow_id=workflow_id, data={"input": dumped, "dryRun": dry_run}, created_at=now)
    s.put_job(job)
    try:
        handle = await client.start_workflow(
            MemoryJobWorkflow.run,
            {"jobId": job_id, "type": type, "params": dumped, "dryRun": dry_run, "startPaused": start_paused,
             "batchSize": batch_size, "batchesPerRun": batches_per_run, "heartbeatTimeout": heartbeat_timeout,
             "retryInitialInterval": retry_initial_interval, "startToCloseTimeout": start_to_close_timeout,
             "batchDelay": batch_delay},
            id=workflow_id, task_queue=task_queue, memo={"memoryJobId": job_id, "memoryJobType": type},
        )
    except Exception as exc:  # noqa: BLE001 - recorded on the job
        job = job.model_copy(update={"status": "failed", "error": str(exc), "completed_at": now_ms()})
        s.put_job(job)
        return job
    latest = s.get_job(job_id) or job  # a fast worker may already have completed it
    job = latest.model_copy(update={"temporal_run_id": handle.first_execution_run_id or handle.result_run_id})
    s.put_job(job)
    return job


_CLOSED = {
    WorkflowExecutionStatus.FAILED: "failed",
    WorkflowExecutionStatus.TERMINATED: "terminated",
    WorkflowExecutionStatus.CANCELED: "cancelled",
    WorkflowExecutionStatus.TIMED_OUT: "timed out",
}


def _failure_message(exc: BaseException) -> str:
    cause: BaseException | None = exc
    while isinstance(cause, (WorkflowFailureError, ActivityError, ChildWorkflowError)) and cause.cause is not None:
        cause = cause.cause
    return str(cause or exc)


async def refresh_temporal_job(client: Client, store: Any, job: Job) -> Job:
    """Bring a running temporal job record in line with its workflow (latest run) and persist it.

    A workflow that completed, failed, was terminated, cancelled or timed out while the record
    still says running makes the record ``completed`` (data = the workflow's result) or
    ``failed`` (``error`` = what happened and why, ``data.temporalStatus``); ``temporal_run_id``
    follows continue-as-new to the latest run. A running workflow adds ``data.temporalState``
    (its state query). When Temporal cannot be reached the record is returned unchanged."""
    if job.execution != "temporal" or job.status != "running" or not job.temporal_workflow_id:
        return job
    s = job_store(store)
    handle = client.get_workflow_handle(job.temporal_workflow_id)
    try:
        desc = await handle.describe()
    except Exception:  # noqa: BLE001 - Temporal unreachable or the workflow unknown: keep the record
        return job
    status = desc.status
    if status in (None, WorkflowExecutionStatus.RUNNING, WorkflowExecutionStatus.CONTINUED_AS_NEW):
        latest = s.get_job(job.job_id) or job
        changes: dict[str, Any] = {}
        if desc.run_id and latest.temporal_run_id != desc.run_id and latest.status == "running":
            changes["temporal_run_id"] = desc.run_id
            s.put_job(latest.model_copy(update=changes))
        try:
            state = await handle.query(MemoryJobWorkflow.get_state)
        except Exception:  # noqa: BLE001 - no worker to answer: the record without the state
            return latest.model_copy(update=changes)
        return latest.model_copy(update={**changes, "data": {**(latest.data or {}), "temporalState": state}})
    run = client.get_workflow_handle(job.temporal_workflow_id, run_id=desc.run_id)
    result: dict[str, Any] | None = None
    error: str | None = None
    try:
        result = await run.result(follow_runs=False)
    except WorkflowFailureError as exc:
        error = _failure_message(exc)
    except Exception as exc:  # noqa: BLE001 - recorded on the job
        error = str(exc)
    latest = s.get_job(job.job_id) or job
    if latest.status != "running":  # the activity wrote it meanwhile
        return latest
    closed_ms = int(desc.close_time.timestamp() * 1000) if desc.close_time else now_ms()
    data = {**(latest.data or {}), "temporalStatus": status.name}
    if status == WorkflowExecutionStatus.COMPLETED and error is None:
        update: dict[str, Any] = {"status": "completed", "data": {**data, **(result or {})}}
    else:
        what = _CLOSED.get(status, status.name.lower())
        update = {"status": "failed", "data": data,
                  "error": f"workflow {what}: {error}" if error else f"workflow {what}"}
    job = latest.model_copy(update={**update, "completed_at": closed_ms, "temporal_run_id": desc.run_id})
    s.put_job(job)
    return job


async def get_temporal_job(client: Client, store: Any, job_id: str) -> Job | None:
    """The job record; while it says running it is refreshed from the workflow
    (see :func:`refresh_temporal_job`), so it never stays running after the workflow ended."""
    job = job_store(store).get_job(job_id)
    if job is None:
        return None
    return await refresh_temporal_job(client, store, job)


async def start_skill_promotion(client: Client, pattern_id: str, skill_name: str, *,
                                task_queue: str = DEFAULT_TASK_QUEUE, workflow_id: str | None = None) -> dict[str, Any]:
    """Run SkillPromotionWorkflow and wait for its result."""
    wid = workflow_id or f"memory-skill:{pattern_id}:{now_ms()}"
    try:
        return await client.execute_workflow(SkillPromotionWorkflow.run, {"patternId": pattern_id, "skillName": skill_name},
                                             id=wid, task_queue=task_queue)
    except WorkflowFailureError as exc:
        return {"success": False, "processed": 0, "errors": [str(exc.cause or exc)]}


async def connect_temporal(address: str = "127.0.0.1:7233", namespace: str = "default", *,
                           api_key: str | None = None) -> Client:
    """A Temporal client. ``api_key`` (default ``TEMPORAL_API_KEY``) turns on TLS, as Temporal
    Cloud needs. A failure raises :class:`ConfigurationError` saying where it tried and what to set."""
    key = api_key if api_key is not None else (os.environ.get("TEMPORAL_API_KEY") or None)
    try:
        return await Client.connect(address, namespace=namespace, api_key=key, tls=bool(key))
    except Exception as exc:  # one clear error for callers and the CLI
        raise ConfigurationError(
            f"cannot connect to Temporal at {address} (namespace {namespace}): {exc}; start the server "
            "(bash scripts/services.sh start) or set TEMPORAL_ADDRESS / TEMPORAL_NAMESPACE / TEMPORAL_API_KEY"
        ) from exc


async def run_worker(store: Any, *, address: str = "127.0.0.1:7233", namespace: str = "default",
                     task_queue: str = DEFAULT_TASK_QUEUE, heartbeat_every: float = 30.0,
                     graceful_shutdown: float = 10.0, stop: asyncio.Event | None = None,
                     on_ready: Callable[[], None] | None = None, schedules: bool = False,
                     schedule_id_prefix: str = "", api_key: str | None = None, **worker_kwargs: Any) -> None:
    """Connect to Temporal and serve the memory jobs on ``task_queue`` until SIGINT/SIGTERM
    (or ``stop`` is set); then stop polling and give running activities ``graceful_shutdown``
    seconds to finish (an unfinished batch is retried on another worker; batches are idempotent).
    ``on_ready`` is called with no argument once the worker polls. With ``schedules``, the
    maintenance schedule table is created (or replaced) first, for the agents in ``store``,
    unless ``MEMORY_AUTO_SCHEDULES`` is false (see :mod:`manowar_memory.jobs.schedules`).
    ``api_key`` (default ``TEMPORAL_API_KEY``) connects with TLS, for Temporal Cloud."""
    client = await connect_temporal(address, namespace, api_key=api_key)
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    installed = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, stop.set)
            installed.append(sig)
        except (NotImplementedError, RuntimeError):  # not the main thread / no signal support
            pass
    try:
        worker = create_worker(client, store, task_queue=task_queue, heartbeat_every=heartbeat_every,
                               graceful_shutdown_timeout=timedelta(seconds=graceful_shutdown), **worker_kwargs)
        async with worker:
            if schedules:
                backend = TemporalSchedules(client, task_queue=task_queue, id_prefix=schedule_id_prefix, store=store)
                await ensure_default_schedules(backend, store)
            if on_ready is not None:
                on_ready()
            await stop.wait()
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)
