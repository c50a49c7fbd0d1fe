"""Reciprocal Rank Fusion across lanes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

__all__ = ["rrf"]


def rrf(
    lanes: Mapping[str, Sequence[tuple[str, float]]],
    weights: Mapping[str, float] | None = None,
    k: int = 60,
) -> list[tuple[str, float]]:
    """Fuse ranked lanes ``{lane: [(id, score), ...best first]}``.

    Each id gets ``Σ weight / (k + rank)`` (rank from 1), normalised to 0–1 by the best
    possible total (rank 1 in every non-empty lane). With a single non-empty lane its
    own scores pass through unchanged. Ties keep first-seen order.
    """
    weights = weights or {}
    live = {name: hits for name, hits in lanes.items() if hits}
    if not live:
        return []
    if len(live) == 1:
        (hits,) = live.values()
        return [(i, float(s)) for i, s in hits]
    totals: dict[str, float] = {}
    for name, hits in live.items():
        w = float(weights.get(name, 1.0))
        for rank, (item_id, _) in enumerate(hits, start=1):
            totals[item_id] = totals.get(item_id, 0.0) + w / (k + rank)
    best = sum(float(weights.get(name, 1.0)) for name in live) / (k + 1)
    fused = sorted(totals.items(), key=lambda kv: kv[1], reverse=True)
    return [(i, min(1.0, s / best)) for i, s in fused]
