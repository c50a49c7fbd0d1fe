"""Long-term memory for LlamaIndex chat engines and agents.

Two ways in:

* :class:`ManowarMemoryBlock` plugs the engine into LlamaIndex's own ``Memory`` as one of
  its ``memory_blocks``. On every turn it returns the engine's packed context for the
  latest user message, and records each message it has not recorded yet (the chat
  history ``Memory`` hands it on every read, and the messages ``Memory`` flushes out of its
  token window) with ``post_turn``: transcript, working buffer, session summary, fact
  extraction. Each message is recorded once, so a one-turn session is remembered in the
  next one.

  LlamaIndex's ``Memory`` hands its blocks the chat history when it is read and the messages
  it flushes out of its window, never the reply it was just given: with a plain ``Memory``,
  the last reply of a session reaches the block only if the session is read again (or
  through ``block.record(memory.get_all(), session_id=...)``). :class:`ManowarBlockMemory`
  is ``Memory`` that also hands each message it is given to its Manowar blocks, so every
  reply is recorded as it arrives:

  >>> memory = ManowarBlockMemory.from_defaults(session_id="s1", token_limit=2000,
  ...                                           memory_blocks=[ManowarMemoryBlock(engine=engine, scope=scope)])

* :class:`ManowarMemory` is a ``BaseMemory`` of its own, for anything that takes
  ``memory=`` (``SimpleChatEngine``, ``ContextChatEngine``, ``FunctionAgent``...). It keeps
  the session's recent messages in process, puts the engine's packed context in front of
  them as a system message, and records the messages it is given as they arrive (each
  once, a turn at a time).

Both work on one scope through the engine's scoped surface (``engine.scoped(scope)``); the
thread is the scope's ``thread_id`` or, when the scope has none, the LlamaIndex session id.
Durable layers (graph facts, vectors) ignore the thread, so a fact told in one session is
recalled in the next. Chat roles map through :func:`manowar_memory.scoped.chat_role`
(``chatbot``/``model`` are the assistant); an unknown role raises ``InvalidInputError``.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from typing import Any, Protocol

from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.bridge.pydantic import ConfigDict, Field, PrivateAttr, field_validator
from llama_index.core.memory.memory import BaseMemoryBlock, Memory
from llama_index.core.memory.types import BaseMemory

from manowar_memory.engine import PostTurnResult, PreTurnResult
from manowar_memory.errors import ScopeError
from manowar_memory.layers import normalize_layers
from manowar_memory.scope import Scope
from manowar_memory.scoped import ScopedMemory, chat_role

from ._convert import chat_messages_to_engine, message_text
from ._fields import EngineField, ScopeField

__all__ = ["ManowarBlockMemory", "ManowarMemory", "ManowarMemoryBlock"]

_CHARS_PER_TOKEN = 4  # a conservative estimate for cutting lines when Memory asks for fewer tokens
_LOG_LIMIT = 2000  # messages remembered per thread to recognise what was recorded already

_Fingerprint = tuple[str, str]


def _query_from(messages: Sequence[ChatMessage], window: int) -> str:
    """The query for recall: the latest user message, or with ``window > 1`` the text of the
    last ``window`` messages (falling back to the latest message with text)."""
    texts = [(m.role, message_text(m)) for m in messages]
    texts = [(role, text) for role, text in texts if text]
    if not texts:
        return ""
    if window > 1:
        return "\n".join(text for _, text in texts[-window:])
    for role, text in reversed(texts):
        if role == MessageRole.USER:
            return text
    return texts[-1][1]


class _RecallFields(Protocol):
    """The recall options the block and the memory share."""

    layers: list[str] | None
    budget_chars: int | None
    max_items: int | None
    max_item_chars: int | None
    rerank: bool
    mmr: bool


def _context_kwargs(options: _RecallFields) -> dict[str, Any]:
    return {
        "layers": options.layers, "budget_chars": options.budget_chars, "max_items": options.max_items,
        "max_item_chars": options.max_item_chars, "rerank": options.rerank, "mmr": options.mmr,
    }


def _check_layers(layers: list[str] | None) -> list[str] | None:
    return None if layers is None else list(normalize_layers(layers))


def _unseen_from(log: Sequence[_Fingerprint], window: Sequence[_Fingerprint], *, arriving: bool = False) -> int:
    """Where the new messages of ``window`` start: ``window`` is a slice of the thread's
    history and ``log`` its recorded prefix; the earliest consistent alignment wins, so a
    message is never recorded twice. ``arriving``: the window holds messages just added to
    the history (after the log), so only an alignment with the log's end counts (a reply
    that repeats an earlier one word for word is still new)."""
    n = len(log)
    for start in range(max(0, n - len(window)) if arriving else 0, n):
        overlap = min(len(window), n - start)
        if (arriving and start + overlap < n) or list(log[start:start + overlap]) != list(window[:overlap]):
            continue
        return overlap
    return 0


class ManowarMemoryBlock(BaseMemoryBlock[str]):
    """A ``Memory`` block backed by the engine: packed context out, every new message in.

    ``aget`` returns the engine's packed context (``"Memory context:"`` plus the memories,
    wrapped as untrusted data, within ``budget_chars``) for the latest user message, or
    ``""`` when nothing is relevant; :attr:`last_result` keeps the full ``PreTurnResult``.
    Then it records the messages of the chat history it was handed that it has not recorded
    yet. ``aput`` (the messages ``Memory`` flushes) records the ones still new. Each message
    is recorded once per thread: the block remembers what it recorded, and on first sight of
    a thread reads its transcript, so a new block on an old session does not repeat it.
    Fact extraction runs in the background (``wait_for_facts`` waits for it).
    ``atruncate`` drops the lowest-ranked lines when ``Memory`` runs over its token limit
    (only for a block with ``priority`` > 0; priority 0 is never truncated).

    Recording needs a thread: the scope's, or the ``Memory`` session id
    (``thread_from_session``, the default). A scope without a thread and
    ``thread_from_session=False`` is refused when the block is built.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    name: str = Field(default="manowar_memory", description="Block name (the tag around its content).")
    engine: EngineField
    scope: ScopeField
    layers: list[str] | None = Field(default=None, description="Layers to search (default: the engine's).")
    budget_chars: int | None = Field(default=None, description="Character budget (default: the engine's, 900).")
    max_items: int | None = Field(default=None, description="Most memories per turn (default 6).")
    max_item_chars: int | None = Field(default=None, description="Characters per memory (default 120).")
    rerank: bool = Field(default=False, description="Rerank with the engine's reranker.")
    mmr: bool = Field(default=False, description="Order each layer by MMR (the ranking pipeline's mmr stage).")
    query_window: int = Field(default=1, ge=1, description="1: query with the latest user message; n: the last n messages.")
    thread_from_session: bool = Field(
        default=True, description="Use the Memory session id as thread when the scope has none."
    )
    extract_facts: bool = Field(default=True, description="Queue fact extraction for recorded messages.")
    wait_for_facts: bool = Field(default=False, description="Wait for fact extraction before recording returns.")

    _memory: ScopedMemory = PrivateAttr()
    _logs: dict[str, list[_Fingerprint]] = PrivateAttr(default_factory=dict)
    _last_result: PreTurnResult | None = PrivateAttr(default=None)

    @field_validator("layers")
    @classmethod
    def _valid_layers(cls, value: list[str] | None) -> list[str] | None:
        """Reject unknown layer names when the object is built, not on the first turn."""
        return _check_layers(value)

    def model_post_init(self, context: Any, /) -> None:
        """Bind the block to its scope; refuse a block that could never record."""
        super().model_post_init(context)
        if self.scope.thread_id is None and not self.thread_from_session:
            raise ScopeError(
                "ManowarMemoryBlock needs a thread to record messages: give the scope a thread_id, or keep "
                "thread_from_session=True to use the Memory session id"
            )
        self._memory = self.engine.scoped(self.scope)

    @property
    def last_result(self) -> PreTurnResult | None:
        """The engine's result for the latest ``aget`` (None before the first, or when there was no query)."""
        return self._last_result

    def scope_for(self, session_id: str | None) -> Scope:
        """The scope of a session: the block's scope, with the session as thread when it has none."""
        return self._thread(session_id).scope

    def _thread(self, session_id: str | None) -> ScopedMemory:
        if self.scope.thread_id is None and self.thread_from_session and session_id:
            return self._memory.with_thread(session_id)
        return self._memory

    async def _aget(
        self, messages: list[ChatMessage] | None = None, session_id: str | None = None, **block_kwargs: Any
    ) -> str:
        """The packed context for the latest user message (``""`` when none or nothing
        relevant); then the new messages of ``messages`` are recorded."""
        history = list(messages or [])
        query = _query_from(history, self.query_window)
        result = await self._thread(session_id).acontext(query, **_context_kwargs(self)) if query else None
        self._last_result = result
        if session_id is not None or self.scope.thread_id is not None:
            await self.arecord(history, session_id=session_id)
        return result.prompt if result is not None else ""

    async def _aput(self, messages: list[ChatMessage]) -> None:
        """Record the messages flushed from short-term memory that are still new."""
        await self.arecord(messages)

    def _new(self, messages: Sequence[ChatMessage], session_id: str | None,
             arriving: bool = False) -> tuple[ScopedMemory, list[dict[str, str]]] | None:
        engine_messages = chat_messages_to_engine(messages)
        if not engine_messages:
            return None
        if session_id is None:
            stamped = [m.additional_kwargs.get("session_id") for m in messages if m.additional_kwargs]
            session_id = next((s for s in stamped if isinstance(s, str) and s), None)
        thread = self._thread(session_id)
        key = thread.scope.thread_id
        if key is None:
            raise ScopeError("recording needs a thread: pass session_id, or give the scope a thread_id")
        log = self._logs.get(key)
        if log is None:  # first sight of this thread in this block: what was recorded before
            log = self._logs[key] = [(m.role, m.content.strip()) for m in thread.messages()]
        window = [(m["role"], m["content"]) for m in engine_messages]
        fresh = engine_messages[_unseen_from(log, window, arriving=arriving):]
        if not fresh:
            return None
        log.extend((m["role"], m["content"]) for m in fresh)
        del log[:-_LOG_LIMIT]
        return thread, fresh

    async def arecord(self, messages: Sequence[ChatMessage], session_id: str | None = None, *,
                      arriving: bool = False) -> PostTurnResult | None:
        """Record the messages of ``messages`` this block has not recorded yet (``post_turn``);
        None when there are none with text.

        The session comes from ``session_id`` or from the messages (``Memory`` stamps
        ``additional_kwargs['session_id']`` on what it flushes); it is the thread when
        the scope has none. ``arriving``: the messages were just added to the history (after
        what was recorded), so only a match with the end of what was recorded counts as seen.
        """
        prepared = await asyncio.to_thread(self._new, messages, session_id, arriving)  # may read the transcript
        if prepared is None:
            return None
        thread, fresh = prepared
        result = await thread.apost_turn(fresh, extract_facts=self.extract_facts)
        if self.wait_for_facts:
            await thread.aflush()
        return result

    def record(self, messages: Sequence[ChatMessage], session_id: str | None = None) -> PostTurnResult | None:
        """Sync twin of :meth:`arecord`."""
        prepared = self._new(messages, session_id)
        if prepared is None:
            return None
        thread, fresh = prepared
        result = thread.post_turn(fresh, extract_facts=self.extract_facts)
        if self.wait_for_facts:
            thread.flush()
        return result

    async def atruncate(self, content: str, tokens_to_truncate: int) -> str | None:
        """Drop memory lines from the end (the lowest ranked) until about ``tokens_to_truncate``
        tokens are saved; None when no memory line is left."""
        lines = content.split("\n")
        header, items = lines[0], lines[1:]
        target = max(0, tokens_to_truncate) * _CHARS_PER_TOKEN
        removed = 0
        while items and removed < target:
            removed += len(items.pop()) + 1
        return "\n".join([header, *items]) if items else None


