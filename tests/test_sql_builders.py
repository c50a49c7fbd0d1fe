"""The SQLite store's pure statement builders (stores/_sql.py): exact text and parameters, no
connection. The conformance suite runs the same statements against a real database."""

from __future__ import annotations

import json
import sqlite3

import numpy as np
import pytest

from manowar_memory.stores import _sql

NO_BLOB = _sql.memory_columns(with_embedding=False)


def test_memory_columns_without_the_embedding_blob() -> None:
    assert "embedding," in _sql.MEMORY_COLUMNS and "NULL AS embedding" not in _sql.MEMORY_COLUMNS
    assert _sql.memory_columns() == _sql.MEMORY_COLUMNS
    cols = [c.strip() for c in NO_BLOB.split(",")]
    assert "NULL AS embedding" in cols and "embedding" not in cols and "embedding_model" in cols
    assert len(cols) == len(_sql.MEMORY_COLUMNS.split(","))


def test_memory_update_sets_metadata_and_its_derived_columns() -> None:
    meta = {"status": "superseded", "retention": "pinned", "factHash": "h1", "note": "ü"}
    sets, params = _sql.memory_update({"decay_score": 0.5, "metadata": meta})
    assert sets == ["decay_score = ?", "metadata = ?", "status = ?", "retention = ?", "fact_hash = ?"]
    assert params == [0.5, json.dumps(meta, ensure_ascii=False), "superseded", "pinned", "h1"]


def test_memory_update_embedding_blob_and_its_removal() -> None:
    sets, params = _sql.memory_update({"embedding": [1.0, 0.5]})
    assert sets == ["embedding = ?"]
    assert np.frombuffer(params[0], dtype=np.float32).tolist() == [1.0, 0.5]
    sets, params = _sql.memory_update({"embedding": None})
    assert sets == ["embedding = ?", "embedding_model = NULL"] and params == [None]


def test_memory_update_of_nothing_sets_nothing() -> None:
    assert _sql.memory_update({}) == ([], [])


def test_memory_page_after_a_rowid_with_and_without_an_agent() -> None:
    assert _sql.memory_page(None, 0, 10) == (
        f"SELECT {NO_BLOB} FROM memory WHERE rowid > ? ORDER BY rowid LIMIT ?", [0, 10])
    assert _sql.memory_page("a1", 42, 5) == (
        f"SELECT {NO_BLOB} FROM memory WHERE rowid > ? AND agent_wallet = ? ORDER BY rowid LIMIT ?", [42, "a1", 5])


def test_memory_page_of_some_users_of_an_agent() -> None:
    users = "(user_address IN (?) OR user_address IS NULL)"
    assert _sql.memory_page("a1", 0, 5, ["u1", None]) == (
        f"SELECT {NO_BLOB} FROM memory WHERE rowid > ? AND agent_wallet = ? AND {users} ORDER BY rowid LIMIT ?",
        [0, "a1", "u1", 5])
    assert _sql.memory_page("a1", 0, 5, [])[0].endswith("AND (0) ORDER BY rowid LIMIT ?")


def test_memory_page_in_a_created_range_with_embeddings() -> None:
    assert _sql.memory_page("a1", 7, 3, created_from=5, created_to=9, with_embedding=True) == (
        (f"SELECT {_sql.MEMORY_COLUMNS} FROM memory WHERE rowid > ? AND agent_wallet = ? AND created_at >= ? "
         "AND created_at <= ? ORDER BY rowid LIMIT ?"), [7, "a1", 5, 9, 3])


def test_transcripts_created_between_of_an_agent_and_some_users() -> None:
    base = "SELECT doc FROM transcripts WHERE agent_wallet = ? AND created_at BETWEEN ? AND ?"
    assert _sql.transcripts_created_between("a1", 1, 2) == (base + " ORDER BY created_at", ["a1", 1, 2])
    assert _sql.transcripts_created_between("a1", 1, 2, ["u1", None]) == (
        base + " AND (user_address IN (?) OR user_address IS NULL) ORDER BY created_at", ["a1", 1, 2, "u1"])


