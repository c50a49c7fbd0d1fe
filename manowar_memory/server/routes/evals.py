"""Retrieval evaluation of a scope on a labelled set of queries."""

from typing import Any

from fastapi import APIRouter

from ... import errors
from ..deps import CallerDep
from ..models import EvalBody

__all__ = ["router"]

router = APIRouter(tags=["evals"])


@router.post("/evals/runs", summary="Evaluate retrieval on a labelled set")
def eval_run(body: EvalBody, caller: CallerDep) -> dict[str, Any]:
    m = caller.memory(body.scope_data())
    layers = tuple(body.layers) if body.layers else ("graph", "vectors")
    results: list[dict[str, Any]] = []
    hit_rate, recall, mrr = 0, 0.0, 0.0
    for case in body.test_cases:
        if not case.expected_ids and not case.expected_contents:
            raise errors.InvalidInputError("every test case needs expectedIds or expectedContents")
        hits = m.search(case.query, k=body.k, layers=layers)
        wanted = [("id", x) for x in case.expected_ids] + [("text", x.lower()) for x in case.expected_contents]
        found: set[int] = set()
        first: int | None = None
        for rank, hit in enumerate(hits, start=1):
            for i, (kind, value) in enumerate(wanted):
                if (hit.id == value) if kind == "id" else (value in (hit.text or "").lower()):
                    found.add(i)
                    first = first or rank
        hit_rate += first is not None
        recall += len(found) / len(wanted)
        mrr += 1 / first if first else 0.0
        results.append({"query": case.query, "hit": first is not None, "recall": len(found) / len(wanted),
                        "rank": first, "retrievedIds": [h.id for h in hits]})
    n = len(results)
    return {"cases": n, "k": body.k, "hitRate": hit_rate / n, "recall": recall / n, "mrr": mrr / n,
            "results": results}
