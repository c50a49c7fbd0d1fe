"""``ManowarChatMessageHistory``: a thread's chat history over the working and scene layers."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import BaseMessage

from manowar_memory import MemoryEngine, Scope, ScopedMemory
from manowar_memory.scope import ScopeLike
from manowar_memory.scoped import TrustLevel

from ._convert import coerce_scope, messages_to_turn, stored_to_message

__all__ = ["ManowarChatMessageHistory"]


class ManowarChatMessageHistory(BaseChatMessageHistory):
    """The chat history of one thread, kept by the engine.

    Reading returns the thread's transcript (scene layer) as LangChain messages; when it
    is gone, what the working buffer still holds. ``add_messages`` records the messages
    as one turn (``ScopedMemory.post_turn``), so the transcript, the working buffer, a
    session summary row and (in the background) extracted facts are all written: the
    history feeds long-term memory. ``clear`` empties the thread's transcript and working
    buffer (and tells the query cache); durable memories stay.

    The scope must name a thread: a history without one raises
    :class:`~manowar_memory.ScopeError` (a ``ValueError``) when it is built. ``trust`` is
    the trust level of what it records (the application's choice; default the engine's).
    A ``ChatMessage`` whose role the engine does not know raises
    :class:`~manowar_memory.InvalidInputError` (see :func:`manowar_memory.scoped.chat_role`).

    Works with ``RunnableWithMessageHistory``::

        RunnableWithMessageHistory(chain, lambda session_id: ManowarChatMessageHistory(
            engine=engine, scope=scope.with_thread(session_id)))

    ``max_messages`` keeps only the latest messages when reading.
    """

    def __init__(self, *, engine: MemoryEngine, scope: ScopeLike, trust: TrustLevel | None = None,
                 max_messages: int | None = None, wait_for_facts: bool = False) -> None:
        self.engine = engine
        self.memory: ScopedMemory = engine.scoped(coerce_scope(scope), trust=trust, require_thread=True)
        if max_messages is not None and (isinstance(max_messages, bool) or not isinstance(max_messages, int)
                                         or max_messages < 1):
            raise ValueError("max_messages must be a positive integer or None")
        self.max_messages = max_messages
        self.wait_for_facts = wait_for_facts

    @property
    def scope(self) -> Scope:
        """The thread's scope."""
        return self.memory.scope

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]  # a property over LangChain's plain attribute
        """The thread's messages, oldest first."""
        out = [stored_to_message(m) for m in self.memory.messages()]
        return out[-self.max_messages:] if self.max_messages else out

    async def aget_messages(self) -> list[BaseMessage]:
        """Async twin of :attr:`messages`."""
        return await asyncio.to_thread(lambda: self.messages)

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Record ``messages`` as one turn (``post_turn``); blank messages are skipped."""
        turn = messages_to_turn(messages)
        if not turn:
            return
        self.memory.post_turn(turn)
        if self.wait_for_facts:
            self.memory.flush()

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Async twin of :meth:`add_messages`."""
        turn = messages_to_turn(messages)
        if not turn:
            return
        await self.memory.apost_turn(turn)
        if self.wait_for_facts:
            await self.memory.aflush()

    def clear(self) -> None:
        """Empty the thread's transcript and working buffer (durable memories stay)."""
        self.memory.clear_thread()

    async def aclear(self) -> None:
        """Async twin of :meth:`clear`."""
        await self.memory.aclear_thread()
