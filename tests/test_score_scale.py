"""One score scale on every surface: relevance in [0, 1] (manowar_memory.candidates.relevance;
a vector's is (1 + cosine) / 2), which score_threshold compares with, and a stated reason when
fewer than k results come back."""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest

pytest.importorskip("langchain_core")
pytest.importorskip("llama_index.core")

from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from llama_index.core.schema import TextNode
from llama_index.core.vector_stores.types import VectorStoreQuery, VectorStoreQueryMode

from langchain_manowar import LangChainEmbedder, ManowarRetriever
from langchain_manowar import ManowarVectorStore as LCStore
from llama_index_manowar import ManowarRetriever as LIRetriever
from llama_index_manowar import ManowarVectorStore as LIStore
from manowar_memory import MemoryEngine, Scope

QUERY = "where is the harbour"
KEYWORD_DOC = "the harbour office opens at nine"  # shares 'harbour' with the query, orthogonal vector
VECTOR_DOC = "boats dock by the quay"  # no shared word, cosine 0.6 with the query
FAR_DOC = "a recipe for lentil soup"  # no shared word, cosine -0.6
VECTORS = {QUERY: [1.0, 0.0, 0.0], KEYWORD_DOC: [0.0, 1.0, 0.0], VECTOR_DOC: [0.6, 0.8, 0.0],
           FAR_DOC: [-0.6, 0.0, 0.8]}


class TableEmbeddings(Embeddings):
    """Vectors chosen per text, so cosines are known."""

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [VECTORS.get(t, [0.0, 0.0, 1.0]) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return VECTORS.get(text, [0.0, 0.0, 1.0])


@pytest.fixture(params=["sqlite", pytest.param("mongo", marks=pytest.mark.mongo)])
def engine(request: pytest.FixtureRequest) -> Iterator[MemoryEngine]:
    embedder = LangChainEmbedder(TableEmbeddings(), model="table")
    if request.param == "sqlite":
        eng = MemoryEngine(store="sqlite:///:memory:", embedder=embedder)
    else:
        from manowar_memory.stores.mongo import MongoStore

        db = request.getfixturevalue("mongo_store_db")
        eng = MemoryEngine(store=MongoStore(client=db.client, database=db.name), embedder=embedder)
    yield eng
    eng.close()


def _in_range(scores: list[float]) -> bool:
    return bool(scores) and all(isinstance(s, float) and math.isfinite(s) and 0.0 <= s <= 1.0 for s in scores)


def test_langchain_retriever_scores_are_relevance_and_the_threshold_keeps_close_vector_hits(
        engine: MemoryEngine) -> None:
    scope = Scope(agent_wallet="scores")
    LCStore(engine=engine, scope=scope).add_texts([KEYWORD_DOC, VECTOR_DOC, FAR_DOC])
    retriever = ManowarRetriever(engine=engine, scope=scope, layers=["vectors"], k=4, decay=False)
    docs = retriever.invoke(QUERY)
    assert _in_range([d.metadata["score"] for d in docs])
    by_text = {d.page_content: d.metadata["score"] for d in docs}
    assert by_text[VECTOR_DOC] == pytest.approx((1 + 0.6) / 2, abs=1e-3)
    kept = retriever.invoke(QUERY, score_threshold=0.75)
    assert {d.page_content for d in kept} == {KEYWORD_DOC, VECTOR_DOC}
    # fewer than k: the documents and the retriever say why
    assert retriever.last_shortfall is not None and "k=4" in retriever.last_shortfall
    assert all(d.metadata["shortfall"] == retriever.last_shortfall for d in kept)
    assert retriever.invoke(QUERY, k=1) and retriever.last_shortfall is None


def test_langchain_vector_store_scores_are_relevance(engine: MemoryEngine) -> None:
    store = LCStore(engine=engine, scope=Scope(agent_wallet="scores"))
    store.add_documents([Document(t) for t in (KEYWORD_DOC, VECTOR_DOC, FAR_DOC)])
    pairs = store.similarity_search_with_score(QUERY, k=3)
    assert _in_range([s for _, s in pairs])
    assert {d.page_content: s for d, s in pairs} == pytest.approx(
        {VECTOR_DOC: 0.8, KEYWORD_DOC: 0.5, FAR_DOC: 0.2}, abs=1e-3)
    assert [s for _, s in store.similarity_search_with_relevance_scores(QUERY, k=3)] == [s for _, s in pairs]
    kept = store.as_retriever(search_type="similarity_score_threshold",
                              search_kwargs={"score_threshold": 0.75, "k": 3}).invoke(QUERY)
    assert [d.page_content for d in kept] == [VECTOR_DOC]


@pytest.mark.parametrize("mode", [VectorStoreQueryMode.DEFAULT, VectorStoreQueryMode.HYBRID])
def test_llamaindex_vector_store_and_retriever_scores_are_relevance(engine: MemoryEngine,
                                                                    mode: VectorStoreQueryMode) -> None:
    store = LIStore(engine=engine, scope=Scope(agent_wallet="scores"), check_embed_model=False)
    store.add([TextNode(text=t) for t in (KEYWORD_DOC, VECTOR_DOC, FAR_DOC)])
    result = store.query(VectorStoreQuery(query_str=QUERY, similarity_top_k=5, mode=mode))
    assert _in_range(list(result.similarities or []))
    assert store.last_shortfall is not None and "k=5" in store.last_shortfall
    nodes = LIRetriever(engine=engine, scope=Scope(agent_wallet="scores"), layers=["vectors"]).retrieve(QUERY)
    assert _in_range([float(n.score or 0.0) for n in nodes])
