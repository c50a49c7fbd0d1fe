"""The embedded SQLite store: persistence, memory rows, both search lanes, sessions and expiry,
transcripts, patterns, archives, stats."""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Callable

import pytest

from manowar_memory import (
    Archive,
    FakeEmbedder,
    MemoryConfig,
    MemoryEngine,
    MemoryRecord,
    Pattern,
    Scope,
    Session,
    SQLiteStore,
    StoreError,
    Transcript,
)
from manowar_memory._util import now_ms
from manowar_memory.filters import normalize_filters
from manowar_memory.records import Message, PatternTrigger, WorkingMemory
from manowar_memory.stores import _fts, _sql
from manowar_memory.stores.base import KeywordHits, MemoryQuery, Store
from manowar_memory.stores.sqlite import connection as sqlite_connection
from manowar_memory.stores.sqlite import migrations as sqlite_migrations
from manowar_memory.stores.sqlite import threads as sqlite_threads

EMB = FakeEmbedder(32)
SCOPE = Scope(agent_wallet="agent", user_address="u")


def _record(content: str, *, scope: Scope = SCOPE, source: str = "knowledge", created_at: int | None = None,
            metadata: dict | None = None, model: FakeEmbedder | None = EMB, rid: str | None = None) -> MemoryRecord:
    stamp = created_at if created_at is not None else now_ms()
    vector = model.embed([content])[0] if model is not None else None
    return MemoryRecord(
        id=rid or MemoryRecord.make_id(scope.agent_wallet, content, stamp), **MemoryRecord.scope_fields(scope),
        content=content, source=source, embedding=vector, embedding_model=model.model_id if model else None,
        created_at=stamp, updated_at=stamp, last_accessed_at=stamp, metadata=metadata or {},
    )


@pytest.fixture
def store() -> SQLiteStore:
    s = SQLiteStore(":memory:")
    yield s
    s.close()


def test_sqlite_store_implements_the_store_protocol(store: SQLiteStore) -> None:
    assert isinstance(store, Store)
    assert store.migrations() == [name for name, _ in sqlite_migrations.MIGRATIONS]


def test_file_store_persists_across_reopen(tmp_path) -> None:
    path = tmp_path / "sub" / "memory.db"
    first = SQLiteStore(path)
    (rid,) = first.add_memories([_record("Persisted across processes")])
    first.close()
    second = SQLiteStore(path)
    try:
        got = second.get_memory(rid)
        assert got is not None and got.content == "Persisted across processes"
        assert got.embedding_model == EMB.model_id
        assert len(got.embedding) == 32
        assert second.migrations() == [name for name, _ in sqlite_migrations.MIGRATIONS]  # not re-applied
        hits, _ = second.vector_search(MemoryQuery(scope=SCOPE), EMB.embed(["persisted processes"])[0], EMB.model_id, 5)
        assert [h.record.id for h in hits] == [rid]
    finally:
        second.close()


def test_engine_memory_persists_in_a_file_store(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'm.db'}"
    with MemoryEngine(store=url, embedder="fake") as engine:
        engine.remember(SCOPE, "The user's favourite colour is teal.", fact_type="preference")
    with MemoryEngine(store=url, embedder="fake") as engine:
        assert "teal" in engine.pre_turn("favourite colour", SCOPE).prompt


def test_database_from_a_newer_version_is_refused(tmp_path) -> None:
    path = tmp_path / "m.db"
    SQLiteStore(path).close()
    conn = sqlite3.connect(path)
    conn.execute("INSERT INTO _manowar_migrations VALUES ('m999_future', 0)")
    conn.commit()
    conn.close()
    with pytest.raises(StoreError, match="newer manowar-memory"):
        SQLiteStore(path)


def test_closed_store_raises_store_error(store: SQLiteStore) -> None:
    store.close()
    with pytest.raises(StoreError, match="closed"):
        store.get_memory("x")


# ---------------------------------------------------------------- memory rows


def test_colliding_id_gets_a_suffix(store: SQLiteStore) -> None:
    ids = store.add_memories([_record("same", rid="vec_x"), _record("same", rid="vec_x"), _record("same", rid="vec_x")])
    assert ids == ["vec_x", "vec_x_1", "vec_x_2"]


def test_update_memory_changes_fields_and_rejects_unknown_ones(store: SQLiteStore) -> None:
    (rid,) = store.add_memories([_record("old text")])
    updated = store.update_memory(rid, {"content": "new text about kites", "metadata": {"status": "archived"}})
    assert updated.content == "new text about kites" and updated.status == "archived"
    assert [h.record.id for h in store.keyword_search(MemoryQuery(scope=SCOPE), "kites", 5)] == [rid]
    assert store.keyword_search(MemoryQuery(scope=SCOPE), "old", 5) == []
    with pytest.raises(StoreError, match="cannot update"):
        store.update_memory(rid, {"agent_wallet": "thief"})
    assert store.update_memory("missing", {"content": "x"}) is None


def test_soft_deleted_and_superseded_rows_are_hidden_from_active_reads(store: SQLiteStore) -> None:
    ids = store.add_memories([
        _record("row alpha visible"),
        _record("row alpha deleted", metadata={"status": "deleted"}),
        _record("row alpha superseded", metadata={"status": "superseded"}),
    ])
    active = MemoryQuery(scope=SCOPE)
    assert [r.id for r in store.list_memories(active)] == [ids[0]]
    assert store.count_memories(MemoryQuery(scope=SCOPE, active_only=False)) == 3
    assert [h.record.id for h in store.keyword_search(active, "alpha", 10)] == [ids[0]]
    hits, _ = store.vector_search(active, EMB.embed(["row alpha"])[0], EMB.model_id, 10)
    assert [h.record.id for h in hits] == [ids[0]]


def test_hard_delete_removes_the_row_from_both_lanes(store: SQLiteStore) -> None:
    (rid,) = store.add_memories([_record("ephemeral zeppelin")])
    vector = EMB.embed(["ephemeral zeppelin"])[0]
    assert store.vector_search(MemoryQuery(scope=SCOPE), vector, EMB.model_id, 5)[0]
    assert store.delete_memory(rid) is True
    assert store.delete_memory(rid) is False
    assert store.keyword_search(MemoryQuery(scope=SCOPE), "zeppelin", 5) == []
    assert store.vector_search(MemoryQuery(scope=SCOPE), vector, EMB.model_id, 5)[0] == []


