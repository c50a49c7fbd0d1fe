"""ManowarRetriever: engine search as a LlamaIndex retriever, alone and in a RetrieverQueryEngine."""

from __future__ import annotations

import pytest
from llama_index.core.llms import MockLLM
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.schema import MetadataMode, QueryBundle
from llama_index.core.vector_stores.types import FilterOperator, MetadataFilter, MetadataFilters

from llama_index_manowar import (
    ManowarDecayPostprocessor,
    ManowarMMRPostprocessor,
    ManowarPackerPostprocessor,
    ManowarRerankPostprocessor,
    ManowarRetriever,
    UnsupportedFilterError,
)
from manowar_memory import InvalidInputError, MemoryEngine, Scope
from manowar_memory.rerankers.fake import FakeReranker
from manowar_memory.scoped import DEFAULT_K
from manowar_memory.tools import memory_view

DAY_MS = 86_400_000


@pytest.fixture
def scope() -> Scope:
    return Scope(agent_wallet="agent-li", user_address="user-1", thread_id="t-1")


@pytest.fixture
def seeded(engine: MemoryEngine, scope: Scope) -> MemoryEngine:
    engine.remember(scope, "The user lives in Lisbon.", fact_type="context")
    engine.remember(scope, "The user prefers green tea over coffee.", fact_type="preference")
    engine.ingest(scope, [
        {"content": "Lisbon is the capital of Portugal, on the Tagus river.", "metadata": {"topic": "geo"}},
        {"content": "The Lisbon office opens at nine in the morning.", "metadata": {"topic": "office"}},
        {"content": "Green tea has less caffeine than coffee.", "metadata": {"topic": "food"}},
    ])
    return engine


def test_nodes_carry_the_shared_memory_view_schema(seeded: MemoryEngine, scope: Scope) -> None:
    """Each node is a memory: its id is the row id, and its metadata is memory_view's schema
    (id, layer, score, rank_score, created_at, trust, source, lanes), as the LangChain Documents'."""
    retriever = ManowarRetriever(engine=seeded, scope=scope, similarity_top_k=5)
    nodes = retriever.retrieve("Where does the user live?")
    assert nodes, "expected hits"
    fact = next(n for n in nodes if n.node.get_content() == "The user lives in Lisbon.")
    meta = fact.node.metadata
    assert set(meta) == {"id", "layer", "score", "rank_score", "created_at", "trust", "source", "lanes"}
    assert meta["id"] == fact.node.node_id and meta["layer"] == "graph" and meta["source"] == "fact"
    assert meta["score"] == pytest.approx(fact.score, abs=1e-6) and meta["trust"] == "learned"
    assert isinstance(meta["created_at"], int) and set(meta["lanes"]) <= {"keyword", "vector", "entity"}
    hit = seeded.scoped(scope).search("Where does the user live?", k=5).candidates[0]
    assert meta.keys() == memory_view(hit)["metadata"].keys()
    # metadata is for programs, not for the model: the LLM sees only the memory text
    assert fact.node.get_content(metadata_mode=MetadataMode.LLM) == "The user lives in Lisbon."
    assert [n.score for n in nodes] == sorted((n.score or 0.0 for n in nodes), reverse=True)
    explained = ManowarRetriever(engine=seeded, scope=scope, decisions=True).retrieve("Where does the user live?")
    assert "decay" in explained[0].node.metadata["decisions"]


def test_similarity_top_k_is_the_llamaindex_name_and_k_is_refused(seeded: MemoryEngine, scope: Scope) -> None:
    """LlamaIndex retrievers take similarity_top_k (default DEFAULT_K); k and other unknown
    keyword arguments raise instead of being ignored."""
    retriever = ManowarRetriever(engine=seeded, scope=scope)
    assert retriever.similarity_top_k == DEFAULT_K == 4
    assert len(retriever.retrieve("Lisbon tea coffee office capital")) == DEFAULT_K
    assert len(ManowarRetriever(engine=seeded, scope=scope, similarity_top_k=2).retrieve("Lisbon")) == 2
    with pytest.raises(TypeError, match="similarity_top_k"):
        ManowarRetriever(engine=seeded, scope=scope, k=2)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="unknown argument"):
        ManowarRetriever(engine=seeded, scope=scope, search_kwargs={"k": 2})  # type: ignore[call-arg]


