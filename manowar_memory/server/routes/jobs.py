"""Maintenance jobs: run one (inline, or on Temporal when the server has it) and read one."""

import asyncio
from typing import Any

from fastapi import APIRouter

from ...records import Job
from ..deps import CallerDep, Id, Q
from ..models import JobBody
from ..rest import camel_keys

__all__ = ["job_view", "router"]

router = APIRouter(tags=["jobs"])


def job_view(job: Job) -> Job:
    """``job`` as the API answers it: its report's keys camelCase too."""
    return job.model_copy(update={"data": camel_keys(job.data)})


@router.post("/jobs", response_model=Job, summary="Run a maintenance job (inline or on Temporal)")
async def job_run(body: JobBody, caller: CallerDep) -> Any:
    m = caller.memory(body.scope_data())
    if body.execution == "temporal":
        client = await caller.settings.temporal_client()
        return job_view(await m.astart_temporal_job(client, body.type, body.params, dry_run=body.dry_run,
                                                    task_queue=caller.settings.temporal_task_queue))
    return job_view(await asyncio.to_thread(m.run_job, body.type, body.params, dry_run=body.dry_run))


@router.get("/jobs/{jobId}", response_model=Job, summary="Read a job")
async def job_get(jobId: Id, q: Q, caller: CallerDep) -> Any:  # noqa: N803
    m = caller.memory(q.scope_data())
    job = await asyncio.to_thread(m.job, jobId)
    if job.execution == "temporal" and job.status == "running" and caller.settings.temporal_address:
        job = await m.arefresh_job(await caller.settings.temporal_client(), job)
    return job_view(job)