def test_memory_user_counts_groups_every_status() -> None:
    assert _sql.memory_user_counts("a1") == (
        "SELECT user_address, COUNT(*) FROM memory WHERE agent_wallet = ? GROUP BY user_address", ["a1"])


def test_memory_rows_of_named_users_and_the_user_less_rows() -> None:
    head = f"SELECT {NO_BLOB} FROM memory WHERE agent_wallet = ? AND "
    assert _sql.memory_rows_of_users("a1", ["u1", None, "u2"]) == (
        head + "(user_address IN (?,?) OR user_address IS NULL) ORDER BY rowid", ["a1", "u1", "u2"])
    assert _sql.memory_rows_of_users("a1", [None]) == (head + "(user_address IS NULL) ORDER BY rowid", ["a1"])
    assert _sql.memory_rows_of_users("a1", ["u1"]) == (head + "(user_address IN (?)) ORDER BY rowid", ["a1", "u1"])
    assert _sql.memory_rows_of_users("a1", []) == (head + "(0) ORDER BY rowid", ["a1"])


def test_cleanup_counts_and_scopes() -> None:
    assert _sql.count_transcripts_older_than(7) == ("SELECT COUNT(*) FROM transcripts WHERE created_at < ?", [7])
    assert _sql.transcript_scopes_older_than(7) == (
        "SELECT DISTINCT agent_wallet, user_address, mode, hai_id FROM transcripts WHERE created_at < ?", [7])
    assert _sql.count_stale_sessions(9, 7) == (
        "SELECT COUNT(*) FROM sessions WHERE expires_at <= ? OR last_accessed_at < ?", [9, 7])
    scopes = "SELECT DISTINCT agent_wallet, user_address, mode, hai_id FROM sessions "
    assert _sql.stale_session_scopes(9, 7) == (scopes + "WHERE expires_at <= ? OR last_accessed_at < ?", [9, 7])


def test_every_read_statement_parses() -> None:
    """The statements are valid SQLite for the store's schema (checked with EXPLAIN, no rows)."""
    from manowar_memory.stores import _fts
    from manowar_memory.stores.sqlite.migrations import MIGRATIONS, _split_script

    conn = sqlite3.connect(":memory:")
    conn.create_function(_fts.TERMS_FUNCTION, 2, _fts.scoped_terms, deterministic=True)  # the triggers call it
    for _, migrate in MIGRATIONS:
        for statement in _split_script(migrate):
            conn.execute(statement)
    for sql, params in (_sql.memory_page("a", 0, 1, ["u", None], created_from=1, created_to=2, with_embedding=True),
                        _sql.transcripts_created_between("a", 1, 2, ["u", None]), _sql.memory_user_counts("a"),
                        _sql.memory_rows_of_users("a", ["u", None]), _sql.count_transcripts_older_than(1),
                        _sql.transcript_scopes_older_than(1), _sql.count_stale_sessions(1, 1),
                        _sql.stale_session_scopes(1, 1)):
        conn.execute("EXPLAIN " + sql, params)
    sets, params = _sql.memory_update({"metadata": {}, "embedding": None, "decay_score": 1.0})
    conn.execute(f"EXPLAIN UPDATE memory SET {', '.join(sets)} WHERE id = ?", [*params, "x"])
    conn.close()


def test_keyword_rowids_reads_only_the_scopes_rowid_ranges() -> None:
    sql, params = _sql.keyword_rowids([(3, '"3xkayak"'), (7, '"7xkayak"')], "m.agent_wallet = ?", ["a1"], 48, 0.5)
    arm = ("SELECT rowid AS fts_rowid, -bm25(memory_fts, 1.0, 0.5) AS score FROM memory_fts "
           "WHERE memory_fts MATCH ? AND rowid BETWEEN ? AND ?")
    assert sql.startswith(f"SELECT m.rowid, f.score FROM ({arm} UNION ALL {arm}) f JOIN memory m ")
    assert "embedding" not in sql and "content" not in sql
    assert sql.endswith("WHERE m.agent_wallet = ? ORDER BY f.score DESC, m.rowid LIMIT ?")
    span = 1 << _sql.FTS_ROWID_SHIFT
    assert params == ['"3xkayak"', 3 * span, 4 * span - 1, '"7xkayak"', 7 * span, 8 * span - 1, "a1", 48]