def test_layers_k_and_filters_narrow_the_search(seeded: MemoryEngine, scope: Scope) -> None:
    """Layer selection, k and both filter forms (engine mapping, MetadataFilters) apply."""
    only_vectors = ManowarRetriever(engine=seeded, scope=scope, layers=["vectors"], similarity_top_k=10).retrieve("Lisbon")
    assert only_vectors and {n.node.metadata["layer"] for n in only_vectors} == {"vectors"}
    assert len(ManowarRetriever(engine=seeded, scope=scope, layers=["vectors"], similarity_top_k=1).retrieve("Lisbon")) == 1
    by_mapping = ManowarRetriever(engine=seeded, scope=scope, layers=["vectors"], filters={"metadata.topic": "office"})
    office = [n.node.get_content() for n in by_mapping.retrieve("Lisbon")]
    assert office == ["The Lisbon office opens at nine in the morning."]
    by_li = ManowarRetriever(
        engine=seeded, scope=scope, layers=["vectors"],
        filters=MetadataFilters(filters=[MetadataFilter(key="topic", value=["geo", "food"], operator=FilterOperator.IN)]),
    )
    texts = [n.node.get_content() for n in by_li.retrieve("Lisbon tea coffee")]
    assert texts and set(texts) <= {"Lisbon is the capital of Portugal, on the Tagus river.",
                                    "Green tea has less caffeine than coffee."}
    nothing = ManowarRetriever(
        engine=seeded, scope=scope,
        filters=MetadataFilters(filters=[MetadataFilter(key="topic", value=[], operator=FilterOperator.IN)]),
    )
    assert nothing.retrieve("Lisbon") == []


def test_scope_isolates_users(seeded: MemoryEngine) -> None:
    """Another user of the same agent does not see user-1's facts."""
    other = Scope(agent_wallet="agent-li", user_address="user-2")
    nodes = ManowarRetriever(engine=seeded, scope=other, layers=["graph"]).retrieve("Where does the user live?")
    assert nodes == []


async def test_async_retrieve_matches_sync(seeded: MemoryEngine, scope: Scope) -> None:
    """aretrieve runs the engine's async search and gives the same memories."""
    retriever = ManowarRetriever(engine=seeded, scope=scope, similarity_top_k=5)
    sync_ids = [n.node.node_id for n in retriever.retrieve("green tea")]
    async_ids = [n.node.node_id for n in await retriever.aretrieve(QueryBundle("green tea"))]
    assert async_ids == sync_ids and async_ids


def test_degradations_are_reported_on_nodes(seeded: MemoryEngine, scope: Scope) -> None:
    """Asking for rerank on an engine without a reranker is reported, not hidden."""
    retriever = ManowarRetriever(engine=seeded, scope=scope, rerank=True)
    nodes = retriever.retrieve("Where does the user live?")
    assert "rerank skipped: no reranker configured" in retriever.last_degradations
    assert nodes


def test_bad_options_fail_clearly(engine: MemoryEngine, scope: Scope) -> None:
    """Wrong k, layers, engine or filters raise at construction with a useful message."""
    with pytest.raises(InvalidInputError, match="similarity_top_k must be a positive integer"):
        ManowarRetriever(engine=engine, scope=scope, similarity_top_k=0)
    with pytest.raises(InvalidInputError, match="unknown layer"):
        ManowarRetriever(engine=engine, scope=scope, layers=["nope"])
    with pytest.raises(InvalidInputError, match="MemoryEngine"):
        ManowarRetriever(engine=object(), scope=scope)  # type: ignore[arg-type]
    with pytest.raises(UnsupportedFilterError):
        ManowarRetriever(engine=engine, scope=scope, filters=MetadataFilters(
            filters=[MetadataFilter(key="a", value="x", operator=FilterOperator.TEXT_MATCH)]))
    with pytest.raises(InvalidInputError, match="not allowed"):
        ManowarRetriever(engine=engine, scope=scope, filters={"content": "x"})
    # a loose scope mapping is normalised like everywhere in the engine
    assert ManowarRetriever(engine=engine, scope={"agentWallet": "a", "userAddress": "u"}).scope == Scope("a", "u")


