"""Maintenance jobs invalidate the layer query cache of exactly the scopes they changed.

Each test caches a search (or pre_turn) result, proves the next identical read is served
from the cache, runs a job, and checks that the next read is recomputed and reflects the
change, while a read of a scope the job did not touch is still served from the cache.
Real Redis (marked ``redis``) on both stores, plus the in-process cache.
"""

from __future__ import annotations

import pytest

from manowar_memory import ConfigurationError, MemoryEngine, Scope, memory_tools
from manowar_memory._util import DAY_MS, now_ms
from manowar_memory.jobs import run_job
from manowar_memory.records import Message, Transcript
from manowar_memory.testing import QueryCachedEngine

from test_jobs import make_store

AGENT = "0xcacheagent"
ALICE = Scope(agent_wallet=AGENT, user_address="alice")
BOB = Scope(agent_wallet=AGENT, user_address="bob")

STORES = [pytest.param("sqlite", marks=pytest.mark.redis),
          pytest.param("mongo", marks=[pytest.mark.mongo, pytest.mark.redis])]


@pytest.fixture(params=STORES)
def engine(request, redis_url, redis_key_prefix, redis_client):
    from manowar_memory.cache.redis import RedisCache

    store = make_store(request, request.param)
    eng = MemoryEngine(store=store, embedder="fake", extractor=None,
                       cache=RedisCache(redis_url, prefix=redis_key_prefix, socket_timeout=2.0))
    assert eng.query_cache is not None, "a Redis cache turns the query cache on"
    yield eng
    eng.close()


def _ids(engine, query, scope, layers=("vectors",)):
    """(ids found, whether the answer came from the cache)."""
    before = engine.query_cache_hits
    result = engine.search_layers(query, scope, list(layers), limit=10)
    return {c.id for hits in result.layers.values() for c in hits}, engine.query_cache_hits > before


def _ingest(engine, scope, text, age_days):
    (memory_id,) = engine.ingest(scope, [{"content": text, "created_at": now_ms() - int(age_days * DAY_MS)}])
    return memory_id


def test_consolidate_invalidates_only_the_changed_user(engine):
    old = _ingest(engine, ALICE, "Alice drinks green tea every morning", 2)
    new = _ingest(engine, ALICE, "alice drinks green tea every morning", 1)
    bobs = _ingest(engine, BOB, "Bob drinks black coffee", 1)
    assert _ids(engine, "green tea", ALICE) == ({old, new}, False)
    assert _ids(engine, "green tea", ALICE) == ({old, new}, True), "the second read is cached"
    assert _ids(engine, "black coffee", BOB) == ({bobs}, False)

    job = run_job(engine, "consolidate", {"agent_wallet": AGENT})
    assert job.data["consolidated"] == 1 and job.data["invalidatedScopes"] == 1

    assert _ids(engine, "green tea", ALICE) == ({new}, False), "the superseded row is gone at once"
    assert _ids(engine, "black coffee", BOB) == ({bobs}, True), "bob's rows did not change: still cached"


def test_decay_update_refreshes_cached_scores(engine):
    memory_id = _ingest(engine, ALICE, "Alice collects vintage stamps", 60)

    def decay_of():
        result = engine.search_layers("vintage stamps", ALICE, ["vectors"], limit=5)
        (cand,) = result.layers["vectors"]
        return cand.record.decay_score

    assert decay_of() == pytest.approx(1.0)
    job = run_job(engine, "decay_update", {"half_life_days": 30, "agent_wallet": AGENT})
    assert job.data["updated"] == 1 and job.data["invalidatedScopes"] == 1
    assert engine.store.get_memory(memory_id).decay_score == pytest.approx(0.25, abs=1e-3)
    assert decay_of() == pytest.approx(0.25, abs=1e-3)


def test_cleanup_invalidates_deleted_rows_and_transcripts(engine):
    thread = Scope(agent_wallet=AGENT, user_address="alice", thread_id="t-old")
    stale = _ingest(engine, ALICE, "Alice once owned a red bicycle", 100)
    engine.store.upsert_transcript(Transcript(
        session_id="s-old", agent_wallet=AGENT, user_address="alice", thread_id="t-old",
        created_at=now_ms() - 100 * DAY_MS, messages=[Message(role="user", content="my red bicycle was stolen")]))
    run_job(engine, "decay_update", {"half_life_days": 10, "agent_wallet": AGENT})  # decay ~0.001 < 0.2
    kept = _ingest(engine, BOB, "Bob owns a red scooter", 1)

    first = engine.pre_turn("red bicycle", ALICE, ["vectors"])
    assert "red bicycle" in first.prompt
    assert _ids(engine, "red bicycle", thread, ["scene"]) == ({"s-old"}, False)
    assert _ids(engine, "red bicycle", thread, ["scene"]) == ({"s-old"}, True)
    assert _ids(engine, "red scooter", BOB) == ({kept}, False)

    job = run_job(engine, "cleanup", {"older_than_days": 90})
    assert job.data["vectorsDeleted"] == 1 and job.data["transcriptsDeleted"] == 1
    assert engine.store.get_memory(stale) is None

    assert "red bicycle" not in engine.pre_turn("red bicycle", ALICE, ["vectors"]).prompt
    assert _ids(engine, "red bicycle", thread, ["scene"]) == (set(), False)
    assert _ids(engine, "red scooter", BOB) == ({kept}, True)


