"""The reference API's routes (mem0-style add and search, the vectors layer, transcripts,
rerank), and ``GET /api/memory/{agentWallet}``, which lists an agent's newest facts."""

from collections.abc import Sequence
from typing import Annotated, Any

from fastapi import APIRouter, Query
from starlette.exceptions import HTTPException as StarletteHTTPException

from ... import errors
from ..._util import now_ms
from ...engine import PostTurnResult
from ...tools import memory_view
from ..deps import CallerDep, Id, Q
from ..lean import lean_post
from ..models import (
    AddBody,
    RerankBody,
    SearchBody,
    TranscriptStoreBody,
    VectorIndexBody,
    VectorSearchBody,
    message_dicts,
)
from ..rest import camel_keys, tool_response

__all__ = ["agent_facts_router", "router"]

router = APIRouter(tags=["compatibility"])


@router.post("/add", summary="Extract and store facts from messages")
def add(body: AddBody, caller: CallerDep) -> dict[str, Any]:
    data = body.scope_data()
    if not data.get("threadId"):
        data["threadId"] = f"api-{now_ms()}"
    m = caller.memory(data)
    turn = m.post_turn(message_dicts(body.messages), metadata=body.metadata, extract_facts=True)
    flushed = m.flush(30.0)
    return {"success": True, "sessionId": turn.session_id, "factsIndexed": flushed.facts_indexed,
            "factsBumped": flushed.facts_reinforced}


@lean_post(router, "/search", summary="Search facts", **tool_response("memory_search"))
def search(body: SearchBody, caller: CallerDep) -> dict[str, Any]:
    return caller.tool(body.scope_data(), "memory_search", query=body.query, k=body.limit,
                       layers=body.layers or ["graph"])


@router.post("/vector-search", summary="Search the vectors layer")
def vector_search(body: VectorSearchBody, caller: CallerDep) -> dict[str, Any]:
    m = caller.memory(body.scope_data())
    hits = m.search(body.query, k=body.limit, layers=("vectors",), mmr=True, rerank=m.reranker is not None)
    return {"results": [camel_keys({"text": v["text"], **v["metadata"]})
                        for v in (memory_view(c, default_trust=m.default_trust) for c in hits)],
            "degradations": hits.degradations}


@router.post("/vector-index", summary="Index one row in the vectors layer")
def vector_index(body: VectorIndexBody, caller: CallerDep) -> dict[str, Any]:
    ids = caller.memory(body.scope_data()).add([body.content], metadatas=[body.metadata], source=body.source)
    return {"success": True, "vectorId": ids[0]}


@router.post("/transcript-store", response_model=PostTurnResult, summary="Store a transcript")
def transcript_store(body: TranscriptStoreBody, caller: CallerDep) -> Any:
    return caller.memory(body.scope_data()).post_turn(message_dicts(body.messages), extract_facts=False)


@router.get("/transcript-get/{threadId}", summary="Read a thread's transcript")
def transcript_get(threadId: Id, q: Q, caller: CallerDep) -> dict[str, Any]:  # noqa: N803
    messages = caller.memory({**q.scope_data(), "threadId": threadId}).messages()
    if not messages:
        raise errors.NotFoundError(f"thread {threadId!r} has no transcript in this scope")
    return {"threadId": threadId, "messages": [m.model_dump(mode="json", by_alias=True) for m in messages]}


@router.post("/rerank", summary="Rerank documents")
def rerank(body: RerankBody, caller: CallerDep) -> dict[str, Any]:
    reranker = caller.engine.reranker
    if reranker is None:
        raise errors.ConfigurationError("no reranker is configured on this server")
    results = reranker.rerank(body.query, body.documents, top_k=body.top_k)
    return {"results": [{"index": x.index, "score": x.score, "document": body.documents[x.index]} for x in results]}


@lean_post(router, "/layers/search", summary="Search chosen layers", **tool_response("memory_search"))
def layers_search(body: SearchBody, caller: CallerDep) -> dict[str, Any]:
    return caller.tool(body.scope_data(), "memory_search", query=body.query, k=body.limit, layers=body.layers)


def agent_facts_router(siblings: Sequence[APIRouter]) -> APIRouter:
    """The router of ``GET /{agentWallet}``, a catch-all that must not answer for a route of
    ``siblings`` asked with another method (``GET /api/memory/remember`` is a 405, not "cannot
    name another agent") nor for a path under one of theirs (a 404)."""
    exact: dict[str, set[str]] = {}
    deeper: set[str] = set()
    for sibling in siblings:
        for route in sibling.routes:
            parts = getattr(route, "path", "").split("/")[1:]
            if len(parts) == 1:
                exact.setdefault(parts[0], set()).update(getattr(route, "methods", None) or ())
            elif parts:
                deeper.add(parts[0])
    facts = APIRouter(tags=["compatibility"])

    @facts.get("/{agentWallet}", summary="List an agent's newest facts", **tool_response("memory_list"))
    def list_facts(agentWallet: Id, caller: CallerDep, userAddress: str | None = None,  # noqa: N803
                   limit: Annotated[int, Query(ge=1, le=200)] = 50) -> dict[str, Any]:
        if agentWallet in exact:
            allowed = ", ".join(sorted(exact[agentWallet]))
            raise StarletteHTTPException(405, f"/api/memory/{agentWallet} takes {allowed}, not GET",
                                         headers={"Allow": allowed})
        if agentWallet in deeper:
            raise StarletteHTTPException(404, f"/api/memory/{agentWallet} is not a resource: see /openapi.json")
        return caller.tool({"agentWallet": agentWallet, "userAddress": userAddress}, "memory_list", limit=limit,
                           source="fact")

    return facts
