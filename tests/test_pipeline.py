"""The ranking pipeline as a reader and a user see it: the stage order assembled from the
options, a user's stage inserted in its place, typed layer results with timings, and the
engine's threads owned and shut down in one place."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import pytest

from manowar_memory import MemoryEngine, Scope
from manowar_memory.candidates import Candidate
from manowar_memory.config import RetrievalConfig
from manowar_memory.errors import ConfigurationError
from manowar_memory.layers import LAYER_SEARCHERS, LayerHits, LayerRequest
from manowar_memory.rerankers.base import RerankResult
from manowar_memory.retrieval import RankContext, RankOptions, StageInsert, ranking_stages
from manowar_memory.retrieval.pipeline import RankingStage

SCOPE = Scope(agent_wallet="agent-1", user_address="user-1", thread_id="t-1")


class Recorder:
    """A user stage: remembers what it saw, drops nothing."""

    name = "recorder"

    def __init__(self) -> None:
        self.seen: list[dict[str, float]] = []

    def __call__(self, candidates: list[Candidate], ctx: RankContext) -> list[Candidate]:
        self.seen.extend(dict(c.trace) for c in candidates)
        return candidates


def names(options: RankOptions, inserts: list[StageInsert] | None = None) -> list[str]:
    return [s.name for s in ranking_stages(RetrievalConfig(), options, inserts or [])]


def test_the_stage_order_follows_the_options() -> None:
    assert names(RankOptions()) == ["decay", "boosts", "time"]
    assert names(RankOptions(decay=False)) == ["boosts", "time"]
    assert names(RankOptions(rerank=True, mmr=True)) == ["decay", "rerank", "boosts", "time", "mmr"]


def test_inserted_stages_go_where_they_are_told() -> None:
    a, b, c = Recorder(), Recorder(), Recorder()
    inserts = [StageInsert(a, after="decay"), StageInsert(b, before="decay"), StageInsert(c)]
    stages = ranking_stages(RetrievalConfig(), RankOptions(mmr=True), inserts)
    assert [id(s) for s in stages if isinstance(s, Recorder)] == [id(b), id(a), id(c)]
    assert [s.name for s in stages] == ["recorder", "decay", "recorder", "boosts", "time", "mmr", "recorder"]
    # anchored on a stage this search does not run: left out
    assert names(RankOptions(), [StageInsert(a, after="rerank")]) == ["decay", "boosts", "time"]
    assert isinstance(a, RankingStage)


def test_a_bad_insert_is_refused() -> None:
    with pytest.raises(ConfigurationError):
        StageInsert(object())  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError):
        StageInsert(Recorder(), after="decay", before="boosts")


def test_an_engine_stage_runs_between_decay_and_boosts_and_is_timed() -> None:
    engine = MemoryEngine(store="sqlite:///:memory:", embedder="fake", extractor=None)
    recorder = Recorder()
    engine.insert_stage(recorder, after="decay")
    engine.ingest(SCOPE, ["The Lisbon trip is in May", "Hotel booked near the river in Lisbon"])
    result = engine.pre_turn("Lisbon trip", SCOPE, ["vectors"])
    engine.close()
    assert recorder.seen and all("decay" in t and "boost" not in t for t in recorder.seen)
    for key in ("vectors", "vectors.keyword", "vectors.vector", "vectors.fusion", "vectors.decay",
                "vectors.recorder", "vectors.boosts", "layers", "pack", "total"):
        assert key in result.timings_ms, key


def test_every_layer_searcher_returns_layer_hits() -> None:
    engine = MemoryEngine(store="sqlite:///:memory:", embedder="fake", extractor=None)
    engine.ingest(SCOPE, ["The Lisbon trip is in May"])
    engine.post_turn(SCOPE, [{"role": "user", "content": "Lisbon trip plans"},
                             {"role": "assistant", "content": "Noted the Lisbon trip"}])
    engine.flush()
    req = LayerRequest(store=engine.store, scope=SCOPE, filters={}, text="Lisbon trip", limit=5,
                       config=engine.config.retrieval, options=RankOptions(), threads=engine.threads)
    for layer, searcher in LAYER_SEARCHERS.items():
        hits = searcher(req)
        assert isinstance(hits, LayerHits) and set(hits.layers) == {layer}, layer
    engine.close()


def test_close_shuts_every_engine_thread_down() -> None:
    engine = MemoryEngine(store="sqlite:///:memory:", embedder="fake", extractor=None)
    engine.ingest(SCOPE, ["The Lisbon trip is in May"])
    engine.pre_turn("Lisbon", SCOPE)
    threads = engine.threads
    engine.close()
    assert threads.beside(lambda: None) is None
    for pool in (threads.layers, threads.lanes, threads.rerank, threads.background):
        with pytest.raises(RuntimeError):
            pool.submit(lambda: None)


class ThreadNamingReranker:
    """Reverses the order and remembers which thread it ran on."""

    model_id = "thread-naming"

    def __init__(self) -> None:
        self.threads: list[str] = []

    def rerank(self, query: str, documents: Sequence[str], *, top_k: int | None = None,
               timeout: float | None = None) -> list[RerankResult]:
        self.threads.append(threading.current_thread().name)
        return [RerankResult(i, float(i)) for i in range(len(documents))]


def test_the_rerank_stage_runs_on_the_engines_rerank_threads() -> None:
    reranker = ThreadNamingReranker()
    engine = MemoryEngine(store="sqlite:///:memory:", embedder="fake", extractor=None, reranker=reranker)
    engine.ingest(SCOPE, [f"Lisbon trip note {i}: tram, river and hotel" for i in range(8)])
    result = engine.search_layers("Lisbon trip tram river hotel", SCOPE, ["vectors"], rerank=True)
    engine.close()
    assert reranker.threads and all(name.startswith("manowar-rerank") for name in reranker.threads)
    assert result.lanes["vectors"]["rerank"] == "reranked" and "vectors.rerank" in result.timings_ms


def _varied(now: int) -> list[Candidate]:
    """Candidates that differ in every signal decay and boosts read."""
    day = 86_400_000
    metas = [{}, {"trust": "system"}, {"trust": "external", "occurredAt": now - 3 * day},
             {"proofCount": 4, "confidence": 0.6, "occurredAt": now - 40 * day}, {"outdated": True},
             {"proofCount": 1}, {"trust": " Learned "}]
    return [Candidate(layer="vectors", id=f"c{i}", text=f"memory {i}", score=1.0 / (i + 2),
                      created_at=None if i == 5 else now - i * 7 * day, metadata=dict(metas[i % len(metas)]))
            for i in range(14)]


@pytest.mark.parametrize("rebase", [False, True])
def test_work_done_ahead_ranks_exactly_as_work_done_in_the_stage(rebase: bool) -> None:
    # the search works decay and boosts out for the keyword lane's candidates while the query is
    # embedded (prepare_stages); the stages must then give the very same order, scores and traces
    from manowar_memory.retrieval import LaneReport
    from manowar_memory.retrieval.pipeline import prepare_stages, run_stages

    now = 1_780_000_000_000
    config = RetrievalConfig(decay_rebase=rebase, outdated_factor=0.5)
    stages = ranking_stages(config, RankOptions(), [])

    def ranked(ahead: int) -> list[tuple[str, float, dict[str, float]]]:
        cands = _varied(now)
        ctx = RankContext(text="memory", limit=5, now=now, config=config, report=LaneReport())
        if ahead:
            prepare_stages(stages, cands[:ahead], ctx)
            assert set(ctx.ahead) == {"decay", "boosts"} and len(ctx.ahead["boosts"]) == ahead
        return [(c.id, c.score, dict(c.trace)) for c in run_stages(cands, ctx, stages, {})]

    plain = ranked(0)
    assert ranked(9) == plain and ranked(14) == plain
    assert any("boost_outdated" in trace for _, _, trace in plain)  # the signals were really there


def test_a_live_search_does_the_stages_work_ahead_and_ranks_as_a_cached_one() -> None:
    engine = MemoryEngine(store="sqlite:///:memory:", embedder="fake", extractor=None)
    engine.ingest(SCOPE, ["The Lisbon trip is in May", "Hotel booked near the river in Lisbon",
                          "Lisbon has trams", "Bought a guide to Porto", "May is warm in Portugal"])
    engine.flush()
    live = engine.search_layers("Lisbon trip in May", SCOPE, ["vectors"])  # embedded now: lanes in its shadow
    cached = engine.search_layers("Lisbon trip in May", SCOPE, ["vectors"])  # the vector is cached: no shadow
    engine.close()
    assert "vectors.ahead" in live.timings_ms and "vectors.ahead" not in cached.timings_ms
    # the same ranking (the two searches read the clock apart: ages differ by the time between them)
    first, second = live.layers["vectors"], cached.layers["vectors"]
    assert [(c.id, sorted(c.trace)) for c in first] == [(c.id, sorted(c.trace)) for c in second]
    assert [c.score for c in first] == pytest.approx([c.score for c in second], rel=1e-6)
    assert len(first) >= 3 and any("boost_recency" in c.trace for c in first)