def test_unique_fact_migration_keeps_pre_existing_duplicates_as_superseded(tmp_path) -> None:
    """A database from before m002 may hold duplicate active facts (the old check-then-insert
    race). Migrating keeps every row: the newest of each group stays active, the others are
    marked superseded (pointing at it), and the unique index then holds."""
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("CREATE TABLE _manowar_migrations (name TEXT PRIMARY KEY, applied_at INTEGER NOT NULL)")
    for statement in sqlite_migrations._split_script(sqlite_migrations._m001_initial):
        conn.execute(statement)
    conn.execute("INSERT INTO _manowar_migrations VALUES ('m001_initial', 0)")
    rows = [("vec_a1", "h1", 100, None), ("vec_a2", "h1", 300, None), ("vec_a3", "h1", 200, None),
            ("vec_b1", "h2", 100, None), ("vec_c1", "h3", 100, "deleted"), ("vec_c2", "h3", 50, None)]
    for i, (rid, fact_hash, created, status) in enumerate(rows, start=1):
        meta = {"factHash": fact_hash, **({"status": status} if status else {})}
        conn.execute(
            "INSERT INTO memory (id, agent_wallet, content, source, status, fact_hash, created_at, updated_at, "
            "last_accessed_at, metadata, rev, access_count) VALUES (?, 'agent', ?, 'fact', ?, ?, ?, ?, ?, ?, ?, ?)",
            (rid, f"fact {fact_hash}", status, fact_hash, created, created, created, json.dumps(meta), i, i),
        )
    conn.close()
    store = SQLiteStore(path)
    try:
        assert store.migrations()[:2] == ["m001_initial", "m002_unique_active_fact"]
        everything = {r.id: r for r in store.iter_memories("agent")}
        assert len(everything) == len(rows)  # nothing deleted
        status = {rid: r.metadata.get("status") for rid, r in everything.items()}
        assert status == {"vec_a1": "superseded", "vec_a2": None, "vec_a3": "superseded", "vec_b1": None,
                          "vec_c1": "deleted", "vec_c2": None}
        assert everything["vec_a1"].metadata["supersededBy"] == "vec_a2"
        assert everything["vec_a3"].metadata["supersededReason"] == "duplicate active fact"
        assert everything["vec_a1"].access_count == 1  # counts and content untouched
        assert store.find_fact_by_hash("agent", "h1").id == "vec_a2"
        rec = _record("fact h1", source="fact", metadata={"factHash": "h1"}, scope=Scope(agent_wallet="agent"))
        stored, inserted = store.add_fact_if_absent(rec)
        assert (stored.id, inserted) == ("vec_a2", False)
        # the unique index itself, under the store's own checks
        with pytest.raises(sqlite3.IntegrityError), store._write() as raw:
            raw.execute("UPDATE memory SET status = NULL WHERE id = 'vec_a1'")
    finally:
        store.close()


def test_find_fact_by_hash_and_bump_access(store: SQLiteStore) -> None:
    (rid,) = store.add_memories([_record("fact", source="fact", metadata={"factHash": "h1"})])
    store.add_memories([_record("not a fact", metadata={"factHash": "h2"})])
    assert store.find_fact_by_hash("agent", "h1").id == rid
    assert store.find_fact_by_hash("agent", "h2") is None  # only source=fact rows
    assert store.find_fact_by_hash("other", "h1") is None
    store.bump_access([rid], 123)
    store.bump_access([rid], 456)
    row = store.get_memory(rid)
    assert (row.access_count, row.last_accessed_at) == (2, 456)


def test_list_memories_newest_first_with_source_selection(store: SQLiteStore) -> None:
    store.add_memories([
        _record("one", created_at=1_000), _record("two", created_at=3_000, source="fact"), _record("three", created_at=2_000),
    ])
    assert [r.content for r in store.list_memories(MemoryQuery(scope=SCOPE))] == ["two", "three", "one"]
    assert [r.content for r in store.list_memories(MemoryQuery(scope=SCOPE, sources=("fact",)))] == ["two"]
    assert [r.content for r in store.list_memories(MemoryQuery(scope=SCOPE, exclude_sources=("fact",)))] == ["three", "one"]
    assert len(store.list_memories(MemoryQuery(scope=SCOPE), limit=1)) == 1


def test_get_memory_with_a_query_enforces_scope(store: SQLiteStore) -> None:
    (rid,) = store.add_memories([_record("alice only", scope=Scope(agent_wallet="agent", user_address="alice"))])
    assert store.get_memory(rid, MemoryQuery(scope=Scope(agent_wallet="agent", user_address="alice"))) is not None
    assert store.get_memory(rid, MemoryQuery(scope=Scope(agent_wallet="agent", user_address="bob"))) is None
    assert store.get_memory(rid, MemoryQuery(scope=Scope(agent_wallet="agent"))) is None


# ---------------------------------------------------------------- lanes


def test_keyword_search_ranks_by_bm25_and_stems(store: SQLiteStore) -> None:
    store.add_memories([
        _record("The user runs marathons and running shoes matter"),
        _record("The user likes tea"),
    ])
    hits = store.keyword_search(MemoryQuery(scope=SCOPE), "running", 5)
    assert [h.record.content for h in hits] == ["The user runs marathons and running shoes matter"]
    assert hits[0].score > 0
    assert store.keyword_search(MemoryQuery(scope=SCOPE), "the a of", 5) == []  # stop words only


def test_keyword_search_quotes_fts_syntax(store: SQLiteStore) -> None:
    store.add_memories([_record('He said "NEAR" and OR AND NOT')])
    hits = store.keyword_search(MemoryQuery(scope=SCOPE), 'near" OR * AND ( NOT', 5)
    assert len(hits) == 1


