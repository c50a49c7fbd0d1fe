"""The six layers and how each finds candidates for a query.

| layer    | rows                         | thread-scoped | how it matches                         |
|----------|------------------------------|---------------|----------------------------------------|
| working  | the thread's working buffer  | yes           | query-term overlap per buffer line     |
| scene    | transcripts                  | yes           | full-text (BM25) over summary + turns  |
| graph    | memory rows, source=fact     | no            | hybrid: keyword + vector lanes, RRF    |
| patterns | procedural patterns          | no            | query-term overlap on summary/trigger  |
| archives | compressed cold memory       | no            | query-term overlap on the summary      |
| vectors  | other memory rows            | no            | hybrid: keyword + vector lanes, RRF    |

Every layer's candidates then go through the ranking stages of
:func:`~manowar_memory.retrieval.pipeline.ranking_stages` (decay, boosts, time, MMR when asked
for, and the stages a user inserted), each layer on its own, before the layer's best ``limit``
are kept. The hybrid layers run them inside :func:`~manowar_memory.retrieval.hybrid.hybrid_search`
(after fusion, with the cross-encoder when ``rerank`` is asked for); working, scene, patterns and
archives run the same list through :func:`rank_layer`, without the cross-encoder (a model call per
layer on buffer lines and summaries; a stage inserted at ``rerank`` is skipped there). Each
stage's time is in the hits' ``timings_ms`` as ``<layer>.<stage>``.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ._util import now_ms, query_terms
from .candidates import Candidate
from .config import RetrievalConfig
from .errors import InvalidInputError
from .filters import FilterValue
from .ranking.temporal import TimeIntent, parse_time_query
from .records import LAYERS, Layer
from .rerankers.base import Reranker
from .retrieval.hybrid import hybrid_search, overlap_score
from .retrieval.pipeline import LaneReport, RankContext, RankOptions, StageInsert, ranking_stages, run_stages
from .scope import Scope
from .stores.base import MemoryQuery, Store
from .threads import EngineThreads

__all__ = ["LAYER_SEARCHERS", "LayerHits", "LayerRequest", "LayerSearcher", "normalize_layers", "rank_layer",
           "search_memory_rows"]


class _Reading:
    """A value of one request read once, by whichever thread asks first."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.value: TimeIntent | None = None


@dataclass
class LayerRequest:
    """Everything a layer needs to answer one query.

    ``vector`` is the query's embedding; while it is still being computed it is None and
    ``vector_future`` gives it (hybrid layers run their keyword lane meanwhile and wait for
    the vector right before their vector lane). ``embed_query``, when given, computes that
    vector into ``vector_future`` on the calling thread (once, whoever calls it first): the
    hybrid layer calls it right after handing its keyword lane to a lane thread. ``time`` is
    what the query says about time when the caller already read it; else
    :meth:`time_intent` reads it once for every layer, on first use (a hybrid layer does so in
    the embedding's shadow). :attr:`terms` are split once per request."""

    store: Store
    scope: Scope
    filters: dict[str, FilterValue]
    text: str
    limit: int
    config: RetrievalConfig
    options: RankOptions
    vector: list[float] | None = None
    model_id: str | None = None
    reranker: Reranker | None = None
    now: int | None = None
    inserts: Sequence[StageInsert] = ()
    threads: EngineThreads | None = None
    vector_future: concurrent.futures.Future[list[float]] | None = None
    embed_query: Callable[[], None] | None = None
    time: TimeIntent | None = None
    # the reading time_intent keeps, shared with the copies dataclasses.replace makes
    _time_read: _Reading = field(default_factory=_Reading, repr=False, compare=False)

    def time_intent(self) -> TimeIntent | None:
        """What the query says about time: :attr:`time` when given, else read from the text
        at :attr:`now` by the first layer that asks and kept for the others (None when
        ``config.time_queries`` is off)."""
        if self.time is not None or not self.config.time_queries:
            return self.time
        reading = self._time_read
        with reading.lock:
            if reading.value is None:
                reading.value = parse_time_query(self.text, now_ms() if self.now is None else self.now)
            return reading.value

    @functools.cached_property
    def terms(self) -> list[str]:
        """The query's content terms (split on first use, then kept)."""
        return query_terms(self.text)

    def query(self, *, durable: bool, **kw: object) -> MemoryQuery:
        """The store query for this scope."""
        return MemoryQuery(scope=self.scope, filters=self.filters, durable=durable, **kw)  # type: ignore[arg-type]


