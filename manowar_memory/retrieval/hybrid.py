"""Hybrid retrieval over memory rows: the lanes, their fusion, then the ranking stages.

:func:`hybrid_search` reads top to bottom as the search runs:

1. **lanes** (:func:`run_lanes`), each with its own hits and scores in 0–1:

   * **keyword**: the store's full-text search (SQLite FTS5, Porter stemming, BM25) over an
     OR of the query's content terms; scores are BM25 relative to the lane's best hit. When the
     query names a calendar date ("in March 2023"), it runs a second time without those words
     (lane ``undated``, fused at ``undated_keyword_share`` of the keyword weight): rows stamped
     with that month match the date words alone, and the event asked about is in the rest.
     Both runs add the word forms the stemmer does not join (the past forms of irregular verbs,
     "win": "won"; the roots of "-ship" and "-hood" nouns;
     :mod:`manowar_memory.retrieval.wordforms`) when ``word_forms`` is on;
   * **vector**: the store's vector search, score ``(1 + cosine) / 2``; vector-only hits below
     ``min_vector_cosine`` are dropped as unusable. It runs beside the keyword lane. When the
     query is still being embedded (``vector_future``), the keyword lane runs first, in the
     embedding's shadow, and the vector lane waits for the vector (``embed_wait`` in
     ``timings_ms``). When the search is given the embedding to do (``embed_query``), the
     thread that runs the vector lane embeds and the keyword lane runs on a lane thread
     beside it: ``embed_wait`` is then the embedding, the vector lane starts the moment the
     vector exists, and ``lanes_wait`` is whatever the lanes beside it outlasted it by (a fast
     embedder, a slow full-text search, or a store a round trip away: the store works on both
     at once);
   * **entity**: memories sharing named entities with the keyword lane's top hits (the
     vector lane's when the keyword lane found nothing), in the embedding's shadow too
     (:mod:`manowar_memory.retrieval.entity_lane`);
   * **dated**: when the query names a bounded window of at most ``date_lane_max_days``
     ("on 15 May 2023"), the scope's rows recorded in it, and those recorded up to
     ``date_lane_pad_days`` after it that say they are about it ("yesterday", "last Friday")
     (the store's optional :class:`~manowar_memory.stores.base.TimeRangeRows` read), ranked by cosine with the
     query vector (word overlap without one), fused at ``date_lane_weight``: a turn of that
     day that shares no word with the question still reaches the time stage. A span said
     without its year ("the second week of November") that holds no row is looked for up to
     ``YEARLESS_LOOKBACK`` years earlier, and the time stage weighs the year found.

   Trust is enforced on the raw lanes, before fusion (fusion turns ranks into scores, so a
   filtered-out item must never get the chance to be rank 1). When the vector lane fails or
   returns nothing usable, keyword results stand in and the lane report and the result's
   degradations say so.
2. **fusion** (:func:`fuse`): weighted RRF (:func:`~manowar_memory.retrieval.fusion.rrf`; a
   single lane passes its own scores through), one :class:`Candidate` per memory;
   For a "when" question, the best fused candidates that state no time lend a share of their
   score to the turns just before them in their thread that state one (:func:`when_neighbours`);
3. **ranking stages** (:func:`~manowar_memory.retrieval.pipeline.ranking_stages`): decay,
   rerank, boosts, time, MMR, and any stage the user inserted.

The whole search runs with numpy's BLAS held to one thread
(:func:`~manowar_memory.threads.blas_limit`). The result (:class:`HybridResult`) carries the
candidates, the lane report, the degradations and a ``timings_ms`` entry per lane and per stage.
"""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

import numpy as np

from .._util import DAY_MS, now_ms, query_terms, term_overlap
from ..candidates import Candidate
from ..config import RetrievalConfig
from ..ranking.temporal import (
    TimeIntent,
    mentions_time,
    parse_time_query,
    stated_span,
    without_dates,
    year_earlier,
)
from ..ranking.trust import neutralize_markers, trust_level
from ..records import Layer, MemoryRecord
from ..rerankers.base import Reranker
from ..stores.base import Hit, KeywordHits, MemoryQuery, Store
from ..threads import EngineThreads, blas_limit
from .entity_lane import entity_lane
from .fusion import rrf
from .pipeline import LaneReport, RankContext, RankOptions, StageInsert, prepare_stages, ranking_stages, run_stages
from .wordforms import with_word_forms

