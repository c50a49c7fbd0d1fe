"""Every store passes the same conformance suite, unchanged: the embedded SQLite store
(in memory and in a file) and the MongoDB store against a real ``mongod``.

The MongoDB classes share one database per class whose indexes are created once; each test
gets a new store on it after every collection was emptied (creating ~50 indexes per test
would dominate the run time).
"""

from __future__ import annotations

import uuid

import pytest

from manowar_memory import SQLiteStore
from manowar_memory.testing import StoreConformance


class TestSQLiteMemoryStore(StoreConformance):
    @pytest.fixture
    def store(self):
        s = SQLiteStore(":memory:")
        yield s
        s.close()


class TestSQLiteFileStore(StoreConformance):
    @pytest.fixture
    def store(self, tmp_path):
        s = SQLiteStore(tmp_path / "conformance.db")
        yield s
        s.close()


@pytest.fixture(scope="class")
def indexed_mongo_db(mongo_client):
    """A database with the store's indexes, for one test class."""
    from manowar_memory.stores.mongo import MongoStore

    name = f"manowar_conf_{uuid.uuid4().hex[:12]}"
    MongoStore(client=mongo_client, database=name).close()  # creates the collections' indexes
    yield mongo_client[name]
    mongo_client.drop_database(name)


def _empty(db) -> None:
    for coll in db.list_collection_names():
        if coll != "_manowar_migrations":  # what the indexes come from: kept with them
            db[coll].delete_many({})


@pytest.mark.mongo
class TestMongoStore(StoreConformance):
    @pytest.fixture
    def store(self, indexed_mongo_db):
        from manowar_memory.stores.mongo import MongoStore

        _empty(indexed_mongo_db)
        s = MongoStore(client=indexed_mongo_db.client, database=indexed_mongo_db.name, vector_search="auto",
                       create_indexes=False)
        yield s
        s.close()


@pytest.mark.mongo
class TestMongoStoreSmallScanBatches(StoreConformance):
    """The streaming scan (vector cache off) with batches of 2 rows: the running top-k must merge batches."""

    @pytest.fixture
    def store(self, indexed_mongo_db):
        from manowar_memory.stores.mongo import MongoStore

        _empty(indexed_mongo_db)
        s = MongoStore(client=indexed_mongo_db.client, database=indexed_mongo_db.name, vector_search="local",
                       scan_batch_size=2, vector_cache_bytes=0, create_indexes=False)
        yield s
        s.close()


# ----------------------------------------------------------------------------- MongoDB specifics

from manowar_memory import MemoryEngine, Scope, Session, StoreError  # noqa: E402
from manowar_memory._util import now_ms  # noqa: E402
from manowar_memory.stores.base import MemoryQuery  # noqa: E402
from manowar_memory.testing.conformance import MODEL, make_record  # noqa: E402


@pytest.fixture
def mongo_store(mongo_db):
    from manowar_memory.stores.mongo import MongoStore

    s = MongoStore(client=mongo_db.client, database=mongo_db.name)
    yield s
    s.close()


@pytest.mark.mongo
def test_mongo_collections_and_indexes(mongo_store, mongo_db) -> None:
    from manowar_memory.stores import _mql_schema

    for coll, specs in _mql_schema.INDEXES.items():
        info = mongo_db[coll].index_information()
        for spec in specs:
            assert spec.name in info, f"{coll}.{spec.name}"
            if spec.options.get("unique"):
                assert info[spec.name].get("unique") is True
    assert mongo_db["sessions"].index_information()["idx_session_ttl"]["expireAfterSeconds"] == 0


