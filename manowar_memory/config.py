"""Engine settings with the reference's defaults (the documented ones where docs and code differ)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["MemoryConfig", "PackerConfig", "RetrievalConfig"]


class RetrievalConfig(BaseModel):
    """Lanes, fusion and ranking."""

    model_config = ConfigDict(extra="forbid")

    rrf_k: int = Field(60, ge=1, description="RRF constant k.")
    lane_weights: dict[str, float] = Field(
        default_factory=lambda: {"keyword": 1.0, "vector": 1.5, "entity": 0.5},
        description="Per-lane RRF weights (Comis: keyword 1.0, vector 1.5).",
    )
    lane_depth: int = Field(4, ge=1, description="Each lane fetches limit × lane_depth candidates before fusion.")
    min_vector_cosine: float = Field(
        0.1, ge=-1.0, le=1.0,
        description="Vector-only hits below this cosine are dropped as below threshold (keyword hits are kept).",
    )
    decay_half_life_days: float = Field(30.0, gt=0)
    decay_floor: float = Field(0.35, ge=0.0, le=1.0, description="Decay never multiplies a score below this.")
    rerank_timeout_s: float = Field(0.8, gt=0)
    rerank_min_candidates: int = Field(3, ge=2)
    rerank_dominance_delta: float = Field(0.05, ge=0)
    mmr_lambda: float = Field(0.7, ge=0.0, le=1.0)


class PackerConfig(BaseModel):
    """Prompt packing defaults (the reference's docs: limit 12, 6 items, 120 chars, 900 budget)."""

    model_config = ConfigDict(extra="forbid")

    limit: int = Field(12, ge=1, le=100, description="Hits per layer.")
    max_items: int = Field(6, ge=1, le=50)
    max_item_chars: int = Field(120, ge=20, le=4000)
    budget_chars: int = Field(900, ge=40)
    header: str = "Memory context:"


class MemoryConfig(BaseModel):
    """Every tunable of the engine."""

    model_config = ConfigDict(extra="forbid")

    session_context_limit: int = Field(12, ge=1, description="Working buffer length (MEMORY_SESSION_CONTEXT_LIMIT).")
    session_ttl_ms: int = Field(2_592_000_000, ge=1000, description="Working session expiry (30 days).")
    fact_max_per_turn: int = Field(5, ge=1)
    fact_min_confidence: float = Field(0.6, ge=0.0, le=1.0)
    fact_max_chars: int = Field(240, ge=40)
    concurrent_layers: bool = True
    retrieval: RetrievalConfig = Field(default_factory=RetrievalConfig)
    packer: PackerConfig = Field(default_factory=PackerConfig)
