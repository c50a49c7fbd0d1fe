"""Any LlamaIndex ``LLM`` as the engine's chat function, for fact extraction and fact resolution.

* :class:`LlamaIndexChatFunction`: an ``LLM`` as the ``chat(messages) -> str`` function the
  engine's :class:`~manowar_memory.LLMExtractor` and :class:`~manowar_memory.LLMResolver` take
  (and, with ``acall``, the resolver's ``achat``, on ``llm.achat``).
* :func:`create_llm_extractor`: ``MemoryEngine(extractor=create_llm_extractor(llm))``.
* :func:`create_llm_resolver`: ``MemoryEngine(resolver=create_llm_resolver(llm))``.

The LLM is always passed explicitly: nothing here reads or sets ``Settings.llm``. The prompts,
the answer's validation and what is done with it are the core's.
"""

from __future__ import annotations

from typing import Any

from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.llms import LLM, CustomLLM

from manowar_memory.errors import ConfigurationError
from manowar_memory.extraction import LLMExtractor
from manowar_memory.resolver import LLMResolver

__all__ = ["LlamaIndexChatFunction", "create_llm_extractor", "create_llm_resolver"]

_ROLES = {"system": MessageRole.SYSTEM, "user": MessageRole.USER, "assistant": MessageRole.ASSISTANT}


def _model_name(llm: LLM) -> str:
    try:
        name = llm.metadata.model_name
    except Exception:  # noqa: BLE001 - a custom LLM's metadata may not be ready; the class name serves
        name = None
    return name.strip() if isinstance(name, str) and name.strip() else type(llm).__name__


class LlamaIndexChatFunction:
    """A LlamaIndex ``LLM`` as ``chat(messages) -> str``: OpenAI-style ``{"role", "content"}``
    dicts become ``ChatMessage`` objects for ``llm.chat``, and the answer's text is returned.
    Extra ``chat`` keyword arguments are bound once."""

    def __init__(self, llm: LLM, **chat_kwargs: Any) -> None:
        if not isinstance(llm, LLM):
            raise ConfigurationError(f"llm must be a LlamaIndex LLM (llama_index.core.llms.LLM), got {type(llm).__name__}")
        self.llm = llm
        self.chat_kwargs = chat_kwargs

    @staticmethod
    def to_messages(messages: list[dict[str, str]]) -> list[ChatMessage]:
        """The prompt dicts as LlamaIndex chat messages."""
        return [ChatMessage(role=_ROLES.get(m.get("role", "user"), MessageRole.USER), content=m.get("content", ""))
                for m in messages]

    def __call__(self, messages: list[dict[str, str]]) -> str:
        """Ask the LLM; the text of its answer."""
        response = self.llm.chat(self.to_messages(messages), **self.chat_kwargs)
        return response.message.content or ""

    async def acall(self, messages: list[dict[str, str]]) -> str:
        """Ask the LLM with ``achat`` (awaited on the event loop); the text of its answer."""
        response = await self.llm.achat(self.to_messages(messages), **self.chat_kwargs)
        return response.message.content or ""

    @property
    def has_async(self) -> bool:
        """Whether the LLM has an async ``achat`` of its own: a ``CustomLLM``'s inherited one
        calls the sync ``chat`` on the event loop, which would block it."""
        owner = next((k for k in type(self.llm).__mro__ if "achat" in vars(k)), None)  # who defines it
        return owner is not CustomLLM


def create_llm_extractor(
    llm: LLM, *, name: str | None = None, max_per_turn: int = 5, min_confidence: float = 0.6, max_chars: int = 240,
    **chat_kwargs: Any,
) -> LLMExtractor:
    """An :class:`~manowar_memory.LLMExtractor` that asks ``llm`` for the facts of a turn
    (stored on each fact as ``extractor: llamaindex:<model>``)."""
    return LLMExtractor(LlamaIndexChatFunction(llm, **chat_kwargs), name=name or f"llamaindex:{_model_name(llm)}",
                        max_per_turn=max_per_turn, min_confidence=min_confidence, max_chars=max_chars)


def create_llm_resolver(
    llm: LLM, *, name: str | None = None, candidates: int = 5, min_confidence: float = 0.7, max_new: int = 10,
    **chat_kwargs: Any,
) -> LLMResolver:
    """An :class:`~manowar_memory.LLMResolver` that asks ``llm`` what each new fact does to the
    nearest stored facts of its scope (ADD, UPDATE, DELETE or NONE); superseded rows name it
    as ``resolver: llamaindex:<model>``. The sync writes call ``llm.chat``; the async ones
    (``aremember`` and ``aingest`` of the engine and the scoped surface, the memory tools'
    ``acall``) await ``llm.achat`` on the event loop, unless the LLM is a
    ``CustomLLM`` without an ``achat`` of its own (whose inherited one would run ``chat`` on the
    loop): ``chat`` then runs in a worker thread."""
    chat = LlamaIndexChatFunction(llm, **chat_kwargs)
    return LLMResolver(chat, achat=chat.acall if chat.has_async else None,
                       name=name or f"llamaindex:{_model_name(llm)}",
                       candidates=candidates, min_confidence=min_confidence, max_new=max_new)
