"""The hot loop: assemble the context of a turn, record the turn, remember a fact."""

from typing import Any

from fastapi import APIRouter
from fastapi.responses import Response

from ... import errors
from ...engine import PostTurnResult, PreTurnResult, RememberResult
from ..deps import CallerDep
from ..lean import lean_post
from ..models import AssembleBody, LoopBody, LoopResult, RecordBody, RememberBody, message_dicts

__all__ = ["router"]

router = APIRouter(tags=["loop"])


@lean_post(router, "/context/assemble", response_model=PreTurnResult, summary="Assemble context (pre_turn)")
def assemble(body: AssembleBody, caller: CallerDep) -> Any:
    result = caller.memory(body.scope_data()).context(
        body.query, layers=body.layers, limit=body.limit, max_items=body.max_items,
        max_item_chars=body.max_item_chars, budget_chars=body.budget_chars, rerank=body.rerank, mmr=body.mmr,
        explain=body.explain)
    # serialised once, from the engine's model (the response_model), not validated again
    return Response(result.model_dump_json(by_alias=True), media_type="application/json")


@lean_post(router, "/turns/record", response_model=PostTurnResult, summary="Record a turn (post_turn)")
def record(body: RecordBody, caller: CallerDep) -> Any:
    return caller.memory(body.scope_data()).post_turn(
        message_dicts(body.messages), body.tool_calls, metadata=body.metadata, extract_facts=body.extract_facts,
        turn_id=body.turn_id)


@router.post("/remember", response_model=RememberResult, summary="Remember a fact")
def remember(body: RememberBody, caller: CallerDep) -> Any:
    return caller.memory(body.scope_data()).remember(body.content, fact_type=body.fact_type,
                                                     confidence=body.confidence, importance=body.importance,
                                                     metadata=body.metadata)


@router.post("/loop", response_model=LoopResult, summary="Record then assemble")
def loop(body: LoopBody, caller: CallerDep) -> Any:
    if not body.messages and body.query is None:
        raise errors.InvalidInputError("loop needs 'messages' (to record), 'query' (to assemble) or both")
    m = caller.memory(body.scope_data())
    recorded = m.post_turn(message_dicts(body.messages), body.tool_calls, metadata=body.metadata,
                           extract_facts=body.extract_facts, turn_id=body.turn_id) if body.messages else None
    context = m.context(body.query, layers=body.layers, max_items=body.max_items,
                        budget_chars=body.budget_chars) if body.query is not None else None
    return LoopResult(recorded=recorded, context=context)
