"""Reciprocal Rank Fusion across lanes (Comis ``fuse``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

__all__ = ["rrf"]


def rrf(
    lanes: Mapping[str, Sequence[tuple[str, float]]],
    weights: Mapping[str, float] | None = None,
    k: int = 60,
) -> list[tuple[str, float]]:
    """Fuse ranked lanes ``{lane: [(id, score), ...best first]}``.

    * Each id gets ``Σ weight / (k + rank)`` over the lanes that found it (rank from 1),
      normalised to 0–1 by the best possible total, ``Σ weights / (k + 1)`` (rank 1 in every
      fused lane), so rank 1 everywhere scores exactly 1.
    * A lane whose weight is 0 takes no part; a lane without a weight counts as 1.
    * With a single non-empty lane, its own scores pass through unchanged (its order and
      its score spread survive, so thresholds keep their meaning).
    * Ties go to the better best rank in any lane, then to the first seen with the lanes
      taken in name order, so the result never depends on the order of the lanes.
    """
    weights = weights or {}
    for name, w in weights.items():
        if w < 0:
            raise ValueError(f"lane weight {name!r} must be >= 0, got {w}")
    live = {name: hits for name, hits in lanes.items() if hits and float(weights.get(name, 1.0)) > 0}
    if not live:
        return []
    if len(live) == 1:
        (hits,) = live.values()
        seen: set[str] = set()
        out = []
        for i, s in hits:
            if i not in seen:
                seen.add(i)
                out.append((i, float(s)))
        return out
    totals: dict[str, float] = {}
    best_rank: dict[str, int] = {}  # ids enter in first-seen order (dicts keep insertion order)
    for name in sorted(live):
        w = float(weights.get(name, 1.0))
        lane_seen: set[str] = set()
        for rank, (item_id, _) in enumerate(live[name], start=1):
            if item_id in lane_seen:  # a lane lists an id once; later repeats are ignored
                continue
            lane_seen.add(item_id)
            if item_id in totals:
                totals[item_id] += w / (k + rank)
                if rank < best_rank[item_id]:
                    best_rank[item_id] = rank
            else:
                totals[item_id] = w / (k + rank)
                best_rank[item_id] = rank
    best = sum(float(weights.get(name, 1.0)) for name in live) / (k + 1)
    # sorted() is stable and ``totals`` holds ids in first-seen order: that breaks the last ties
    fused = sorted(totals, key=lambda i: (-totals[i], best_rank[i]))
    return [(i, min(1.0, totals[i] / best)) for i in fused]
