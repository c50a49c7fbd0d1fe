"""Item lifecycle on the embedded store and on a real mongod: get, update (re-embedded),
soft delete, hard delete, resolve conflict; soft-deleted and superseded rows never reach
retrieval; the item operations as tools."""

from __future__ import annotations

import pytest

from manowar_memory import MemoryEngine, Scope, ToolCallError, memory_tools
from manowar_memory.embeddings.fake import FakeEmbedder
from manowar_memory.errors import InvalidInputError, NotFoundError
from manowar_memory.jobs import run_job
from manowar_memory.tool_results import SearchResult
from manowar_memory.tools import TOOL_GROUPS, definition

from test_jobs import STORES, make_store

AGENT = "0xitemagent"
ALICE = Scope(agent_wallet=AGENT, user_address="alice")
BOB = Scope(agent_wallet=AGENT, user_address="bob")


@pytest.fixture(params=STORES)
def engine(request):
    eng = MemoryEngine(store=make_store(request, request.param), embedder="fake", extractor=None)
    yield eng
    eng.close()


def _retrieved(engine, query, scope):
    """Ids from every read path: layered search, ranked search and the packed pre_turn."""
    layered = engine.search_layers(query, scope, ["graph", "vectors"], limit=10)
    ids = {c.id for hits in layered.layers.values() for c in hits}
    ranked, _ = engine.search(query, scope, k=10)
    ids |= {c.id for c in ranked}
    ids |= {i.id for i in engine.pre_turn(query, scope, ["graph", "vectors"]).items}
    return ids


def test_get_is_scoped_and_update_re_embeds(engine):
    (rid,) = engine.ingest(ALICE, ["The user owns a red bicycle"])
    got = engine.get_item(ALICE, rid)
    assert got.content == "The user owns a red bicycle" and got.embedding_model == engine.model_id
    with pytest.raises(NotFoundError):
        engine.get_item(BOB, rid)  # another user's row is invisible
    with pytest.raises(NotFoundError):
        engine.get_item(ALICE, "vec_missing")

    updated = engine.update_item(ALICE, rid, content="The user owns a blue scooter", metadata={"tag": "x"},
                                 confidence=0.7)
    expected = FakeEmbedder(dimensions=len(got.embedding)).embed(["The user owns a blue scooter"])[0]
    assert updated.embedding == pytest.approx(expected) and updated.embedding != pytest.approx(got.embedding)
    assert updated.metadata["tag"] == "x" and updated.metadata["confidence"] == 0.7
    stored = engine.store.get_memory(rid)
    assert stored.content == "The user owns a blue scooter" and stored.embedding == pytest.approx(expected)
    assert rid in _retrieved(engine, "blue scooter", ALICE)
    # same text: nothing re-embedded
    same = engine.update_item(ALICE, rid, content="The user owns a blue scooter")
    assert same.embedding == pytest.approx(expected)
    with pytest.raises(InvalidInputError):
        engine.update_item(ALICE, rid, status="deleted")


def test_soft_delete_keeps_history_out_of_retrieval(engine):
    (rid,) = engine.ingest(ALICE, ["The user is allergic to peanuts"])
    assert rid in _retrieved(engine, "allergic peanuts", ALICE)
    assert engine.delete_item(ALICE, rid) is True
    row = engine.store.get_memory(rid)
    assert row is not None and row.metadata["status"] == "deleted" and row.decay_score == 0.0
    assert row.metadata["deletedAt"] > 0
    with pytest.raises(NotFoundError):
        engine.get_item(ALICE, rid)
    assert rid not in _retrieved(engine, "allergic peanuts", ALICE)
    assert engine.list_items(ALICE) == []


def test_hard_delete_removes_the_row(engine):
    rid = engine.remember(ALICE, "The user lives in Porto", fact_type="identity").id
    assert rid in _retrieved(engine, "lives in Porto", ALICE)
    assert engine.delete_item(ALICE, rid, hard=True) is True
    assert engine.store.get_memory(rid) is None
    assert rid not in _retrieved(engine, "lives in Porto", ALICE)
    with pytest.raises(NotFoundError):
        engine.delete_item(ALICE, rid, hard=True)


def test_resolve_conflict_supersede_records_and_hides(engine):
    # two facts the attribute slots do not read as a contradiction (lives in ... would be
    # superseded on write, see test_lifecycle_engine.py): the caller resolves it
    old = engine.remember(ALICE, "The user's home city is Lisbon", fact_type="identity").id
    new = engine.remember(ALICE, "The user's home city is Madrid", fact_type="identity").id
    assert {old, new} <= _retrieved(engine, "what is the user's home city", ALICE) | _retrieved(engine, "home city", ALICE)
    rec = engine.resolve_conflict(ALICE, old, "supersede", winning_memory_id=new, reason="moved in 2025")
    assert rec.status == "superseded" and rec.decay_score <= 0.05
    assert rec.metadata["conflictResolution"] == "supersede" and rec.metadata["winningMemoryId"] == new
    assert rec.metadata["supersededBy"] == new and rec.metadata["conflictReason"] == "moved in 2025"
    assert rec.metadata["conflictResolvedAt"] > 0
    assert engine.store.get_memory(old).status == "superseded"
    assert engine.get_item(ALICE, new).status == "active", "the winning row is untouched"
    found = _retrieved(engine, "home city Lisbon", ALICE)
    assert old not in found and new in _retrieved(engine, "home city Madrid", ALICE)
    with pytest.raises(NotFoundError):
        engine.resolve_conflict(ALICE, old, "keep")  # already superseded: not an active row


