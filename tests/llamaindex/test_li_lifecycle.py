"""Facts that change, through LlamaIndex's memory classes: the update is packed as current with
its date and the fact it replaced is not packed (tests/data/lifecycle_kinds.json, one change
per attribute kind)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from llama_index.core.base.llms.types import ChatMessage, MessageRole

from llama_index_manowar import ManowarMemory, ManowarMemoryBlock
from manowar_memory import MemoryEngine, Scope

KINDS: list[dict[str, Any]] = json.loads(
    (Path(__file__).parents[1] / "data" / "lifecycle_kinds.json").read_text())["kinds"]
DATED = r"\[GRAPH \d{4}-\d\d-\d\d\] "


def _graph(text: str) -> list[str]:
    return [line for line in text.split("\n") if line.startswith("[GRAPH")]


@pytest.mark.parametrize("kind", KINDS, ids=[k["id"] for k in KINDS])
def test_the_update_is_current_and_dated_in_manowar_memory(
    engine: MemoryEngine, scope: Scope, kind: dict[str, Any]
) -> None:
    for session, text in (("s1", kind["first"]), ("s2", kind["update"])):
        memory = ManowarMemory(engine=engine, scope=scope, session_id=session)
        memory.put_messages([ChatMessage(role="user", content=text), ChatMessage(role="assistant", content="Noted.")])
    engine.flush()
    later = ManowarMemory(engine=engine, scope=scope, session_id="s3")
    system = "\n".join(m.content or "" for m in later.get(input=kind["question"]) if m.role == MessageRole.SYSTEM)
    assert any(re.fullmatch(DATED + re.escape(kind["current"]), line) for line in _graph(system)), system
    assert not any(kind["stale"] in line for line in _graph(system)), system


@pytest.mark.parametrize("kind", KINDS[:2], ids=[k["id"] for k in KINDS[:2]])
async def test_the_update_is_current_and_dated_in_the_memory_block(
    engine: MemoryEngine, scope: Scope, kind: dict[str, Any]
) -> None:
    block = ManowarMemoryBlock(engine=engine, scope=scope, wait_for_facts=True)
    for session, text in (("s1", kind["first"]), ("s2", kind["update"])):
        await block.arecord([ChatMessage(role="user", content=text), ChatMessage(role="assistant", content="Noted.")],
                            session_id=session)
    content = await block.aget([ChatMessage(role="user", content=kind["question"])], session_id="s3")
    assert any(re.fullmatch(DATED + re.escape(kind["current"]), line) for line in _graph(content)), content
    assert not any(kind["stale"] in line for line in _graph(content)), content
