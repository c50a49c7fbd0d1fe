"""Retrieval: the lanes (keyword, vector, entity), their fusion and the ranking pipeline."""

from .entities import canonical_key, extract_entities
from .entity_lane import EntityLaneResult, entity_lane
from .fusion import rrf
from .hybrid import HybridResult, LaneHits, fuse, hybrid_search, run_lanes
from .pipeline import (
    BoostStage,
    DecayStage,
    LaneReport,
    MMRStage,
    RankContext,
    RankingStage,
    RankOptions,
    RerankStage,
    StageInsert,
    ranking_stages,
)

__all__ = [
    "BoostStage",
    "DecayStage",
    "EntityLaneResult",
    "HybridResult",
    "LaneHits",
    "LaneReport",
    "MMRStage",
    "RankContext",
    "RankOptions",
    "RankingStage",
    "RerankStage",
    "StageInsert",
    "canonical_key",
    "entity_lane",
    "extract_entities",
    "fuse",
    "hybrid_search",
    "ranking_stages",
    "rrf",
    "run_lanes",
]
