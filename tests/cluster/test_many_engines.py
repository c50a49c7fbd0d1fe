"""Three engine processes over one replica set, each with its own in-process vector cache
(and, in the second test, one Redis query cache shared by all three): a write or a delete
acknowledged by any one of them is seen by the very next search of every other one.

The bound is zero: no wait between the acknowledgement and the reads. Before each search the
vector cache re-reads the rows stamped since its last sync, and the top rows are fetched with
the full scope filter, so a deleted row is never returned even before the cache drops it; a
write bumps the scope's query-cache keys in Redis before it returns, so no engine finds the
result it cached before the write."""

from __future__ import annotations

import uuid

import pytest

from manowar_memory.testing.cluster import EngineProcess

pytestmark = [pytest.mark.cluster, pytest.mark.mongo, pytest.mark.xdist_group("replica-set")]

SCOPE = {"agent_wallet": "agent-many", "user_address": "user-1"}


def _read(engine: EngineProcess, query: str) -> tuple[set[str], dict]:
    """Ids from search and from pre_turn (with its vector lane's own hits)."""
    found = set(engine.call("search", scope=SCOPE, query=query, k=50)["ids"])
    pre = engine.call("pre_turn", scope=SCOPE, query=query, max_items=50, budget_chars=50_000)
    return found | set(pre["ids"]), pre


def _check_visibility(engines: list[EngineProcess]) -> None:
    seeded = engines[0].call("ingest", scope=SCOPE, items=[f"background note {i} about gardening" for i in range(20)])
    assert len(seeded["ids"]) == 20
    for engine in engines:  # warm every vector cache (and query cache) on the old corpus
        _read(engine, "gardening")
    for r in range(6):
        writer = engines[r % 3]
        text = f"round {r}: the user's locker code is {uuid.uuid4().hex[:8]}"
        for engine in engines:  # every engine reads (and caches) the query before the write
            ids, _ = _read(engine, text)
        if r % 2:
            new_id = writer.call("ingest", scope=SCOPE, items=[text])["ids"][0]
        else:
            new_id = writer.call("remember", scope=SCOPE, text=text)["id"]
        for engine in engines:
            ids, pre = _read(engine, text)
            assert new_id in ids, f"round {r}: engine did not see the row written through another one"
            assert new_id in pre["vector_hits"], f"round {r}: the vector lane missed the new row"
            assert pre["vector_methods"] == ["local-cache"], pre["vector_methods"]
        deleter = engines[(r + 1) % 3]
        assert deleter.call("delete", scope=SCOPE, id=new_id, hard=bool(r % 2 == 0))["deleted"]
        for engine in engines:
            ids, pre = _read(engine, text)
            assert new_id not in ids, f"round {r}: a deleted row was still returned (hard={r % 2 == 0})"
            assert new_id not in pre["vector_hits"]


def test_writes_and_deletes_are_seen_by_every_engine_at_once(replica_set, cluster_db):
    engines = [EngineProcess(replica_set.uri, cluster_db) for _ in range(3)]
    try:
        _check_visibility(engines)
    finally:
        for engine in engines:
            engine.close()


@pytest.mark.redis
def test_with_a_shared_redis_query_cache(replica_set, cluster_db, redis_url, redis_client, redis_key_prefix):
    engines = [EngineProcess(replica_set.uri, cluster_db, redis_url=redis_url, redis_prefix=redis_key_prefix)
               for _ in range(3)]
    try:
        # the cache is really shared and used: a repeated query is a hit in another process
        engines[0].call("pre_turn", scope=SCOPE, query="anything at all")
        assert engines[1].call("pre_turn", scope=SCOPE, query="anything at all")["cache_hit"]
        _check_visibility(engines)
    finally:
        for engine in engines:
            engine.close()