def test_vector_search_only_returns_rows_of_the_requested_model(store: SQLiteStore) -> None:
    other = FakeEmbedder(32)
    other.model_id = "other:32"
    store.add_memories([_record("green tea ceremony", model=EMB), _record("green tea ceremony", model=other,
                                                                             rid="vec_other")])
    vector = EMB.embed(["green tea ceremony"])[0]
    hits, info = store.vector_search(MemoryQuery(scope=SCOPE), vector, EMB.model_id, 10)
    assert [h.record.embedding_model for h in hits] == [EMB.model_id]
    assert info.method == "exact" and info.skipped_other_models == 1
    other_hits, _ = store.vector_search(MemoryQuery(scope=SCOPE), vector, "other:32", 10)
    assert [h.record.id for h in other_hits] == ["vec_other"]
    assert store.vector_search(MemoryQuery(scope=SCOPE), vector, "never-used", 10)[0] == []


def test_vector_scores_are_on_the_atlas_scale(store: SQLiteStore) -> None:
    store.add_memories([_record("identical text here")])
    hits, _ = store.vector_search(MemoryQuery(scope=SCOPE), EMB.embed(["identical text here"])[0], EMB.model_id, 1)
    assert hits[0].score == pytest.approx(1.0, abs=1e-5)


def test_vector_search_with_wrong_dimensions_is_a_store_error(store: SQLiteStore) -> None:
    store.add_memories([_record("some text")])
    with pytest.raises(StoreError, match="dimensions"):
        store.vector_search(MemoryQuery(scope=SCOPE), [1.0, 0.0], EMB.model_id, 5)


def test_vector_index_grows_past_its_initial_capacity(store: SQLiteStore) -> None:
    small = FakeEmbedder(8)
    records = [_record(f"note {i} token{i}", model=small, rid=f"r{i}") for i in range(1500)]
    store.add_memories(records[:10])
    query = MemoryQuery(scope=SCOPE)
    assert store.vector_search(query, small.embed(["note 3 token3"])[0], small.model_id, 1)[0][0].record.id == "r3"
    store.add_memories(records[10:])  # the in-process index must grow from 1024 rows
    hits, info = store.vector_search(query, small.embed(["note 1499 token1499"])[0], small.model_id, 1)
    assert [h.record.id for h in hits] == ["r1499"] and info.candidates == 1500
    other = Scope(agent_wallet="agent", user_address="someone-else-entirely")
    store.add_memories([_record("note private", model=small, rid="priv", scope=other)])
    assert "priv" not in {h.record.id for h in store.vector_search(query, small.embed(["note private"])[0],
                                                                   small.model_id, 2000)[0]}


def test_vector_index_sees_writes_made_through_another_connection(tmp_path) -> None:
    path = tmp_path / "shared.db"
    reader, writer = SQLiteStore(path), SQLiteStore(path)
    try:
        vector = EMB.embed(["harbour lighthouse"])[0]
        assert reader.vector_search(MemoryQuery(scope=SCOPE), vector, EMB.model_id, 5)[0] == []
        writer.add_memories([_record("harbour lighthouse")])
        hits, _ = reader.vector_search(MemoryQuery(scope=SCOPE), vector, EMB.model_id, 5)
        assert [h.record.content for h in hits] == ["harbour lighthouse"]
    finally:
        reader.close()
        writer.close()


def test_filters_on_memory_rows_support_lists_and_null(store: SQLiteStore) -> None:
    store.add_memories([
        _record("row a", metadata={"app_id": "a"}), _record("row b", metadata={"app_id": "b"}), _record("row none"),
    ])

    def contents(filters: dict) -> set[str]:
        return {r.content for r in store.list_memories(MemoryQuery(scope=SCOPE, filters=normalize_filters(filters)))}

    assert contents({"appId": ["a", "b"]}) == {"row a", "row b"}
    assert contents({"appId": None}) == {"row none"}
    assert contents({"appId": ["a", None]}) == {"row a", "row none"}
    assert contents({"source": "knowledge", "scopeId": "agent"}) == {"row a", "row b", "row none"}
    assert contents({"workingMemory.state.step": "x"}) == set()  # not a memory-row path


def test_sql_filter_distinguishes_true_from_one(store: SQLiteStore) -> None:
    store.add_memories([_record("flag one", metadata={"flag": 1}), _record("flag true", metadata={"flag": True})])
    query = MemoryQuery(scope=SCOPE, filters=normalize_filters({"metadata.flag": True}))
    assert [r.content for r in store.list_memories(query)] == ["flag true"]


# ---------------------------------------------------------------- sessions and expiry


def _session(sid: str, expires_at: int, *, scope: Scope = SCOPE, lines: list[str] | None = None,
             last: int | None = None) -> Session:
    return Session(session_id=sid, **Session.scope_fields(scope),
                   working_memory=WorkingMemory(context=lines or ["user: hi"]), expires_at=expires_at,
                   last_accessed_at=last if last is not None else now_ms())


def test_expired_session_disappears_from_reads_at_once_and_is_purged(store: SQLiteStore) -> None:
    now = now_ms()
    store.upsert_session(_session("live", now + 60_000))
    store.upsert_session(_session("dead", now - 1))
    assert store.get_session("live", "agent") is not None
    assert store.get_session("dead", "agent") is None
    assert [s.session_id for s in store.find_sessions(MemoryQuery(scope=SCOPE, durable=False), 10)] == ["live"]
    assert store.stats()["totalSessions"] == 2  # still stored until purged
    assert store.purge_expired_sessions(now) == 1
    assert store.stats()["totalSessions"] == 1
    assert store.purge_expired_sessions(now) == 0


def _set_clock(monkeypatch: pytest.MonkeyPatch, clock: Callable[[], int]) -> None:
    """Every module of the store that reads the clock reads ``clock``."""
    for module in (sqlite_connection, sqlite_threads):
        monkeypatch.setattr(module, "now_ms", clock)


def test_session_expires_when_the_clock_passes_expires_at(store: SQLiteStore, monkeypatch) -> None:
    now = now_ms()
    store.upsert_session(_session("s", now + 1_000))
    assert store.get_session("s", "agent") is not None
    _set_clock(monkeypatch, lambda: now + 1_000)
    assert store.get_session("s", "agent") is None
    assert store.find_sessions(MemoryQuery(scope=SCOPE, durable=False), 10) == []