@pytest.mark.mongo
def test_mongo_documents_use_the_reference_shape(mongo_store, mongo_db) -> None:
    from bson.binary import Binary

    (rid,) = mongo_store.add_memories([make_record("shape check", user="u1", mode="local", hai="h1",
                                                   embedding=[0.5, 0.5, 0.5, 0.5])])
    doc = mongo_db["memory"].find_one({"vectorId": rid})
    assert doc["agentWallet"] == "agent-A" and doc["userAddress"] == "u1" and doc["haiId"] == "h1"
    assert (doc["scopeKind"], doc["scopeId"]) == ("local", "h1")
    assert isinstance(doc["embedding"], Binary) and doc["embedding"].subtype == 9
    assert doc["embedding"].as_vector().data == pytest.approx([0.5] * 4)
    assert doc["embeddingModel"] == MODEL and doc["decayScore"] == 1.0 and doc["accessCount"] == 0
    now = now_ms()
    mongo_store.upsert_session(Session(session_id="s", agent_wallet="agent-A", expires_at=now + 60_000))
    sess = mongo_db["sessions"].find_one({"sessionId": "s"})
    assert sess["expiresAt"].year >= 2023 and hasattr(sess["expiresAt"], "tzinfo")
    assert (sess["scopeKind"], sess["scopeId"]) == (None, "agent-A")


@pytest.mark.mongo
def test_mongo_ttl_index_expires_sessions(mongo_store, mongo_db) -> None:
    import time

    sleep = mongo_db.client.admin.command("getParameter", 1, ttlMonitorSleepSecs=1).get("ttlMonitorSleepSecs", 60)
    if sleep > 5:
        pytest.skip(f"the server's TTL monitor runs every {sleep}s (scripts/services.sh sets 1s)")
    now = now_ms()
    mongo_store.upsert_session(Session(session_id="gone", agent_wallet="agent-A", expires_at=now - 1000))
    mongo_store.upsert_session(Session(session_id="kept", agent_wallet="agent-A", expires_at=now + 3_600_000))
    deadline = time.monotonic() + 4 * sleep + 5
    while mongo_db["sessions"].count_documents({"sessionId": "gone"}) and time.monotonic() < deadline:
        time.sleep(0.25)
    assert mongo_db["sessions"].count_documents({"sessionId": "gone"}) == 0, "the TTL monitor did not remove it"
    assert mongo_db["sessions"].count_documents({"sessionId": "kept"}) == 1


@pytest.mark.mongo
def test_mongo_auto_chooses_local_scan_on_a_self_hosted_server(mongo_store) -> None:
    mongo_store.add_memories([make_record("auto choice")])
    hits, info = mongo_store.vector_search(MemoryQuery(scope=Scope(agent_wallet="agent-A")), [1, 0, 0, 0], MODEL, 3)
    assert info.method == "local-cache" and len(hits) == 1 and info.notes == []
    method, why = mongo_store.vector_search_choice
    assert method == "local" and "auto" in why and "Atlas" in why


@pytest.mark.mongo
def test_mongo_atlas_mode_falls_back_to_the_local_scan_and_says_so(mongo_db) -> None:
    from manowar_memory.stores.mongo import MongoStore

    store = MongoStore(client=mongo_db.client, database=mongo_db.name, vector_search="atlas")
    store.add_memories([make_record("atlas fallback", embedding=[1, 0, 0, 0])])
    hits, info = store.vector_search(MemoryQuery(scope=Scope(agent_wallet="agent-A")), [1, 0, 0, 0], MODEL, 3)
    assert [h.record.content for h in hits] == ["atlas fallback"]
    assert info.method == "local-cache"
    assert any("Atlas" in n and "local path" in n for n in info.notes)
    again, info = store.vector_search(MemoryQuery(scope=Scope(agent_wallet="agent-A")), [1, 0, 0, 0], MODEL, 3)
    assert len(again) == 1 and any("unavailable" in n for n in info.notes)  # not retried on every query


@pytest.mark.mongo
def test_mongo_engine_reports_the_atlas_fallback_as_a_degradation(mongo_db) -> None:
    from manowar_memory.stores.mongo import MongoStore

    store = MongoStore(client=mongo_db.client, database=mongo_db.name, vector_search="atlas")
    with MemoryEngine(store=store, embedder="fake", extractor=None) as engine:
        scope = Scope(agent_wallet="agent-A", user_address="u1")
        engine.ingest(scope, ["The user's cat is named Miso."])
        result = engine.pre_turn("What is the cat called?", scope)
        assert "Miso" in result.prompt
        assert any("Atlas" in d for d in result.degradations)
        assert result.lanes["vectors"]["vector_method"] == "local-cache"


