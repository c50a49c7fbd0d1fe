"""Embeddings both ways, and fact extraction with a LangChain chat model."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from langchain_core.embeddings import DeterministicFakeEmbedding, Embeddings
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.vectorstores import InMemoryVectorStore

from langchain_manowar import (
    LangChainEmbedder,
    ManowarEmbeddings,
    ManowarRetriever,
    create_llm_extractor,
)
from langchain_manowar.extraction import ChatModelFunction
from manowar_memory import Embedder, EmbeddingError, FakeEmbedder, MemoryEngine, Scope

SCOPE = Scope(agent_wallet="agent-e", user_address="user-e", thread_id="t-e")


class AsymmetricEmbeddings(Embeddings):
    """Queries and documents land on different axes, and every call is counted."""

    model = "asym-1"

    def __init__(self) -> None:
        self.calls: list[str] = []

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.calls.append("documents")
        return [[1.0, float(len(t)), 0.0] for t in texts]

    def embed_query(self, text: str) -> list[float]:
        self.calls.append("query")
        return [0.0, float(len(text)), 1.0]

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        self.calls.append("adocuments")
        return [[1.0, float(len(t)), 0.0] for t in texts]

    async def aembed_query(self, text: str) -> list[float]:
        self.calls.append("aquery")
        return [0.0, float(len(text)), 1.0]


class BrokenEmbeddings(Embeddings):
    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        raise RuntimeError("provider down")

    def embed_query(self, text: str) -> list[float]:
        raise RuntimeError("provider down")


class TestLangChainEmbedder:
    def test_is_an_engine_embedder_with_a_namespaced_model_id(self) -> None:
        """Any Embeddings satisfies the Embedder protocol; the model id names class and model."""
        embedder = LangChainEmbedder(DeterministicFakeEmbedding(size=8))
        assert isinstance(embedder, Embedder)
        assert embedder.model_id == "langchain:DeterministicFakeEmbedding:size8"
        assert LangChainEmbedder(AsymmetricEmbeddings()).model_id == "langchain:AsymmetricEmbeddings:asym-1"
        assert LangChainEmbedder(AsymmetricEmbeddings(), model="v2").model_id == "langchain:AsymmetricEmbeddings:v2"
        with pytest.raises(TypeError):
            LangChainEmbedder(FakeEmbedder())  # type: ignore[arg-type]

    def test_queries_and_documents_use_their_own_calls(self) -> None:
        """input_type picks embed_query or embed_documents, sync and async."""
        inner = AsymmetricEmbeddings()
        embedder = LangChainEmbedder(inner)
        assert embedder.embed(["abc"], input_type="document") == [[1.0, 3.0, 0.0]]
        assert embedder.embed(["abcd"], input_type="query") == [[0.0, 4.0, 1.0]]
        assert embedder.dimensions == 3
        assert inner.calls == ["documents", "query"]

    async def test_async_uses_the_async_api(self) -> None:
        """aembed calls aembed_documents / aembed_query."""
        inner = AsymmetricEmbeddings()
        embedder = LangChainEmbedder(inner, batch_size=2)
        assert len(await embedder.aembed(["a", "b", "c"])) == 3
        assert await embedder.aembed(["xy"], input_type="query") == [[0.0, 2.0, 1.0]]
        assert inner.calls == ["adocuments", "adocuments", "aquery"]

    def test_failures_are_embedding_errors(self) -> None:
        """A failing provider raises EmbeddingError, and the engine does not fall back."""
        engine = MemoryEngine(store="sqlite:///:memory:", embedder=LangChainEmbedder(BrokenEmbeddings()))
        try:
            with pytest.raises(EmbeddingError, match="provider down"):
                engine.remember(SCOPE, "The user likes tea.")
        finally:
            engine.close()

    def test_engine_stores_and_finds_with_a_langchain_model(self) -> None:
        """The engine embeds rows with the LangChain model and records its model id on them."""
        engine = MemoryEngine(store="sqlite:///:memory:", embedder=LangChainEmbedder(DeterministicFakeEmbedding(size=32)))
        try:
            engine.remember(SCOPE, "The user plays the violin.")
            (doc,) = ManowarRetriever(engine=engine, scope=SCOPE, k=1, layers=["graph"]).invoke("violin")
            assert engine.get_item(SCOPE, doc.id).embedding_model == "langchain:DeterministicFakeEmbedding:size32"
            assert engine.list_items(SCOPE)[0].embedding_model == "langchain:DeterministicFakeEmbedding:size32"
        finally:
            engine.close()


class TestManowarEmbeddings:
    def test_from_a_provider_string_and_an_embedder(self) -> None:
        """ManowarEmbeddings wraps provider strings or embedder instances; query and documents agree in size."""
        emb = ManowarEmbeddings("fake:12")
        assert emb.model_id == "fake:12" and len(emb.embed_query("hi")) == 12
        assert emb.embed_documents([]) == []
        assert ManowarEmbeddings(FakeEmbedder(8)).embed_documents(["a", "b"])[1] == FakeEmbedder(8).embed(["b"])[0]
        with pytest.raises(ValueError):
            ManowarEmbeddings()

    def test_shares_the_engines_vector_space(self) -> None:
        """engine= reuses the engine's cached embedder: same vectors, cache hits counted."""
        engine = MemoryEngine(store="sqlite:///:memory:", embedder="fake:16")
        try:
            emb = ManowarEmbeddings(engine=engine)
            assert emb.model_id == engine.model_id == "fake:16"
            first = emb.embed_documents(["green tea"])
            assert emb.embed_documents(["green tea"])[0] == pytest.approx(first[0], abs=1e-6)  # cached as float32
            assert engine.embedder is not None and engine.embedder.hits == 1
            store = InMemoryVectorStore(emb)
            store.add_texts(["green tea with honey", "mountain hiking"])
            assert store.similarity_search("green tea", k=1)[0].page_content == "green tea with honey"
        finally:
            engine.close()
        keyword_only = MemoryEngine(store="sqlite:///:memory:", embedder=None)
        try:
            with pytest.raises(ValueError, match="keyword-only"):
                ManowarEmbeddings(engine=keyword_only)
        finally:
            keyword_only.close()

    async def test_async(self) -> None:
        """aembed_query / aembed_documents return the sync vectors."""
        emb = ManowarEmbeddings("fake:8")
        assert await emb.aembed_query("x") == emb.embed_query("x")
        assert await emb.aembed_documents(["x", "y"]) == emb.embed_documents(["x", "y"])


