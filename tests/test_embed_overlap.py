"""The query embedding overlaps the lanes that do not need it (keyword lanes, other layers)."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import pytest

from manowar_memory import EmbeddingError, MemoryConfig, MemoryEngine, Scope
from manowar_memory.embeddings.base import InputType
from manowar_memory.embeddings.fake import FakeEmbedder
from manowar_memory.stores.base import Hit, MemoryQuery
from manowar_memory.stores.sqlite import SQLiteStore

SCOPE = Scope(agent_wallet="agent-1", user_address="user-1", thread_id="t-1")
FACTS = ["The user moved to Lisbon in June.", "The user's sister lives in Porto.", "The user plays the cello."]


class GatedEmbedder(FakeEmbedder):
    """Embeds a query only once ``gate`` is set (documents at once); fails when it never is."""

    __test__ = False

    def __init__(self, gate: threading.Event, *, fail_queries: bool = False) -> None:
        super().__init__(64)
        self.gate = gate
        self.fail_queries = fail_queries

    def _embed_batch(self, texts: list[str], input_type: InputType) -> list[list[float]]:
        if input_type == "query":
            if not self.gate.wait(10):
                raise RuntimeError("the keyword lane did not run while the query was being embedded")
            if self.fail_queries:
                raise RuntimeError("query embedding failed")
        return super()._embed_batch(texts, input_type)


class SignallingStore(SQLiteStore):
    """Sets ``gate`` once a keyword search has run."""

    def __init__(self, gate: threading.Event) -> None:
        super().__init__(":memory:")
        self.gate = gate

    def keyword_search(self, query: MemoryQuery, text: str, limit: int) -> list[Hit]:
        hits = super().keyword_search(query, text, limit)
        self.gate.set()
        return hits


def _engine(gate: threading.Event, **kw: bool) -> MemoryEngine:
    engine = MemoryEngine(store=SignallingStore(gate), embedder=GatedEmbedder(gate, **kw), extractor=None)
    engine.ingest(SCOPE, FACTS)
    gate.clear()
    return engine


@pytest.mark.parametrize("layers", [("vectors",), None])
def test_keyword_lane_runs_while_the_query_is_embedded(layers: Sequence[str] | None) -> None:
    gate = threading.Event()
    with _engine(gate) as engine, MemoryEngine(store="sqlite:///:memory:", embedder=FakeEmbedder(64),
                                               extractor=None) as plain:
        plain.ingest(SCOPE, FACTS)
        result = engine.pre_turn("Where does the user's sister live?", SCOPE, layers)
        expected = plain.pre_turn("Where does the user's sister live?", SCOPE, layers)
        assert [(i.text, i.score) for i in result.items] == [(i.text, i.score) for i in expected.items]
        assert result.items[0].text.endswith("sister lives in Porto.")
        assert result.degradations == expected.degradations
        timings = result.timings_ms
        assert timings["embed"] > 0
        # the vector lane waited for the vector: what the keyword lane could not hide of it
        assert any(k.endswith(".embed_wait") for k in timings)


def test_a_failed_query_embedding_still_raises_after_the_lanes() -> None:
    gate = threading.Event()
    with _engine(gate, fail_queries=True) as engine:
        with pytest.raises(EmbeddingError, match="query embedding failed"):
            engine.pre_turn("Where does the user's sister live?", SCOPE, ("vectors",))
        gate.clear()
        with pytest.raises(EmbeddingError, match="query embedding failed"):
            engine.search_layers("Which instrument?", SCOPE)
        assert engine.embedder is not None
        engine.embedder.inner.fail_queries = False  # type: ignore[attr-defined]
        gate.set()
        assert engine.pre_turn("Which instrument does the user play?", SCOPE, ("vectors",)).items


class RecordingStore(SQLiteStore):
    """Records each keyword search's text and whether the query vector existed by then."""

    def __init__(self, embedded: threading.Event) -> None:
        super().__init__(":memory:")
        self.embedded = embedded
        self.calls: list[tuple[str, bool]] = []

    def keyword_search(self, query: MemoryQuery, text: str, limit: int) -> list[Hit]:
        self.calls.append((text, self.embedded.is_set()))
        return super().keyword_search(query, text, limit)


