"""Offline chat models for tests, demos and notebooks (no network, deterministic).

* :class:`ScriptedToolChatModel`: answers with a scripted list of messages (tool calls
  included) and accepts ``bind_tools``, so ``create_agent`` can drive it.
* :class:`MemoryEchoChatModel`: answers from the ``Memory context:`` block it was given,
  repeating the remembered lines that share a word with the question; it shows that a
  fact reached the model through memory and nowhere else.

Both record the messages of every call in ``calls``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool
from pydantic import Field

__all__ = ["MemoryEchoChatModel", "ScriptedToolChatModel", "memory_block"]

HEADER = "Memory context:"
_STOP = frozenset("""a an and are as at be by can did do does for from had has have how i in is it its me my of
on or our she that the their them they this to was we were what when where which who why will with you your
user user's about tell know remember""".split())


def query_terms(text: str) -> list[str]:
    """Lower-cased content words of ``text`` (three letters or more, common words dropped)."""
    return [w for w in re.findall(r"[\w']+", text.lower()) if len(w) > 2 and w not in _STOP]


def _text(message: BaseMessage) -> str:
    return message.content if isinstance(message.content, str) else message.text


_OPENING = re.compile(r"<<<UNTRUSTED_[0-9a-f]{8,64}>>>")
_CLOSING = re.compile(r"<<<END_UNTRUSTED_[0-9a-f]{8,64}>>>")


def memory_block(messages: Sequence[BaseMessage], header: str = HEADER) -> list[str]:
    """The item lines of the last ``Memory context:`` block found in ``messages`` (without the
    header and without the untrusted-content wrapper's marker, ``Source:`` and ``---`` lines)."""
    for message in reversed(list(messages)):
        text = _text(message)
        at = text.rfind(header)
        if at < 0:
            continue
        lines = []
        wrapped = False
        for line in text[at + len(header):].splitlines()[1:]:
            if _OPENING.fullmatch(line):
                wrapped = True
            elif wrapped and _CLOSING.fullmatch(line):
                wrapped = False
            elif wrapped and (line.startswith("Source: ") or line == "---"):
                continue
            elif line.startswith("["):
                lines.append(line)
            else:
                break
        return lines
    return []


class ScriptedToolChatModel(GenericFakeChatModel):
    """``GenericFakeChatModel`` that accepts ``bind_tools`` (tools are ignored; the script decides).

    Example::

        model = ScriptedToolChatModel(messages=iter([AIMessage("", tool_calls=[...]), AIMessage("done")]))
    """

    calls: list[list[BaseMessage]] = Field(default_factory=list)

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any) -> ChatResult:
        self.calls.append(list(messages))
        message = next(self.messages)
        reply = AIMessage(content=message) if isinstance(message, str) else message
        return ChatResult(generations=[ChatGeneration(message=reply)])

    def bind_tools(self, tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool], *,
                   tool_choice: str | None = None, **kwargs: Any) -> Runnable[LanguageModelInput, AIMessage]:
        """Accept the agent's tools; the script already says what to call."""
        return self


class MemoryEchoChatModel(BaseChatModel):
    """Answers ``I remember: <lines>`` with the memory lines that share a word with the question,
    or ``I don't know.`` when none does. Accepts ``bind_tools`` (and never calls a tool)."""

    calls: list[list[BaseMessage]] = Field(default_factory=list)
    prefix: str = "I remember: "

    @property
    def _llm_type(self) -> str:
        return "memory-echo"

    @staticmethod
    def _question(messages: Sequence[BaseMessage]) -> str:
        for message in reversed(list(messages)):
            if isinstance(message, HumanMessage):
                text = _text(message)
                # classic chains render the whole prompt into one message: keep the last "Human:" line
                if "Human:" in text:
                    text = text.rsplit("Human:", 1)[1].split("\nAI:", 1)[0]
                return text.strip()
        return ""

    def answer(self, messages: Sequence[BaseMessage]) -> str:
        """The reply for ``messages``."""
        terms = set(query_terms(self._question(messages)))
        relevant = [line.split("] ", 1)[-1] for line in memory_block(messages)
                    if terms & set(query_terms(line))]
        return self.prefix + " ".join(relevant) if relevant else "I don't know."

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any) -> ChatResult:
        self.calls.append(list(messages))
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=self.answer(messages)))])

    def bind_tools(self, tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool], *,
                   tool_choice: str | None = None, **kwargs: Any) -> Runnable[LanguageModelInput, AIMessage]:
        """Accept the agent's tools (this model only talks)."""
        return self
