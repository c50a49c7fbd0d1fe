"""ManowarMemoryBlock in LlamaIndex's Memory, and ManowarMemory as a chat engine's memory."""

from __future__ import annotations

import re

import pytest
from llama_index.core.base.llms.types import ChatMessage, MessageRole, TextBlock
from llama_index.core.chat_engine import SimpleChatEngine
from llama_index.core.llms.mock import MockLLMWithChatMemoryOfLastCall
from llama_index.core.memory import Memory, VectorMemoryBlock
from llama_index.core.storage.chat_store.sql import MessageStatus

from llama_index_manowar import ManowarBlockMemory, ManowarMemory, ManowarMemoryBlock, ManowarVectorStore
from manowar_memory import InvalidInputError, MemoryEngine, Scope, ScopeError

SESSION_ONE = [
    "Hi! My name is Ada and I live in Lisbon.",
    "I prefer green tea over coffee.",
    "Can you suggest a weekend plan?",
    "Something outdoors would be nice.",
]


@pytest.fixture
def llm() -> MockLLMWithChatMemoryOfLastCall:
    # short canned replies, so recorded turns hold what the user said, not an echoed prompt
    return MockLLMWithChatMemoryOfLastCall(max_tokens=4)


def _system_text(llm: MockLLMWithChatMemoryOfLastCall) -> str:
    messages = llm.last_chat_messages or []
    return "\n".join(m.content or "" for m in messages if m.role == MessageRole.SYSTEM)


# ---------------------------------------------------------------------- the block in Memory


def test_chat_engine_with_memory_block_recalls_a_fact_from_an_earlier_session(
    engine: MemoryEngine, scope: Scope, llm: MockLLMWithChatMemoryOfLastCall
) -> None:
    """End to end, offline: session 1 tells a fact; Memory flushes it to our block, which
    records it; session 2 (a new Memory, a new chat store) gets it back in the system prompt."""
    block_one = ManowarMemoryBlock(engine=engine, scope=scope, wait_for_facts=True)
    memory_one = Memory.from_defaults(session_id="session-1", token_limit=60, memory_blocks=[block_one])
    chat_one = SimpleChatEngine.from_defaults(llm=llm, memory=memory_one)
    for message in SESSION_ONE:
        chat_one.chat(message)

    # Memory's FIFO overflowed and the oldest turn went to the block, which recorded it
    archived = memory_one.get_all(status=MessageStatus.ARCHIVED)
    assert archived and archived[0].content == SESSION_ONE[0], "Memory should have flushed the first turn"
    facts = engine.list_items(scope, sources=["fact"])
    assert any("Lisbon" in f.content for f in facts)
    assert any(f.thread_id == "session-1" for f in engine.list_items(scope, sources=["session"]))
    # what is still in the short-term queue is recorded at the end of the session, as documented
    active = memory_one.get_all(status=MessageStatus.ACTIVE)
    assert SESSION_ONE[-1] in [m.content for m in active]
    assert block_one.record(active, session_id=memory_one.session_id) is not None
    summaries = [r.content for r in engine.list_items(scope, sources=["session"]) if r.thread_id == "session-1"]
    assert any(SESSION_ONE[-1] in text for text in summaries)

    memory_two = Memory.from_defaults(
        session_id="session-2", token_limit=4000,
        memory_blocks=[block_two := ManowarMemoryBlock(engine=engine, scope=scope)],
    )
    chat_two = SimpleChatEngine.from_defaults(llm=llm, memory=memory_two)
    chat_two.chat("Where do I live?")
    system = _system_text(llm)
    assert "<manowar_memory>" in system and "Memory context:" in system
    assert re.search(r"\[GRAPH \d{4}-\d\d-\d\d\] The user lives in Lisbon\.", system)  # one fact per clause of "My name is Ada and I live in Lisbon"
    result = block_two.last_result
    assert result is not None and any(i.layer == "graph" and "Lisbon" in i.text for i in result.items)
    assert result.context_usage.characters <= 900


