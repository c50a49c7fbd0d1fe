"""MongoDB's recorded schema migrations (``MIGRATIONS`` in :mod:`manowar_memory.stores.mongo`),
as SQLite's are checked in tests/test_sqlite_store.py: a fresh database records every one in
order; a database left by an earlier version (its indexes made on open, nothing recorded)
upgrades to exactly the indexes and rows of a fresh one; running them again changes nothing;
engines starting together apply each once; a newer version's database is refused."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from pymongo import IndexModel

from manowar_memory import Scope, StoreError
from manowar_memory._util import now_ms
from manowar_memory.stores import _mql, _mql_schema
from manowar_memory.stores.base import MemoryQuery
from manowar_memory.stores.mongo import MIGRATIONS, MongoStore

pytestmark = pytest.mark.mongo

NAMES = [name for name, _ in MIGRATIONS]
AGENT = "agent-old"


def _indexes(db: Any) -> dict[str, dict[str, dict[str, Any]]]:
    """Every collection's indexes as the server describes them (less the index format version)."""
    return {
        coll: {name: {k: v for k, v in info.items() if k not in ("v", "ns")}
               for name, info in db[coll].index_information().items()}
        for coll in sorted(db.list_collection_names())
    }


def _records(db: Any) -> dict[str, dict[str, Any]]:
    return {d["_id"]: d for d in db[_mql_schema.MIGRATIONS_COLLECTION].find()}


def _previous_version(db: Any) -> None:
    """The indexes the store made on open before migrations were recorded: ids unique alone
    (``idx_vector_id``), no (agent, user, createdAt) index."""
    for coll, specs in _mql_schema.INDEXES.items():
        old = [s for s in specs if s.name not in (_mql_schema.VECTOR_AGENT_ID_INDEX, _mql_schema.SCOPE_LIST_INDEX)]
        if coll == _mql_schema.MEMORY:
            old.append(_mql_schema.LEGACY_VECTOR_ID_INDEX)
        db[coll].create_indexes([IndexModel(s.keys, name=s.name, **s.options) for s in old])
    db[_mql_schema.MEMORY].insert_many([
        {"agentWallet": AGENT, "userAddress": "u1", "mode": None, "haiId": None, "vectorId": "v-user",
         "content": "the user's row", "source": "knowledge", "createdAt": 2, "metadata": {}},
        {"agentWallet": AGENT, "vectorId": "v-reference", "content": "written without scope fields",
         "source": "knowledge", "createdAt": 1, "metadata": {}},
    ])


def _reference(db: Any) -> None:
    """A database of the reference: ids indexed but not unique, duplicate active facts."""
    db[_mql_schema.MEMORY].create_index([("vectorId", 1)], name="idx_vector_id")
    db[_mql_schema.MEMORY].insert_many([
        {"agentWallet": AGENT, "vectorId": f"v-fact-{i}", "content": "the user likes tea", "source": "fact",
         "createdAt": 10 + i, "metadata": {"factHash": "tea"}}
        for i in range(2)
    ] + [{"agentWallet": AGENT, "vectorId": "v-reference", "content": "written without scope fields",
          "source": "knowledge", "createdAt": 1, "metadata": {}}])


@pytest.fixture
def fresh(mongo_client: Any, mongo_db: Any) -> Any:
    """The indexes of a database a store created from nothing (in a database of its own)."""
    db = mongo_client[f"{mongo_db.name}_fresh"]
    MongoStore(client=mongo_client, database=db.name).close()
    yield _indexes(db)
    mongo_client.drop_database(db.name)


def test_a_fresh_database_records_every_migration_once_in_order(mongo_client: Any, mongo_db: Any, fresh: Any) -> None:
    store = MongoStore(client=mongo_client, database=mongo_db.name)
    try:
        assert store.migrations() == NAMES
        records = _records(mongo_db)
        assert [records[n]["order"] for n in NAMES] == list(range(1, len(NAMES) + 1))
        assert "lease" not in records  # released
        indexes = _indexes(mongo_db)
        assert indexes == fresh
        assert store.migrate() == []  # twice: nothing to apply, nothing changes
        again = MongoStore(client=mongo_client, database=mongo_db.name)
        again.close()
        assert _records(mongo_db) == records and _indexes(mongo_db) == indexes
    finally:
        store.close()


