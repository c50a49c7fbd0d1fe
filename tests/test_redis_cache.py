"""The Redis cache, namespace tokens (scoped invalidation) and the layer query cache.

Most tests run against the real Redis at REDIS_URL (marked ``redis``). The outage tests start
a private ``redis-server`` on a free port, then kill it (down) or SIGSTOP it (slow) mid-run:
the engine must keep answering, bypass the cache and say so.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid

import pytest

from manowar_memory import FakeEmbedder, InMemoryCache, MemoryEngine, Scope, SQLiteStore
from manowar_memory.cache.base import Cache
from manowar_memory.cache.namespace import NamespaceTokens, QueryCache, decode_search, encode_search
from manowar_memory.embeddings.cached import CachedEmbedder
from manowar_memory.records import MemoryRecord
from manowar_memory.stores.base import MemoryQuery
from manowar_memory.testing import QueryCachedEngine

redis = pytest.importorskip("redis")
from manowar_memory.cache.redis import CacheUnavailableError, RedisCache  # noqa: E402


@pytest.fixture
def rcache(redis_url, redis_key_prefix, redis_client):
    """A RedisCache whose keys the `redis_client` fixture removes afterwards."""
    cache = RedisCache(redis_url, prefix=redis_key_prefix)
    yield cache
    cache.close()


# ----------------------------------------------------------------------------- RedisCache


@pytest.mark.redis
def test_redis_cache_implements_the_cache_protocol(rcache, redis_client, redis_key_prefix) -> None:
    assert isinstance(rcache, Cache) and rcache.name == "redis"
    assert rcache.get("missing") is None
    rcache.set("k1", b"\x00\x01bytes", 30)
    assert rcache.get("k1") == b"\x00\x01bytes"
    assert redis_client.get(redis_key_prefix + "k1") == b"\x00\x01bytes"  # prefixed
    assert 29_000 < redis_client.pttl(redis_key_prefix + "k1") <= 30_000
    assert rcache.get_many(["k1", "nope", "k1"]) == [b"\x00\x01bytes", None, b"\x00\x01bytes"]
    assert rcache.get_many([]) == []
    rcache.set_many([("a", b"1"), ("b", b"2")], 10)
    assert rcache.get_many(["a", "b"]) == [b"1", b"2"]
    assert rcache.delete("a", "b", "zzz") == 2


@pytest.mark.redis
def test_redis_incr_gives_new_counters_a_ttl(rcache, redis_client, redis_key_prefix) -> None:
    assert [rcache.incr("ctr", 60) for _ in range(3)] == [1, 2, 3]
    assert 0 < redis_client.pttl(redis_key_prefix + "ctr") <= 60_000
    rcache.set("fractional", b"x", 0.0001)  # at least 1 ms, never "no expiry"
    assert redis_client.pttl(redis_key_prefix + "fractional") in (-2, 0, 1)


@pytest.mark.redis
def test_embedding_cache_on_redis_separates_query_and_document_keys(rcache, redis_client, redis_key_prefix) -> None:
    inner = FakeEmbedder(16)
    emb = CachedEmbedder(inner, rcache)
    doc = emb.embed(["hello world"], input_type="document")
    query = emb.embed(["hello world"], input_type="query")
    assert inner.calls == 2  # one per input type: separate keys
    keys = sorted(k.decode() for k in redis_client.scan_iter(match=redis_key_prefix + "embedding:*"))
    assert len(keys) == 2 and any(":q:" in k for k in keys) and any(":d:" in k for k in keys)
    assert all(86_390_000 < redis_client.pttl(k) <= 86_400_000 for k in keys)  # 24 h
    again = CachedEmbedder(inner, RedisCache(rcache.client, prefix=redis_key_prefix))  # another process, same Redis
    assert again.embed(["hello world"], input_type="query")[0] == pytest.approx(query[0], abs=1e-6)
    assert inner.calls == 2  # served from Redis (float32, as the stores keep vectors)
    assert doc[0] == pytest.approx(inner.embed(["hello world"])[0], abs=1e-6)


# ----------------------------------------------------------------------------- the invalidation rule

AGENTS = ("A", "B")
USERS = (None, "u1", "u2")
MODES = ((None, None), ("global", None), ("local", "h1"), ("local", "h2"), (None, "h1"))
GRID = [Scope(agent_wallet=a, user_address=u, mode=m, hai_id=h)  # type: ignore[arg-type]
        for a, u, (m, h) in itertools.product(AGENTS, USERS, MODES)]


def _visibility() -> dict[int, set[int]]:
    """Ground truth from the store itself: for each write scope, the read scopes that see its row."""
    store = SQLiteStore(":memory:")
    try:
        ids = store.add_memories([
            MemoryRecord(id=f"row{i}", content=f"row {i}", **MemoryRecord.scope_fields(w)) for i, w in enumerate(GRID)
        ])
        seen: dict[int, set[int]] = {i: set() for i in range(len(GRID))}
        for j, read in enumerate(GRID):
            for rec in store.list_memories(MemoryQuery(scope=read)):
                seen[ids.index(rec.id)].add(j)
        return seen
    finally:
        store.close()


def _cache_for(kind: str, request: pytest.FixtureRequest) -> Cache:
    if kind == "memory":
        return InMemoryCache()
    return request.getfixturevalue("rcache")


@pytest.mark.parametrize("kind", ["memory", pytest.param("redis", marks=pytest.mark.redis)])
def test_a_write_invalidates_exactly_the_reads_that_can_see_it(kind: str, request: pytest.FixtureRequest) -> None:
    tokens = NamespaceTokens(_cache_for(kind, request))
    visible = _visibility()
    for i, write in enumerate(GRID):
        before = [tokens.token(s) for s in GRID]
        assert before == [tokens.token(s) for s in GRID]  # stable without writes
        tokens.bump(write)
        after = [tokens.token(s) for s in GRID]
        changed = {j for j in range(len(GRID)) if before[j] != after[j]}
        assert changed == visible[i], f"write in {write}"


@pytest.mark.parametrize("kind", ["memory", pytest.param("redis", marks=pytest.mark.redis)])
def test_the_documented_cases(kind: str, request: pytest.FixtureRequest) -> None:
    tokens = NamespaceTokens(_cache_for(kind, request))
    alice, bob = Scope(agent_wallet="A", user_address="alice"), Scope(agent_wallet="A", user_address="bob")
    shared, other_agent = Scope(agent_wallet="A"), Scope(agent_wallet="B", user_address="alice")
    snapshot = lambda: {n: tokens.token(s) for n, s in {"alice": alice, "bob": bob, "shared": shared,  # noqa: E731
                                                        "other": other_agent}.items()}
    t0 = snapshot()
    tokens.bump(alice)  # a write for user alice
    t1 = snapshot()
    assert t1["alice"] != t0["alice"] and t1["bob"] == t0["bob"] and t1["shared"] == t0["shared"]
    assert t1["other"] == t0["other"]
    tokens.bump(shared)  # agent-wide (user-less) rows
    t2 = snapshot()
    assert t2["alice"] != t1["alice"] and t2["bob"] != t1["bob"] and t2["shared"] != t1["shared"]
    assert t2["other"] == t1["other"]  # never another agent (the reference bumped a global key)
    tokens.bump_agent("A")
    t3 = snapshot()
    assert all(t3[n] != t2[n] for n in ("alice", "bob", "shared")) and t3["other"] == t2["other"]
    tokens.bump_all()
    assert all(v != t3[n] for n, v in snapshot().items())


@pytest.mark.parametrize("kind", ["memory", pytest.param("redis", marks=pytest.mark.redis)])
def test_a_lost_namespace_key_never_brings_back_an_old_token(kind: str, request: pytest.FixtureRequest) -> None:
    cache = _cache_for(kind, request)
    tokens = NamespaceTokens(cache)
    scope = Scope(agent_wallet="A", user_address="alice")
    seen = {tokens.token(scope)}
    for _ in range(5):
        tokens.bump(scope)
        seen.add(tokens.token(scope))
        # simulate expiry or eviction of every namespace key
        if isinstance(cache, InMemoryCache):
            cache.clear()
        else:
            cache.delete(*tokens.read_keys(scope))
        fresh = tokens.token(scope)
        assert fresh not in seen
        seen.add(fresh)
        assert tokens.token(scope) == fresh


def test_scope_values_are_exact_in_keys() -> None:
    tokens = NamespaceTokens(InMemoryCache())
    upper, lower = Scope(agent_wallet="A", user_address="Alice"), Scope(agent_wallet="A", user_address="alice")
    assert tokens.read_keys(upper)[-1] != tokens.read_keys(lower)[-1]
    qc = QueryCache(InMemoryCache())
    assert qc.key("layers", upper, {"q": 1}) != qc.key("layers", lower, {"q": 1})
    weird = Scope(agent_wallet="A", user_address="_", hai_id="*")  # never the "none" / "any" markers
    assert tokens.write_keys(weird) != tokens.write_keys(Scope(agent_wallet="A"))


# ----------------------------------------------------------------------------- QueryCache


@pytest.mark.parametrize("kind", ["memory", pytest.param("redis", marks=pytest.mark.redis)])
def test_query_cache_round_trip_and_invalidation(kind: str, request: pytest.FixtureRequest) -> None:
    qc = QueryCache(_cache_for(kind, request), ttl_seconds=60)
    a_t1 = Scope(agent_wallet="A", user_address="alice", thread_id="t1")
    a_t2 = a_t1.with_thread("t2")
    payload = {"query": "tea?", "layers": ["graph", "vectors"]}
    value, key = qc.lookup("layers", a_t1, payload)
    assert value is None and key is not None
    qc.store(key, {"answer": [1, 2, 3]})
    assert qc.lookup("layers", a_t1, payload)[0] == {"answer": [1, 2, 3]}
    assert qc.lookup("layers", a_t1, {**payload, "query": "coffee?"})[0] is None
    assert qc.lookup("layers", a_t2, payload)[0] is None  # thread-scoped key
    _, durable_key = qc.lookup("layers", a_t1, payload, thread_scoped=False)
    qc.store(durable_key, {"durable": True})
    assert qc.lookup("layers", a_t2, payload, thread_scoped=False)[0] == {"durable": True}
    assert qc.invalidate(Scope(agent_wallet="A", user_address="bob"))
    assert qc.lookup("layers", a_t1, payload)[0] == {"answer": [1, 2, 3]}  # bob's write: still cached
    assert qc.invalidate(Scope(agent_wallet="A"))
    assert qc.lookup("layers", a_t1, payload)[0] is None  # agent-wide write: gone
    assert qc.hits == 3


def test_query_cache_bypasses_a_failing_cache_and_reports_it() -> None:
    from manowar_memory._notes import collect

    class Broken(InMemoryCache):
        name = "broken"

        def get_many(self, keys):  # type: ignore[no-untyped-def]
            raise ConnectionError("down")

        def set(self, key, value, ttl_seconds):  # type: ignore[no-untyped-def]
            raise ConnectionError("down")

    qc = QueryCache(Broken(), ttl_seconds=30)
    scope = Scope(agent_wallet="A")
    with collect() as notes:
        assert qc.lookup("layers", scope, {"q": 1}) == (None, None)
        qc.store("some-key", {"x": 1})
        assert qc.invalidate(scope) is False
    assert any("bypassed" in n and "read failed" in n for n in notes)
    assert any("write failed" in n for n in notes)
    assert any("invalidation failed" in n for n in notes)
    # after a failed invalidation, this process does not trust cached entries for one TTL
    healthy = QueryCache(InMemoryCache(), ttl_seconds=30)
    healthy._bypass_until = time.monotonic() + 30
    with collect() as notes:
        assert healthy.lookup("layers", scope, {"q": 1}) == (None, None)
    assert any("may be stale" in n for n in notes)


def test_layer_results_survive_json(tmp_path) -> None:
    from manowar_memory import Archive, Pattern
    from manowar_memory.records import PatternTrigger

    engine = MemoryEngine(store=":memory:", embedder="fake", extractor=None)
    scope = Scope(agent_wallet="A", user_address="alice", thread_id="t1")
    engine.remember(scope, "Alice drinks green tea every morning.", fact_type="preference")
    engine.ingest(scope, ["Tea shops in Lisbon open at nine."])
    engine.post_turn(scope, [{"role": "user", "content": "Any tea recommendations in Lisbon?"},
                             {"role": "assistant", "content": "Try the green tea place."}])
    engine.store.upsert_pattern(Pattern(pattern_id="p", agent_wallet="A", trigger=PatternTrigger(value="tea"),
                                        summary="find tea then book", success_rate=0.8))
    engine.store.add_archive(Archive(archive_id="a", agent_wallet="A", summary="tea history archive", content="",
                                     date_range={"start": 1, "end": 2}))
    result = engine.search_layers("tea Lisbon", scope)
    assert set(result.layers) == {"working", "scene", "graph", "patterns", "archives", "vectors"}
    assert all(result.layers[name] for name in result.layers), result.totals
    data = json.loads(json.dumps(encode_search(result.layers, result.totals, result.lanes)))
    layers, totals, lanes = decode_search(data)
    assert totals == result.totals and lanes == json.loads(json.dumps(result.lanes))
    for name, cands in result.layers.items():
        assert [vars(c) for c in layers[name]] == [vars(c) for c in cands], name
    with pytest.raises(ValueError):
        decode_search({"v": 99})
    engine.close()


# ----------------------------------------------------------------------------- the engine with Redis


def _engine(cache: Cache, **kw) -> QueryCachedEngine:
    return QueryCachedEngine(store=":memory:", embedder="fake", extractor=None, cache=cache, **kw)


@pytest.mark.redis
def test_engine_query_cache_on_redis(rcache) -> None:
    engine = _engine(rcache)
    alice = Scope(agent_wallet="agent", user_address="alice", thread_id="t")
    bob = Scope(agent_wallet="agent", user_address="bob", thread_id="t")
    engine.remember(alice, "Alice's favourite drink is green tea.")
    first = engine.pre_turn("favourite drink", alice)
    second = engine.pre_turn("favourite drink", alice)
    assert engine.query_cache_hits == 1 and second.prompt == first.prompt and "green tea" in first.prompt
    assert second.lanes.get("_cache") == {"hit": True} and second.degradations == first.degradations
    engine.remember(bob, "Bob's favourite drink is espresso.")  # another user's write
    engine.pre_turn("favourite drink", alice)
    assert engine.query_cache_hits == 2
    engine.remember(Scope(agent_wallet="agent"), "Everyone's favourite drink on Fridays is lemonade.")
    third = engine.pre_turn("favourite drink", alice)
    assert engine.query_cache_hits == 2 and "lemonade" in third.prompt  # agent-wide write invalidated alice
    engine.close()


# ----------------------------------------------------------------------------- outages


def _require_binary(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        msg = f"{name} is not installed (apt-get install redis-server)"
        ci = os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")
        if os.environ.get("MANOWAR_REQUIRE_SERVICES", "").strip() == "1" or ci:
            pytest.fail(msg)
        pytest.skip(msg)
    return path


class PrivateRedis:
    """A redis-server this test owns, on a free port; it can be killed, restarted, paused."""

    def __init__(self, binary: str, workdir: str) -> None:
        self.binary = binary
        self.workdir = workdir
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", self.workdir],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        client = redis.Redis(port=self.port, socket_timeout=0.5, socket_connect_timeout=0.5)
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                break
            except redis.exceptions.RedisError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise RuntimeError("the private redis-server did not start") from None
                time.sleep(0.05)
        client.close()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def pause(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGCONT)


@pytest.fixture
def private_redis(tmp_path):
    server = PrivateRedis(_require_binary("redis-server"), str(tmp_path))
    server.start()
    yield server
    if server.proc is not None and server.proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            server.resume()
    server.kill()


def test_redis_stopped_mid_run_is_bypassed_and_reported(private_redis) -> None:
    cache = RedisCache(private_redis.url, retry_after=0.3)
    engine = _engine(cache, query_cache_ttl_s=1.0)
    scope = Scope(agent_wallet="agent", user_address="alice", thread_id="t1")
    engine.remember(scope, "Alice keeps bees on her balcony.")
    warm = engine.pre_turn("bees balcony", scope)
    assert engine.pre_turn("bees balcony", scope).prompt == warm.prompt and engine.query_cache_hits == 1
    assert warm.degradations == []

    private_redis.kill()  # Redis goes away mid-run
    down = engine.pre_turn("bees balcony", scope)
    assert down.prompt == warm.prompt  # still answered, from the store
    assert any("query cache bypassed" in d for d in down.degradations), down.degradations
    assert any("embedding cache bypassed" in d for d in down.degradations), down.degradations
    written = engine.post_turn(scope, [{"role": "user", "content": "The bees made honey this week."}])
    assert written.stored["transcript"] and any("invalidation failed" in d for d in written.degradations)
    fresh = engine.pre_turn("honey bees", scope)
    assert "honey" in fresh.prompt  # never a stale cached answer
    with pytest.raises(CacheUnavailableError):
        cache.get("x")

    private_redis.start()  # back, empty, on the same port
    time.sleep(1.1)  # circuit breaker (0.3 s) and the post-failure bypass window (one query TTL)
    engine.pre_turn("honey bees", scope)
    again = engine.pre_turn("honey bees", scope)
    assert again.degradations == [] and again.lanes.get("_cache") == {"hit": True}
    engine.close()
    cache.close()


def test_slow_redis_costs_at_most_one_timeout(private_redis) -> None:
    cache = RedisCache(private_redis.url, socket_timeout=0.25, retry_after=30)
    engine = _engine(cache)
    scope = Scope(agent_wallet="agent", user_address="alice")
    engine.remember(scope, "Alice's passport expires in March.")
    baseline = engine.pre_turn("passport expiry", scope)
    private_redis.pause()  # the server hangs: every call would wait for its socket timeout
    try:
        t0 = time.perf_counter()
        slow = engine.pre_turn("when does the passport expire", scope)
        first = time.perf_counter() - t0
        t0 = time.perf_counter()
        engine.pre_turn("passport expiry", scope)
        second = time.perf_counter() - t0
    finally:
        private_redis.resume()
    assert "passport" in slow.prompt and "passport" in baseline.prompt
    assert any("bypassed" in d for d in slow.degradations)
    assert first < 1.0, f"one socket timeout (0.25 s), then the circuit breaker: took {first:.2f}s"
    assert second < 0.25, f"the open circuit breaker skips Redis: took {second:.2f}s"
    engine.close()
    cache.close()


def test_unreachable_redis_at_start_never_fails_a_turn() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    engine = _engine(RedisCache(f"redis://127.0.0.1:{port}/0"))
    scope = Scope(agent_wallet="agent", user_address=f"user-{uuid.uuid4().hex[:6]}", thread_id="t")
    engine.remember(scope, "The user is allergic to peanuts.")
    engine.post_turn(scope, [{"role": "user", "content": "Remember my peanut allergy."}])
    result = engine.pre_turn("peanut allergy", scope)
    assert "peanut" in result.prompt and result.degradations
    engine.close()