async def test_block_get_put_and_record(engine: MemoryEngine, scope: Scope) -> None:
    """aget without a query is empty; aput records under the Memory session; arecord works directly."""
    block = ManowarMemoryBlock(engine=engine, scope=scope, budget_chars=300)
    assert await block.aget([]) == ""
    await block.aput([ChatMessage(role="user", content="I work at a bakery in Porto."),
                      ChatMessage(role="assistant", content="Nice!")], session_id="s-9")
    await engine.aflush()
    transcripts = engine.list_items(scope, sources=["session"])
    assert [t.thread_id for t in transcripts] == ["s-9"]
    text = await block.aget([ChatMessage(role="user", content="Where does the user work?")], session_id="s-10")
    assert text.startswith("Memory context:") and "bakery" in text and len(text) <= 300
    # recording needs a thread: the Memory session, or the scope's own thread
    with pytest.raises(ScopeError):
        await block.arecord([ChatMessage(role="user", content="no session here")])
    threaded = ManowarMemoryBlock(engine=engine, scope=scope.with_thread("t-1"))
    assert (await threaded.arecord([ChatMessage(role="user", content="I like chess.")])).thread_id == "t-1"  # type: ignore[union-attr]
    assert threaded.record([ChatMessage(role="assistant", content="")]) is None  # nothing with text


def test_unknown_layers_fail_when_built(engine: MemoryEngine, scope: Scope) -> None:
    """A misspelt layer is an error at construction, not on the first turn."""
    with pytest.raises(ValueError, match="unknown layer"):
        ManowarMemoryBlock(engine=engine, scope=scope, layers=["graph", "vector"])
    with pytest.raises(ValueError, match="unknown layer"):
        ManowarMemory(engine=engine, scope=scope, layers=["facts"])
    assert ManowarMemoryBlock(engine=engine, scope=scope, layers=["graph", "graph"]).layers == ["graph"]


async def test_block_truncates_lowest_ranked_lines_first(engine: MemoryEngine, scope: Scope) -> None:
    """atruncate drops lines from the end and gives None when no memory line is left."""
    block = ManowarMemoryBlock(engine=engine, scope=scope, priority=1)
    content = "Memory context:\n[GRAPH] first memory line\n[VECTORS] second memory line"
    assert await block.atruncate(content, 2) == "Memory context:\n[GRAPH] first memory line"
    assert await block.atruncate(content, 1000) is None
    assert await block.atruncate(content, 0) == content


def test_vector_memory_block_on_the_manowar_store(engine: MemoryEngine, scope: Scope) -> None:
    """LlamaIndex's own VectorMemoryBlock works on ManowarVectorStore (stores_text, session filter)."""
    store = ManowarVectorStore(engine=engine, scope=scope, collection="chat")
    block = VectorMemoryBlock(vector_store=store, embed_model=store.embed_model, similarity_top_k=2)
    memory = Memory.from_defaults(session_id="s-1", token_limit=40, memory_blocks=[block])
    for text in ["The parking code is 4321 for the garage.", "ok", "Lunch is at noon today.", "thanks", "bye now"]:
        memory.put(ChatMessage(role="user", content=text))
        memory.put(ChatMessage(role="assistant", content="noted"))
    rows = engine.list_items(scope, filters={"metadata.li_collection": "chat"})
    assert rows and all(r.metadata["session_id"] == "s-1" for r in rows)
    assert any("4321" in r.content for r in rows)
    messages = memory.get(input="What is the parking code?")
    assert "4321" in (messages[0].content or "")


# ---------------------------------------------------------------------- ManowarMemory