__all__ = ["DateLane", "EntityLane", "HybridResult", "KeywordLane", "LaneHits", "LaneReport", "RankOptions", "VectorLane", "fuse",
           "hybrid_search", "record_to_candidate", "run_lanes", "when_neighbours"]

LANES = ("keyword", "vector", "entity")
#: How many years back the dated lane looks for a span said without its year when the latest one holds no rows.
YEARLESS_LOOKBACK = 10


@dataclass
class HybridResult:
    """What :func:`hybrid_search` returns: at most ``limit`` candidates (best first), the lane
    report, the degradations the search went through and its ``timings_ms`` (per lane,
    fusion and per ranking stage)."""

    candidates: list[Candidate]
    report: LaneReport
    degradations: list[str] = field(default_factory=list)
    timings_ms: dict[str, float] = field(default_factory=dict)


@dataclass
class LaneHits:
    """Each lane's hits as ``(id, score)`` best first (after trust and thresholds), the rows,
    the trust level of each row (by id) the lanes read, and the candidates already made of
    some rows (by id; made while the query was being embedded, scored by :func:`fuse`)."""

    lanes: dict[str, list[tuple[str, float]]] = field(default_factory=dict)
    records: dict[str, MemoryRecord] = field(default_factory=dict)
    trust: dict[str, str] = field(default_factory=dict)
    prepared: dict[str, Candidate] = field(default_factory=dict)


@contextmanager
def _timed(timings: dict[str, float], name: str) -> Iterator[None]:
    t0 = time.perf_counter()
    try:
        yield
    finally:
        timings[name] = timings.get(name, 0.0) + (time.perf_counter() - t0) * 1000


def record_to_candidate(
    layer: Layer, rec: MemoryRecord, score: float, *, default_trust: str = "learned", trust: str | None = None
) -> Candidate:
    """A memory row as a candidate, carrying confidence, importance, access and trust signals
    (``trust``: the row's level when the caller already read it from the same metadata).

    Forged untrusted-content markers in the stored text are neutralised here, so no search
    result can carry one into a prompt.
    """
    meta = dict(rec.metadata)
    conf = meta.get("confidence")
    imp = meta.get("importance")
    meta["trust"] = trust if trust is not None else trust_level(meta, default_trust)
    return Candidate(
        layer=layer, id=rec.id, text=neutralize_markers(rec.content), score=score, created_at=rec.created_at,
        last_accessed_at=rec.last_accessed_at, access_count=rec.access_count,
        confidence=float(conf) if isinstance(conf, (int, float)) and not isinstance(conf, bool) else None,
        importance=float(imp) if isinstance(imp, (int, float)) and not isinstance(imp, bool) else None,
        source=rec.source, metadata=meta, record=rec,
    )


def _normalise_keyword(hits: list[Hit]) -> list[Hit]:
    """BM25 is unbounded: express each hit relative to the lane's best (0–1]."""
    top = max((h.score for h in hits), default=0.0)
    if top <= 0:
        return [Hit(h.record, 1.0 / (i + 1)) for i, h in enumerate(hits)]  # no usable scores: rank ramp
    return [Hit(h.record, max(0.0, h.score) / top) for h in hits]


