"""The SQLite store's schema migrations: named, ordered, recorded in ``_manowar_migrations``."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

from ..._util import now_ms
from .. import _sql

__all__ = ["MIGRATIONS"]


def _m001_initial(conn: sqlite3.Connection) -> None:
    conn.executescript(
        """
        CREATE TABLE counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
        INSERT INTO counters VALUES ('memory_rev', 0);
        CREATE TABLE memory (
            rowid INTEGER PRIMARY KEY,
            id TEXT NOT NULL UNIQUE,
            agent_wallet TEXT NOT NULL, user_address TEXT, thread_id TEXT, mode TEXT, hai_id TEXT,
            content TEXT NOT NULL, source TEXT NOT NULL, status TEXT, retention TEXT, fact_hash TEXT,
            decay_score REAL NOT NULL DEFAULT 1, access_count INTEGER NOT NULL DEFAULT 0,
            created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL, last_accessed_at INTEGER NOT NULL,
            metadata TEXT NOT NULL DEFAULT '{}',
            embedding BLOB, embedding_model TEXT, rev INTEGER NOT NULL
        );
        CREATE INDEX idx_memory_scope ON memory (agent_wallet, user_address, created_at DESC);
        CREATE INDEX idx_memory_fact ON memory (agent_wallet, fact_hash);
        CREATE INDEX idx_memory_rev ON memory (rev);
        CREATE INDEX idx_memory_created ON memory (created_at);
        CREATE TABLE memory_tombstones (row_id INTEGER NOT NULL, rev INTEGER NOT NULL);
        CREATE INDEX idx_tombstones_rev ON memory_tombstones (rev);
        CREATE VIRTUAL TABLE memory_fts USING fts5(
            content, content='memory', content_rowid='rowid', tokenize='porter unicode61 remove_diacritics 2'
        );
        CREATE TRIGGER memory_ai AFTER INSERT ON memory BEGIN
            INSERT INTO memory_fts(rowid, content) VALUES (new.rowid, new.content);
        END;
        CREATE TRIGGER memory_ad AFTER DELETE ON memory BEGIN
            INSERT INTO memory_fts(memory_fts, rowid, content) VALUES ('delete', old.rowid, old.content);
        END;
        CREATE TRIGGER memory_au AFTER UPDATE OF content ON memory BEGIN
            INSERT INTO memory_fts(memory_fts, rowid, content) VALUES ('delete', old.rowid, old.content);
            INSERT INTO memory_fts(rowid, content) VALUES (new.rowid, new.content);
        END;

        CREATE TABLE sessions (
            session_id TEXT NOT NULL, agent_wallet TEXT NOT NULL, user_address TEXT, thread_id TEXT,
            mode TEXT, hai_id TEXT, doc TEXT NOT NULL, expires_at INTEGER NOT NULL,
            last_accessed_at INTEGER NOT NULL, PRIMARY KEY (agent_wallet, session_id)
        );
        CREATE INDEX idx_sessions_expiry ON sessions (expires_at);

        CREATE TABLE transcripts (
            rowid INTEGER PRIMARY KEY, session_id TEXT NOT NULL, agent_wallet TEXT NOT NULL,
            user_address TEXT, thread_id TEXT, mode TEXT, hai_id TEXT, doc TEXT NOT NULL,
            search_text TEXT NOT NULL, created_at INTEGER NOT NULL, UNIQUE (agent_wallet, session_id)
        );
        CREATE INDEX idx_transcripts_scope ON transcripts (agent_wallet, created_at DESC);
        CREATE VIRTUAL TABLE transcripts_fts USING fts5(
            search_text, content='transcripts', content_rowid='rowid', tokenize='porter unicode61 remove_diacritics 2'
        );
        CREATE TRIGGER transcripts_ai AFTER INSERT ON transcripts BEGIN
            INSERT INTO transcripts_fts(rowid, search_text) VALUES (new.rowid, new.search_text);
        END;
        CREATE TRIGGER transcripts_ad AFTER DELETE ON transcripts BEGIN
            INSERT INTO transcripts_fts(transcripts_fts, rowid, search_text) VALUES ('delete', old.rowid, old.search_text);
        END;
        CREATE TRIGGER transcripts_au AFTER UPDATE OF search_text ON transcripts BEGIN
            INSERT INTO transcripts_fts(transcripts_fts, rowid, search_text) VALUES ('delete', old.rowid, old.search_text);
            INSERT INTO transcripts_fts(rowid, search_text) VALUES (new.rowid, new.search_text);
        END;

        CREATE TABLE patterns (
            pattern_id TEXT PRIMARY KEY, agent_wallet TEXT NOT NULL, user_address TEXT, thread_id TEXT,
            mode TEXT, hai_id TEXT, doc TEXT NOT NULL, success_rate REAL NOT NULL, created_at INTEGER NOT NULL
        );
        CREATE INDEX idx_patterns_agent ON patterns (agent_wallet, success_rate DESC);
        CREATE TABLE archives (
            archive_id TEXT PRIMARY KEY, agent_wallet TEXT NOT NULL, user_address TEXT, thread_id TEXT,
            mode TEXT, hai_id TEXT, doc TEXT NOT NULL, created_at INTEGER NOT NULL
        );
        CREATE INDEX idx_archives_agent ON archives (agent_wallet, created_at DESC);
        CREATE TABLE skills (skill_id TEXT PRIMARY KEY, doc TEXT NOT NULL, category TEXT, created_at INTEGER NOT NULL);
        CREATE TABLE jobs (
            job_id TEXT PRIMARY KEY, type TEXT NOT NULL, status TEXT NOT NULL, agent_wallet TEXT,
            doc TEXT NOT NULL, created_at INTEGER NOT NULL
        );
        CREATE INDEX idx_jobs_agent ON jobs (agent_wallet, created_at DESC);
        """
    )


_INACTIVE_SQL = _sql.inactive_list()


_ACTIVE_FACT_WHERE = (
    f"source = 'fact' AND fact_hash IS NOT NULL AND (status IS NULL OR status NOT IN {_INACTIVE_SQL})"
)


def _m002_unique_active_fact(conn: sqlite3.Connection) -> None:
    """At most one active fact per (agent, factHash), enforced by a partial unique index.

    Databases written before this had a check-then-insert race, so they may hold duplicate
    active facts. None is deleted: in each group the newest row (createdAt, then updatedAt,
    then insertion order; the row ``find_fact_by_hash`` already returned) stays active and the
    others are marked superseded the way the consolidate job does (``supersededAt``,
    ``supersededBy``, plus ``supersededReason``), so their content, counts and history stay
    readable with ``active_only=False``. The revision bump makes open vector indexes refresh.
    """
    now = now_ms()
    conn.execute("UPDATE counters SET value = value + 1 WHERE name = 'memory_rev'")
    conn.execute(
        f"""WITH ranked AS (
            SELECT rowid AS rid, FIRST_VALUE(id) OVER w AS keeper, ROW_NUMBER() OVER w AS rn FROM memory
            WHERE {_ACTIVE_FACT_WHERE}
            WINDOW w AS (PARTITION BY agent_wallet, fact_hash ORDER BY created_at DESC, updated_at DESC, rowid DESC)
        )
        UPDATE memory SET status = 'superseded', updated_at = {now},
            metadata = json_set(metadata, '$.status', 'superseded', '$.supersededAt', {now},
                                '$.supersededBy', ranked.keeper, '$.supersededReason', 'duplicate active fact'),
            rev = (SELECT value FROM counters WHERE name = 'memory_rev')
        FROM ranked WHERE memory.rowid = ranked.rid AND ranked.rn > 1"""
    )
    conn.execute(f"CREATE UNIQUE INDEX idx_memory_active_fact ON memory (agent_wallet, fact_hash) WHERE {_ACTIVE_FACT_WHERE}")


def _m003_memory_context(conn: sqlite3.Connection) -> None:
    """A ``context`` column on memory rows (found by, never shown), indexed by FTS5 as a second
    column so the keyword lane can weigh it below the content (``bm25(memory_fts, 1, w)``).
    The FTS table is rebuilt from the memory table; no row changes."""
    conn.executescript(
        """
        ALTER TABLE memory ADD COLUMN context TEXT;
        DROP TRIGGER IF EXISTS memory_ai;
        DROP TRIGGER IF EXISTS memory_ad;
        DROP TRIGGER IF EXISTS memory_au;
        DROP TABLE IF EXISTS memory_fts;
        CREATE VIRTUAL TABLE memory_fts USING fts5(
            content, context, content='memory', content_rowid='rowid',
            tokenize='porter unicode61 remove_diacritics 2'
        );
        INSERT INTO memory_fts(memory_fts) VALUES ('rebuild');
        CREATE TRIGGER memory_ai AFTER INSERT ON memory BEGIN
            INSERT INTO memory_fts(rowid, content, context) VALUES (new.rowid, new.content, new.context);
        END;
        CREATE TRIGGER memory_ad AFTER DELETE ON memory BEGIN
            INSERT INTO memory_fts(memory_fts, rowid, content, context)
            VALUES ('delete', old.rowid, old.content, old.context);
        END;
        CREATE TRIGGER memory_au AFTER UPDATE OF content, context ON memory BEGIN
            INSERT INTO memory_fts(memory_fts, rowid, content, context)
            VALUES ('delete', old.rowid, old.content, old.context);
            INSERT INTO memory_fts(rowid, content, context) VALUES (new.rowid, new.content, new.context);
        END;
        """
    )


def _m004_maintenance_schedules(conn: sqlite3.Connection) -> None:
    """The inline maintenance schedules (manowar_memory.jobs.schedules): one JSON doc per
    schedule, ``rev`` for compare-and-set."""
    conn.executescript(
        """
        CREATE TABLE schedules (
            schedule_id TEXT PRIMARY KEY, doc TEXT NOT NULL, rev INTEGER NOT NULL, updated_at INTEGER NOT NULL
        );
        """
    )


def _m005_cache_fence(conn: sqlite3.Connection) -> None:
    """Cache fences: a counter per key, bumped when a cache invalidation could not be delivered
    (see :mod:`manowar_memory.cache.namespace`)."""
    conn.execute("CREATE TABLE cache_fence (key TEXT PRIMARY KEY, epoch INTEGER NOT NULL)")


def _m006_fts_scope_ranges(conn: sqlite3.Connection) -> None:
    """The memory FTS5 table becomes contentless, with each row under a rowid in its scope's
    range (:func:`_sql.fts_rowid`; scopes numbered in ``fts_scopes``), so the keyword lane reads
    only the asking scope's rows however many other scopes the store holds. Same terms, same
    token counts: BM25 scores do not change. The index is rebuilt from the memory table."""
    new_key = _sql.fts_scope_key_sql("new")
    new_id, old_id = _sql.fts_rowid("new"), _sql.fts_rowid("old")
    conn.executescript(
        f"""
        CREATE TABLE fts_scopes (id INTEGER PRIMARY KEY, key TEXT NOT NULL UNIQUE);
        INSERT INTO fts_scopes(key) SELECT DISTINCT {_sql.fts_scope_key_sql("m")} FROM memory m ORDER BY 1;
        DROP TRIGGER IF EXISTS memory_ai;
        DROP TRIGGER IF EXISTS memory_ad;
        DROP TRIGGER IF EXISTS memory_au;
        DROP TABLE IF EXISTS memory_fts;
        CREATE VIRTUAL TABLE memory_fts USING fts5(
            content, context, content='', tokenize='porter unicode61 remove_diacritics 2'
        );
        INSERT INTO memory_fts(rowid, content, context) SELECT {_sql.fts_rowid("m")}, content, context FROM memory m;
        CREATE TRIGGER memory_ai AFTER INSERT ON memory BEGIN
            INSERT OR IGNORE INTO fts_scopes(key) VALUES ({new_key});
            INSERT INTO memory_fts(rowid, content, context) VALUES ({new_id}, new.content, new.context);
        END;
        CREATE TRIGGER memory_ad AFTER DELETE ON memory BEGIN
            INSERT INTO memory_fts(memory_fts, rowid, content, context)
            VALUES ('delete', {old_id}, old.content, old.context);
        END;
        CREATE TRIGGER memory_au AFTER UPDATE OF content, context, agent_wallet, user_address ON memory BEGIN
            INSERT OR IGNORE INTO fts_scopes(key) VALUES ({new_key});
            INSERT INTO memory_fts(memory_fts, rowid, content, context)
            VALUES ('delete', {old_id}, old.content, old.context);
            INSERT INTO memory_fts(rowid, content, context) VALUES ({new_id}, new.content, new.context);
        END;
        """
    )


def _m007_fts_scoped_terms(conn: sqlite3.Connection) -> None:
    """The memory FTS5 table holds scoped terms (:mod:`._fts`): each word folded and stemmed
    in Python and prefixed with its row's scope number, written by the ``manowar_fts_terms``
    function the triggers call. A term's document frequency is then its scope's own, so BM25
    no longer walks other scopes' posting lists, and other scopes' words no longer weigh a
    scope's query terms (BM25's row count and mean row length are still the table's). The
    index is rebuilt from the memory table; no row changes."""
    conn.executescript(
        f"""
        DROP TABLE IF EXISTS memory_fts;
        CREATE VIRTUAL TABLE memory_fts USING fts5(content, context, content='', tokenize='ascii');
        INSERT INTO memory_fts(rowid, content, context)
            SELECT {_sql.fts_rowid("m")}, {_sql.fts_terms("m", "content")}, {_sql.fts_terms("m", "context")}
            FROM memory m;
        {_sql.fts_sync_triggers("memory", "memory_fts", ("content", "context"), _sql.fts_rowid)}
        """
    )


def _m008_thread_index(conn: sqlite3.Connection) -> None:
    """An index on (agent, thread, created_at), so a thread's newest rows (what ingest reads to
    build a new row's thread context, and a delete to rebuild its followers') are read newest
    first straight from the index: before it, the planner read every row of the agent, every
    user's, and sorted them, so each ingest got slower as the agent's other users grew."""
    conn.executescript("CREATE INDEX idx_memory_thread ON memory (agent_wallet, thread_id, created_at);")


def _m009_transcripts_scoped_terms(conn: sqlite3.Connection) -> None:
    """The transcripts' FTS5 table holds scoped terms as the memory index does (m007): a
    transcript search reads its scope's posting lists alone, where before it matched every
    user's transcripts and filtered them after. The index is rebuilt; no row changes."""
    conn.executescript(
        f"""
        DROP TABLE IF EXISTS transcripts_fts;
        INSERT OR IGNORE INTO fts_scopes(key) SELECT DISTINCT {_sql.fts_scope_key_sql("t")} FROM transcripts t;
        CREATE VIRTUAL TABLE transcripts_fts USING fts5(search_text, content='', tokenize='ascii');
        INSERT INTO transcripts_fts(rowid, search_text) SELECT t.rowid, {_sql.fts_terms("t", "search_text")}
            FROM transcripts t;
        {_sql.fts_sync_triggers("transcripts", "transcripts_fts", ("search_text",), lambda row: f"{row}.rowid")}
        """
    )


