"""Hybrid retrieval over memory rows: keyword lane + vector lane, fused with RRF,
then decay, optional rerank and optional MMR."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .._notes import degrade
from .._util import term_overlap
from ..candidates import Candidate
from ..config import RetrievalConfig
from ..ranking.decay import apply_decay
from ..ranking.mmr import mmr_order
from ..ranking.rerank import rerank_candidates
from ..records import Layer, MemoryRecord
from ..rerankers.base import Reranker
from ..stores.base import Hit, MemoryQuery, Store
from .fusion import rrf

__all__ = ["LaneReport", "RankOptions", "hybrid_search", "record_to_candidate"]


@dataclass
class RankOptions:
    """Which ranking stages run for a search."""

    decay: bool = True
    rerank: bool = False
    mmr: bool = False


@dataclass
class LaneReport:
    """Per-lane hit counts and how the vector lane was served."""

    keyword: int = 0
    vector: int = 0
    vector_method: str | None = None
    fallback: str | None = None
    rerank: str | None = None
    below_threshold: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


def record_to_candidate(layer: Layer, rec: MemoryRecord, score: float) -> Candidate:
    """A memory row as a candidate, carrying confidence, importance and access signals."""
    meta = rec.metadata
    conf = meta.get("confidence")
    imp = meta.get("importance")
    return Candidate(
        layer=layer, id=rec.id, text=rec.content, score=score, created_at=rec.created_at,
        last_accessed_at=rec.last_accessed_at, access_count=rec.access_count,
        confidence=float(conf) if isinstance(conf, (int, float)) and not isinstance(conf, bool) else None,
        importance=float(imp) if isinstance(imp, (int, float)) and not isinstance(imp, bool) else None,
        source=rec.source, metadata=dict(meta), record=rec,
    )


def hybrid_search(
    store: Store,
    query: MemoryQuery,
    text: str,
    *,
    layer: Layer,
    limit: int,
    vector: list[float] | None,
    model_id: str | None,
    config: RetrievalConfig,
    options: RankOptions,
    reranker: Reranker | None = None,
    now: int | None = None,
) -> tuple[list[Candidate], LaneReport]:
    """Run both lanes, fuse, rank; returns at most ``limit`` candidates and a lane report.

    When the vector lane fails (store error) or finds nothing usable while the keyword
    lane has hits, the keyword results stand in and the report (and the call's
    degradations) say so. An embedder failure is not caught here: the caller embeds
    the query and lets :class:`EmbeddingError` propagate.
    """
    report = LaneReport()
    depth = max(limit * config.lane_depth, limit)
    records: dict[str, MemoryRecord] = {}
    keyword_hits: list[Hit] = store.keyword_search(query, text, depth)
    report.keyword = len(keyword_hits)
    vector_hits: list[Hit] = []
    if vector is not None and model_id is not None:
        try:
            vector_hits, info = store.vector_search(query, vector, model_id, depth)
            report.vector_method = info.method
            for note in info.notes:
                degrade(note)
        except Exception as exc:  # the store's vector path failed: keyword stands in
            report.fallback = f"vector lane failed ({type(exc).__name__}: {exc}); keyword results stand in"
            degrade(f"{layer}: {report.fallback}")
            vector_hits = []
        threshold = (1.0 + config.min_vector_cosine) / 2.0
        keyword_ids = {h.record.id for h in keyword_hits}
        usable = [h for h in vector_hits if h.score >= threshold or h.record.id in keyword_ids]
        report.below_threshold = len(vector_hits) - len(usable)
        vector_hits = usable
        if not vector_hits and keyword_hits and report.fallback is None:
            report.fallback = "vector lane returned nothing usable; keyword results stand in"
            degrade(f"{layer}: {report.fallback}")
    report.vector = len(vector_hits)
    lane_scores: dict[str, dict[str, float]] = {}
    for lane, hits in (("keyword", keyword_hits), ("vector", vector_hits)):
        for h in hits:
            records.setdefault(h.record.id, h.record)
            lane_scores.setdefault(h.record.id, {})[lane] = h.score
    lanes = {
        "keyword": [(h.record.id, h.score) for h in keyword_hits],
        "vector": [(h.record.id, h.score) for h in vector_hits],
    }
    fused = rrf(lanes, config.lane_weights, config.rrf_k)
    if len([l for l in lanes.values() if l]) == 1 and lanes["keyword"]:
        # a lone keyword lane: BM25 scores are unbounded, bring them to 0-1
        top = max(s for _, s in fused) or 1.0
        fused = [(i, s / top) for i, s in fused]
    candidates = []
    for item_id, score in fused:
        cand = record_to_candidate(layer, records[item_id], score)
        cand.lanes = lane_scores[item_id]
        candidates.append(cand)
    if options.decay:
        candidates = apply_decay(
            candidates, half_life_days=config.decay_half_life_days, floor=config.decay_floor, now=now
        )
    if options.rerank and reranker is not None and candidates:
        pool = candidates[: max(limit * 2, limit)]
        reranked, outcome = rerank_candidates(
            text, pool, reranker, timeout=config.rerank_timeout_s,
            min_candidates=config.rerank_min_candidates, dominance_delta=config.rerank_dominance_delta,
        )
        candidates = reranked + candidates[len(pool):]
        report.rerank = outcome.status if outcome.reason is None else f"{outcome.status}: {outcome.reason}"
    elif options.rerank:
        report.rerank = "skipped: no reranker configured"
        degrade("rerank skipped: no reranker configured")
    if options.mmr:
        candidates = mmr_order(candidates[: limit * 2], lambda_=config.mmr_lambda)
    return candidates[:limit], report


def overlap_score(terms: list[str], *texts: str | None) -> float:
    """Best term overlap of the query terms with any of the texts."""
    return max((term_overlap(terms, t) for t in texts if t), default=0.0)