def _trusted(hits: list[Hit], config: RetrievalConfig, report: LaneReport, levels: dict[str, str]) -> list[Hit]:
    """The hits whose trust level the search includes; ``levels`` keeps each row's level (by
    id) for the other lanes and fusion, so each row's metadata is read once."""
    allowed = set(config.include_trust)
    if not hits:
        return hits
    default = config.default_trust
    kept = []
    for h in hits:
        level = levels.get(h.record.id)
        if level is None:
            level = levels[h.record.id] = trust_level(h.record.metadata, default)
        if level in allowed:
            kept.append(h)
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
    inserts: Sequence[StageInsert] = (),
    threads: EngineThreads | None = None,
    time_intent: TimeIntent | None = None,
    vector_future: concurrent.futures.Future[list[float]] | None = None,
    embed_query: Callable[[], None] | None = None,
    read_time: Callable[[], TimeIntent | None] | None = None,
) -> HybridResult:
    """Run the lanes, fuse, rank; at most ``limit`` candidates with their report.

    When the vector lane fails (store error) or finds nothing usable while the keyword
    lane has hits, the keyword results stand in and the report and the degradations say
    so. A keyword-lane failure is reported the same way and the vector lane carries on
    alone. An embedder failure is not caught here: the caller embeds the query. With
    ``threads``, the keyword lane runs on a lane thread beside the vector lane.

    ``vector_future`` (with ``vector`` None) is the query vector still being computed: the
    keyword lane runs while it is, and the vector lane waits for it. A failed embedding
    leaves the vector lane out without a word here; the caller that started it reports it.
    ``embed_query`` (with ``vector_future``): computes that vector on the calling thread, into
    ``vector_future``; the keyword and entity lanes then run on a lane thread beside it.
    ``time_intent``: what the query says about time, when the caller already read it; else
    ``read_time`` reads it (once per query for all its layers) or it is read here, before the
    lanes: in the embedding's shadow when the query is being embedded.
    """
    ctx = RankContext(text=text, limit=limit, now=now_ms() if now is None else now, config=config,
                      report=LaneReport(), reranker=reranker, threads=threads)

    def read_query_time() -> None:
        if not config.time_queries:
            return
        if time_intent is not None:
            ctx.time = time_intent
        elif read_time is not None:
            ctx.time = read_time()
        else:
            ctx.time = parse_time_query(text, ctx.now)

    timings: dict[str, float] = {}
    stages = ranking_stages(config, options, inserts)
    with blas_limit():  # numeric kernels (the vector scan, MMR) on one BLAS thread: see manowar_memory.threads
        hits = run_lanes(store, query, text, layer=layer, limit=limit, vector=vector, model_id=model_id, ctx=ctx,
                         timings=timings, vector_future=vector_future, embed_query=embed_query,
                         before_lanes=read_query_time, prepare=lambda cands: prepare_stages(stages, cands, ctx))
        with _timed(timings, "fusion"):
            candidates = fuse(hits, layer, config)
        if ctx.time is not None and ctx.time.asks_when and config.when_neighbour_seeds > 0:
            with _timed(timings, "neighbours"):
                candidates = when_neighbours(store, query, candidates, ctx, layer)
        candidates = run_stages(candidates, ctx, stages, timings)
    return HybridResult(candidates[:limit], ctx.report, ctx.degradations, timings)


@dataclass
class _LaneRun:
    """What every lane of one search shares: the store and query, the search's context and
    timings, and the trust level of each row read so far (by id, read once per row)."""

    store: Store
    query: MemoryQuery
    text: str
    layer: Layer
    limit: int
    ctx: RankContext
    timings: dict[str, float]
    levels: dict[str, str] = field(default_factory=dict)

    def depth(self, lane: str) -> int:
        """How many hits a lane asks its store for."""
        config = self.ctx.config
        return self.limit * max(1, config.lane_depths.get(lane, config.lane_depth))

    def trusted(self, hits: list[Hit]) -> list[Hit]:
        """The hits whose trust level the search includes."""
        return _trusted(hits, self.ctx.config, self.ctx.report, self.levels)


class KeywordLane:
    """The store's full-text search over the query with its word forms, and once more without
    its calendar words (lane ``undated``) when the query names a date.

    :meth:`search` runs the store queries (on any thread); :meth:`read` takes their outcome
    (a store failure degrades the search, the vector lane carries on alone) and gives the
    trusted hits, scores relative to the lane's best."""

    def __init__(self, run: _LaneRun) -> None:
        self.run = run
        config, ctx = run.ctx.config, run.ctx
        # a query's calendar words ("in March 2023") also match the date stamps rows carry and bury the
        # event it names: the keyword lane runs a second time without them (lane "undated")
        undated = run.text
        if ctx.time is not None and config.undated_keyword_share > 0:
            undated = without_dates(run.text, ctx.time)
        self.dated = undated != run.text
        # word forms the stemmer does not join: "did Nate win" finds "I won", "mentorship" "mentored"
        forms = with_word_forms if config.word_forms else (lambda t: t)
        self.text, self.undated_text = forms(run.text), forms(undated)
        self.undated_raw: list[Hit] = []

    def search(self) -> list[Hit]:
        """The raw keyword hits (the undated ones are kept on the lane)."""
        run = self.run
        with _timed(run.timings, "keyword"):
            if self.dated:
                self.undated_raw = self._searched(self.undated_text)
            return self._searched(self.text)

    def _searched(self, text: str) -> list[Hit]:
        """The store's hits for ``text``; the query terms it left out (too common to score,
        :class:`~manowar_memory.stores.base.KeywordHits`) go to the lane report."""
        run = self.run
        hits = run.store.keyword_search(run.query, text, run.depth("keyword"))
        if isinstance(hits, KeywordHits) and hits.pruned_terms:
            run.ctx.report.keyword_pruned_terms += hits.pruned_terms
        return hits

    def read(self, job: Callable[[], list[Hit]] | None) -> tuple[list[Hit], list[Hit]]:
        """The trusted, normalised (keyword, undated) hits of ``job`` (or of a search run now)."""
        run = self.run
        hits: list[Hit] = []
        try:
            hits = job() if job is not None else self.search()
        except Exception as exc:  # noqa: BLE001 - a broken index must not take the vector lane down
            run.ctx.degrade(f"{run.layer}: keyword lane failed ({type(exc).__name__}: {exc}); "
                            "vector results stand alone")
        return _normalise_keyword(run.trusted(hits)), _normalise_keyword(run.trusted(self.undated_raw))


