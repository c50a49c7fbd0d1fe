"""``ManowarMemoryMiddleware``: recall before the model, record after it, for ``create_agent``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from langchain.agents.middleware import AgentMiddleware, AgentState, ModelRequest, ModelResponse
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage, SystemMessage
from langgraph.runtime import Runtime

from manowar_memory import MemoryEngine, PreTurnResult, Scope, ScopedMemory, ScopeError
from manowar_memory.scope import ScopeLike
from manowar_memory.scoped import TrustLevel

from ._convert import coerce_scope, identity, message_text, messages_to_turn
from .tools import create_manowar_tools

__all__ = ["ManowarMemoryMiddleware", "run_identity"]

ScopeResolver = Callable[[Runtime[Any]], ScopeLike]


def _configurable() -> Mapping[str, Any]:
    """The run's ``config["configurable"]`` (empty outside a graph run)."""
    try:
        from langgraph.config import get_config

        configurable = get_config().get("configurable") or {}
    except RuntimeError:  # not inside a graph run
        return {}
    return configurable if isinstance(configurable, Mapping) else {}


def run_identity(runtime: Runtime[Any] | None) -> tuple[str | None, str | None]:
    """The run's ``(user_id, thread_id)``: ``runtime.context`` first, then ``config["configurable"]``."""
    return identity(getattr(runtime, "context", None) if runtime is not None else None, _configurable())


def _last_human_index(messages: Sequence[BaseMessage]) -> int | None:
    for i in range(len(messages) - 1, -1, -1):
        if isinstance(messages[i], HumanMessage):
            return i
    return None


def _with_context(system: SystemMessage | None, block: str) -> SystemMessage:
    if system is None:
        return SystemMessage(content=block)
    if isinstance(system.content, str):
        text = system.content.rstrip()
        return SystemMessage(content=f"{text}\n\n{block}" if text else block)
    return SystemMessage(content=[*system.content, {"type": "text", "text": block}])


