"""Maximal marginal relevance: trade a little relevance for variety."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from .._util import tokens
from ..candidates import Candidate

__all__ = ["jaccard", "mmr_order"]


def _word_set(text: str) -> frozenset[str]:
    return frozenset(t for t in tokens(text) if len(t) > 2)


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    """Jaccard similarity of two word sets (two empty sets are identical; one empty set shares nothing)."""
    if not a and not b:
        return 1.0
    if not a or not b:
        return 0.0
    return len(a & b) / len(a | b)


def mmr_order(
    candidates: Sequence[Candidate],
    *,
    lambda_: float = 0.7,
    relevance: Callable[[Candidate], float] | None = None,
    limit: int | None = None,
    keep_order_in_scores: bool = False,
) -> list[Candidate]:
    """Greedy MMR: pick the candidate maximising ``λ·rel − (1−λ)·max_sim(selected)``.

    Similarity is cosine over embeddings when every candidate has one, else Jaccard over
    word sets. Relevance is min–max normalised. The returned order IS the MMR order (the
    reference re-sorted by score afterwards, which undid it); ``trace['mmr_rank']`` records
    the position. Scores are not changed, unless ``keep_order_in_scores``: then each score
    is lowered just enough to be no higher than the one before it (the original goes to
    ``trace['pre_mmr_score']``), so a later stable sort by score keeps the MMR order.
    """
    items = list(candidates)
    lam = min(1.0, max(0.0, lambda_))
    rel_of = relevance or (lambda c: c.score)
    if len(items) <= 1:
        for i, c in enumerate(items):
            c.trace["mmr_rank"] = i
        return items
    rel = np.array([rel_of(c) for c in items], dtype=np.float64)
    span = rel.max() - rel.min()
    rel = (rel - rel.min()) / span if span > 0 else np.ones_like(rel)
    if all(c.embedding is not None for c in items) and len({len(c.embedding or []) for c in items}) == 1:
        mat = np.array([c.embedding for c in items], dtype=np.float64)
        norms = np.linalg.norm(mat, axis=1, keepdims=True)
        mat = mat / np.where(norms == 0, 1, norms)
        sim = mat @ mat.T
    else:
        sets = [_word_set(c.text) for c in items]
        sim = np.array([[jaccard(a, b) for b in sets] for a in sets])
    n = len(items)
    want = n if limit is None else min(limit, n)
    selected: list[int] = []
    max_sim = np.zeros(n)
    remaining = np.ones(n, dtype=bool)
    while len(selected) < want:
        objective = lam * rel - (1 - lam) * max_sim
        objective = np.where(remaining, objective, -np.inf)
        pick = int(np.argmax(objective))  # first index wins ties
        selected.append(pick)
        remaining[pick] = False
        max_sim = np.maximum(max_sim, sim[pick])
    ordered = [items[i] for i in selected] + [items[i] for i in range(n) if remaining[i]]
    for i, c in enumerate(ordered):
        c.trace["mmr_rank"] = i
    if keep_order_in_scores:
        _monotone(ordered)
    return ordered


def _monotone(ordered: list[Candidate]) -> None:
    ceiling = float("inf")
    for c in ordered:
        if c.score > ceiling:
            c.trace["pre_mmr_score"] = c.score
            c.score = ceiling
        ceiling = c.score
