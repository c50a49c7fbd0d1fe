"""A LlamaIndex LLM driving the engine's fact extraction and fact resolution
(create_llm_extractor, create_llm_resolver): the adapter only turns the LLM into the core's
chat function."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from llama_index.core.base.llms.types import ChatMessage, ChatResponse, MessageRole
from llama_index.core.llms import CompletionResponse, CompletionResponseGen, CustomLLM, LLMMetadata
from llama_index.core.llms.mock import MockLLM
from pydantic import Field

from llama_index_manowar import LlamaIndexChatFunction, ManowarToolSpec, create_llm_extractor, create_llm_resolver
from manowar_memory import LLMExtractor, LLMResolver, MemoryEngine, Scope
from manowar_memory.errors import ConfigurationError
from manowar_memory.stores.base import MemoryQuery

MAYA = Scope(agent_wallet="agent-li", user_address="maya", thread_id="t1")
T0 = 1_772_452_800_000


class ScriptedLLM(CustomLLM):
    """A custom LLM that answers from a script and keeps what it was asked."""

    answers: list[str] = Field(default_factory=list)
    asked: list[str] = Field(default_factory=list)

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name="scripted-1", is_chat_model=False)

    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        self.asked.append(prompt)
        if not self.answers:
            raise RuntimeError("script exhausted")
        return CompletionResponse(text=self.answers.pop(0))

    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseGen:
        yield self.complete(prompt, formatted, **kwargs)


class ChatOnlyLLM(MockLLM):
    """An LLM whose chat endpoint gets the messages as they are."""

    seen: list[list[ChatMessage]] = Field(default_factory=list)

    def chat(self, messages: Any, **kwargs: Any) -> ChatResponse:
        self.seen.append(list(messages))
        return ChatResponse(message=ChatMessage(role=MessageRole.ASSISTANT, content='{"facts": []}'))


@pytest.fixture
def engine() -> Iterator[MemoryEngine]:
    eng = MemoryEngine(store="sqlite:///:memory:", embedder="fake")
    yield eng
    eng.close()


def _decision(event: str, target: str | None) -> str:
    return json.dumps({"decisions": [{"fact": "N1", "event": event, "target": target, "reason": "new editor",
                                      "confidence": 0.95}]})


def test_the_chat_function_maps_roles_and_returns_the_text() -> None:
    llm = ChatOnlyLLM()
    chat = LlamaIndexChatFunction(llm)
    assert chat([{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
                 {"role": "assistant", "content": "a"}]) == '{"facts": []}'
    assert [m.role for m in llm.seen[0]] == [MessageRole.SYSTEM, MessageRole.USER, MessageRole.ASSISTANT]
    with pytest.raises(ConfigurationError, match="LlamaIndex LLM"):
        LlamaIndexChatFunction(lambda m: "")  # type: ignore[arg-type]


def test_an_llm_resolver_updates_the_stored_fact(engine: MemoryEngine) -> None:
    llm = ScriptedLLM(answers=[_decision("UPDATE", "F1")])
    resolver = create_llm_resolver(llm)
    assert isinstance(resolver, LLMResolver) and resolver.name == "llamaindex:scripted-1"
    engine.resolver = resolver
    old = engine.remember(MAYA, "The user edits code in Vim.", created_at=T0)
    new = engine.remember(MAYA, "The user edits code in VS Code.", created_at=T0 + 1)
    assert new.superseded == [old.id]
    row = engine.store.get_memory(old.id, MemoryQuery(scope=MAYA, active_only=False))
    assert row is not None and row.metadata["supersededReason"] == "llm: new editor"
    assert "F1: The user edits code in Vim." in llm.asked[0]


def test_a_failing_llm_is_reported_and_nothing_is_guessed(engine: MemoryEngine) -> None:
    engine.resolver = create_llm_resolver(ScriptedLLM(answers=[]), name="li")
    engine.remember(MAYA, "The user edits code in Vim.", created_at=T0)
    new = engine.remember(MAYA, "The user edits code in VS Code.", created_at=T0 + 1)
    assert new.superseded == [] and any("li resolver call failed" in n and "script exhausted" in n
                                        for n in new.notes)


def test_the_same_llm_extracts_facts(engine: MemoryEngine) -> None:
    facts = json.dumps({"facts": [{"fact": "The user edits code in Helix.", "type": "preference",
                                   "confidence": 0.9}]})
    extractor = create_llm_extractor(ScriptedLLM(answers=[facts]))
    assert isinstance(extractor, LLMExtractor) and extractor.name == "llamaindex:scripted-1"
    engine.extractor = extractor
    engine.post_turn(MAYA, [{"role": "user", "content": "Helix is my editor these days."}])
    assert engine.flush().facts_indexed == 1
    (row,) = engine.store.list_memories(MemoryQuery(scope=MAYA, sources=("fact",)))
    assert row.content == "The user edits code in Helix." and row.metadata["extractor"] == "llamaindex:scripted-1"


class AsyncScriptedLLM(ScriptedLLM):
    """A scripted LLM with an ``achat`` of its own (it awaits ``asyncio.sleep``); records the
    thread each sync and async call ran on."""

    sync_threads: list[int] = Field(default_factory=list)
    async_threads: list[int] = Field(default_factory=list)

    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        self.sync_threads.append(threading.get_ident())
        return super().complete(prompt, formatted, **kwargs)

    async def achat(self, messages: Any, **kwargs: Any) -> ChatResponse:
        await asyncio.sleep(0)
        self.async_threads.append(threading.get_ident())
        self.asked.append(str(messages[-1].content))
        return ChatResponse(message=ChatMessage(role=MessageRole.ASSISTANT, content=self.answers.pop(0)))


class ThreadRecordingLLM(ScriptedLLM):
    """A CustomLLM without an achat of its own; records the thread of each call."""

    threads: list[int] = Field(default_factory=list)

    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        self.threads.append(threading.get_ident())
        return super().complete(prompt, formatted, **kwargs)


async def test_aremember_awaits_the_llms_achat(engine: MemoryEngine) -> None:
    llm = AsyncScriptedLLM(answers=[_decision("UPDATE", "F1")])
    engine.resolver = resolver = create_llm_resolver(llm)
    assert isinstance(resolver, LLMResolver) and resolver.achat is not None
    old = await engine.aremember(MAYA, "The user edits code in Vim.", created_at=T0)
    new = await engine.aremember(MAYA, "The user edits code in VS Code.", created_at=T0 + 1)
    assert new.superseded == [old.id]
    assert llm.async_threads == [threading.get_ident()] and llm.sync_threads == []  # achat, on the loop
    assert "F1: The user edits code in Vim." in llm.asked[0]
    row = engine.store.get_memory(old.id, MemoryQuery(scope=MAYA, active_only=False))
    assert row is not None and row.metadata["resolver"] == "llamaindex:scripted-1"
    assert row.metadata["supersededReason"] == "llm: new editor" and row.metadata["supersededBy"] == new.id


async def test_a_custom_llm_without_achat_runs_chat_off_the_loop(engine: MemoryEngine) -> None:
    """CustomLLM's inherited achat calls chat on the loop; the adapter runs chat in a worker thread instead."""
    llm = ThreadRecordingLLM(answers=[_decision("UPDATE", "F1")])
    engine.resolver = resolver = create_llm_resolver(llm)
    assert resolver.achat is None and create_llm_resolver(MockLLM()).achat is None
    old = await engine.aremember(MAYA, "The user edits code in Vim.", created_at=T0)
    new = await engine.aremember(MAYA, "The user edits code in VS Code.", created_at=T0 + 1)
    assert new.superseded == [old.id]
    assert len(llm.threads) == 1 and llm.threads[0] != threading.get_ident()


