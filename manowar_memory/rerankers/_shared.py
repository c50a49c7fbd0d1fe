"""Helpers shared by the reranker providers: request checks, the timeout and the result list.

In a module of their own (not the package's ``__init__``, which imports the providers) so that a
provider imports them without importing its own package.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from ..errors import InvalidInputError, RerankError
from .base import RerankResult

__all__ = ["DEFAULT_TIMEOUT", "check_request", "finish_results", "resolve_timeout"]

DEFAULT_TIMEOUT = 0.8
"""Seconds a hosted reranker waits for an answer unless told otherwise."""

def check_request(query: str, documents: Sequence[str], top_k: int | None) -> tuple[list[str], int]:
    """Validate a rerank call; return the documents as a list and the effective ``top_k``."""
    if isinstance(documents, str):
        raise InvalidInputError("rerank() takes a sequence of documents, not a single string")
    if not isinstance(query, str):
        raise InvalidInputError(f"query must be a string, got {type(query).__name__}")
    docs = [str(d) for d in documents]
    if top_k is None:
        return docs, len(docs)
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        raise InvalidInputError(f"top_k must be a positive integer or None, got {top_k!r}")
    return docs, min(top_k, len(docs))


def resolve_timeout(timeout: float | None, default: float) -> float:
    """The call's timeout, else the reranker's; must be positive."""
    value = default if timeout is None else timeout
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
        raise InvalidInputError(f"timeout must be a positive number of seconds, got {value!r}")
    return float(value)


def finish_results(
    pairs: Iterable[tuple[Any, Any]], n_documents: int, top_k: int, model_id: str
) -> list[RerankResult]:
    """Keep (index, score) pairs with an integer index in range and a finite score (first one
    per index), best first (ties by index), at most ``top_k``. No usable pair -> RerankError."""
    best: dict[int, float] = {}
    for index, score in pairs:
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < n_documents:
            continue
        if isinstance(score, bool):
            continue
        try:
            value = float(score)
        except (TypeError, ValueError):
            continue
        if math.isfinite(value) and index not in best:
            best[index] = value
    if not best and n_documents > 0:
        raise RerankError(f"{model_id} returned no usable scores for {n_documents} document(s)")
    ordered = sorted(best.items(), key=lambda item: (-item[1], item[0]))
    return [RerankResult(index=i, score=s) for i, s in ordered[:top_k]]