class VectorLane:
    """The store's vector search, score ``(1 + cosine) / 2``; vector-only hits below
    ``min_vector_cosine`` are dropped, and when the lane fails or keeps nothing while the
    keyword lane has hits, the keyword results stand in (the report and degradations say so)."""

    def __init__(self, run: _LaneRun, model_id: str) -> None:
        self.run, self.model_id = run, model_id

    def search(self, vector: list[float]) -> tuple[list[Hit], Exception | None]:
        """The raw hits, or the store's error."""
        run, report = self.run, self.run.ctx.report
        try:
            with _timed(run.timings, "vector"):
                hits, info = run.store.vector_search(run.query, vector, self.model_id, run.depth("vector"))
        except Exception as exc:  # noqa: BLE001 - the store's vector path failed: keyword stands in
            return [], exc
        report.vector_method = info.method
        for note in info.notes:
            run.ctx.degrade(note)
        return hits, None

    def usable(self, hits: list[Hit], error: Exception | None, keyword_hits: list[Hit]) -> list[Hit]:
        """The trusted hits above the threshold (or matched by the keyword lane too)."""
        run, report, config = self.run, self.run.ctx.report, self.run.ctx.config
        if error is not None:
            report.fallback = f"vector lane failed ({type(error).__name__}: {error}); keyword results stand in"
            run.ctx.degrade(f"{run.layer}: {report.fallback}")
        threshold = (1.0 + config.min_vector_cosine) / 2.0
        keyword_ids = {h.record.id for h in keyword_hits}
        usable = [h for h in hits if h.score >= threshold or h.record.id in keyword_ids]
        report.below_threshold = len(hits) - len(usable)
        kept = run.trusted(usable)
        if not kept and keyword_hits and report.fallback is None:
            report.fallback = "vector lane returned nothing usable; keyword results stand in"
            run.ctx.degrade(f"{run.layer}: {report.fallback}")
        return kept


class EntityLane:
    """Memories sharing named entities with the seed hits (:mod:`~manowar_memory.retrieval.entity_lane`);
    best-effort: a failure leaves the lane out and degrades the search."""

    def __init__(self, run: _LaneRun) -> None:
        self.run = run

    def search(self, seed_hits: list[Hit]) -> list[Hit]:
        """The trusted entity hits seeded by ``seed_hits`` (best first)."""
        run, config = self.run, self.run.ctx.config
        with _timed(run.timings, "entity"):
            try:
                found = entity_lane(
                    run.store, run.query, run.text, [h.record for h in seed_hits[: config.entity_seed_count]],
                    [h.record for h in seed_hits], cap=config.entity_cap, max_share=config.entity_max_share,
                )
            except Exception as exc:  # noqa: BLE001 - the entity lane is best-effort
                run.ctx.degrade(f"{run.layer}: entity lane failed ({type(exc).__name__}: {exc}); left out")
                return []
            run.ctx.report.entities = found.entities
            run.ctx.report.keyword_pruned_terms += found.pruned_terms
            return run.trusted(found.hits)