def test_manowar_memory_in_a_chat_engine_recalls_across_sessions(
    engine: MemoryEngine, scope: Scope, llm: MockLLMWithChatMemoryOfLastCall
) -> None:
    """End to end, offline: ManowarMemory records each turn; a later session recalls the fact."""
    first = ManowarMemory.from_defaults(engine=engine, scope=scope, session_id="s-1")
    SimpleChatEngine.from_defaults(llm=llm, memory=first).chat("My name is Ada and I live in Porto.")
    engine.flush()
    assert any("Porto" in f.content for f in engine.list_items(scope, sources=["fact"]))

    second = ManowarMemory.from_defaults(engine=engine, scope=scope)
    response = SimpleChatEngine.from_defaults(llm=llm, memory=second, system_prompt="Be brief.").chat("Where do I live?")
    assert str(response) == "text text text text"
    system = _system_text(llm)
    assert "Memory context:" in system and "lives in Porto" in system
    assert second.session_id is not None and second.session_id.startswith("li-")
    assert [m.role for m in second.get_all()] == [MessageRole.USER, MessageRole.ASSISTANT]


def test_manowar_memory_records_whole_turns(engine: MemoryEngine, scope: Scope) -> None:
    """A turn (user, tool, assistant) is recorded when the assistant replies with text; commit
    records what is pending; set() and reset() record nothing and leave long-term memory alone."""
    memory = ManowarMemory(engine=engine, scope=scope, session_id="s-1", extract_facts=False)
    memory.put(ChatMessage(role="user", content="Look up the weather in Lisbon."))
    memory.put(ChatMessage(role="assistant", content=""))  # a bare tool-call request: no text
    memory.put(ChatMessage(role="tool", content="sunny, 24C"))
    assert engine.list_items(scope, sources=["session"]) == []
    memory.put(ChatMessage(role="assistant", content="It is sunny in Lisbon."))
    rows = engine.list_items(scope, sources=["session"])
    assert len(rows) == 1 and rows[0].thread_id == "s-1"
    assert "tool: sunny, 24C" in rows[0].content and "assistant: It is sunny in Lisbon." in rows[0].content

    memory.put(ChatMessage(role="user", content="Thanks, bye."))
    assert memory.commit() is not None
    assert len(engine.list_items(scope, sources=["session"])) == 2
    assert memory.commit() is None

    memory.set([ChatMessage(role="user", content="old"), ChatMessage(role="assistant", content="history")])
    assert [m.content for m in memory.get_all()] == ["old", "history"]
    memory.reset()
    assert memory.get_all() == []
    assert len(engine.list_items(scope, sources=["session"])) == 2


def test_manowar_memory_window_and_system_message(engine: MemoryEngine, scope: Scope) -> None:
    """get() keeps a leading system message, starts the window at a user message, and merges
    the recalled context into the session's system message."""
    engine.remember(scope, "The user is allergic to peanuts.")
    memory = ManowarMemory(engine=engine, scope=scope, max_messages=3)
    memory.set([
        ChatMessage(role="system", content="You are a chef."),
        ChatMessage(role="user", content="hello"), ChatMessage(role="assistant", content="hi"),
        ChatMessage(role="user", content="Plan a dinner"), ChatMessage(role="assistant", content="Sure"),
        ChatMessage(role="user", content="Any allergies to consider, peanuts?"),
    ])
    messages = memory.get()
    assert messages[0].role == MessageRole.SYSTEM
    assert "allergic to peanuts" in (messages[0].content or "") and (messages[0].content or "").endswith("You are a chef.")
    assert [m.content for m in messages[1:]] == ["Plan a dinner", "Sure", "Any allergies to consider, peanuts?"]
    memory.max_messages = 2  # the last two start with an assistant message: the window starts at the user
    assert [m.content for m in memory.get()[1:]] == ["Any allergies to consider, peanuts?"]
    assert memory.last_result is not None and memory.last_result.items


async def test_manowar_memory_async_chat(
    engine: MemoryEngine, scope: Scope, llm: MockLLMWithChatMemoryOfLastCall
) -> None:
    """achat uses aget/aput, and records the turn."""
    memory = ManowarMemory(engine=engine, scope=scope, session_id="s-async")
    chat = SimpleChatEngine.from_defaults(llm=llm, memory=memory)
    await chat.achat("I speak Portuguese and English.")
    await engine.aflush()
    assert any("Portuguese" in f.content for f in engine.list_items(scope, sources=["fact"]))
    await chat.achat("Which languages do I speak?")
    assert "Portuguese" in _system_text(llm)
    assert len(await memory.aget_all()) == 4


