"""Patterns mined from the agent's turns, and the skills promoted from them."""

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query

from ..deps import CallerDep, Id, Q
from ..models import PromoteBody, ScopeFields
from ..rest import tool_response

__all__ = ["router"]

router = APIRouter(tags=["patterns"])


@router.get("/patterns", summary="List patterns")
def patterns(q: Q, caller: CallerDep, limit: Annotated[int, Query(ge=1, le=200)] = 20,
             patternType: Literal["workflow", "decision", "response", "tool_sequence"] | None = None,  # noqa: N803
             minSuccessRate: Annotated[float | None, Query(ge=0, le=1)] = None) -> dict[str, Any]:  # noqa: N803
    rows = caller.memory(q.scope_data()).patterns(limit=limit, pattern_type=patternType,
                                                  min_success_rate=minSuccessRate)
    return {"patterns": [p.model_dump(mode="json", by_alias=True) for p in rows]}


@router.get("/patterns/{patternId}", summary="Read a pattern")
def pattern(patternId: Id, q: Q, caller: CallerDep) -> dict[str, Any]:  # noqa: N803
    row = caller.memory(q.scope_data()).artifact("pattern", patternId)
    return {"pattern": row.model_dump(mode="json", by_alias=True)}


@router.post("/patterns/{patternId}/validate", summary="Validate a pattern",
             **tool_response("memory_validate_pattern"))
def pattern_validate(patternId: Id, body: ScopeFields, caller: CallerDep) -> dict[str, Any]:  # noqa: N803
    return caller.tool(body.scope_data(), "memory_validate_pattern", pattern_id=patternId)


@router.post("/patterns/{patternId}/promote", summary="Promote a pattern into a skill",
             **tool_response("memory_promote_pattern"))
def pattern_promote(patternId: Id, body: PromoteBody, caller: CallerDep) -> dict[str, Any]:  # noqa: N803
    return caller.tool(body.scope_data(), "memory_promote_pattern", pattern_id=patternId, skill_name=body.skill_name)


@router.get("/skills", summary="List skills", **tool_response("memory_list_skills"))
def skills(q: Q, caller: CallerDep, category: str | None = None,
           limit: Annotated[int, Query(ge=1, le=100)] = 20) -> dict[str, Any]:
    return caller.tool(q.scope_data(), "memory_list_skills", category=category, limit=limit)


@router.get("/skills/{skillId}", summary="Read a skill", **tool_response("memory_get_skill"))
def skill(skillId: Id, q: Q, caller: CallerDep) -> dict[str, Any]:  # noqa: N803
    return caller.tool(q.scope_data(), "memory_get_skill", skill_id=skillId)
