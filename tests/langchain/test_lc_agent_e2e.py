"""End to end with ``create_agent``: the middleware recalls across sessions, records turns (tool
calls included), and ManowarStore serves as the agent's LangGraph store for memory tools."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.tools import ToolRuntime
from langchain_core.messages import AIMessage, SystemMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver

from langchain_manowar import (
    ManowarChatMessageHistory,
    ManowarMemoryMiddleware,
    ManowarStore,
)
from langchain_manowar.testing import MemoryEchoChatModel, ScriptedToolChatModel
from manowar_memory import MemoryEngine, Scope, ScopeError

USER = Scope(agent_wallet="agent-lg", user_address="user-ana")


@pytest.fixture
def engine() -> Iterator[MemoryEngine]:
    engine = MemoryEngine(store="sqlite:///:memory:", embedder="fake")
    yield engine
    engine.close()


def _ask(agent: Any, text: str, thread: str) -> dict[str, Any]:
    return agent.invoke({"messages": [{"role": "user", "content": text}]}, {"configurable": {"thread_id": thread}})


class TestMiddlewareAcrossSessions:
    def test_agent_recalls_a_fact_from_an_earlier_session(self, engine: MemoryEngine) -> None:
        """Session 1 states a fact; a fresh thread's model call gets it in its system message and answers with it."""
        model = MemoryEchoChatModel()
        middleware = ManowarMemoryMiddleware(engine=engine, scope=USER, wait_for_facts=True)
        agent = create_agent(model, tools=[], system_prompt="You are helpful.", middleware=[middleware],
                             checkpointer=InMemorySaver())
        assert _ask(agent, "My favourite city is Lisbon.", "session-1")["messages"][-1].content == "I don't know."
        _ask(agent, "I play the cello in an orchestra.", "session-2")

        out = _ask(agent, "Which city is my favourite?", "session-3")
        answer = out["messages"][-1]
        assert isinstance(answer, AIMessage) and "Lisbon" in answer.content
        system = model.calls[-1][0]
        assert isinstance(system, SystemMessage)
        assert system.content.startswith("You are helpful.\n\nMemory context:")
        assert re.search(r"\[GRAPH \d{4}-\d\d-\d\d\] The user's favourite city is Lisbon\.", str(system.content))
        # the context was injected into the call only: the thread's state holds no extra system message
        assert [m.type for m in out["messages"]] == ["human", "ai"]
        assert middleware.last_result is not None and middleware.last_result.items

    def test_turns_are_recorded_per_thread_from_the_run_config(self, engine: MemoryEngine) -> None:
        """With a thread-less scope the run's thread_id names the transcript each turn is recorded in."""
        agent = create_agent(MemoryEchoChatModel(), tools=[], middleware=[ManowarMemoryMiddleware(engine=engine, scope=USER)],
                             checkpointer=InMemorySaver())
        _ask(agent, "I am learning Portuguese.", "t-a")
        _ask(agent, "I go running every morning.", "t-b")
        a = ManowarChatMessageHistory(engine=engine, scope=USER.with_thread("t-a")).messages
        b = ManowarChatMessageHistory(engine=engine, scope=USER.with_thread("t-b")).messages
        assert a[0].content == "I am learning Portuguese."
        assert b[0].content == "I go running every morning."
        assert len(a) == len(b) == 2

    def test_tool_loop_is_recorded_once_with_tool_calls(self, engine: MemoryEngine) -> None:
        """A turn with a tool call is recorded after the final answer only: user, call, result, answer."""

        @tool
        def weather(city: str) -> str:
            """The weather in a city."""
            return f"Sunny in {city}"

        model = ScriptedToolChatModel(messages=iter([
            AIMessage(content="", tool_calls=[{"name": "weather", "args": {"city": "Lisbon"}, "id": "call-1"}]),
            AIMessage(content="It is sunny in Lisbon."),
        ]))
        agent = create_agent(model, tools=[weather], middleware=[ManowarMemoryMiddleware(engine=engine, scope=USER)])
        out = _ask(agent, "What is the weather in Lisbon?", "t-tools")
        assert isinstance(out["messages"][2], ToolMessage)
        msgs = ManowarChatMessageHistory(engine=engine, scope=USER.with_thread("t-tools")).messages
        assert [m.type for m in msgs] == ["human", "ai", "tool", "ai"]
        assert msgs[1].tool_calls[0]["name"] == "weather" and msgs[1].tool_calls[0]["args"] == {"city": "Lisbon"}
        assert msgs[2].content == "Sunny in Lisbon" and msgs[2].tool_call_id == "call-1"
        assert msgs[3].content == "It is sunny in Lisbon."
        assert len(model.calls) == 2  # both model calls got the memory search, one turn recorded

    async def test_async_agent_recalls(self, engine: MemoryEngine) -> None:
        """ainvoke runs awrap_model_call and aafter_model."""
        middleware = ManowarMemoryMiddleware(engine=engine, scope=USER, wait_for_facts=True)
        agent = create_agent(MemoryEchoChatModel(), tools=[], middleware=[middleware])
        await agent.ainvoke({"messages": [{"role": "user", "content": "My dog is called Bolt."}]},
                            {"configurable": {"thread_id": "a1"}})
        out = await agent.ainvoke({"messages": [{"role": "user", "content": "What is my dog called?"}]},
                                  {"configurable": {"thread_id": "a2"}})
        assert "Bolt" in out["messages"][-1].content

    def test_middleware_can_register_memory_tools(self, engine: MemoryEngine) -> None:
        """tools=True adds the memory tools; the agent can remember through them and recall it next session."""
        model = ScriptedToolChatModel(messages=iter([
            AIMessage(content="", tool_calls=[{"name": "memory_remember", "id": "c1",
                                               "args": {"content": "The user's locker code is 4512.", "fact_type": "context"}}]),
            AIMessage(content="Saved."),
        ]))
        middleware = ManowarMemoryMiddleware(engine=engine, scope=USER, tools=["memory_remember", "memory_search"],
                                             record=False)
        assert [t.name for t in middleware.tools] == ["memory_remember", "memory_search"]
        agent = create_agent(model, middleware=[middleware])
        out = _ask(agent, "Please remember my locker code is 4512.", "m1")
        assert json.loads(out["messages"][2].content)["id"].startswith("vec_")
        echo = MemoryEchoChatModel()
        reader = create_agent(echo, middleware=[ManowarMemoryMiddleware(engine=engine, scope=USER, record=False)])
        assert "4512" in _ask(reader, "What is my locker code?", "m2")["messages"][-1].content
        assert ManowarChatMessageHistory(engine=engine, scope=USER.with_thread("m1")).messages == []  # record=False

    def test_scope_resolver_reads_the_runtime_context(self, engine: MemoryEngine) -> None:
        """scope_resolver derives the user from the run's context, so users stay apart in one agent."""
        from dataclasses import dataclass

        @dataclass
        class Ctx:
            user: str

        mw = ManowarMemoryMiddleware(
            engine=engine, scope=USER, wait_for_facts=True,
            scope_resolver=lambda rt: Scope(agent_wallet="agent-lg", user_address=rt.context.user, thread_id="main"),
        )
        agent = create_agent(MemoryEchoChatModel(), middleware=[mw], context_schema=Ctx)
        agent.invoke({"messages": [{"role": "user", "content": "My favourite food is ramen."}]}, context=Ctx(user="u-1"))
        mine = agent.invoke({"messages": [{"role": "user", "content": "What is my favourite food?"}]}, context=Ctx(user="u-1"))
        theirs = agent.invoke({"messages": [{"role": "user", "content": "What is my favourite food?"}]}, context=Ctx(user="u-2"))
        assert "ramen" in mine["messages"][-1].content
        assert "ramen" not in theirs["messages"][-1].content


