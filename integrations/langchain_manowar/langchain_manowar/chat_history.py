"""``ManowarChatMessageHistory``: a thread's chat history over the working and scene layers."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Sequence

from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from manowar_memory import MemoryEngine, Scope, Session, Transcript
from manowar_memory.records import WorkingMemory
from manowar_memory.scope import ScopeLike

from ._convert import coerce_scope, messages_to_turn, stored_to_message

__all__ = ["ManowarChatMessageHistory", "clear_thread", "thread_messages"]

_WORKING_PREFIXES = (("user: ", HumanMessage), ("assistant: ", AIMessage), ("system: ", SystemMessage))


def _get_transcript(engine: MemoryEngine, scope: Scope) -> Transcript | None:
    """The thread's transcript. The engine has no public read for it yet, so this goes to the
    store; stores take ``(session_id, agent_wallet)`` (older ones only the session id)."""
    getter: Callable[..., Transcript | None] = engine.store.get_transcript
    try:
        n_params = len(inspect.signature(getter).parameters)
    except (TypeError, ValueError):
        n_params = 2
    if n_params >= 2:
        return getter(scope.thread_session_id(), scope.agent_wallet)
    return getter(scope.thread_session_id())


def _thread_scope(scope: Scope) -> Scope:
    if scope.thread_id is None:
        raise ValueError("a chat history needs a thread: pass Scope(..., thread_id='...')")
    return scope


def _owned(row: Transcript | Session | None, scope: Scope) -> bool:
    return (
        row is not None and row.agent_wallet == scope.agent_wallet and row.user_address == scope.user_address
        and row.mode == scope.mode and row.hai_id == scope.hai_id
    )


def thread_messages(engine: MemoryEngine, scope: Scope) -> list[BaseMessage]:
    """The messages of the scope's thread: the full transcript (scene layer), or, when the
    transcript is gone (a cleanup job removed it), what the working buffer still holds."""
    scope = _thread_scope(scope)
    sid = scope.thread_session_id()
    transcript = _get_transcript(engine, scope)
    if _owned(transcript, scope):
        assert transcript is not None
        return [stored_to_message(m) for m in transcript.messages]
    session = engine.store.get_session(sid, scope.agent_wallet)
    if not _owned(session, scope):
        return []
    assert session is not None
    out: list[BaseMessage] = []
    for line in session.working_memory.context:
        for prefix, cls in _WORKING_PREFIXES:
            if line.startswith(prefix):
                out.append(cls(content=line[len(prefix):]))
                break
    return out


def clear_thread(engine: MemoryEngine, scope: Scope) -> None:
    """Empty the thread's transcript (scene) and working buffer. Durable memories (graph,
    vectors, patterns, archives) are kept: they belong to the agent, not to the thread."""
    scope = _thread_scope(scope)
    sid = scope.thread_session_id()
    transcript = _get_transcript(engine, scope)
    if _owned(transcript, scope):
        assert transcript is not None
        emptied = transcript.model_copy(update={"messages": [], "summary": None, "token_count": 0})
        engine.store.upsert_transcript(emptied)
    session = engine.store.get_session(sid, scope.agent_wallet)
    if _owned(session, scope):
        assert session is not None
        wm = session.working_memory
        fresh = WorkingMemory(entities=dict(wm.entities), state=dict(wm.state))
        engine.store.upsert_session(session.model_copy(update={"working_memory": fresh}))


class ManowarChatMessageHistory(BaseChatMessageHistory):
    """The chat history of one thread, kept by the engine.

    Reading returns the thread's transcript (scene layer) as LangChain messages; when it
    is gone, what the working buffer still holds. ``add_messages`` records the messages
    as one turn with :meth:`MemoryEngine.post_turn`, so the transcript, the working
    buffer, a session summary row and (in the background) extracted facts are all
    written: the history feeds long-term memory. ``clear`` empties the thread's
    transcript and working buffer; durable memories stay.

    Works with ``RunnableWithMessageHistory``::

        RunnableWithMessageHistory(chain, lambda session_id: ManowarChatMessageHistory(
            engine=engine, scope=scope.with_thread(session_id)))

    ``max_messages`` keeps only the latest messages when reading.
    """

    def __init__(self, *, engine: MemoryEngine, scope: ScopeLike, max_messages: int | None = None,
                 wait_for_facts: bool = False) -> None:
        self.engine = engine
        self.scope = _thread_scope(coerce_scope(scope))
        if max_messages is not None and max_messages < 1:
            raise ValueError("max_messages must be a positive integer or None")
        self.max_messages = max_messages
        self.wait_for_facts = wait_for_facts

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        """The thread's messages, oldest first."""
        out = thread_messages(self.engine, self.scope)
        return out[-self.max_messages:] if self.max_messages else out

    async def aget_messages(self) -> list[BaseMessage]:
        """Async twin of :attr:`messages`."""
        return await asyncio.to_thread(lambda: self.messages)

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Record ``messages`` as one turn (``post_turn``); blank messages are skipped."""
        turn = messages_to_turn(messages)
        if not turn:
            return
        self.engine.post_turn(self.scope, turn)
        if self.wait_for_facts:
            self.engine.flush()

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Async twin of :meth:`add_messages`."""
        turn = messages_to_turn(messages)
        if not turn:
            return
        await self.engine.apost_turn(self.scope, turn)
        if self.wait_for_facts:
            await self.engine.aflush()

    def clear(self) -> None:
        """Empty the thread's transcript and working buffer (durable memories stay)."""
        clear_thread(self.engine, self.scope)

    async def aclear(self) -> None:
        """Async twin of :meth:`clear`."""
        await asyncio.to_thread(self.clear)
