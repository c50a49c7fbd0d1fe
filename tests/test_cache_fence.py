"""A write whose cache invalidation did not reach a hung Redis is never followed by a stale
read from any engine sharing that Redis: the failed bump raises a fence in the store.

Runs a private ``redis-server`` (so pausing it with SIGSTOP disturbs no other test) and two
engines over one store, on SQLite (a shared file) and on MongoDB.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from manowar_memory import MemoryEngine, Scope, Store
from manowar_memory.cache.redis import RedisCache

pytestmark = pytest.mark.redis
SCOPE = Scope(agent_wallet="agent-fence", user_address="u1")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def private_redis(redis_url: str, tmp_path: Path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """A redis-server of this test's own, on a free port (the shared one is left alone)."""
    binary = shutil.which("redis-server")
    assert binary, "redis-server is installed by scripts/services.sh"
    port = _free_port()
    proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                             "--dir", str(tmp_path)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                break
        except OSError:
            if time.monotonic() > deadline:
                proc.kill()
                pytest.fail("the private redis-server did not start")
            time.sleep(0.05)
    yield f"redis://127.0.0.1:{port}/0", proc
    os.kill(proc.pid, signal.SIGCONT)
    proc.terminate()
    proc.wait(timeout=10)


def _stores(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Callable[[], Store], Callable[[], None]]:
    if kind == "sqlite":
        from manowar_memory import SQLiteStore

        path = tmp_path / "shared.db"
        return (lambda: SQLiteStore(str(path))), (lambda: None)
    from manowar_memory.stores.mongo import MongoStore

    db = request.getfixturevalue("mongo_store_db")
    return (lambda: MongoStore(client=db.client, database=db.name)), (lambda: None)


def _engine(store: Store, url: str, prefix: str) -> MemoryEngine:
    cache = RedisCache(url, prefix=prefix, socket_timeout=0.3, retry_after=0.2)
    return MemoryEngine(store=store, embedder="fake", cache=cache, extractor=None)


def _texts(engine: MemoryEngine, query: str) -> tuple[list[str], list[str]]:
    hits, notes = engine.search(query, SCOPE, k=5)
    return [h.text for h in hits], notes


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("mongo", marks=pytest.mark.mongo)])
def test_a_write_during_a_redis_hang_is_never_read_stale_by_another_engine(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path, private_redis: tuple[str, subprocess.Popen[bytes]],
) -> None:
    url, proc = private_redis
    make_store, drop = _stores(kind, request, tmp_path)
    prefix = f"fence-{uuid.uuid4().hex[:8]}:"
    writer, reader = _engine(make_store(), url, prefix), _engine(make_store(), url, prefix)
    try:
        rid = writer.remember(SCOPE, "The storage room door code is 1111.").id
        assert "1111" in _texts(reader, "door code")[0][0]
        hits_before = reader.query_cache_hits
        assert "1111" in _texts(reader, "door code")[0][0] and reader.query_cache_hits == hits_before + 1, "cached"

        os.kill(proc.pid, signal.SIGSTOP)  # Redis hangs: the writer's invalidation cannot be delivered
        try:
            writer.update_item(SCOPE, rid, content="The storage room door code is 2222.")
        finally:
            os.kill(proc.pid, signal.SIGCONT)  # Redis answers again, still holding the old entry
        time.sleep(0.3)  # past the caches' retry_after

        texts, _ = _texts(reader, "door code")
        assert texts and "2222" in texts[0] and not any("1111" in t for t in texts), texts
        # and it caches again from here on, under the new fence
        hits_before = reader.query_cache_hits
        assert "2222" in _texts(reader, "door code")[0][0] and reader.query_cache_hits == hits_before + 1
    finally:
        writer.close()
        reader.close()
        drop()


def test_the_writer_reports_the_failed_invalidation_and_the_fence(
    request: pytest.FixtureRequest, tmp_path: Path, private_redis: tuple[str, subprocess.Popen[bytes]],
) -> None:
    from manowar_memory._notes import collect

    url, proc = private_redis
    make_store, _ = _stores("sqlite", request, tmp_path)
    engine = _engine(make_store(), url, "fence-report:")
    try:
        os.kill(proc.pid, signal.SIGSTOP)
        try:
            with collect() as notes:
                engine.ingest(SCOPE, ["A row written while Redis hangs."])
        finally:
            os.kill(proc.pid, signal.SIGCONT)
        assert any("invalidation failed" in n and "cache fence was raised" in n for n in notes), notes
        assert engine.scoped(SCOPE).list()[0].content == "A row written while Redis hangs."
    finally:
        engine.close()