class ManowarBlockMemory(Memory):
    """LlamaIndex ``Memory`` that also records every message it is given in its
    :class:`ManowarMemoryBlock` blocks, as it arrives (a plain ``Memory`` never hands a block
    the session's last reply). Built like ``Memory`` (``from_defaults``); other blocks work
    as in ``Memory``."""

    async def _record(self, messages: Sequence[ChatMessage]) -> None:
        blocks = [b for b in self.memory_blocks if isinstance(b, ManowarMemoryBlock)]
        if blocks and messages:
            await asyncio.gather(*(b.arecord(list(messages), self.session_id, arriving=True) for b in blocks))

    async def aput(self, message: ChatMessage) -> None:
        """Add a message (``Memory.aput``), then record it in the Manowar blocks."""
        await super().aput(message)
        await self._record([message])

    async def aput_messages(self, messages: list[ChatMessage]) -> None:
        """Add messages (``Memory.aput_messages``), then record them in the Manowar blocks."""
        await super().aput_messages(messages)
        await self._record(messages)


class ManowarMemory(BaseMemory):
    """A ``BaseMemory`` backed by the engine, for chat engines and agents (``memory=``).

    * ``get(input)``: the session's recent messages (at most ``max_messages``, starting at
      a user message; a leading system message is kept), with the engine's packed context
      for ``input`` (or the latest user message) in front as a system message, merged into
      the session's own system message when there is one.
    * ``put(message)`` / ``put_messages``: append to the session; each message is recorded
      once, a turn at a time: when an assistant reply with text arrives, the messages since
      the last recording (user, tool calls and results, the reply) go to ``post_turn``.
      :meth:`commit` records pending messages early (a question with no reply yet).
    * ``set`` replaces the session's messages without recording them (they are history
      already); ``reset`` clears the session. Long-term memory is never erased by either.

    A memory built for a named session (``session_id=`` or a scope with a thread) starts
    with that thread's recorded messages, so a session goes on across processes; what
    persists across sessions is what the engine recorded. Unknown keyword arguments raise.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    engine: EngineField
    scope: ScopeField
    session_id: str | None = Field(default=None, description="Session id (default: the scope's thread, else a new id).")
    max_messages: int = Field(default=40, ge=1, description="Most recent messages returned by get().")
    layers: list[str] | None = Field(default=None, description="Layers to search (default: the engine's).")
    budget_chars: int | None = Field(default=None, description="Character budget (default: the engine's, 900).")
    max_items: int | None = Field(default=None, description="Most memories per turn (default 6).")
    max_item_chars: int | None = Field(default=None, description="Characters per memory (default 120).")
    rerank: bool = Field(default=False, description="Rerank with the engine's reranker.")
    mmr: bool = Field(default=False, description="Order each layer by MMR (the ranking pipeline's mmr stage).")
    extract_facts: bool = Field(default=True, description="Queue fact extraction for recorded turns.")

    _memory: ScopedMemory = PrivateAttr()
    _history: list[ChatMessage] = PrivateAttr(default_factory=list)
    _pending: list[ChatMessage] = PrivateAttr(default_factory=list)
    _last_result: PreTurnResult | None = PrivateAttr(default=None)

    @field_validator("layers")
    @classmethod
    def _valid_layers(cls, value: list[str] | None) -> list[str] | None:
        """Reject unknown layer names when the object is built, not on the first turn."""
        return _check_layers(value)

    def model_post_init(self, context: Any, /) -> None:
        """Pick the session id (given, else the scope's thread, else a fresh one) and bind the
        memory to that thread of its scope."""
        super().model_post_init(context)
        resumed = self.session_id is not None or self.scope.thread_id is not None
        if self.session_id is None:
            self.session_id = self.scope.thread_id or f"li-{uuid.uuid4().hex[:16]}"
        scope = self.scope if self.scope.thread_id else self.scope.with_thread(self.session_id)
        self._memory = self.engine.scoped(scope, require_thread=True)
        if resumed:  # a named session goes on where it stopped, in this process or another
            self._history = [ChatMessage(role=MessageRole(m.role), content=m.content) for m in self._memory.messages()]

    @classmethod
    def class_name(cls) -> str:
        """Class name for serialisation."""
        return "ManowarMemory"

    @classmethod
    def from_defaults(  # type: ignore[override]  # BaseMemory.from_defaults takes no engine or scope
        cls, *, engine: Any, scope: Any, chat_history: list[ChatMessage] | None = None, **kwargs: Any
    ) -> ManowarMemory:
        """A memory for ``engine`` and ``scope``; ``chat_history`` seeds the session (not recorded)."""
        memory = cls(engine=engine, scope=scope, **kwargs)
        if chat_history:
            memory.set(chat_history)
        return memory

    @property
    def last_result(self) -> PreTurnResult | None:
        """The engine's result for the latest ``get`` (None when there was no query)."""
        return self._last_result

    @property
    def thread_scope(self) -> Scope:
        """The scope turns are recorded in: the scope, with the session as thread when it has none."""
        return self._memory.scope

    # ---------------------------------------------------------------- reads
    def _window(self) -> list[ChatMessage]:
        history = list(self._history)
        pinned = [history.pop(0)] if history and history[0].role == MessageRole.SYSTEM else []
        window = history[-self.max_messages:]
        first_user = next((i for i, m in enumerate(window) if m.role == MessageRole.USER), None)
        if first_user:
            window = window[first_user:]  # start at a user message, as chat APIs expect
        return pinned + window

    def _query(self, value: str | ChatMessage | None) -> str:
        if isinstance(value, ChatMessage):
            return message_text(value)
        if isinstance(value, str) and value.strip():
            return value.strip()
        return _query_from(self._history, 1)

    def _with_context(self, messages: list[ChatMessage], result: PreTurnResult | None) -> list[ChatMessage]:
        if result is None or not result.prompt:
            return messages
        if messages and messages[0].role == MessageRole.SYSTEM:
            own = message_text(messages[0])
            merged = ChatMessage(role=MessageRole.SYSTEM, content=f"{result.prompt}\n\n{own}" if own else result.prompt)
            return [merged, *messages[1:]]
        return [ChatMessage(role=MessageRole.SYSTEM, content=result.prompt), *messages]

    def get(self, input: str | None = None, **kwargs: Any) -> list[ChatMessage]:  # noqa: A002 - LlamaIndex's parameter name
        """Recent messages with the recalled context in front (extra keyword arguments, such
        as ``initial_token_count`` from chat engines, are accepted and ignored, as
        LlamaIndex's own memories do)."""
        query = self._query(input)
        result = self._memory.context(query, **_context_kwargs(self)) if query else None
        self._last_result = result
        return self._with_context(self._window(), result)

    async def aget(self, input: str | None = None, **kwargs: Any) -> list[ChatMessage]:  # noqa: A002 - LlamaIndex's parameter name
        """Async twin of :meth:`get`."""
        query = self._query(input)
        result = await self._memory.acontext(query, **_context_kwargs(self)) if query else None
        self._last_result = result
        return self._with_context(self._window(), result)

    def get_all(self) -> list[ChatMessage]:
        """Every message of the session."""
        return list(self._history)

    async def aget_all(self) -> list[ChatMessage]:
        """Async twin of :meth:`get_all`."""
        return self.get_all()

    # ---------------------------------------------------------------- writes
    def _take_turn(self, message: ChatMessage) -> list[dict[str, str]] | None:
        role = chat_role(message.role)  # an unknown role is refused before it is kept
        self._history.append(message)
        self._pending.append(message)
        if role == "assistant" and message_text(message):
            return self._drain()
        return None

    def _drain(self) -> list[dict[str, str]] | None:
        pending, self._pending = self._pending, []
        engine_messages = chat_messages_to_engine(pending)
        return engine_messages or None

    def put(self, message: ChatMessage) -> None:
        """Add a message; a reply with text records the messages since the last recording."""
        turn = self._take_turn(message)
        if turn:
            self._memory.post_turn(turn, extract_facts=self.extract_facts)

    async def aput(self, message: ChatMessage) -> None:
        """Async twin of :meth:`put`."""
        turn = self._take_turn(message)
        if turn:
            await self._memory.apost_turn(turn, extract_facts=self.extract_facts)

    def put_messages(self, messages: list[ChatMessage]) -> None:
        """Add several messages in order."""
        for message in messages:
            self.put(message)

    async def aput_messages(self, messages: list[ChatMessage]) -> None:
        """Async twin of :meth:`put_messages`."""
        for message in messages:
            await self.aput(message)

    def commit(self) -> PostTurnResult | None:
        """Record the messages not yet recorded (for example a user message with no reply
        yet) now; None when there were none with text."""
        turn = self._drain()
        return self._memory.post_turn(turn, extract_facts=self.extract_facts) if turn else None

    async def acommit(self) -> PostTurnResult | None:
        """Async twin of :meth:`commit`."""
        turn = self._drain()
        return await self._memory.apost_turn(turn, extract_facts=self.extract_facts) if turn else None

    def set(self, messages: list[ChatMessage]) -> None:
        """Replace the session's messages (not recorded: they are history already)."""
        chat_messages_to_engine(messages)  # unknown roles are refused here too
        self._history = list(messages)
        self._pending = []

    async def aset(self, messages: list[ChatMessage]) -> None:
        """Async twin of :meth:`set`."""
        self.set(messages)

    def reset(self) -> None:
        """Clear the session: its messages here and its recorded thread (transcript and working
        buffer). Long-term memory (facts, session rows) stays."""
        self._history = []
        self._pending = []
        self._memory.clear_thread()

    async def areset(self) -> None:
        """Async twin of :meth:`reset`."""
        self._history = []
        self._pending = []
        await self._memory.aclear_thread()
