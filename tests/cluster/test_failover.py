"""Failover on a real three-member replica set: two engine processes write (remember, keyed
ingest, post_turn) and read (pre_turn) in a loop while the primary is SIGKILLed and later
restarted. Every acknowledged write is there afterwards, exactly once; reads succeed again
after the election; every error the engines saw is the library's own and says to retry."""

from __future__ import annotations

import time
from collections import Counter

import pymongo
import pytest

from manowar_memory.testing.cluster import EngineProcess, RemoteError

pytestmark = [pytest.mark.cluster, pytest.mark.mongo, pytest.mark.xdist_group("replica-set")]


def test_primary_killed_and_restarted_mid_loop_loses_and_duplicates_nothing(replica_set, cluster_db):
    rs = replica_set
    agent = "agent-failover"
    # engine 0 keeps the store's defaults (the driver waits up to 10 s for a new primary, so an
    # election is invisible to it); engine 1 gives up after 0.5 s, so the election may reach its
    # caller as StoreUnavailableError, and the loop retries the call. Whether a call of its loop
    # falls inside the election is a matter of timing; the probe, as impatient and idle until
    # then, makes one call the moment the primary is killed, seconds before a new one can be
    # elected (electionTimeoutMillis), so the error path is always taken
    impatient = {"serverSelectionTimeoutMS": 500}
    engines = [EngineProcess(rs.uri, cluster_db), EngineProcess(rs.uri, cluster_db, store_options=impatient)]
    probe = EngineProcess(rs.uri, cluster_db, store_options=impatient)
    probe_scope = {"agent_wallet": agent, "user_address": "user-probe"}
    probe_error: RemoteError | None = None
    try:
        probe.call("remember", scope=probe_scope, text="The probe's user keeps one notebook.")  # topology known
        for n, engine in enumerate(engines):
            engine.send("churn", tag=f"w{n}", agent=agent, seconds=11, delay=0.02)
        time.sleep(2.5)  # writes are flowing on the first primary
        old = rs.primary()
        assert old is not None
        killed_at = time.time()
        rs.kill(old)
        try:
            probe.call("remember", scope=probe_scope, text="The probe's user keeps two notebooks.")
        except RemoteError as exc:
            probe_error = exc
        new = rs.wait_primary(30)
        assert new != old
        time.sleep(2)  # the loop goes on against the new primary with one member down
        rs.restart(old)
        results = [engine.receive() for engine in engines]
    finally:
        for engine in [*engines, probe]:
            engine.close()
    rs.wait_secondaries(60)
    # a call during the election: the library's own error, retryable, saying to retry
    assert probe_error is not None, "a write during the election succeeded: no election was seen"
    assert probe_error.type == "StoreUnavailableError" and probe_error.retryable is True, probe_error
    assert "retry" in str(probe_error), probe_error

    client = pymongo.MongoClient(rs.uri, w="majority", readConcernLevel="majority")
    try:
        memory = client[cluster_db]["memory"]
        rows = list(memory.find({"agentWallet": agent}, {"vectorId": 1, "metadata": 1, "content": 1}))
        transcripts = {t["sessionId"]: t for t in client[cluster_db]["session_transcripts"].find({"agentWallet": agent})}
    finally:
        client.close()
    ids = Counter(r["vectorId"] for r in rows)
    assert all(n == 1 for n in ids.values()), "a row id is stored twice"

    for n, result in enumerate(results):
        acked = result["acked"]
        assert len(acked["remember"]) > 20 and len(acked["post_turn"]) > 20, "the loop hardly ran"
        # remember: every acknowledged fact present, one active row per fact hash
        fact_rows = Counter(r["metadata"].get("factHash") for r in rows if r["metadata"].get("source") == "remember")
        for row_id, fact_hash in acked["remember"]:
            assert ids[row_id] == 1
            assert fact_rows[fact_hash] == 1
        # keyed ingest: the acknowledged id is there once
        for row_id, _key in acked["ingest"]:
            assert ids[row_id] == 1
        # post_turn: each acknowledged turn has one session row and its message once in the transcript
        turn_rows = Counter(r["metadata"].get("turnId") for r in rows if r["metadata"].get("type") == "agent_memory_turn")
        contents = Counter(m["content"] for t in transcripts.values() for m in t["messages"])
        for row_id, turn in acked["post_turn"]:
            if row_id is not None:
                assert ids[row_id] == 1
            assert turn_rows[turn] <= 1
            assert contents[f"{turn} asks"] == 1, f"turn {turn} is missing from or repeated in the transcript"
        # reads went on after the election
        assert any(t > killed_at + 1 for t in result["reads"]), f"engine {n} never read again after the kill"
        # every error raised to the caller is the library's own and says to retry
        if n == 1:
            assert result["errors"], "the impatient engine never saw the election"
        for error in result["errors"]:
            assert error["library"], f"a driver error reached the caller: {error}"
            assert error["type"] == "StoreUnavailableError" and error["retryable"] is True, error
            assert "retry" in error["message"], error


def test_no_reachable_server_is_a_retryable_library_error():
    from manowar_memory import MemoryEngine, StoreError, StoreUnavailableError
    from manowar_memory.stores.mongo import MongoStore
    from manowar_memory.testing.cluster import free_port

    store = MongoStore(f"mongodb://127.0.0.1:{free_port()}/db", create_indexes=False, serverSelectionTimeoutMS=300)
    engine = MemoryEngine(store=store, embedder="fake")
    try:
        with pytest.raises(StoreUnavailableError) as caught:
            engine.remember({"agent_wallet": "a1", "user_address": "u1"}, "The user likes tea.")
    finally:
        engine.close()
    error = caught.value
    assert isinstance(error, StoreError) and error.retryable is True and error.operation
    assert "retry the same call" in str(error)
