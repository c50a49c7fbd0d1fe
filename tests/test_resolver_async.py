"""The async resolver path: LLMResolver(achat=...) awaited by aremember and aingest on the event
loop, with the same decisions, provenance and reported doubts as the sync path (one answer
check, parse_decisions, behind both)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import threading

import pytest

from manowar_memory import AsyncFactResolver, FactResolver, LLMResolver, MemoryEngine, Scope
from manowar_memory.errors import ResolverError
from manowar_memory.lifecycle import FactRef
from manowar_memory.stores.base import MemoryQuery

MAYA = Scope(agent_wallet="agent-a", user_address="maya", thread_id="t1")
T0 = 1_772_452_800_000
DAY = 86_400_000


def _answer(event: str, target: str | None = "F1", confidence: float = 0.9, reason: str = "editor changed") -> str:
    return json.dumps({"decisions": [{"fact": "N1", "event": event, "target": target, "reason": reason,
                                      "confidence": confidence}]})


class AsyncModel:
    """A fake async chat model: answers from a script after awaiting ``asyncio.sleep``, and
    records the loop and thread each call ran on."""

    def __init__(self, *answers: str) -> None:
        self.answers = list(answers)
        self.prompts: list[str] = []
        self.loops: list[asyncio.AbstractEventLoop] = []
        self.threads: list[int] = []

    async def __call__(self, messages: list[dict[str, str]]) -> str:
        self.loops.append(asyncio.get_running_loop())
        self.threads.append(threading.get_ident())
        self.prompts.append(messages[-1]["content"])
        await asyncio.sleep(0)
        if not self.answers:
            raise RuntimeError("script exhausted")
        return self.answers.pop(0)


def _row(engine: MemoryEngine, memory_id: str):  # type: ignore[no-untyped-def]
    row = engine.store.get_memory(memory_id, MemoryQuery(scope=MAYA, active_only=False))
    assert row is not None
    return row


@pytest.fixture
def engine():  # type: ignore[no-untyped-def]
    eng = MemoryEngine(store="sqlite:///:memory:", embedder="fake")
    yield eng
    eng.close()


def test_an_llm_resolver_needs_a_chat_function() -> None:
    with pytest.raises(ResolverError, match="needs a chat function"):
        LLMResolver()
    resolver = LLMResolver(achat=AsyncModel())
    assert isinstance(resolver, AsyncFactResolver) and isinstance(resolver, FactResolver)


async def test_aremember_awaits_the_async_model_on_the_callers_loop(engine: MemoryEngine) -> None:
    model = AsyncModel(_answer("UPDATE"))
    engine.resolver = LLMResolver(achat=model, name="editor")
    old = await engine.aremember(MAYA, "The user edits code in Vim.", created_at=T0)
    assert model.prompts == []  # nothing stored before: no call
    new = await engine.aremember(MAYA, "The user edits code in VS Code.", created_at=T0 + DAY)
    assert new.superseded == [old.id] and new.notes == []
    assert model.loops == [asyncio.get_running_loop()] and model.threads == [threading.get_ident()]
    assert "F1: The user edits code in Vim." in model.prompts[0] and "N1: The user edits code in VS Code." in model.prompts[0]
    meta = _row(engine, old.id).metadata
    assert meta["status"] == "superseded" and meta["supersededBy"] == new.id
    assert meta["supersededReason"] == "llm: editor changed" and meta["resolution"] == "update"
    assert meta["resolver"] == "editor" and meta["resolverConfidence"] == 0.9
    assert isinstance(meta["supersededAt"], int)
    assert _row(engine, new.id).metadata.get("status") != "superseded"


async def test_delete_supersedes_the_stored_fact_and_keeps_the_statement(engine: MemoryEngine) -> None:
    engine.resolver = LLMResolver(achat=AsyncModel(_answer("DELETE", reason="quit")), name="r")
    old = await engine.aremember(MAYA, "The user works at Acme.", created_at=T0)
    new = await engine.aremember(MAYA, "The user quit the job at Acme.", created_at=T0 + DAY)
    assert new.superseded == [old.id]
    meta = _row(engine, old.id).metadata
    assert (meta["resolution"], meta["supersededBy"], meta["supersededReason"]) == ("delete", new.id, "llm: quit")
    assert _row(engine, new.id).metadata.get("status") != "superseded"


async def test_none_keeps_the_stored_fact_and_reports_the_duplicate(engine: MemoryEngine) -> None:
    engine.resolver = LLMResolver(achat=AsyncModel(_answer("NONE", reason="same hobby")), name="r")
    old = await engine.aremember(MAYA, "The user loves hiking.", created_at=T0)
    new = await engine.aremember(MAYA, "The user enjoys hiking.", created_at=T0 + DAY)
    assert new.deduplicated and new.id == old.id and any("already known" in n for n in new.notes)
    assert _row(engine, old.id).metadata.get("status") != "superseded"
    (dup,) = [r for r in engine.store.list_memories(MemoryQuery(scope=MAYA, sources=("fact",), active_only=False))
              if r.content == "The user enjoys hiking."]
    assert dup.metadata["status"] == "superseded" and dup.metadata["resolution"] == "none"
    assert dup.metadata["supersededBy"] == old.id


async def test_add_changes_nothing(engine: MemoryEngine) -> None:
    engine.resolver = LLMResolver(achat=AsyncModel(_answer("ADD", target=None)), name="r")
    old = await engine.aremember(MAYA, "The user edits code in Vim.", created_at=T0)
    new = await engine.aremember(MAYA, "The user edits code on a laptop.", created_at=T0 + DAY)
    assert new.superseded == [] and new.notes == []
    assert _row(engine, old.id).metadata.get("status") != "superseded"


async def test_an_unsure_decision_is_reported_not_applied(engine: MemoryEngine) -> None:
    engine.resolver = LLMResolver(achat=AsyncModel(_answer("UPDATE", confidence=0.3)), name="r")
    old = await engine.aremember(MAYA, "The user edits code in Vim.", created_at=T0)
    new = await engine.aremember(MAYA, "The user edits code in VS Code.", created_at=T0 + DAY)
    assert new.superseded == []
    (note,) = [n for n in new.notes if "unsure" in n]
    assert note.startswith("r resolver: N1 'The user edits code in VS Code.'") and "F1 'The user edits code in Vim.'" in note
    assert _row(engine, old.id).metadata.get("status") != "superseded"


async def test_a_failing_async_model_is_reported_and_the_fact_added(engine: MemoryEngine) -> None:
    engine.resolver = LLMResolver(achat=AsyncModel(), name="r")  # no answers: the call raises
    await engine.aremember(MAYA, "The user edits code in Vim.", created_at=T0)
    new = await engine.aremember(MAYA, "The user edits code in VS Code.", created_at=T0 + DAY)
    assert new.superseded == [] and any("r resolver call failed: RuntimeError: script exhausted" in n
                                        for n in new.notes)
    assert _row(engine, new.id).metadata.get("status") != "superseded"


async def test_aingest_awaits_the_async_model(engine: MemoryEngine) -> None:
    model = AsyncModel(_answer("UPDATE"))
    engine.resolver = LLMResolver(achat=model, name="editor")
    old = await engine.aremember(MAYA, "The user edits code in Vim.", created_at=T0)
    (new_id,) = await engine.aingest(MAYA, [{"content": "The user edits code in VS Code.", "source": "fact",
                                             "created_at": T0 + DAY}])
    assert model.threads == [threading.get_ident()]
    meta = _row(engine, old.id).metadata
    assert meta["supersededBy"] == new_id and meta["resolution"] == "update"


async def test_the_loop_runs_other_tasks_while_the_model_answers(engine: MemoryEngine) -> None:
    """The model waits for an event only another task sets: the write completes only if the loop
    runs that task while the model is waiting."""
    entered, released = asyncio.Event(), asyncio.Event()
    progressed: list[str] = []
    loop = asyncio.get_running_loop()

    async def model(messages: list[dict[str, str]]) -> str:
        entered.set()
        if asyncio.get_running_loop() is not loop:  # the events below belong to the caller's loop
            raise RuntimeError("the model runs on another event loop")
        await released.wait()
        progressed.append("model answered")
        return _answer("UPDATE")

    async def other_task() -> None:
        await entered.wait()
        hits = await engine.asearch("editor", MAYA)  # the store is free too: no write holds it
        progressed.append(f"other task searched ({len(hits)} hits)")
        released.set()

    engine.resolver = LLMResolver(achat=model, name="r")
    old = await engine.aremember(MAYA, "The user edits code in Vim.", created_at=T0)
    new, _ = await asyncio.gather(engine.aremember(MAYA, "The user edits code in VS Code.", created_at=T0 + DAY),
                                  other_task())
    assert new.superseded == [old.id]
    assert progressed[0].startswith("other task searched") and progressed[1] == "model answered"


def test_no_worker_thread_is_held_while_the_model_answers() -> None:
    """With a one-thread default executor, the model's answer waits for a search that needs that
    thread: it can run only if the write gave the thread back while awaiting the model."""

    async def main() -> list[str]:
        asyncio.get_running_loop().set_default_executor(concurrent.futures.ThreadPoolExecutor(1))
        engine = MemoryEngine(store="sqlite:///:memory:", embedder="fake")
        searched: list[str] = []

        loop = asyncio.get_running_loop()

        async def model(messages: list[dict[str, str]]) -> str:
            if asyncio.get_running_loop() is not loop:  # another loop would have executor threads of its own
                raise RuntimeError("the model runs on another event loop")
            await engine.asearch("editor", MAYA)
            searched.append("searched")
            return _answer("UPDATE")

        try:
            engine.resolver = LLMResolver(achat=model, name="r")
            await engine.aremember(MAYA, "The user edits code in Vim.", created_at=T0)
            new = await asyncio.wait_for(  # a guard against a hang, not a timing check
                engine.aremember(MAYA, "The user edits code in VS Code.", created_at=T0 + DAY), timeout=60)
            return [*searched, *new.superseded]
        finally:
            engine.close()

    out = asyncio.run(main())
    assert out[0] == "searched" and len(out) == 2


def test_the_sync_path_runs_an_async_only_model(engine: MemoryEngine) -> None:
    model = AsyncModel(_answer("UPDATE"))
    engine.resolver = LLMResolver(achat=model, name="r")
    old = engine.remember(MAYA, "The user edits code in Vim.", created_at=T0)
    new = engine.remember(MAYA, "The user edits code in VS Code.", created_at=T0 + DAY)
    assert new.superseded == [old.id] and len(model.prompts) == 1


async def test_a_sync_write_inside_a_running_loop_reports_an_async_only_model(engine: MemoryEngine) -> None:
    engine.resolver = LLMResolver(achat=AsyncModel(_answer("UPDATE")), name="r")
    engine.remember(MAYA, "The user edits code in Vim.", created_at=T0)
    new = engine.remember(MAYA, "The user edits code in VS Code.", created_at=T0 + DAY)  # blocking, on the loop
    assert new.superseded == [] and any("only an async chat" in n and "aremember" in n for n in new.notes)


async def test_a_sync_only_resolver_still_works_on_the_async_path(engine: MemoryEngine) -> None:
    asked: list[int] = []

    def chat(messages: list[dict[str, str]]) -> str:
        asked.append(threading.get_ident())
        return _answer("UPDATE")

    engine.resolver = LLMResolver(chat, name="r")
    old = await engine.aremember(MAYA, "The user edits code in Vim.", created_at=T0)
    new = await engine.aremember(MAYA, "The user edits code in VS Code.", created_at=T0 + DAY)
    assert new.superseded == [old.id]
    assert len(asked) == 1 and asked[0] != threading.get_ident()  # the sync model ran off the loop


async def test_decide_and_adecide_give_the_same_answer() -> None:
    answer = json.dumps({"decisions": [
        {"fact": "N1", "event": "UPDATE", "target": "F2", "reason": "moved", "confidence": 0.95},
        {"fact": "N2", "event": "DELETE", "target": "F9", "reason": "?", "confidence": 0.9},
        {"fact": "N3", "event": "NONE", "target": "F1", "reason": "same", "confidence": 0.4},
    ]})
    new = [FactRef("n1", "The user lives in Lyon.", T0), FactRef("n2", "x y z", T0), FactRef("n3", "a b c", T0)]
    old = [FactRef("o1", "The user likes tea.", T0), FactRef("o2", "The user lives in Paris.", T0)]
    sync = LLMResolver(lambda m: answer).decide(new, old)

    async def achat(messages: list[dict[str, str]]) -> str:
        return answer

    assert await LLMResolver(achat=achat).adecide(new, old) == sync
    decisions, notes = sync
    assert [(d.fact, d.event, d.target) for d in decisions] == [("n1", "UPDATE", "o2")]
    assert any("N2 'x y z': DELETE names 'F9'" in n for n in notes) and any("unsure" in n for n in notes)


async def test_a_custom_async_resolver_is_awaited(engine: MemoryEngine) -> None:
    """Any AsyncFactResolver works: adecide gets the row ids and its decisions are applied."""

    class Always:
        name, candidates, min_confidence, max_new = "always", 5, 0.7, 10

        def decide(self, new, existing):  # type: ignore[no-untyped-def]
            raise AssertionError("the async path must await adecide")

        async def adecide(self, new, existing):  # type: ignore[no-untyped-def]
            from manowar_memory import ResolverDecision
            await asyncio.sleep(0)
            return [ResolverDecision(new[0].id, "UPDATE", existing[0].id, "custom", 1.0)], []

    engine.resolver = Always()
    old = await engine.aremember(MAYA, "The user edits code in Vim.", created_at=T0)
    new = await engine.aremember(MAYA, "The user edits code in VS Code.", created_at=T0 + DAY)
    assert new.superseded == [old.id] and _row(engine, old.id).metadata["resolver"] == "always"


async def test_the_async_path_on_each_store(engine_on_each_store: MemoryEngine) -> None:
    engine = engine_on_each_store
    model = AsyncModel(_answer("UPDATE"), _answer("UPDATE", reason="again"))
    engine.resolver = LLMResolver(achat=model, name="editor")
    vim = await engine.aremember(MAYA, "The user edits code in Vim.", created_at=T0)
    (helix,) = await engine.aingest(MAYA, [{"key": "editor", "content": "The user edits code in Helix.",
                                            "source": "fact", "created_at": T0 + DAY}])
    zed = await engine.aremember(MAYA, "The user edits code in Zed.", created_at=T0 + 2 * DAY)
    assert zed.superseded == [helix] and model.threads == [threading.get_ident()] * 2
    rows = {r.content: r for r in engine.store.list_memories(
        MemoryQuery(scope=MAYA, sources=("fact",), active_only=False))}
    assert rows["The user edits code in Vim."].metadata["supersededBy"] == helix
    assert rows["The user edits code in Helix."].metadata["supersededReason"] == "llm: again"
    assert rows["The user edits code in Zed."].status == "active" and vim.id != zed.id