class SlowEmbedder(FakeEmbedder):
    """Embeds a query after ``delay`` seconds, then sets ``embedded``."""

    __test__ = False

    def __init__(self, embedded: threading.Event, delay: float) -> None:
        super().__init__(64)
        self.embedded, self.delay = embedded, delay

    def _embed_batch(self, texts: list[str], input_type: InputType) -> list[list[float]]:
        if input_type == "query":
            threading.Event().wait(self.delay)
            self.embedded.set()
        return super()._embed_batch(texts, input_type)


STORY = ["Last summer Melanie painted a sunrise with Caroline by the lake.",
         "In May Caroline joined a support group.", "The user plays the cello."]


def test_the_entity_lane_runs_in_the_embeddings_shadow_with_the_same_results() -> None:
    """The entity lane is seeded by the keyword lane's top hits, so it runs before the query
    vector exists, and a slow embedding gives exactly what an instant one gives."""
    embedded = threading.Event()
    store = RecordingStore(embedded)
    question = "What did Melanie paint?"
    with MemoryEngine(store=store, embedder=SlowEmbedder(embedded, 0.3), extractor=None) as slow, \
            MemoryEngine(store="sqlite:///:memory:", embedder=FakeEmbedder(64), extractor=None) as instant:
        slow.ingest(SCOPE, STORY)
        instant.ingest(SCOPE, STORY)
        embedded.clear()
        store.calls.clear()
        result = slow.pre_turn(question, SCOPE, ("vectors",))
        expected = instant.pre_turn(question, SCOPE, ("vectors",))
    assert [text for text, _ in store.calls] == [question, "Caroline"]  # the keyword lane, then the entity lane's
    assert not any(done for _, done in store.calls), store.calls  # both before the vector existed
    assert result.lanes["vectors"]["entities"] == ["Caroline"]
    assert [i.text for i in result.items] == [i.text for i in expected.items]
    assert [i.score for i in result.items] == pytest.approx([i.score for i in expected.items], rel=1e-5)  # the clock moved
    for lane in ("keyword", "vector", "entity"):  # the same hits, scores and order in every lane
        assert [s for _, s in result.lanes["vectors"]["hits"][lane]] == [
            s for _, s in expected.lanes["vectors"]["hits"][lane]], lane
    assert result.lanes["vectors"]["entity"] == expected.lanes["vectors"]["entity"] > 0
    assert "vectors.embed_wait" in result.timings_ms


class ThreadRecordingEmbedder(FakeEmbedder):
    """Records the thread each query embedding runs on."""

    __test__ = False

    def __init__(self) -> None:
        super().__init__(64)
        self.query_threads: list[int] = []

    def _embed_batch(self, texts: list[str], input_type: InputType) -> list[list[float]]:
        if input_type == "query":
            self.query_threads.append(threading.get_ident())
        return super()._embed_batch(texts, input_type)


class VectorThreadStore(SQLiteStore):
    """Records the thread each vector search runs on."""

    def __init__(self) -> None:
        super().__init__(":memory:")
        self.vector_threads: list[int] = []

    def vector_search(self, query: MemoryQuery, vector: Sequence[float], model_id: str, limit: int):  # type: ignore[no-untyped-def]
        self.vector_threads.append(threading.get_ident())
        return super().vector_search(query, vector, model_id, limit)


@pytest.mark.parametrize("layers", [("vectors",), None])
def test_the_vector_lanes_thread_embeds_the_query_itself(layers: Sequence[str] | None) -> None:
    """No thread handoff between the embedding and the vector lane: the thread that runs the
    vector lane is the one that embedded the query (the keyword lane ran beside it)."""
    embedder, store = ThreadRecordingEmbedder(), VectorThreadStore()
    with MemoryEngine(store=store, embedder=embedder, extractor=None) as engine:
        engine.ingest(SCOPE, FACTS)
        embedder.query_threads.clear()
        result = engine.pre_turn("Where does the user's sister live?", SCOPE, layers)
    assert result.items[0].text.endswith("sister lives in Porto.")
    assert len(embedder.query_threads) == 1 and embedder.query_threads == store.vector_threads


