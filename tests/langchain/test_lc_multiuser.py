"""One app, many users: one ManowarStore, one create_agent with the middleware and one retriever
serve every user, with the user chosen per run (runtime.context / configurable) or per call."""

from __future__ import annotations

import random
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.tools import ToolRuntime
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool

from langchain_manowar import ManowarChatMessageHistory, ManowarMemoryMiddleware, ManowarRetriever, ManowarStore
from langchain_manowar.testing import MemoryEchoChatModel
from llama_index_manowar import ManowarRetriever as LIRetriever
from manowar_memory import MemoryConfig, MemoryEngine, Scope, ScopeError

APP = Scope(agent_wallet="app")
# create_agent serialises the run's context through a schema typed for no context; the run is unaffected
pytestmark = pytest.mark.filterwarnings("ignore:Pydantic serializer warnings:UserWarning")


@pytest.fixture
def engine() -> Iterator[MemoryEngine]:
    engine = MemoryEngine(store="sqlite:///:memory:", embedder="fake")
    yield engine
    engine.close()


def _user(ctx: Any, config: Any) -> str:
    """The run's user as an app's tool reads it: runtime.context first, then configurable."""
    user = getattr(ctx, "user_id", None) or (config.get("configurable") or {}).get("user_id")
    assert user, "the run names no user"
    return str(user)


@tool
def save_memory(text: str, runtime: ToolRuntime) -> str:
    """Save a memory in the LangGraph store under ("memories", user_id)."""
    assert runtime.store is not None
    runtime.store.put(("memories", _user(runtime.context, runtime.config)), uuid.uuid4().hex, {"text": text})
    return "saved"


class RememberOrEcho(MemoryEchoChatModel):
    """``Remember: <text>`` calls ``save_memory(text)``; after a tool result it says ``Saved.``;
    anything else gets :class:`MemoryEchoChatModel`'s answer from the memory context."""

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: Any = None, **kwargs: Any) -> ChatResult:
        self.calls.append(list(messages))
        last = messages[-1]
        if isinstance(last, ToolMessage):
            reply = AIMessage(content="Saved.")
        elif isinstance(last, HumanMessage) and str(last.content).startswith("Remember: "):
            reply = AIMessage(content="", tool_calls=[{"name": "save_memory", "id": uuid.uuid4().hex,
                                                        "args": {"text": str(last.content)[10:]}}])
        else:
            reply = AIMessage(content=self.answer(messages))
        return ChatResult(generations=[ChatGeneration(message=reply)])


@dataclass
class Ctx:
    user_id: str | None = None
    thread_id: str | None = None


def _system(model: MemoryEchoChatModel) -> str:
    system = model.calls[-1][0]
    return str(system.content) if isinstance(system, SystemMessage) else ""


# ---------------------------------------------------------------- the findings of issue 27