class DateLane:
    """The scope's rows recorded inside the query's time window, those recorded up to
    ``date_lane_pad_days`` after it whose stated relative time falls inside it, and those whose
    event date (``metadata.eventDate``) is inside it, ranked by
    similarity to the query: cosine with the query vector (``(1 + cos) / 2``, plus a fifth of the word overlap
    as a tie-breaker), word overlap alone for rows without a vector of the query's model.

    Built only for a bounded window of at most ``date_lane_max_days`` (:meth:`for_run`);
    best-effort: a store without :class:`~manowar_memory.stores.base.TimeRangeRows` or a
    failed read leaves the lane out and degrades the search."""

    def __init__(self, run: _LaneRun, window: tuple[int, int], model_id: str | None) -> None:
        self.run, self.window, self.model_id = run, window, model_id

    @classmethod
    def for_run(cls, run: _LaneRun, model_id: str | None) -> DateLane | None:
        """The lane when the query names a window it serves, else None."""
        config, intent = run.ctx.config, run.ctx.time
        if config.date_lane_weight <= 0 or intent is None or intent.window is None:
            return None
        start, end = intent.window
        if start <= 0 or end - start > config.date_lane_max_days * DAY_MS:
            return None
        return cls(run, (start, end), model_id)

    def search(self, vector: list[float] | None) -> list[Hit]:
        """The trusted rows of the window, best first (at most the search limit)."""
        run = self.run
        read = getattr(run.store, "memories_created_between", None)  # optional: TimeRangeRows
        if not callable(read):
            run.ctx.degrade(f"{run.layer}: dated lane left out (the store has no memories_created_between)")
            return []
        intent = run.ctx.time
        with _timed(run.timings, "dated"):
            try:
                rows: list[MemoryRecord] = self._read(read)
                # a span said without its year ("the second week of November") is the latest past one
                # that holds memories of the scope: a record of an earlier year is asked about in its own
                if intent is not None and intent.yearless and not rows:
                    for _ in range(YEARLESS_LOOKBACK):
                        self.window = year_earlier(self.window)
                        rows = self._read(read)
                        if rows:  # the time stage weighs this year's window too
                            run.ctx.time = replace(intent, window=self.window)
                            break
            except Exception as exc:  # noqa: BLE001 - the dated lane is best-effort
                run.ctx.degrade(f"{run.layer}: dated lane failed ({type(exc).__name__}: {exc}); left out")
                return []
            hits = self._ranked(rows, vector)
        return run.trusted(hits)[: run.limit]

    def _read(self, read: Callable[..., list[MemoryRecord]]) -> list[MemoryRecord]:
        """The scope's rows recorded in the window, and those recorded up to ``date_lane_pad_days``
        after it that say they are about it (:meth:`_refers_back`); then the rows whose event date
        is in the window, whenever they were recorded (the store's optional
        :class:`~manowar_memory.stores.base.EventDateRows` read: "I moved to Berlin last month",
        told months later)."""
        run, config = self.run, self.run.ctx.config
        start, end = self.window
        recorded = read(run.query, start, end + config.date_lane_pad_days * DAY_MS, config.date_lane_rows)
        rows = [rec for rec in recorded if rec.created_at < end or self._refers_back(rec)]
        by_event = getattr(run.store, "memories_dated_between", None)  # optional: EventDateRows
        if callable(by_event):
            seen = {rec.id for rec in rows}
            rows += [rec for rec in by_event(run.query, start, end, config.date_lane_rows) if rec.id not in seen]
        return rows

    def _refers_back(self, rec: MemoryRecord) -> bool:
        """Whether a row recorded after the window states a relative time inside it ("on the
        16th: yesterday I ..." for a question about the 15th)."""
        span = stated_span(rec.content, rec.created_at)
        return span is not None and span[0] < self.window[1] and self.window[0] < span[1]

    def _ranked(self, rows: list[MemoryRecord], vector: list[float] | None) -> list[Hit]:
        """``rows`` scored against the query (its words without the calendar phrases), best first."""
        intent = self.run.ctx.time
        text = without_dates(self.run.text, intent) if intent is not None else self.run.text
        terms = query_terms(text)
        usable = [i for i, rec in enumerate(rows) if vector and rec.embedding and rec.embedding_model == self.model_id
                  and len(rec.embedding) == len(vector)]
        cosine: dict[int, float] = {}
        if usable:
            mat = np.asarray([rows[i].embedding for i in usable], dtype=np.float32)
            q = np.asarray(vector, dtype=np.float32)
            norms = np.linalg.norm(mat, axis=1) * float(np.linalg.norm(q))
            sims = np.divide(mat @ q, norms, out=np.zeros(len(usable), dtype=np.float32), where=norms > 0)
            cosine = {i: float(c) for i, c in zip(usable, sims, strict=True)}
        hits = []
        for i, rec in enumerate(rows):
            words = overlap_score(terms, rec.content, rec.context)
            cos = cosine.get(i)
            hits.append(Hit(rec, words if cos is None else 0.8 * (1.0 + cos) / 2.0 + 0.2 * words))
        hits.sort(key=lambda h: h.score, reverse=True)  # stable: without a signal, oldest first
        return hits


