"""The threads role of the conformance suite (:class:`ThreadsConformance`)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..._util import DAY_MS, now_ms
from ...records import (
    Message,
    Session,
    Transcript,
    WorkingMemory,
)
from ...scope import Scope
from ...stores.base import MemoryQuery, Store, TurnBuilder, TurnRows

try:
    import pytest
except ImportError as exc:  # pragma: no cover - only without the dev extra
    from ...errors import MissingDependencyError

    raise MissingDependencyError("pytest", "dev", "The store conformance suite") from exc

from .common import AGENT, OTHER_AGENT, T0, _q, _RoleConformance, make_record

__all__ = ["ThreadsConformance"]


class ThreadsConformance(_RoleConformance):
    """The :class:`~manowar_memory.stores.base.ThreadStore` role: sessions and transcripts."""

    # ------------------------------------------------------------------ sessions
    def test_session_round_trip_and_replace(self, store: Store) -> None:
        s = self._session("s1", user="u1", thread="t1", metadata={"app_id": "x"}, state={"step": 2})
        store.upsert_session(s)
        assert store.get_session("s1", AGENT) == s
        assert store.get_session("s1", OTHER_AGENT) is None
        assert store.get_session("s2", AGENT) is None
        changed = s.model_copy(
            update={"working_memory": WorkingMemory(context=["a", "b"]), "expires_at": s.expires_at + 5}
        )
        store.upsert_session(changed)
        assert store.get_session("s1", AGENT) == changed
        assert len(store.find_sessions(_q(user="u1"), 10)) == 1
        other = self._session("s1", agent=OTHER_AGENT)  # same id, other agent: a separate session
        store.upsert_session(other)
        assert store.get_session("s1", OTHER_AGENT) == other and store.get_session("s1", AGENT) == changed

    def test_expired_sessions_are_invisible_and_purged(self, store: Store) -> None:
        now = now_ms()
        store.upsert_session(self._session("live", expires_in=DAY_MS))
        store.upsert_session(self._session("later", expires_in=3 * DAY_MS))
        store.upsert_session(self._session("dead", expires_in=-60_000))
        assert store.get_session("dead", AGENT) is None
        assert {s.session_id for s in store.find_sessions(_q(), 10)} == {"live", "later"}
        assert store.purge_expired_sessions(now + 2 * DAY_MS) in (1, 2)  # "dead" may already be gone (TTL)
        assert store.get_session("live", AGENT) is None and store.get_session("later", AGENT) is not None
        assert store.purge_expired_sessions(now + 2 * DAY_MS) == 0

    def test_find_sessions_scope_order_and_limit(self, store: Store) -> None:
        now = now_ms()
        rows: list[tuple[str, dict[str, Any]]] = [  # most recently used first
            ("app", {"user": "u1", "metadata": {"app_id": "x"}, "state": {"topic": "travel"}}),
            ("u1_t1", {"user": "u1", "thread": "t1"}), ("u1_t2", {"user": "u1", "thread": "t2"}),
            ("local", {"mode": "local", "hai": "h1"}), ("shared", {}), ("u2", {"user": "u2"}),
            ("other", {"agent": OTHER_AGENT}), ("deleted", {"user": "u1", "metadata": {"status": "deleted"}}),
        ]
        for i, (sid, kw) in enumerate(rows):
            store.upsert_session(self._session(sid, last=now - (i + 1) * 1000, **kw))
        def names(q: MemoryQuery, n: int = 10) -> list[str]:
            return [s.session_id for s in store.find_sessions(q, n)]

        assert names(_q(user="u1")) == ["app", "u1_t1", "u1_t2", "local", "shared"]
        assert names(_q(user="u1", thread="t1", durable=False)) == ["u1_t1"]
        assert names(_q()) == ["local", "shared"]
        assert names(_q(mode="local", hai="h1")) == ["local"]
        assert names(_q(user="u1"), 2) == ["app", "u1_t1"]
        assert names(_q(user="u1", active_only=False), 1) == ["app"]
        assert "deleted" in names(_q(user="u1", active_only=False))
        assert names(_q(user="u1", filters={"appId": "x"})) == ["app"]
        assert names(_q(user="u1", filters={"workingMemory.state.topic": "travel"})) == ["app"]

    # ------------------------------------------------------------------ transcripts
    def test_transcript_round_trip_and_replace(self, store: Store) -> None:
        t = self._transcript("s1", summary="a summary", messages=[("user", "book a flight"), ("tool", "flight found"),
                                                                  ("assistant", "done")])
        store.upsert_transcript(t)
        assert store.get_transcript("s1", AGENT) == t
        assert store.get_transcript("s-missing", AGENT) is None
        assert store.get_transcript("s1", OTHER_AGENT) is None
        t2 = t.model_copy(update={"messages": t.messages[:1], "summary": None, "created_at": T0 + 99})
        store.upsert_transcript(t2)
        assert store.get_transcript("s1", AGENT) == t2
        assert len(store.search_transcripts(_q(user="u1"), None, 10)) == 1
        other = self._transcript("s1", agent=OTHER_AGENT, summary="same session id, another agent")
        store.upsert_transcript(other)  # session ids are unique per agent: a separate transcript
        assert store.get_transcript("s1", OTHER_AGENT) == other and store.get_transcript("s1", AGENT) == t2

    @classmethod
    def _turn_builder(cls, tag: str, calls: list[str] | None = None, fail: bool = False,
                      agent: str = AGENT) -> TurnBuilder:
        """A builder appending one message ``tag`` to the transcript ``turns`` and one line to the
        working session ``turns-w``, with a session row of its own."""
        def build(existing: Transcript | None, live: Session | None) -> TurnRows:
            if calls is not None:
                calls.append(tag)
            if fail:
                raise RuntimeError(f"turn {tag} refused")
            base = existing or cls._transcript("turns", agent=agent).model_copy(update={"messages": []})
            msg = Message(role="user", content=tag, timestamp=T0 + len(base.messages))
            session = live or cls._session("turns-w", agent=agent, user="u1", thread="t1")
            lines = session.working_memory.context if live else []
            wm = session.working_memory.model_copy(update={"context": [*lines, tag]})
            return TurnRows(base.model_copy(update={"messages": [*base.messages, msg]}),
                            session.model_copy(update={"working_memory": wm}),
                            make_record(f"turn {tag}", agent=agent, user="u1", thread="t1", source="session",
                                        created_at=T0 + 1000 + len(base.messages)))
        return build

    def test_append_turn_writes_a_turn_once_and_all_or_nothing(self, store: Store) -> None:
        calls: list[str] = []
        first = store.append_turn(AGENT, "turns", "turns-w", "a", self._turn_builder("a", calls))
        assert first.created and first.seq == 1 and first.memory_id
        again = store.append_turn(AGENT, "turns", "turns-w", "a", self._turn_builder("a", calls))
        assert not again.created and again.seq == 1 and again.memory_id == first.memory_id
        assert calls == ["a"]  # a known turn id is not built again
        with pytest.raises(RuntimeError, match="refused"):
            store.append_turn(AGENT, "turns", "turns-w", "b", self._turn_builder("b", fail=True))
        second = store.append_turn(AGENT, "turns", "turns-w", "b", self._turn_builder("b"))
        assert second.created and second.seq == 2
        transcript = store.get_transcript("turns", AGENT)
        assert transcript is not None and [m.content for m in transcript.messages] == ["a", "b"]
        session = store.get_session("turns-w", AGENT)
        assert session is not None and session.working_memory.context == ["a", "b"]
        rows = store.list_memories(MemoryQuery(scope=Scope(agent_wallet=AGENT, user_address="u1")))
        assert sorted(r.content for r in rows) == ["turn a", "turn b"]
        # turn ids are per transcript and per agent
        assert store.append_turn(OTHER_AGENT, "turns", "turns-w", "a", self._turn_builder("a", agent=OTHER_AGENT)).created

    def test_erase_scope_removes_the_scopes_turn_ledger(self, store: Store) -> None:
        store.append_turn(AGENT, "turns", "turns-w", "a", self._turn_builder("a"))  # a turn of u1
        counts = store.erase_scope((AGENT, "u1", None, None))
        assert counts["turns"] == 1 and counts["memories"] == 1
        assert store.erase_scope((AGENT, "u1", None, None))["turns"] == 0
        # nothing remembers the turn id: the same id is a new turn now
        assert store.append_turn(AGENT, "turns", "turns-w", "a", self._turn_builder("a")).created

    def test_concurrent_append_turns_on_one_transcript_all_land_in_order(self, store: Store) -> None:
        writers, turns = 6, 5

        def write(w: int) -> list[int]:
            return [store.append_turn(AGENT, "turns", "turns-w", f"w{w}-{n}", self._turn_builder(f"w{w}-{n}")).seq
                    for n in range(turns)]

        with ThreadPoolExecutor(writers) as pool:
            seqs = [s for got in pool.map(write, range(writers)) for s in got]
        assert sorted(seqs) == list(range(1, writers * turns + 1))
        transcript = store.get_transcript("turns", AGENT)
        assert transcript is not None
        said = [m.content for m in transcript.messages]
        assert sorted(said) == sorted(f"w{w}-{n}" for w in range(writers) for n in range(turns))
        for w in range(writers):
            assert [t for t in said if t.startswith(f"w{w}-")] == [f"w{w}-{n}" for n in range(turns)]
        session = store.get_session("turns-w", AGENT)
        assert session is not None and session.working_memory.context == said

    def test_search_transcripts(self, store: Store) -> None:
        store.upsert_transcript(self._transcript("flight", messages=[("user", "Please book a flight to Lisbon")],
                                                 created_at=T0))
        store.upsert_transcript(self._transcript("summary-hit", summary="Trip planning for Lisbon and Porto",
                                                 messages=[("user", "thanks")], created_at=T0 + 1))
        store.upsert_transcript(self._transcript("other-thread", thread="t2", messages=[("user", "Lisbon again")],
                                                 created_at=T0 + 2))
        store.upsert_transcript(self._transcript("other-user", user="u2", messages=[("user", "Lisbon for u2")],
                                                 created_at=T0 + 3))
        store.upsert_transcript(self._transcript("unrelated", messages=[("user", "tax forms")], created_at=T0 + 4))
        hits = store.search_transcripts(_q(user="u1"), "Lisbon", 10)
        assert {t.session_id for t, _ in hits} == {"flight", "summary-hit", "other-thread"}
        assert all(score > 0 for _, score in hits)
        assert [s for _, s in hits] == sorted((s for _, s in hits), reverse=True)
        hits = store.search_transcripts(_q(user="u1", thread="t1", durable=False), "lisbon porto", 10)
        assert hits[0][0].session_id == "summary-hit"
        assert {t.session_id for t, _ in hits} == {"summary-hit", "flight"}
        newest = store.search_transcripts(_q(user="u1"), None, 2)
        assert [t.session_id for t, _ in newest] == ["unrelated", "other-thread"]
        assert store.search_transcripts(_q(user="u1"), "the of and", 10) == []
        assert store.search_transcripts(_q(user="u2"), "lisbon", 10)[0][0].session_id == "other-user"
        assert store.search_transcripts(_q(agent=OTHER_AGENT), "lisbon", 10) == []
        assert len(store.search_transcripts(_q(user="u1"), "lisbon", 1)) == 1

    def test_a_transcript_past_16_mb_round_trips_grows_and_is_searched_whole(self, store: Store) -> None:
        filler = "lorem ipsum dolor sit amet " * 40_000  # ~1 MiB
        wide = "café ✓ naïve 東京 " * 150_000  # ~3.3 MiB of multi-byte text, and as much again in its tool call
        parts = [("user", "aardvark question " + filler)] + [
            ("assistant" if i % 2 else "user", filler) for i in range(9)] + [("tool", wide), ("user", "closing")]
        big = self._transcript("long", summary="a long chat", messages=parts)
        assert len(big.model_dump_json().encode()) > 16 * 2**20
        store.upsert_transcript(big)
        assert store.get_transcript("long", AGENT) == big
        for word in ("aardvark", "closing"):  # the oldest message and the newest one are both searched
            assert [t.session_id for t, _ in store.search_transcripts(_q(user="u1"), word, 5)] == ["long"]
        grown = big.model_copy(update={"messages": [*big.messages, Message(role="assistant", content="zeppelin",
                                                                           timestamp=T0 + 99)]})
        store.upsert_transcript(grown)
        assert store.get_transcript("long", AGENT) == grown
        (hit, _), = store.search_transcripts(_q(user="u1"), "zeppelin", 5)
        assert hit == grown
        cleared = grown.model_copy(update={"messages": [], "summary": None})
        store.upsert_transcript(cleared)
        assert store.get_transcript("long", AGENT) == cleared
        assert store.search_transcripts(_q(user="u1"), "aardvark", 5) == []  # nothing of the old messages is left
        assert store.stats()["totalTranscripts"] == 1
