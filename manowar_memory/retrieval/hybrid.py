"""Hybrid retrieval over memory rows, then ranking.

Lanes (each reports its own hits and scores, in 0–1):

1. **keyword**: the store's full-text search (SQLite FTS5, Porter stemming, BM25) over an
   OR of the query's content terms; scores are BM25 relative to the lane's best hit;
2. **vector**: the store's vector search, score ``(1 + cosine) / 2``; vector-only hits below
   ``min_vector_cosine`` are dropped as unusable;
3. **entity**: memories sharing named entities with the top fused hits of the first two
   (:mod:`manowar_memory.retrieval.entity_lane`).

Trust is enforced on the raw lanes, before fusion (fusion turns ranks into scores, so a
filtered-out item must never get the chance to be rank 1). The lanes are fused with
weighted RRF (:func:`~manowar_memory.retrieval.fusion.rrf`; a single lane passes its own
scores through). When the vector lane fails or returns nothing usable, keyword results
stand in and the lane report and the call's degradations say so.

Ranking, in this order:

1. **decay**: half-life on the memory's time, with a floor (old but relevant memories stay);
2. **rerank** (optional): skip rule, timeout, fail-soft (the decayed order stands, reported);
3. **boosts**: recency, temporal, proof and trust factors centred on 1 (on a successful
   rerank, applied to the reranked pool and the rest separately, the pool staying first);
4. **MMR** (optional): the returned order is the MMR order.
"""

from __future__ import annotations

import concurrent.futures
import contextvars
import functools
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .._notes import degrade
from .._util import now_ms, term_overlap
from ..candidates import Candidate
from ..config import RetrievalConfig
from ..ranking.boosts import apply_boosts
from ..ranking.decay import apply_decay
from ..ranking.mmr import mmr_order
from ..ranking.rerank import rerank_candidates
from ..ranking.trust import neutralize_markers, trust_level
from ..records import Layer, MemoryRecord
from ..rerankers.base import Reranker
from ..stores.base import Hit, MemoryQuery, Store
from .entity_lane import entity_lane
from .fusion import rrf

__all__ = ["LaneReport", "RankOptions", "hybrid_search", "record_to_candidate"]

LANES = ("keyword", "vector", "entity")


@dataclass
class RankOptions:
    """Which ranking stages run for a search."""

    decay: bool = True
    rerank: bool = False
    mmr: bool = False


@dataclass
class LaneReport:
    """What each lane found and how the search was served.

    ``keyword`` / ``vector`` / ``entity``: hit counts; ``hits``: each lane's own best hits
    as ``[id, score]`` (at most the search limit per lane); ``fallback``: set when keyword
    results stood in for the vector lane; ``rerank``: the rerank outcome;
    ``trust_filtered``: lane hits dropped by the trust filter before fusion.
    """

    keyword: int = 0
    vector: int = 0
    entity: int = 0
    vector_method: str | None = None
    fallback: str | None = None
    rerank: str | None = None
    below_threshold: int = 0
    trust_filtered: int = 0
    entities: list[str] = field(default_factory=list)
    hits: dict[str, list[list[Any]]] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)


def record_to_candidate(layer: Layer, rec: MemoryRecord, score: float, *, default_trust: str = "learned") -> Candidate:
    """A memory row as a candidate, carrying confidence, importance, access and trust signals.

    Forged untrusted-content markers in the stored text are neutralised here, so no search
    result can carry one into a prompt.
    """
    meta = dict(rec.metadata)
    conf = meta.get("confidence")
    imp = meta.get("importance")
    meta["trust"] = trust_level(meta, default_trust)
    return Candidate(
        layer=layer, id=rec.id, text=neutralize_markers(rec.content), score=score, created_at=rec.created_at,
        last_accessed_at=rec.last_accessed_at, access_count=rec.access_count,
        confidence=float(conf) if isinstance(conf, (int, float)) and not isinstance(conf, bool) else None,
        importance=float(imp) if isinstance(imp, (int, float)) and not isinstance(imp, bool) else None,
        source=rec.source, metadata=meta, record=rec,
    )


_LANE_WORKERS = 4
_LANE_POOL: concurrent.futures.ThreadPoolExecutor | None = None
_LANE_POOL_LOCK = threading.Lock()
_LANE_SLOTS = threading.BoundedSemaphore(_LANE_WORKERS)


