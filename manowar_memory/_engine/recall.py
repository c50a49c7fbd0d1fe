"""Reading memories back: the layered search and ``pre_turn``."""

from __future__ import annotations

import concurrent.futures
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .._notes import collect, degrade
from .._util import as_str, content_hash, now_ms
from ..cache.namespace import cached_search
from ..candidates import Candidate
from ..errors import ConfigurationError, InvalidInputError
from ..filters import FilterValue
from ..layers import LAYER_SEARCHERS, LayerHits, LayerRequest, LayerSearcher, normalize_layers, search_memory_rows
from ..packing import pack
from ..records import Layer
from ..results import PreTurnResult
from ..retrieval.pipeline import RankingStage, RankOptions, StageInsert
from ..scope import Scope, ScopeLike
from ..stores.base import Hit, MemoryQuery
from .core import NO_EMBEDDER, EngineBase, _outcome, _rounded, _timed_layer, _unexpired
from .results import LayerSearchResult, SearchOptions, SearchOutcome


class EngineRecall(EngineBase):
    """Reading memories back: the layered search and ``pre_turn``."""

    # ------------------------------------------------------------------ reads
    def insert_stage(self, stage: RankingStage, *, after: str | None = None, before: str | None = None) -> None:
        """Add a ranking stage of your own to every layer search of this engine, right
        ``after`` or ``before`` a named stage (``decay``, ``rerank``, ``boosts``, ``time``, ``mmr``,
        or one inserted earlier), or last; it runs for every layer (working, scene, patterns and
        archives have no ``rerank``). See :mod:`manowar_memory.retrieval.pipeline`."""
        self.stage_inserts.append(StageInsert(stage, after=after, before=before))

    def search_layers(
        self,
        query: str,
        scope: ScopeLike,
        layers: Sequence[str] | None = None,
        *,
        filters: Mapping[str, Any] | None = None,
        limit: int | None = None,
        decay: bool = True,
        rerank: bool = False,
        mmr: bool = False,
    ) -> LayerSearchResult:
        """Run the selected layers concurrently; raw hits plus per-layer totals."""
        found = self._search(query, scope, SearchOptions(layers, filters, limit, RankOptions(decay, rerank, mmr)))
        return LayerSearchResult(query=query, layers=found.layers, totals=found.totals, lanes=found.lanes,
                                 degradations=found.degradations, timings_ms=_rounded(found.timings_ms))

    def search(
        self,
        query: str,
        scope: ScopeLike,
        *,
        layers: Sequence[str] = ("graph", "vectors"),
        k: int = 10,
        filters: Mapping[str, Any] | None = None,
        decay: bool = True,
        rerank: bool = False,
        mmr: bool = False,
    ) -> tuple[list[Candidate], list[str]]:
        """Ranked candidates across the chosen layers (for retrievers), and the degradations.

        With ``mmr``, the ranking pipeline's MMR stage orders each layer's hits and lowers
        scores to follow that order, so the merge by score keeps it."""
        found = self._search(query, scope, SearchOptions(layers, filters, k, RankOptions(decay, rerank, mmr)))
        merged = [c for layer in found.layers.values() for c in layer]
        merged.sort(key=lambda c: c.score, reverse=True)
        return merged[:k], found.degradations

    def _search(self, query: str, scope: ScopeLike, options: SearchOptions) -> SearchOutcome:
        text = as_str(query)
        if text is None:
            raise InvalidInputError("query is required: pass the user's message or question as a non-empty string")
        text = self._text(text, "query")
        scope = Scope.coerce(scope)
        selected = normalize_layers(options.layers)
        merged_filters = self.merge_filters(scope, options.filters)
        limit = self.config.packer.limit if options.limit is None else options.limit
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise InvalidInputError(f"limit must be a positive integer, got {limit!r}")
        rank = options.rank
        if self.query_cache is None:
            return self._search_uncached(text, scope, selected, merged_filters, limit, rank)
        payload = {
            "query": text, "layers": sorted(selected), "limit": limit,
            "filters": {k: list(v) if isinstance(v, tuple) else v for k, v in merged_filters.items()},
            "decay": rank.decay, "rerank": rank.rerank, "mmr": rank.mmr, "model": self.model_id,
            "retrieval": self.config.retrieval.model_dump(),
            "stages": [(i.stage.name, i.after, i.before) for i in self.stage_inserts],
        }

        def compute() -> tuple[dict[str, list[Candidate]], dict[str, int], dict[str, Any], dict[str, float]]:
            found = self._search_uncached(text, scope, selected, merged_filters, limit, rank)
            for note in found.degradations:
                degrade(note)  # the cache stores a result's degradations with it
            return found.layers, found.totals, found.lanes, found.timings_ms

        with collect() as notes:
            (layers_out, totals, lanes, timings), hit = cached_search(
                self.query_cache, scope, payload, compute,
                thread_scoped=any(layer in ("working", "scene") for layer in selected),
            )
        if hit:
            self.query_cache_hits += 1
            lanes["_cache"] = {"hit": True}
            layers_out = _unexpired(layers_out)
        return SearchOutcome(layers_out, totals, lanes, list(notes), timings)

    def _search_uncached(
        self, text: str, scope: Scope, selected: list[Layer], merged_filters: dict[str, FilterValue], limit: int,
        rank: RankOptions,
    ) -> SearchOutcome:
        timings: dict[str, float] = {}
        notes: list[str] = []
        vector: list[float] | None = None
        vector_future: concurrent.futures.Future[list[float]] | None = None
        embedding: _QueryEmbedding | None = None
        # only the graph and vectors layers' vector lane reads the vector: weighted out, it is not made
        wants_vector = (any(name in ("graph", "vectors") for name in selected)
                        and self.config.retrieval.lane_weights.get("vector", 1.0) > 0)
        if self.embedder is None:
            notes.append(self.keyword_only_note or NO_EMBEDDER)
        elif wants_vector and (vector := self._cached_query_vector(text, timings)) is None:
            # the layer whose vector lane needs the vector embeds the query on its own thread, with
            # its keyword and entity lanes on a lane thread beside it (ONNX Runtime and torch release
            # the GIL), so its vector lane starts with no thread to wake; other layers need no vector
            vector_future = concurrent.futures.Future()
            embedding = _QueryEmbedding(self._embed_query, text, vector_future)
        # one clock reading for every layer of the query, and one reading of the query's time
        # (LayerRequest.time_intent: on first use, in the embedding's shadow for a hybrid layer)
        now = now_ms()
        req = LayerRequest(
            store=self.store, scope=scope, filters=merged_filters, text=text, limit=limit,
            config=self.config.retrieval, options=rank, vector=vector, model_id=self.model_id,
            reranker=self.reranker, now=now, inserts=tuple(self.stage_inserts), threads=self.threads,
            vector_future=vector_future, embed_query=embedding,
        )
        t0 = time.perf_counter()
        # graph and vectors share the memory table: searched together when both are selected
        tasks: dict[str, LayerSearcher] = {layer: LAYER_SEARCHERS[layer] for layer in selected}
        if "graph" in tasks and "vectors" in tasks:
            del tasks["graph"], tasks["vectors"]
            tasks["graph+vectors"] = search_memory_rows
        outcomes: dict[str, tuple[LayerHits | None, BaseException | None]] = {}
        if self.config.concurrent_layers and len(tasks) > 1:
            futures = {name: self.threads.layers.submit(_timed_layer, name, fn, req) for name, fn in tasks.items()}
            outcomes = {name: _outcome(f) for name, f in futures.items()}
        else:
            for name, fn in tasks.items():
                try:
                    outcomes[name] = (_timed_layer(name, fn, req), None)
                except Exception as exc:  # noqa: BLE001 - the layer is left out and reported in the notes
                    outcomes[name] = (None, exc)
        if embedding is not None:  # an embedding failure raises here, once no layer still waits for it
            embedding()  # nothing to do unless the layer failed before its vector lane
            notes.extend(embedding.notes)
            timings["embed"] = embedding.ms
            if embedding.error is not None:
                raise embedding.error
        results: dict[str, list[Candidate]] = {}
        lanes: dict[str, dict[str, Any]] = {}
        for name, (hits, error) in outcomes.items():
            if hits is None:
                notes.append(f"layer {name} failed and was left out: {type(error).__name__}: {error}")
                continue
            for layer_name, found in hits.layers.items():
                results[layer_name] = found
            lanes.update({layer: report.as_dict() for layer, report in hits.lanes.items()})
            notes.extend(n for n in hits.degradations if n not in notes)
            timings.update(hits.timings_ms)
        results = {layer: results[layer] for layer in selected if layer in results}
        timings["layers"] = (time.perf_counter() - t0) * 1000
        totals = {layer: len(hits) for layer, hits in results.items()}
        return SearchOutcome(results, totals, lanes, notes, timings)

    def _cached_query_vector(self, text: str, timings: dict[str, float]) -> list[float] | None:
        """The query's vector when an in-process cache holds it (its time as ``embed``): the
        lanes then start with it, with no lane thread to hand the embedding to."""
        assert self.embedder is not None
        t0 = time.perf_counter()
        vector = self.embedder.peek(text, input_type="query")
        if vector is not None:
            timings["embed"] = (time.perf_counter() - t0) * 1000
        return vector

    def _embed_query(self, text: str, target: concurrent.futures.Future[list[float]]) -> tuple[list[str], float]:
        """Embed the query into ``target`` (its vector, or the embedder's error, which is also
        raised); returns the degradations the embedding cache reported and the embedding's own
        milliseconds."""
        assert self.embedder is not None
        t0 = time.perf_counter()
        try:
            with collect() as embed_notes:  # the embedding cache reports through the call's collector
                vector = self.embedder.embed([text], input_type="query")[0]
        except BaseException as exc:
            target.set_exception(exc)
            raise
        target.set_result(vector)
        return embed_notes, (time.perf_counter() - t0) * 1000

    def pre_turn(
        self,
        query: str,
        scope: ScopeLike,
        layers: Sequence[str] | None = None,
        *,
        filters: Mapping[str, Any] | None = None,
        limit: int | None = None,
        max_items: int | None = None,
        max_item_chars: int | None = None,
        budget_chars: int | None = None,
        rerank: bool = False,
        mmr: bool = False,
        explain: bool = False,
    ) -> PreTurnResult:
        """The memory context for a turn: search the layers, rank, and pack within the budget.

        Defaults: 12 hits per layer, 6 items, 120 characters per item, 900 characters in all.
        Every layer's hits go through the ranking stages (``timings_ms`` names each one that ran,
        ``<layer>.<stage>``); ``mmr`` adds the MMR stage there, and the packer only packs.
        ``explain=True`` adds a decision per candidate (kept, duplicate, below threshold,
        over budget, past max items).
        """
        p = self.config.packer
        max_items = p.max_items if max_items is None else max_items
        max_item_chars = p.max_item_chars if max_item_chars is None else max_item_chars
        budget_chars = p.budget_chars if budget_chars is None else budget_chars
        for name, value, low in (("max_items", max_items, 1), ("max_item_chars", max_item_chars, 20),
                                 ("budget_chars", budget_chars, len(p.header) + 1)):
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise InvalidInputError(f"{name} must be an integer of at least {low}, got {value!r}")
        t_start = time.perf_counter()
        with collect() as notes:
            found = self._search(query, scope, SearchOptions(layers, filters, limit, RankOptions(rerank=rerank, mmr=mmr)))
            for note in found.degradations:
                degrade(note)
            timings = found.timings_ms
            t0 = time.perf_counter()
            packed = pack(
                query, found.layers, layer_order=normalize_layers(layers), max_items=max_items,
                max_item_chars=max_item_chars, budget_chars=budget_chars, header=p.header,
                untrusted_delimiter=self._delimiter(scope) if p.wrap_untrusted else None,
                default_trust=self.config.retrieval.default_trust, semantic_weight=p.semantic_weight,
                dates=p.dates, explain=explain,
            )
            timings["pack"] = (time.perf_counter() - t0) * 1000
            kept_rows = [i.id for i in packed.items if i.layer in ("graph", "vectors")]
            if kept_rows:
                self._access.record(kept_rows, now_ms(), agent_wallet=Scope.coerce(scope).agent_wallet)
        timings["total"] = (time.perf_counter() - t_start) * 1000
        sc = Scope.coerce(scope)
        return PreTurnResult(
            prompt=packed.prompt, items=packed.items, totals=found.totals, omitted=packed.omitted,
            context_usage=packed.context_usage, decisions=packed.decisions if explain else None,
            degradations=list(notes), lanes=found.lanes, timings_ms=_rounded(timings),
            context_id="ctx_" + content_hash(f"{sc.cache_key()}|{query}|{now_ms()}"),
        )

    def vector_hits(self, scope: Scope, vector: Sequence[float], limit: int, *,
                    filters: Mapping[str, Any] | None = None, sources: Sequence[str] | None = None) -> list[Hit]:
        """The store's nearest rows to ``vector`` (of this engine's model) visible in ``scope``,
        at most ``limit``: no threshold, trust filter, decay or fusion (see ``ScopedMemory.similar``).
        :class:`ConfigurationError` on a keyword-only engine."""
        if self.model_id is None:
            raise ConfigurationError("a similarity search needs an engine with an embedder (this one is keyword-only)")
        q = MemoryQuery(scope=scope, filters=self.merge_filters(scope, filters),
                        sources=tuple(sources) if sources else None)
        hits, _ = self.store.vector_search(q, list(vector), self.model_id, limit)
        return hits

    def keyword_hits(self, scope: Scope, text: str, limit: int, *, filters: Mapping[str, Any] | None = None,
                     sources: Sequence[str] | None = None) -> list[Hit]:
        """The store's full-text hits for ``text`` visible in ``scope``, at most ``limit``, best
        first: no trust filter, decay or fusion (see ``ScopedMemory.keyword``)."""
        q = MemoryQuery(scope=scope, filters=self.merge_filters(scope, filters),
                        sources=tuple(sources) if sources else None)
        return self.store.keyword_search(q, text, limit)


class _QueryEmbedding:
    """One query's embedding, computed once by whichever thread calls first: the layer whose
    vector lane needs it, or the search once its layers are done. The vector (or the
    embedder's error) goes into the search's ``vector_future``; the error is kept here for the
    search to raise, so a failed embedding never fails a layer."""

    def __init__(self, embed: Callable[[str, concurrent.futures.Future[list[float]]], tuple[list[str], float]],
                 text: str, target: concurrent.futures.Future[list[float]]) -> None:
        self._embed, self._text, self._target = embed, text, target
        self._lock = threading.Lock()
        self._ran = False
        self.notes: list[str] = []
        self.ms = 0.0
        self.error: BaseException | None = None

    def __call__(self) -> None:
        with self._lock:
            if self._ran:
                return
            self._ran = True
            try:
                self.notes, self.ms = self._embed(self._text, self._target)
            except BaseException as exc:  # noqa: BLE001 - raised by the search once its layers are done
                self.error = exc
