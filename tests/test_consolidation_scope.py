"""Consolidation stays inside one whole scope (agent, user, mode, HAI): the same text
remembered in HAI h1, HAI h2, global and with no mode is four facts, each of which its
scope keeps seeing after the job, inline and in the batches the Temporal workflow runs,
on SQLite and MongoDB."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from manowar_memory import MemoryEngine, Scope
from manowar_memory._util import DAY_MS, now_ms
from manowar_memory.jobs import run_job
from manowar_memory.jobs.batched import run_job_batch
from manowar_memory.records import MemoryRecord
from manowar_memory.stores.sqlite import SQLiteStore

AGENT = "0xagentscope01"
STORES = ["sqlite", pytest.param("mongo", marks=pytest.mark.mongo)]

SCOPES = {
    "h1": {"mode": "local", "hai_id": "h1"},
    "h2": {"mode": "local", "hai_id": "h2"},
    "global": {"mode": "global"},
    "global-h1": {"mode": "global", "hai_id": "h1"},
    "none": {},
}


def _store(request: pytest.FixtureRequest, kind: str):
    if kind == "sqlite":
        return SQLiteStore(":memory:")
    from manowar_memory.stores.mongo import MongoStore

    db = request.getfixturevalue("mongo_db")
    return MongoStore(client=db.client, database=db.name, vector_search="local")


@pytest.fixture(params=STORES)
def store(request: pytest.FixtureRequest) -> Iterator[object]:
    s = _store(request, request.param)
    yield s
    s.close()


@pytest.fixture(params=STORES)
def engine(request: pytest.FixtureRequest) -> Iterator[MemoryEngine]:
    if request.param == "sqlite":
        eng = MemoryEngine(store="sqlite:///:memory:", embedder="fake")
        yield eng
        eng.close()
        return
    from manowar_memory.stores.mongo import MongoStore

    db = request.getfixturevalue("mongo_store_db")
    eng = MemoryEngine(store=MongoStore(client=db.client, database=db.name), embedder="fake")
    yield eng
    eng.close()


def _seed(store, now: int) -> dict[str, list[str]]:
    """'likes tea' in every scope of SCOPES for two users (and no user), with one older
    duplicate in h1 and in 'none'. Returns the ids that must be superseded and kept."""
    rows: list[MemoryRecord] = []
    out: dict[str, list[str]] = {"superseded": [], "kept": []}
    for user in (None, "alice", "Alice"):
        for name, extra in SCOPES.items():
            copies = 2 if name in ("h1", "none") else 1
            for k in range(copies):
                created = now - (5 + k) * DAY_MS
                rid = f"{name}_{user}_{k}"
                rows.append(MemoryRecord(id=rid, agent_wallet=AGENT, user_address=user,
                                         content="likes tea" if k == 0 else "  Likes TEA ", created_at=created,
                                         updated_at=created, last_accessed_at=created, **extra))
                out["superseded" if k else "kept"].append(rid)
    store.add_memories(rows)
    return out


def _statuses(store) -> dict[str, str]:
    return {r.id: r.status for r in store.iter_memories(AGENT)}


def test_inline_consolidation_never_crosses_mode_or_hai(store) -> None:
    want = _seed(store, now_ms())
    job = run_job(store, "consolidate", {"agent_wallet": AGENT})
    assert job.status == "completed", job.error
    assert sorted(job.data["supersededIds"]) == sorted(want["superseded"])
    assert job.data["consolidated"] == len(want["superseded"]) == job.data["duplicateGroups"] == 6
    statuses = _statuses(store)
    assert all(statuses[i] == "active" for i in want["kept"]), "a scope lost its only copy of the fact"
    for rid in want["superseded"]:
        sup = store.get_memory(rid)
        keeper = store.get_memory(sup.metadata["supersededBy"])
        assert (keeper.user_address, keeper.mode, keeper.hai_id) == (sup.user_address, sup.mode, sup.hai_id)


def test_batched_consolidation_never_crosses_mode_or_hai_and_matches_inline(store) -> None:
    now = now_ms()
    want = _seed(store, now)
    inline_store = SQLiteStore(":memory:")
    _seed(inline_store, now)
    inline = run_job(inline_store, "consolidate", {"agent_wallet": AGENT})
    out = run_job_batch(store, "consolidate", {"agent_wallet": AGENT}, None, None, batch_size=3, now=now,
                        job_id="memjob_scope")
    batches = 1
    while out["cursor"] is not None:
        out = run_job_batch(store, "consolidate", {"agent_wallet": AGENT}, out["cursor"], out["report"],
                            batch_size=3, now=now, job_id="memjob_scope")
        batches += 1
    assert batches == 3, "one batch per user group"
    report = out["report"]
    for key in ("consolidated", "duplicateGroups", "scanned", "byAgent"):
        assert report[key] == inline.data[key], key
    assert sorted(report["supersededIds"]) == sorted(want["superseded"])
    assert _statuses(store) == _statuses(inline_store)
    inline_store.close()


def test_every_hai_and_mode_still_sees_its_fact_after_consolidation(engine: MemoryEngine) -> None:
    scopes = {name: Scope(agent_wallet=AGENT, user_address="alice", **extra) for name, extra in SCOPES.items()}
    ids = {name: engine.remember(scope, "Alice likes green tea").id for name, scope in scopes.items()}
    assert len(set(ids.values())) == len(scopes), "each scope stores its own fact"
    job = run_job(engine, "consolidate", {"agent_wallet": AGENT})
    assert job.status == "completed" and job.data["consolidated"] == 0, job.data
    for name, scope in scopes.items():
        row = engine.store.get_memory(ids[name])
        assert row is not None and row.status == "active", name
        found, _ = engine.search("green tea", scope, layers=("graph",))
        assert ids[name] in {c.id for c in found}, f"{name} no longer sees its fact"
