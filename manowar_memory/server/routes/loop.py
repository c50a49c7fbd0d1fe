"""The hot loop: assemble the context of a turn, record the turn, remember a fact."""

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from ... import errors
from ...engine import PostTurnResult, PreTurnResult, RememberResult
from ..deps import Caller, CallerDep, request_caller
from ..models import AssembleBody, LoopBody, LoopResult, RecordBody, RememberBody, message_dicts
from ..rest import json_body, served_by, validate_body

__all__ = ["router"]

router = APIRouter(tags=["loop"])


def _assemble_json(body: AssembleBody, caller: Caller) -> str:
    result = caller.memory(body.scope_data()).context(
        body.query, layers=body.layers, limit=body.limit, max_items=body.max_items,
        max_item_chars=body.max_item_chars, budget_chars=body.budget_chars, rerank=body.rerank, mmr=body.mmr,
        explain=body.explain)
    return result.model_dump_json(by_alias=True)  # serialised once, from the engine's model (the response_model)


async def _assemble_served(request: Request) -> Response:
    # the hot path, as FastAPI would serve `assemble` but without its per-request dependency solving:
    # a malformed JSON body is refused first, then the key, then the body's fields
    data = json_body(await request.body(), request.headers.get("content-type"))
    who = request_caller(request)
    body = validate_body(AssembleBody, data)
    return Response(await run_in_threadpool(_assemble_json, body, who), media_type="application/json")


def assemble(body: AssembleBody, caller: CallerDep) -> Any:
    # the documented signature of context/assemble (its OpenAPI operation); requests go to _assemble_served
    return Response(_assemble_json(body, caller), media_type="application/json")


router.add_api_route("/context/assemble", assemble, methods=["POST"], response_model=PreTurnResult,
                     summary="Assemble context (pre_turn)", route_class_override=served_by(_assemble_served))


@router.post("/turns/record", response_model=PostTurnResult, summary="Record a turn (post_turn)")
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
