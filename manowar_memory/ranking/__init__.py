"""Ranking stages, in pipeline order: temporal decay, optional rerank (skip rule, timeout,
fail-soft), boosts (recency, temporal, proof, trust), MMR; and the trust helpers."""

from .boosts import apply_boosts, boost_factors
from .decay import apply_decay, decay_multiplier
from .mmr import jaccard, mmr_order
from .rerank import RerankOutcome, rerank_candidates, should_skip_rerank
from .trust import TRUST_LEVELS, content_delimiter, neutralize_markers, trust_level, wrap_untrusted

__all__ = [
    "TRUST_LEVELS",
    "RerankOutcome",
    "apply_boosts",
    "apply_decay",
    "boost_factors",
    "content_delimiter",
    "decay_multiplier",
    "jaccard",
    "mmr_order",
    "neutralize_markers",
    "rerank_candidates",
    "should_skip_rerank",
    "trust_level",
    "wrap_untrusted",
]
