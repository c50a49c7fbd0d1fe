"""One filter table (tests/data/filters.json) through every surface that takes filters: the
LangChain retriever, the LangChain vector store and the LlamaIndex vector store, on SQLite and
MongoDB. Each filter must give the same documents everywhere, and the refused ones must raise
the library's FilterError naming the operator."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langchain_core")
pytest.importorskip("llama_index.core")

from langchain_core.documents import Document
from llama_index.core.schema import TextNode
from llama_index.core.vector_stores.types import (
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
    VectorStoreQuery,
)

from langchain_manowar import ManowarRetriever
from langchain_manowar import ManowarVectorStore as LCStore
from llama_index_manowar import ManowarVectorStore as LIStore
from manowar_memory import FilterError, MemoryEngine, Scope

TABLE = json.loads((Path(__file__).parent / "data" / "filters.json").read_text())
CASES = [pytest.param(c["filter"], c["ids"], id=json.dumps(c["filter"])) for c in TABLE["cases"]]
REFUSED = [pytest.param(c["filter"], c["names"], id=c["names"]) for c in TABLE["refused"]]
BY_TEXT = {d["text"]: d["id"] for d in TABLE["documents"]}
K = 20

_LI_OPS = {"$eq": FilterOperator.EQ, "$ne": FilterOperator.NE, "$in": FilterOperator.IN,
           "$nin": FilterOperator.NIN, "$gt": FilterOperator.GT, "$gte": FilterOperator.GTE,
           "$lt": FilterOperator.LT, "$lte": FilterOperator.LTE}


def _li_filters(flt: dict[str, Any], condition: FilterCondition = FilterCondition.AND) -> MetadataFilters:
    """The same filter written as LlamaIndex MetadataFilters."""
    items: list[MetadataFilter | MetadataFilters] = []
    for key, value in flt.items():
        if key in ("$and", "$or"):
            group = FilterCondition.AND if key == "$and" else FilterCondition.OR
            items.append(MetadataFilters(filters=[_li_filters(c) for c in value], condition=group))
        elif isinstance(value, dict):
            items.extend(MetadataFilter(key=key, value=v, operator=_LI_OPS[op]) for op, v in value.items())
        elif isinstance(value, list):
            items.append(MetadataFilter(key=key, value=value, operator=FilterOperator.IN))
        else:
            items.append(MetadataFilter(key=key, value=value, operator=FilterOperator.EQ))
    return MetadataFilters(filters=items, condition=condition)


@pytest.fixture
def surfaces(engine_on_each_store: MemoryEngine) -> dict[str, Any]:
    engine = engine_on_each_store
    lc_scope = Scope(agent_wallet="filters-lc")
    lc = LCStore(engine=engine, scope=lc_scope)
    lc.add_documents([Document(d["text"], id=d["id"], metadata=d["metadata"]) for d in TABLE["documents"]])
    li = LIStore(engine=engine, scope=Scope(agent_wallet="filters-li"))
    li.add([TextNode(id_=d["id"], text=d["text"], metadata=d["metadata"]) for d in TABLE["documents"]])
    retriever = ManowarRetriever(engine=engine, scope=lc_scope, layers=["vectors"], k=K, decay=False)
    return {"lc": lc, "li": li, "retriever": retriever}


def _ids(surfaces: dict[str, Any], flt: dict[str, Any]) -> dict[str, list[str]]:
    query = TABLE["query"]
    lc = surfaces["lc"].similarity_search(query, k=K, filter=flt)
    docs = surfaces["retriever"].invoke(query, filter=flt)
    li = surfaces["li"].query(VectorStoreQuery(query_str=query, similarity_top_k=K, filters=_li_filters(flt)))
    return {
        "langchain vector store": sorted(str(d.id) for d in lc),
        "langchain retriever": sorted(BY_TEXT[d.page_content] for d in docs),
        "llamaindex vector store": sorted(li.ids or []),
    }


@pytest.mark.parametrize("flt, expected", CASES)
def test_every_surface_gives_the_same_documents(surfaces: dict[str, Any], flt: dict[str, Any],
                                                expected: list[str]) -> None:
    assert _ids(surfaces, flt) == dict.fromkeys(
        ("langchain vector store", "langchain retriever", "llamaindex vector store"), sorted(expected))


@pytest.mark.parametrize("flt, operator", REFUSED)
def test_unsupported_operators_raise_the_root_error_naming_them(surfaces: dict[str, Any], flt: dict[str, Any],
                                                                operator: str) -> None:
    for call in (lambda: surfaces["lc"].similarity_search("report", filter=flt),
                 lambda: surfaces["retriever"].invoke("report", filter=flt)):
        with pytest.raises(FilterError) as info:
            call()
        assert operator in str(info.value)
        assert "$gte" in str(info.value)  # and says which operators exist


def test_llamaindex_operators_outside_the_language_name_the_supported_ones(surfaces: dict[str, Any]) -> None:
    flt = MetadataFilters(filters=[MetadataFilter(key="topic", value="bill", operator=FilterOperator.TEXT_MATCH)])
    with pytest.raises(FilterError) as info:
        surfaces["li"].query(VectorStoreQuery(query_str="report", similarity_top_k=3, filters=flt))
    assert "TEXT_MATCH" in str(info.value) and "GTE" in str(info.value)