def test_engine_session_ttl_comes_from_config(monkeypatch) -> None:
    engine = MemoryEngine(store="sqlite:///:memory:", embedder=None, config=MemoryConfig(session_ttl_ms=1000))
    scope = Scope(agent_wallet="agent", user_address="u", thread_id="t")
    engine.post_turn(scope, [{"role": "user", "content": "Remember the lighthouse keeper."}], extract_facts=False)
    session = engine.store.get_session(scope.thread_session_id(), "agent")
    assert session.expires_at - session.last_accessed_at == 1000
    assert engine.search_layers("lighthouse keeper", scope, ["working"]).totals == {"working": 1}
    _set_clock(monkeypatch, lambda: session.expires_at + 1)
    assert engine.search_layers("lighthouse keeper", scope, ["working"]).totals == {"working": 0}
    assert engine.store.purge_expired_sessions(session.expires_at + 1) == 1
    engine.close()


def test_session_ttl_below_one_second_is_rejected() -> None:
    with pytest.raises(ValueError):
        MemoryConfig(session_ttl_ms=999)


def test_upsert_session_replaces_by_agent_and_session_id(store: SQLiteStore) -> None:
    far = now_ms() + 60_000
    store.upsert_session(_session("s", far, lines=["user: one"]))
    store.upsert_session(_session("s", far, lines=["user: two"]))
    store.upsert_session(_session("s", far, lines=["user: other agent"], scope=Scope(agent_wallet="other")))
    assert store.get_session("s", "agent").working_memory.context == ["user: two"]
    assert store.get_session("s", "other").working_memory.context == ["user: other agent"]


def test_find_sessions_orders_by_last_access_and_filters_working_state(store: SQLiteStore) -> None:
    far = now_ms() + 60_000
    a = _session("a", far, last=1)
    a.working_memory.state["step"] = "plan"
    store.upsert_session(a)
    store.upsert_session(_session("b", far, last=2))
    query = MemoryQuery(scope=SCOPE, durable=False)
    assert [s.session_id for s in store.find_sessions(query, 10)] == ["b", "a"]
    filtered = MemoryQuery(scope=SCOPE, durable=False, filters=normalize_filters({"workingMemory.state.step": "plan"}))
    assert [s.session_id for s in store.find_sessions(filtered, 10)] == ["a"]


def test_delete_sessions_older_than(store: SQLiteStore) -> None:
    far = now_ms() + 60_000
    store.upsert_session(_session("old", far, last=100))
    store.upsert_session(_session("new", far, last=10_000))
    assert store.delete_sessions_older_than(5_000) == 1
    assert store.get_session("old", "agent") is None and store.get_session("new", "agent") is not None


# ---------------------------------------------------------------- transcripts, patterns, archives


def test_transcript_upsert_and_full_text_search(store: SQLiteStore) -> None:
    t = Transcript(session_id="s1", **Transcript.scope_fields(SCOPE.with_thread("t1")),
                   messages=[Message(role="user", content="We talked about sailing boats")], summary="sailing chat")
    store.upsert_transcript(t)
    t2 = t.model_copy(update={"messages": [*t.messages, Message(role="user", content="and about kayaks")]})
    store.upsert_transcript(t2)
    assert len(store.get_transcript("s1", SCOPE.agent_wallet).messages) == 2
    hits = store.search_transcripts(MemoryQuery(scope=SCOPE, durable=False), "kayaks", 5)
    assert [tr.session_id for tr, _ in hits] == ["s1"] and hits[0][1] > 0
    assert store.search_transcripts(MemoryQuery(scope=SCOPE, durable=False), "submarine", 5) == []
    newest = store.search_transcripts(MemoryQuery(scope=SCOPE, durable=False), None, 5)
    assert [tr.session_id for tr, _ in newest] == ["s1"]
    other_thread = MemoryQuery(scope=SCOPE.with_thread("t2"), durable=False)
    assert store.search_transcripts(other_thread, "kayaks", 5) == []


def test_pattern_upsert_keeps_created_at_and_orders_by_success(store: SQLiteStore) -> None:
    base = dict(**Pattern.scope_fields(SCOPE), trigger=PatternTrigger(value="deploy"))
    store.upsert_pattern(Pattern(pattern_id="p1", summary="deploy flow", success_rate=0.4, created_at=100, **base))
    store.upsert_pattern(Pattern(pattern_id="p1", summary="deploy flow v2", success_rate=0.6, created_at=999, **base))
    store.upsert_pattern(Pattern(pattern_id="p2", summary="rollback flow", success_rate=0.9, **base))
    p1 = store.get_pattern("p1")
    assert (p1.summary, p1.created_at) == ("deploy flow v2", 100)
    assert [p.pattern_id for p in store.find_patterns(MemoryQuery(scope=SCOPE), 10)] == ["p2", "p1"]
    assert store.find_patterns(MemoryQuery(scope=Scope(agent_wallet="agent", user_address="bob")), 10) == []


def test_archives_add_update_and_find_newest_first(store: SQLiteStore) -> None:
    for i, stamp in enumerate((100, 300, 200)):
        store.add_archive(Archive(archive_id=f"a{i}", **Archive.scope_fields(SCOPE), summary=f"archive {i}",
                                  content="x", date_range={"start": 0, "end": 1}, created_at=stamp))
    assert [a.archive_id for a in store.find_archives(MemoryQuery(scope=SCOPE), 10)] == ["a1", "a2", "a0"]
    store.update_archive("a0", {"ipfs_cid": "bafy"})
    assert store.get_archive("a0").ipfs_cid == "bafy"
    with pytest.raises(StoreError):
        store.update_archive("nope", {"ipfs_cid": "x"})
    store.update_archive("a2", {"metadata": {"status": "deleted"}})
    assert [a.archive_id for a in store.find_archives(MemoryQuery(scope=SCOPE), 10)] == ["a1", "a0"]


def test_stats_counts_per_agent(store: SQLiteStore) -> None:
    store.add_memories([_record("a", source="fact"), _record("b"), _record("c", scope=Scope(agent_wallet="other"))])
    store.upsert_session(_session("s", now_ms() + 60_000))
    stats = store.stats("agent")
    assert stats["totalVectors"] == 2
    assert stats["bySource"] == {"fact": 1, "knowledge": 1}
    assert stats["byStatus"] == {"active": 2}
    assert stats["totalSessions"] == 1
    assert store.stats()["totalVectors"] == 3
    assert store.stats("nobody")["totalVectors"] == 0