@pytest.mark.mongo
def test_mongo_max_scan_caps_the_local_scan_and_says_so(mongo_db) -> None:
    from manowar_memory.stores.mongo import MongoStore

    store = MongoStore(client=mongo_db.client, database=mongo_db.name, vector_search="local", max_scan=3,
                       scan_batch_size=2, vector_cache_bytes=0)
    store.add_memories([make_record(f"capped {i}", created_at=1_000 + i, embedding=[1, 0, 0, 0]) for i in range(6)])
    hits, info = store.vector_search(MemoryQuery(scope=Scope(agent_wallet="agent-A")), [1, 0, 0, 0], MODEL, 10)
    assert info.candidates == 3
    assert {h.record.content for h in hits} == {"capped 5", "capped 4", "capped 3"}  # the newest rows
    assert any("max_scan" in n for n in info.notes)


@pytest.mark.mongo
def test_mongo_reads_reference_rows_with_array_embeddings(mongo_store, mongo_db) -> None:
    mongo_db["memory"].insert_one({
        "vectorId": "vec_legacy", "agentWallet": "agent-A", "userAddress": None, "threadId": None, "mode": None,
        "haiId": None, "scopeKind": None, "scopeId": "agent-A", "content": "legacy row from the reference",
        "embedding": [0.0, 1.0, 0.0, 0.0], "embeddingModel": MODEL, "source": "knowledge", "decayScore": 1,
        "accessCount": 0, "createdAt": 5, "updatedAt": 5, "lastAccessedAt": 5, "metadata": {},
    })
    mongo_store.add_memories([make_record("binary row", embedding=[1.0, 0.0, 0.0, 0.0])])
    query = MemoryQuery(scope=Scope(agent_wallet="agent-A"))
    hits, _ = mongo_store.vector_search(query, [0.0, 1.0, 0.0, 0.0], MODEL, 5)
    assert hits[0].record.id == "vec_legacy" and hits[0].score == pytest.approx(1.0)
    assert mongo_store.get_memory("vec_legacy").embedding == [0.0, 1.0, 0.0, 0.0]


@pytest.mark.mongo
def test_mongo_replaces_a_conflicting_reference_index(mongo_db) -> None:
    from manowar_memory.stores.mongo import MongoStore

    mongo_db["memory"].create_index([("vectorId", 1)], name="idx_vector_id")  # the reference's: not unique
    MongoStore(client=mongo_db.client, database=mongo_db.name).close()
    info = mongo_db["memory"].index_information()
    assert "idx_vector_id" not in info  # ids are unique per agent now (m004_vector_id_per_agent)
    assert info["idx_vector_agent_id"].get("unique") is True
    assert info["idx_vector_agent_id"]["key"] == [("agentWallet", 1), ("vectorId", 1)]


@pytest.mark.mongo
def test_open_store_maps_mongodb_urls(mongo_uri, mongo_client) -> None:
    from manowar_memory.engine import open_store
    from manowar_memory.stores.mongo import MongoStore

    base, _, query = mongo_uri.partition("?")
    name = "manowar_test_openstore"
    url = base.rstrip("/") + f"/{name}" + (f"?{query}" if query else "")
    store = open_store(url)
    try:
        assert isinstance(store, MongoStore) and store.database_name == name
        assert name in mongo_client.list_database_names()  # the indexes were created on open
    finally:
        store.close()
        mongo_client.drop_database(name)
    assert MongoStore(base.rstrip("/") + "/" + (f"?{query}" if query else ""), create_indexes=False).database_name == (
        "manowar_memory")


def test_mongo_store_errors_are_store_errors() -> None:
    pytest.importorskip("pymongo")
    import socket

    from manowar_memory.stores.mongo import MongoStore

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(StoreError, match="MongoDB"):
        MongoStore(f"mongodb://127.0.0.1:{port}/x", serverSelectionTimeoutMS=300, connectTimeoutMS=300)


