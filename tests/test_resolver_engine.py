"""The LLM resolver end to end on SQLite and MongoDB: fact extraction (post_turn + flush),
remember and ingest go through it, the superseded row carries the provenance, the packed
context holds the current fact, and another user's facts never reach the model."""

from __future__ import annotations

import json
import re

from manowar_memory import LLMResolver, MemoryEngine, Scope
from manowar_memory.stores.base import MemoryQuery

MAYA = Scope(agent_wallet="agent", user_address="maya", thread_id="t1")
BOB = Scope(agent_wallet="agent", user_address="bob", thread_id="t1")
T0 = 1_772_452_800_000
DAY = 86_400_000


class Editor:
    """A scripted model: UPDATE for a new fact naming a tool when a stored one names another,
    NONE for a fact about hiking already stored, ADD otherwise. Keeps every prompt."""

    TOOLS = ("Vim", "VS Code", "Emacs")

    def __init__(self) -> None:
        self.prompts: list[str] = []

    def __call__(self, messages: list[dict[str, str]]) -> str:
        text = messages[-1]["content"]
        self.prompts.append(text)
        stored = dict(re.findall(r"^(F\d+): (.*)$", text, re.M))
        out = []
        for nid, fact in re.findall(r"^(N\d+): (.*)$", text, re.M):
            event, target = "ADD", None
            if any(t in fact for t in self.TOOLS):
                target = next((i for i, s in stored.items() if any(t in s for t in self.TOOLS)), None)
                event = "UPDATE" if target else "ADD"
            elif "hiking" in fact:
                target = next((i for i, s in stored.items() if "hiking" in s), None)
                event = "NONE" if target else "ADD"
            out.append({"fact": nid, "event": event, "target": target, "reason": "editor changed",
                        "confidence": 0.9})
        return json.dumps({"decisions": out})


def _say(engine: MemoryEngine, scope: Scope, text: str, at: int) -> None:
    engine.post_turn(scope, [{"role": "user", "content": text, "timestamp": at},
                             {"role": "assistant", "content": "Noted.", "timestamp": at + 1}])


def _facts(engine: MemoryEngine, scope: Scope) -> dict[str, object]:
    return {r.content: r for r in engine.store.list_memories(
        MemoryQuery(scope=scope, sources=("fact",), active_only=False))}


def test_extraction_updates_and_deduplicates_through_the_resolver(engine_on_each_store: MemoryEngine) -> None:
    engine = engine_on_each_store
    model = Editor()
    engine.resolver = LLMResolver(model, name="editor")
    _say(engine, BOB.with_thread("b1"), "I use Emacs for coding.", T0)
    _say(engine, MAYA.with_thread("s1"), "I use Vim for coding. I love hiking.", T0)
    assert engine.flush().facts_indexed == 3
    assert model.prompts == []  # nothing stored in either scope before: no call

    _say(engine, MAYA.with_thread("s2"), "I use VS Code for coding now. I enjoy hiking.", T0 + DAY)
    flushed = engine.flush()
    assert (flushed.facts_indexed, flushed.facts_superseded, flushed.facts_reinforced) == (1, 1, 1), flushed
    assert any("already known" in n for n in flushed.notes)
    assert len(model.prompts) == 1 and "Emacs" not in model.prompts[0]  # bob's fact never shown

    rows = _facts(engine, MAYA)
    old, new = rows["The user uses Vim for coding."], rows["The user uses VS Code for coding now."]
    assert old.status == "superseded" and old.metadata["supersededBy"] == new.id
    assert old.metadata["supersededReason"] == "llm: editor changed"
    assert old.metadata["resolution"] == "update" and old.metadata["resolver"] == "editor"
    dup = rows["The user enjoys hiking."]
    assert dup.status == "superseded" and dup.metadata["supersededBy"] == rows["The user loves hiking."].id
    assert rows["The user loves hiking."].status == "active"

    prompt = engine.pre_turn("Which editor does the user use?", MAYA.with_thread("s3"), layers=["graph"]).prompt
    assert "VS Code" in prompt and "Vim" not in prompt
    assert _facts(engine, BOB)["The user uses Emacs for coding."].status == "active"


def test_remember_and_ingest_go_through_the_resolver(engine_on_each_store: MemoryEngine) -> None:
    engine = engine_on_each_store
    engine.resolver = LLMResolver(Editor(), name="editor")
    first = engine.remember(MAYA, "The user edits code in Vim.", created_at=T0)
    report = engine.ingest_report(MAYA, [{"key": "editor", "content": "The user edits code in VS Code.",
                                          "source": "fact", "created_at": T0 + DAY}])
    assert report.inserted == 1 and report.notes == []
    rows = _facts(engine, MAYA)
    assert rows["The user edits code in Vim."].metadata["supersededBy"] == report.ids[0]
    again = engine.remember(MAYA, "The user edits code in Emacs.", created_at=T0 + 2 * DAY)
    assert again.superseded == [report.ids[0]] and first.id not in again.superseded
