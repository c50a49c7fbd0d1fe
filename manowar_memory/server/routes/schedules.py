"""The key's agent's maintenance schedules (run inline by the server's scheduler)."""

from typing import Any

from fastapi import APIRouter

from ...jobs.schedules import ScheduleInfo
from ..deps import CallerDep, Q, ScheduleId
from ..models import ScheduleCreateBody, ScheduleDeleted, ScheduleList, ScheduleNoteBody, ScheduleTriggered, ScopeFields
from ..rest import camel_keys
from .jobs import job_view

__all__ = ["router"]

router = APIRouter(tags=["schedules"])


def _view(info: ScheduleInfo) -> ScheduleInfo:
    params = camel_keys(info.schedule.params)
    return info.model_copy(update={"schedule": info.schedule.model_copy(update={"params": params})})


@router.get("/schedules", response_model=ScheduleList, summary="The agent's schedules")
def schedules_list(q: Q, caller: CallerDep) -> Any:
    return ScheduleList(schedules=[_view(s) for s in caller.memory(q.scope_data()).agent_schedules()])


@router.post("/schedules", response_model=ScheduleList, summary="Create (or replace) the agent's schedules")
def schedules_create(body: ScheduleCreateBody, caller: CallerDep) -> Any:
    created = caller.memory(body.scope_data()).create_agent_schedules(body.job_types)
    return ScheduleList(schedules=[_view(s) for s in created])


@router.delete("/schedules", response_model=ScheduleDeleted, summary="Delete the agent's schedules")
def schedules_delete(q: Q, caller: CallerDep) -> Any:
    return ScheduleDeleted(deleted=caller.memory(q.scope_data()).delete_agent_schedules())


@router.post("/schedules/{scheduleId}/pause", response_model=ScheduleInfo, summary="Pause a schedule")
def schedule_pause(scheduleId: ScheduleId, body: ScheduleNoteBody, caller: CallerDep) -> Any:  # noqa: N803
    return _view(caller.memory(body.scope_data()).pause_agent_schedule(scheduleId, body.note))


@router.post("/schedules/{scheduleId}/resume", response_model=ScheduleInfo, summary="Resume a schedule")
def schedule_resume(scheduleId: ScheduleId, body: ScheduleNoteBody, caller: CallerDep) -> Any:  # noqa: N803
    return _view(caller.memory(body.scope_data()).resume_agent_schedule(scheduleId, body.note))


@router.post("/schedules/{scheduleId}/trigger", response_model=ScheduleTriggered, summary="Run a schedule's job now")
def schedule_trigger(scheduleId: ScheduleId, body: ScopeFields, caller: CallerDep) -> Any:  # noqa: N803
    job = caller.memory(body.scope_data()).trigger_agent_schedule(scheduleId)
    return ScheduleTriggered(scheduleId=scheduleId, started=job is not None,
                             job=job_view(job) if job is not None else None)