class TestOneStoreManyUsers:
    def test_a_users_item_is_never_recalled_in_another_users_context(self, engine: MemoryEngine) -> None:
        """LangGraph's idiom, one store for the app and ("memories", user_id) per user: bob's item
        reaches bob's recall and never ana's (it used to land in the agent's shared space)."""
        store = ManowarStore(engine=engine, scope=APP, index={"fields": ["text"]})
        store.put(("memories", "ana"), "m1", {"text": "ana's bank pin is 1111"})
        store.put(("memories", "bob"), "m1", {"text": "bob's bank pin is 2222"})
        ana = engine.scoped(Scope(agent_wallet="app", user_address="ana")).context("what is my bank pin").prompt
        bob = engine.scoped(Scope(agent_wallet="app", user_address="bob")).context("what is my bank pin").prompt
        assert "1111" in ana and "2222" not in ana
        assert "2222" in bob and "1111" not in bob
        assert engine.scoped(APP).context("what is my bank pin").prompt == ""  # nothing was shared
        assert [i.value["text"] for i in store.search(("memories", "bob"), query="bank pin")] == [
            "bob's bank pin is 2222"]

    def test_shared_namespaces_are_shared_only_when_the_application_says_so(self, engine: MemoryEngine) -> None:
        store = ManowarStore(engine=engine, scope=APP, shared_namespaces=[("docs",)])
        store.put(("docs",), "hours", {"text": "the office opens at nine"})
        with pytest.raises(ScopeError, match="names no user"):
            store.put(("notes",), "n1", {"text": "whose note is this"})
        for user in ("ana", "bob"):
            assert "opens at nine" in engine.scoped(Scope(agent_wallet="app", user_address=user)).context(
                "when does the office open").prompt
        assert store.get(("docs",), "hours") is not None and store.get(("memories", "ana"), "hours") is None

    def test_a_batch_with_a_namespace_naming_no_user_writes_nothing(self, engine: MemoryEngine) -> None:
        from langgraph.store.base import PutOp

        store = ManowarStore(engine=engine, scope=APP)
        with pytest.raises(ScopeError, match="names no user"):
            store.batch([PutOp(("memories", "ana"), "k", {"text": "kept?"}), PutOp(("memories",), "k", {"t": 1})])
        assert store.get(("memories", "ana"), "k") is None

    def test_searches_and_listings_must_name_the_user(self, engine: MemoryEngine) -> None:
        store = ManowarStore(engine=engine, scope=APP)
        store.put(("memories", "ana", "prefs"), "k", {"text": "tea"})
        store.put(("memories", "bob", "prefs"), "k", {"text": "coffee"})
        with pytest.raises(ScopeError):
            store.search(("memories",))
        with pytest.raises(ScopeError):
            store.search(("memories", "*"))
        with pytest.raises(ScopeError):
            store.list_namespaces()
        assert store.list_namespaces(prefix=("memories", "ana")) == [("memories", "ana", "prefs")]
        assert [i.value for i in store.search(("memories", "bob"))] == [{"text": "coffee"}]
        with pytest.raises(ScopeError, match="blank"):
            store.put(("memories", "  "), "k", {"text": "nobody"})

    def test_namespace_scope_maps_other_layouts(self, engine: MemoryEngine) -> None:
        """(user_id, "memories") with a namespace_scope callable; None marks a shared namespace."""

        def owner(namespace: tuple[str, ...]) -> str | None:
            return None if namespace[:1] == ("shared",) else namespace[0]

        store = ManowarStore(engine=engine, scope=APP, namespace_scope=owner)
        store.put(("ana", "memories"), "k", {"text": "ana likes jazz"})
        store.put(("shared", "faq"), "k", {"text": "jazz night is on friday"})
        bob = engine.scoped(Scope(agent_wallet="app", user_address="bob")).context("jazz").prompt
        assert "friday" in bob and "ana likes" not in bob
        other_agent = ManowarStore(engine=engine, scope=APP, namespace_scope=lambda ns: Scope(agent_wallet="x"))
        with pytest.raises(ScopeError, match="one agent"):
            other_agent.put(("a",), "k", {"v": 1})

    def test_a_user_bound_store_cannot_be_mapped_to_other_users(self, engine: MemoryEngine) -> None:
        ana = Scope(agent_wallet="app", user_address="ana")
        with pytest.raises(ScopeError, match="bound to one user"):
            ManowarStore(engine=engine, scope=ana, namespace_scope=lambda ns: ns[-1])
        with pytest.raises(ScopeError, match="shared space"):
            ManowarStore(engine=engine, scope=ana, shared_namespaces=[("docs",)])
        store = ManowarStore(engine=engine, scope=ana)
        store.put(("memories", "bob"), "k", {"text": "written by ana's store"})
        assert len(engine.list_items(ana)) == 1
        assert engine.list_items(Scope(agent_wallet="app", user_address="bob")) == []