# ----------------------------------------------------------------------------- MongoDB vector cache

_VQ = MemoryQuery(scope=Scope(agent_wallet="agent-A"))


def _ids(store, vector, *, query=_VQ, model=MODEL, limit=10):
    hits, info = store.vector_search(query, vector, model, limit)
    assert info.method == "local-cache", info
    return [h.record.id for h in hits]


def insert_in_subprocess(uri: str, database: str, content: str) -> str:
    """Runs in another process: one insert through its own MongoStore."""
    from manowar_memory.stores.mongo import MongoStore

    store = MongoStore(uri, database=database, create_indexes=False)
    try:
        (rid,) = store.add_memories([make_record(content, created_at=50, embedding=[0.0, 0.0, 1.0, 0.0])])
        return rid
    finally:
        store.close()


@pytest.mark.mongo
def test_mongo_vector_cache_sees_writes_of_other_stores_and_processes(mongo_db, mongo_uri) -> None:
    import concurrent.futures
    import multiprocessing

    from manowar_memory.stores.mongo import MongoStore
    from manowar_memory.testing.conformance import OTHER_MODEL

    # recount on every search: rows written around the store (no sync stamp) are then seen at once
    reader = MongoStore(client=mongo_db.client, database=mongo_db.name, vector_cache_recount_s=0)
    writer = MongoStore(client=mongo_db.client, database=mongo_db.name, create_indexes=False)
    try:
        a, b = writer.add_memories([make_record("a", created_at=1, embedding=[1.0, 0.0, 0.0, 0.0]),
                                    make_record("b", created_at=2, embedding=[0.8, 0.6, 0.0, 0.0])])
        x = [1.0, 0.0, 0.0, 0.0]
        assert _ids(reader, x) == [a, b]  # loads the (agent, model) partition
        (c,) = writer.add_memories([make_record("c", created_at=3, embedding=[0.9, 0.1, 0.0, 0.0])])
        assert _ids(reader, x) == [a, c, b]  # an insert by another store
        writer.update_memory(a, {"metadata": {"status": "deleted"}})
        assert _ids(reader, x) == [c, b]  # soft delete
        ids = [h.record.id for h in reader.vector_search(
            MemoryQuery(scope=Scope(agent_wallet="agent-A"), active_only=False), x, MODEL, 10)[0]]
        assert ids == [a, c, b]  # still cached, only masked
        writer.update_memory(c, {"metadata": {"status": "superseded"}})
        assert _ids(reader, x) == [b]  # supersede
        writer.update_memory(a, {"metadata": {"status": "active"}})
        writer.update_memory(b, {"embedding": [0.0, 1.0, 0.0, 0.0], "embedding_model": OTHER_MODEL})
        hits, info = reader.vector_search(_VQ, x, MODEL, 10)
        assert [h.record.id for h in hits] == [a] and info.skipped_other_models == 1  # never mixes models
        assert _ids(reader, [0.0, 1.0, 0.0, 0.0], model=OTHER_MODEL) == [b]  # its own partition
        writer.update_memory(a, {"embedding": [0.0, 0.0, 0.0, 1.0], "content": "$literal text, not a field path"})
        assert writer.get_memory(a).content == "$literal text, not a field path"  # type: ignore[union-attr]
        assert reader.vector_search(_VQ, [0.0, 0.0, 0.0, 1.0], MODEL, 1)[0][0].score == pytest.approx(1.0)
        writer.delete_memory(a)
        assert _ids(reader, x) == []  # a hard delete leaves no row: found by the count check
        ctx = multiprocessing.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(max_workers=1, mp_context=ctx) as pool:
            d = pool.submit(insert_in_subprocess, mongo_uri, mongo_db.name, "from another process").result(120)
        assert _ids(reader, [0.0, 0.0, 1.0, 0.0]) == [d]
        # writers that bypass MongoStore (no sync stamp): the count check reloads or reconciles
        legacy = {"vectorId": "vec_legacy", "agentWallet": "agent-A", "userAddress": None, "mode": None,
                  "haiId": None, "content": "legacy", "embedding": [0.0, 1.0, 1.0, 0.0], "embeddingModel": MODEL,
                  "source": "knowledge", "decayScore": 1, "accessCount": 0, "createdAt": 9, "updatedAt": 9,
                  "lastAccessedAt": 9, "metadata": {}}
        mongo_db["memory"].insert_one(legacy)
        assert _ids(reader, [0.0, 1.0, 1.0, 0.0])[0] == "vec_legacy"
        mongo_db["memory"].delete_one({"vectorId": d})
        assert _ids(reader, [0.0, 0.0, 1.0, 0.0]) == ["vec_legacy"]
    finally:
        reader.close()
        writer.close()


