"""Retrieval lanes (keyword, vector, entity) and their fusion."""

from .entities import canonical_key, extract_entities
from .entity_lane import EntityLaneResult, entity_lane
from .fusion import rrf
from .hybrid import LaneReport, RankOptions, hybrid_search

__all__ = [
    "EntityLaneResult",
    "LaneReport",
    "RankOptions",
    "canonical_key",
    "entity_lane",
    "extract_entities",
    "hybrid_search",
    "rrf",
]
