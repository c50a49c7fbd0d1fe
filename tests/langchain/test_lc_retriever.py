"""ManowarRetriever: layers, filters, k and ranking options; Documents carry layer, score, scope and provenance."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pydantic import ValidationError

from langchain_manowar import ManowarRetriever
from manowar_memory import FilterError, MemoryEngine, Scope
from manowar_memory.rerankers import FakeReranker
from manowar_memory.scoped import DEFAULT_K
from manowar_memory.tools import memory_view

SCOPE = Scope(agent_wallet="agent-r", user_address="user-r", thread_id="t-r")


@pytest.fixture
def engine() -> Iterator[MemoryEngine]:
    engine = MemoryEngine(store="sqlite:///:memory:", embedder="fake:256", reranker=FakeReranker())
    engine.remember(SCOPE, "The user prefers dark roast coffee.", fact_type="preference")
    engine.ingest(SCOPE, [
        {"content": "Coffee brewing notes: dark roast, French press.", "metadata": {"topic": "coffee"}},
        {"content": "Coffee shop list for Lisbon.", "metadata": {"topic": "travel"}},
        {"content": "Tea ceremony notes.", "metadata": {"topic": "tea"}},
    ])
    engine.post_turn(SCOPE, [{"role": "user", "content": "Any coffee recommendations for tomorrow?"},
                             {"role": "assistant", "content": "Try a dark roast."}])
    engine.flush()
    yield engine
    engine.close()


class TestDocuments:
    def test_metadata_is_the_shared_memory_view_schema(self, engine: MemoryEngine) -> None:
        """Every document carries memory_view's metadata: the keys a LlamaIndex node of the same memory has."""
        docs = ManowarRetriever(engine=engine, scope=SCOPE, k=5).invoke("dark roast coffee")
        assert docs and docs[0].page_content
        fact = next(d for d in docs if d.metadata["layer"] == "graph")
        meta = fact.metadata
        assert set(meta) - {"shortfall"} == {"id", "layer", "score", "rank_score", "created_at", "trust", "source",
                                             "lanes"}
        view = memory_view(engine.scoped(SCOPE).get(fact.id), default_trust="learned")
        assert {k: meta[k] for k in ("id", "created_at", "trust", "source")} == {
            k: view["metadata"][k] for k in ("id", "created_at", "trust", "source")}
        assert fact.id == meta["id"] and meta["source"] == "fact" and meta["trust"] == "learned"
        assert 0 < meta["score"] <= 1 and set(meta["lanes"]) <= {"keyword", "vector", "entity"}
        ranked = [d.metadata["rank_score"] for d in docs]  # the order is the engine's ranking
        assert ranked == sorted(ranked, reverse=True)
        explained = ManowarRetriever(engine=engine, scope=SCOPE, k=1, decisions=True).invoke("dark roast coffee")
        assert "decay" in explained[0].metadata["decisions"]

    def test_k_and_search_kwargs_as_vector_store_retrievers_take_them(self, engine: MemoryEngine) -> None:
        """search_kwargs={"k": 2} is honoured (it was ignored), with filter and layers; the default k is
        DEFAULT_K; unknown keys raise when the retriever is built and per call."""
        assert ManowarRetriever(engine=engine, scope=SCOPE).k == DEFAULT_K == 4
        assert len(ManowarRetriever(engine=engine, scope=SCOPE, search_kwargs={"k": 2}).invoke("coffee")) == 2
        assert len(ManowarRetriever(engine=engine, scope=SCOPE, k=1).invoke("coffee")) == 1
        narrowed = ManowarRetriever(engine=engine, scope=SCOPE, search_kwargs={
            "k": 5, "layers": ["vectors"], "filter": {"metadata.topic": "coffee"}}).invoke("coffee notes")
        assert [d.page_content for d in narrowed] == ["Coffee brewing notes: dark roast, French press."]
        per_call = ManowarRetriever(engine=engine, scope=SCOPE, search_kwargs={"k": 1})
        assert len(per_call.invoke("coffee", k=3)) == 3
        with pytest.raises(TypeError, match="unknown retriever option"):
            ManowarRetriever(engine=engine, scope=SCOPE, search_kwargs={"top_k": 2})
        with pytest.raises(TypeError, match="unknown retriever option"):
            per_call.invoke("coffee", fetch_k=9)
        with pytest.raises(ValidationError):
            ManowarRetriever(engine=engine, scope=SCOPE, similarity_top_k=2)

    def test_layers_choose_what_is_searched(self, engine: MemoryEngine) -> None:
        """layers=['graph'] gives facts only; the scene layer gives the thread's transcript with its session."""
        graph = ManowarRetriever(engine=engine, scope=SCOPE, layers=["graph"], k=10).invoke("coffee")
        assert graph and {d.metadata["layer"] for d in graph} == {"graph"}
        assert ManowarRetriever(engine=engine, scope=SCOPE, layers="graph").layers == ("graph",)
        with pytest.raises(ValueError, match="unknown layer"):
            ManowarRetriever(engine=engine, scope=SCOPE, layers=["graph", "episodic"])
        scene = ManowarRetriever(engine=engine, scope=SCOPE, layers=["scene"], k=3).invoke("coffee recommendations")
        assert scene and scene[0].metadata["layer"] == "scene"
        assert scene[0].metadata["source"] == "transcript" and scene[0].id == SCOPE.thread_session_id()

    def test_filters_and_per_call_options(self, engine: MemoryEngine) -> None:
        """Allowlisted filters narrow the search; k, layers and filters can change per call."""
        retriever = ManowarRetriever(engine=engine, scope=SCOPE, layers=["vectors"], k=10)
        docs = retriever.invoke("coffee notes", filters={"metadata.topic": "coffee"})
        assert [d.page_content for d in docs] == ["Coffee brewing notes: dark roast, French press."]
        assert len(retriever.invoke("coffee", k=1)) == 1
        with pytest.raises(FilterError):
            retriever.invoke("coffee", filters={"$where": "1"})
        with pytest.raises(TypeError, match="unknown retriever option"):
            retriever.invoke("coffee", top_k=2)

    def test_min_score_drops_weak_hits(self, engine: MemoryEngine) -> None:
        """min_score keeps only documents scoring at least that much."""
        all_docs = ManowarRetriever(engine=engine, scope=SCOPE, k=10).invoke("coffee")
        cut = sorted(d.metadata["score"] for d in all_docs)[len(all_docs) // 2]
        kept = ManowarRetriever(engine=engine, scope=SCOPE, k=10, min_score=cut).invoke("coffee")
        assert 0 < len(kept) < len(all_docs) and all(d.metadata["score"] >= cut for d in kept)

    def test_rerank_and_mmr_options(self, engine: MemoryEngine) -> None:
        """rerank goes through the engine's reranker; mmr orders the merged layers and records mmr_rank."""
        docs = ManowarRetriever(engine=engine, scope=SCOPE, k=4, rerank=True, layers=["vectors"]).invoke("coffee dark roast")
        assert engine.reranker.calls == 1  # type: ignore[union-attr]
        docs = ManowarRetriever(engine=engine, scope=SCOPE, k=4, rerank=True, layers=["vectors"],
                                decisions=True).invoke("coffee dark roast")
        assert all("rerank" in d.metadata["decisions"] for d in docs)
        assert docs[-1].page_content == "Coffee shop list for Lisbon."  # shares one of three query terms
        mmr = ManowarRetriever(engine=engine, scope=SCOPE, k=3, mmr=True, decisions=True).invoke("coffee")
        assert [d.metadata["decisions"]["mmr_rank"] for d in mmr] == [0, 1, 2]

    def test_scope_isolation(self, engine: MemoryEngine) -> None:
        """Another user of the same agent does not retrieve this user's memories."""
        other = Scope(agent_wallet="agent-r", user_address="someone-else")
        assert ManowarRetriever(engine=engine, scope=other, k=5).invoke("dark roast coffee") == []

    async def test_async(self, engine: MemoryEngine) -> None:
        """ainvoke returns the same documents as invoke."""
        retriever = ManowarRetriever(engine=engine, scope=SCOPE, k=3)
        sync = retriever.invoke("coffee")
        assert [d.id for d in await retriever.ainvoke("coffee")] == [d.id for d in sync]

    def test_keyword_only_engine_says_so(self) -> None:
        """Without an embedder, documents come from the keyword lane and carry the degradation."""
        engine = MemoryEngine(store="sqlite:///:memory:", embedder=None)
        try:
            engine.remember(SCOPE, "The user collects vinyl records.")
            (doc,) = ManowarRetriever(engine=engine, scope=SCOPE).invoke("vinyl records")
            assert "vector lane disabled: no embedder configured" in doc.metadata["degradations"]
            assert doc.metadata["lanes"] == {"keyword": pytest.approx(doc.metadata["lanes"]["keyword"])}
        finally:
            engine.close()

    def test_scope_from_a_mapping(self, engine: MemoryEngine) -> None:
        """The scope may be given as a loose mapping with the reference aliases."""
        retriever = ManowarRetriever(engine=engine, scope={"agentWallet": "agent-r", "userAddress": "user-r"})
        assert retriever.scope == Scope(agent_wallet="agent-r", user_address="user-r")
        assert retriever.invoke("dark roast")
