"""The embedded store: one SQLite file (or ``:memory:``), no server.

* WAL mode, one connection per thread for files (readers never block the writer);
  ``:memory:`` uses a single connection behind a lock.
* FTS5 for the keyword lane, on memory rows and transcripts. The memory index holds scoped
  terms (:mod:`._fts`: words stemmed in Python, prefixed with the row's agent/user scope) under
  rowids in the scope's range, so a search reads only its own scope's rows and BM25's document
  frequencies are its scope's own, however many other scopes the store holds.
* Vectors are stored with their row (float32 blob plus the embedding model id). Vector
  search is exact: an in-process matrix per model, refreshed incrementally from a
  revision counter, so writes from other processes are seen on the next search.
* Schema changes are named, ordered migrations recorded in ``_manowar_migrations``.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Callable, Hashable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from .._util import now_ms
from ..errors import ConflictError, StoreError
from ..records import Archive, Job, MemoryRecord, Pattern, Session, Skill, Transcript
from ..scope import SCOPE_FIELDS
from . import _fts, _sql
from ._vectors import VectorIndex
from .base import (
    INACTIVE_STATUSES,
    MAX_INSERT_ATTEMPTS,
    STATS_COUNTED,
    Hit,
    MemoryQuery,
    PageCursor,
    ScopeKey,
    TurnBuilder,
    TurnWrite,
    VectorSearchInfo,
    check_memory_changes,
    insert_gave_up,
    is_unique_fact,
    require_unique_fact,
    stats_report,
    suffixed_id,
)

__all__ = ["SQLiteStore"]

_SCOPE_COLUMNS = {**SCOPE_FIELDS, "scopeKind": "mode", "scopeId": "COALESCE(hai_id, agent_wallet)"}


def _agent_clause(agent_wallet: str | None) -> tuple[str, tuple[str, ...]]:
    """The SQL appended to a by-id ``WHERE`` so it matches only ``agent_wallet``'s row (nothing
    when None: any agent's)."""
    return (" AND agent_wallet = ?", (agent_wallet,)) if agent_wallet is not None else ("", ())


def _json_path(path: str) -> str:
    return "$" + "".join(f'."{seg}"' for seg in path.split("."))


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
]

_MEMORY_COLUMNS = _sql.MEMORY_COLUMNS


class _VectorIndex(VectorIndex):
    """The shared vector index of one model, plus the revision it was refreshed to."""

    rev = 0

    def upsert_row(self, row: sqlite3.Row) -> None:
        """Add or refresh one row."""
        self.upsert(
            row["rowid"], np.frombuffer(row["embedding"], dtype=np.float32), agent=row["agent_wallet"],
            user=row["user_address"], mode=row["mode"], hai=row["hai_id"], source=row["source"],
            active=row["status"] not in INACTIVE_STATUSES, expires_at=row["expires_at"],
        )


