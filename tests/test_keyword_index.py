"""The SQLite store's in-process keyword index (``keyword_index_min_matches``) gives exactly what
FTS5's ``bm25()`` gives: the same rows, in the same order, with the same scores, through
writes, updates, deletes, filters and several scopes; and it is really what serves the query."""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from manowar_memory import MemoryRecord, Scope, SQLiteStore, StoreError
from manowar_memory.stores import _fts, _keywords
from manowar_memory.stores._keywords import ScopeKeywordIndex
from manowar_memory.stores.base import KeywordHits, MemoryQuery

AGENT = "agent"
ALICE = Scope(agent_wallet=AGENT, user_address="alice")
BOB = Scope(agent_wallet=AGENT, user_address="bob")
WORDS = ("kayak lake trip morning coffee garden paint novel sister berlin lisbon job guitar run "
         "pottery dog cat bake bread sunday market camp hike river museum concert").split()
CLITIC_WORDS = ("don't", "user's", "she's", "we'll", "they're", "i've", "o'neill")


def _text(rng: random.Random, n: int) -> str:
    pool = WORDS + list(CLITIC_WORDS)
    return " ".join(rng.choice(pool) for _ in range(n)).capitalize() + "."


def _fill(store: SQLiteStore, rng: random.Random, n: int, start: int = 0,
          scopes: tuple[Scope, ...] = (ALICE, ALICE, BOB, Scope(agent_wallet=AGENT))) -> None:
    records = []
    for i in range(start, start + n):
        scope = rng.choice(scopes)
        records.append(MemoryRecord(
            id=f"m{i}", **MemoryRecord.scope_fields(scope), content=_text(rng, rng.randint(3, 14)),
            context=_text(rng, rng.randint(2, 6)) if rng.random() < 0.3 else None, source="knowledge",
            created_at=1000 + i, updated_at=1000 + i, metadata={"n": i % 5},
        ))
    store.add_memories(records)


def _queries(rng: random.Random, n: int) -> list[str]:
    pool = WORDS + list(CLITIC_WORDS)
    return [" ".join(rng.choice(pool) for _ in range(rng.randint(1, 5))) + "?" for _ in range(n)]


def _same(fts: SQLiteStore, indexed: SQLiteStore, query: MemoryQuery, texts: list[str], limit: int = 12) -> None:
    for text in texts:
        want = [(h.record.id, h.score) for h in fts.keyword_search(query, text, limit)]
        got = [(h.record.id, h.score) for h in indexed.keyword_search(query, text, limit)]
        assert [i for i, _ in got] == [i for i, _ in want], text
        assert np.allclose([s for _, s in got], [s for _, s in want], rtol=1e-12, atol=0), text


@pytest.fixture
def pair(tmp_path: Path) -> tuple[SQLiteStore, SQLiteStore]:
    """Two stores on one file: one always asks FTS5, one scores every scope in process."""
    path = tmp_path / "kw.db"
    fts = SQLiteStore(path, keyword_index_min_matches=0)
    indexed = SQLiteStore(path, keyword_index_min_matches=1)
    indexed.keyword_index_min_rows = 0  # every table counts as large
    indexed.keyword_index_in_background = False  # built inside the query that finds the scope large
    yield fts, indexed
    fts.close()
    indexed.close()


def test_the_in_process_index_ranks_and_scores_as_fts5_does(pair: tuple[SQLiteStore, SQLiteStore]) -> None:
    fts, indexed = pair
    rng = random.Random(7)
    _fill(fts, rng, 600)
    texts = _queries(rng, 60)
    for scope in (ALICE, BOB, Scope(agent_wallet=AGENT)):
        _same(fts, indexed, MemoryQuery(scope=scope), texts)
    assert len(indexed._keyword_indexes) == 3  # each scope read scored in process
    assert not fts._keyword_indexes