def _lane_pool() -> concurrent.futures.ThreadPoolExecutor:
    """The threads that run a search's keyword lane beside its vector lane."""
    global _LANE_POOL
    if _LANE_POOL is None:
        with _LANE_POOL_LOCK:
            if _LANE_POOL is None:
                _LANE_POOL = concurrent.futures.ThreadPoolExecutor(
                    max_workers=_LANE_WORKERS, thread_name_prefix="manowar-lane")
    return _LANE_POOL


def _after_fork() -> None:
    """A forked child inherits the pool without its threads: start afresh there."""
    global _LANE_POOL, _LANE_POOL_LOCK, _LANE_SLOTS
    _LANE_POOL, _LANE_POOL_LOCK, _LANE_SLOTS = None, threading.Lock(), threading.BoundedSemaphore(_LANE_WORKERS)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


def _start_beside(call: Callable[[], list[Hit]]) -> concurrent.futures.Future[list[Hit]] | None:
    """Run ``call`` on a free lane thread, or return None when every one is busy (the caller
    then runs it itself: queueing behind other searches would be slower than not overlapping)."""
    if not _LANE_SLOTS.acquire(blocking=False):
        return None
    slots = _LANE_SLOTS
    try:
        future = _lane_pool().submit(contextvars.copy_context().run, call)
    except BaseException:
        slots.release()
        raise
    future.add_done_callback(lambda _: slots.release())
    return future


def _normalise_keyword(hits: list[Hit]) -> list[Hit]:
    """BM25 is unbounded: express each hit relative to the lane's best (0–1]."""
    top = max((h.score for h in hits), default=0.0)
    if top <= 0:
        return [Hit(h.record, 1.0 / (i + 1)) for i, h in enumerate(hits)]  # no usable scores: rank ramp
    return [Hit(h.record, max(0.0, h.score) / top) for h in hits]


