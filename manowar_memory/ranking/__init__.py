"""Ranking stages: temporal decay, optional rerank (skip rule, timeout, fail-soft), MMR."""

from .decay import apply_decay, decay_multiplier
from .mmr import jaccard, mmr_order
from .rerank import RerankOutcome, rerank_candidates, should_skip_rerank

__all__ = [
    "RerankOutcome",
    "apply_decay",
    "decay_multiplier",
    "jaccard",
    "mmr_order",
    "rerank_candidates",
    "should_skip_rerank",
]