@pytest.mark.parametrize("old", [_previous_version, _reference], ids=["previous version", "reference"])
def test_an_old_database_upgrades_to_the_state_of_a_fresh_one(mongo_client: Any, mongo_db: Any, fresh: Any,
                                                              old: Any) -> None:
    old(mongo_db)
    assert "idx_vector_id" in mongo_db[_mql_schema.MEMORY].index_information()
    store = MongoStore(client=mongo_client, database=mongo_db.name, vector_search="local")
    try:
        assert store.migrations() == NAMES
        assert _indexes(mongo_db) == fresh  # the unique vectorId index is gone, (agentWallet, vectorId) holds
        # rows written without scope fields now store null in them (what the $vectorSearch prefilter matches)
        row = mongo_db[_mql_schema.MEMORY].find_one({"vectorId": "v-reference"})
        assert {k: row[k] for k in ("userAddress", "mode", "haiId")} == dict.fromkeys(("userAddress", "mode", "haiId"))
        assert mongo_db[_mql_schema.MEMORY].count_documents(_mql.missing_scope_fields_filter()) == 0
        shared = MemoryQuery(scope=Scope(agent_wallet=AGENT, user_address="u1"))
        assert "v-reference" in {r.id for r in store.list_memories(shared)}
        if old is _reference:  # of two active duplicates, the newest stays active, the other is kept superseded
            everything = MemoryQuery(scope=Scope(agent_wallet=AGENT), active_only=False)
            facts = {r.id: r.status for r in store.list_memories(everything) if r.source == "fact"}
            assert facts == {"v-fact-1": "active", "v-fact-0": "superseded"}
        before = (_records(mongo_db), _indexes(mongo_db))
        assert store.migrate() == []
        assert (_records(mongo_db), _indexes(mongo_db)) == before
    finally:
        store.close()


def test_engines_starting_together_apply_each_migration_once(mongo_client: Any, mongo_db: Any, fresh: Any) -> None:
    _previous_version(mongo_db)
    start = threading.Barrier(4)
    applied: list[list[str]] = []
    errors: list[BaseException] = []

    def open_engine() -> None:
        try:
            store = MongoStore(client=mongo_client, database=mongo_db.name, create_indexes=False)
            start.wait()
            applied.append(store.migrate())
            store.close()
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=open_engine) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    # each migration was applied by exactly one engine, in order; the others found it recorded
    done = [name for names in applied for name in names]
    assert sorted(done) == sorted(NAMES)
    assert all(names == [n for n in NAMES if n in names] for names in applied)
    records = _records(mongo_db)
    assert set(records) == set(NAMES)  # one record each, and the lease released
    assert [records[n]["order"] for n in NAMES] == list(range(1, len(NAMES) + 1))
    assert _indexes(mongo_db) == fresh


def test_a_lease_left_by_an_engine_that_died_is_taken_over(mongo_client: Any, mongo_db: Any) -> None:
    mongo_db[_mql_schema.MIGRATIONS_COLLECTION].insert_one({"_id": "lease", "owner": "dead", "until": now_ms() - 1})
    store = MongoStore(client=mongo_client, database=mongo_db.name)
    try:
        assert store.migrations() == NAMES
        assert "lease" not in _records(mongo_db)
    finally:
        store.close()


def test_a_database_migrated_by_a_newer_version_is_refused(mongo_client: Any, mongo_db: Any) -> None:
    MongoStore(client=mongo_client, database=mongo_db.name).close()
    mongo_db[_mql_schema.MIGRATIONS_COLLECTION].insert_one({"_id": "m999_future", "order": 999, "appliedAt": 0})
    with pytest.raises(StoreError, match="newer manowar-memory"):
        MongoStore(client=mongo_client, database=mongo_db.name)