def test_a_search_with_the_vector_lane_weighted_out_does_not_embed_the_query() -> None:
    """No lane reads the vector when the vector lane's weight is 0: the query is not embedded
    (no embedding to wait for after the layers), and the keyword lane answers."""
    embedder = ThreadRecordingEmbedder()
    config = MemoryConfig.model_validate({"retrieval": {"lane_weights": {"keyword": 1.0, "vector": 0.0}}})
    with MemoryEngine(store="sqlite:///:memory:", embedder=embedder, extractor=None, config=config) as engine:
        engine.ingest(SCOPE, FACTS)
        embedder.query_threads.clear()
        result = engine.search_layers("Where does the user's sister live?", SCOPE, ["vectors"])
        assert embedder.query_threads == []
        assert "embed" not in result.timings_ms
        assert result.lanes["vectors"]["vector"] == 0
        assert result.layers["vectors"][0].text.endswith("sister lives in Porto.")
        engine.config.retrieval.lane_weights["vector"] = 1.0  # the same engine with the lane back: embedded once
        result = engine.search_layers("Where does the user's sister live?", SCOPE, ["vectors"])
    assert len(embedder.query_threads) == 1 and result.timings_ms["embed"] >= 0
    assert result.lanes["vectors"]["vector"] > 0


def test_the_querys_time_is_read_in_the_embeddings_shadow(monkeypatch: pytest.MonkeyPatch) -> None:
    """Reading what the query says about time is work the vector does not need: it runs on the
    lane thread beside the embedding (once for the query), not before the embedding starts,
    and the time stage still applies what it read."""
    import manowar_memory.layers as layers_module

    read_on: list[int] = []
    parse = layers_module.parse_time_query

    def recording_parse(text: str, now: int):  # type: ignore[no-untyped-def]
        read_on.append(threading.get_ident())
        return parse(text, now)

    monkeypatch.setattr(layers_module, "parse_time_query", recording_parse)
    embedder = ThreadRecordingEmbedder()
    with MemoryEngine(store="sqlite:///:memory:", embedder=embedder, extractor=None) as engine:
        engine.ingest(SCOPE, FACTS)
        embedder.query_threads.clear()
        result = engine.search_layers("When did the user move to Lisbon?", SCOPE, ["vectors"])
    assert len(read_on) == 1 and len(embedder.query_threads) == 1
    assert read_on[0] != embedder.query_threads[0]
    assert result.lanes["vectors"]["extra"]["time"]["asks_when"] is True
    assert result.layers["vectors"][0].text == "The user moved to Lisbon in June."


class KeywordAfterVectorStore(SQLiteStore):
    """A full-text search that cannot finish before a vector search has started (a slow index,
    or a store a round trip away); records when each lane's store call ran."""

    def __init__(self) -> None:
        super().__init__(":memory:")
        self.vector_started = threading.Event()
        self.waited_for_vector: list[bool] = []

    def keyword_search(self, query: MemoryQuery, text: str, limit: int) -> list[Hit]:
        self.waited_for_vector.append(self.vector_started.wait(5))
        return super().keyword_search(query, text, limit)

    def vector_search(self, query: MemoryQuery, vector: Sequence[float], model_id: str, limit: int):  # type: ignore[no-untyped-def]
        self.vector_started.set()
        return super().vector_search(query, vector, model_id, limit)


def test_the_vector_lane_starts_when_the_vector_exists_not_when_the_keyword_lane_ends() -> None:
    """When the embedding ends before the keyword lane does, the vector lane does not wait for
    the keyword and entity lanes: the store runs both searches at once, and the results are
    those of the same search run lane after lane."""
    store = KeywordAfterVectorStore()
    question = "Where does the user's sister live?"
    with MemoryEngine(store=store, embedder=FakeEmbedder(64), extractor=None) as engine, \
            MemoryEngine(store="sqlite:///:memory:", embedder=FakeEmbedder(64), extractor=None) as plain:
        engine.ingest(SCOPE, FACTS)
        plain.ingest(SCOPE, FACTS)
        store.waited_for_vector.clear()
        store.vector_started.clear()
        result = engine.pre_turn(question, SCOPE, ("vectors",))
        expected = plain.pre_turn(question, SCOPE, ("vectors",))
    assert store.waited_for_vector[0] is True  # the first keyword search saw the vector search start
    assert "vectors.lanes_wait" in result.timings_ms and result.timings_ms["embed"] >= 0
    assert [i.text for i in result.items] == [i.text for i in expected.items]
    for lane in ("keyword", "vector"):
        assert result.lanes["vectors"]["hits"][lane] == expected.lanes["vectors"]["hits"][lane], lane
    assert result.items[0].text.endswith("sister lives in Porto.")