def _trusted(hits: list[Hit], config: RetrievalConfig, report: LaneReport) -> list[Hit]:
    allowed = set(config.include_trust)
    kept = [h for h in hits if trust_level(h.record.metadata, config.default_trust) in allowed]
    report.trust_filtered += len(hits) - len(kept)
    return kept


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
    """Run the lanes, fuse, rank; returns at most ``limit`` candidates and a lane report.

    When the vector lane fails (store error) or finds nothing usable while the keyword
    lane has hits, the keyword results stand in and the report (and the call's
    degradations) say so. A keyword-lane failure is reported the same way and the vector
    lane carries on alone. An embedder failure is not caught here: the caller embeds the
    query.
    """
    now = now_ms() if now is None else now
    report = LaneReport()
    def depth(lane: str) -> int:
        return limit * max(1, config.lane_depths.get(lane, config.lane_depth))

    weights = config.lane_weights

    # -- keyword lane, on a lane thread while this one runs the vector lane (SQLite's FTS5 and
    # numpy's matrix product both release the GIL, so the two overlap)
    run_vector = vector is not None and model_id is not None and weights.get("vector", 1.0) > 0
    run_keyword = weights.get("keyword", 1.0) > 0
    keyword_call = functools.partial(store.keyword_search, query, text, depth("keyword"))
    keyword_job = _start_beside(keyword_call) if run_keyword and run_vector else None

    # -- vector lane
    vector_hits: list[Hit] = []
    vector_error: Exception | None = None
    if run_vector:
        try:
            vector_hits, info = store.vector_search(query, vector, model_id, depth("vector"))  # type: ignore[arg-type]
            report.vector_method = info.method
            for note in info.notes:
                degrade(note)
        except Exception as exc:  # the store's vector path failed: keyword stands in
            vector_error = exc

    keyword_hits: list[Hit] = []
    if run_keyword:
        try:
            keyword_hits = keyword_job.result() if keyword_job is not None else keyword_call()
        except Exception as exc:  # noqa: BLE001 - a broken index must not take the vector lane down
            degrade(f"{layer}: keyword lane failed ({type(exc).__name__}: {exc}); vector results stand alone")
        keyword_hits = _normalise_keyword(_trusted(keyword_hits, config, report))

    if run_vector:
        if vector_error is not None:
            report.fallback = (f"vector lane failed ({type(vector_error).__name__}: {vector_error}); "
                               "keyword results stand in")
            degrade(f"{layer}: {report.fallback}")
        threshold = (1.0 + config.min_vector_cosine) / 2.0
        keyword_ids = {h.record.id for h in keyword_hits}
        usable = [h for h in vector_hits if h.score >= threshold or h.record.id in keyword_ids]
        report.below_threshold = len(vector_hits) - len(usable)
        vector_hits = _trusted(usable, config, report)
        if not vector_hits and keyword_hits and report.fallback is None:
            report.fallback = "vector lane returned nothing usable; keyword results stand in"
            degrade(f"{layer}: {report.fallback}")

    lanes: dict[str, list[tuple[str, float]]] = {
        "keyword": [(h.record.id, h.score) for h in keyword_hits],
        "vector": [(h.record.id, h.score) for h in vector_hits],
    }
    records: dict[str, MemoryRecord] = {}
    for hits in (keyword_hits, vector_hits):
        for h in hits:
            records.setdefault(h.record.id, h.record)

    # -- entity lane, seeded by the fused top of the first two
    entity_hits: list[Hit] = []
    if config.entity_lane and weights.get("entity", 0.0) > 0 and records:
        seeds = [records[i] for i, _ in rrf(lanes, weights, config.rrf_k)[: config.entity_seed_count]]
        try:
            found = entity_lane(
                store, query, text, seeds, list(records.values()), cap=config.entity_cap,
                max_share=config.entity_max_share,
            )
            entity_hits = _trusted(found.hits, config, report)
            report.entities = found.entities
        except Exception as exc:  # noqa: BLE001 - the entity lane is best-effort
            degrade(f"{layer}: entity lane failed ({type(exc).__name__}: {exc}); left out")
        for h in entity_hits:
            records.setdefault(h.record.id, h.record)
        lanes["entity"] = [(h.record.id, h.score) for h in entity_hits]

    report.keyword, report.vector, report.entity = len(keyword_hits), len(vector_hits), len(entity_hits)
    report.hits = {name: [[i, round(s, 6)] for i, s in hits[:limit]] for name, hits in lanes.items() if hits}
    lane_scores: dict[str, dict[str, float]] = {}
    for name, hits in lanes.items():
        for item_id, score in hits:
            lane_scores.setdefault(item_id, {}).setdefault(name, score)

    fused = rrf(lanes, weights, config.rrf_k)
    candidates = []
    for item_id, score in fused:
        cand = record_to_candidate(layer, records[item_id], score, default_trust=config.default_trust)
        cand.lanes = lane_scores[item_id]
        cand.trace["fused"] = score
        candidates.append(cand)

    # -- ranking: decay, rerank, boosts, MMR
    if options.decay:
        candidates = apply_decay(
            candidates, half_life_days=config.decay_half_life_days, floor=config.decay_floor, now=now,
            rebase=config.decay_rebase,
        )
    boost = {
        "now": now, "recency_alpha": config.recency_alpha, "temporal_alpha": config.temporal_alpha,
        "proof_alpha": config.proof_alpha, "trust_alpha": config.trust_alpha, "default_trust": config.default_trust,
    }
    reranked = False
    if options.rerank and reranker is not None and candidates:
        pool, tail = candidates[: max(limit * 2, limit)], candidates[max(limit * 2, limit):]
        ordered, outcome = rerank_candidates(
            text, pool, reranker, timeout=config.rerank_timeout_s,
            min_candidates=config.rerank_min_candidates, dominance_delta=config.rerank_dominance_delta,
        )
        report.rerank = outcome.status if outcome.reason is None else f"{outcome.status}: {outcome.reason}"
        if outcome.status == "reranked":
            reranked = True
            # two score scales: boost each part on its own and keep the reranked pool first
            candidates = apply_boosts(ordered, **boost) + apply_boosts(tail, **boost)
        else:
            candidates = ordered + tail
    elif options.rerank:
        report.rerank = "skipped: no reranker configured"
        degrade("rerank skipped: no reranker configured")
    if not reranked:
        candidates = apply_boosts(candidates, **boost)
    if options.mmr:
        candidates = mmr_order(candidates[: limit * 2], lambda_=config.mmr_lambda, keep_order_in_scores=True)
    return candidates[:limit], report


def overlap_score(terms: list[str], *texts: str | None) -> float:
    """Best term overlap of the query terms with any of the texts."""
    return max((term_overlap(terms, t) for t in texts if t), default=0.0)
