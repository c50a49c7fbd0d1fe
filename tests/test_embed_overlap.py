"""The query embedding overlaps the lanes that do not need it (keyword lanes, other layers)."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import pytest

from manowar_memory import EmbeddingError, MemoryEngine, Scope
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