@dataclass
class LayerHits:
    """What a layer searcher returns: candidates per layer (best first), the lane report of
    each hybrid layer, the degradations and the ``timings_ms`` of its lanes and stages."""

    layers: dict[Layer, list[Candidate]]
    lanes: dict[Layer, LaneReport] = field(default_factory=dict)
    degradations: list[str] = field(default_factory=list)
    timings_ms: dict[str, float] = field(default_factory=dict)


LayerSearcher = Callable[[LayerRequest], LayerHits]
"""A layer's search: one request in, its :class:`LayerHits` out."""


def normalize_layers(layers: object) -> list[Layer]:
    """Validate a layer selection (None or empty = all six, in the default order)."""
    if layers is None:
        return list(LAYERS)
    if isinstance(layers, str):
        layers = [layers]
    if not isinstance(layers, (list, tuple)):
        raise InvalidInputError(f"layers must be a list of layer names from {list(LAYERS)}")
    unknown = [name for name in layers if name not in LAYERS]
    if unknown:
        raise InvalidInputError(f"unknown layer(s) {unknown}; choose from {list(LAYERS)}")
    return list(dict.fromkeys(layers)) or list(LAYERS)


def rank_layer(req: LayerRequest, layer: Layer, candidates: list[Candidate]) -> LayerHits:
    """A non-hybrid layer's candidates through the ranking stages (the request's options
    without the cross-encoder, and its inserted stages); its best ``limit``, with each stage's
    milliseconds as ``<layer>.<stage>``. A layer that found nothing runs (and reports) no stage."""
    if not candidates:
        return LayerHits({layer: []})
    ctx = RankContext(text=req.text, limit=req.limit, now=now_ms() if req.now is None else req.now,
                      config=req.config, report=LaneReport(), threads=req.threads, time=req.time_intent())
    stages = ranking_stages(req.config, dataclasses.replace(req.options, rerank=False), req.inserts)
    timings: dict[str, float] = {}
    ranked = run_stages(candidates, ctx, stages, timings, prefix=f"{layer}.")
    return LayerHits({layer: ranked[: req.limit]}, degradations=ctx.degradations, timings_ms=timings)


def search_working(req: LayerRequest) -> LayerHits:
    """Lines of the thread's working buffer that share terms with the query (score: the
    overlap), ranked by :func:`rank_layer` on the session's last access."""
    terms = req.terms
    out: list[Candidate] = []
    for session in req.store.find_sessions(req.query(durable=False), max(1, req.limit)):
        lines = session.working_memory.context
        for i in range(len(lines) - 1, -1, -1):
            score = overlap_score(terms, lines[i])
            if score > 0:
                out.append(
                    Candidate(
                        layer="working", id=f"{session.session_id}#{i}", text=lines[i], score=score,
                        created_at=session.last_accessed_at, last_accessed_at=session.last_accessed_at,
                        source="working", lanes={"keyword": score}, record=session,
                    )
                )
    out.sort(key=lambda c: c.score, reverse=True)
    return rank_layer(req, "working", out)


def search_scene(req: LayerRequest) -> LayerHits:
    """Transcripts by full-text relevance (relative to the best), ranked by :func:`rank_layer`
    on the transcript's time; the item text is the session summary."""
    hits = req.store.search_transcripts(req.query(durable=False), req.text, req.limit)
    top = max((s for _, s in hits), default=0.0) or 1.0
    out = []
    for transcript, score in hits:
        text = transcript.summary or "\n".join(f"{m.role}: {m.content}" for m in transcript.messages[-4:])
        out.append(
            Candidate(
                layer="scene", id=transcript.session_id, text=text, score=score / top,
                created_at=transcript.created_at, source="transcript", lanes={"keyword": score},
                metadata=dict(transcript.metadata), record=transcript,
            )
        )
    return rank_layer(req, "scene", out)