class TestMiddlewarePerRun:
    def test_scope_resolver_keeps_the_runs_thread(self, engine: MemoryEngine) -> None:
        """A resolver that names only the user keeps configurable.thread_id (it used to lose it, and
        after_model raised ScopeError once the model had answered)."""
        mw = ManowarMemoryMiddleware(
            engine=engine, scope=APP,
            scope_resolver=lambda rt: Scope(agent_wallet="app", user_address=rt.context.user_id))
        agent = create_agent(MemoryEchoChatModel(), middleware=[mw], context_schema=Ctx)
        out = agent.invoke({"messages": [{"role": "user", "content": "I keep bees."}]},
                           {"configurable": {"thread_id": "t-1"}}, context=Ctx(user_id="ana"))
        assert out["messages"][-1].content == "I don't know."
        msgs = ManowarChatMessageHistory(engine=engine, scope=Scope(agent_wallet="app", user_address="ana",
                                                                    thread_id="t-1")).messages
        assert [m.content for m in msgs] == ["I keep bees.", "I don't know."]

    def test_a_run_without_a_thread_fails_before_the_model(self, engine: MemoryEngine) -> None:
        model = MemoryEchoChatModel()
        mw = ManowarMemoryMiddleware(engine=engine, scope=Scope(agent_wallet="app", user_address="ana"))
        agent = create_agent(model, middleware=[mw])
        with pytest.raises(ScopeError, match=r"configurable\.thread_id"):
            agent.invoke({"messages": [{"role": "user", "content": "Hello there."}]})
        assert model.calls == []  # no answer was produced, so none was lost

    async def test_an_async_run_without_a_thread_fails_before_the_model(self, engine: MemoryEngine) -> None:
        model = MemoryEchoChatModel()
        agent = create_agent(model, middleware=[ManowarMemoryMiddleware(engine=engine, scope=APP)])
        with pytest.raises(ScopeError, match=r"configurable\.thread_id"):
            await agent.ainvoke({"messages": [{"role": "user", "content": "Hello."}]},
                                {"configurable": {"user_id": "ana"}})
        assert model.calls == []

    def test_default_thread_records_runs_without_one(self, engine: MemoryEngine) -> None:
        mw = ManowarMemoryMiddleware(engine=engine, scope=APP, default_thread="main")
        agent = create_agent(MemoryEchoChatModel(), middleware=[mw])
        agent.invoke({"messages": [{"role": "user", "content": "I like figs."}]}, {"configurable": {"user_id": "ana"}})
        scope = Scope(agent_wallet="app", user_address="ana", thread_id="main")
        assert ManowarChatMessageHistory(engine=engine, scope=scope).messages[0].content == "I like figs."

    def test_the_user_comes_from_the_run_and_context_wins(self, engine: MemoryEngine) -> None:
        agent = create_agent(MemoryEchoChatModel(), middleware=[ManowarMemoryMiddleware(engine=engine, scope=APP)],
                             context_schema=Ctx)
        agent.invoke({"messages": [{"role": "user", "content": "My cat is Tom."}]},
                     {"configurable": {"user_id": "bob", "thread_id": "t"}}, context=Ctx(user_id="ana"))
        agent.invoke({"messages": [{"role": "user", "content": "My dog is Rex."}]},
                     {"configurable": {"user_id": "bob", "thread_id": "t"}}, context=Ctx(thread_id="t2"))

        def said(user: str, thread: str) -> list[str]:
            scope = Scope(agent_wallet="app", user_address=user, thread_id=thread)
            return [str(m.content) for m in ManowarChatMessageHistory(engine=engine, scope=scope).messages][:1]

        assert said("ana", "t") == ["My cat is Tom."] and said("bob", "t") == []
        assert said("bob", "t2") == ["My dog is Rex."]

    def test_a_run_without_a_user_fails_unless_the_application_allows_it(self, engine: MemoryEngine) -> None:
        model = MemoryEchoChatModel()
        agent = create_agent(model, middleware=[ManowarMemoryMiddleware(engine=engine, scope=APP)])
        with pytest.raises(ScopeError, match=r"configurable\.user_id"):
            agent.invoke({"messages": [{"role": "user", "content": "Hi."}]}, {"configurable": {"thread_id": "t"}})
        assert model.calls == []
        # allowing user-less turns in the adapter is not enough: the engine must be single-tenant, and
        # a multi-tenant engine's refusal still comes before the model
        shared = create_agent(model, middleware=[ManowarMemoryMiddleware(engine=engine, scope=APP,
                                                                         allow_no_user=True)])
        with pytest.raises(ScopeError, match="single_tenant"):
            shared.invoke({"messages": [{"role": "user", "content": "Hi."}]}, {"configurable": {"thread_id": "t"}})
        assert model.calls == []
        solo = MemoryEngine(store="sqlite:///:memory:", embedder="fake", config=MemoryConfig(single_tenant=True))
        try:
            shared = create_agent(model, middleware=[ManowarMemoryMiddleware(engine=solo, scope=APP,
                                                                             allow_no_user=True)])
            shared.invoke({"messages": [{"role": "user", "content": "Hi."}]}, {"configurable": {"thread_id": "t"}})
            assert len(model.calls) == 1
        finally:
            solo.close()

    def test_a_user_bound_middleware_refuses_another_runs_user(self, engine: MemoryEngine) -> None:
        model = MemoryEchoChatModel()
        mw = ManowarMemoryMiddleware(engine=engine, scope=Scope(agent_wallet="app", user_address="ana"))
        agent = create_agent(model, middleware=[mw])
        with pytest.raises(ScopeError, match="bound to user 'ana'"):
            agent.invoke({"messages": [{"role": "user", "content": "Hi."}]},
                         {"configurable": {"user_id": "bob", "thread_id": "t"}})
        assert model.calls == []
        agent.invoke({"messages": [{"role": "user", "content": "Hi."}]},
                     {"configurable": {"user_id": "ana", "thread_id": "t"}})
        assert len(model.calls) == 1


