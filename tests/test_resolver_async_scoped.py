"""The async resolver through the scoped surface and the tool catalog: ScopedMemory.aremember,
aadd, aingest and aupsert and a write tool's acall await LLMResolver(achat=...) on the caller's
event loop, with the store work in worker threads, and keep the surface's own rules (trust,
reserved keys, scope) on that path as on the sync one."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from manowar_memory import LLMResolver, MemoryEngine, Scope, memory_tools
from manowar_memory.errors import InvalidInputError
from manowar_memory.records import MemoryRecord
from manowar_memory.scoped import ScopedMemory
from manowar_memory.stores.base import MemoryQuery

MAYA = Scope(agent_wallet="agent-s", user_address="maya", thread_id="t1")
T0 = 1_772_452_800_000
OLD, NEW = "The user edits code in Vim.", "The user edits code in VS Code."


def _answer(event: str = "UPDATE", reason: str = "editor changed") -> str:
    return json.dumps({"decisions": [{"fact": "N1", "event": event, "target": "F1", "reason": reason,
                                      "confidence": 0.9}]})


class AsyncOnly:
    """A fake model with both calls: ``achat`` awaits ``asyncio.sleep`` and records its loop and
    thread; ``chat`` (the sync call) records that it was used."""

    def __init__(self, answer: str) -> None:
        self.answer = answer
        self.async_calls: list[tuple[asyncio.AbstractEventLoop, int]] = []
        self.sync_calls: list[int] = []

    async def achat(self, messages: list[dict[str, str]]) -> str:
        self.async_calls.append((asyncio.get_running_loop(), threading.get_ident()))
        await asyncio.sleep(0)
        return self.answer

    def chat(self, messages: list[dict[str, str]]) -> str:
        self.sync_calls.append(threading.get_ident())
        return self.answer


# each route writes NEW as a fact through the surface (or a tool over it); what it returns is not compared
Route = Callable[[ScopedMemory, str], Awaitable[Any]]
def _routes(metadata: dict[str, Any], key: str) -> dict[str, Route]:
    """The surface's async fact writes, each writing its text with ``metadata`` (keyed ``key``)."""
    return {
        "aremember": lambda m, text: m.aremember(text, metadata=metadata),
        "aadd": lambda m, text: m.aadd([text], metadatas=[metadata], source="fact"),
        "aingest": lambda m, text: m.aingest([{"key": key, "content": text, "source": "fact", "metadata": metadata}]),
        "aupsert": lambda m, text: m.aupsert([{"key": key, "content": text, "metadata": metadata}], source="fact"),
    }


ROUTES: dict[str, Route] = {
    **_routes({"origin": "test"}, "editor"),
    "tool acall": lambda m, text: memory_tools(m, include=["memory_remember"])[0].acall(content=text),
}
RESERVED: dict[str, Route] = _routes({"trust": "system"}, "k")


def _facts(engine: MemoryEngine) -> dict[str, MemoryRecord]:
    return {r.content: r for r in engine.store.list_memories(
        MemoryQuery(scope=MAYA, sources=("fact",), active_only=False))}


@pytest.fixture
def engine():  # type: ignore[no-untyped-def]
    eng = MemoryEngine(store="sqlite:///:memory:", embedder="fake")
    yield eng
    eng.close()


@pytest.mark.parametrize("route", list(ROUTES))
async def test_the_route_awaits_the_async_model_and_the_update_lands(engine: MemoryEngine, route: str) -> None:
    model = AsyncOnly(_answer())
    engine.remember(MAYA, OLD, created_at=T0)  # before the resolver: no call
    engine.resolver = LLMResolver(model.chat, achat=model.achat, name="editor")
    memory = engine.scoped(MAYA, trust="external")
    if route != "tool acall":  # the surface's reserved-key check holds on the async path: nothing written
        with pytest.raises(InvalidInputError, match="reserved"):
            await RESERVED[route](memory, NEW)
        assert list(_facts(engine)) == [OLD]
    await ROUTES[route](memory, NEW)
    assert model.async_calls == [(asyncio.get_running_loop(), threading.get_ident())]  # on this loop
    assert model.sync_calls == []
    rows = _facts(engine)
    old, new = rows[OLD].metadata, rows[NEW].metadata
    assert old["status"] == "superseded" and old["supersededBy"] == rows[NEW].id
    assert (old["resolution"], old["resolver"], old["supersededReason"]) == ("update", "editor", "llm: editor changed")
    assert new.get("status") != "superseded"
    assert new["trust"] == "external"  # the surface's trust, on the async path too
    if route != "tool acall":
        assert new["origin"] == "test"


@pytest.mark.parametrize("route", list(ROUTES))
def test_no_worker_thread_is_held_while_the_model_answers(route: str) -> None:
    """With a one-thread default executor, the model's answer waits for a search that needs that
    thread: it can run only if the route gave the thread back while awaiting the model."""

    async def main() -> tuple[list[str], dict[str, MemoryRecord]]:
        asyncio.get_running_loop().set_default_executor(concurrent.futures.ThreadPoolExecutor(1))
        engine = MemoryEngine(store="sqlite:///:memory:", embedder="fake")
        memory = engine.scoped(MAYA)
        searched: list[str] = []
        loop = asyncio.get_running_loop()

        async def achat(messages: list[dict[str, str]]) -> str:
            if asyncio.get_running_loop() is not loop:  # another loop would have executor threads of its own
                raise RuntimeError("the model runs on another event loop")
            hits = await memory.asearch("editor")
            searched.append(f"searched ({len(hits)} hits)")
            return _answer()

        try:
            engine.remember(MAYA, OLD, created_at=T0)
            engine.resolver = LLMResolver(achat=achat, name="r")
            await asyncio.wait_for(ROUTES[route](memory, NEW), timeout=60)  # a guard against a hang, not a timing check
            return searched, _facts(engine)
        finally:
            engine.close()

    searched, rows = asyncio.run(main())
    assert len(searched) == 1 and searched[0].startswith("searched")
    assert rows[OLD].metadata["supersededBy"] == rows[NEW].id


async def test_other_tasks_run_while_a_tool_call_awaits_the_model(engine: MemoryEngine) -> None:
    """The model waits for an event only another task sets: the tool call completes only if the
    loop runs that task while the model is waiting."""
    entered, released = asyncio.Event(), asyncio.Event()
    progressed: list[str] = []
    memory = engine.scoped(MAYA)

    loop = asyncio.get_running_loop()

    async def achat(messages: list[dict[str, str]]) -> str:
        if asyncio.get_running_loop() is not loop:  # the events below belong to the caller's loop
            raise RuntimeError("the model runs on another event loop")
        entered.set()
        await released.wait()
        progressed.append("model answered")
        return _answer()

    async def other_task() -> None:
        await entered.wait()
        found = await memory_tools(memory, include=["memory_search"])[0].acall(query="editor")
        progressed.append(f"other task searched ({len(found['memories'])} hits)")
        released.set()

    engine.remember(MAYA, OLD, created_at=T0)
    engine.resolver = LLMResolver(achat=achat, name="r")
    (tool,) = memory_tools(memory, include=["memory_remember"])
    result, _ = await asyncio.wait_for(asyncio.gather(tool.acall(content=NEW), other_task()), timeout=60)
    assert result["superseded"] == [_facts(engine)[OLD].id]
    assert progressed[0].startswith("other task searched") and progressed[1] == "model answered"