def when_neighbours(
    store: Store, query: MemoryQuery, candidates: list[Candidate], ctx: RankContext, layer: Layer
) -> list[Candidate]:
    """The fused candidates of a "when" question, with the turns that tell the time of the best ones.

    A reply often names the event and leaves its time to a turn next to it: "I'll come over
    tomorrow" comes before "I'll bring my recipes", and "I've had them for 3 years" before "the
    turtles are small". The turn after a match is already found through its thread context (it
    is indexed with the turns it followed); the turn before is not. So each of the top
    ``when_neighbour_seeds`` candidates that states no time lends ``when_neighbour_share`` of
    its fused score to the ``when_neighbour_turns`` turns just before it in its thread that
    state one (:func:`~manowar_memory.ranking.temporal.mentions_time` or an event date), as
    new candidates or over their own lower score; the time stage then weighs them as usual.
    The turns are read with the store's optional
    :class:`~manowar_memory.stores.base.EarlierRows` read (newest first). Best-effort: a store
    without it, or a failed read, leaves them out and degrades the search."""
    config = ctx.config
    earlier = getattr(store, "memories_created_before", None)  # optional: EarlierRows
    if not callable(earlier):
        ctx.degrade(f"{layer}: 'when' neighbours left out (the store has no memories_created_before)")
        return candidates
    by_id = {c.id: c for c in candidates}
    levels: dict[str, str] = {}
    added = 0
    try:
        for seed in candidates[: config.when_neighbour_seeds]:
            rec = seed.record
            if rec is None or not rec.thread_id or _tells_a_time(seed.text, seed.metadata):
                continue
            thread = replace(query, scope=replace(query.scope, thread_id=rec.thread_id), durable=False)
            rows = earlier(thread, rec.created_at, config.when_neighbour_turns)[::-1]  # oldest first
            for hit in _trusted([Hit(r, 0.0) for r in rows], config, ctx.report, levels):
                row = hit.record
                if row.id == seed.id or not _tells_a_time(row.content, row.metadata):
                    continue
                score = seed.score * config.when_neighbour_share
                cand = by_id.get(row.id)
                if cand is None:
                    cand = by_id[row.id] = record_to_candidate(layer, row, score, default_trust=config.default_trust,
                                                               trust=levels.get(row.id))
                    candidates.append(cand)
                    added += 1
                elif cand.score >= score:
                    continue
                cand.score = score
                cand.trace["when_neighbour"] = config.when_neighbour_share
    except Exception as exc:  # noqa: BLE001 - best-effort, like the dated lane
        ctx.degrade(f"{layer}: 'when' neighbours failed ({type(exc).__name__}: {exc}); left out")
    if added:
        ctx.report.extra["when_neighbours"] = added
    return sorted(candidates, key=lambda c: c.score, reverse=True)


def _tells_a_time(text: str, metadata: dict[str, object] | None) -> bool:
    return mentions_time(text) or bool((metadata or {}).get("eventDate"))


@dataclass
class _Found:
    """The lanes' hits as they come in (``entity`` None: not run yet)."""

    keyword: list[Hit] = field(default_factory=list)
    undated: list[Hit] = field(default_factory=list)
    vector: list[Hit] = field(default_factory=list)
    entity: list[Hit] | None = None
    dated: list[Hit] = field(default_factory=list)
    prepared: dict[str, Candidate] = field(default_factory=dict)