_FTS_SCOPES = [Scope(agent_wallet="agent", user_address="u1"), Scope(agent_wallet="agent", user_address="u2"),
               Scope(agent_wallet="agent"), Scope(agent_wallet="other", user_address="u1")]


_FTS_TEXTS = ("kayak river", "painting", "kayak painting trip")


def _keyword_results(store: SQLiteStore) -> dict[tuple[int, str], list[tuple[str, float]]]:
    return {(i, text): [(h.record.id, h.score) for h in store.keyword_search(MemoryQuery(scope=s), text, 10)]
            for i, s in enumerate(_FTS_SCOPES) for text in _FTS_TEXTS}


_FTS_ROWS = ["kayak on the river", "painting a river", "kayak trip, kayak painting", "a painting of a kayak",
             "river trip"]


def _fill_fts_scopes(store: SQLiteStore) -> None:
    for n, s in enumerate(_FTS_SCOPES):
        rows = _FTS_ROWS[n:] + _FTS_ROWS[:n]
        store.add_memories([_record(f"{t} ({n})" if k % 2 else t, rid=f"r{n}-{k}", scope=s) for k, t in enumerate(rows)])
    store.add_memories([_record(f"weather report {k}", rid=f"w{k}", scope=_FTS_SCOPES[3]) for k in range(30)])


@pytest.mark.parametrize("first_missing", ["m006_fts_scope_ranges", "m007_fts_scoped_terms"])
def test_fts_migrations_give_the_keyword_results_of_a_new_database(tmp_path, monkeypatch, first_missing) -> None:
    """A database from before m006 (one FTS rowid space) or before m007 (unscoped terms) is
    migrated; every scope's keyword hits, order and BM25 scores are then those of a database
    created new with the same rows, and the triggers keep the rebuilt index in sync."""
    fresh = SQLiteStore(tmp_path / "new.db")
    _fill_fts_scopes(fresh)
    expected = _keyword_results(fresh)
    fresh.close()
    path = tmp_path / "old.db"
    names = [name for name, _ in sqlite_migrations.MIGRATIONS]
    monkeypatch.setattr(sqlite_migrations, "MIGRATIONS", sqlite_migrations.MIGRATIONS[:names.index(first_missing)])
    old = SQLiteStore(path)
    _fill_fts_scopes(old)
    assert first_missing not in old.migrations()
    old.close()
    monkeypatch.undo()
    store = SQLiteStore(path)
    try:
        assert store.migrations() == [name for name, _ in sqlite_migrations.MIGRATIONS]
        got = _keyword_results(store)
        assert got == expected
        assert got[(0, "painting")][0][1] > 0.1  # rare enough terms for real BM25 scores
        assert {h.record.user_address for h in store.keyword_search(MemoryQuery(scope=_FTS_SCOPES[0]), "kayak", 20)} == {"u1", None}
        (rid,) = store.add_memories([_record("kayak at dawn", scope=_FTS_SCOPES[1])])  # triggers keep it in sync
        assert [h.record.id for h in store.keyword_search(MemoryQuery(scope=_FTS_SCOPES[1]), "dawn", 5)] == [rid]
        assert store.keyword_search(MemoryQuery(scope=_FTS_SCOPES[0]), "dawn", 5) == []
        store.update_memory(rid, {"content": "canoe at dusk"})
        assert store.keyword_search(MemoryQuery(scope=_FTS_SCOPES[1]), "dawn", 5) == []
        assert [h.record.id for h in store.keyword_search(MemoryQuery(scope=_FTS_SCOPES[1]), "dusk", 5)] == [rid]
        store.delete_memory(rid)
        assert store.keyword_search(MemoryQuery(scope=_FTS_SCOPES[1]), "dusk", 5) == []
        assert store.keyword_search(MemoryQuery(scope=Scope(agent_wallet="nobody", user_address="u1")), "kayak", 5) == []
        with store._conn() as conn:
            conn.execute("INSERT INTO memory_fts(memory_fts, rank) VALUES ('integrity-check', 1)")
    finally:
        store.close()


def test_keyword_document_frequencies_are_the_scopes_own(store: SQLiteStore) -> None:
    """Every indexed term carries its row's scope, so a term's document count is one scope's,
    and another user's words do not reorder a user's results here: 50 other rows of "kayak"
    would make the word common table-wide, and a table-wide BM25 would drop it to no weight."""
    other = Scope(agent_wallet="agent", user_address="other")
    store.add_memories([_record("kayak kayak lake", rid="kayak"), _record("painting the lake", rid="painting")])
    before = [h.record.id for h in store.keyword_search(MemoryQuery(scope=SCOPE), "kayak painting", 5)]
    assert before == ["kayak", "painting"]
    store.add_memories([_record(f"kayak {k}", rid=f"o{k}", scope=other) for k in range(50)])
    assert [h.record.id for h in store.keyword_search(MemoryQuery(scope=SCOPE), "kayak painting", 5)] == before
    with store._conn() as conn:
        conn.execute("CREATE VIRTUAL TABLE temp.fts_terms USING fts5vocab(main, memory_fts, row)")
        docs = dict(conn.execute("SELECT term, doc FROM temp.fts_terms WHERE term LIKE '%xkayak'").fetchall())
        sid = {key: n for n, key in conn.execute("SELECT id, key FROM fts_scopes")}
    assert docs == {f"{sid[_sql.fts_scope_key('agent', 'u')]}xkayak": 1,
                    f"{sid[_sql.fts_scope_key('agent', 'other')]}xkayak": 50}