def test_archive_restore_and_promote_invalidate(engine):
    ids = [_ingest(engine, ALICE, f"Alice visited city number {i}", 1) for i in range(3)]
    archive_id = engine.scoped(ALICE).run_job("archive_create").data["archiveId"]
    engine.delete_item(ALICE, ids[0], hard=True)
    assert ids[0] not in _ids(engine, "visited city", ALICE)[0]
    assert _ids(engine, "visited city", ALICE)[1], "cached"

    tools = {t.name: t for t in memory_tools(engine.scoped(ALICE), groups=["jobs"])}
    assert tools["memory_archive_restore"].call(archive_id=archive_id)["restored"] == 0  # a deletion stays
    assert _ids(engine, "visited city", ALICE)[1], "nothing changed: still cached"
    assert engine.scoped(ALICE).restore_archive(archive_id, restore_deleted=True)["restored"] == 1
    found, hit = _ids(engine, "visited city", ALICE)
    assert not hit and set(ids) <= found


def test_dry_run_and_no_op_jobs_keep_the_cache(engine):
    memory_id = _ingest(engine, ALICE, "Alice plays the cello", 1)
    assert _ids(engine, "cello", ALICE) == ({memory_id}, False)
    job = run_job(engine, "decay_update", {"half_life_days": 30}, dry_run=True)
    assert job.data["invalidatedScopes"] == 0
    assert run_job(engine, "consolidate", {"agent_wallet": AGENT}).data["invalidatedScopes"] == 0
    assert _ids(engine, "cello", ALICE) == ({memory_id}, True)


def test_in_process_query_cache_is_invalidated_too():
    with QueryCachedEngine(store="sqlite:///:memory:", embedder="fake", extractor=None) as eng:
        old = _ingest(eng, ALICE, "Alice speaks Portuguese", 2)
        new = _ingest(eng, ALICE, "alice speaks portuguese", 1)
        assert _ids(eng, "Portuguese", ALICE) == ({old, new}, False)
        assert _ids(eng, "Portuguese", ALICE)[1]
        run_job(eng, "consolidate", {"agent_wallet": AGENT})
        assert _ids(eng, "Portuguese", ALICE) == ({new}, False)


class _NoScopeListing:
    """A store that cannot list the scopes of old transcripts and stale sessions."""

    def __init__(self, inner):
        self._inner = inner

    def __getattr__(self, name):
        if name in ("old_transcript_scopes", "stale_session_scopes", "_write", "_conn"):
            raise AttributeError(name)
        return getattr(self._inner, name)


def test_a_store_without_scope_listing_is_refused_by_name():
    """Cleanup invalidates exactly the scopes it touched, so listing them is part of the
    maintenance role: a store without it is refused when the engine opens it, naming what is missing."""
    from manowar_memory.stores.sqlite import SQLiteStore

    inner = SQLiteStore(":memory:")
    try:
        with pytest.raises(ConfigurationError) as err:
            QueryCachedEngine(store=_NoScopeListing(inner), embedder="fake", extractor=None)
        assert "MaintenanceStore.old_transcript_scopes" in str(err.value)
        assert "MaintenanceStore.stale_session_scopes" in str(err.value)
    finally:
        inner.close()


def test_cache_outage_never_fails_a_job():
    import socket

    from manowar_memory.cache.redis import RedisCache

    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    dead = RedisCache(f"redis://127.0.0.1:{port}/0", socket_timeout=0.2)
    with MemoryEngine(store="sqlite:///:memory:", embedder="fake", extractor=None, cache=dead) as eng:
        _ingest(eng, ALICE, "Alice knits scarves", 2)
        _ingest(eng, ALICE, "alice knits scarves", 1)
        job = run_job(eng, "consolidate", {"agent_wallet": AGENT})
        assert job.status == "completed" and job.data["consolidated"] == 1
        assert job.data["invalidatedScopes"] == 0, "the cache could not be told; the job still completes"
        result = eng.search_layers("knits scarves", ALICE, ["vectors"], limit=5)
        assert len(result.layers["vectors"]) == 1
        assert any("bypassed" in d for d in result.degradations), "reads bypass a cache they could not invalidate"