def test_the_index_follows_writes_updates_moves_and_deletes(pair: tuple[SQLiteStore, SQLiteStore]) -> None:
    fts, indexed = pair
    rng = random.Random(11)
    _fill(fts, rng, 300)
    texts = _queries(rng, 25)
    query = MemoryQuery(scope=ALICE)
    _same(fts, indexed, query, texts)  # builds the indexes
    _fill(indexed, rng, 80, start=300)  # written through either store, seen by both
    fts.update_memory("m3", {"content": "kayak kayak kayak on the lake", "context": "lake trip"})
    fts.update_memory("m4", {"context": None})
    for i in range(20, 60):
        fts.delete_memory(f"m{i}")
    _fill(fts, rng, 40, start=380)  # SQLite may reuse deleted rowids
    with sqlite3.connect(fts.path) as raw:  # a row moved to another user (as a store write would) leaves
        raw.create_function(_fts.TERMS_FUNCTION, 2, _fts.scoped_terms)  # its old scope's index
        raw.execute("UPDATE counters SET value = value + 1 WHERE name = 'memory_rev'")
        raw.execute("UPDATE memory SET user_address = 'bob', rev = (SELECT value FROM counters WHERE name = "
                    "'memory_rev') WHERE id = 'm5'")
    for scope in (ALICE, BOB):
        _same(fts, indexed, MemoryQuery(scope=scope), [*texts, "kayak lake trip"])


def test_rows_the_filter_rejects_are_skipped_past_the_pool(pair: tuple[SQLiteStore, SQLiteStore]) -> None:
    """A filter most matches fail sends the lane past its first candidates, to every match."""
    fts, indexed = pair
    rng = random.Random(5)
    _fill(fts, rng, 500)
    texts = _queries(rng, 20)
    _same(fts, indexed, MemoryQuery(scope=ALICE, filters={"n": 3}), texts, limit=30)
    _same(fts, indexed, MemoryQuery(scope=ALICE, sources=("nothing",)), texts)


def test_a_scope_is_scored_in_process_once_its_matches_reach_the_threshold(tmp_path: Path) -> None:
    """Under ``keyword_index_min_matches`` (100) FTS5 scores the scope; from there on the index does,
    and no statement calls ``bm25()`` for it any more."""
    store = SQLiteStore(tmp_path / "t.db", keyword_index_min_matches=100)
    store.keyword_index_in_background = False
    try:
        _fill(store, random.Random(3), 200, scopes=(ALICE,))
        assert store.keyword_index_min_rows > 200
        store.keyword_search(MemoryQuery(scope=ALICE), "kayak lake trip morning", 10)
        assert not store._keyword_indexes  # a small table is always scored by FTS5
        store.keyword_index_min_rows = 100
        statements: list[str] = []
        with store._conn() as conn:
            conn.set_trace_callback(statements.append)
        query = MemoryQuery(scope=ALICE)
        store.keyword_search(query, "o'neill", 10)  # a phrase the index does not hold: FTS5
        store.keyword_search(query, "kayak", 10)  # "kayak": under 100 of alice's rows
        assert not store._keyword_indexes and sum("bm25(" in s for s in statements) == 2
        statements.clear()
        hits = store.keyword_search(query, "kayak lake trip morning", 10)
        assert len(hits) == 10 and len(store._keyword_indexes) == 1
        store.keyword_search(query, "kayak", 10)
        assert not any("bm25(" in s for s in statements)
    finally:
        store.close()


def test_averages_and_bm25_match_the_full_text_table() -> None:
    conn = sqlite3.connect(":memory:", isolation_level=None)  # FTS5 writes its averages on commit
    conn.execute("CREATE VIRTUAL TABLE t USING fts5(a, b, content='', tokenize='ascii')")
    rows = [("x y z", "y"), ("x x", ""), ("y", "z z z"), ("q", "")]
    conn.executemany("INSERT INTO t(rowid, a, b) VALUES (?, ?, ?)", [(i + 1, a, b) for i, (a, b) in enumerate(rows)])
    n, tokens = _keywords.averages(conn.execute("SELECT block FROM t_data WHERE id = 1").fetchone()[0])
    assert (n, tokens) == (4, 11)
    want = dict(conn.execute("SELECT rowid, -bm25(t, 1.0, 0.5) FROM t WHERE t MATCH 'x'"))
    freq = np.array([1.0, 2.0])  # "x" in rows 1 and 2
    got = _keywords.bm25(freq, np.array([4.0, 2.0]), 2, n, tokens / n)
    assert got.tolist() == pytest.approx([want[1], want[2]], rel=1e-12)
    assert _keywords.averages(None) == (0, 0)


def test_the_index_compacts_dead_postings_and_keeps_its_answers() -> None:
    index = ScopeKeywordIndex(1)
    index.load((i, f"kayak lake {i}", None) for i in range(3000))
    for i in range(0, 3000, 2):
        index.remove(i)
    assert len(index) == 1500
    rowids, _ = index.matches([("kayak",)], 3000, 9000, 0.5)
    assert sorted(rowids.tolist()) == list(range(1, 3000, 2))
    index.replace([(7, "lake only", None)])
    rowids, _ = index.matches([("kayak",)], 3000, 9000, 0.5)
    assert 7 not in rowids.tolist() and len(rowids) == 1499


