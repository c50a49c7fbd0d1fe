"""Updates replace what they contradict, end to end: post_turn extraction, remember and
ingest supersede the older fact of the same subject and attribute (history kept), and the
packed context (pre_turn, the memory_context tool) holds the current fact with its date."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from manowar_memory import MemoryConfig, MemoryEngine, PackerConfig, Scope
from manowar_memory.stores.base import MemoryQuery
from manowar_memory.tools import memory_tools

SCOPE = Scope(agent_wallet="agent", user_address="maya", thread_id="t1")
DAY = 86_400_000
MARCH = int(dt.datetime(2026, 3, 2, 12, tzinfo=dt.UTC).timestamp() * 1000)
JUNE = int(dt.datetime(2026, 6, 3, 12, tzinfo=dt.UTC).timestamp() * 1000)


@pytest.fixture
def engine_config() -> MemoryConfig:
    return MemoryConfig(query_cache=True, packer=PackerConfig(dates=True))


def _say(engine: MemoryEngine, thread: str, text: str, at: int) -> None:
    engine.post_turn(SCOPE.with_thread(thread), [{"role": "user", "content": text, "timestamp": at},
                                                 {"role": "assistant", "content": "Noted.", "timestamp": at + 1}])


def _graph_lines(prompt: str) -> list[str]:
    return [line for line in prompt.split("\n") if line.startswith("[GRAPH")]


def _history(engine: MemoryEngine) -> list:
    return engine.store.list_memories(MemoryQuery(scope=SCOPE, sources=("fact",), active_only=False))


def test_lisbon_then_berlin_packs_berlin_as_current_with_its_date(engine_on_each_store: MemoryEngine) -> None:
    engine = engine_on_each_store
    _say(engine, "s1", "I live in Lisbon and work at Acme.", MARCH)
    assert engine.flush().facts_indexed == 2
    _say(engine, "s2", "I moved to Berlin last month and I now work at Zalando.", JUNE)
    flushed = engine.flush()
    assert (flushed.facts_indexed, flushed.facts_superseded) == (2, 2)

    result = engine.pre_turn("Where does the user live now?", SCOPE.with_thread("s3"), layers=["graph"])
    lines = _graph_lines(result.prompt)
    assert "[GRAPH 2026-06-03] The user moved to Berlin last month." in lines
    assert "[GRAPH 2026-06-03] The user now works at Zalando." in lines
    assert not any("Lisbon" in line or "Acme" in line for line in lines)

    rows = {r.content: r for r in _history(engine)}
    old, new = rows["The user lives in Lisbon."], rows["The user moved to Berlin last month."]
    assert old.status == "superseded" and old.metadata["supersededBy"] == new.id
    assert old.metadata["slot"] == "residence" and old.metadata["supersededAt"] >= new.created_at
    assert new.status == "active" and new.metadata["eventDate"] == "2026-05"
    assert rows["The user works at Acme."].metadata["supersededBy"] == rows["The user now works at Zalando."].id

    tool = {t.name: t for t in memory_tools(engine.scoped(SCOPE.with_thread("s3")))}["memory_context"]
    context = tool.call(query="Where does the user live now?")["context"]
    assert "[GRAPH 2026-06-03] The user moved to Berlin last month." in _graph_lines(context)
    assert not any("Lisbon" in line for line in _graph_lines(context))  # the old turn itself may be recalled


def _turn(engine: MemoryEngine, text: str):  # type: ignore[no-untyped-def]
    (row,) = [r for r in engine.store.list_memories(MemoryQuery(scope=SCOPE, sources=("session",)))
              if text in r.content]
    return row


def test_a_turn_whose_facts_were_all_replaced_is_packed_as_superseded(engine_on_each_store: MemoryEngine) -> None:
    """The turn that said the old value stays searchable (history), but once every fact read from
    it is superseded it is marked outdated, ranks lower and is tagged ``superseded`` when packed;
    a turn that still backs a current fact is left as it was."""
    engine = engine_on_each_store
    _say(engine, "s1", "I live in Lisbon.", MARCH)
    _say(engine, "s1", "I work at Acme and I love jazz.", MARCH + DAY)
    engine.flush()
    _say(engine, "s2", "I moved to Berlin and I quit Acme.", JUNE)
    assert engine.flush().facts_superseded == 2

    lisbon, acme = _turn(engine, "I live in Lisbon."), _turn(engine, "I work at Acme")
    berlin_fact = next(r for r in _history(engine) if r.content == "The user moved to Berlin.")
    assert lisbon.metadata["outdated"] is True and lisbon.metadata["outdatedBy"] == [berlin_fact.id]
    assert "outdated" not in acme.metadata  # it still says the user loves jazz
    assert next(r for r in _history(engine) if r.content == "The user lives in Lisbon.").metadata[
        "sourceMemoryId"] == lisbon.id

    result = engine.pre_turn("Where does the user live? Lisbon or Berlin?", SCOPE.with_thread("s3"))
    lines = result.prompt.split("\n")
    old = [line for line in lines if "I live in Lisbon" in line]
    assert old == ["[VECTORS 2026-03-02 superseded] user: I live in Lisbon. | assistant: Noted."] or old == []
    first_city = next(line for line in lines if "Lisbon" in line or "Berlin" in line)
    assert "Berlin" in first_city
    hits, _ = engine.search("Lisbon", SCOPE, layers=["vectors"])
    (hit,) = [h for h in hits if h.id == lisbon.id]
    assert hit.trace["boost_outdated"] == MemoryConfig().retrieval.outdated_factor  # demoted, and says so


# one change per attribute kind, shared with the LangChain and LlamaIndex lifecycle tests
KINDS = [(k["first"], k["update"], k["question"], k["current"], k["stale"]) for k in json.loads(
    (Path(__file__).parent / "data" / "lifecycle_kinds.json").read_text())["kinds"]]
KIND_IDS = [k["id"] for k in json.loads((Path(__file__).parent / "data" / "lifecycle_kinds.json").read_text())["kinds"]]


@pytest.mark.parametrize(("first", "update", "question", "current", "stale"), KINDS, ids=KIND_IDS)
def test_each_attribute_kind_packs_the_update_as_current(
    engine_on_each_store: MemoryEngine, first: str, update: str, question: str, current: str, stale: str,
) -> None:
    engine = engine_on_each_store
    _say(engine, "s1", first, MARCH)
    _say(engine, "s2", update, JUNE)
    assert engine.flush().facts_superseded == 1
    lines = _graph_lines(engine.pre_turn(question, SCOPE.with_thread("s3"), layers=["graph"]).prompt)
    assert f"[GRAPH 2026-06-03] {current}" in lines
    assert not any(stale in line for line in lines)
    assert {r.content: r.status for r in _history(engine)} == {current: "active", stale: "superseded"}


def test_remember_supersedes_and_reports_it(engine_on_each_store: MemoryEngine) -> None:
    engine = engine_on_each_store
    old = engine.remember(SCOPE, "The user lives in Lisbon.", created_at=MARCH)
    new = engine.remember(SCOPE, "The user lives in Berlin.", created_at=JUNE)
    assert new.superseded == [old.id] and new.notes == []
    assert [r.id for r in engine.list_items(SCOPE, sources=["fact"])] == [new.id]
    # a fact observed before the current one arrives late: it is the one superseded
    late = engine.remember(SCOPE, "The user lives in Porto.", created_at=MARCH + DAY)
    assert late.superseded == [late.id]
    assert [r.id for r in engine.list_items(SCOPE, sources=["fact"])] == [new.id]
    # another user's fact on the same attribute is not touched
    other = Scope(agent_wallet="agent", user_address="noor")
    assert engine.remember(other, "The user lives in Madrid.", created_at=JUNE + DAY).superseded == []
    assert [r.id for r in engine.list_items(SCOPE, sources=["fact"])] == [new.id]


def test_uncertain_matches_are_reported_not_guessed(engine_on_each_store: MemoryEngine) -> None:
    engine = engine_on_each_store
    engine.remember(SCOPE, "The user lives in Lisbon.", created_at=MARCH)
    hedged = engine.remember(SCOPE, "The user might move to Porto.", created_at=JUNE)
    assert hedged.superseded == [] and len(hedged.notes) == 1 and "hedged" in hedged.notes[0]
    assert len(engine.list_items(SCOPE, sources=["fact"])) == 2


def test_ingested_facts_supersede_like_remembered_ones(engine_on_each_store: MemoryEngine) -> None:
    engine = engine_on_each_store
    (old,) = engine.ingest(SCOPE, [{"content": "The user works at Acme.", "source": "fact", "created_at": MARCH}])
    (new,) = engine.ingest(SCOPE, [{"content": "The user works at Zalando.", "source": "fact", "created_at": JUNE}])
    assert [r.id for r in engine.list_items(SCOPE, sources=["fact"])] == [new]
    assert engine.store.get_memory(old).metadata["supersededBy"] == new  # type: ignore[union-attr]


def test_dates_are_on_by_default_and_can_be_turned_off() -> None:
    with MemoryEngine(store="sqlite:///:memory:", embedder="fake") as engine:
        engine.remember(SCOPE, "The user lives in Berlin.", created_at=JUNE)
        assert engine.pre_turn("Where does the user live?", SCOPE).prompt.split("\n")[-2] == (
            "[GRAPH 2026-06-03] The user lives in Berlin.")
    undated = MemoryConfig(packer=PackerConfig(dates=False))
    with MemoryEngine(store="sqlite:///:memory:", embedder="fake", config=undated) as engine:
        engine.remember(SCOPE, "The user lives in Berlin.", created_at=JUNE)
        assert engine.pre_turn("Where does the user live?", SCOPE).prompt.split("\n")[-2] == (
            "[GRAPH] The user lives in Berlin.")


def test_a_turn_is_dated_when_it_was_said_not_when_it_was_stored() -> None:
    """An imported conversation keeps its dates: the session row (vectors) and the transcript
    take the messages' time, so the packed line of an old turn reads as old."""
    with MemoryEngine(store="sqlite:///:memory:", embedder="fake") as engine:
        engine.post_turn(SCOPE.with_thread("old"), [
            {"role": "user", "content": "I live in Lisbon near the river.", "timestamp": MARCH},
            {"role": "assistant", "content": "Noted.", "timestamp": MARCH + 5}], extract_facts=False)
        (row,) = engine.list_items(SCOPE, sources=["session"])
        assert row.created_at == MARCH + 5
        assert [m.timestamp for m in engine.thread_messages(SCOPE.with_thread("old"))] == [MARCH, MARCH + 5]
        prompt = engine.pre_turn("Lisbon river", SCOPE.with_thread("s9"), layers=["vectors"]).prompt
        assert "[VECTORS 2026-03-02] user: I live in Lisbon near the river." in prompt, prompt
        # a client clock ahead of the server's never dates a turn in the future
        engine.post_turn(SCOPE.with_thread("ahead"), [
            {"role": "user", "content": "I like kites.", "timestamp": 4_000_000_000_000}], extract_facts=False)
        ahead = [r for r in engine.list_items(SCOPE, sources=["session"]) if r.thread_id == "ahead"]
        assert ahead[0].created_at < 4_000_000_000_000