class TestRetrieversPerCall:
    @pytest.fixture
    def two_users(self, engine: MemoryEngine) -> MemoryEngine:
        for user, text in (("ana", "ana's locker code is 4512"), ("bob", "bob's locker code is 9087")):
            engine.scoped(Scope(agent_wallet="app", user_address=user)).remember(text)
        engine.scoped(APP).remember("the lockers are on floor two")
        return engine

    @staticmethod
    def _texts(docs: Any) -> str:
        return " ".join(getattr(d, "page_content", None) or d.node.get_content() for d in docs)

    async def test_one_langchain_retriever_two_users(self, two_users: MemoryEngine) -> None:
        retriever = ManowarRetriever(engine=two_users, scope=APP, per_call_user=True)
        ana = self._texts(retriever.invoke("locker code", config={"configurable": {"user_id": "ana"}}))
        bob = self._texts(retriever.invoke("locker code", user_id="bob"))
        bob_async = self._texts(await retriever.ainvoke("locker code", config={"configurable": {"user_id": "bob"}}))
        assert "4512" in ana and "9087" not in ana and "floor two" in ana
        assert "9087" in bob and "4512" not in bob and bob == bob_async
        with pytest.raises(ScopeError, match="names none"):
            retriever.invoke("locker code")
        with pytest.raises(ScopeError, match="non-blank"):
            retriever.invoke("locker code", user_id=" ")

    def test_a_retriever_tool_in_an_agent_follows_the_runs_user(self, two_users: MemoryEngine) -> None:
        """create_retriever_tool over one per_call_user retriever: the tool's search reads the
        user of the agent run (configurable.user_id reaches it through the run's config)."""
        from langchain_core.tools import create_retriever_tool

        from langchain_manowar.testing import ScriptedToolChatModel

        retriever = ManowarRetriever(engine=two_users, scope=APP, per_call_user=True)
        lookup = create_retriever_tool(retriever, "lookup", "Look up the user's memories.")
        for user, mine, theirs in (("ana", "4512", "9087"), ("bob", "9087", "4512")):
            model = ScriptedToolChatModel(messages=iter([
                AIMessage(content="", tool_calls=[{"name": "lookup", "id": "l1", "args": {"query": "locker code"}}]),
                AIMessage(content="Done."),
            ]))
            out = create_agent(model, tools=[lookup]).invoke(
                {"messages": [{"role": "user", "content": "What is my locker code?"}]},
                {"configurable": {"user_id": user}})
            found = str(out["messages"][2].content)
            assert mine in found and theirs not in found

    def test_a_bound_langchain_retriever_refuses_a_redirect(self, two_users: MemoryEngine) -> None:
        ana = Scope(agent_wallet="app", user_address="ana")
        retriever = ManowarRetriever(engine=two_users, scope=ana)
        with pytest.raises(ScopeError, match="bound to user 'ana'"):
            retriever.invoke("locker code", config={"configurable": {"user_id": "bob"}})
        with pytest.raises(ScopeError, match="bound to user 'ana'"):
            retriever.invoke("locker code", user_id="bob")
        assert "4512" in self._texts(retriever.invoke("locker code", config={"configurable": {"user_id": "ana"}}))
        with pytest.raises(ScopeError, match="agent-level"):
            ManowarRetriever(engine=two_users, scope=ana, per_call_user=True)

    def test_a_shared_langchain_retriever_reads_shared_rows_only(self, two_users: MemoryEngine) -> None:
        retriever = ManowarRetriever(engine=two_users, scope=APP)
        inside_a_run = self._texts(retriever.invoke("locker code", config={"configurable": {"user_id": "ana"}}))
        assert "floor two" in inside_a_run and "4512" not in inside_a_run
        with pytest.raises(ScopeError, match="per_call_user"):
            retriever.invoke("locker code", user_id="ana")