async def test_an_unsure_llm_on_the_async_path_is_reported(engine: MemoryEngine) -> None:
    unsure = json.dumps({"decisions": [{"fact": "N1", "event": "UPDATE", "target": "F1", "reason": "maybe",
                                        "confidence": 0.2}]})
    engine.resolver = create_llm_resolver(AsyncScriptedLLM(answers=[unsure]), name="li")
    await engine.aremember(MAYA, "The user edits code in Vim.", created_at=T0)
    new = await engine.aremember(MAYA, "The user edits code in VS Code.", created_at=T0 + 1)
    assert new.superseded == [] and any(n.startswith("li resolver:") and "unsure" in n for n in new.notes)


class SearchingLLM(AsyncScriptedLLM):
    """An AsyncScriptedLLM whose ``achat`` first awaits ``before`` (a coroutine function), when set."""

    before: Any = None

    async def achat(self, messages: Any, **kwargs: Any) -> ChatResponse:
        if self.before is not None:
            await self.before()
        return await super().achat(messages, **kwargs)


def _remember_tool(engine: MemoryEngine, **kwargs: Any) -> Any:
    (tool,) = ManowarToolSpec(engine=engine, scope=MAYA, **kwargs).to_tool_list(spec_functions=["memory_remember"])
    return tool