def test_keyword_pool_reads_only_the_index_and_row_revisions_read_by_rowid() -> None:
    sql, params = _sql.keyword_pool([(3, '"3xkayak"')], 192, 0.5)
    assert "JOIN" not in sql and "memory m" not in sql
    assert sql.endswith("ORDER BY f.score DESC, memory_rowid LIMIT ?")
    span = 1 << _sql.FTS_ROWID_SHIFT
    assert params == ['"3xkayak"', 3 * span, 4 * span - 1, 192]
    sql, params = _sql.row_revisions([5, 9], "agent_wallet = ?", ["a1"])
    assert sql == ("SELECT rowid, rev, access_count, last_accessed_at FROM memory NOT INDEXED "
                   "WHERE rowid IN (?,?) AND (agent_wallet = ?)")
    assert params == [5, 9, "a1"]
    unfiltered, unfiltered_params = _sql.row_revisions([5, 9])
    assert unfiltered == sql.split(" AND (")[0] and unfiltered_params == [5, 9]
    rows_sql, rows_params = _sql.rows_by_rowid([5, 9])
    assert rows_sql == f"SELECT {NO_BLOB}, rev FROM memory NOT INDEXED WHERE rowid IN (?,?)"
    assert "NULL AS embedding" in rows_sql  # the rows come back whole but for their vectors
    assert rows_params == [5, 9]
    filtered_sql, filtered_params = _sql.rows_by_rowid([5, 9], "agent_wallet = ?", ["a1"])
    assert filtered_sql == rows_sql + " AND (agent_wallet = ?)" and filtered_params == [5, 9, "a1"]
    conn = sqlite3.connect(":memory:")
    columns = [c.strip() for c in _sql.MEMORY_COLUMNS.split(",") if c.strip() != "rowid"]
    conn.execute(f"CREATE TABLE memory ({', '.join(columns)}, rev)")
    conn.execute("CREATE INDEX idx_agent ON memory (agent_wallet)")
    for statement, values in ((sql, params), (rows_sql, rows_params), (filtered_sql, filtered_params)):
        plan = [r[3] for r in conn.execute("EXPLAIN QUERY PLAN " + statement, values)]
        assert plan == ["SEARCH memory USING INTEGER PRIMARY KEY (rowid=?)"], plan  # not the whole agent by index
    conn.close()


def test_fts_terms_calls_the_terms_function_with_the_rows_scope_number() -> None:
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE fts_scopes (id INTEGER PRIMARY KEY, key TEXT NOT NULL UNIQUE)")
    conn.execute("INSERT INTO fts_scopes(id, key) VALUES (5, ?)", (_sql.fts_scope_key("agent", "u1"),))
    conn.create_function("manowar_fts_terms", 2, lambda sid, text: f"{sid}|{text}")
    row = conn.execute(f"SELECT {_sql.fts_terms('r', 'content')}, {_sql.fts_rowid('r')} FROM "
                       "(SELECT 'agent' AS agent_wallet, 'u1' AS user_address, 'hi' AS content, 9 AS rowid) r").fetchone()
    assert row == ("5|hi", (5 << _sql.FTS_ROWID_SHIFT) | 9)
    conn.close()


def test_fts_scope_key_matches_its_sql_twin() -> None:
    conn = sqlite3.connect(":memory:")
    for agent, user in [("agent", None), ("agent", "u1"), ("ägent ✓", "ü"), ("a", "")]:
        row = conn.execute(f"SELECT {_sql.fts_scope_key_sql('r')} FROM (SELECT ? AS agent_wallet, ? AS user_address) r",
                           (agent, user)).fetchone()
        assert row[0] == _sql.fts_scope_key(agent, user)
    assert _sql.fts_scope_key("a", None) != _sql.fts_scope_key("a", "")


