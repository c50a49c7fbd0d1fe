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

import pytest

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

    client = request.getfixturevalue("mongo_client")
    name = f"manowar_test_{uuid.uuid4().hex[:12]}"
    eng = MemoryEngine(store=MongoStore(client=client, database=name), embedder="fake", config=config)
    yield eng
    eng.close()
    client.drop_database(name)