def test_keyword_search_reads_only_the_scopes_fts_rowid_ranges(store: SQLiteStore) -> None:
    """FTS5 gets the scope's rowid range as a constraint (``>`` and ``<`` in its plan), so
    other scopes' rows are not read; and a row moved to another scope moves its index entry."""
    from manowar_memory.stores import _sql

    sql, params = _sql.keyword_rowids([(1, '"1xkayak"')], "m.agent_wallet = ?", ["agent"], 5, 0.5)
    with store._conn() as conn:
        plan = [r[3] for r in conn.execute("EXPLAIN QUERY PLAN " + sql, params)]
    assert any(p.startswith("SCAN memory_fts VIRTUAL TABLE INDEX 0:M") and p.endswith("><") for p in plan), plan
    (rid,) = store.add_memories([_record("kayak lessons", scope=_FTS_SCOPES[0])])
    with store._write() as conn:  # no public API moves a row; the trigger must still follow
        conn.execute("UPDATE memory SET user_address = 'u2' WHERE id = ?", (rid,))
    assert store.keyword_search(MemoryQuery(scope=_FTS_SCOPES[0]), "kayak", 5) == []
    assert [h.record.id for h in store.keyword_search(MemoryQuery(scope=_FTS_SCOPES[1]), "kayak", 5)] == [rid]


def _keyword_reference(store: SQLiteStore, query: MemoryQuery, text: str, limit: int) -> list[tuple[str, float]]:
    """The keyword lane in one statement over every match (what the pooled first step must equal)."""
    from manowar_memory.stores import _sql

    s = query.scope
    keys = [_sql.fts_scope_key(s.agent_wallet, s.user_address), _sql.fts_scope_key(s.agent_wallet, None)]
    where, params = store._memory_where(query)
    with store._conn() as conn:
        sids = [r[0] for r in conn.execute("SELECT id FROM fts_scopes WHERE key IN (?, ?) ORDER BY id", keys)]
        phrases = _fts.query_phrases(text)
        sql, all_params = _sql.keyword_rowids([(sid, _fts.scoped_match(sid, phrases)) for sid in sids],
                                              sqlite_connection._qualify(where, "m"), params, limit, store.context_weight)
        rows = conn.execute(sql, all_params).fetchall()
        ids = {r[0]: r[1] for r in conn.execute(f"SELECT rowid, id FROM memory WHERE rowid IN "
                                                f"({','.join('?' * len(rows))})", [r[0] for r in rows])}
    return [(ids[r[0]], float(r[1])) for r in rows]


def test_keyword_lane_pool_gives_the_results_of_a_full_scan_and_falls_back_when_too_few_pass(store: SQLiteStore) -> None:
    """The keyword lane first reads only the best ``limit * keyword_pool_factor`` matches; when
    enough pass the scope filter its results (ids, order, ties by rowid, scores) are those of the
    statement over every match, and when too few pass it runs that statement instead."""
    store.keyword_pool_factor = 1
    user_less = Scope(agent_wallet="agent")
    rows = [_record(f"kayak trip {k}", rid=f"same{k}") for k in range(6)]  # equal scores: rowid order decides
    rows += [_record("kayak kayak river " + "x" * k, rid=f"best{k}", metadata={"colour": "red"}) for k in range(4)]
    rows += [_record(f"kayak river {k} " + "notes on wind and weather " * 4, rid=f"agent{k}", scope=user_less)
             for k in range(4)]  # long: below the best rows for "kayak river"
    rows += [_record("kayak kayak kayak river", rid="other", scope=Scope(agent_wallet="agent", user_address="u2"))]
    store.add_memories(rows)
    store.update_memory("best0", {"metadata": {"colour": "red", "status": "superseded"}})
    statements: list[str] = []
    with store._conn() as conn:
        conn.set_trace_callback(statements.append)
    try:
        cases = [
            (MemoryQuery(scope=SCOPE), "kayak river", 3),
            (MemoryQuery(scope=SCOPE), "kayak trip", 4),
            (MemoryQuery(scope=SCOPE), "kayak", 20),
            (MemoryQuery(scope=SCOPE, filters=normalize_filters({"metadata.colour": "red"})), "kayak river", 3),
            (MemoryQuery(scope=SCOPE, active_only=False), "kayak river", 2),
            (MemoryQuery(scope=user_less), "kayak", 3),
        ]
        fell_back = []
        for query, text, limit in cases:
            statements.clear()
            got = [(h.record.id, h.score) for h in store.keyword_search(query, text, limit)]
            fell_back.append(sum("JOIN memory m" in sql for sql in statements) == 1)
            assert got == _keyword_reference(store, query, text, limit), (query, text)
            assert got
    finally:
        with store._conn() as conn:
            conn.set_trace_callback(None)
    assert [h.record.id for h in store.keyword_search(MemoryQuery(scope=SCOPE), "trip", 3)] == [
        "same0", "same1", "same2"]
    # the superseded best0 is in the first pool of "kayak river" (fallback); the red filter passes
    # too few of the pool (fallback); "kayak" x 20 has fewer matches than the pool holds
    assert fell_back == [True, False, False, True, False, False], fell_back
    store.keyword_pool_factor = 0  # off: the statement over every match, same results
    for query, text, limit in cases:
        assert [(h.record.id, h.score) for h in store.keyword_search(query, text, limit)] == _keyword_reference(
            store, query, text, limit)


def test_keyword_lane_reads_the_pools_rows_a_limit_at_a_time_until_enough_pass(store: SQLiteStore) -> None:
    """The pool's memory rows are read ``limit`` at a time, best first, each read keeping only
    rows that pass the filter: the lane stops at the first read that fills ``limit``, reads no
    row past it, and gives what the statement over every match gives."""
    store.keyword_pool_factor = 3
    rows = [_record("kayak kayak kayak", rid=f"old{k}") for k in range(3)]  # the best matches, superseded below
    rows += [_record("kayak kayak paddle", rid=f"mid{k}") for k in range(3)]
    rows += [_record("kayak paddle river lake", rid=f"low{k}") for k in range(3)]
    store.add_memories(rows)
    store.update_memories([(f"old{k}", {"metadata": {"status": "superseded"}}) for k in range(3)])
    statements: list[str] = []
    with store._conn() as conn:
        conn.set_trace_callback(statements.append)
    try:
        got = [(h.record.id, h.score) for h in store.keyword_search(MemoryQuery(scope=SCOPE), "kayak", 3)]
    finally:
        with store._conn() as conn:
            conn.set_trace_callback(None)
    assert [rid for rid, _ in got] == ["mid0", "mid1", "mid2"]
    assert got == _keyword_reference(store, MemoryQuery(scope=SCOPE), "kayak", 3)
    reads = [sql for sql in statements if "NOT INDEXED" in sql]
    assert len(reads) == 2, statements  # old0-2 (none pass), then mid0-2 (all pass); low0-2 never read
    assert not any("JOIN memory m" in sql for sql in statements)  # no fallback to every match
    in_lists = [re.search(r"rowid IN \(([^)]*)\)", sql) for sql in reads]
    assert [len(m.group(1).split(",")) for m in in_lists if m] == [3, 3]  # six rows asked for, not nine
    assert all(") AND (" in sql for sql in reads)  # each read keeps only the rows that pass the scope filter


