"""Real-server fixtures shared by the whole suite (MongoDB, Redis, Temporal).

`scripts/services.sh start` runs the servers and `scripts/test.sh` exports their addresses.
A test marked ``mongo``, ``redis`` or ``temporal`` gets the matching address fixture
automatically, so it is skipped when that server does not answer, or fails instead when
``MANOWAR_REQUIRE_SERVICES=1`` or ``CI`` is set (a CI run must never skip them silently).
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Callable
from typing import NoReturn

import pytest

# Engines built without an embedder argument (and the `manowar` commands without --embedder) pick
# $MANOWAR_EMBEDDER, else the best local model installed: hundreds of engines loading a model
# would make the suite crawl, so the suite chooses keyword-only explicitly. The tests of that
# default choice remove the variable with monkeypatch (tests/test_embedder_choice.py).
os.environ["MANOWAR_EMBEDDER"] = "none"

DEFAULT_MONGODB_URI = "mongodb://127.0.0.1:27017/?replicaSet=rs0"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
DEFAULT_TEMPORAL_ADDRESS = "127.0.0.1:7233"

# marker name -> fixture that checks the server
SERVICE_MARKERS = {"mongo": "mongo_uri", "redis": "redis_url", "temporal": "temporal_address"}


def services_required() -> bool:
    """True when a missing server must fail the test rather than skip it."""
    if os.environ.get("MANOWAR_REQUIRE_SERVICES", "").strip() == "1":
        return True
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def _unavailable(what: str, error: BaseException | str) -> None:
    detail = str(error).splitlines()[0] if str(error) else type(error).__name__
    if len(detail) > 200:
        detail = detail[:200] + "..."
    msg = f"{what} is not available ({detail}); start it with `bash scripts/services.sh start`"
    if services_required():
        pytest.fail(msg, pytrace=False)
    pytest.skip(msg)


@pytest.fixture
def unavailable() -> Callable[[str], NoReturn]:
    """Give up on a test whose prerequisite is missing: fail when servers are required (CI, or
    MANOWAR_REQUIRE_SERVICES=1: there a missing piece is a broken install), else skip."""

    def give_up(message: str) -> NoReturn:
        if services_required():
            pytest.fail(message, pytrace=False)
        pytest.skip(message)

    return give_up


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Run the modules that hold ``slow`` or ``cluster`` tests first, each kept whole and in order
    (the module with the most such tests first).

    pytest-xdist hands out work in collection order as workers free up, so the long tests (the
    isolation shards, the docs site, the notebooks) starting first leave the short ones to fill
    the gaps at the end, instead of one long test starting last and running alone."""
    long_tests: dict[str, int] = {}  # module -> how many long tests it holds; the most go first
    for item in items:
        if isinstance(item, pytest.Function) and (item.get_closest_marker("slow") or item.get_closest_marker("cluster")):
            long_tests[item.module.__name__] = long_tests.get(item.module.__name__, 0) + 1
    items.sort(key=lambda item: -long_tests.get(item.module.__name__, 0) if isinstance(item, pytest.Function) else 0)


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Under ``--dist loadgroup``, fail an ``xdist_group`` test that pytest-xdist did not put in its
    group (its id then lacks the ``@group`` suffix). With pytest 9.2 and pytest-xdist 3.8 every
    group was silently ignored: the docs site was built on every worker and the replica-set tests
    ran beside each other."""
    if getattr(item.config.option, "loadgroup", False) and item.get_closest_marker("xdist_group") \
            and "@" not in item.nodeid:
        pytest.fail("pytest-xdist did not put this xdist_group test in its group: this pytest and pytest-xdist "
                    "do not work together; install the versions pyproject.toml's dev extra asks for", pytrace=False)


# ---------------------------------------------------------------- addresses (checked once)


@pytest.fixture(scope="session")
def mongo_uri() -> str:
    uri = os.environ.get("MONGODB_URI") or DEFAULT_MONGODB_URI
    error = None
    try:
        import pymongo

        client = pymongo.MongoClient(uri, serverSelectionTimeoutMS=3000, connectTimeoutMS=2000)
        try:
            client.admin.command("ping")
        finally:
            client.close()
    except Exception as exc:  # noqa: BLE001 - any failure means "no server"
        error = exc
    if error is not None:  # reported outside the except block: no chained traceback
        _unavailable(f"MongoDB at {uri}", error)
    return uri


@pytest.fixture(scope="session")
def redis_url() -> str:
    url = os.environ.get("REDIS_URL") or DEFAULT_REDIS_URL
    error = None
    try:
        import redis

        client = redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
        try:
            client.ping()
        finally:
            client.close()
    except Exception as exc:  # noqa: BLE001
        error = exc
    if error is not None:
        _unavailable(f"Redis at {url}", error)
    return url


@pytest.fixture(scope="session")
def temporal_address() -> str:
    address = os.environ.get("TEMPORAL_ADDRESS") or DEFAULT_TEMPORAL_ADDRESS
    host, _, port = address.rpartition(":")
    error = None
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=2):
            pass
    except (OSError, ValueError) as exc:
        error = exc
    if error is not None:
        _unavailable(f"Temporal at {address}", error)
    return address


@pytest.fixture(autouse=True)
def _require_marked_services(request: pytest.FixtureRequest) -> None:
    """Give tests marked mongo/redis/temporal their server check before anything else runs."""
    for marker, fixture in SERVICE_MARKERS.items():
        if request.node.get_closest_marker(marker) is not None:
            request.getfixturevalue(fixture)


# ---------------------------------------------------------------- per-test resources


@pytest.fixture(scope="session")
def mongo_client(mongo_uri: str):
    """One pymongo client for the session."""
    import pymongo

    client = pymongo.MongoClient(mongo_uri, serverSelectionTimeoutMS=5000)
    yield client
    client.close()


@pytest.fixture
def mongo_db(mongo_client):
    """A fresh, uniquely named database, dropped after the test."""
    name = f"manowar_test_{uuid.uuid4().hex[:12]}"
    yield mongo_client[name]
    mongo_client.drop_database(name)


@pytest.fixture(scope="session")
def _indexed_mongo_databases(mongo_client):
    """This worker's recycled databases that already hold the store's collections and indexes."""
    pool: list[str] = []
    yield pool
    for name in pool:
        mongo_client.drop_database(name)


_MIGRATIONS = "_manowar_migrations"  # manowar_memory.stores._mql_schema.MIGRATIONS_COLLECTION (needs no pymongo)


def _reusable(db) -> bool:
    """True when ``db`` holds exactly the store's own collections and indexes (a test added or
    dropped none) and its recorded migrations: a store opened on it applies nothing again."""
    from manowar_memory.stores import _mql_schema

    for coll in db.list_collection_names():
        if coll == _mql_schema.MIGRATIONS_COLLECTION:
            continue
        specs = _mql_schema.INDEXES.get(coll)
        if specs is None or set(db[coll].index_information()) != {"_id_", *(spec.name for spec in specs)}:
            return False
    return True


@pytest.fixture
def mongo_store_db(mongo_client, _indexed_mongo_databases):
    """An empty database with the MongoStore's indexes already built, dropped or recycled after the test.

    Building the indexes costs about a second per database, which hundreds of tests would pay
    for nothing: a database is emptied after its test and handed to the next one (on the same
    worker) unless the test left collections or indexes of its own, in which case it is dropped.
    A store opened on it still runs its idempotent index check, so a dropped index comes back."""
    from manowar_memory.stores.mongo import MongoStore

    pool = _indexed_mongo_databases
    if pool:
        name = pool.pop()
    else:
        name = f"manowar_test_{uuid.uuid4().hex[:12]}"
        MongoStore(client=mongo_client, database=name).close()
    db = mongo_client[name]
    yield db
    if _reusable(db):
        for coll in db.list_collection_names():
            if coll != _MIGRATIONS:  # the database keeps its migrations: its indexes are theirs
                db[coll].delete_many({})
        pool.append(name)
    else:
        mongo_client.drop_database(name)


@pytest.fixture
def redis_key_prefix() -> str:
    """A unique key prefix; `redis_client` deletes every key under it after the test."""
    return f"manowar-test:{uuid.uuid4().hex[:12]}:"


@pytest.fixture
def redis_client(redis_url: str, redis_key_prefix: str):
    """A redis.Redis on REDIS_URL; keys under `redis_key_prefix` are removed after the test."""
    import redis

    client = redis.Redis.from_url(redis_url, socket_timeout=5, socket_connect_timeout=2)
    yield client
    try:
        keys = list(client.scan_iter(match=f"{redis_key_prefix}*", count=500))
        if keys:
            client.delete(*keys)
    except redis.exceptions.ConnectionError:
        pass  # a test may have stopped the server on purpose
    finally:
        client.close()


@pytest.fixture
def engine_config():
    """The MemoryConfig of ``engine_on_each_store`` (a module may override this fixture)."""
    from manowar_memory import MemoryConfig

    return MemoryConfig(query_cache=True)


@pytest.fixture(params=["sqlite", pytest.param("mongo", marks=pytest.mark.mongo)])
def engine_on_each_store(request: pytest.FixtureRequest, engine_config):
    """A MemoryEngine (fake embedder, ``engine_config``) on SQLite in memory and on a fresh MongoDB database."""
    from manowar_memory import MemoryEngine

    config = engine_config
    if request.param == "sqlite":
        eng = MemoryEngine(store="sqlite:///:memory:", embedder="fake", config=config)
        yield eng
        eng.close()
        return
    from manowar_memory.stores.mongo import MongoStore

    db = request.getfixturevalue("mongo_store_db")
    eng = MemoryEngine(store=MongoStore(client=db.client, database=db.name), embedder="fake", config=config)
    yield eng
    eng.close()
