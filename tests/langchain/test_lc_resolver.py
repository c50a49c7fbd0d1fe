"""Fact resolution driven by a LangChain chat model (create_llm_resolver): the adapter only
turns the model into the core's chat function; the decisions and their checks are the core's."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import threading
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.language_models.fake_chat_models import FakeListChatModel, GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import Field

from langchain_manowar import create_llm_resolver, create_manowar_tools
from manowar_memory import LLMResolver, MemoryEngine, Scope
from manowar_memory.stores.base import MemoryQuery

MAYA = Scope(agent_wallet="agent-r", user_address="maya", thread_id="t1")
T0 = 1_772_452_800_000


def _answer(event: str, target: str | None, confidence: float = 0.9) -> str:
    return json.dumps({"decisions": [{"fact": "N1", "event": event, "target": target, "reason": "switched editors",
                                      "confidence": confidence}]})


class RecordingModel(FakeListChatModel):
    """A fake chat model that keeps the messages it was sent."""

    seen: list[list[object]] = Field(default_factory=list)

    def _call(self, messages, stop=None, run_manager=None, **kwargs):  # type: ignore[no-untyped-def,override]
        self.seen.append(list(messages))
        return super()._call(messages, stop=stop, run_manager=run_manager, **kwargs)


def test_a_chat_model_updates_the_stored_fact() -> None:
    model = RecordingModel(responses=[_answer("UPDATE", "F1")])
    resolver = create_llm_resolver(model)
    assert isinstance(resolver, LLMResolver) and resolver.name == "langchain:RecordingModel"
    engine = MemoryEngine(store="sqlite:///:memory:", embedder="fake", resolver=resolver)
    old = engine.remember(MAYA, "The user edits code in Vim.", created_at=T0)
    new = engine.remember(MAYA, "The user edits code in VS Code.", created_at=T0 + 1)
    assert new.superseded == [old.id]
    row = engine.store.get_memory(old.id, MemoryQuery(scope=MAYA, active_only=False))
    assert row is not None and row.metadata["supersededReason"] == "llm: switched editors"
    assert row.metadata["resolver"] == "langchain:RecordingModel"
    (sent,) = model.seen
    assert [type(m).__name__ for m in sent] == ["SystemMessage", "HumanMessage"]
    assert "F1: The user edits code in Vim." in str(sent[1].content)
    engine.close()


def test_a_generic_fake_model_with_a_low_confidence_changes_nothing() -> None:
    model = GenericFakeChatModel(messages=iter([AIMessage(content=_answer("UPDATE", "F1", confidence=0.3))]))
    engine = MemoryEngine(store="sqlite:///:memory:", embedder="fake",
                          resolver=create_llm_resolver(model, name="lc", min_confidence=0.8))
    engine.remember(MAYA, "The user edits code in Vim.", created_at=T0)
    new = engine.remember(MAYA, "The user edits code in VS Code.", created_at=T0 + 1)
    assert new.superseded == [] and any(n.startswith("lc resolver:") and "unsure" in n for n in new.notes)
    engine.close()


def test_a_model_that_runs_out_of_answers_is_reported_not_guessed() -> None:
    model = GenericFakeChatModel(messages=iter([]))  # raises on the first call
    engine = MemoryEngine(store="sqlite:///:memory:", embedder="fake", resolver=create_llm_resolver(model))
    engine.remember(MAYA, "The user edits code in Vim.", created_at=T0)
    new = engine.remember(MAYA, "The user edits code in VS Code.", created_at=T0 + 1)
    assert new.superseded == [] and any("resolver call failed" in n for n in new.notes)
    engine.close()


class TwoWayModel(BaseChatModel):
    """A fake chat model with a native async path: ``ainvoke`` awaits ``asyncio.sleep`` on the
    event loop, ``invoke`` answers in the calling thread; each call is recorded."""

    answer: str
    sync_calls: list[int] = Field(default_factory=list)
    async_calls: list[int] = Field(default_factory=list)
    seen: list[list[BaseMessage]] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "two-way"

    def _result(self, messages: list[BaseMessage]) -> ChatResult:
        self.seen.append(list(messages))
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=self.answer))])

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):  # type: ignore[no-untyped-def,override]
        self.sync_calls.append(threading.get_ident())
        return self._result(messages)

    async def _agenerate(self, messages, stop=None, run_manager=None, **kwargs):  # type: ignore[no-untyped-def,override]
        await asyncio.sleep(0)
        self.async_calls.append(threading.get_ident())
        return self._result(messages)


async def test_aremember_awaits_ainvoke_and_records_the_provenance() -> None:
    model = TwoWayModel(answer=_answer("UPDATE", "F1"))
    resolver = create_llm_resolver(model)
    assert resolver.chat is not None and resolver.achat is not None
    engine = MemoryEngine(store="sqlite:///:memory:", embedder="fake", resolver=resolver)
    try:
        old = await engine.aremember(MAYA, "The user edits code in Vim.", created_at=T0)
        new = await engine.aremember(MAYA, "The user edits code in VS Code.", created_at=T0 + 1)
        assert new.superseded == [old.id]
        assert model.async_calls == [threading.get_ident()] and model.sync_calls == []  # ainvoke, on the loop
        assert [type(m).__name__ for m in model.seen[0]] == ["SystemMessage", "HumanMessage"]
        row = engine.store.get_memory(old.id, MemoryQuery(scope=MAYA, active_only=False))
        assert row is not None and row.metadata["resolver"] == "langchain:TwoWayModel"
        assert row.metadata["supersededBy"] == new.id and row.metadata["resolution"] == "update"
        engine.remember(MAYA, "The user edits code in Emacs.", created_at=T0 + 2)  # the sync path: invoke
        assert len(model.sync_calls) == 1 and len(model.async_calls) == 1
    finally:
        engine.close()


async def test_an_unsure_answer_on_the_async_path_is_reported() -> None:
    model = GenericFakeChatModel(messages=iter([AIMessage(content=_answer("UPDATE", "F1", confidence=0.3))]))
    engine = MemoryEngine(store="sqlite:///:memory:", embedder="fake",
                          resolver=create_llm_resolver(model, name="lc", min_confidence=0.8))
    try:
        await engine.aremember(MAYA, "The user edits code in Vim.", created_at=T0)
        new = await engine.aremember(MAYA, "The user edits code in VS Code.", created_at=T0 + 1)
        assert new.superseded == [] and any(n.startswith("lc resolver:") and "unsure" in n for n in new.notes)
    finally:
        engine.close()


class SearchingModel(TwoWayModel):
    """A TwoWayModel whose ``ainvoke`` first awaits ``before`` (a coroutine function), when set."""

    before: Any = None

    async def _agenerate(self, messages, stop=None, run_manager=None, **kwargs):  # type: ignore[no-untyped-def,override]
        if self.before is not None:
            await self.before()
        return await super()._agenerate(messages, stop=stop, run_manager=run_manager, **kwargs)


async def test_the_async_memory_tool_awaits_ainvoke() -> None:
    """The agent's memory_remember tool, called with ainvoke: the resolver's model is awaited with
    its own ainvoke on this loop (not invoke in a worker thread), and its UPDATE lands."""
    model = TwoWayModel(answer=_answer("UPDATE", "F1"))
    engine = MemoryEngine(store="sqlite:///:memory:", embedder="fake", resolver=create_llm_resolver(model))
    try:
        old = engine.remember(MAYA, "The user edits code in Vim.", created_at=T0)  # nothing stored before: no call
        (tool,) = create_manowar_tools(engine, MAYA, include=["memory_remember"], trust="external")
        out = json.loads(await tool.ainvoke({"content": "The user edits code in VS Code."}))
        assert out["superseded"] == [old.id]
        assert model.async_calls == [threading.get_ident()] and model.sync_calls == []  # ainvoke, on the loop
        row = engine.store.get_memory(old.id, MemoryQuery(scope=MAYA, active_only=False))
        assert row is not None and row.metadata["supersededBy"] == out["id"]
        assert row.metadata["resolution"] == "update" and row.metadata["resolver"] == "langchain:TwoWayModel"
        new = engine.store.get_memory(out["id"], MemoryQuery(scope=MAYA))
        assert new is not None and new.metadata["trust"] == "external"
        tool.invoke({"content": "The user edits code in Emacs."})  # the sync tool: invoke
        assert len(model.sync_calls) == 1 and len(model.async_calls) == 1
    finally:
        engine.close()


def test_the_async_memory_tool_holds_no_worker_thread_while_the_model_answers() -> None:
    """With a one-thread default executor, the model answers only after a search that needs that
    thread: the tool call must have given the thread back while awaiting ainvoke."""

    async def main() -> tuple[list[str], list[str], str]:
        asyncio.get_running_loop().set_default_executor(concurrent.futures.ThreadPoolExecutor(1))
        model = SearchingModel(answer=_answer("UPDATE", "F1"))
        engine = MemoryEngine(store="sqlite:///:memory:", embedder="fake", resolver=create_llm_resolver(model))
        searched: list[str] = []

        async def search() -> None:
            hits = await engine.scoped(MAYA).asearch("editor")
            searched.append(f"searched ({len(hits)} hits)")

        model.before = search
        try:
            old = engine.remember(MAYA, "The user edits code in Vim.", created_at=T0)
            (tool,) = create_manowar_tools(engine, MAYA, include=["memory_remember"])
            out = await asyncio.wait_for(  # a guard against a hang, not a timing check
                tool.ainvoke({"content": "The user edits code in VS Code."}), timeout=60)
            return searched, json.loads(out)["superseded"], old.id
        finally:
            engine.close()

    searched, superseded, old_id = asyncio.run(main())
    assert len(searched) == 1 and superseded == [old_id]