def test_fts_scope_insert_keeps_a_scopes_number_under_any_outer_conflict_clause() -> None:
    """A trigger's ``INSERT OR IGNORE`` takes the firing statement's conflict clause: under an
    upsert it fails, under ``INSERT OR REPLACE`` it renumbers the scope. The builder's statement
    adds a new scope once and never touches a known one."""
    conn = sqlite3.connect(":memory:")
    conn.executescript(f"""
        CREATE TABLE fts_scopes (id INTEGER PRIMARY KEY, key TEXT NOT NULL UNIQUE);
        CREATE TABLE t (k TEXT PRIMARY KEY, agent_wallet TEXT NOT NULL, user_address TEXT, n INTEGER);
        CREATE TRIGGER t_ai AFTER INSERT ON t BEGIN {_sql.fts_scope_insert("new")}; END;
        CREATE TRIGGER t_au AFTER UPDATE ON t BEGIN {_sql.fts_scope_insert("new")}; END;
    """)
    conn.execute("INSERT INTO t VALUES ('a', 'agent', 'u1', 0)")
    conn.execute("INSERT INTO t VALUES ('b', 'agent', 'u2', 0)")
    first = conn.execute("SELECT id, key FROM fts_scopes ORDER BY id").fetchall()
    conn.execute("INSERT OR REPLACE INTO t VALUES ('a', 'agent', 'u1', 1)")
    conn.execute("INSERT INTO t VALUES ('b', 'agent', 'u2', 2) ON CONFLICT (k) DO UPDATE SET n = excluded.n")
    conn.execute("INSERT INTO t VALUES ('c', 'agent', 'u1', 0) ON CONFLICT (k) DO UPDATE SET n = excluded.n")
    assert conn.execute("SELECT id, key FROM fts_scopes ORDER BY id").fetchall() == first
    assert [k for _, k in first] == [_sql.fts_scope_key("agent", "u1"), _sql.fts_scope_key("agent", "u2")]
    conn.close()


def test_fts_sync_triggers_index_every_column_under_the_given_rowid() -> None:
    script = _sql.fts_sync_triggers("notes", "notes_fts", ("title", "body"), lambda row: f"{row}.rowid + 1")
    assert "CREATE TRIGGER notes_ai AFTER INSERT ON notes" in script
    assert "AFTER UPDATE OF title, body, agent_wallet, user_address ON notes" in script
    assert script.count(f"INSERT INTO notes_fts(rowid, title, body) VALUES (new.rowid + 1, "
                        f"{_sql.fts_terms('new', 'title')}, {_sql.fts_terms('new', 'body')});") == 2
    assert script.count("VALUES ('delete', old.rowid + 1, ") == 2
    assert script.count(_sql.fts_scope_insert("new")) == 2  # insert and move number a new scope


# ----------------------------------------------------------------------------- expiry (#30)
NOW = 1_800_000_000_000


def test_inactive_list_names_every_inactive_status_quoted() -> None:
    assert _sql.inactive_list() == "('deleted', 'superseded', 'expired', 'forgotten')"
    assert _sql.inactive_list(["it's"]) == "('it''s')"


def test_not_expired_clause_text_and_parameter() -> None:
    clause, params = _sql.not_expired(NOW)
    assert params == [NOW]
    assert clause == ("(COALESCE(json_type(metadata, '$.expiresAt'), '') NOT IN ('integer', 'real') "
                      "OR json_extract(metadata, '$.expiresAt') > ?)")


@pytest.mark.parametrize(("metadata", "visible"), [
    ({}, True),                                    # no expiry: never expires
    ({"expiresAt": None}, True),                   # an explicit null: never expires
    ({"expiresAt": NOW + 1}, True),                # expires after now
    ({"expiresAt": NOW}, False),                   # expires exactly now: gone
    ({"expiresAt": NOW - 1}, False),               # expired
    ({"expiresAt": float(NOW - 0.5)}, False),      # a real number counts too
    ({"expiresAt": "2020-01-01"}, True),           # not a number: ignored, as MongoDB's $not/$lte does
    ({"other": 1}, True),
])
def test_not_expired_keeps_rows_by_their_expiry(metadata: dict, visible: bool) -> None:
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE memory (metadata TEXT)")
    conn.execute("INSERT INTO memory VALUES (?)", (json.dumps(metadata),))
    clause, params = _sql.not_expired(NOW)
    assert bool(conn.execute(f"SELECT COUNT(*) FROM memory WHERE {clause}", params).fetchone()[0]) is visible
    expiry = conn.execute(f"SELECT {_sql.expiry_column()} FROM memory").fetchone()[0]
    numeric = isinstance(metadata.get("expiresAt"), (int, float))
    assert (expiry is not None) is numeric and (expiry is None or expiry == metadata["expiresAt"])