def test_query_engine_with_retriever_and_all_postprocessors(seeded: MemoryEngine, scope: Scope) -> None:
    """End to end, offline: RetrieverQueryEngine(ManowarRetriever + decay, rerank, MMR, packer, MockLLM)."""
    old = seeded.ingest(scope, [{"content": "The user lived in Porto years ago.",
                                 "created_at": 1_600_000_000_000}])[0]
    retriever = ManowarRetriever(engine=seeded, scope=scope, similarity_top_k=8, decay=False)
    decay = ManowarDecayPostprocessor(engine=seeded, scope=scope)
    rerank = ManowarRerankPostprocessor(engine=seeded, scope=scope, reranker=FakeReranker(), dominance_delta=1.0)
    mmr = ManowarMMRPostprocessor(engine=seeded, scope=scope)
    packer = ManowarPackerPostprocessor(engine=seeded, scope=scope, budget_chars=400, max_items=4)
    query_engine = RetrieverQueryEngine.from_args(
        retriever, llm=MockLLM(), node_postprocessors=[decay, rerank, mmr, packer],
    )
    response = query_engine.query("Where does the user live?")

    # MockLLM echoes its prompt: the packed memories reached the model
    assert "The user lives in Lisbon." in str(response)
    sources = response.source_nodes
    assert 1 <= len(sources) <= 4
    for nws in sources:
        trace = nws.node.metadata["manowar_trace"]
        assert {"decay", "rerank_status", "mmr_rank", "pack_rank", "pack_score"} <= set(trace)
        assert trace["rerank_status"] == "reranked"
    assert [n.node.metadata["manowar_trace"]["pack_rank"] for n in sources] == list(range(len(sources)))
    # the packer kept what fits: its prompt and the packed node texts are within the budget
    result = packer.last_result
    assert result is not None and result.context_usage.characters <= 400
    assert sum(item.characters for item in result.items) <= 400
    assert all(n.node.get_content().startswith("<<<UNTRUSTED_") for n in sources)
    kept = {d.id for d in result.decisions if d.status == "kept"}
    assert kept == {n.node.node_id for n in sources}
    # decay on its own: the 2020 row keeps only the floor (0.35) of its score and drops to last
    before = retriever.retrieve("Where does the user live?")
    decayed = decay.postprocess_nodes(before, query_str="x")
    multipliers = {n.node.metadata["id"]: n.node.metadata["manowar_trace"]["decay"] for n in decayed}
    assert multipliers[old] == pytest.approx(0.35)
    assert all(v > 0.99 for k, v in multipliers.items() if k != old)
    before_ids = [n.node.node_id for n in before]
    after_ids = [n.node.node_id for n in decayed]
    assert after_ids.index(old) >= before_ids.index(old)  # decay can only demote the old row
    old_before = next(n.score for n in before if n.node.node_id == old)
    old_after = next(n.score for n in decayed if n.node.node_id == old)
    assert old_after == pytest.approx(old_before * 0.35)


async def test_query_engine_async(seeded: MemoryEngine, scope: Scope) -> None:
    """aquery runs the async retriever and async postprocessors."""
    query_engine = RetrieverQueryEngine.from_args(
        ManowarRetriever(engine=seeded, scope=scope), llm=MockLLM(),
        node_postprocessors=[ManowarPackerPostprocessor(engine=seeded, scope=scope)],
    )
    response = await query_engine.aquery("What does the user drink?")
    assert "green tea" in str(response).lower()
    assert all("pack_rank" in n.node.metadata["manowar_trace"] for n in response.source_nodes)