def run_lanes(
    store: Store, query: MemoryQuery, text: str, *, layer: Layer, limit: int, vector: list[float] | None,
    model_id: str | None, ctx: RankContext, timings: dict[str, float],
    vector_future: concurrent.futures.Future[list[float]] | None = None,
    embed_query: Callable[[], None] | None = None,
    before_lanes: Callable[[], None] = lambda: None,
    prepare: Callable[[list[Candidate]], None] | None = None,
) -> LaneHits:
    """The keyword and vector lanes side by side, and the entity lane seeded by the keyword
    lane's top hits (the vector lane's when the keyword lane has none).

    This function only orders the lanes (:class:`KeywordLane`, :class:`VectorLane`,
    :class:`EntityLane`) around the query vector: while ``vector_future`` is still running,
    the keyword lane and then the entity lane run in the embedding's shadow, and the vector
    lane waits for the vector; otherwise the keyword lane runs on a lane thread beside the
    vector lane (SQLite's FTS5 and numpy's matrix product both release the GIL). With
    ``embed_query``, this thread computes the vector itself while the keyword and entity lanes
    run on a lane thread: the vector lane starts the moment the vector exists, with no thread
    to wake (the lanes end well before the embedding does). The entity lane is seeded the same
    way on every path, so a cached embedding never changes the results.

    ``before_lanes`` runs first, in the embedding's shadow when there is one: the lanes' reading
    of the query that the caller left until then (``ctx.time``). ``prepare`` is given the
    candidates made in the embedding's shadow, there too (the ranking stages' work ahead,
    :func:`~manowar_memory.retrieval.pipeline.prepare_stages`)."""
    run = _LaneRun(store, query, text, layer, limit, ctx, timings)
    weights = ctx.config.lane_weights
    pending = vector_future if vector is None else None
    if pending is not None and pending.done():
        vector, pending = _vector_of(pending), None
    wants_keyword = weights.get("keyword", 1.0) > 0
    vector_lane = None
    if (vector is not None or pending is not None) and model_id is not None and weights.get("vector", 1.0) > 0:
        vector_lane = VectorLane(run, model_id)
    entity = EntityLane(run) if ctx.config.entity_lane and weights.get("entity", 0.0) > 0 else None
    found = _Found()
    raw: list[Hit] = []
    error: Exception | None = None
    if pending is not None and vector_lane is not None:
        shadow = _shadow_lanes(run, found, before_lanes, wants_keyword, entity, prepare)
        beside = ctx.threads.beside(shadow) if embed_query is not None and ctx.threads is not None else None
        if beside is None:  # the query is being embedded elsewhere (or no lane thread is free): lanes first
            shadow()
        with _timed(timings, "embed_wait"):  # the vector lane waits for the vector, not for the lanes beside it
            if embed_query is not None:
                embed_query()
            vector = _vector_of(pending)
        if vector is None:
            vector_lane = None
        else:  # a fast embedding (or a slow keyword lane): the store searches both at once
            raw, error = vector_lane.search(vector)
        if beside is not None:
            with _timed(timings, "lanes_wait"):  # what the lanes beside it outlasted the vector lane by
                beside.result()
    else:
        before_lanes()
        keyword = KeywordLane(run) if wants_keyword else None
        keyword_job: Callable[[], list[Hit]] | None = None
        if keyword is not None and vector_lane is not None and ctx.threads is not None:
            future = ctx.threads.beside(keyword.search)
            keyword_job = future.result if future is not None else None
        if vector_lane is not None:
            raw, error = vector_lane.search(vector)  # type: ignore[arg-type]
        if keyword is not None:
            found.keyword, found.undated = keyword.read(keyword_job)
    if vector_lane is not None:
        found.vector = vector_lane.usable(raw, error, found.keyword)
    if found.entity is None:
        found.entity = []
        if entity is not None and (found.keyword or found.vector):
            found.entity = entity.search(found.keyword or found.vector)
    dated = DateLane.for_run(run, model_id)
    if dated is not None:
        found.dated = dated.search(vector)
    return _lane_hits(run, found, entity is not None)


