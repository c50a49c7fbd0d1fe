"""A fact extractor and a fact resolver driven by any LangChain chat model."""

from __future__ import annotations

from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage

from manowar_memory.extraction import LLMExtractor
from manowar_memory.resolver import LLMResolver

__all__ = ["ChatModelFunction", "create_llm_extractor", "create_llm_resolver"]


def _model_name(model: BaseChatModel) -> str:
    for attr in ("model_name", "model", "model_id"):
        value = getattr(model, attr, None)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return type(model).__name__


class ChatModelFunction:
    """A LangChain chat model as the ``chat(messages) -> str`` function :class:`LLMExtractor` takes
    (and, with :meth:`acall`, the ``achat`` coroutine function :class:`LLMResolver` also takes).

    OpenAI-style ``{"role", "content"}`` dicts become System/Human/AI messages; the
    answer's text is returned. Extra ``invoke`` keyword arguments (``temperature=0``...)
    are bound once.
    """

    def __init__(self, model: BaseChatModel, **invoke_kwargs: Any) -> None:
        self.model = model
        self.invoke_kwargs = invoke_kwargs

    @staticmethod
    def to_messages(messages: list[dict[str, str]]) -> list[BaseMessage]:
        """The prompt dicts as LangChain messages."""
        kinds = {"system": SystemMessage, "user": HumanMessage, "assistant": AIMessage}
        out: list[BaseMessage] = []
        for m in messages:
            cls = kinds.get(m.get("role", "user"), HumanMessage)
            out.append(cls(content=m.get("content", "")))
        return out

    def __call__(self, messages: list[dict[str, str]]) -> str:
        """Ask the model; the text of its answer."""
        return _text(self.model.invoke(self.to_messages(messages), **self.invoke_kwargs))

    async def acall(self, messages: list[dict[str, str]]) -> str:
        """Ask the model with ``ainvoke`` (awaited on the event loop); the text of its answer."""
        return _text(await self.model.ainvoke(self.to_messages(messages), **self.invoke_kwargs))


def _text(answer: object) -> str:
    return answer.text if isinstance(answer, BaseMessage) else str(answer)


def create_llm_extractor(
    model: BaseChatModel,
    *,
    name: str | None = None,
    max_per_turn: int = 5,
    min_confidence: float = 0.6,
    max_chars: int = 240,
    **invoke_kwargs: Any,
) -> LLMExtractor:
    """An :class:`~manowar_memory.LLMExtractor` that asks ``model`` for the facts of a turn.

    Pass it as ``MemoryEngine(extractor=create_llm_extractor(ChatOpenAI(model="gpt-5-mini")))``.
    The extractor's name (stored on each fact as ``extractor``) is ``langchain:<model>``.
    """
    return LLMExtractor(
        ChatModelFunction(model, **invoke_kwargs), name=name or f"langchain:{_model_name(model)}",
        max_per_turn=max_per_turn, min_confidence=min_confidence, max_chars=max_chars,
    )


def create_llm_resolver(
    model: BaseChatModel,
    *,
    name: str | None = None,
    candidates: int = 5,
    min_confidence: float = 0.7,
    max_new: int = 10,
    **invoke_kwargs: Any,
) -> LLMResolver:
    """An :class:`~manowar_memory.LLMResolver` that asks ``model`` what each new fact does to
    the nearest stored facts of its scope (ADD, UPDATE, DELETE or NONE).

    Pass it as ``MemoryEngine(resolver=create_llm_resolver(ChatOpenAI(model="gpt-5-mini")))``.
    Superseded rows name it (``resolver``) as ``langchain:<model>``. The sync writes call the
    model with ``invoke``; the async ones (``aremember`` and ``aingest`` of the engine and the
    scoped surface, the memory tools' ``ainvoke``) await ``ainvoke`` on the event loop. All the rules are the core's: this only adapts the model to the chat functions.
    """
    chat = ChatModelFunction(model, **invoke_kwargs)
    return LLMResolver(
        chat, achat=chat.acall, name=name or f"langchain:{_model_name(model)}",
        candidates=candidates, min_confidence=min_confidence, max_new=max_new,
    )
