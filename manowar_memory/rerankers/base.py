"""The reranker protocol."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

__all__ = ["RerankResult", "Reranker"]


@dataclass(frozen=True)
class RerankResult:
    """One scored document: its index in the input and the provider's relevance score."""

    index: int
    score: float


@runtime_checkable
class Reranker(Protocol):
    """Scores documents against a query with a cross-encoder.

    ``rerank`` raises :class:`~manowar_memory.errors.RerankError` on any failure
    (missing credentials, timeout, upstream error, no usable scores); the ranking stage
    catches it, keeps the previous order and reports it.
    """

    model_id: str

    def rerank(
        self, query: str, documents: Sequence[str], *, top_k: int | None = None, timeout: float | None = None
    ) -> list[RerankResult]:
        """Scores for ``documents``, best first (at most ``top_k``)."""
        ...