def _m010_thread_turns(conn: sqlite3.Connection) -> None:
    """A ledger of the turns written to each transcript: one row per turn id with its place in
    the transcript (``seq``) and its session row, so ``post_turn`` writes a turn exactly once
    (a retried turn id is found here) in one transaction with the transcript and working
    buffer. The turns already stored are entered from their session rows (``metadata.turnId``
    and ``sessionId``), oldest first, so retrying one of them after the upgrade stores nothing
    either; of a turn stored twice by an older version the first row is entered. No row of any
    other table changes."""
    conn.executescript(
        """
        CREATE TABLE thread_turns (
            agent_wallet TEXT NOT NULL, session_id TEXT NOT NULL, turn_id TEXT NOT NULL, seq INTEGER NOT NULL,
            memory_id TEXT, user_address TEXT, thread_id TEXT, mode TEXT, hai_id TEXT, created_at INTEGER NOT NULL,
            PRIMARY KEY (agent_wallet, session_id, turn_id), UNIQUE (agent_wallet, session_id, seq)
        );
        INSERT OR IGNORE INTO thread_turns
            SELECT agent_wallet, sid, tid,
                   ROW_NUMBER() OVER (PARTITION BY agent_wallet, sid ORDER BY created_at, rid),
                   id, user_address, thread_id, mode, hai_id, created_at
            FROM (SELECT m.rowid AS rid, m.id, m.agent_wallet, m.user_address, m.thread_id, m.mode, m.hai_id,
                         m.created_at, json_extract(m.metadata, '$.sessionId') AS sid,
                         json_extract(m.metadata, '$.turnId') AS tid
                  FROM memory m WHERE m.source = 'session')
            WHERE sid IS NOT NULL AND tid IS NOT NULL
            ORDER BY agent_wallet, sid, created_at, rid;
        """
    )


