"""One LlamaIndex retriever or vector store for every user of an app: the user is chosen per call
(``user_id=``) only on objects built for it; a user-bound one refuses another user."""

from __future__ import annotations

import pytest
from llama_index.core.schema import TextNode
from llama_index.core.vector_stores.types import VectorStoreQuery

from llama_index_manowar import ManowarRetriever, ManowarVectorStore
from manowar_memory import MemoryEngine, Scope, ScopeError

APP = Scope(agent_wallet="app")
ANA = Scope(agent_wallet="app", user_address="ana")


def _texts(nodes: list) -> str:
    return " ".join(n.node.get_content() for n in nodes)


@pytest.fixture
def two_users(engine: MemoryEngine) -> MemoryEngine:
    for user, text in (("ana", "ana's locker code is 4512"), ("bob", "bob's locker code is 9087")):
        engine.scoped(Scope(agent_wallet="app", user_address=user)).remember(text)
    return engine


async def test_one_retriever_two_users(two_users: MemoryEngine) -> None:
    retriever = ManowarRetriever(engine=two_users, scope=APP, per_call_user=True)
    ana = _texts(retriever.retrieve("locker code", user_id="ana"))
    bob = _texts(await retriever.aretrieve("locker code", user_id="bob"))
    assert "4512" in ana and "9087" not in ana
    assert "9087" in bob and "4512" not in bob
    with pytest.raises(ScopeError, match="names none"):
        retriever.retrieve("locker code")


def test_a_bound_retriever_refuses_a_redirect(two_users: MemoryEngine) -> None:
    bound = ManowarRetriever(engine=two_users, scope=ANA)
    with pytest.raises(ScopeError, match="bound to user 'ana'"):
        bound.retrieve("locker code", user_id="bob")
    assert "4512" in _texts(bound.retrieve("locker code", user_id="ana"))
    with pytest.raises(ScopeError, match="per_call_user"):
        ManowarRetriever(engine=two_users, scope=APP).retrieve("locker code", user_id="bob")
    with pytest.raises(ScopeError, match="agent-level"):
        ManowarRetriever(engine=two_users, scope=ANA, per_call_user=True)


def test_one_vector_store_two_users(engine: MemoryEngine) -> None:
    store = ManowarVectorStore(engine=engine, scope=APP, per_call_user=True)
    store.add([TextNode(id_="n1", text="ana's visa expires in May")], user_id="ana")
    store.add([TextNode(id_="n1", text="bob's visa expires in June")], user_id="bob")
    query = VectorStoreQuery(query_str="visa expires", similarity_top_k=5)
    assert [n.get_content() for n in store.query(query, user_id="ana").nodes or []] == ["ana's visa expires in May"]
    assert [n.get_content() for n in store.get_nodes(["n1"], user_id="bob")] == ["bob's visa expires in June"]
    with pytest.raises(ScopeError, match="names none"):
        store.query(query)
    store.delete_nodes(["n1"], user_id="bob")
    assert store.get_nodes(["n1"], user_id="bob") == [] and store.get_nodes(["n1"], user_id="ana") != []
    bound = ManowarVectorStore(engine=engine, scope=ANA)
    with pytest.raises(ScopeError, match="bound to user 'ana'"):
        bound.query(query, user_id="bob")
    with pytest.raises(ScopeError, match="agent-level"):
        ManowarVectorStore(engine=engine, scope=ANA, per_call_user=True)