async def test_the_async_memory_tool_awaits_achat(engine: MemoryEngine) -> None:
    """An agent's memory_remember tool, called with acall: the resolver's LLM is awaited with its
    own achat on this loop (not chat in a worker thread), and its UPDATE lands."""
    llm = AsyncScriptedLLM(answers=[_decision("UPDATE", "F1"), _decision("UPDATE", "F1")])
    engine.resolver = create_llm_resolver(llm)
    old = engine.remember(MAYA, "The user edits code in Vim.", created_at=T0)  # nothing stored before: no call
    tool = _remember_tool(engine, trust="external")
    output = await tool.acall(content="The user edits code in VS Code.")
    assert not output.is_error and output.raw_output["superseded"] == [old.id]
    assert llm.async_threads == [threading.get_ident()] and llm.sync_threads == []  # achat, on the loop
    row = engine.store.get_memory(old.id, MemoryQuery(scope=MAYA, active_only=False))
    assert row is not None and row.metadata["supersededBy"] == output.raw_output["id"]
    assert row.metadata["resolution"] == "update" and row.metadata["resolver"] == "llamaindex:scripted-1"
    new = engine.store.get_memory(output.raw_output["id"], MemoryQuery(scope=MAYA))
    assert new is not None and new.metadata["trust"] == "external"
    tool.call(content="The user edits code in Emacs.")  # the sync tool: chat (complete)
    assert len(llm.sync_threads) == 1 and len(llm.async_threads) == 1


def test_the_async_memory_tool_holds_no_worker_thread_while_the_llm_answers() -> None:
    """With a one-thread default executor, the LLM answers only after a search that needs that
    thread: the tool call must have given the thread back while awaiting achat."""

    async def main() -> tuple[list[str], list[str], str]:
        asyncio.get_running_loop().set_default_executor(concurrent.futures.ThreadPoolExecutor(1))
        llm = SearchingLLM(answers=[_decision("UPDATE", "F1")])
        engine = MemoryEngine(store="sqlite:///:memory:", embedder="fake", resolver=create_llm_resolver(llm))
        searched: list[str] = []

        async def search() -> None:
            hits = await engine.scoped(MAYA).asearch("editor")
            searched.append(f"searched ({len(hits)} hits)")

        llm.before = search
        try:
            old = engine.remember(MAYA, "The user edits code in Vim.", created_at=T0)
            output = await asyncio.wait_for(  # a guard against a hang, not a timing check
                _remember_tool(engine).acall(content="The user edits code in VS Code."), timeout=60)
            return searched, output.raw_output.get("superseded", output.content), old.id
        finally:
            engine.close()

    searched, superseded, old_id = asyncio.run(main())
    assert len(searched) == 1 and superseded == [old_id]
