"""Optional cross-encoder rerank with the skip rule, a timeout and fail-soft."""

from __future__ import annotations

import concurrent.futures
from collections.abc import Sequence
from dataclasses import dataclass

from .._notes import degrade
from ..candidates import Candidate
from ..errors import RerankError
from ..redaction import redact
from ..rerankers.base import Reranker

__all__ = ["RerankOutcome", "rerank_candidates", "should_skip_rerank"]


@dataclass
class RerankOutcome:
    """What the rerank stage did: ``reranked``, ``skipped`` (with the reason) or ``failed``."""

    status: str
    reason: str | None = None


def should_skip_rerank(
    candidates: Sequence[Candidate], *, min_candidates: int = 3, dominance_delta: float = 0.05
) -> str | None:
    """The skip rule: ``few-candidates`` below ``min_candidates``, ``top1-dominates`` when the
    best score beats the second by at least ``dominance_delta``; else None (rerank)."""
    if len(candidates) < max(2, min_candidates):
        return "few-candidates"
    scores = sorted((c.score for c in candidates), reverse=True)
    if scores[0] - scores[1] >= dominance_delta:
        return "top1-dominates"
    return None


def rerank_candidates(
    query: str,
    candidates: Sequence[Candidate],
    reranker: Reranker,
    *,
    timeout: float = 0.8,
    min_candidates: int = 3,
    dominance_delta: float = 0.05,
    executor: concurrent.futures.Executor | None = None,
) -> tuple[list[Candidate], RerankOutcome]:
    """Rerank by the cross-encoder's scores, or keep the incoming order and say why.

    Fail-soft: missing credentials, a timeout or an upstream error keep the incoming
    (decayed) order, and the reason is reported through the call's degradations.
    The incoming score survives as a 1e-6 tie-break. The reranker runs on ``executor`` (the
    engine passes its rerank pool); without one, on a thread of its own for this call.
    """
    ordered = sorted(candidates, key=lambda c: c.score, reverse=True)
    reason = should_skip_rerank(ordered, min_candidates=min_candidates, dominance_delta=dominance_delta)
    if reason is not None:
        return ordered, RerankOutcome("skipped", reason)
    own = executor is None
    pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="manowar-rerank") if own else executor
    assert pool is not None
    future = pool.submit(reranker.rerank, query, [c.text for c in ordered], top_k=len(ordered), timeout=timeout)
    if own:
        pool.shutdown(wait=False)  # the thread ends with the call, even one left running past the timeout
    try:
        results = future.result(timeout=timeout)
    except concurrent.futures.TimeoutError:
        future.cancel()
        message = f"rerank skipped: {reranker.model_id} timed out after {int(timeout * 1000)} ms"
        degrade(message)
        return ordered, RerankOutcome("failed", message)
    except RerankError as exc:
        message = f"rerank skipped: {exc}"
        degrade(message)
        return ordered, RerankOutcome("failed", message)
    except Exception as exc:  # noqa: BLE001 - a reranker that breaks its contract still fails soft
        message = redact(f"rerank skipped: {reranker.model_id} raised {type(exc).__name__}: {exc}")
        degrade(message)
        return ordered, RerankOutcome("failed", message)
    scored = {r.index: r.score for r in results if 0 <= r.index < len(ordered)}
    if not scored:
        message = f"rerank skipped: {reranker.model_id} returned no usable scores"
        degrade(message)
        return ordered, RerankOutcome("failed", message)
    for i, cand in enumerate(ordered):
        if i in scored:
            cand.trace["rerank"] = scored[i]
            cand.score = scored[i] + cand.score * 1e-6
        else:
            cand.score = cand.score * 1e-6  # the provider dropped it: below every scored item
    return sorted(ordered, key=lambda c: c.score, reverse=True), RerankOutcome("reranked")