@pytest.mark.mongo
def test_mongo_vector_cache_scope_filters_and_threads(mongo_db) -> None:
    from manowar_memory.stores.mongo import MongoStore

    store = MongoStore(client=mongo_db.client, database=mongo_db.name)
    try:
        rows = store.add_memories([
            make_record("shared", embedding=[1.0, 0.0, 0.0, 0.0]),
            make_record("u1 t1", user="u1", thread="t1", embedding=[1.0, 0.1, 0.0, 0.0], metadata={"app_id": "x"}),
            make_record("u1 t2", user="u1", thread="t2", embedding=[1.0, 0.2, 0.0, 0.0]),
            make_record("u2", user="u2", embedding=[1.0, 0.0, 0.1, 0.0]),
            make_record("other agent", agent="agent-B", embedding=[1.0, 0.0, 0.0, 0.0]),
        ])
        shared, t1, t2, _, _ = rows
        x = [1.0, 0.0, 0.0, 0.0]
        u1 = Scope(agent_wallet="agent-A", user_address="u1", thread_id="t1")
        assert _ids(store, x, query=MemoryQuery(scope=u1)) == [shared, t1, t2]
        assert _ids(store, x, query=MemoryQuery(scope=u1, durable=False)) == [t1]
        assert _ids(store, x, query=MemoryQuery(scope=u1, filters={"metadata.app_id": "x"})) == [t1]
        assert _ids(store, x, query=MemoryQuery(scope=Scope(agent_wallet="agent-A"))) == [shared]
    finally:
        store.close()


@pytest.mark.mongo
def test_mongo_vector_cache_keeps_up_without_reloading(mongo_db, monkeypatch: pytest.MonkeyPatch) -> None:
    """A row left without an embedding must not make every recount reload the partition, and a
    second write in the same millisecond as one the cache already synced must still be seen."""
    from manowar_memory.stores.mongo import MongoStore
    from manowar_memory.stores.mongo import connection as mongo_connection
    from manowar_memory.stores.mongo import rows as mongo_rows

    store = MongoStore(client=mongo_db.client, database=mongo_db.name, vector_cache_recount_s=0)
    try:
        q = MemoryQuery(scope=Scope(agent_wallet="agent-A"))
        kept, cleared = store.add_memories([make_record("a", embedding=[1.0, 0.0, 0.0, 0.0]),
                                            make_record("b", embedding=[0.0, 1.0, 0.0, 0.0])])
        store.vector_search(q, [1.0, 0.0, 0.0, 0.0], MODEL, 5)
        store.update_memory(cleared, {"embedding": None})
        loads = []
        original = store._load
        monkeypatch.setattr(store, "_load", lambda *a, **k: loads.append(1) or original(*a, **k))
        for _ in range(3):
            hits, info = store.vector_search(q, [1.0, 0.0, 0.0, 0.0], MODEL, 5)
        assert info.method == "local-cache" and [h.record.id for h in hits] == [kept] and loads == []

        (row,) = store.add_memories([make_record("c", embedding=[0.0, 0.0, 1.0, 0.0])])
        for module in (mongo_connection, mongo_rows):  # every write in one millisecond
            monkeypatch.setattr(module, "now_ms", lambda: 1_900_000_000_000)
        store.update_memory(row, {"metadata": {"status": "deleted"}})
        assert row not in _ids(store, [0.0, 0.0, 1.0, 0.0])  # synced: deleted, with that stamp
        store.update_memory(row, {"metadata": {}})  # active again, same stamp
        assert _ids(store, [0.0, 0.0, 1.0, 0.0])[0] == row
    finally:
        store.close()