def _m011_inactive_expired(conn: sqlite3.Connection) -> None:
    """The ``expire`` job's statuses (``expired``, ``forgotten``) are inactive like deleted and
    superseded: the partial unique index of active facts is rebuilt without them, so an
    archived fact frees its hash. No row changes (the index only loses entries)."""
    conn.executescript(
        f"""
        DROP INDEX IF EXISTS idx_memory_active_fact;
        CREATE UNIQUE INDEX idx_memory_active_fact ON memory (agent_wallet, fact_hash) WHERE {_ACTIVE_FACT_WHERE};
        """
    )


def _m012_event_date_index(conn: sqlite3.Connection) -> None:
    """An (agent, user, eventDate) index, for the dated lane's read by event date
    (``memories_dated_between``): facts say when they happened, often long before they are
    recorded."""
    conn.executescript(
        f"CREATE INDEX IF NOT EXISTS idx_memory_event_date ON memory (agent_wallet, user_address, {_sql.EVENT_DATE_SQL});"
    )


MIGRATIONS: list[tuple[str, Callable[[sqlite3.Connection], None]]] = [
    ("m001_initial", _m001_initial),
    ("m002_unique_active_fact", _m002_unique_active_fact),
    ("m003_memory_context", _m003_memory_context),
    ("m004_maintenance_schedules", _m004_maintenance_schedules),
    ("m005_cache_fence", _m005_cache_fence),
    ("m006_fts_scope_ranges", _m006_fts_scope_ranges),
    ("m007_fts_scoped_terms", _m007_fts_scoped_terms),
    ("m008_thread_index", _m008_thread_index),
    ("m009_transcripts_scoped_terms", _m009_transcripts_scoped_terms),
    ("m010_thread_turns", _m010_thread_turns),
    ("m011_inactive_expired", _m011_inactive_expired),
    ("m012_event_date_index", _m012_event_date_index),
]


def _split_script(migrate: Callable[[sqlite3.Connection], None]) -> list[str]:
    """Run a migration function against a recorder to get its statements (so it runs inside our transaction)."""

    class _Recorder:
        def __init__(self) -> None:
            self.statements: list[str] = []

        def executescript(self, script: str) -> None:
            buf = ""
            for line in script.splitlines(keepends=True):
                buf += line
                if sqlite3.complete_statement(buf):
                    if buf.strip():
                        self.statements.append(buf.strip())
                    buf = ""

        def execute(self, sql: str) -> None:
            self.statements.append(sql)

    recorder = _Recorder()
    migrate(recorder)  # type: ignore[arg-type]
    return recorder.statements
