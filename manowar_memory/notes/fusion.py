"""The reference's candidate selection for notes: a vector-first gate, then lane-weighted RRF.

* **Gate:** when the vector lane's best hit has cosine similarity of at least
  :data:`VECTOR_GATE` (0.82, the "high" confidence threshold), the first ``limit`` vector rows
  are the candidates and the keyword lane is **not run**.
* **Otherwise weighted RRF:** each lane adds ``weight / (k + rank)`` (rank from 1, ``k`` = 60) to
  every item it ranks, with weight 1.0 for the vector lane and 0.3 for the keyword lane (the
  engine's :func:`~manowar_memory.retrieval.fusion.rrf`); items are ordered by the total and the
  first ``limit`` kept.

Only *which* items become candidates comes from here: the cards are scored afterwards on cosine
similarity and the lexical bonus (:mod:`manowar_memory.notes.service`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from ..retrieval.fusion import rrf

__all__ = ["LANE_WEIGHTS", "RRF_K", "VECTOR_GATE", "Fusion", "gated_fusion"]

VECTOR_GATE = 0.82
RRF_K = 60
LANE_WEIGHTS: Mapping[str, float] = {"vector": 1.0, "keyword": 0.3}


@dataclass
class Fusion:
    """The candidates of one search: ``ids`` best first, whether the gate held (``gated``: the
    keyword lane was skipped), and each candidate's 1-based rank per lane."""

    ids: list[str]
    gated: bool
    ranks: dict[str, dict[str, int]] = field(default_factory=dict)


def gated_fusion(vector: Sequence[tuple[str, float]], keyword: Callable[[], Sequence[str]], limit: int, *,
                 gate: float = VECTOR_GATE, weights: Mapping[str, float] = LANE_WEIGHTS, k: int = RRF_K) -> Fusion:
    """Pick ``limit`` candidates from the vector lane (``[(id, cosine)]``, best first) and the
    keyword lane (``keyword()``, ids best first, called only when the gate does not hold)."""
    if limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")
    vector_ids = [item for item, _ in vector]
    if vector and vector[0][1] >= gate:
        ids = list(dict.fromkeys(vector_ids))[:limit]
        return Fusion(ids, True, {i: {"vector": vector_ids.index(i) + 1} for i in ids})
    keyword_ids = list(dict.fromkeys(keyword()))
    lanes = {"vector": [(i, s) for i, s in vector], "keyword": [(i, 1.0 / r) for r, i in enumerate(keyword_ids, 1)]}
    fused = rrf(lanes, weights, k)[:limit]
    ranks = {item: {name: ids.index(item) + 1 for name, ids in (("vector", vector_ids), ("keyword", keyword_ids))
                    if item in ids} for item, _ in fused}
    return Fusion([item for item, _ in fused], False, ranks)