def test_keyword_index_min_matches_must_be_a_count() -> None:
    for bad in (-1, 1.5, True, "10"):
        with pytest.raises(StoreError, match="keyword_index_min_matches"):
            SQLiteStore(":memory:", keyword_index_min_matches=bad)  # type: ignore[arg-type]


def test_searches_beside_writes_in_other_threads_leave_the_index_exact(pair: tuple[SQLiteStore, SQLiteStore]) -> None:
    """Threads searching while another writes: afterwards the index still answers as FTS5 does
    (a posting read twice, or a row synced twice, would change the scores)."""
    import threading

    fts, indexed = pair
    rng = random.Random(13)
    _fill(fts, rng, 300)
    texts = _queries(rng, 15)
    query = MemoryQuery(scope=ALICE)
    _same(fts, indexed, query, texts)
    errors: list[BaseException] = []

    def search() -> None:
        try:
            for text in texts * 4:
                indexed.keyword_search(query, text, 12)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    workers = [threading.Thread(target=search) for _ in range(4)]
    for w in workers:
        w.start()
    for start in range(300, 500, 10):
        _fill(fts, random.Random(start), 10, start=start)
    for w in workers:
        w.join()
    assert not errors
    _same(fts, indexed, query, texts)


def test_a_file_store_builds_the_index_in_the_background_and_answers_meanwhile(tmp_path: Path) -> None:
    """The query that finds a scope large is answered by FTS5 while a thread builds the index;
    once :meth:`wait_for_keyword_indexes` returns, the index answers, with the same results."""
    path = tmp_path / "bg.db"
    store = SQLiteStore(path, keyword_index_min_matches=100)
    fts = SQLiteStore(path, keyword_index_min_matches=0)
    try:
        assert store.keyword_index_in_background
        store.keyword_index_min_rows = 100
        _fill(store, random.Random(17), 300, scopes=(ALICE,))
        query, text = MemoryQuery(scope=ALICE), "kayak lake trip morning"
        statements: list[str] = []
        with store._conn() as conn:
            conn.set_trace_callback(statements.append)
        first = [(h.record.id, h.score) for h in store.keyword_search(query, text, 10)]
        assert any("bm25(" in sql for sql in statements)  # FTS5 answered: the build did not hold the query
        assert first == [(h.record.id, h.score) for h in fts.keyword_search(query, text, 10)]
        assert store.wait_for_keyword_indexes(timeout=60)
        assert len(store._keyword_indexes) == 1 and not store._keyword_builds
        _fill(fts, random.Random(18), 20, start=300, scopes=(ALICE,))  # written after the build: synced
        statements.clear()
        _same(fts, store, query, [text, "garden paint", "don't run"])
        assert not any("bm25(" in sql for sql in statements)
    finally:
        store.close()
        fts.close()


def test_turning_the_index_off_brings_back_fts5_and_its_pruning(pair: tuple[SQLiteStore, SQLiteStore]) -> None:
    """With the index held but ``keyword_index_min_matches`` set to 0, the lane is FTS5 again,
    pruning budget included: a held index must not hide the terms' counts from it."""
    fts, indexed = pair
    _fill(fts, random.Random(21), 400, scopes=(ALICE,))
    query = MemoryQuery(scope=ALICE)
    _same(fts, indexed, query, ["kayak lake trip"])
    assert indexed._keyword_indexes
    indexed.keyword_index_min_matches, indexed.keyword_postings_budget = 0, 50
    hits = indexed.keyword_search(query, "kayak lake trip", 10)
    assert isinstance(hits, KeywordHits) and hits.pruned_terms > 0


def test_loading_in_batches_gives_the_index_one_load_gives() -> None:
    rng = random.Random(23)
    rows = [(i + 1, _text(rng, rng.randint(3, 12)), _text(rng, 3) if i % 4 == 0 else None) for i in range(500)]
    whole, batched = ScopeKeywordIndex(1), ScopeKeywordIndex(1)
    whole.load(rows)
    batched.load(rows[:170])
    batched.load(rows[170:])
    for text in _queries(rng, 20):
        phrases = _fts.query_phrases(text)
        if not ScopeKeywordIndex.holds(phrases):
            continue
        a, b = whole.matches(phrases, 500, 4000, 0.5), batched.matches(phrases, 500, 4000, 0.5)
        assert a[0].tolist() == b[0].tolist() and np.allclose(a[1], b[1], rtol=1e-12)