# ---------------------------------------------------------------------- issue #11: every new message, once


def _transcript(engine: MemoryEngine, scope: Scope, thread: str) -> list[tuple[str, str]]:
    return [(m.role, m.content) for m in engine.scoped(scope.with_thread(thread)).messages()]


def test_a_one_turn_session_is_recalled_in_the_next_session(
    engine: MemoryEngine, scope: Scope, llm: MockLLMWithChatMemoryOfLastCall
) -> None:
    """A short session that Memory never flushes is recorded (it used to be lost): a fresh
    Memory in a new session recalls it."""
    memory_one = Memory.from_defaults(session_id="short-1", token_limit=4000,
                                      memory_blocks=[ManowarMemoryBlock(engine=engine, scope=scope, wait_for_facts=True)])
    SimpleChatEngine.from_defaults(llm=llm, memory=memory_one).chat("My name is Ada and I live in Lisbon.")
    assert memory_one.get_all(status=MessageStatus.ARCHIVED) == []  # nothing was flushed
    assert ("user", "My name is Ada and I live in Lisbon.") in _transcript(engine, scope, "short-1")

    block_two = ManowarMemoryBlock(engine=engine, scope=scope)
    memory_two = Memory.from_defaults(session_id="short-2", token_limit=4000, memory_blocks=[block_two])
    SimpleChatEngine.from_defaults(llm=llm, memory=memory_two).chat("Where do I live?")
    assert "lives in Lisbon" in _system_text(llm)


def test_the_last_reply_of_a_session_is_recorded(
    engine: MemoryEngine, scope: Scope, llm: MockLLMWithChatMemoryOfLastCall
) -> None:
    """A plain Memory never hands its blocks the reply it was just given (the session's last
    one was lost); ManowarBlockMemory records every message as it arrives, each once."""
    plain = Memory.from_defaults(session_id="plain-1", token_limit=4000,
                                 memory_blocks=[ManowarMemoryBlock(engine=engine, scope=scope)])
    SimpleChatEngine.from_defaults(llm=llm, memory=plain).chat("My name is Ada.")
    assert [role for role, _ in _transcript(engine, scope, "plain-1")] == ["user"]  # the reply is missing

    memory = ManowarBlockMemory.from_defaults(session_id="block-1", token_limit=4000,
                                              memory_blocks=[ManowarMemoryBlock(engine=engine, scope=scope)])
    chat = SimpleChatEngine.from_defaults(llm=llm, memory=memory)
    chat.chat("My name is Ada.")
    chat.chat("I live in Lisbon.")
    transcript = _transcript(engine, scope, "block-1")
    assert [role for role, _ in transcript] == ["user", "assistant", "user", "assistant"]
    assert transcript[-1] == ("assistant", memory.get_all()[-1].content)


def test_each_message_is_recorded_once(engine: MemoryEngine, scope: Scope, llm: MockLLMWithChatMemoryOfLastCall) -> None:
    """Messages seen on every read and again when flushed are recorded once each, in order;
    a new block on the same session does not record them again."""
    block = ManowarMemoryBlock(engine=engine, scope=scope, extract_facts=False)
    memory = Memory.from_defaults(session_id="s-once", token_limit=60, memory_blocks=[block])
    chat = SimpleChatEngine.from_defaults(llm=llm, memory=memory)
    for message in SESSION_ONE:
        chat.chat(message)
    assert memory.get_all(status=MessageStatus.ARCHIVED), "Memory should have flushed some turns"
    memory.get()  # the last reply is seen on the next read
    expected = [m for text in SESSION_ONE for m in (("user", text), ("assistant", "text text text text"))]
    assert _transcript(engine, scope, "s-once") == expected

    again = ManowarMemoryBlock(engine=engine, scope=scope, extract_facts=False)
    assert again.record(memory.get_all(), session_id="s-once") is None
    assert _transcript(engine, scope, "s-once") == expected


