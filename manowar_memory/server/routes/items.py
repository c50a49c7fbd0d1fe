"""One memory at a time: search, read, change, delete, resolve a conflict; and forget a scope."""

from typing import Any

from fastapi import APIRouter

from ...engine import ForgetReport
from ..deps import CallerDep, Id, Q
from ..lean import lean_post
from ..models import ForgetBody, ItemPatchBody, ResolveBody, SearchBody, both_scopes
from ..problems import PROBLEM_SCHEMA
from ..rest import tool_response

__all__ = ["router"]

router = APIRouter(tags=["items"])


@lean_post(router, "/items/search", summary="Search memories", **tool_response("memory_search"))
def items_search(body: SearchBody, caller: CallerDep) -> dict[str, Any]:
    return caller.tool(body.scope_data(), "memory_search", query=body.query, k=body.limit, layers=body.layers)


@router.get("/items/{memoryId}", summary="Read a memory", **tool_response("memory_get"))
def item_get(memoryId: Id, q: Q, caller: CallerDep) -> dict[str, Any]:  # noqa: N803
    return caller.tool(q.scope_data(), "memory_get", memory_id=memoryId)


@router.patch("/items/{memoryId}", summary="Change one of your memories", **tool_response("memory_update"),
              responses={409: {"description": "Another active fact of the scope has this text (ConflictError)",
                               "content": {"application/problem+json": {"schema": PROBLEM_SCHEMA}}}})
def item_patch(memoryId: Id, body: ItemPatchBody, q: Q, caller: CallerDep) -> dict[str, Any]:  # noqa: N803
    return caller.tool(both_scopes(body.scope_data(), q.scope_data()), "memory_update", memory_id=memoryId,
                       content=body.content, metadata=body.metadata, confidence=body.confidence, status=body.status)


@router.delete("/items/{memoryId}", summary="Delete one of your memories", **tool_response("memory_delete"))
def item_delete(memoryId: Id, q: Q, caller: CallerDep, hardDelete: bool = False) -> dict[str, Any]:  # noqa: N803
    return caller.tool(q.scope_data(), "memory_delete", memory_id=memoryId, hard=hardDelete)


@router.post("/conflicts/{memoryId}/resolve", summary="Resolve a conflict", **tool_response("memory_resolve_conflict"))
def resolve(memoryId: Id, body: ResolveBody, caller: CallerDep) -> dict[str, Any]:  # noqa: N803
    return caller.tool(body.scope_data(), "memory_resolve_conflict", memory_id=memoryId,
                       resolution=body.resolution, winning_memory_id=body.winning_memory_id, reason=body.reason)


@router.post("/forget", response_model=ForgetReport,
             summary="Erase everything a scope owns (a user: every layer, archives, indexes)")
async def forget(body: ForgetBody, caller: CallerDep) -> Any:
    return await caller.memory(body.scope_data()).aforget()
