"""The maintenance role of the conformance suite (:class:`MaintenanceConformance`)."""

from __future__ import annotations

import json
from typing import Any

from ..._util import DAY_MS, now_ms
from ...errors import StoreError
from ...records import (
    Archive,
)
from ...stores.base import Store

try:
    import pytest
except ImportError as exc:  # pragma: no cover - only without the dev extra
    from ...errors import MissingDependencyError

    raise MissingDependencyError("pytest", "dev", "The store conformance suite") from exc

from .common import AGENT, MODEL, OTHER_AGENT, T0, _q, _RoleConformance, make_record

__all__ = ["MaintenanceConformance"]


class MaintenanceConformance(_RoleConformance):
    """The :class:`~manowar_memory.stores.base.MaintenanceStore` role: what the jobs call."""

    @staticmethod
    def _rows(store: Store) -> list[str]:
        """Seven rows in a known insertion order: five of agent A (one deleted), two of agent B."""
        records = [
            make_record("m0", created_at=T0 + 5),
            make_record("m1", user="u1", created_at=T0 + 1),
            make_record("m2", user="u2", created_at=T0 + 9, metadata={"status": "deleted"}),
            make_record("m3", agent=OTHER_AGENT, user="u1", created_at=T0),
            make_record("m4", user="u1", created_at=T0 + 3),
            make_record("m5", created_at=T0 + 2, embedding=None),
            make_record("m6", agent=OTHER_AGENT, created_at=T0 + 4),
        ]
        ids: list[str] = []
        for rec in records:  # one call each: insertion order is the order of these calls
            ids += store.add_memories([rec])
        return ids

    def test_page_memories_walks_every_row_once_in_insertion_order(self, store: Store) -> None:
        ids = self._rows(store)
        for agent, expected in ((AGENT, [ids[i] for i in (0, 1, 2, 4, 5)]), (None, ids)):
            seen: list[str] = []
            after: Any = None
            pages = 0
            while True:
                rows, nxt = store.page_memories(agent, after, 2)
                json.dumps(nxt)  # the cursor is JSON-safe (it travels in workflow state)
                assert all(r.embedding is None for r in rows)
                seen += [r.id for r in rows]
                pages += 1
                if len(rows) < 2:
                    break
                after = nxt
            assert seen == expected and pages == len(expected) // 2 + 1
            assert store.page_memories(agent, nxt, 2) == ([], nxt)

    def test_page_memories_of_some_users_reads_only_their_rows(self, store: Store) -> None:
        ids = self._rows(store)
        for users, expected in ((["u1"], [1, 4]), ([None], [0, 5]), (["u1", None], [0, 1, 4, 5]), ([], []),
                                (["nobody"], [])):
            seen: list[str] = []
            after: Any = None
            while True:
                rows, after = store.page_memories(AGENT, after, 1, users=users)
                if not rows:
                    break
                seen += [r.id for r in rows]
            assert seen == [ids[i] for i in expected], users
        assert [r.id for r in store.page_memories(None, None, 10, users=["u1"])[0]] == [
            ids[1], ids[3], ids[4]]  # without an agent: the user's rows of every agent

    def test_iter_memories_of_some_users_reads_only_their_rows(self, store: Store) -> None:
        ids = self._rows(store)
        assert [r.id for r in store.iter_memories(AGENT, users=["u1"], batch_size=1)] == [ids[1], ids[4]]
        assert [r.id for r in store.iter_memories(AGENT, users=[None])] == [ids[0], ids[5]]
        assert [r.id for r in store.iter_memories(OTHER_AGENT, users=["u1", None])] == [ids[3], ids[6]]
        assert [r.id for r in store.iter_memories(AGENT, users=["u2"], created_from=T0 + 9)] == [ids[2]]
        assert list(store.iter_memories(AGENT, users=[])) == []

    def test_memory_user_counts_and_user_rows_cover_every_status(self, store: Store) -> None:
        ids = self._rows(store)
        assert store.memory_user_counts(AGENT) == {None: 2, "u1": 2, "u2": 1}
        assert store.memory_user_counts(OTHER_AGENT) == {"u1": 1, None: 1}
        assert store.memory_user_counts("agent-none") == {}
        rows = list(store.iter_user_memories(AGENT, ["u1", None]))
        assert [r.id for r in rows] == [ids[i] for i in (0, 1, 4, 5)]
        assert all(r.embedding is None and r.agent_wallet == AGENT for r in rows)
        assert [r.id for r in store.iter_user_memories(AGENT, ["u2"])] == [ids[2]]  # deleted rows too
        assert list(store.iter_user_memories(AGENT, [])) == []

    def test_update_memories_in_bulk(self, store: Store) -> None:
        a, b = store.add_memories([make_record("bulk a", created_at=T0), make_record("bulk b", created_at=T0 + 1)])
        updated = store.update_memories([
            (a, {"decay_score": 0.25, "updated_at": T0 + 50}),
            ("vec_missing", {"decay_score": 0.1}),
            (b, {"metadata": {"status": "superseded", "supersededBy": a}, "updated_at": T0 + 50}),
        ])
        assert updated == 2
        got_a, got_b = store.get_memory(a), store.get_memory(b)
        assert got_a is not None and got_a.decay_score == 0.25 and got_a.updated_at == T0 + 50
        assert got_b is not None and got_b.metadata == {"status": "superseded", "supersededBy": a}
        assert [r.id for r in store.list_memories(_q())] == [a]
        assert store.update_memories([]) == 0
        with pytest.raises(StoreError):
            store.update_memories([(a, {"decay_score": 0.5}), (a, {"agent_wallet": "x"})])
        assert store.get_memory(a).decay_score == 0.25  # type: ignore[union-attr]  # nothing was written

    def test_delete_memories(self, store: Store) -> None:
        a, b, c = store.add_memories([make_record(f"del {i}", created_at=T0 + i) for i in range(3)])
        assert store.delete_memories([a, "vec_missing", c]) == 2
        assert store.delete_memories([]) == 0
        assert [r.id for r in store.iter_memories()] == [b]
        assert [h.record.id for h in store.vector_search(_q(), [1.0, 0.0, 0.0, 0.0], MODEL, 5)[0]] == [b]

    def test_list_transcripts_in_a_time_range_oldest_first(self, store: Store) -> None:
        for i, sid in enumerate(("t-late", "t-early", "t-mid", "t-out")):
            store.upsert_transcript(self._transcript(sid, created_at=T0 + (30, 10, 20, 99)[i]))
        store.upsert_transcript(self._transcript("t-other", agent=OTHER_AGENT, created_at=T0 + 20))
        found = store.list_transcripts(AGENT, T0 + 10, T0 + 30)
        assert [t.session_id for t in found] == ["t-early", "t-mid", "t-late"]
        assert found[0] == self._transcript("t-early", created_at=T0 + 10)
        assert store.list_transcripts(AGENT, T0 + 31, T0 + 98) == []

    def test_list_transcripts_of_some_users_reads_only_theirs(self, store: Store) -> None:
        for i, user in enumerate(("u1", "u2", None, "u1")):
            store.upsert_transcript(self._transcript(f"t{i}", user=user, created_at=T0 + i))
        def users(*names: str | None) -> list[str]:
            return [t.session_id for t in store.list_transcripts(AGENT, T0, T0 + 9, users=list(names))]
        assert users("u1") == ["t0", "t3"]
        assert users(None) == ["t2"]
        assert users("u2", None) == ["t1", "t2"]
        assert users() == [] and users("nobody") == []

    def test_old_transcripts_are_counted_scoped_and_deleted(self, store: Store) -> None:
        store.upsert_transcript(self._transcript("old-1", user="u1", created_at=T0))
        store.upsert_transcript(self._transcript("old-2", user=None, agent=OTHER_AGENT, created_at=T0 + 1))
        store.upsert_transcript(self._transcript("new", user="u2", created_at=T0 + 100))
        assert store.count_transcripts_older_than(T0 + 50) == 2
        assert sorted(store.old_transcript_scopes(T0 + 50), key=str) == sorted(
            [(AGENT, "u1", None, None), (OTHER_AGENT, None, None, None)], key=str)
        assert store.delete_transcripts_older_than(T0 + 50) == 2
        assert store.count_transcripts_older_than(T0 + 50) == 0 and store.old_transcript_scopes(T0 + 50) == []
        assert store.get_transcript("new", AGENT) is not None and store.get_transcript("old-1", AGENT) is None

    def test_stale_sessions_are_counted_scoped_and_deleted(self, store: Store) -> None:
        now = now_ms()
        later = now + 2 * DAY_MS  # "now" for the store: the first session has expired by then
        store.upsert_session(self._session("expiring", user="u1", expires_in=DAY_MS, last=now))
        store.upsert_session(self._session("unused", mode="local", hai="h1", expires_in=9 * DAY_MS, last=now - 5000))
        store.upsert_session(self._session("fresh", user="u2", expires_in=9 * DAY_MS, last=now))
        cutoff = now - 1000
        assert store.count_stale_sessions(later, cutoff) == 2
        assert sorted(store.stale_session_scopes(later, cutoff), key=str) == sorted(
            [(AGENT, "u1", None, None), (AGENT, None, "local", "h1")], key=str)
        assert store.count_stale_sessions(now, cutoff) == 1  # nothing has expired yet
        assert store.delete_sessions_older_than(cutoff) == 1
        assert store.purge_expired_sessions(later) == 1
        assert store.count_stale_sessions(later, cutoff) == 0 and store.stale_session_scopes(later, cutoff) == []
        assert [s.session_id for s in store.find_sessions(_q(user="u2"), 5)] == ["fresh"]

    def test_erase_scope_removes_exactly_one_scopes_data_with_its_index_entries(self, store: Store) -> None:
        def fill(user: str | None, mode: str | None = None, hai: str | None = None) -> list[str]:
            tag = f"{user}{mode}{hai}"
            ids = store.add_memories([
                make_record(f"zqsecret {tag} passport", user=user, mode=mode, hai=hai, embedding=[1.0, 0.0, 0.0, 0.0],
                            created_at=T0 + len(tag)),
                make_record(f"zqsecret {tag} contract", user=user, mode=mode, hai=hai, created_at=T0 + 1)])
            store.upsert_transcript(self._transcript(f"tr-{tag}", user=user, messages=[("user", f"zqsecret {tag}")])
                                    .model_copy(update={"mode": mode, "hai_id": hai}))
            store.upsert_session(self._session(f"s-{tag}", user=user, mode=mode, hai=hai))
            store.upsert_pattern(self._pattern(f"p-{tag}", 0.7, user=user, mode=mode, hai=hai))
            store.add_archive(Archive(archive_id=f"arc-{tag}", agent_wallet=AGENT, user_address=user, mode=mode,  # type: ignore[arg-type]
                                      hai_id=hai, summary="s", content="x", date_range={"start": T0, "end": T0},
                                      created_at=T0))
            return ids

        fill("u1")
        kept = fill("u2") + fill(None) + fill("u1", "local", "h1")
        counts = store.erase_scope((AGENT, "u1", None, None))
        assert counts == {"memories": 2, "transcripts": 1, "sessions": 1, "patterns": 1, "archives": 1, "turns": 0}
        assert store.erase_scope((AGENT, "u1", None, None)) == dict.fromkeys(counts, 0)
        assert sorted(r.id for r in store.iter_memories(AGENT)) == sorted(kept)
        assert store.get_transcript("tr-u1NoneNone", AGENT) is None and store.get_session("s-u1NoneNone", AGENT) is None
        assert store.get_pattern("p-u1NoneNone") is None and store.get_archive("arc-u1NoneNone") is None
        assert store.get_transcript("tr-u2NoneNone", AGENT) is not None and store.get_archive("arc-NoneNoneNone")
        u1 = _q(user="u1")  # still sees the shared rows and u1's rows of HAI h1, which are another scope
        left = {(None, None), ("u1", "local")}
        assert {(h.record.user_address, h.record.mode) for h in store.keyword_search(u1, "zqsecret passport", 10)} \
            == left
        assert {(h.record.user_address, h.record.mode)
                for h in store.vector_search(u1, [1.0, 0.0, 0.0, 0.0], MODEL, 10)[0]} == left
        assert {(t.user_address, t.mode) for t, _ in store.search_transcripts(_q(user="u1", thread="t1"), "zqsecret", 10)} \
            == left

    def test_list_agent_wallets_by_kind_then_name(self, store: Store) -> None:
        assert store.list_agent_wallets() == []
        store.add_memories([make_record("m", agent="agent-M2"), make_record("m", agent="agent-M1", created_at=T0 + 1)])
        store.upsert_transcript(self._transcript("t", agent="agent-T"))
        store.upsert_transcript(self._transcript("t", agent="agent-M2"))
        store.upsert_pattern(self._pattern("p", 0.5, agent="agent-P"))
        store.add_archive(Archive(archive_id="arc", agent_wallet="agent-A1", summary="s", content="x",
                                  date_range={"start": T0, "end": T0}, created_at=T0))
        store.upsert_session(self._session("s", agent="agent-S"))
        assert store.list_agent_wallets() == ["agent-M1", "agent-M2", "agent-T", "agent-P", "agent-A1", "agent-S"]
        assert store.list_agent_wallets(3) == ["agent-M1", "agent-M2", "agent-T"]