def test_file_connections_map_the_database_into_memory_only_when_asked(tmp_path) -> None:
    store = SQLiteStore(tmp_path / "m.db")
    try:
        with store._conn() as conn:
            assert conn.execute("PRAGMA mmap_size").fetchone()[0] == 0
    finally:
        store.close()
    SQLiteStore.mmap_size, before = 1 << 28, SQLiteStore.mmap_size
    try:
        store = SQLiteStore(tmp_path / "m.db")
        with store._conn() as conn:
            assert conn.execute("PRAGMA mmap_size").fetchone()[0] == 1 << 28
        store.close()
    finally:
        SQLiteStore.mmap_size = before


def test_a_tool_without_the_terms_function_cannot_write_memory_rows(tmp_path) -> None:
    """Another tool's connection (no ``manowar_fts_terms``) reads the file but cannot change a
    memory row: the trigger fails, the statement is undone, and the index stays in step."""
    path = tmp_path / "m.db"
    store = SQLiteStore(path)
    (rid,) = store.add_memories([_record("kayak at dawn")])
    store.close()
    raw = sqlite3.connect(path)
    try:
        assert raw.execute("SELECT content FROM memory WHERE id = ?", (rid,)).fetchone() == ("kayak at dawn",)
        with pytest.raises(sqlite3.OperationalError, match="manowar_fts_terms"):
            raw.execute("UPDATE memory SET content = 'canoe at dusk' WHERE id = ?", (rid,))
        raw.rollback()
    finally:
        raw.close()
    store = SQLiteStore(path)
    try:
        assert store.get_memory(rid).content == "kayak at dawn"
        assert [h.record.id for h in store.keyword_search(MemoryQuery(scope=SCOPE), "kayak", 5)] == [rid]
    finally:
        store.close()


