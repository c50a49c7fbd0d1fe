"""A maintenance job of one scope reads its own user's rows from the store and no other user's:
an app that runs each user's jobs would otherwise read every user's rows (embeddings and all)
for every user, a cost that grows with the number of users and rows no user's job needs.
Checked on what the store hands back (every row a job read), inline and in the batches Temporal
runs, on SQLite and MongoDB; the jobs' own results are checked too."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from manowar_memory._util import DAY_MS, now_ms
from manowar_memory.jobs import run_job
from manowar_memory.jobs.batched import run_job_batch
from manowar_memory.records import MemoryRecord, Message, Transcript
from manowar_memory.stores.sqlite import SQLiteStore

AGENT = "0xagentreads01"
USERS = ["alice", "bob", "carol", None]
ME = {"user_address": "alice"}


class ReadRecorder:
    """The store, with the user of every row its bulk reads returned recorded."""

    def __init__(self, store: Any) -> None:
        self._store = store
        self.users_read: set[str | None] = set()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def iter_memories(self, *args: Any, **kwargs: Any) -> Iterator[MemoryRecord]:
        for rec in self._store.iter_memories(*args, **kwargs):
            self.users_read.add(rec.user_address)
            yield rec

    def page_memories(self, *args: Any, **kwargs: Any) -> Any:
        rows, after = self._store.page_memories(*args, **kwargs)
        self.users_read.update(r.user_address for r in rows)
        return rows, after

    def list_transcripts(self, *args: Any, **kwargs: Any) -> list[Transcript]:
        found = self._store.list_transcripts(*args, **kwargs)
        self.users_read.update(t.user_address for t in found)
        return found

    def memory_user_counts(self, agent_wallet: str) -> dict[str | None, int]:
        counts = self._store.memory_user_counts(agent_wallet)
        self.users_read.update(counts)  # every user it counts rows of
        return counts

    def iter_user_memories(self, *args: Any, **kwargs: Any) -> Iterator[MemoryRecord]:
        for rec in self._store.iter_user_memories(*args, **kwargs):
            self.users_read.add(rec.user_address)
            yield rec


@pytest.fixture(params=["sqlite", pytest.param("mongo", marks=pytest.mark.mongo)])
def store(request: pytest.FixtureRequest) -> Iterator[ReadRecorder]:
    if request.param == "sqlite":
        inner: Any = SQLiteStore(":memory:")
    else:
        from manowar_memory.stores.mongo import MongoStore

        db = request.getfixturevalue("mongo_db")
        inner = MongoStore(client=db.client, database=db.name, vector_search="local")
    now = now_ms()
    rows = []
    for u, user in enumerate(USERS):
        for k in range(3):
            created = now - (1 + k) * DAY_MS
            meta = {"expiresAt": now - DAY_MS} if k == 2 else {}
            rows.append(MemoryRecord(id=f"r{u}-{k}", agent_wallet=AGENT, user_address=user, content=f"likes tea {k % 2}",
                                     created_at=created, updated_at=created, last_accessed_at=created, metadata=meta))
    inner.add_memories(rows)
    for u, user in enumerate(USERS):
        inner.upsert_transcript(Transcript(
            session_id=f"s{u}", agent_wallet=AGENT, user_address=user, thread_id="t", created_at=now - DAY_MS // 2,
            messages=[Message(role="user", content="I always check the weather first"),
                      Message(role="assistant", content="Noted.")]))
    yield ReadRecorder(inner)
    inner.close()


@pytest.mark.parametrize(("job", "params", "done"), [
    ("decay_update", {}, lambda d: d["updated"] == 3),
    ("consolidate", {}, lambda d: d["scanned"] == 3),
    ("expire", {}, lambda d: d["examined"] == 3),
    ("archive_create", {"window_days": 7}, lambda d: d["memoriesArchived"] == 3),
    ("patterns_extract", {"window_days": 1}, lambda d: d["extracted"] == 1),
])
def test_a_job_of_one_scope_reads_only_its_users_rows(store: ReadRecorder, job: str, params: dict[str, Any],
                                                     done: Any) -> None:
    result = run_job(store, job, {"agent_wallet": AGENT, "owner": ME, **params})
    assert result.status == "completed", result.error
    assert done(result.data), result.data
    assert store.users_read == {"alice"}


def test_the_agents_job_still_reads_every_user(store: ReadRecorder) -> None:
    result = run_job(store, "decay_update", {"agent_wallet": AGENT})
    assert result.status == "completed" and result.data["updated"] == len(USERS) * 3
    assert store.users_read == set(USERS)


def test_a_batched_decay_of_one_scope_reads_only_its_users_rows(store: ReadRecorder) -> None:
    params = {"agent_wallet": AGENT, "owner": ME}
    out = run_job_batch(store, "decay_update", params, None, None, batch_size=1, now=now_ms())
    while out["cursor"] is not None:
        out = run_job_batch(store, "decay_update", params, out["cursor"], out["report"], batch_size=1, now=now_ms())
    assert out["report"]["updated"] == 3
    assert store.users_read == {"alice"}


def test_a_batched_consolidation_of_one_scope_reads_and_counts_only_its_users_rows(store: ReadRecorder) -> None:
    params = {"agent_wallet": AGENT, "owner": ME}
    out = run_job_batch(store, "consolidate", params, None, None, batch_size=1, now=now_ms(), job_id="memjob_reads")
    while out["cursor"] is not None:
        out = run_job_batch(store, "consolidate", params, out["cursor"], out["report"], batch_size=1, now=now_ms(),
                            job_id="memjob_reads")
    assert out["report"]["scanned"] == 3 and out["report"]["consolidated"] == 1  # "likes tea 0" twice
    assert store.users_read == {"alice"}