class TestVectorStoreAndToolsPerCall:
    def test_one_vector_store_two_users(self, engine: MemoryEngine) -> None:
        from langchain_core.documents import Document

        from langchain_manowar import ManowarVectorStore

        store = ManowarVectorStore(engine=engine, scope=APP, per_call_user=True)
        store.add_documents([Document("ana's passport number is P-111", id="doc")], user_id="ana")
        store.add_texts(["bob's passport number is P-222"], ids=["doc"], user_id="bob")
        ana = [d.page_content for d in store.similarity_search("passport number", user_id="ana")]
        bob = [d.page_content for d in store.as_retriever().invoke("passport number", user_id="bob")]
        assert ana == ["ana's passport number is P-111"] and bob == ["bob's passport number is P-222"]
        assert [d.page_content for d in store.get_by_ids(["doc"], user_id="bob")] == bob
        with pytest.raises(ScopeError, match="names none"):
            store.similarity_search("passport number")
        store.delete(["doc"], user_id="ana")
        assert store.get_by_ids(["doc"], user_id="ana") == [] and store.get_by_ids(["doc"], user_id="bob") != []
        bound = ManowarVectorStore(engine=engine, scope=Scope(agent_wallet="app", user_address="bob"))
        with pytest.raises(ScopeError, match="bound to user 'bob'"):
            bound.similarity_search("passport number", user_id="ana")
        with pytest.raises(ScopeError, match="agent-level"):
            ManowarVectorStore(engine=engine, scope=Scope(agent_wallet="app", user_address="bob"), per_call_user=True)

    def test_one_set_of_tools_acts_for_each_runs_user(self, engine: MemoryEngine) -> None:
        import json

        from langchain_manowar import ManowarToolkit

        tools = {t.name: t for t in ManowarToolkit(engine=engine, scope=APP, per_call_user=True).get_tools()}
        for user in ("ana", "bob"):
            tools["memory_remember"].invoke({"content": f"{user}'s gym locker is number {len(user) * 7}"},
                                            config={"configurable": {"user_id": user}})
        found = json.loads(tools["memory_search"].invoke({"query": "gym locker"},
                                                         config={"configurable": {"user_id": "bob"}}))
        assert "bob's gym locker" in str(found) and "ana's" not in str(found)
        missing = tools["memory_search"].invoke({"name": "memory_search", "args": {"query": "gym"}, "id": "c",
                                                 "type": "tool_call"})
        assert missing.status == "error" and "ScopeError" in missing.content
        bound = {t.name: t for t in ManowarToolkit(engine=engine, scope=Scope(agent_wallet="app",
                                                                              user_address="ana")).get_tools()}
        redirected = bound["memory_search"].invoke({"name": "memory_search", "args": {"query": "gym"}, "id": "c",
                                                    "type": "tool_call"},
                                                   config={"configurable": {"user_id": "bob"}})
        assert redirected.status == "error" and "bound to user 'ana'" in redirected.content

    def test_middleware_tools_follow_the_runs_user(self, engine: MemoryEngine) -> None:
        from langchain_manowar.testing import ScriptedToolChatModel

        model = ScriptedToolChatModel(messages=iter([
            AIMessage(content="", tool_calls=[{"name": "memory_remember", "id": "c1",
                                               "args": {"content": "The user's bike lock code is 8642."}}]),
            AIMessage(content="Saved."),
        ]))
        mw = ManowarMemoryMiddleware(engine=engine, scope=APP, tools=["memory_remember"], record=False)
        create_agent(model, middleware=[mw], context_schema=Ctx).invoke(
            {"messages": [{"role": "user", "content": "Remember my bike lock code is 8642."}]},
            context=Ctx(user_id="ana"))
        assert [r.content for r in engine.list_items(Scope(agent_wallet="app", user_address="ana"))] == [
            "The user's bike lock code is 8642."]
        assert engine.list_items(APP) == []