def test_block_that_could_never_record_fails_when_built(engine: MemoryEngine, scope: Scope) -> None:
    """No thread in the scope and no session to borrow one from: refused at construction."""
    with pytest.raises(ValueError, match="needs a thread"):  # pydantic's ValidationError around the ScopeError
        ManowarMemoryBlock(engine=engine, scope=scope, thread_from_session=False)
    assert ManowarMemoryBlock(engine=engine, scope=scope.with_thread("t"), thread_from_session=False)
    with pytest.raises(ValueError, match="budget"):
        ManowarMemoryBlock(engine=engine, scope=scope, budget=100)  # type: ignore[call-arg]


def test_chat_roles_follow_the_one_rule(engine: MemoryEngine, scope: Scope) -> None:
    """chatbot/model are the assistant; a role chat_role does not know is refused, not guessed."""
    memory = ManowarMemory(engine=engine, scope=scope, session_id="roles", extract_facts=False)
    memory.put(ChatMessage(role=MessageRole.USER, content="Hello there."))
    memory.put(ChatMessage(role=MessageRole.CHATBOT, content="Hi, I am Cohere."))
    memory.put(ChatMessage(role=MessageRole.MODEL, content="And I am Gemini."))
    assert _transcript(engine, scope, "roles") == [
        ("user", "Hello there."), ("assistant", "Hi, I am Cohere."), ("assistant", "And I am Gemini.")]
    odd = ChatMessage.model_construct(role="wizard", blocks=[TextBlock(text="abracadabra")], additional_kwargs={})
    with pytest.raises(InvalidInputError, match="unknown chat role"):
        memory.put(odd)
    block = ManowarMemoryBlock(engine=engine, scope=scope)
    with pytest.raises(InvalidInputError, match="unknown chat role"):
        block.record([odd], session_id="roles")


def test_manowar_memory_records_agent_scratchpads(engine: MemoryEngine, scope: Scope) -> None:
    """An agent's turn (question, reply with a tool call, tool result, final reply) is recorded
    whole, each message once, even though the first reply already had text."""
    memory = ManowarMemory(engine=engine, scope=scope, session_id="agent", extract_facts=False)
    memory.put(ChatMessage(role="user", content="What is the weather in Lisbon?"))
    memory.put_messages([ChatMessage(role="assistant", content="Let me check."),
                         ChatMessage(role="tool", content="sunny, 24C")])
    memory.put(ChatMessage(role="assistant", content="It is sunny."))
    assert _transcript(engine, scope, "agent") == [
        ("user", "What is the weather in Lisbon?"), ("assistant", "Let me check."), ("tool", "sunny, 24C"),
        ("assistant", "It is sunny.")]
    with pytest.raises(ValueError, match="window"):
        ManowarMemory(engine=engine, scope=scope, window=3)  # type: ignore[call-arg]


def test_a_named_session_goes_on_where_it_stopped_and_reset_clears_it(engine: MemoryEngine, scope: Scope) -> None:
    first = ManowarMemory(engine=engine, scope=scope, session_id="s-42", extract_facts=False)
    first.put_messages([ChatMessage(role="user", content="I parked on level 3."),
                        ChatMessage(role="assistant", content="Noted: level 3.")])
    resumed = ManowarMemory(engine=engine, scope=scope, session_id="s-42")
    assert [m.content for m in resumed.get_all()] == ["I parked on level 3.", "Noted: level 3."]
    assert ManowarMemory(engine=engine, scope=scope, session_id="s-other").get_all() == []
    assert ManowarMemory(engine=engine, scope=scope.with_thread("s-42"), session_id="s-42").get_all()
    other_user = Scope(agent_wallet=scope.agent_wallet, user_address="user-2")
    assert ManowarMemory(engine=engine, scope=other_user, session_id="s-42").get_all() == []
    resumed.reset()
    assert resumed.get_all() == [] and ManowarMemory(engine=engine, scope=scope, session_id="s-42").get_all() == []