@pytest.mark.parametrize("resolution", ["keep", "merge", "ignore"])
def test_resolve_conflict_other_resolutions_stay_active(engine, resolution):
    rid = engine.remember(ALICE, "The user prefers tea", fact_type="preference").id
    rec = engine.resolve_conflict(ALICE, rid, resolution)
    assert rec.status == "active" and rec.metadata["conflictResolution"] == resolution
    assert "winningMemoryId" not in rec.metadata
    assert rid in _retrieved(engine, "prefers tea", ALICE)


def test_resolve_conflict_rejects_bad_input(engine):
    rid = engine.remember(ALICE, "The user has a cat", fact_type="context").id
    bobs = engine.remember(BOB, "Bob has a dog", fact_type="context").id
    with pytest.raises(InvalidInputError, match="resolution must be"):
        engine.resolve_conflict(ALICE, rid, "delete")
    with pytest.raises(InvalidInputError, match="another row"):
        engine.resolve_conflict(ALICE, rid, "supersede", winning_memory_id=rid)
    with pytest.raises(NotFoundError):
        engine.resolve_conflict(ALICE, rid, "supersede", winning_memory_id=bobs)  # not visible to alice
    assert engine.get_item(ALICE, rid).status == "active", "a rejected resolution changes nothing"


def test_consolidated_rows_never_reach_retrieval(engine):
    old, new = engine.ingest(ALICE, [
        {"content": "The user runs marathons", "created_at": 1_700_000_000_000},
        {"content": "the user runs marathons", "created_at": 1_700_000_100_000},
    ])
    assert {old, new} <= _retrieved(engine, "runs marathons", ALICE)
    assert run_job(engine, "consolidate", {"agent_wallet": AGENT}).data["consolidated"] == 1
    found = _retrieved(engine, "runs marathons", ALICE)
    assert old not in found and new in found


def test_item_tools(engine):
    tools = {t.name: t for t in memory_tools(engine.scoped(ALICE), groups=TOOL_GROUPS)}
    assert {"memory_get", "memory_update", "memory_delete", "memory_resolve_conflict"} <= set(tools)
    for tool in tools.values():  # every tool: a description and a closed object schema of its arguments
        schema = tool.json_schema()
        assert tool.description and schema["type"] == "object" and schema["additionalProperties"] is False
        assert not {"agent_wallet", "user_address", "mode", "hai_id"} & set(schema.get("properties", {}))
    (rid,) = engine.ingest(ALICE, ["The user studies Japanese"])
    got = tools["memory_get"].call(memory_id=rid)["memory"]
    assert got["id"] == rid and got["text"] == "The user studies Japanese" and "embedding" not in got
    upd = tools["memory_update"].call(memory_id=rid, content="The user studies Korean")
    assert upd["updated"] and upd["memory"]["text"] == "The user studies Korean"
    other = engine.ingest(ALICE, ["The user studies Korean daily"])[0]
    res = tools["memory_resolve_conflict"].call(memory_id=rid, resolution="supersede", winning_memory_id=other)
    assert res["resolved"] and res["memory"]["status"] == "superseded"
    with pytest.raises(ToolCallError) as err:
        tools["memory_get"].call(memory_id=rid)
    assert err.value.payload["error"]["type"] == "NotFoundError"
    assert tools["memory_delete"].call(memory_id=other) == {"deleted": True, "memory_id": other, "hard": False}
    with pytest.raises(ToolCallError, match="resolution"):
        tools["memory_resolve_conflict"].call(memory_id=rid, resolution="explode")
    bob = {t.name: t for t in memory_tools(engine.scoped(BOB))}
    with pytest.raises(ToolCallError):
        bob["memory_get"].call(memory_id=other)


def test_superseded_or_deleted_fact_can_be_remembered_again(engine):
    first = engine.remember(ALICE, "The user likes oolong tea")
    engine.resolve_conflict(ALICE, first.id, "supersede")
    second = engine.remember(ALICE, "The user likes oolong tea")
    assert not second.deduplicated and second.id != first.id
    again = engine.remember(ALICE, "The user likes oolong tea")
    assert again.deduplicated and again.id == second.id, "one active copy of a fact"
    engine.delete_item(ALICE, second.id)
    third = engine.remember(ALICE, "The user likes oolong tea")
    assert not third.deduplicated and third.id not in (first.id, second.id)
    assert _retrieved(engine, "oolong tea", ALICE) & {first.id, second.id, third.id} == {third.id}


def test_a_tool_is_found_by_name_across_groups_and_an_unknown_name_says_which_exist():
    assert definition("memory_search").result_model is SearchResult
    assert definition("memory_consolidate").group == "jobs"  # outside the default groups too
    with pytest.raises(InvalidInputError, match=r"unknown tool 'memory_serch'.*memory_search"):
        definition("memory_serch")