def _shadow_lanes(run: _LaneRun, found: _Found, before_lanes: Callable[[], None], wants_keyword: bool,
                  entity: EntityLane | None, prepare: Callable[[list[Candidate]], None] | None) -> Callable[[], None]:
    """What needs no vector, into ``found``: the query's time, the keyword and entity lanes, the
    candidates of their hits, and the ranking stages' work on them ahead (``prepare``)."""
    def shadow() -> None:
        before_lanes()
        if wants_keyword:
            lane = KeywordLane(run)
            found.keyword, found.undated = lane.read(_settled(lane.search))
            if entity is not None and found.keyword:
                found.entity = entity.search(found.keyword)
        found.prepared = _prepare(run, found)
        if prepare is not None and found.prepared:
            with _timed(run.timings, "ahead"):
                prepare(list(found.prepared.values()))

    return shadow


def _prepare(run: _LaneRun, found: _Found) -> dict[str, Candidate]:
    """Candidates of the keyword and entity hits (scored later by :func:`fuse`)."""
    prepared: dict[str, Candidate] = {}
    for h in (*found.keyword, *(found.entity or ())):
        if h.record.id not in prepared:
            prepared[h.record.id] = record_to_candidate(run.layer, h.record, 0.0, trust=run.levels.get(h.record.id),
                                                        default_trust=run.ctx.config.default_trust)
    return prepared


def _lane_hits(run: _LaneRun, found: _Found, entity_ran: bool) -> LaneHits:
    """The lanes' hits as :class:`LaneHits`, with the counts and best hits in the report."""
    entity_hits = found.entity or []
    out = LaneHits(trust=run.levels, prepared=found.prepared, lanes={
        "keyword": [(h.record.id, h.score) for h in found.keyword],
        "vector": [(h.record.id, h.score) for h in found.vector],
    })
    if found.undated:
        out.lanes["undated"] = [(h.record.id, h.score) for h in found.undated]
    if found.dated:
        out.lanes["dated"] = [(h.record.id, h.score) for h in found.dated]
    for lane_hits in (found.keyword, found.vector, entity_hits, found.undated, found.dated):
        for h in lane_hits:
            out.records.setdefault(h.record.id, h.record)
    if entity_ran and out.records:
        out.lanes["entity"] = [(h.record.id, h.score) for h in entity_hits]
    report = run.ctx.report
    report.keyword, report.vector, report.entity = len(found.keyword), len(found.vector), len(entity_hits)
    report.hits = {name: [[i, round(s, 6)] for i, s in hits[: run.limit]] for name, hits in out.lanes.items() if hits}
    return out


def _vector_of(future: concurrent.futures.Future[list[float]]) -> list[float] | None:
    """The finished embedding, or None when it failed (its caller reports that)."""
    try:
        return future.result()
    except (Exception, concurrent.futures.CancelledError):  # noqa: BLE001 - the embedding's caller raises it
        return None


def _settled(call: Callable[[], list[Hit]]) -> Callable[[], list[Hit]]:
    """Run ``call`` now; the returned function gives its hits or raises its error."""
    try:
        hits = call()
    except Exception as exc:  # noqa: BLE001 - raised again where the lane's result is read
        error = exc

        def fail() -> list[Hit]:
            raise error

        return fail
    return lambda: hits


def fuse(hits: LaneHits, layer: Layer, config: RetrievalConfig) -> list[Candidate]:
    """Weighted RRF of the lanes; each candidate keeps every lane's own score in ``lanes``."""
    lane_scores: dict[str, dict[str, float]] = {}
    for name, lane in hits.lanes.items():
        for item_id, score in lane:
            lane_scores.setdefault(item_id, {}).setdefault(name, score)
    candidates = []
    weights = dict(config.lane_weights)
    # the keyword lane run without the query's calendar words: a share of the keyword lane's weight
    weights["undated"] = float(weights.get("keyword", 1.0)) * config.undated_keyword_share
    weights.setdefault("dated", config.date_lane_weight)  # the rows recorded in the query's window
    for item_id, score in rrf(hits.lanes, weights, config.rrf_k):
        cand = hits.prepared.get(item_id)
        if cand is None:
            cand = record_to_candidate(layer, hits.records[item_id], score, default_trust=config.default_trust,
                                       trust=hits.trust.get(item_id))
        cand.score = score
        cand.lanes = lane_scores[item_id]
        cand.trace["fused"] = score
        candidates.append(cand)
    return candidates


def overlap_score(terms: list[str], *texts: str | None) -> float:
    """Best term overlap of the query terms with any of the texts."""
    return max((term_overlap(terms, t) for t in texts if t), default=0.0)
