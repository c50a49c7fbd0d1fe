"""Embeddings both ways: the engine's embedder in LlamaIndex, and LlamaIndex embeddings in the engine."""

from __future__ import annotations

import numpy as np
import pytest
from llama_index.core.embeddings import MockEmbedding

from llama_index_manowar import LlamaIndexEmbedder, ManowarEmbedding, to_engine_embedder
from manowar_memory import ConfigurationError, EmbeddingError, FakeEmbedder, MemoryEngine, Scope
from manowar_memory.embeddings import Embedder


class _AsymmetricEmbedder(FakeEmbedder):
    """A fake whose query vectors differ from its document vectors, like voyage models."""

    __test__ = False

    def _embed_batch(self, texts: list[str], input_type: str) -> list[list[float]]:  # type: ignore[override]
        prefix = "query: " if input_type == "query" else "doc: "
        return super()._embed_batch([prefix + t for t in texts], input_type)  # type: ignore[arg-type]


class _BrokenEmbedding(MockEmbedding):
    """A LlamaIndex embedding that fails, or changes dimension after the first call."""

    mode: str = "fail"
    calls: int = 0

    def _get_text_embedding(self, text: str) -> list[float]:
        self.calls += 1
        if self.mode == "fail":
            raise RuntimeError("upstream 500")
        return [0.1] * (4 if self.calls == 1 else 5)

    def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        return [self._get_text_embedding(t) for t in texts]

    async def _aget_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        return self._get_text_embeddings(texts)


def test_manowar_embedding_is_the_engine_embedder(engine: MemoryEngine) -> None:
    """Same vectors as the engine for documents, and model_name is the engine's model id."""
    embed = ManowarEmbedding(engine=engine)
    assert embed.model_name == embed.model_id == "fake:64"
    text = "The user lives in Lisbon."
    assert engine.embedder is not None
    assert embed.get_text_embedding(text) == pytest.approx(engine.embedder.embed([text], input_type="document")[0])
    batch = embed.get_text_embedding_batch(["a b", "c d", "e f"])
    assert len(batch) == 3 and all(len(v) == 64 for v in batch)


def test_manowar_embedding_keeps_query_and_document_apart() -> None:
    """Queries are embedded as queries and texts as documents (asymmetric models)."""
    inner = _AsymmetricEmbedder(16)
    embed = ManowarEmbedding(embedder=inner)
    assert embed.get_query_embedding("lisbon") == pytest.approx(inner.embed(["lisbon"], input_type="query")[0])
    assert embed.get_text_embedding("lisbon") == pytest.approx(inner.embed(["lisbon"], input_type="document")[0])
    assert embed.get_query_embedding("lisbon") != pytest.approx(embed.get_text_embedding("lisbon"))


async def test_manowar_embedding_async(engine: MemoryEngine) -> None:
    """The async methods give the sync vectors."""
    embed = ManowarEmbedding(engine=engine)
    assert await embed.aget_query_embedding("tea") == pytest.approx(embed.get_query_embedding("tea"))
    async_batch = await embed.aget_text_embedding_batch(["x y", "z w"])
    assert np.allclose(async_batch, embed.get_text_embedding_batch(["x y", "z w"]))


def test_manowar_embedding_needs_an_embedder() -> None:
    """A keyword-only engine has no vector space to offer."""
    keyword_only = MemoryEngine(store="sqlite:///:memory:", embedder=None)
    try:
        with pytest.raises(ConfigurationError, match="keyword-only"):
            ManowarEmbedding(engine=keyword_only)
    finally:
        keyword_only.close()


def test_llamaindex_embedding_as_engine_embedder() -> None:
    """Any BaseEmbedding becomes an engine Embedder named llamaindex:<class>:<model>."""
    embedder = LlamaIndexEmbedder(MockEmbedding(embed_dim=8))
    assert isinstance(embedder, Embedder)
    assert embedder.model_id == "llamaindex:MockEmbedding:unknown"
    assert embedder.dimensions is None
    vectors = embedder.embed(["a", "b"], input_type="document")
    assert vectors == [[0.5] * 8, [0.5] * 8] and embedder.dimensions == 8
    assert embedder.embed(["q"], input_type="query") == [[0.5] * 8]
    assert LlamaIndexEmbedder(MockEmbedding(embed_dim=8), model_id="custom").model_id == "custom"


def test_engine_runs_on_a_llamaindex_embedding() -> None:
    """The engine stores rows under the LlamaIndex model id and searches them."""
    engine = MemoryEngine(store="sqlite:///:memory:", embedder=LlamaIndexEmbedder(MockEmbedding(embed_dim=8)))
    scope = Scope(agent_wallet="agent-li")
    try:
        engine.remember(scope, "The office is in Lisbon.")
        row = engine.list_items(scope)[0]
        assert row.embedding_model == "llamaindex:MockEmbedding:unknown"
        candidates, notes = engine.search("office Lisbon", scope)
        assert [c.text for c in candidates] == ["The office is in Lisbon."]
        assert candidates[0].lanes.get("vector") is not None and notes == []
    finally:
        engine.close()


async def test_llamaindex_embedder_async_and_failures() -> None:
    """aembed uses the async API; failures and dimension changes raise EmbeddingError."""
    embedder = LlamaIndexEmbedder(MockEmbedding(embed_dim=4))
    assert await embedder.aembed(["a", "b"]) == [[0.5] * 4] * 2
    assert await embedder.aembed(["q"], input_type="query") == [[0.5] * 4]
    with pytest.raises(TypeError):
        await embedder.aembed("not a list")  # type: ignore[arg-type]
    failing = LlamaIndexEmbedder(_BrokenEmbedding(embed_dim=4, mode="fail"))
    with pytest.raises(EmbeddingError, match="upstream 500"):
        failing.embed(["x"])
    with pytest.raises(EmbeddingError, match="upstream 500"):
        await failing.aembed(["x"])
    drifting = LlamaIndexEmbedder(_BrokenEmbedding(embed_dim=4, mode="drift"), batch_size=1)
    with pytest.raises(EmbeddingError, match="5-dimensional vector, expected 4"):
        drifting.embed(["x", "y"])
    with pytest.raises(ConfigurationError):
        LlamaIndexEmbedder(object())  # type: ignore[arg-type]


def test_to_engine_embedder_round_trip(engine: MemoryEngine) -> None:
    """A ManowarEmbedding gives back the engine's embedder (same model id); others are wrapped."""
    back = to_engine_embedder(ManowarEmbedding(engine=engine))
    assert back is engine.embedder and back.model_id == "fake:64"
    wrapped = to_engine_embedder(MockEmbedding(embed_dim=3))
    assert isinstance(wrapped, LlamaIndexEmbedder) and wrapped.model_id.startswith("llamaindex:MockEmbedding")