def _hybrid(req: LayerRequest, layer: Layer, **query_kw: object) -> LayerHits:
    result = hybrid_search(
        req.store, req.query(durable=True, **query_kw), req.text, layer=layer, limit=req.limit,
        vector=req.vector, model_id=req.model_id, config=req.config, options=req.options,
        reranker=req.reranker, now=req.now, inserts=req.inserts, threads=req.threads,
        vector_future=req.vector_future, embed_query=req.embed_query, read_time=req.time_intent,
    )
    return LayerHits({layer: result.candidates}, {layer: result.report}, result.degradations,
                     {f"{layer}.{k}": v for k, v in result.timings_ms.items()})


def search_memory_rows(req: LayerRequest) -> LayerHits:
    """Graph and vectors together: one keyword query and one vector scan over the memory
    rows, split by source afterwards (facts to graph, the rest to vectors). Running the two
    layers separately would do both lanes twice over the same table."""
    both = _hybrid(dataclasses.replace(req, limit=req.limit * 2), "vectors")
    report = both.lanes["vectors"]
    out: dict[Layer, list[Candidate]] = {"graph": [], "vectors": []}
    for cand in both.layers["vectors"]:
        layer: Layer = "graph" if cand.source == "fact" else "vectors"
        cand.layer = layer
        if len(out[layer]) < req.limit:
            out[layer].append(cand)
    timings = {k.replace("vectors.", "graph+vectors.", 1): v for k, v in both.timings_ms.items()}
    return LayerHits(out, {"graph": report, "vectors": report}, both.degradations, timings)


def search_graph(req: LayerRequest) -> LayerHits:
    """Durable facts (``source='fact'``), hybrid retrieval."""
    return _hybrid(req, "graph", sources=("fact",))


def search_vectors(req: LayerRequest) -> LayerHits:
    """General semantic rows (everything but facts), hybrid retrieval."""
    return _hybrid(req, "vectors", exclude_sources=("fact",))


def search_patterns(req: LayerRequest) -> LayerHits:
    """Patterns whose summary or trigger shares terms with the query (score: the success
    rate), ranked by :func:`rank_layer` on the last execution."""
    terms = req.terms
    out = []
    for p in req.store.find_patterns(req.query(durable=True), max(4 * req.limit, 20)):
        overlap = overlap_score(terms, p.summary, p.trigger.value)
        if overlap > 0:
            out.append(
                Candidate(
                    layer="patterns", id=p.pattern_id, text=p.summary, score=p.success_rate,
                    created_at=p.last_executed, access_count=p.execution_count, source="pattern",
                    lanes={"keyword": overlap}, metadata=dict(p.metadata), record=p,
                )
            )
    return rank_layer(req, "patterns", out)


def search_archives(req: LayerRequest) -> LayerHits:
    """Archives whose summary (or topics) shares terms with the query (score: the overlap),
    ranked by :func:`rank_layer` on the archive's time."""
    terms = req.terms
    out = []
    for a in req.store.find_archives(req.query(durable=True), max(4 * req.limit, 20)):
        topics = " ".join(str(t) for t in a.metadata.get("topics", []))
        overlap = overlap_score(terms, a.summary, topics)
        if overlap > 0:
            out.append(
                Candidate(
                    layer="archives", id=a.archive_id, text=a.summary, score=overlap, created_at=a.created_at,
                    source="archive", lanes={"keyword": overlap}, metadata=dict(a.metadata), record=a,
                )
            )
    return rank_layer(req, "archives", out)


LAYER_SEARCHERS: dict[Layer, LayerSearcher] = {
    "working": search_working,
    "scene": search_scene,
    "graph": search_graph,
    "patterns": search_patterns,
    "archives": search_archives,
    "vectors": search_vectors,
}