class TestLLMExtractor:
    @pytest.fixture
    def engine_and_model(self) -> Iterator[tuple[MemoryEngine, FakeListChatModel]]:
        answer = json.dumps({"facts": [
            {"fact": "The user is training for the Lisbon marathon.", "type": "event", "confidence": 0.9},
            {"fact": "The user might like cake.", "type": "preference", "confidence": 0.3},
            {"fact": "Not a real type.", "type": "gossip", "confidence": 0.9},
        ]})
        model = FakeListChatModel(responses=[answer])
        engine = MemoryEngine(store="sqlite:///:memory:", embedder="fake", extractor=create_llm_extractor(model))
        yield engine, model
        engine.close()

    def test_facts_come_from_the_chat_model(self, engine_and_model: tuple[MemoryEngine, FakeListChatModel]) -> None:
        """post_turn asks the model; valid rows become graph facts tagged with the extractor's name."""
        engine, _ = engine_and_model
        engine.post_turn(SCOPE, [{"role": "user", "content": "I'm running the Lisbon marathon in October!"},
                                 {"role": "assistant", "content": "Good luck!"}])
        flushed = engine.flush()
        assert flushed.facts_indexed == 1 and flushed.failed == 0
        (fact,) = engine.list_items(SCOPE, sources=["fact"])
        assert fact.content == "The user is training for the Lisbon marathon."
        assert fact.metadata["extractor"] == "langchain:FakeListChatModel" and fact.metadata["factType"] == "event"

    def test_prompt_reaches_the_model_as_chat_messages(self) -> None:
        """The extractor's dict prompt becomes System/Human messages; the answer's text is returned."""
        seen: list[list[str]] = []

        class Recorder(FakeListChatModel):
            def _call(self, messages, stop=None, run_manager=None, **kwargs):  # type: ignore[no-untyped-def]
                seen.append([m.type for m in messages])
                return super()._call(messages, stop, run_manager, **kwargs)

        fn = ChatModelFunction(Recorder(responses=['{"facts": []}']))
        assert fn([{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]) == '{"facts": []}'
        assert seen == [["system", "human"]]
        extractor = create_llm_extractor(Recorder(responses=["not json"]), name="custom")
        assert extractor.name == "custom"
