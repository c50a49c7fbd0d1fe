"""End to end: a classic chain with ManowarMemory recalls a fact stated in an earlier session."""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator

import pytest
from langchain_core.messages import SystemMessage

from langchain_manowar import ManowarChatMessageHistory, ManowarMemory
from langchain_manowar.testing import MemoryEchoChatModel
from manowar_memory import MemoryEngine, Scope, ScopeError

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from langchain_classic.chains import ConversationChain

USER = Scope(agent_wallet="agent-chain", user_address="user-ana")


@pytest.fixture
def engine() -> Iterator[MemoryEngine]:
    engine = MemoryEngine(store="sqlite:///:memory:", embedder="fake")
    yield engine
    engine.close()


def _chain(engine: MemoryEngine, thread: str, model: MemoryEchoChatModel, **options: object) -> ConversationChain:
    memory = ManowarMemory(engine=engine, scope=USER.with_thread(thread), wait_for_facts=True, **options)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ConversationChain(llm=model, memory=memory)


class TestClassicChainAcrossSessions:
    def test_fact_from_an_earlier_session_reaches_the_model(self, engine: MemoryEngine) -> None:
        """A fact said in session 1 is in the prompt and the answer of a question in session 3."""
        model = MemoryEchoChatModel()
        first = _chain(engine, "monday", model)
        assert first.invoke({"input": "My favourite city is Lisbon."})["response"] == "I don't know."
        first.invoke({"input": "I work as a nurse at the central hospital."})

        second = _chain(engine, "tuesday", model)
        second.invoke({"input": "Can you recommend a book?"})

        third = _chain(engine, "wednesday", model)
        out = third.invoke({"input": "Which city is my favourite?"})
        assert "Lisbon" in out["response"]
        assert out["history"].startswith("Memory context:")
        assert re.search(r"\[GRAPH \d{4}-\d\d-\d\d\] The user's favourite city is Lisbon\.", out["history"])
        # the fact came from memory, not from this session's messages
        last_prompt = model.calls[-1][0].content
        assert "Lisbon" in last_prompt and "Which city is my favourite?" in last_prompt
        memory = third.memory
        assert isinstance(memory, ManowarMemory) and memory.last_result is not None
        assert any(i.layer == "graph" and "Lisbon" in i.text for i in memory.last_result.items)

    def test_other_users_facts_are_not_recalled(self, engine: MemoryEngine) -> None:
        """Scopes isolate users: another user's chain does not see the fact."""
        model = MemoryEchoChatModel()
        _chain(engine, "monday", model).invoke({"input": "My favourite city is Lisbon."})
        other = ManowarMemory(engine=engine, scope=Scope(agent_wallet="agent-chain", user_address="user-bo", thread_id="x"))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            chain = ConversationChain(llm=model, memory=other)
        out = chain.invoke({"input": "Which city is my favourite?"})
        assert "Lisbon" not in out["history"]
        assert out["response"] == "I don't know."

    async def test_async_chain_recalls_and_records(self, engine: MemoryEngine) -> None:
        """ainvoke goes through aload_memory_variables / asave_context and still recalls across sessions."""
        model = MemoryEchoChatModel()
        await _chain(engine, "s1", model).ainvoke({"input": "My sister is called Marta."})
        out = await _chain(engine, "s2", model).ainvoke({"input": "What is my sister called?"})
        assert "Marta" in out["response"]

    def test_each_save_records_a_turn_in_the_thread(self, engine: MemoryEngine) -> None:
        """save_context writes the user input and the answer to the thread's transcript."""
        model = MemoryEchoChatModel()
        chain = _chain(engine, "t-rec", model)
        chain.invoke({"input": "I like green tea."})
        chain.invoke({"input": "What do I like to drink?"})
        history = ManowarChatMessageHistory(engine=engine, scope=USER.with_thread("t-rec")).messages
        assert [m.type for m in history] == ["human", "ai", "human", "ai"]
        assert history[0].content == "I like green tea."
        assert "green tea" in history[3].content


