"""The unit every retrieval and ranking stage passes along."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .records import Layer

__all__ = ["Candidate"]


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
