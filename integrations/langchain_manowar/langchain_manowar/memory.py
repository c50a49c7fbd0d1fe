"""``ManowarMemory``: the engine as a classic-chain memory (``langchain_classic.base_memory.BaseMemory``)."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Annotated, Any

from langchain_core._api import LangChainDeprecationWarning
from langchain_core.messages import BaseMessage, SystemMessage
from pydantic import BeforeValidator, ConfigDict, Field, InstanceOf, PrivateAttr

from manowar_memory import MemoryEngine, PreTurnResult, Scope, ScopedMemory
from manowar_memory.scoped import TrustLevel

from ._convert import coerce_scope

with warnings.catch_warnings():  # importing the deprecated base is fine; using it warns once below
    warnings.simplefilter("ignore", LangChainDeprecationWarning)
    from langchain_classic.base_memory import BaseMemory

__all__ = ["ManowarMemory"]

ScopeField = Annotated[InstanceOf[Scope], BeforeValidator(coerce_scope)]


class ManowarMemory(BaseMemory):
    """Long-term memory for classic chains (``ConversationChain``, ``LLMChain(memory=...)``).

    ``load_memory_variables`` returns the packed, wrapped ``Memory context:`` block
    (``ScopedMemory.context``, the engine's ``pre_turn``) for the chain's input under
    ``memory_key`` (a string, or a one-item ``[SystemMessage]`` list with
    ``return_messages=True``); ``save_context`` records the turn (user input and chain
    output) with ``ScopedMemory.post_turn``. The scope must name a thread: without one the
    memory raises :class:`~manowar_memory.ScopeError` (a ``ValueError``) when it is built.
    ``trust`` is the trust level of what it records (the application's choice).

    Example::

        memory = ManowarMemory(engine=engine, scope=Scope(agent_wallet="a1", user_address="u1", thread_id="t1"))

    ``layers`` / ``filters`` / ``budget_chars`` / ``max_items`` / ``max_item_chars`` /
    ``rerank`` / ``mmr`` go to ``pre_turn``. ``wait_for_facts=True`` waits for the
    background fact extraction after each save (so the very next call can recall the
    facts; handy in tests and notebooks). The last pre-turn result is kept in
    ``last_result`` for inspection (items, omitted, degradations).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    engine: InstanceOf[MemoryEngine]
    """The memory engine."""
    scope: ScopeField
    """Whose memory this is, with the thread the chain's turns are recorded in."""
    trust: TrustLevel | None = None
    """Trust level of recorded turns (None: the engine's default)."""
    memory_key: str = "history"
    """The chain input variable that receives the memory context."""
    input_key: str | None = None
    """The chain input holding the user's message (default: the only input that is not a memory variable)."""
    output_key: str | None = None
    """The chain output holding the answer (default: the only output)."""
    return_messages: bool = False
    """Return ``[SystemMessage(context)]`` instead of a string (for chat prompts with a placeholder)."""
    layers: Sequence[str] | None = None
    """Layers searched before a turn (default: all six)."""
    filters: dict[str, Any] | None = None
    """Allowlisted filters narrowing the scope."""
    budget_chars: int | None = None
    max_items: int | None = None
    max_item_chars: int | None = None
    rerank: bool = False
    mmr: bool = False
    wait_for_facts: bool = False
    """Wait for background fact extraction after every ``save_context``."""
    last_result: PreTurnResult | None = Field(default=None, exclude=True)
    """The latest :class:`PreTurnResult` (kept, omitted, degradations)."""
    _memory: ScopedMemory = PrivateAttr()

    def __init__(self, **data: Any) -> None:
        super().__init__(**data)
        # outside pydantic's validation, so the ScopeError itself reaches the caller
        self._memory = self.engine.scoped(self.scope, trust=self.trust, require_thread=True)

    @property
    def memory(self) -> ScopedMemory:
        """The scoped surface every call goes through."""
        return self._memory

    @property
    def memory_variables(self) -> list[str]:
        """The single variable this memory adds to the chain's inputs."""
        return [self.memory_key]

    # ---------------------------------------------------------------- helpers
    def _input_text(self, inputs: dict[str, Any]) -> str:
        if self.input_key is not None:
            return str(inputs[self.input_key])
        keys = [k for k in inputs if k not in self.memory_variables and k != "stop"]
        if len(keys) != 1:
            raise ValueError(f"ManowarMemory cannot tell the input among {keys}; set input_key=...")
        return str(inputs[keys[0]])

    def _output_text(self, outputs: dict[str, Any]) -> str:
        if self.output_key is not None:
            return str(outputs[self.output_key])
        if len(outputs) != 1:
            raise ValueError(f"ManowarMemory cannot tell the output among {list(outputs)}; set output_key=...")
        return str(next(iter(outputs.values())))

    def _pre_turn_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"layers": list(self.layers) if self.layers else None, "filters": self.filters,
                                  "rerank": self.rerank, "mmr": self.mmr}
        for name in ("budget_chars", "max_items", "max_item_chars"):
            value = getattr(self, name)
            if value is not None:
                kwargs[name] = value
        return kwargs

    def _variables(self, result: PreTurnResult) -> dict[str, Any]:
        self.last_result = result
        if self.return_messages:
            value: str | list[BaseMessage] = [SystemMessage(content=result.prompt)] if result.prompt else []
        else:
            value = result.prompt
        return {self.memory_key: value}

    def _turn(self, inputs: dict[str, Any], outputs: dict[str, Any]) -> list[dict[str, str]]:
        turn = [
            {"role": "user", "content": self._input_text(inputs)},
            {"role": "assistant", "content": self._output_text(outputs)},
        ]
        return [m for m in turn if m["content"].strip()]

    # ---------------------------------------------------------------- BaseMemory
    def load_memory_variables(self, inputs: dict[str, Any]) -> dict[str, Any]:
        """The packed memory context for the chain's input (an empty string when nothing is relevant)."""
        query = self._input_text(inputs)
        if not query.strip():
            return {self.memory_key: [] if self.return_messages else ""}
        result = self._memory.context(query, **self._pre_turn_kwargs())
        return self._variables(result)

    async def aload_memory_variables(self, inputs: dict[str, Any]) -> dict[str, Any]:
        """Async twin of :meth:`load_memory_variables`."""
        query = self._input_text(inputs)
        if not query.strip():
            return {self.memory_key: [] if self.return_messages else ""}
        result = await self._memory.acontext(query, **self._pre_turn_kwargs())
        return self._variables(result)

    def save_context(self, inputs: dict[str, Any], outputs: dict[str, Any]) -> None:
        """Record the turn (user input, chain output) with ``post_turn``."""
        turn = self._turn(inputs, outputs)
        if not turn:
            return
        self._memory.post_turn(turn)
        if self.wait_for_facts:
            self._memory.flush()

    async def asave_context(self, inputs: dict[str, Any], outputs: dict[str, Any]) -> None:
        """Async twin of :meth:`save_context`."""
        turn = self._turn(inputs, outputs)
        if not turn:
            return
        await self._memory.apost_turn(turn)
        if self.wait_for_facts:
            await self._memory.aflush()

    def clear(self) -> None:
        """Reset the thread's short-term memory: its transcript (scene) and working buffer.

        Durable memories (facts, session summaries, patterns, archives) outlive a chain's
        session and are kept; delete them with ``ScopedMemory.delete`` or the
        ``memory_delete`` tool.
        """
        self.last_result = None
        self._memory.clear_thread()