# ---------------------------------------------------------------- caller filters


def _meta(path: str) -> str:
    return f"json_extract(metadata, '$.\"{path.split('.', 1)[1]}\"')" if path.startswith("metadata.") else path


def test_filter_where_compiles_operators_and_groups() -> None:
    from manowar_memory.filters import normalize_filters

    flt = normalize_filters({"topic": "x", "year": {"$gte": 2020, "$lt": 2024}, "source": {"$ne": "fact"},
                             "$or": [{"lang": ["en", "pt"]}, {"tag": {"$nin": ["a"]}}]})
    sql, params = _sql.filter_where(flt, lambda path: path.rsplit(".", 1)[-1])  # plain columns
    assert sql == (
        "(topic = ?) AND ((year >= ? AND typeof(year) IN ('integer', 'real')) AND "
        "(year < ? AND typeof(year) IN ('integer', 'real'))) AND (NOT COALESCE(source = ?, 0)) AND "
        "(((lang = ? OR lang = ?)) OR ((NOT COALESCE((tag = ?), 0))))"
    )
    assert params == ["x", 2020, 2024, "fact", "en", "pt", "a"]
    assert _sql.filter_where({}, _meta) == ("1", [])


def test_filter_where_matches_the_in_process_semantics() -> None:
    """Run on a real table: every filter selects exactly the rows matches_filters selects."""
    from manowar_memory.filters import matches_filters, normalize_filters

    rows = [{"n": 1}, {"n": 2.5}, {"n": "2"}, {"n": True}, {"n": None}, {}, {"n": "b"}, {"n": "a"}]
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE t (id INTEGER, metadata TEXT)")
    conn.executemany("INSERT INTO t VALUES (?, ?)", [(i, json.dumps(r)) for i, r in enumerate(rows)])
    for flt in ({"n": 1}, {"n": True}, {"n": None}, {"n": {"$ne": None}}, {"n": {"$ne": 1}}, {"n": {"$gt": 1}},
                {"n": {"$lte": 2.5}}, {"n": {"$gte": "a"}}, {"n": {"$lt": "b"}}, {"n": {"$in": [1, "2", None]}},
                {"n": {"$nin": [1, "2"]}}, {"$or": [{"n": {"$gt": 2}}, {"n": "a"}]},
                {"$and": [{"n": {"$gt": 0}}, {"n": {"$lt": 2}}]}):
        norm = normalize_filters(flt)
        sql, params = _sql.filter_where(norm, _meta)
        got = [r[0] for r in conn.execute(f"SELECT id FROM t WHERE {sql} ORDER BY id", params)]
        want = [i for i, r in enumerate(rows) if matches_filters({"metadata": r}, norm)]
        assert got == want, flt


def test_term_doc_counts_reads_the_vocabulary_table_by_term() -> None:
    sql, params = _sql.term_doc_counts(["3xkayak", "3xlake"])
    assert sql == f"SELECT term, doc FROM {_sql.FTS_VOCAB} WHERE term IN (?,?)"
    assert params == ["3xkayak", "3xlake"]
    conn = sqlite3.connect(":memory:")
    conn.execute(_sql.fts_vocab_create())  # before the index exists, as on a new database's first connection
    conn.execute("CREATE VIRTUAL TABLE memory_fts USING fts5(content, context, content='')")
    conn.executemany("INSERT INTO memory_fts(rowid, content, context) VALUES (?, ?, '')",
                     [(1, "3xkayak 3xkayak 3xlake"), (2, "3xkayak"), (3, "4xlake")])
    assert dict(conn.execute(sql, params).fetchall()) == {"3xkayak": 2, "3xlake": 1}
    conn.close()