# ---------------------------------------------------------------- LangGraph store with create_agent


def _namespace(runtime: ToolRuntime) -> tuple[str, ...]:
    user = (runtime.config.get("configurable") or {}).get("user_id", "anon")
    return ("memories", str(user))


@tool
def manage_memory(content: str, runtime: ToolRuntime) -> str:
    """Create a memory (as LangMem's manage-memory tool does: a uuid key, {"content": ...})."""
    assert runtime.store is not None
    key = str(uuid.uuid4())
    runtime.store.put(_namespace(runtime), key, {"content": content})
    return f"created memory {key}"


@tool
def search_memory(query: str, runtime: ToolRuntime) -> list[dict[str, Any]]:
    """Search memories (as LangMem's search-memory tool does)."""
    assert runtime.store is not None
    return [item.dict() for item in runtime.store.search(_namespace(runtime), query=query, limit=5)]


class TestStoreWithCreateAgent:
    def test_memory_tools_write_and_search_the_store(self, engine: MemoryEngine) -> None:
        """create_agent(store=ManowarStore) gives tools runtime.store; what they save is found again and
        also reaches the engine's own recall."""
        store = ManowarStore(engine=engine, scope=USER, index={"fields": ["content"]})
        writer = ScriptedToolChatModel(messages=iter([
            AIMessage(content="", tool_calls=[{"name": "manage_memory", "id": "w1",
                                               "args": {"content": "User prefers window seats on trains"}}]),
            AIMessage(content="Noted."),
        ]))
        agent = create_agent(writer, tools=[manage_memory, search_memory], store=store)
        agent.invoke({"messages": [{"role": "user", "content": "I like window seats on trains."}]},
                     {"configurable": {"user_id": "ana"}})
        saved = store.search(("memories", "ana"))
        assert [i.value for i in saved] == [{"content": "User prefers window seats on trains"}]

        reader = ScriptedToolChatModel(messages=iter([
            AIMessage(content="", tool_calls=[{"name": "search_memory", "id": "r1", "args": {"query": "window seats"}}]),
            AIMessage(content="You like window seats."),
        ]))
        agent = create_agent(reader, tools=[manage_memory, search_memory], store=store)
        out = agent.invoke({"messages": [{"role": "user", "content": "Where do I like to sit?"}]},
                           {"configurable": {"user_id": "ana"}})
        found = out["messages"][2]
        assert isinstance(found, ToolMessage)
        (hit,) = json.loads(found.content)
        assert hit["value"] == {"content": "User prefers window seats on trains"} and hit["score"] > 0
        # another user's namespace is empty
        assert store.search(("memories", "bo"), query="window seats") == []
        # the store row is an engine memory: the engine's recall sees it
        assert "window seats" in engine.pre_turn("window seats on trains", USER).prompt


class TestMiddlewareConstruction:
    def test_recording_without_any_thread_source_fails_when_built(self, engine: MemoryEngine) -> None:
        """A recording middleware whose scope has no thread, with thread_from_config off and no resolver, is refused."""
        with pytest.raises(ScopeError, match="thread"):
            ManowarMemoryMiddleware(engine=engine, scope=USER, thread_from_config=False)
        ManowarMemoryMiddleware(engine=engine, scope=USER, thread_from_config=False, record=False)
        ManowarMemoryMiddleware(engine=engine, scope=USER.with_thread("t"), thread_from_config=False)
        ManowarMemoryMiddleware(engine=engine, scope=USER)  # the run's configurable thread_id
