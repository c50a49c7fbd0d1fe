"""The unit every retrieval and ranking stage passes along."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .records import Layer

__all__ = ["Candidate", "relevance", "vector_relevance"]


@dataclass
class Candidate:
    """One retrieved memory on its way to the prompt.

    ``score`` is the stage's current relevance (0–1 after fusion); ``lanes`` keeps each
    lane's own score (``keyword``, ``vector``, ``entity``) and ``trace`` what each later
    stage did to it (``decay``, ``rerank``...), so results can explain themselves.
    """

    layer: Layer
    id: str
    text: str
    score: float
    created_at: int | None = None
    last_accessed_at: int | None = None
    access_count: int = 0
    confidence: float | None = None
    importance: float | None = None
    source: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    lanes: dict[str, float] = field(default_factory=dict)
    trace: dict[str, float] = field(default_factory=dict)
    embedding: list[float] | None = None
    record: Any = None


def vector_relevance(cosine: float) -> float:
    """A cosine similarity as relevance in [0, 1]: ``(1 + cosine) / 2`` (1 same direction,
    0.5 unrelated, 0 opposite), the vector lane's own scale."""
    return min(1.0, max(0.0, (1.0 + float(cosine)) / 2.0))


def relevance(candidate: Candidate) -> float:
    """The candidate's relevance in [0, 1], the one score every adapter reports and every
    ``score_threshold`` compares with: the strongest evidence a retrieval lane gave it (vector
    lane: :func:`vector_relevance` of its cosine; keyword lane: BM25 relative to the search's
    best keyword hit; entity lane: its own 0–1 score). A candidate no lane scored (a graph,
    pattern or working-memory item) reports its ranking score, clipped to [0, 1]. The
    ranking score itself (fusion, decay, boosts; it may pass 1) only orders the results."""
    lanes = [float(v) for v in candidate.lanes.values() if isinstance(v, (int, float)) and not isinstance(v, bool)]
    best = max(lanes) if lanes else float(candidate.score)
    return min(1.0, max(0.0, best))