class SQLiteStore:
    """The embedded store. ``SQLiteStore(":memory:")`` for tests, or a file path."""

    name = "sqlite"
    #: BM25 weight of a row's ``context`` column relative to its content (1.0) in the keyword lane.
    context_weight: float = 0.5
    #: The keyword lane first reads this many full-text matches per result wanted (from the
    #: index alone) and checks only those rows against the scope filter; it falls back to
    #: every match when fewer than the results wanted pass. Results are identical either way
    #: (0: always the statement over every match).
    keyword_pool_factor: int = 4
    #: Bytes of a database file each connection maps into memory (``PRAGMA mmap_size``; 0, the
    #: default, reads pages with read calls). One connection's random row reads get cheaper
    #: mapped (keyword lane over 1M rows: 22 to 17 ms CPU), but each thread's connection maps
    #: the file anew and takes its own page faults: ``pre_turn`` at 100k rows measured ~1 ms
    #: CPU slower with it, so it is off unless set (benchmarks/scale.py pre-turn).
    mmap_size: int = 0

    def __init__(
        self, path: str | Path = ":memory:", *, context_weight: float | None = None, busy_timeout: float = 30.0,
        create_dirs: bool = True,
    ) -> None:
        self.path = str(path)
        if context_weight is not None:
            if not 0.0 <= context_weight <= 10.0:
                raise StoreError(f"context_weight must be between 0 and 10, got {context_weight!r}")
            self.context_weight = float(context_weight)
        if isinstance(busy_timeout, bool) or not isinstance(busy_timeout, (int, float)) or not 0 <= busy_timeout <= 3600:
            raise StoreError(f"busy_timeout must be a number of seconds between 0 and 3600, got {busy_timeout!r}")
        #: Seconds a write waits for another connection's write lock before :class:`StoreError`.
        self.busy_timeout = float(busy_timeout)
        self._memory = self.path == ":memory:"
        if not self._memory:
            parent = Path(self.path).expanduser().parent
            if create_dirs:
                parent.mkdir(parents=True, exist_ok=True)
            elif not parent.is_dir():
                raise StoreError(
                    f"the directory {parent} of the SQLite store {self.path} does not exist: create it first "
                    f"(mkdir -p {parent}) or fix the path"
                )
            self.path = str(Path(self.path).expanduser())
        self._local = threading.local()
        self._shared: sqlite3.Connection | None = None
        self._lock = threading.RLock()
        self._all_conns: list[sqlite3.Connection] = []
        self._indexes: dict[str, _VectorIndex] = {}
        self._other_model_rows: dict[str, int] = {}  # rows embedded by another model, per model id
        self._index_lock = threading.Lock()
        self._closed = False
        with self._conn() as conn:
            self._migrate(conn)

    # -- connections --
    def _open(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=self.busy_timeout, check_same_thread=False, isolation_level=None)
        conn.row_factory = sqlite3.Row
        conn.create_function(_fts.TERMS_FUNCTION, 2, _fts.scoped_terms, deterministic=True)
        conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
        if not self._memory:
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
            if self.mmap_size:
                conn.execute(f"PRAGMA mmap_size = {int(self.mmap_size)}")
        self._all_conns.append(conn)
        return conn

    @contextmanager
    def _conn(self) -> Iterator[sqlite3.Connection]:
        if self._closed:
            raise StoreError("this SQLiteStore is closed; create a new one")
        try:
            if self._memory:
                with self._lock:
                    if self._shared is None:
                        self._shared = self._open()
                    yield self._shared
                return
            conn = getattr(self._local, "conn", None)
            if conn is None:
                conn = self._local.conn = self._open()
            yield conn
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) and "busy" not in str(exc):
                raise
            raise StoreError(
                f"the SQLite database {self.path} is locked: another connection or process held its write lock "
                f"for longer than busy_timeout ({self.busy_timeout:g} s), so nothing was written. Retry later, "
                "end the other writer's long transaction, or open the store with a longer "
                "SQLiteStore(path, busy_timeout=...)"
            ) from exc

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        with self._conn() as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            else:
                conn.execute("COMMIT")

    def _migrate(self, conn: sqlite3.Connection) -> None:
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute(
                "CREATE TABLE IF NOT EXISTS _manowar_migrations (name TEXT PRIMARY KEY, applied_at INTEGER NOT NULL)"
            )
            done = {r[0] for r in conn.execute("SELECT name FROM _manowar_migrations")}
            known = {name for name, _ in MIGRATIONS}
            if done - known:
                raise StoreError(
                    f"{self.path} was written by a newer manowar-memory (migrations {sorted(done - known)}); upgrade"
                )
            for name, migrate in MIGRATIONS:
                if name not in done:
                    for statement in _split_script(migrate):
                        conn.execute(statement)
                    conn.execute("INSERT INTO _manowar_migrations VALUES (?, ?)", (name, now_ms()))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def migrations(self) -> list[str]:
        """Names of the migrations applied to this database, in order."""
        with self._conn() as conn:
            return [r[0] for r in conn.execute("SELECT name FROM _manowar_migrations ORDER BY applied_at, name")]

    def close(self) -> None:
        """Close every connection this store opened."""
        self._closed = True
        with self._index_lock:
            for index in self._indexes.values():
                index.persist(index.rev)  # the ANN indexes, beside the file, for the next open
        for conn in self._all_conns:
            try:
                conn.close()
            except sqlite3.Error:
                pass
        self._all_conns.clear()

    # -- query building --
    @staticmethod
    def _scope_sql(q: MemoryQuery, *, has_status: bool, json_col: str, source_col: str | None) -> tuple[str, list[Any]]:
        s = q.scope
        clauses = ["agent_wallet = ?"]
        params: list[Any] = [s.agent_wallet]
        if s.user_address is not None:
            clauses.append("(user_address = ? OR user_address IS NULL)")
            params.append(s.user_address)
        else:
            clauses.append("user_address IS NULL")
        if not q.durable and s.thread_id is not None:
            clauses.append("thread_id = ?")
            params.append(s.thread_id)
        if s.mode is not None:
            clauses.append("mode = ?")
            params.append(s.mode)
        if s.hai_id is not None:
            clauses.append("hai_id = ?")
            params.append(s.hai_id)
        if q.active_only and has_status:
            clauses.append(f"(status IS NULL OR status NOT IN {_INACTIVE_SQL})")
            if json_col == "metadata":  # memory rows: hidden from their expiry on, before any job runs
                clause, values = _sql.not_expired(q.now if q.now is not None else now_ms())
                clauses.append(clause)
                params.extend(values)
        elif q.active_only:
            clauses.append(f"COALESCE(json_extract({json_col}, '$.\"metadata\".\"status\"'), '') NOT IN {_INACTIVE_SQL}")
        if source_col is not None:
            if q.sources is not None:
                clauses.append(f"{source_col} IN ({','.join('?' * len(q.sources))})")
                params.extend(q.sources)
            if q.exclude_sources:
                clauses.append(f"{source_col} NOT IN ({','.join('?' * len(q.exclude_sources))})")
                params.extend(q.exclude_sources)
        if q.filters:
            clause, values = _sql.filter_where(q.filters, lambda p: SQLiteStore._path_expr(p, json_col, source_col))
            clauses.append(clause)
            params.extend(values)
        return " AND ".join(clauses), params

    @staticmethod
    def _path_expr(path: str, json_col: str, source_col: str | None) -> str:
        if path in _SCOPE_COLUMNS:
            return _SCOPE_COLUMNS[path]
        if path == "source":
            return source_col or f"json_extract({json_col}, '$.\"source\"')"
        if json_col == "metadata":  # memory rows keep metadata in its own column
            if path.startswith("metadata."):
                return f"json_extract(metadata, '{_json_path(path[len('metadata.'):])}')"
            return "NULL"  # workingMemory.* paths do not exist on memory rows
        return f"json_extract({json_col}, '{_json_path(path)}')"

    # -- memory rows --
    def _next_rev(self, conn: sqlite3.Connection) -> int:
        row = conn.execute("UPDATE counters SET value = value + 1 WHERE name = 'memory_rev' RETURNING value").fetchone()
        return int(row[0])

    def add_memories(self, records: Sequence[MemoryRecord]) -> list[str]:
        ids: list[str] = []
        with self._write() as conn:
            for rec in records:
                holder = self._reinforce_fact(conn, rec) if is_unique_fact(rec.source, rec.metadata) else None
                ids.append(holder["id"] if holder is not None else self._insert(conn, rec))
        return ids

    def add_memories_if_absent(self, records: Sequence[MemoryRecord]) -> list[tuple[str, bool]]:
        out: list[tuple[str, bool]] = []
        with self._write() as conn:  # BEGIN IMMEDIATE: the id check and the insert are one transaction
            for rec in records:
                taken = conn.execute("SELECT 1 FROM memory WHERE id = ? AND agent_wallet = ?", (rec.id, rec.agent_wallet))
                if taken.fetchone() is not None:
                    out.append((rec.id, False))
                    continue
                holder = self._reinforce_fact(conn, rec) if is_unique_fact(rec.source, rec.metadata) else None
                out.append((holder["id"], False) if holder is not None else (self._insert(conn, rec), True))
        return out

    def existing_memory_ids(self, memory_ids: Sequence[str], *, agent_wallet: str | None = None) -> set[str]:
        found: set[str] = set()
        ids = list(dict.fromkeys(memory_ids))
        agent_sql, agent_params = _agent_clause(agent_wallet)
        with self._conn() as conn:
            for start in range(0, len(ids), 500):
                chunk = ids[start : start + 500]
                rows = conn.execute(f"SELECT id FROM memory WHERE id IN ({','.join('?' * len(chunk))}){agent_sql}",
                                    [*chunk, *agent_params])
                found.update(r[0] for r in rows)
        return found

    def add_fact_if_absent(self, record: MemoryRecord) -> tuple[MemoryRecord, bool]:
        require_unique_fact(record)
        with self._write() as conn:  # BEGIN IMMEDIATE: the check and the insert are one transaction
            holder = self._reinforce_fact(conn, record)
            if holder is not None:
                return self._row_to_record(holder), False
            memory_id = self._insert(conn, record)
        return record.model_copy(update={"id": memory_id, "embedding": None}), True

    def _reinforce_fact(self, conn: sqlite3.Connection, rec: MemoryRecord) -> sqlite3.Row | None:
        """Inside a write transaction: bump and return the active fact holding ``rec``'s hash, if any."""
        row: sqlite3.Row | None = conn.execute(
            "UPDATE memory SET access_count = access_count + 1, last_accessed_at = ? "
            f"WHERE rowid = (SELECT rowid FROM memory WHERE agent_wallet = ? AND fact_hash = ? AND {_ACTIVE_FACT_WHERE} "
            f"LIMIT 1) RETURNING {_MEMORY_COLUMNS}",
            (rec.last_accessed_at, rec.agent_wallet, rec.metadata["factHash"]),
        ).fetchone()
        return row

    def _insert(self, conn: sqlite3.Connection, rec: MemoryRecord) -> str:
        """Inside a write transaction: insert one row; a colliding id gets a suffix."""
        rev = self._next_rev(conn)
        emb = np.asarray(rec.embedding, dtype=np.float32).tobytes() if rec.embedding is not None else None
        for attempt in range(MAX_INSERT_ATTEMPTS):
            memory_id = suffixed_id(rec.id, attempt)
            try:
                conn.execute(
                    "INSERT INTO memory (id, agent_wallet, user_address, thread_id, mode, hai_id, content, "
                    "context, source, status, retention, fact_hash, decay_score, access_count, created_at, "
                    "updated_at, last_accessed_at, metadata, embedding, embedding_model, rev) "
                    "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    (
                        memory_id, rec.agent_wallet, rec.user_address, rec.thread_id, rec.mode, rec.hai_id,
                        rec.content, rec.context, rec.source, rec.metadata.get("status"), rec.metadata.get("retention"),
                        rec.metadata.get("factHash"), rec.decay_score, rec.access_count, rec.created_at,
                        rec.updated_at, rec.last_accessed_at, json.dumps(rec.metadata, ensure_ascii=False),
                        emb, rec.embedding_model if emb is not None else None, rev,
                    ),
                )
                return memory_id
            except sqlite3.IntegrityError as exc:
                if "memory.id" not in str(exc):
                    raise StoreError(f"cannot insert memory row {rec.id}: {exc}") from exc
        raise insert_gave_up(rec.id)

    def _row_to_record(self, row: sqlite3.Row, with_embedding: bool = False) -> MemoryRecord:
        """A memory row read with :data:`_sql.MEMORY_COLUMNS` (in that order) as a record."""
        (_, id_, agent_wallet, user_address, thread_id, mode, hai_id, content, context, source, decay_score,
         access_count, created_at, updated_at, last_accessed_at, metadata, emb, embedding_model) = row
        return MemoryRecord.model_construct(
            id=id_, agent_wallet=agent_wallet, user_address=user_address, thread_id=thread_id, mode=mode,
            hai_id=hai_id, content=content, context=context, source=source, decay_score=decay_score,
            access_count=access_count, created_at=created_at, updated_at=updated_at,
            last_accessed_at=last_accessed_at, metadata=json.loads(metadata),
            embedding=np.frombuffer(emb, dtype=np.float32).tolist() if (with_embedding and emb is not None) else None,
            embedding_model=embedding_model,
        )

    def _memory_where(self, q: MemoryQuery) -> tuple[str, list[Any]]:
        return self._scope_sql(q, has_status=True, json_col="metadata", source_col="source")

    def get_memory(self, memory_id: str, query: MemoryQuery | None = None, *,
                   agent_wallet: str | None = None) -> MemoryRecord | None:
        agent_sql, agent_params = _agent_clause(agent_wallet)
        sql = f"SELECT {_MEMORY_COLUMNS} FROM memory WHERE id = ?{agent_sql}"
        params: list[Any] = [memory_id, *agent_params]
        if query is not None:
            where, extra = self._memory_where(query)
            sql += f" AND {where}"
            params += extra
        with self._conn() as conn:
            row = conn.execute(sql, params).fetchone()
        return self._row_to_record(row, with_embedding=True) if row else None

    def update_memory(self, memory_id: str, changes: dict[str, Any], *,
                      agent_wallet: str | None = None) -> MemoryRecord | None:
        check_memory_changes(changes)
        if not changes:
            return self.get_memory(memory_id, agent_wallet=agent_wallet)
        with self._write() as conn:
            if not self._update_row(conn, memory_id, changes, agent_wallet):
                return None
        return self.get_memory(memory_id)

    def update_memories(self, updates: Sequence[tuple[str, dict[str, Any]]], *,
                        agent_wallet: str | None = None) -> int:
        """Apply ``(id, changes)`` pairs to rows of ``agent_wallet`` in one transaction; returns how many rows matched."""
        for _, changes in updates:
            check_memory_changes(changes)
        done = 0
        with self._write() as conn:
            for memory_id, changes in updates:
                if changes:
                    done += self._update_row(conn, memory_id, changes, agent_wallet)
        return done

    def _update_row(self, conn: sqlite3.Connection, memory_id: str, changes: dict[str, Any],
                    agent_wallet: str | None) -> int:
        """Inside a write transaction: set ``changes`` on one row and bump its revision; rows matched."""
        sets, params = _sql.memory_update(changes)
        sets.append("rev = ?")
        params.append(self._next_rev(conn))
        agent_sql, agent_params = _agent_clause(agent_wallet)
        try:
            cur = conn.execute(f"UPDATE memory SET {', '.join(sets)} WHERE id = ?{agent_sql}",
                               [*params, memory_id, *agent_params])
        except sqlite3.IntegrityError as exc:
            if "fact_hash" not in str(exc):
                raise StoreError(f"cannot update memory {memory_id}: {exc}") from exc
            raise ConflictError(
                f"cannot update memory {memory_id}: the agent already has an active fact with this factHash "
                "(the same text in the same scope); supersede or delete that row first"
            ) from exc
        return int(cur.rowcount)

    def delete_memory(self, memory_id: str, *, agent_wallet: str | None = None) -> bool:
        agent_sql, agent_params = _agent_clause(agent_wallet)
        with self._write() as conn:
            row = conn.execute(f"DELETE FROM memory WHERE id = ?{agent_sql} RETURNING rowid",
                               (memory_id, *agent_params)).fetchone()
            if row is None:
                return False
            conn.execute("INSERT INTO memory_tombstones VALUES (?, ?)", (row[0], self._next_rev(conn)))
            return True

    def delete_memories(self, memory_ids: Sequence[str], *, agent_wallet: str | None = None) -> int:
        """Hard delete many rows of ``agent_wallet``; returns how many were removed."""
        removed = 0
        agent_sql, agent_params = _agent_clause(agent_wallet)
        with self._write() as conn:
            for memory_id in memory_ids:
                row = conn.execute(f"DELETE FROM memory WHERE id = ?{agent_sql} RETURNING rowid",
                                   (memory_id, *agent_params)).fetchone()
                if row is not None:
                    conn.execute("INSERT INTO memory_tombstones VALUES (?, ?)", (row[0], self._next_rev(conn)))
                    removed += 1
        return removed

    def find_fact_by_hash(self, agent_wallet: str, fact_hash: str) -> MemoryRecord | None:
        with self._conn() as conn:
            row = conn.execute(
                f"SELECT {_MEMORY_COLUMNS} FROM memory WHERE agent_wallet = ? AND fact_hash = ? AND source = 'fact' "
                f"AND (status IS NULL OR status NOT IN {_INACTIVE_SQL}) ORDER BY created_at DESC LIMIT 1",
                (agent_wallet, fact_hash),
            ).fetchone()
        return self._row_to_record(row) if row else None

    def bump_access(self, memory_ids: Sequence[str], at: int, *, agent_wallet: str | None = None) -> None:
        if not memory_ids:
            return
        agent_sql, agent_params = _agent_clause(agent_wallet)
        with self._write() as conn:
            conn.executemany(
                f"UPDATE memory SET access_count = access_count + 1, last_accessed_at = ? WHERE id = ?{agent_sql}",
                [(at, i, *agent_params) for i in memory_ids],
            )

    def list_memories(self, query: MemoryQuery, limit: int | None = None) -> list[MemoryRecord]:
        where, params = self._memory_where(query)
        sql = f"SELECT {_MEMORY_COLUMNS} FROM memory WHERE {where} ORDER BY created_at DESC, rowid DESC"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        with self._conn() as conn:
            return [self._row_to_record(r) for r in conn.execute(sql, params)]

    def iter_memories(
        self, agent_wallet: str | None = None, *, created_from: int | None = None,
        created_to: int | None = None, batch_size: int = 1000,
    ) -> Iterator[MemoryRecord]:
        clauses: list[str] = ["rowid > ?"]
        params: list[Any] = [0]
        if agent_wallet is not None:
            clauses.append("agent_wallet = ?")
            params.append(agent_wallet)
        if created_from is not None:
            clauses.append("created_at >= ?")
            params.append(created_from)
        if created_to is not None:
            clauses.append("created_at <= ?")
            params.append(created_to)
        last = 0
        while True:
            params[0] = last
            with self._conn() as conn:
                rows = conn.execute(
                    f"SELECT {_MEMORY_COLUMNS} FROM memory WHERE {' AND '.join(clauses)} ORDER BY rowid LIMIT ?",
                    [*params, batch_size],
                ).fetchall()
            if not rows:
                return
            for row in rows:
                yield self._row_to_record(row, with_embedding=True)
            last = rows[-1]["rowid"]

    def page_memories(self, agent_wallet: str | None, after: PageCursor, limit: int
                      ) -> tuple[list[MemoryRecord], PageCursor]:
        """Up to ``limit`` rows after the rowid ``after`` (every status, no embeddings), rowid order."""
        sql, params = _sql.memory_page(agent_wallet, int(after or 0), limit)
        with self._conn() as conn:
            rows = conn.execute(sql, params).fetchall()
        return [self._row_to_record(r) for r in rows], (int(rows[-1]["rowid"]) if rows else after)

    def memory_user_counts(self, agent_wallet: str) -> dict[str | None, int]:
        """Rows per user of the agent (None: the user-less rows), every status."""
        sql, params = _sql.memory_user_counts(agent_wallet)
        with self._conn() as conn:
            return {user: int(n) for user, n in conn.execute(sql, params)}

    def iter_user_memories(self, agent_wallet: str, users: Sequence[str | None]) -> Iterator[MemoryRecord]:
        """The agent's rows of these users, every status, no embeddings, in rowid order."""
        sql, params = _sql.memory_rows_of_users(agent_wallet, users)
        with self._conn() as conn:
            rows = conn.execute(sql, params).fetchall()
        for row in rows:
            yield self._row_to_record(row)

    def count_memories(self, query: MemoryQuery) -> int:
        where, params = self._memory_where(query)
        with self._conn() as conn:
            return int(conn.execute(f"SELECT COUNT(*) FROM memory WHERE {where}", params).fetchone()[0])

    def keyword_search(self, query: MemoryQuery, text: str, limit: int) -> list[Hit]:
        phrases = _fts.query_phrases(text)
        if not phrases:
            return []
        where, params = self._memory_where(query)
        with self._conn() as conn:
            scope_ids = self._fts_scope_ids(conn, query)
            if not scope_ids:
                return []
            arms = [(sid, _fts.scoped_match(sid, phrases)) for sid in scope_ids]
            picked = self._keyword_rows(conn, arms, where, params, limit)
        return [Hit(self._row_to_record(row), score) for row, score in picked]

    @staticmethod
    def _fts_scope_ids(conn: sqlite3.Connection, query: MemoryQuery) -> list[int]:
        """The ``fts_scopes`` numbers a query reads: its user's, and the agent's rows of no user
        (the agent's alone for a query of no user), in order; none that holds no row yet."""
        s = query.scope
        keys = [_sql.fts_scope_key(s.agent_wallet, s.user_address)]
        if s.user_address is not None:
            keys.append(_sql.fts_scope_key(s.agent_wallet, None))
        return [r[0] for r in conn.execute(
            f"SELECT id FROM fts_scopes WHERE key IN ({','.join('?' * len(keys))}) ORDER BY id", keys
        )]

    def _keyword_rows(self, conn: sqlite3.Connection, arms: list[tuple[int, str]], where: str,
                      params: list[Any], limit: int) -> list[tuple[sqlite3.Row, float]]:
        """The keyword lane's best ``limit`` rows (no embedding) with their scores, best first.

        They come from the best ``keyword_pool_factor * limit`` full-text matches, read from the
        index alone, whose memory rows are read ``limit`` at a time in that order, each read
        keeping only rows that pass the scope filter: one read when they all pass, as they
        usually do (the index is already split by scope). Only when fewer than ``limit`` of
        the pool pass does the lane rank every match against the filter."""
        pool = limit * self.keyword_pool_factor
        if pool > 0:
            sql, pool_params = _sql.keyword_pool(arms, pool, self.context_weight)
            candidates = [(int(r[0]), float(r[1])) for r in conn.execute(sql, pool_params)]
            picked: list[tuple[sqlite3.Row, float]] = []
            for start in range(0, len(candidates), limit):
                chunk = candidates[start:start + limit]
                sql, pass_params = _sql.rows_passing([rowid for rowid, _ in chunk], where, params)
                by_rowid = {r[0]: r for r in conn.execute(sql, pass_params)}
                picked += [(by_rowid[rowid], score) for rowid, score in chunk if rowid in by_rowid]
                if len(picked) >= limit:
                    return picked[:limit]
            if len(candidates) < pool:
                return picked  # exact: every match outside the pool ranks after the whole pool
        sql, fts_params = _sql.keyword_rowids(arms, _qualify(where, "m"), params, limit,
                                              self.context_weight)
        ranked = [(int(r[0]), float(r[1])) for r in conn.execute(sql, fts_params)]
        if not ranked:
            return []
        by_rowid = self._rows_by_rowid(conn, [rowid for rowid, _ in ranked])
        return [(by_rowid[rowid], score) for rowid, score in ranked if rowid in by_rowid]

    @staticmethod
    def _rows_by_rowid(conn: sqlite3.Connection, rowids: Sequence[Hashable]) -> dict[Hashable, sqlite3.Row]:
        """The memory rows (no embedding) of ``rowids``, by rowid; rows deleted meanwhile are missing."""
        sql = (f"SELECT {_sql.memory_columns(with_embedding=False)} FROM memory "
               f"WHERE rowid IN ({','.join('?' * len(rowids))})")
        return {r[0]: r for r in conn.execute(sql, list(rowids))}

    def _index(self, conn: sqlite3.Connection, model_id: str) -> _VectorIndex | None:
        current = int(conn.execute("SELECT value FROM counters WHERE name = 'memory_rev'").fetchone()[0])
        with self._index_lock:
            index = self._indexes.get(model_id)
            if index is not None and index.rev >= current:
                return index
            since = index.rev if index is not None else 0
            rows = conn.execute(
                "SELECT rowid, agent_wallet, user_address, mode, hai_id, source, status, embedding, embedding_model, "
                f"{_sql.expiry_column()} AS expires_at FROM memory WHERE rev > ? AND rev <= ?",
                (since, current),
            ).fetchall()
            if rows:
                self._other_model_rows[model_id] = int(conn.execute(
                    "SELECT COUNT(*) FROM memory WHERE embedding_model IS NOT NULL AND embedding_model != ?",
                    (model_id,),
                ).fetchone()[0])
            # tombstones first: SQLite reuses the rowid of a deleted last row, and a row read
            # from the table now is live, so a delete must never undo a later insert's upsert
            if index is not None:
                for (rowid,) in conn.execute(
                    "SELECT row_id FROM memory_tombstones WHERE rev > ? AND rev <= ?", (since, current)
                ):
                    index.remove(rowid)
            for row in rows:
                if row["embedding_model"] != model_id or row["embedding"] is None:
                    if index is not None:
                        index.remove(row["rowid"])  # re-embedded by another model, or embedding dropped
                    continue
                if index is None:
                    index = _VectorIndex(
                        len(row["embedding"]) // 4,
                        persist_path=None if self._memory else VectorIndex.persist_file(self.path, model_id),
                    )
                    self._indexes[model_id] = index
                index.upsert_row(row)
            if index is not None:
                index.rev = current
                index.synced(current)  # restores saved ANN indexes of this revision on first load
            return index

    def vector_search(
        self, query: MemoryQuery, vector: Sequence[float], model_id: str, limit: int
    ) -> tuple[list[Hit], VectorSearchInfo]:
        info = VectorSearchInfo(method="exact")
        with self._conn() as conn:
            index = self._index(conn, model_id)
            if index is None or index.size == 0:
                return [], info
            q = np.asarray(vector, dtype=np.float32)
            if q.shape[0] != index.dims:
                raise StoreError(
                    f"query vector has {q.shape[0]} dimensions but rows embedded by {model_id} have {index.dims}"
                )
            norm = float(np.linalg.norm(q))
            q = q / norm if norm else q
            with index.lock:
                mask = index.mask(query)
                if query.filters or (not query.durable and query.scope.thread_id):
                    where, params = self._memory_where(query)
                    mask = index.only(mask, (r[0] for r in conn.execute(f"SELECT rowid FROM memory WHERE {where}", params)))
                info.candidates = int(mask.sum())
                picked = index.top(q, mask, limit, index.groups_of(query))
                if not picked:
                    return [], info
            info.skipped_other_models = self._other_model_rows.get(model_id, 0)
            by_rowid = self._rows_by_rowid(conn, [rowid for rowid, _ in picked])
        hits = [
            Hit(self._row_to_record(by_rowid[rowid]), (1.0 + cos) / 2.0) for rowid, cos in picked if rowid in by_rowid
        ]
        return hits, info

    # -- sessions --
    def get_session(self, session_id: str, agent_wallet: str) -> Session | None:
        with self._conn() as conn:
            row = conn.execute(
                "SELECT doc FROM sessions WHERE session_id = ? AND agent_wallet = ? AND expires_at > ?",
                (session_id, agent_wallet, now_ms()),
            ).fetchone()
        return Session.model_validate_json(row[0]) if row else None

    def upsert_session(self, session: Session) -> None:
        with self._write() as conn:
            self._put_session(conn, session)

    @staticmethod
    def _put_session(conn: sqlite3.Connection, session: Session) -> None:
        conn.execute(
            "INSERT INTO sessions VALUES (?,?,?,?,?,?,?,?,?) ON CONFLICT (agent_wallet, session_id) DO UPDATE SET "
            "user_address = excluded.user_address, thread_id = excluded.thread_id, mode = excluded.mode, "
            "hai_id = excluded.hai_id, doc = excluded.doc, expires_at = excluded.expires_at, "
            "last_accessed_at = excluded.last_accessed_at",
            (
                session.session_id, session.agent_wallet, session.user_address, session.thread_id, session.mode,
                session.hai_id, session.model_dump_json(by_alias=True), session.expires_at,
                session.last_accessed_at,
            ),
        )

    def find_sessions(self, query: MemoryQuery, limit: int) -> list[Session]:
        where, params = self._scope_sql(query, has_status=False, json_col="doc", source_col=None)
        with self._conn() as conn:
            rows = conn.execute(
                f"SELECT doc FROM sessions WHERE {where} AND expires_at > ? ORDER BY last_accessed_at DESC LIMIT ?",
                [*params, now_ms(), limit],
            ).fetchall()
        return [Session.model_validate_json(r[0]) for r in rows]

    def purge_expired_sessions(self, now: int) -> int:
        with self._write() as conn:
            return conn.execute("DELETE FROM sessions WHERE expires_at <= ?", (now,)).rowcount

    def delete_sessions_older_than(self, cutoff: int) -> int:
        """Delete sessions last used before ``cutoff`` (cleanup)."""
        with self._write() as conn:
            return conn.execute("DELETE FROM sessions WHERE last_accessed_at < ?", (cutoff,)).rowcount

    def count_stale_sessions(self, now: int, cutoff: int) -> int:
        """Sessions that cleanup would delete: expired at ``now`` or last used before ``cutoff``."""
        return self._count(*_sql.count_stale_sessions(now, cutoff))

    def stale_session_scopes(self, now: int, cutoff: int) -> list[ScopeKey]:
        """Distinct (agent, user, mode, hai) of the sessions cleanup would delete."""
        return self._scopes(*_sql.stale_session_scopes(now, cutoff))

    def _count(self, sql: str, params: list[Any]) -> int:
        with self._conn() as conn:
            return int(conn.execute(sql, params).fetchone()[0])

    def _scopes(self, sql: str, params: list[Any]) -> list[ScopeKey]:
        with self._conn() as conn:
            return [(r[0], r[1], r[2], r[3]) for r in conn.execute(sql, params).fetchall()]

    # -- transcripts --
    def upsert_transcript(self, transcript: Transcript) -> None:
        with self._write() as conn:
            self._put_transcript(conn, transcript)

    @staticmethod
    def _put_transcript(conn: sqlite3.Connection, transcript: Transcript) -> None:
        search_text = "\n".join([transcript.summary or "", *(m.content for m in transcript.messages)])
        conn.execute(
            "INSERT INTO transcripts (session_id, agent_wallet, user_address, thread_id, mode, hai_id, doc, "
            "search_text, created_at) VALUES (?,?,?,?,?,?,?,?,?) ON CONFLICT (agent_wallet, session_id) DO UPDATE SET "
            "user_address = excluded.user_address, "
            "thread_id = excluded.thread_id, mode = excluded.mode, hai_id = excluded.hai_id, doc = excluded.doc, "
            "search_text = excluded.search_text, created_at = excluded.created_at",
            (
                transcript.session_id, transcript.agent_wallet, transcript.user_address, transcript.thread_id,
                transcript.mode, transcript.hai_id, transcript.model_dump_json(by_alias=True), search_text,
                transcript.created_at,
            ),
        )

    def append_turn(
        self, agent_wallet: str, session_id: str, working_id: str, turn_id: str, build: TurnBuilder
    ) -> TurnWrite:
        """One ``BEGIN IMMEDIATE`` transaction per turn: the ledger check, the reads ``build``
        sees and every write, so concurrent writers (threads or processes) queue on the write
        lock, each reading what the one before it committed."""
        with self._write() as conn:
            done = conn.execute(
                "SELECT seq, memory_id FROM thread_turns WHERE agent_wallet = ? AND session_id = ? AND turn_id = ?",
                (agent_wallet, session_id, turn_id),
            ).fetchone()
            if done is not None:
                return TurnWrite(False, done[1], int(done[0]))
            row = conn.execute(
                "SELECT doc FROM transcripts WHERE session_id = ? AND agent_wallet = ?", (session_id, agent_wallet)
            ).fetchone()
            live = conn.execute(
                "SELECT doc FROM sessions WHERE session_id = ? AND agent_wallet = ? AND expires_at > ?",
                (working_id, agent_wallet, now_ms()),
            ).fetchone()
            rows = build(Transcript.model_validate_json(row[0]) if row else None,
                         Session.model_validate_json(live[0]) if live else None)
            self._put_transcript(conn, rows.transcript)
            self._put_session(conn, rows.session)
            memory_id = self._insert(conn, rows.record)
            seq = int(conn.execute(
                "SELECT COALESCE(MAX(seq), 0) + 1 FROM thread_turns WHERE agent_wallet = ? AND session_id = ?",
                (agent_wallet, session_id),
            ).fetchone()[0])
            self._put_turn(conn, agent_wallet, session_id, turn_id, seq, rows.record.model_copy(update={"id": memory_id}))
        return TurnWrite(True, memory_id, seq)

    @staticmethod
    def _put_turn(conn: sqlite3.Connection, agent_wallet: str, session_id: str, turn_id: str, seq: int,
                  rec: MemoryRecord) -> None:
        """Inside a write transaction: the ledger entry of a turn whose session row is ``rec``."""
        conn.execute(
            "INSERT INTO thread_turns VALUES (?,?,?,?,?,?,?,?,?,?)",
            (agent_wallet, session_id, turn_id, seq, rec.id, rec.user_address, rec.thread_id, rec.mode,
             rec.hai_id, rec.created_at),
        )

    def get_transcript(self, session_id: str, agent_wallet: str) -> Transcript | None:
        with self._conn() as conn:
            row = conn.execute(
                "SELECT doc FROM transcripts WHERE session_id = ? AND agent_wallet = ?", (session_id, agent_wallet)
            ).fetchone()
        return Transcript.model_validate_json(row[0]) if row else None

    def search_transcripts(self, query: MemoryQuery, text: str | None, limit: int) -> list[tuple[Transcript, float]]:
        where, params = self._scope_sql(query, has_status=False, json_col="doc", source_col=None)
        phrases = _fts.query_phrases(text)
        if text and not phrases:
            return []
        with self._conn() as conn:
            if not phrases:
                rows = conn.execute(
                    f"SELECT doc, 0.0 AS score FROM transcripts WHERE {where} ORDER BY created_at DESC LIMIT ?",
                    [*params, limit],
                ).fetchall()
            else:
                scope_ids = self._fts_scope_ids(conn, query)
                if not scope_ids:
                    return []
                # one query: each scope's phrases are its own terms, so their counts are its own
                match = " OR ".join(_fts.scoped_match(sid, phrases) for sid in scope_ids)
                rows = conn.execute(
                    f"SELECT t.doc AS doc, -bm25(transcripts_fts) AS score FROM transcripts_fts "
                    f"JOIN transcripts t ON t.rowid = transcripts_fts.rowid "
                    f"WHERE transcripts_fts MATCH ? AND {_qualify(where, 't')} ORDER BY score DESC LIMIT ?",
                    [match, *params, limit],
                ).fetchall()
        return [(Transcript.model_validate_json(r["doc"]), float(r["score"])) for r in rows]

    def erase_scope(self, key: ScopeKey) -> dict[str, int]:
        """Delete everything one scope owns (see :class:`~manowar_memory.stores.base.MaintenanceStore`)."""
        where = "agent_wallet = ? AND user_address IS ? AND mode IS ? AND hai_id IS ?"
        params = (key[0], key[1], key[2], key[3])
        counts: dict[str, int] = {}
        with self._write() as conn:
            gone = conn.execute(f"DELETE FROM memory WHERE {where} RETURNING rowid", params).fetchall()
            for row in gone:  # the vector index drops a row by its tombstone
                conn.execute("INSERT INTO memory_tombstones VALUES (?, ?)", (row[0], self._next_rev(conn)))
            counts["memories"] = len(gone)
            for table in ("transcripts", "sessions", "patterns", "archives"):
                counts[table] = conn.execute(f"DELETE FROM {table} WHERE {where}", params).rowcount
            counts["turns"] = conn.execute(f"DELETE FROM thread_turns WHERE {where}", params).rowcount
        if counts["memories"] or counts["transcripts"]:
            with self._write() as conn:  # merge every segment: no index page keeps the erased terms
                conn.execute("INSERT INTO memory_fts(memory_fts) VALUES ('optimize')")
                conn.execute("INSERT INTO transcripts_fts(transcripts_fts) VALUES ('optimize')")
        return counts

    def delete_transcripts_older_than(self, cutoff: int) -> int:
        """Delete transcripts created before ``cutoff`` (cleanup)."""
        with self._write() as conn:
            return conn.execute("DELETE FROM transcripts WHERE created_at < ?", (cutoff,)).rowcount

    def count_transcripts_older_than(self, cutoff: int) -> int:
        """Transcripts created before ``cutoff`` (a cleanup dry run)."""
        return self._count(*_sql.count_transcripts_older_than(cutoff))

    def old_transcript_scopes(self, cutoff: int) -> list[ScopeKey]:
        """Distinct (agent, user, mode, hai) of the transcripts created before ``cutoff``."""
        return self._scopes(*_sql.transcript_scopes_older_than(cutoff))

    def list_transcripts(self, agent_wallet: str, created_from: int, created_to: int) -> list[Transcript]:
        """Transcripts of an agent created in ``[created_from, created_to]``, oldest first."""
        with self._conn() as conn:
            rows = conn.execute(
                "SELECT doc FROM transcripts WHERE agent_wallet = ? AND created_at BETWEEN ? AND ? ORDER BY created_at",
                (agent_wallet, created_from, created_to),
            ).fetchall()
        return [Transcript.model_validate_json(r[0]) for r in rows]

    # -- patterns, archives, skills, jobs --
    def upsert_pattern(self, pattern: Pattern) -> None:
        with self._write() as conn:
            existing = conn.execute("SELECT doc FROM patterns WHERE pattern_id = ?", (pattern.pattern_id,)).fetchone()
            if existing is not None:
                pattern = pattern.model_copy(update={"created_at": json.loads(existing[0])["createdAt"]})
            conn.execute(
                "INSERT INTO patterns VALUES (?,?,?,?,?,?,?,?,?) ON CONFLICT (pattern_id) DO UPDATE SET "
                "doc = excluded.doc, success_rate = excluded.success_rate",
                (
                    pattern.pattern_id, pattern.agent_wallet, pattern.user_address, pattern.thread_id, pattern.mode,
                    pattern.hai_id, pattern.model_dump_json(by_alias=True), pattern.success_rate, pattern.created_at,
                ),
            )

    def get_pattern(self, pattern_id: str) -> Pattern | None:
        with self._conn() as conn:
            row = conn.execute("SELECT doc FROM patterns WHERE pattern_id = ?", (pattern_id,)).fetchone()
        return Pattern.model_validate_json(row[0]) if row else None

    def find_patterns(self, query: MemoryQuery, limit: int) -> list[Pattern]:
        where, params = self._scope_sql(query, has_status=False, json_col="doc", source_col=None)
        with self._conn() as conn:
            rows = conn.execute(
                f"SELECT doc FROM patterns WHERE {where} ORDER BY success_rate DESC, created_at DESC LIMIT ?",
                [*params, limit],
            ).fetchall()
        return [Pattern.model_validate_json(r[0]) for r in rows]

    def add_archive(self, archive: Archive) -> None:
        with self._write() as conn:
            conn.execute(
                "INSERT INTO archives VALUES (?,?,?,?,?,?,?,?)",
                (
                    archive.archive_id, archive.agent_wallet, archive.user_address, archive.thread_id, archive.mode,
                    archive.hai_id, archive.model_dump_json(by_alias=True), archive.created_at,
                ),
            )

    def get_archive(self, archive_id: str) -> Archive | None:
        with self._conn() as conn:
            row = conn.execute("SELECT doc FROM archives WHERE archive_id = ?", (archive_id,)).fetchone()
        return Archive.model_validate_json(row[0]) if row else None

    def update_archive(self, archive_id: str, changes: dict[str, Any]) -> None:
        archive = self.get_archive(archive_id)
        if archive is None:
            raise StoreError(f"archive {archive_id} does not exist")
        updated = archive.model_copy(update=changes)
        with self._write() as conn:
            conn.execute(
                "UPDATE archives SET doc = ? WHERE archive_id = ?", (updated.model_dump_json(by_alias=True), archive_id)
            )

    def find_archives(self, query: MemoryQuery, limit: int) -> list[Archive]:
        where, params = self._scope_sql(query, has_status=False, json_col="doc", source_col=None)
        with self._conn() as conn:
            rows = conn.execute(
                f"SELECT doc FROM archives WHERE {where} ORDER BY created_at DESC LIMIT ?", [*params, limit]
            ).fetchall()
        return [Archive.model_validate_json(r[0]) for r in rows]

    def add_skill(self, skill: Skill) -> None:
        with self._write() as conn:
            conn.execute(
                "INSERT INTO skills VALUES (?,?,?,?)",
                (skill.skill_id, skill.model_dump_json(by_alias=True), skill.category, skill.created_at),
            )

    def get_skill(self, skill_id: str) -> Skill | None:
        with self._conn() as conn:
            row = conn.execute("SELECT doc FROM skills WHERE skill_id = ?", (skill_id,)).fetchone()
        return Skill.model_validate_json(row[0]) if row else None

    def list_skills(self, agent_wallet: str | None, category: str | None, limit: int) -> list[Skill]:
        with self._conn() as conn:
            rows = conn.execute("SELECT doc FROM skills").fetchall()
        skills = [Skill.model_validate_json(r[0]) for r in rows]
        skills = [
            s for s in skills
            if (agent_wallet is None or agent_wallet in s.agents) and (category is None or s.category == category)
        ]
        skills.sort(key=lambda s: (-s.success_rate, -s.usage_count, -s.created_at))
        return skills[:limit]

    def put_job(self, job: Job) -> None:
        with self._write() as conn:
            conn.execute(
                "INSERT INTO jobs VALUES (?,?,?,?,?,?) ON CONFLICT (job_id) DO UPDATE SET "
                "status = excluded.status, doc = excluded.doc",
                (job.job_id, job.type, job.status, job.agent_wallet, job.model_dump_json(by_alias=True), job.created_at),
            )

    def get_job(self, job_id: str) -> Job | None:
        with self._conn() as conn:
            row = conn.execute("SELECT doc FROM jobs WHERE job_id = ?", (job_id,)).fetchone()
        return Job.model_validate_json(row[0]) if row else None

    # -- cache fences (cache/namespace.py) --
    def cache_fences(self, keys: Sequence[str]) -> dict[str, int]:
        keys = list(dict.fromkeys(keys))
        with self._conn() as conn:
            rows = conn.execute(
                f"SELECT key, epoch FROM cache_fence WHERE key IN ({','.join('?' * len(keys))})", keys
            ).fetchall() if keys else []
        found = {r[0]: int(r[1]) for r in rows}
        return {k: found.get(k, 0) for k in keys}

    def bump_cache_fence(self, key: str) -> int:
        with self._write() as conn:
            row = conn.execute(
                "INSERT INTO cache_fence (key, epoch) VALUES (?, 1) "
                "ON CONFLICT (key) DO UPDATE SET epoch = epoch + 1 RETURNING epoch", (key,)
            ).fetchone()
        return int(row[0])

    # -- maintenance schedules (jobs/schedules.py) --
    def list_agent_wallets(self, limit: int | None = None) -> list[str]:
        """Distinct agents of memory, transcripts, patterns, archives and sessions, in that
        order, exactly as stored; at most ``limit``."""
        out: dict[str, None] = {}
        with self._conn() as conn:
            for table in ("memory", "transcripts", "patterns", "archives", "sessions"):
                sql = f"SELECT DISTINCT agent_wallet FROM {table} WHERE agent_wallet IS NOT NULL ORDER BY 1"
                for (wallet,) in conn.execute(sql):
                    out.setdefault(wallet)
                    if limit is not None and len(out) >= limit:
                        return list(out)
        return list(out)

    def get_schedule(self, schedule_id: str) -> dict[str, Any] | None:
        """The schedule doc with its ``rev``, or None."""
        with self._conn() as conn:
            row = conn.execute("SELECT doc, rev FROM schedules WHERE schedule_id = ?", (schedule_id,)).fetchone()
        return {**json.loads(row[0]), "rev": int(row[1])} if row else None

    def list_schedules(self) -> list[dict[str, Any]]:
        """Every schedule doc (with ``rev``), by id."""
        with self._conn() as conn:
            rows = conn.execute("SELECT doc, rev FROM schedules ORDER BY schedule_id").fetchall()
        return [{**json.loads(r[0]), "rev": int(r[1])} for r in rows]

    def save_schedule(self, doc: dict[str, Any], expected_rev: int | None = None) -> int | None:
        """Write ``doc`` (keyed by ``doc["scheduleId"]``). With ``expected_rev`` only when the
        stored rev is still that (compare-and-set), else create or replace. Returns the new
        rev, or None when the compare failed."""
        body = json.dumps({k: v for k, v in doc.items() if k != "rev"}, ensure_ascii=False)
        with self._write() as conn:
            row = conn.execute("SELECT rev FROM schedules WHERE schedule_id = ?", (doc["scheduleId"],)).fetchone()
            if expected_rev is not None and (row is None or int(row[0]) != expected_rev):
                return None
            rev = int(row[0]) + 1 if row else 1
            conn.execute(
                "INSERT INTO schedules VALUES (?,?,?,?) ON CONFLICT (schedule_id) DO UPDATE SET "
                "doc = excluded.doc, rev = excluded.rev, updated_at = excluded.updated_at",
                (doc["scheduleId"], body, rev, now_ms()),
            )
        return rev

    def delete_schedule(self, schedule_id: str) -> bool:
        """Delete the schedule; False when there was none."""
        with self._write() as conn:
            return conn.execute("DELETE FROM schedules WHERE schedule_id = ?", (schedule_id,)).rowcount > 0

    def stats(self, agent_wallet: str | None = None) -> dict[str, Any]:
        where, params = ("WHERE agent_wallet = ?", [agent_wallet]) if agent_wallet else ("", [])
        with self._conn() as conn:
            row = conn.execute(
                f"SELECT COUNT(*), AVG(decay_score), MIN(created_at), MAX(created_at) FROM memory {where}", params
            ).fetchone()
            by_source = conn.execute(f"SELECT source, COUNT(*) FROM memory {where} GROUP BY source", params).fetchall()
            by_status = conn.execute(f"SELECT status, COUNT(*) FROM memory {where} GROUP BY status", params).fetchall()
            counts = {
                table: int(conn.execute(f"SELECT COUNT(*) FROM {table} {where}", params).fetchone()[0])
                for table in STATS_COUNTED
            }
        return stats_report(total=row[0], avg_decay=row[1], oldest=row[2], newest=row[3],
                            by_source=[(r[0], r[1]) for r in by_source], by_status=[(r[0], r[1]) for r in by_status],
                            counts=counts)


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


def _qualify(where: str, alias: str) -> str:
    """Prefix the bare column names of a WHERE clause built for one table with ``alias.``."""
    import regex

    cols = ("agent_wallet", "user_address", "thread_id", "mode", "hai_id", "status", "source", "metadata", "doc")
    return regex.sub(
        r"(?<![\w.'\"])(" + "|".join(cols) + r")(?![\w'\"])", lambda m: f"{alias}.{m.group(1)}", where
    )