class TestManowarMemoryOptions:
    def test_return_messages_gives_a_system_message(self, engine: MemoryEngine) -> None:
        """With return_messages the context is one SystemMessage (empty list when nothing is relevant)."""
        engine.remember(USER, "The user is allergic to peanuts.", fact_type="preference")
        memory = ManowarMemory(engine=engine, scope=USER.with_thread("t"), return_messages=True, memory_key="memories")
        assert memory.memory_variables == ["memories"]
        loaded = memory.load_memory_variables({"input": "Is the user allergic to peanuts?"})["memories"]
        assert len(loaded) == 1 and isinstance(loaded[0], SystemMessage)
        assert "allergic to peanuts" in loaded[0].content
        assert memory.load_memory_variables({"input": "   "})["memories"] == []

    def test_input_and_output_keys(self, engine: MemoryEngine) -> None:
        """Several inputs need input_key; the chosen keys are the ones recorded."""
        memory = ManowarMemory(engine=engine, scope=USER.with_thread("keys"))
        with pytest.raises(ValueError, match="input_key"):
            memory.load_memory_variables({"question": "a", "context": "b"})
        memory = ManowarMemory(engine=engine, scope=USER.with_thread("keys"), input_key="question", output_key="answer")
        memory.save_context({"question": "I moved to Porto in May.", "context": "x"}, {"answer": "Nice!", "other": "y"})
        msgs = ManowarChatMessageHistory(engine=engine, scope=USER.with_thread("keys")).messages
        assert [m.content for m in msgs] == ["I moved to Porto in May.", "Nice!"]

    def test_budget_is_respected(self, engine: MemoryEngine) -> None:
        """budget_chars bounds the memory context."""
        for i in range(20):
            engine.remember(USER, f"The user visited museum number {i} about Roman history and liked it.")
        memory = ManowarMemory(engine=engine, scope=USER.with_thread("b"), budget_chars=200)
        text = memory.load_memory_variables({"input": "Which museums about Roman history did the user visit?"})["history"]
        assert text.startswith("Memory context:") and len(text) <= 200

    def test_clear_resets_the_thread_but_keeps_facts(self, engine: MemoryEngine) -> None:
        """clear() empties the thread's transcript and working buffer; durable facts remain recallable."""
        model = MemoryEchoChatModel()
        chain = _chain(engine, "c", model)
        chain.invoke({"input": "My favourite colour is teal."})
        history = ManowarChatMessageHistory(engine=engine, scope=USER.with_thread("c"))
        assert len(history.messages) == 2
        chain.memory.clear()  # type: ignore[union-attr]
        assert history.messages == []
        out = _chain(engine, "c", model).invoke({"input": "What is my favourite colour?"})
        assert "teal" in out["response"]


class TestConstruction:
    def test_a_thread_is_required_when_built(self, engine: MemoryEngine) -> None:
        """ManowarMemory without a thread fails when it is built (ScopeError, a ValueError), not at the first save."""
        with pytest.raises(ScopeError, match="thread"):
            ManowarMemory(engine=engine, scope=USER)
        with pytest.raises(ValueError, match="thread"):
            ManowarMemory(engine=engine, scope={"agent_wallet": "a"})
        assert ManowarMemory(engine=engine, scope=USER.with_thread("t")).memory.scope.thread_id == "t"

    def test_unknown_options_and_trust(self, engine: MemoryEngine) -> None:
        """An unknown option raises; trust= sets the level of the recorded turn."""
        with pytest.raises(ValueError):
            ManowarMemory(engine=engine, scope=USER.with_thread("t"), top_k=3)
        memory = ManowarMemory(engine=engine, scope=USER.with_thread("tr"), trust="external", wait_for_facts=True)
        memory.save_context({"input": "My favourite city is Lisbon."}, {"output": "Nice."})
        facts = engine.list_items(USER, sources=["fact"])
        assert facts and all(f.metadata.get("trust") == "external" for f in facts)
