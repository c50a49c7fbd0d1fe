"""Retrieval lanes and fusion."""

from .fusion import rrf
from .hybrid import LaneReport, RankOptions, hybrid_search

__all__ = ["LaneReport", "RankOptions", "hybrid_search", "rrf"]