# ---------------------------------------------------------------- a multi-user app


def _user_ids(n: int, seed: int = 27) -> list[str]:
    """``n`` distinct ids: case and Unicode variants of a few names, then seeded random ones."""
    base = ["ana", "Ana", "ANA", "bob", "Bob", "zoë", "Zoë", "ZOË", "ünal", "Ünal", "用户七", "用户八", "Ωmega",
            "ωmega", "user 1", "user-1", "user_1", "ﬁle", "file", "Straße", "STRASSE", "e\u0301", "\u00e9"]
    rng = random.Random(seed)
    alphabet = "abcXYZ019 -_ñÅλЖ中"
    out = list(dict.fromkeys(base))
    while len(out) < n:
        candidate = "".join(rng.choice(alphabet) for _ in range(rng.randint(3, 10))).strip()
        if candidate and candidate not in out:
            out.append(candidate)
    return out[:n]


TOKEN = re.compile(r"zq[0-9a-f]{10}")


def test_one_app_serves_many_users_without_leaks_or_lost_writes(engine_on_each_store: MemoryEngine) -> None:
    """One store, one agent with the middleware, one retriever per framework; 50 users each save a
    secret through the agent's store tool and say another in a turn, then read through every surface."""
    engine = engine_on_each_store
    store = ManowarStore(engine=engine, scope=APP, index={"fields": ["text"]})
    model = RememberOrEcho()
    agent = create_agent(model, tools=[save_memory], store=store, context_schema=Ctx,
                         middleware=[ManowarMemoryMiddleware(engine=engine, scope=APP)])
    lc_retriever = ManowarRetriever(engine=engine, scope=APP, per_call_user=True, k=20,
                                    layers=("scene", "graph", "vectors"))
    li_retriever = LIRetriever(engine=engine, scope=APP, per_call_user=True, similarity_top_k=20,
                               layers=("scene", "graph", "vectors"))
    users = _user_ids(50)
    rng = random.Random(2027)
    secrets: dict[str, tuple[str, str]] = {u: (f"zq{rng.getrandbits(40):010x}", f"zq{rng.getrandbits(40):010x}")
                                           for u in users}
    owner = {token: u for u, pair in secrets.items() for token in pair}

    def run(i: int, user: str, text: str) -> dict[str, Any]:
        config: dict[str, Any] = {"configurable": {"thread_id": f"t{i}"}}
        if i % 2:  # half the runs name the user in configurable, half in the typed context
            config["configurable"]["user_id"] = user
            return agent.invoke({"messages": [{"role": "user", "content": text}]}, config)
        return agent.invoke({"messages": [{"role": "user", "content": text}]}, config, context=Ctx(user_id=user))

    for i, user in enumerate(users):
        stored, said = secrets[user]
        assert run(i, user, f"Remember: my vault secret is {stored}")["messages"][-1].content == "Saved."
        run(i, user, f"My locker secret is {said}.")

    leaks: list[tuple[str, str, str]] = []
    lost: list[tuple[str, str]] = []
    for i, user in enumerate(users):
        stored, said = secrets[user]
        seen: dict[str, str] = {}
        run(i, user, "What is my vault secret?")
        seen["agent context"] = _system(model)
        seen["store search"] = " ".join(str(x.value) for x in store.search(("memories", user), query="vault secret"))
        seen["store listing"] = " ".join(str(x.value) for x in store.search(("memories", user), limit=100))
        seen["lc retriever"] = " ".join(d.page_content for d in lc_retriever.invoke(
            "secret", config={"configurable": {"user_id": user}}))
        seen["li retriever"] = " ".join(n.node.get_content() for n in li_retriever.retrieve("secret", user_id=user))
        for surface, text in seen.items():
            leaks += [(user, surface, owner[t]) for t in TOKEN.findall(text) if owner.get(t, user) != user]
        for surface, token in (("agent context", stored), ("store search", stored), ("store listing", stored),
                               ("lc retriever", stored), ("lc retriever", said), ("li retriever", said)):
            if token not in seen[surface]:
                lost.append((user, surface))
    assert leaks == []
    assert lost == []
    assert engine.scoped(APP).search("secret", k=50).candidates == []  # nothing landed in the shared space
