"""The workflow manifests: which operations make up each of the memory loops (static)."""

from typing import Any

from fastapi import APIRouter

from ... import errors
from ..deps import Id

__all__ = ["WORKFLOWS", "router"]

router = APIRouter(tags=["workflows"])


def _step(op: str, method: str, path: str, purpose: str) -> dict[str, str]:
    return {"operationId": op, "method": method, "path": path, "purpose": purpose}


WORKFLOWS: dict[str, dict[str, Any]] = {
    "agent_memory_loop": {
        "id": "agent_memory_loop", "hot": True, "returns": "compact prompt only",
        "steps": [_step("assembleContext", "POST", "/api/memory/context/assemble", "pack memory before the model call"),
                  _step("recordTurn", "POST", "/api/memory/turns/record", "record the turn after the model call")]},
    "memory_maintenance_loop": {
        "id": "memory_maintenance_loop", "hot": False, "returns": "metadata only",
        "steps": [_step("consolidate", "POST", "/api/memory/jobs", "type consolidate"),
                  _step("decayUpdate", "POST", "/api/memory/jobs", "type decay_update")]},
    "memory_pattern_loop": {
        "id": "memory_pattern_loop", "hot": False, "returns": "metadata only",
        "steps": [_step("patternsExtract", "POST", "/api/memory/jobs", "type patterns_extract"),
                  _step("validatePattern", "POST", "/api/memory/patterns/{patternId}/validate", "check a pattern"),
                  _step("promotePattern", "POST", "/api/memory/patterns/{patternId}/promote", "make it a skill")]},
    "memory_archive_loop": {
        "id": "memory_archive_loop", "hot": False, "returns": "metadata only",
        "steps": [_step("archiveCreate", "POST", "/api/memory/jobs", "type archive_create")]},
}


@router.get("/workflows", summary="The workflow manifests")
def workflows() -> dict[str, Any]:
    return {"workflows": list(WORKFLOWS.values())}


@router.get("/workflows/{workflowId}", summary="One workflow manifest")
def workflow(workflowId: Id) -> dict[str, Any]:  # noqa: N803
    if workflowId not in WORKFLOWS:
        raise errors.NotFoundError(f"workflow {workflowId!r} does not exist; use one of {sorted(WORKFLOWS)}")
    return WORKFLOWS[workflowId]