class ManowarMemoryMiddleware(AgentMiddleware):
    """Agent middleware that gives a ``create_agent`` agent long-term memory.

    Before every model call it asks the scoped surface for the memory context of the
    latest user message (``ScopedMemory.context``, the engine's ``pre_turn``) and appends
    the packed, wrapped ``Memory context:`` block to the system message of that call only
    (the conversation state is not changed). After the model gives its final answer (an
    AI message without tool calls) it records the turn, from the user's message through
    tool calls and results to the answer, with ``ScopedMemory.post_turn``.

    ``engine`` and ``scope`` are required. One agent serves every user of an app: the
    scope is resolved per run (before the model is first called, in ``before_agent``):

    * the user: a scope with a user binds the middleware to that user (a run naming
      another user raises :class:`~manowar_memory.ScopeError`); an agent-level scope (no
      user) takes the run's ``user_id``;
    * the thread: the scope's ``thread_id``, else the run's ``thread_id``
      (``thread_from_config``), else ``default_thread``;
    * the run's ``user_id`` and ``thread_id`` are read from ``runtime.context`` (an object
      or a mapping with those fields) and from ``config["configurable"]``; where both
      set one, ``runtime.context`` wins (it is the typed, per-run context of
      ``create_agent``; ``configurable`` is LangGraph's untyped channel, where the
      checkpointer's ``thread_id`` lives).

    ``scope_resolver`` derives the scope from the runtime instead (the application's own
    rule for the user); a resolved scope without a thread still takes the run's thread.
    A recording run that ends up without a thread, or without a user while the
    application has not allowed user-less turns (``allow_no_user=True`` on an engine built
    with ``MemoryConfig(single_tenant=True)``; turns then go to the agent's shared space),
    fails before the model is called, with a
    :class:`~manowar_memory.ScopeError` naming ``configurable.thread_id`` /
    ``configurable.user_id``, so no answer is lost. ``trust`` is the trust level of what it
    records and of what its tools write (the application's choice).
    ``tools=True`` (or a list of catalog names such as ``["memory_remember",
    "memory_search"]``) also registers the memory tools of ``scope``; with an agent-level
    scope (and without ``allow_no_user``) they act for the run's ``user_id``
    (``runtime.context``, else ``configurable``), as the recall and recording do.
    ``record=False`` disables recording; ``wait_for_facts=True`` waits for fact extraction
    after each recorded turn. The latest recall is kept in ``last_result``.

    Example::

        agent = create_agent(model, tools=[...], middleware=[ManowarMemoryMiddleware(engine=engine, scope=scope)])
    """

    def __init__(
        self,
        *,
        engine: MemoryEngine,
        scope: ScopeLike,
        trust: TrustLevel | None = None,
        layers: Sequence[str] | None = None,
        filters: dict[str, Any] | None = None,
        budget_chars: int | None = None,
        max_items: int | None = None,
        max_item_chars: int | None = None,
        rerank: bool = False,
        mmr: bool = False,
        record: bool = True,
        wait_for_facts: bool = False,
        thread_from_config: bool = True,
        scope_resolver: ScopeResolver | None = None,
        tools: bool | Iterable[str] = False,
        default_thread: str | None = None,
        allow_no_user: bool = False,
    ) -> None:
        super().__init__()
        self.engine = engine
        self.scope = coerce_scope(scope)
        self.trust = trust
        self.memory: ScopedMemory = engine.scoped(self.scope, trust=trust)
        if default_thread is not None and (not isinstance(default_thread, str) or not default_thread.strip()):
            raise ScopeError(f"default_thread must be a non-blank thread id, got {default_thread!r}")
        self.default_thread = default_thread
        self.allow_no_user = allow_no_user
        if (record and self.scope.thread_id is None and default_thread is None and not thread_from_config
                and scope_resolver is None):
            raise ScopeError(
                "this middleware records turns, which needs a thread: pass Scope(..., thread_id=...), keep "
                "thread_from_config=True (the run's configurable thread_id), set default_thread=... or give a "
                "scope_resolver"
            )
        self.layers = list(layers) if layers else None
        self.filters = filters
        self.budget_chars = budget_chars
        self.max_items = max_items
        self.max_item_chars = max_item_chars
        self.rerank = rerank
        self.mmr = mmr
        self.record = record
        self.wait_for_facts = wait_for_facts
        self.thread_from_config = thread_from_config
        self.scope_resolver = scope_resolver
        self.last_result: PreTurnResult | None = None
        if tools:
            self.tools = create_manowar_tools(engine, self.scope, trust=trust,
                                              include=None if tools is True else list(tools),
                                              per_call_user=self.scope.user_address is None and not allow_no_user)
        else:
            self.tools = []

    # ---------------------------------------------------------------- helpers
    def resolve_scope(self, runtime: Runtime[Any] | None) -> Scope:
        """The scope of this run: the resolver's (or the configured one with the run's user), with
        the scope's thread, else the run's, else ``default_thread`` (see the class docstring)."""
        user, thread = run_identity(runtime)
        if self.scope_resolver is not None and runtime is not None:
            scope = coerce_scope(self.scope_resolver(runtime))
        elif user is not None and self.scope.user_address is None:
            scope = replace(self.scope, user_address=user)
        elif user is not None and user != self.scope.user_address:
            raise ScopeError(
                f"this middleware is bound to user {self.scope.user_address!r}; the run names user {user!r}. Build "
                "it with an agent-level scope (no user) to take the user from each run"
            )
        else:
            scope = self.scope
        if scope.thread_id is None:
            run_thread = thread if self.thread_from_config else None
            if run_thread is not None or self.default_thread is not None:
                scope = scope.with_thread(run_thread or self.default_thread)
        return scope

    def check_run(self, runtime: Runtime[Any] | None) -> Scope:
        """Resolve the run's scope and check that recording can succeed, before any model call."""
        scope = self.resolve_scope(runtime)
        if not self.record:
            return scope
        if scope.thread_id is None:
            raise ScopeError(
                "this run has no thread to record the turn in: pass config={'configurable': {'thread_id': ...}} "
                "(configurable.thread_id, or thread_id in the run's context), or build the middleware with "
                "default_thread=... or a scope with thread_id"
            )
        if scope.user_address is None and not self.allow_no_user:
            raise ScopeError(
                "this run names no user, so its turn would become memory of every user of the agent: pass "
                "configurable.user_id (config={'configurable': {'user_id': ...}}) or user_id in the run's context, "
                "or allow_no_user=True if user-less turns are meant to be shared"
            )
        # the engine's own rule for recording (a user-less turn needs a single-tenant engine)
        (self.memory if scope == self.scope else self.engine.scoped(scope, trust=self.trust)).check_can_record()
        return scope

    def memory_for(self, runtime: Runtime[Any] | None) -> ScopedMemory:
        """The scoped surface of this run (see :meth:`resolve_scope`)."""
        scope = self.resolve_scope(runtime)
        if scope == self.scope:
            return self.memory
        return self.engine.scoped(scope, trust=self.trust)

    def _pre_turn_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"layers": self.layers, "filters": self.filters, "rerank": self.rerank,
                                  "mmr": self.mmr}
        for name in ("budget_chars", "max_items", "max_item_chars"):
            value = getattr(self, name)
            if value is not None:
                kwargs[name] = value
        return kwargs

    @staticmethod
    def _query(messages: Sequence[AnyMessage]) -> str | None:
        index = _last_human_index(messages)
        if index is None:
            return None
        text = message_text(messages[index]).strip()
        return text or None

    def _inject(self, request: ModelRequest, result: PreTurnResult) -> ModelRequest:
        self.last_result = result
        if not result.prompt:
            return request
        return request.override(system_message=_with_context(request.system_message, result.prompt))

    def _turn(self, state: AgentState[Any]) -> list[dict[str, Any]] | None:
        messages: list[BaseMessage] = list(state.get("messages") or [])
        if not messages or not isinstance(messages[-1], AIMessage) or messages[-1].tool_calls:
            return None  # not the final answer yet
        start = _last_human_index(messages)
        if start is None:
            return None
        turn = messages_to_turn(messages[start:])
        return turn if any(m["role"] == "user" for m in turn) else None

    # ---------------------------------------------------------------- hooks
    def wrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], ModelResponse]
    ) -> ModelResponse:
        """Append the memory context for the latest user message to this call's system message."""
        query = self._query(request.messages)
        if query is not None:
            result = self.memory_for(request.runtime).context(query, **self._pre_turn_kwargs())
            request = self._inject(request, result)
        return handler(request)

    async def awrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], Awaitable[ModelResponse]]
    ) -> ModelResponse:
        """Async twin of :meth:`wrap_model_call`."""
        query = self._query(request.messages)
        if query is not None:
            result = await self.memory_for(request.runtime).acontext(query, **self._pre_turn_kwargs())
            request = self._inject(request, result)
        return await handler(request)

    def before_agent(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Resolve this run's scope and fail now, before the model answers, if it cannot be recorded."""
        self.check_run(runtime)
        return None

    async def abefore_agent(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Async twin of :meth:`before_agent`."""
        self.check_run(runtime)
        return None

    def after_model(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Record the finished turn with ``post_turn`` (nothing while the model is still calling tools)."""
        turn = self._turn(state) if self.record else None
        if turn:
            memory = self.memory_for(runtime)
            memory.post_turn(turn)
            if self.wait_for_facts:
                memory.flush()
        return None

    async def aafter_model(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Async twin of :meth:`after_model`."""
        turn = self._turn(state) if self.record else None
        if turn:
            memory = self.memory_for(runtime)
            await memory.apost_turn(turn)
            if self.wait_for_facts:
                await memory.aflush()
        return None