def test_a_threads_newest_rows_come_from_the_thread_index_newest_first(store: SQLiteStore) -> None:
    """Ingest reads a thread's newest rows for each new row's thread context: the statement
    walks the (agent, thread, created_at) index newest first, with no sort and no scan of the
    agent's other users, and ties on ``created_at`` still come newest insert first."""
    import dataclasses

    other = Scope(agent_wallet="agent", user_address="someone-else")
    rows = [_record(f"turn {k}", rid=f"t{k}", scope=dataclasses.replace(SCOPE, thread_id="th"), created_at=1000 + k // 2)
            for k in range(10)]
    rows += [_record(f"other {k}", rid=f"o{k}", scope=dataclasses.replace(other, thread_id="th"), created_at=2000 + k)
             for k in range(300)]
    store.add_memories(rows)
    query = MemoryQuery(scope=dataclasses.replace(SCOPE, thread_id="th"), durable=False, exclude_sources=("fact",))
    statements: list[str] = []
    with store._conn() as conn:
        conn.set_trace_callback(statements.append)
        try:
            got = [r.id for r in store.list_memories(query, limit=5)]
        finally:
            conn.set_trace_callback(None)
        (sql,) = [s for s in statements if s.lstrip().startswith("SELECT")]
        plan = [r[3] for r in conn.execute("EXPLAIN QUERY PLAN " + sql)]
    assert got == ["t9", "t8", "t7", "t6", "t5"]
    assert plan == ["SEARCH memory USING INDEX idx_memory_thread (agent_wallet=? AND thread_id=?)"], plan


def _transcript(session: str, scope: Scope, text: str) -> Transcript:
    return Transcript(session_id=session, **Transcript.scope_fields(scope), messages=[Message(role="user", content=text)])


def test_transcript_search_reads_its_scopes_terms_and_follows_a_moved_transcript(tmp_path, monkeypatch) -> None:
    """Transcripts are indexed with scoped terms (m009, migrated from a database without it): a
    user's search matches only its own and the agent's user-less transcripts, and an upsert
    that moves a session to another user moves its index entry."""
    other = Scope(agent_wallet="agent", user_address="other")
    user_less = Scope(agent_wallet="agent")
    path = tmp_path / "t.db"
    names = [name for name, _ in sqlite_migrations.MIGRATIONS]
    monkeypatch.setattr(sqlite_migrations, "MIGRATIONS", sqlite_migrations.MIGRATIONS[:names.index("m009_transcripts_scoped_terms")])
    old = SQLiteStore(path)
    old.upsert_transcript(_transcript("mine", SCOPE, "we paddled the kayaks at dawn"))
    old.upsert_transcript(_transcript("theirs", other, "kayaks kayaks kayaks"))
    old.close()
    monkeypatch.undo()
    store = SQLiteStore(path)
    try:
        store.upsert_transcript(_transcript("shared", user_less, "kayak rental prices"))
        mine = MemoryQuery(scope=SCOPE, durable=False)
        assert sorted(t.session_id for t, _ in store.search_transcripts(mine, "kayaks", 5)) == ["mine", "shared"]
        assert [t.session_id for t, _ in store.search_transcripts(MemoryQuery(scope=other, durable=False), "dawn", 5)] == []
        store.upsert_transcript(_transcript("theirs", SCOPE, "kayaks at dusk"))  # the session moves to u
        assert [t.session_id for t, _ in store.search_transcripts(mine, "dusk", 5)] == ["theirs"]
        assert [t.session_id for t, _ in store.search_transcripts(MemoryQuery(scope=other, durable=False), "kayaks", 5)] == [
            "shared"]
        with store._conn() as conn:
            conn.execute("INSERT INTO transcripts_fts(transcripts_fts, rank) VALUES ('integrity-check', 1)")
            conn.execute("CREATE VIRTUAL TABLE temp.tr_terms USING fts5vocab(main, transcripts_fts, row)")
            terms = [r[0] for r in conn.execute("SELECT term FROM temp.tr_terms")]
        assert terms and all(re.fullmatch(r"\d+x\w+", t) for t in terms), terms
    finally:
        store.close()


def test_keyword_lane_prunes_the_commonest_term_of_a_big_scope_and_says_so(store: SQLiteStore) -> None:
    """Over ``keyword_postings_budget`` matches in a scope, the commonest query terms are left
    out (rarer ones stay) and the hits say how many; a small scope's search stays exact."""
    small = Scope(agent_wallet="agent", user_address="small")
    store.add_memories([_record(f"lake walk {k}", rid=f"l{k}") for k in range(40)]
                       + [_record("kayak on the lake", rid="kayak")]
                       + [_record(f"lake view {k}", rid=f"s{k}", scope=small) for k in range(3)]
                       + [_record("kayak on the lake", rid="small-kayak", scope=small)])
    store.keyword_postings_budget = 30  # "lake": 41 rows of the big scope, "kayak": 1
    hits = store.keyword_search(MemoryQuery(scope=SCOPE), "kayak lake", 10)
    assert isinstance(hits, KeywordHits) and hits.pruned_terms == 1
    assert [h.record.id for h in hits] == ["kayak"]  # only the rows of the rarer term were scored
    exact = store.keyword_search(MemoryQuery(scope=small), "kayak lake", 10)
    assert isinstance(exact, KeywordHits) and exact.pruned_terms == 0
    assert exact[0].record.id == "small-kayak" and len(exact) == 4
    store.keyword_postings_budget = 0  # never prune: every match of the big scope is scored
    unpruned = store.keyword_search(MemoryQuery(scope=SCOPE), "kayak lake", 10)
    assert isinstance(unpruned, KeywordHits) and unpruned.pruned_terms == 0
    assert unpruned[0].record.id == "kayak" and len(unpruned) == 10


def test_the_engine_reports_the_keyword_terms_the_store_pruned() -> None:
    store = SQLiteStore(":memory:", keyword_postings_budget=30)
    store.add_memories([_record(f"lake walk {k}", rid=f"l{k}") for k in range(40)] + [_record("kayak lake", rid="kayak")])
    with MemoryEngine(store=store, embedder=EMB, extractor=None) as engine:
        result = engine.pre_turn("kayak lake", SCOPE)
    pruned = {layer: lane.get("keyword_pruned_terms") for layer, lane in result.lanes.items()}
    assert pruned == {"graph": 1, "vectors": 1}, result.lanes


def test_keyword_postings_budget_must_be_a_count() -> None:
    for bad in (-1, 1.5, True, "10"):
        with pytest.raises(StoreError, match="keyword_postings_budget"):
            SQLiteStore(":memory:", keyword_postings_budget=bad)  # type: ignore[arg-type]


def test_lanes_serve_rows_read_before_from_the_row_cache_only_while_they_are_unchanged(store: SQLiteStore) -> None:
    """A row the lanes read once is not read whole again until it changes; what they return
    is always the row as stored now: an update, an access bump and a delete show at once, and
    a caller changing a returned record changes nothing the next search returns."""
    store.add_memories([_record(f"kayak trip number {k}", rid=f"r{k}") for k in range(3)])
    query = MemoryQuery(scope=SCOPE)
    vector = EMB.embed(["kayak trip"])[0]
    statements: list[str] = []
    with store._conn() as conn:
        conn.set_trace_callback(statements.append)

    def whole_reads() -> int:
        n = sum(1 for sql in statements if "NOT INDEXED" in sql and "SELECT rowid, rev" not in sql)
        statements.clear()
        return n

    try:
        first = {h.record.id: h.record for h in store.keyword_search(query, "kayak", 3)}
        assert sorted(first) == ["r0", "r1", "r2"] and whole_reads() == 1
        vector_hits, _ = store.vector_search(query, vector, EMB.model_id, 3)
        assert sorted(h.record.id for h in vector_hits) == ["r0", "r1", "r2"] and whole_reads() == 0  # cached
        first["r0"].metadata["topic"] = "changed by the caller"
        first["r0"].content = "changed by the caller"
        again = {h.record.id: h.record for h in store.keyword_search(query, "kayak", 3)}
        assert again["r0"].content == "kayak trip number 0" and "topic" not in again["r0"].metadata
        assert whole_reads() == 0
        store.bump_access(["r1"], 1234)
        bumped = {h.record.id: h.record for h in store.keyword_search(query, "kayak", 3)}
        assert (bumped["r1"].access_count, bumped["r1"].last_accessed_at) == (again["r1"].access_count + 1, 1234)
        assert whole_reads() == 0  # an access bump needs no new read of the row
        store.update_memory("r2", {"content": "kayak trip moved to Sunday"})
        updated = {h.record.id: h.record for h in store.keyword_search(query, "kayak", 3)}
        assert updated["r2"].content == "kayak trip moved to Sunday" and whole_reads() == 1
        store.delete_memory("r1")
        vector_hits, _ = store.vector_search(query, vector, EMB.model_id, 3)
        assert sorted(h.record.id for h in vector_hits) == ["r0", "r2"]
    finally:
        with store._conn() as conn:
            conn.set_trace_callback(None)


def test_the_read_by_event_date_searches_its_index_per_user_and_kind_of_date(store: SQLiteStore) -> None:
    """``memories_dated_between`` reads ranges of the (agent, user, eventDate) index (m012): one per
    user of the scope and kind of date, never a scan of the table."""
    low, high, coarse = "2023-06-12", "2023-06-13", ["2023", "2023-06"]
    arms, params = _sql.event_date_rowids("agent", "u", low, high, coarse)
    with store._conn() as conn:
        plan = [tuple(r)[3] for r in conn.execute(f"EXPLAIN QUERY PLAN SELECT id FROM memory WHERE rowid IN ({arms})",
                                                   params)]
    searches = [p for p in plan if "idx_memory_event_date" in p]
    assert len(searches) == 4 and not any(p.startswith("SCAN memory") for p in plan), plan
    assert all(p.startswith("SEARCH") and "(agent_wallet=? AND user_address=? AND <expr>" in p for p in searches)
    only_agent, _ = _sql.event_date_rowids("agent", None, low, high, [])
    assert only_agent.count("SELECT") == 1 and "user_address IS NULL" in only_agent
