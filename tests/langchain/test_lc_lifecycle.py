"""Facts that change, through LangChain's memory classes: the update is packed as current with
its date and the fact it replaced is not packed (tests/data/lifecycle_kinds.json, one change
per attribute kind)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from langchain_manowar import ManowarMemory
from manowar_memory import MemoryEngine, Scope

KINDS: list[dict[str, Any]] = json.loads(
    (Path(__file__).parents[1] / "data" / "lifecycle_kinds.json").read_text())["kinds"]
USER = Scope(agent_wallet="agent-lc", user_address="maya")
DATED = r"\[GRAPH \d{4}-\d\d-\d\d\] "


@pytest.fixture
def engine() -> Iterator[MemoryEngine]:
    engine = MemoryEngine(store="sqlite:///:memory:", embedder="fake")
    yield engine
    engine.close()


@pytest.mark.parametrize("kind", KINDS, ids=[k["id"] for k in KINDS])
def test_the_update_is_current_and_dated_in_manowar_memory(engine: MemoryEngine, kind: dict[str, Any]) -> None:
    for thread, text in (("s1", kind["first"]), ("s2", kind["update"])):
        ManowarMemory(engine=engine, scope=USER.with_thread(thread), wait_for_facts=True).save_context(
            {"input": text}, {"output": "Noted."})
    history = ManowarMemory(engine=engine, scope=USER.with_thread("s3")).load_memory_variables(
        {"input": kind["question"]})["history"]
    graph = [line for line in history.split("\n") if line.startswith("[GRAPH")]
    assert any(re.fullmatch(DATED + re.escape(kind["current"]), line) for line in graph), history
    assert not any(kind["stale"] in line for line in graph), history