@pytest.mark.mongo
def test_mongo_vector_cache_is_bounded_and_says_when_it_is_skipped(mongo_db) -> None:
    from manowar_memory.stores._vectors import VectorIndex
    from manowar_memory.stores.mongo import MongoStore

    per_row = VectorIndex.row_bytes(4)
    store = MongoStore(client=mongo_db.client, database=mongo_db.name, vector_cache_bytes=100 * per_row)
    try:
        store.add_memories([make_record(f"a{i}", created_at=i) for i in range(30)])
        store.add_memories([make_record(f"b{i}", agent="agent-B", created_at=i) for i in range(30)])
        store.add_memories([make_record(f"c{i}", agent="agent-C", created_at=i) for i in range(150)])
        x = [1.0, 0.0, 0.0, 0.0]
        for agent in ("agent-A", "agent-B"):
            _, info = store.vector_search(MemoryQuery(scope=Scope(agent_wallet=agent)), x, MODEL, 3)
            assert info.method == "local-cache" and info.notes == []
        # agent-A's and agent-B's partitions (30 rows + 64 spare each) do not both fit: A was evicted
        assert list(store._partitions) == [("agent-B", None, MODEL)]
        assert store._cached_bytes == store._partitions[("agent-B", None, MODEL)].nbytes  # the running total
        hits, info = store.vector_search(MemoryQuery(scope=Scope(agent_wallet="agent-C")), x, MODEL, 3)
        assert info.method == "local-scan" and len(hits) == 3 and info.candidates == 150
        assert any("vector cache skipped" in n and "vector_cache_bytes" in n for n in info.notes)
    finally:
        store.close()


@pytest.mark.mongo
def test_mongo_vector_cache_keeps_a_running_total_of_its_bytes_as_users_come_grow_and_go(mongo_db) -> None:
    """The byte bound is checked on every search from a running total, not by walking every
    user's partition: the total must stay the sum of the cached partitions' sizes as partitions
    are loaded, grow past their spare capacity, and are evicted."""
    from manowar_memory.stores._vectors import VectorIndex
    from manowar_memory.stores.mongo import MongoStore

    store = MongoStore(client=mongo_db.client, database=mongo_db.name,
                       vector_cache_bytes=500 * VectorIndex.row_bytes(4))
    x = [1.0, 0.0, 0.0, 0.0]

    def search(user: str) -> None:
        _, info = store.vector_search(MemoryQuery(scope=Scope(agent_wallet="agent-A", user_address=user)), x, MODEL, 3)
        assert info.method == "local-cache"

    def total_is_the_sum() -> None:
        assert store._cached_bytes == sum(p.nbytes for p in store._partitions.values())

    try:
        for n, user in enumerate(["u1", "u2", "u3", "u4"]):
            store.add_memories([make_record(f"{user}-{i}", user=user, created_at=i) for i in range(10 + n)])
            search(user)
            total_is_the_sum()
        assert {key[1] for key in store._partitions} == {None, "u1", "u2", "u3", "u4"}  # None: the agent's own rows
        # u1 grows past its 64 spare rows: its partition is re-sized when the sync applies them
        before = store._partitions[("agent-A", "u1", MODEL)].nbytes
        store.add_memories([make_record(f"u1-more-{i}", user="u1", created_at=100 + i) for i in range(100)])
        search("u1")
        assert store._partitions[("agent-A", "u1", MODEL)].nbytes > before
        total_is_the_sum()
        # a fifth user's partition does not fit beside the others: the least recently used go
        store.add_memories([make_record(f"u5-{i}", user="u5", created_at=i) for i in range(200)])
        search("u5")
        total_is_the_sum()
        assert ("agent-A", "u5", MODEL) in store._partitions and len(store._partitions) < 6
        assert store._cached_bytes <= store.vector_cache_bytes
        # a partition evicted by another thread between its sync and its size check serves that
        # search but is not counted: the total must not keep bytes of a partition it no longer holds
        key = ("agent-A", "u5", MODEL)
        part = store._partitions[key]
        with store._cache_lock:
            store._uncache(key)
        assert store._fits(key, part)
        assert key not in store._partitions
        total_is_the_sum()
    finally:
        store.close()