def test_a_count_past_the_postings_width_is_held_at_its_maximum() -> None:
    index = ScopeKeywordIndex(1)
    index.load([(1, "zebra " * 70_000, None), (2, "zebra lion", None)])
    rowids, scores = index.matches([("zebra",)], 2, 70_002, 0.5)
    lengths = np.array([70_000.0, 2.0])
    want = _keywords.bm25(np.array([65_535.0, 1.0]), lengths, 2, 2, 70_002 / 2)
    assert rowids.tolist() == [1, 2] and np.allclose(scores, want, rtol=1e-12)


def test_many_scopes_follow_writes_moves_and_deletes_across_them(pair: tuple[SQLiteStore, SQLiteStore]) -> None:
    """Forty users' indexes held at once: rows written, moved between users, deleted and their
    rowids reused leave every index answering as FTS5 does (each change goes to the index that
    holds the row, whichever of the forty that is)."""
    fts, indexed = pair
    rng = random.Random(29)
    users = tuple(Scope(agent_wallet=AGENT, user_address=f"user{i}") for i in range(40))
    _fill(fts, rng, 800, scopes=users)
    texts = _queries(rng, 6)
    for scope in users:
        _same(fts, indexed, MemoryQuery(scope=scope), texts)
    assert len(indexed._keyword_indexes) == 40
    for i in range(0, 800, 7):
        fts.delete_memory(f"m{i}")
    _fill(fts, rng, 60, start=800, scopes=users)  # may reuse the deleted rowids
    with sqlite3.connect(fts.path) as raw:  # rows moved from one user to another
        raw.create_function(_fts.TERMS_FUNCTION, 2, _fts.scoped_terms)
        raw.execute("UPDATE counters SET value = value + 1 WHERE name = 'memory_rev'")
        raw.execute("UPDATE memory SET user_address = 'user0', rev = (SELECT value FROM counters WHERE name = "
                    "'memory_rev') WHERE id IN ('m1', 'm2', 'm3', 'm801')")
    for scope in users:
        _same(fts, indexed, MemoryQuery(scope=scope), [*texts, "kayak lake"])


def test_past_its_row_bound_the_index_searched_longest_ago_is_dropped(pair: tuple[SQLiteStore, SQLiteStore]) -> None:
    """``keyword_index_max_rows``: the indexes hold at most that many rows in all (one index is
    always kept, whatever its size); a dropped scope is scored by FTS5 until it is built again,
    with the same answers throughout, writes included."""
    fts, indexed = pair
    rng = random.Random(31)
    users = tuple(Scope(agent_wallet=AGENT, user_address=f"user{i}") for i in range(6))
    _fill(fts, rng, 600, scopes=users)  # about 100 rows a user
    indexed.keyword_index_max_rows = 250
    texts = _queries(rng, 5)
    for scope in users:
        _same(fts, indexed, MemoryQuery(scope=scope), texts)
        held = indexed._keyword_indexes
        assert held.rows <= 250 and len(held) >= 1
    assert len(indexed._keyword_indexes) < 6
    _fill(fts, rng, 60, start=600, scopes=users)
    for scope in reversed(users):  # the dropped ones come back, the others are synced
        _same(fts, indexed, MemoryQuery(scope=scope), [*texts, "garden paint"])
        assert indexed._keyword_indexes.rows <= 250
    indexed.keyword_index_max_rows = 10  # under one scope: the index built last is still kept
    for scope in users:
        _same(fts, indexed, MemoryQuery(scope=scope), texts)
    assert len(indexed._keyword_indexes) == 1


def test_a_table_of_a_few_thousand_rows_is_scored_in_process_by_default(tmp_path: Path) -> None:
    """The defaults score a scope of a thousand rows, whose query words a few hundred rows hold,
    in process (faster than FTS5 from a few hundred rows up), with FTS5's answers; a small table
    stays on FTS5 without reading its terms' counts."""
    store = SQLiteStore(tmp_path / "d.db")
    fts = SQLiteStore(tmp_path / "d.db", keyword_index_min_matches=0)
    store.keyword_index_in_background = False
    try:
        assert 0 < store.keyword_index_min_rows <= 1_000 and 0 < store.keyword_index_min_matches <= 200
        _fill(store, random.Random(37), 1_200, scopes=(ALICE,))
        _same(fts, store, MemoryQuery(scope=ALICE), ["kayak lake trip morning", "garden"])
        assert len(store._keyword_indexes) == 1
    finally:
        store.close()
        fts.close()
