"""Access bumps of packed rows: gathered for ``MemoryConfig.access_write_delay_s``, then written
together (``manowar_memory._access``); ``flush()`` and ``close()`` write what is pending."""

from __future__ import annotations

import concurrent.futures
import time

import pytest

from manowar_memory import MemoryConfig, MemoryEngine, MemoryRecord, Scope, SQLiteStore
from manowar_memory._access import AccessBumps
from manowar_memory.embeddings.fake import FakeEmbedder

SCOPE = Scope(agent_wallet="agent", user_address="u1")


def _rows(store: SQLiteStore, *contents: str) -> list[str]:
    emb = FakeEmbedder(16)
    records = [
        MemoryRecord(id=f"r{i}", **MemoryRecord.scope_fields(SCOPE), content=c, source="knowledge",
                     embedding=emb.embed([c])[0], embedding_model=emb.model_id, created_at=1, updated_at=1,
                     last_accessed_at=1, metadata={})
        for i, c in enumerate(contents)
    ]
    return store.add_memories(records)


def _access(store: SQLiteStore, memory_id: str) -> tuple[int, int]:
    rec = store.get_memory(memory_id)
    assert rec is not None
    return rec.access_count, rec.last_accessed_at


@pytest.fixture
def pool() -> concurrent.futures.ThreadPoolExecutor:
    with concurrent.futures.ThreadPoolExecutor(1) as executor:
        yield executor


def test_bumps_in_one_window_are_written_together_with_their_counts(pool) -> None:
    store = SQLiteStore(":memory:")
    a, b, c = _rows(store, "alpha", "beta", "gamma")
    bumps = AccessBumps(store, pool, delay=60.0)  # the timer never fires here: flush writes
    bumps.record([a, b], 100)
    bumps.record([a], 250)
    bumps.record([a, c], 180)
    pool.submit(lambda: None).result()
    assert [_access(store, i)[0] for i in (a, b, c)] == [0, 0, 0]  # nothing written inside the window
    calls: list[tuple[list[str], int]] = []
    real = store.bump_access
    store.bump_access = lambda ids, at, **kw: (calls.append((sorted(ids), at)), real(ids, at, **kw))[1]  # type: ignore[method-assign]
    bumps.flush()
    assert [_access(store, i)[0] for i in (a, b, c)] == [3, 1, 1]
    assert calls == [([a, b, c], 250), ([a], 250), ([a], 250)]  # one write per access count
    assert _access(store, b)[1] == 250  # the window's latest time
    bumps.flush()  # nothing pending: nothing written
    assert len(calls) == 3


def test_the_window_ends_on_its_own_and_zero_delay_writes_each_call(pool) -> None:
    store = SQLiteStore(":memory:")
    a, b = _rows(store, "alpha", "beta")
    AccessBumps(store, pool, delay=0.05).record([a], 10)
    deadline = time.monotonic() + 10
    while _access(store, a)[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _access(store, a) == (1, 10)
    now = AccessBumps(store, pool, delay=0.0)
    now.record([b], 20)
    pool.submit(lambda: None).result()  # the write was queued before this no-op
    assert _access(store, b) == (1, 20)


def test_engine_flush_writes_pending_bumps_and_reports_a_failed_write(tmp_path) -> None:
    config = MemoryConfig(access_write_delay_s=60.0)
    with MemoryEngine(store=f"sqlite:///{tmp_path / 'm.db'}", embedder="fake", config=config) as engine:
        rid = engine.remember(SCOPE, "The user drinks oat milk.").id
        engine.pre_turn("oat milk", SCOPE)
        engine.pre_turn("oat milk please", SCOPE)
        assert engine.get_item(SCOPE, rid).access_count == 0  # still in the window
        assert engine.flush().failed == 0
        assert engine.get_item(SCOPE, rid).access_count == 2

        def broken(ids: list[str], at: int, *, agent_wallet: str | None = None) -> None:
            raise RuntimeError("disk full")

        engine.pre_turn("oat milk", SCOPE)
        real = engine.store.bump_access
        engine.store.bump_access = broken  # type: ignore[method-assign]
        try:
            result = engine.flush()
        finally:
            engine.store.bump_access = real  # type: ignore[method-assign]
        assert result.failed == 1 and "access bumps: RuntimeError: disk full" in result.errors[0]
        assert engine.get_item(SCOPE, rid).access_count == 2  # lost, and said so


def test_close_writes_bumps_still_in_the_window(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'm.db'}"
    with MemoryEngine(store=url, embedder="fake", config=MemoryConfig(access_write_delay_s=60.0)) as engine:
        rid = engine.remember(SCOPE, "The user walks the dog.").id
        engine.pre_turn("walks the dog", SCOPE)
    with MemoryEngine(store=url, embedder="fake") as engine:
        assert engine.get_item(SCOPE, rid).access_count == 1


def test_bumps_are_written_per_agent_and_name_it(pool) -> None:
    """Each write names its rows' agent (a sharded store routes it to that agent's shard), and
    an id recorded for one agent never bumps another agent's row of the same id."""
    store = SQLiteStore(":memory:")
    (a,) = _rows(store, "alpha")
    bumps = AccessBumps(store, pool, delay=60.0)
    agents: list[str | None] = []
    real = store.bump_access
    store.bump_access = lambda ids, at, **kw: (agents.append(kw.get("agent_wallet")), real(ids, at, **kw))[1]  # type: ignore[method-assign]
    bumps.record([a], 100, agent_wallet=SCOPE.agent_wallet)
    bumps.record([a], 120, agent_wallet="someone-else")
    bumps.flush()
    assert sorted(agents, key=str) == sorted([SCOPE.agent_wallet, "someone-else"], key=str)
    assert _access(store, a) == (1, 100)
