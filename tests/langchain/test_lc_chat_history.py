"""ManowarChatMessageHistory: a thread's history over the scene (transcript) and working layers."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from langchain_core.messages import AIMessage, ChatMessage, FunctionMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.runnables.history import RunnableWithMessageHistory

from langchain_manowar import ManowarChatMessageHistory
from langchain_manowar.testing import MemoryEchoChatModel
from manowar_memory import InvalidInputError, MemoryConfig, MemoryEngine, Scope, ScopeError

SCOPE = Scope(agent_wallet="agent-h", user_address="user-h", thread_id="thread-1")


@pytest.fixture
def engine() -> Iterator[MemoryEngine]:
    engine = MemoryEngine(store="sqlite:///:memory:", embedder="fake")
    yield engine
    engine.close()


class TestHistory:
    def test_round_trip_with_tool_calls(self, engine: MemoryEngine) -> None:
        """Messages come back in order and type, tool calls and tool call ids included."""
        history = ManowarChatMessageHistory(engine=engine, scope=SCOPE)
        assert history.messages == []
        history.add_messages([
            SystemMessage("Be brief."),
            HumanMessage("What's the weather in Porto?"),
            AIMessage("", tool_calls=[{"name": "weather", "args": {"city": "Porto"}, "id": "c-1"}]),
            ToolMessage("Rain", tool_call_id="c-1", name="weather"),
            AIMessage("It is raining in Porto."),
        ])
        history.add_user_message("Thanks!")
        msgs = history.messages
        assert [m.type for m in msgs] == ["system", "human", "ai", "tool", "ai", "human"]
        assert msgs[2].content == "" and msgs[2].tool_calls[0]["args"] == {"city": "Porto"}
        assert isinstance(msgs[3], ToolMessage) and msgs[3].tool_call_id == "c-1" and msgs[3].name == "weather"
        assert msgs[4].content == "It is raining in Porto." and msgs[5].content == "Thanks!"
        assert ManowarChatMessageHistory(engine=engine, scope=SCOPE, max_messages=2).messages == msgs[-2:]

    def test_threads_and_users_are_separate(self, engine: MemoryEngine) -> None:
        """Another thread, or the same thread id of another user, has its own history."""
        ManowarChatMessageHistory(engine=engine, scope=SCOPE).add_user_message("hello from thread 1")
        assert ManowarChatMessageHistory(engine=engine, scope=SCOPE.with_thread("thread-2")).messages == []
        other_user = Scope(agent_wallet="agent-h", user_address="user-x", thread_id="thread-1")
        assert ManowarChatMessageHistory(engine=engine, scope=other_user).messages == []

    def test_history_feeds_long_term_memory(self, engine: MemoryEngine) -> None:
        """Adding messages is a post_turn: facts are extracted and recalled from another thread."""
        ManowarChatMessageHistory(engine=engine, scope=SCOPE, wait_for_facts=True).add_messages(
            [HumanMessage("My favourite composer is Bach."), AIMessage("Great choice.")])
        prompt = engine.pre_turn("Who is my favourite composer?", SCOPE.with_thread("elsewhere")).prompt
        assert re.search(r"\[GRAPH \d{4}-\d\d-\d\d\] The user's favourite composer is Bach\.", prompt)

    def test_clear_keeps_durable_memories(self, engine: MemoryEngine) -> None:
        """clear() empties transcript and working buffer; the extracted fact stays, the thread restarts cleanly."""
        history = ManowarChatMessageHistory(engine=engine, scope=SCOPE, wait_for_facts=True)
        history.add_messages([HumanMessage("I live in Lisbon."), AIMessage("Nice city.")])
        history.clear()
        assert history.messages == []
        assert engine.store.get_session(SCOPE.thread_session_id(), SCOPE.agent_wallet).working_memory.context == []  # type: ignore[union-attr]
        assert "Lisbon" in engine.pre_turn("Where does the user live?", SCOPE.with_thread("x"), ["graph"]).prompt
        history.add_user_message("New start")
        assert [m.content for m in history.messages] == ["New start"]

    def test_working_buffer_stands_in_without_a_transcript(self, engine: MemoryEngine) -> None:
        """When the transcript is gone, the working buffer's recent lines are returned."""
        history = ManowarChatMessageHistory(engine=engine, scope=SCOPE)
        history.add_messages([HumanMessage("first question"), AIMessage("first answer")])
        transcript = engine.store.get_transcript(SCOPE.thread_session_id(), SCOPE.agent_wallet)
        assert transcript is not None
        engine.store.upsert_transcript(transcript.model_copy(update={"agent_wallet": "someone-else"}))
        msgs = history.messages
        assert [(m.type, m.content) for m in msgs] == [("human", "first question"), ("ai", "first answer")]

    def test_a_thread_is_required(self, engine: MemoryEngine) -> None:
        """A history without a thread id is refused when it is built (ScopeError is a ValueError)."""
        with pytest.raises(ScopeError, match="thread"):
            ManowarChatMessageHistory(engine=engine, scope={"agent_wallet": "a"})
        with pytest.raises(ValueError, match="thread"):
            ManowarChatMessageHistory(engine=engine, scope={"agent_wallet": "a"})

    def test_roles_follow_the_one_chat_role_rule(self, engine: MemoryEngine) -> None:
        """ChatMessage roles map as the engine's chat_role does (human, ai, developer, function...);
        an unknown role raises instead of being skipped, and nothing of that turn is recorded."""
        history = ManowarChatMessageHistory(engine=engine, scope=SCOPE)
        history.add_messages([ChatMessage(role="human", content="hi"), ChatMessage(role="developer", content="be kind"),
                              ChatMessage(role="ai", content="hello"), FunctionMessage(name="f", content="42")])
        assert [m.type for m in history.messages] == ["human", "system", "ai", "tool"]
        with pytest.raises(InvalidInputError, match="unknown chat role"):
            history.add_messages([HumanMessage("secret question"), ChatMessage(role="critic", content="meh")])
        assert [m.content for m in history.messages] == ["hi", "be kind", "hello", "42"]

    def test_clear_tells_the_query_cache(self) -> None:
        """clear() goes through the engine's clear_thread: a cached scene-layer search does not
        keep returning the cleared transcript."""
        engine = MemoryEngine(store="sqlite:///:memory:", embedder="fake", config=MemoryConfig(query_cache=True))
        try:
            history = ManowarChatMessageHistory(engine=engine, scope=SCOPE)
            history.add_messages([HumanMessage("My locker code is 4512."), AIMessage("Noted.")])
            before, _ = engine.search("locker code", SCOPE, layers=["scene"])
            assert before and "4512" in before[0].text
            engine.search("locker code", SCOPE, layers=["scene"])
            assert engine.query_cache_hits >= 1  # the search is cached
            history.clear()
            after, _ = engine.search("locker code", SCOPE, layers=["scene"])
            assert after == []
        finally:
            engine.close()

    async def test_async_methods(self, engine: MemoryEngine) -> None:
        """aadd_messages / aget_messages / aclear."""
        history = ManowarChatMessageHistory(engine=engine, scope=SCOPE.with_thread("async"))
        await history.aadd_messages([HumanMessage("async hello"), AIMessage("async hi")])
        assert [m.content for m in await history.aget_messages()] == ["async hello", "async hi"]
        await history.aclear()
        assert await history.aget_messages() == []

    @pytest.mark.filterwarnings("ignore:RunnableWithMessageHistory is deprecated")
    def test_runnable_with_message_history(self, engine: MemoryEngine) -> None:
        """RunnableWithMessageHistory reads and writes the thread named by session_id."""
        prompt = ChatPromptTemplate.from_messages([MessagesPlaceholder("history"), ("human", "{question}")])
        chain = RunnableWithMessageHistory(
            prompt | MemoryEchoChatModel(),
            lambda session_id: ManowarChatMessageHistory(engine=engine, scope=SCOPE.with_thread(session_id)),
            input_messages_key="question", history_messages_key="history",
        )
        chain.invoke({"question": "Hello there"}, {"configurable": {"session_id": "rw"}})
        chain.invoke({"question": "Second question"}, {"configurable": {"session_id": "rw"}})
        msgs = ManowarChatMessageHistory(engine=engine, scope=SCOPE.with_thread("rw")).messages
        assert [m.type for m in msgs] == ["human", "ai", "human", "ai"]
        assert msgs[2].content == "Second question"