@pytest.mark.mongo
def test_mongo_engine_reports_a_skipped_vector_cache_as_a_degradation(mongo_db) -> None:
    from manowar_memory.stores.mongo import MongoStore

    store = MongoStore(client=mongo_db.client, database=mongo_db.name, vector_cache_bytes=1)
    with MemoryEngine(store=store, embedder="fake", extractor=None) as engine:
        scope = Scope(agent_wallet="agent-A", user_address="u1")
        engine.ingest(scope, ["The user's cat is named Miso."])
        result = engine.pre_turn("What is the cat called?", scope)
        assert "Miso" in result.prompt and result.lanes["vectors"]["vector_method"] == "local-scan"
        assert any("vector cache skipped" in d for d in result.degradations)


@pytest.mark.mongo
def test_mongo_unique_fact_migration_keeps_pre_existing_duplicates(mongo_db) -> None:
    """Rows written before the unique active-fact index (the old race) are kept: the newest of
    each group stays active, the others become superseded, then the index holds."""
    from manowar_memory.stores.mongo import MongoStore

    def raw(rid: str, fact_hash: str, created: int, status: str | None = None) -> dict:
        meta = {"factHash": fact_hash, **({"status": status} if status else {})}
        return {"vectorId": rid, "agentWallet": "agent-A", "userAddress": None, "mode": None, "haiId": None,
                "content": f"fact {fact_hash}", "source": "fact", "decayScore": 1, "accessCount": 2,
                "createdAt": created, "updatedAt": created, "lastAccessedAt": created, "metadata": meta}

    mongo_db["memory"].insert_many([raw("vec_a1", "h1", 100), raw("vec_a2", "h1", 300), raw("vec_a3", "h1", 200),
                                    raw("vec_b1", "h2", 100), raw("vec_c1", "h3", 100, "deleted"),
                                    raw("vec_c2", "h3", 50)])
    store = MongoStore(client=mongo_db.client, database=mongo_db.name)
    try:
        info = mongo_db["memory"].index_information()["idx_vector_active_fact"]
        assert info["unique"] is True and info["partialFilterExpression"] == {"activeFactHash": {"$exists": True}}
        status = {d["vectorId"]: d["metadata"].get("status") for d in mongo_db["memory"].find()}
        assert status == {"vec_a1": "superseded", "vec_a2": None, "vec_a3": "superseded", "vec_b1": None,
                          "vec_c1": "deleted", "vec_c2": None}
        a1 = mongo_db["memory"].find_one({"vectorId": "vec_a1"})
        assert a1["metadata"]["supersededBy"] == "vec_a2" and a1["accessCount"] == 2 and "activeFactHash" not in a1
        assert store.find_fact_by_hash("agent-A", "h1").id == "vec_a2"  # type: ignore[union-attr]
        held, inserted = store.add_fact_if_absent(make_record("fact h1", source="fact", metadata={"factHash": "h1"}))
        assert (held.id, inserted, held.access_count) == ("vec_a2", False, 3)
        assert store.migrate_active_facts() == 0  # idempotent
        # a row made inactive by a writer that bypasses the store keeps a stale key: it is freed on insert
        mongo_db["memory"].update_one({"vectorId": "vec_b1"}, {"$set": {"metadata.status": "superseded"}})
        fresh, inserted = store.add_fact_if_absent(
            make_record("fact h2 again", source="fact", metadata={"factHash": "h2"}, created_at=400))
        assert inserted and fresh.id != "vec_b1"
    finally:
        store.close()
