"""Shard readiness of the MongoDB store, without a ``mongos`` (no PyPI wheel ships one): every
command the engine sends for one scope to a collection meant to be sharded on
``{agentWallet: 1}`` names that agent by equality, so ``mongos`` could route it to the one shard
that owns the agent instead of broadcasting it. Checked by recording the real commands (pymongo
command monitoring) of a workload of every engine operation on the test server."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from pymongo import MongoClient, monitoring

from manowar_memory import MemoryEngine, Scope

pytestmark = [pytest.mark.cluster, pytest.mark.mongo]

#: the collections the README says to shard on {agentWallet: 1}
SHARDED = {"memory", "session_transcripts", "session_transcript_chunks", "sessions"}
AGENT = "0xshardagent01"


class Recorder(monitoring.CommandListener):
    def __init__(self) -> None:
        self.commands: list[tuple[str, dict[str, Any]]] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        self.commands.append((event.command_name, dict(event.command)))

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


def names_agent(flt: Any) -> bool:
    """Whether a filter pins agentWallet to one value (at the top, in an $and, or in every $or branch)."""
    if not isinstance(flt, dict):
        return False
    value = flt.get("agentWallet")
    if isinstance(value, str) or (isinstance(value, dict) and isinstance(value.get("$eq"), str)):
        return True
    if isinstance(value, dict) and isinstance(value.get("$in"), list) and len(value["$in"]) == 1:
        return True
    if any(names_agent(sub) for sub in flt.get("$and", [])):
        return True
    branches = flt.get("$or")
    return bool(branches) and all(names_agent(sub) for sub in branches)


def routing_filters(name: str, cmd: dict[str, Any]) -> list[Any]:
    """The filters (or inserted documents) mongos would route this command by."""
    if name == "find":
        return [cmd.get("filter", {})]
    if name == "aggregate":
        first = cmd["pipeline"][0] if cmd.get("pipeline") else {}
        if "$listSearchIndexes" in first:  # the store's one-time probe for Atlas Search
            return []
        return [first.get("$match", {})]
    if name in ("count", "distinct"):
        return [cmd.get("query", {})]
    if name == "findAndModify":
        return [cmd.get("query", {})]
    if name == "update":
        return [u["q"] for u in cmd["updates"]]
    if name == "delete":
        return [d["q"] for d in cmd["deletes"]]
    if name == "insert":
        return [{"agentWallet": d.get("agentWallet")} for d in cmd["documents"]]
    return []


def test_single_scope_operations_name_their_agent(mongo_uri):
    from manowar_memory.stores.mongo import MongoStore

    recorder = Recorder()
    database = f"manowar_shard_{uuid.uuid4().hex[:10]}"
    store = MongoStore(mongo_uri, database=database, event_listeners=[recorder])
    engine = MemoryEngine(store=store, embedder="fake")
    scope = Scope(agent_wallet=AGENT, user_address="user-1", thread_id="t-1")
    try:
        recorder.commands.clear()  # index creation is a one-time admin step, not a scope operation
        fact = engine.remember(scope, "The user lives in Lisbon.")
        engine.remember(scope, "The user lives in Lisbon.")  # reinforce
        ids = engine.ingest(scope, [{"content": "a note about tea", "key": "k1"}, "another note"])
        engine.post_turn(scope, [{"role": "user", "content": "I like green tea"},
                                 {"role": "assistant", "content": "noted"}])
        engine.flush()
        engine.pre_turn("where does the user live?", scope)
        engine.search("tea", scope)
        engine.get_item(scope, ids[0])
        engine.list_items(scope)
        engine.update_item(scope, ids[1], content="another note, edited")
        engine.thread_messages(scope)
        engine.delete_item(scope, ids[1])
        engine.delete_item(scope, fact.id, hard=True)
        engine.clear_thread(scope)
    finally:
        engine.close()
        with MongoClient(mongo_uri) as client:
            client.drop_database(database)
    checked = 0
    broadcast = []
    for name, cmd in recorder.commands:
        collection = cmd.get(name)
        if not isinstance(collection, str) or collection not in SHARDED:
            continue
        for flt in routing_filters(name, cmd):
            checked += 1
            if not names_agent(flt):
                broadcast.append((name, collection, flt))
    assert checked > 20
    assert not broadcast, f"commands mongos would broadcast to every shard: {broadcast}"
