"""The SQLite store's connection object: the file, its connections per thread, the write
transaction, the recorded migrations run at open, and the query helpers every role shares."""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from ..._util import now_ms
from ...errors import ConflictError, StoreError
from ...records import MemoryRecord
from ...scope import SCOPE_FIELDS
from .. import _fts, _sql
from .._vectors import VectorIndex
from ..base import (
    INACTIVE_STATUSES,
    MAX_INSERT_ATTEMPTS,
    STATS_COUNTED,
    MemoryQuery,
    insert_gave_up,
    stats_report,
    suffixed_id,
)
from . import migrations as _migrations
from .keywordindexes import KeywordIndexes
from .migrations import _INACTIVE_SQL, _split_script
from .rowcache import RowCache

__all__ = ["SQLiteConnection"]

_SCOPE_COLUMNS = {**SCOPE_FIELDS, "scopeKind": "mode", "scopeId": "COALESCE(hai_id, agent_wallet)"}


def _agent_clause(agent_wallet: str | None) -> tuple[str, tuple[str, ...]]:
    """The SQL appended to a by-id ``WHERE`` so it matches only ``agent_wallet``'s row (nothing
    when None: any agent's)."""
    return (" AND agent_wallet = ?", (agent_wallet,)) if agent_wallet is not None else ("", ())


def _json_path(path: str) -> str:
    return "$" + "".join(f'."{seg}"' for seg in path.split("."))


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


def _qualify(where: str, alias: str) -> str:
    """Prefix the bare column names of a WHERE clause built for one table with ``alias.``."""
    import regex

    cols = ("agent_wallet", "user_address", "thread_id", "mode", "hai_id", "status", "source", "metadata", "doc")
    return regex.sub(
        r"(?<![\w.'\"])(" + "|".join(cols) + r")(?![\w'\"])", lambda m: f"{alias}.{m.group(1)}", where
    )


class SQLiteConnection:
    """The connection object every role of :class:`~manowar_memory.stores.sqlite.SQLiteStore` works
    over (one module per role mixes into it): the path, connections, locks and vector indexes."""


    name = "sqlite"

    #: BM25 weight of a row's ``context`` column relative to its content (1.0) in the keyword lane.
    context_weight: float = 0.5

    #: The keyword lane first reads this many full-text matches per result wanted (from the
    #: index alone) and checks only those rows against the scope filter; it falls back to
    #: every match when fewer than the results wanted pass. Results are identical either way
    #: (0: always the statement over every match).
    keyword_pool_factor: int = 4

    #: The keyword lane's budget of full-text matches to score, per scope searched. FTS5 scores
    #: every row holding any of the query's OR-ed terms before it keeps the best, so at a
    #: million rows a few common words cost milliseconds. The lane first reads each term's
    #: number of rows in the scope (cheap: no scoring); when their sum is over the budget, it
    #: leaves out the commonest terms (those adding least to a row's score) while the rarer
    #: ones stay, and reports how many (:class:`~manowar_memory.stores.base.KeywordHits`).
    #: Under the budget the search is exact. 0, the default, never prunes: pruning trades
    #: recall for time (``benchmarks/scale.py pre-turn`` reports the keyword lane's recall@10
    #: against the unpruned lane; on its synthetic million-row scope a budget of 4000 kept
    #: about 0.6 of it), so it is for scopes of hundreds of thousands of rows, set knowingly.
    keyword_postings_budget: int = 0

    #: Matches from which the keyword lane stops asking FTS5 to score a scope and scores it in
    #: process instead. FTS5's ``bm25()`` reads each matching row's length from disk (about a
    #: microsecond a row: over ten milliseconds for common words at a million rows), on top of a
    #: fixed cost per query. When the query's terms are held by at least this many rows of a scope
    #: (their document counts, read without scoring), the store builds that scope's
    #: :class:`~manowar_memory.stores._keywords.ScopeKeywordIndex` (the scope's rows read once:
    #: tens of milliseconds for a thousand rows, seconds at a million), keeps it in step with the
    #: table by revision, and scores the scope's matches with it from then on: the same BM25
    #: scores, the same results, in less time than FTS5 takes from a few hundred rows up. 0 turns
    #: it off. The index lives in memory only (rebuilt after a restart).
    keyword_index_min_matches: int = 200

    #: Rows the whole full-text table must hold before the keyword lane considers scoring a scope
    #: in process (:attr:`keyword_index_min_matches`): under it no scope is large enough to gain,
    #: and the lane skips reading its terms' document counts (one statement per scope a query).
    keyword_index_min_rows: int = 1_000

    #: Rows the in-process keyword indexes hold in all, past which the index of the scope searched
    #: longest ago is dropped (its scope is scored by FTS5 until it is built again, in the
    #: background): they take a few kilobytes a row for a scope of hundreds of rows, about one for
    #: thousands. The index just built is always kept. A store with a scope near this size should
    #: raise it, or that scope's index is dropped whenever another scope's is built after it was
    #: last searched. 0: no bound.
    keyword_index_max_rows: int = 1_000_000

    #: Build a scope's in-process keyword index on a background thread (file stores): the query
    #: that finds the scope large, and those after it until the index is ready, are scored by
    #: FTS5 as before, instead of waiting for the scope's rows to be read (seconds at a million
    #: rows). False builds it inside that query. In-memory stores always build inline (their one
    #: connection is shared). :meth:`wait_for_keyword_indexes` waits for builds under way.
    keyword_index_in_background: bool = True

    #: Bytes of a database file each connection maps into memory (``PRAGMA mmap_size``; 0, the
    #: default, reads pages with read calls). One connection's random row reads get cheaper
    #: mapped (keyword lane over 1M rows: 22 to 17 ms CPU), but each thread's connection maps
    #: the file anew and takes its own page faults: ``pre_turn`` at 100k rows measured ~1 ms
    #: CPU slower with it, so it is off unless set (benchmarks/scale.py pre-turn).
    mmap_size: int = 0


    def __init__(
        self, path: str | Path = ":memory:", *, context_weight: float | None = None, busy_timeout: float = 30.0,
        create_dirs: bool = True, keyword_postings_budget: int | None = None,
        keyword_index_min_matches: int | None = None,
    ) -> None:
        self.path = str(path)
        if keyword_index_min_matches is not None:
            if isinstance(keyword_index_min_matches, bool) or not isinstance(keyword_index_min_matches, int) \
                    or keyword_index_min_matches < 0:
                raise StoreError(f"keyword_index_min_matches must be an int >= 0, got {keyword_index_min_matches!r}")
            self.keyword_index_min_matches = keyword_index_min_matches
        if keyword_postings_budget is not None:
            if isinstance(keyword_postings_budget, bool) or not isinstance(keyword_postings_budget, int) \
                    or keyword_postings_budget < 0:
                raise StoreError(f"keyword_postings_budget must be an int >= 0, got {keyword_postings_budget!r}")
            self.keyword_postings_budget = keyword_postings_budget
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
        self._row_cache = RowCache()  # rows the lanes read, by rowid and revision
        self._keyword_indexes = KeywordIndexes()  # in-process BM25, by full-text scope
        self._keyword_builds: dict[int, threading.Thread] = {}  # scopes whose index is being built
        self._keyword_lock = threading.Lock()
        self._closed = False
        with self._conn() as conn:
            self._migrate(conn)

    # -- connections --
    def _open(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=self.busy_timeout, check_same_thread=False, isolation_level=None)
        conn.row_factory = sqlite3.Row
        conn.create_function(_fts.TERMS_FUNCTION, 2, _fts.scoped_terms, deterministic=True)
        conn.execute(_sql.fts_vocab_create())
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
            known = {name for name, _ in _migrations.MIGRATIONS}
            if done - known:
                raise StoreError(
                    f"{self.path} was written by a newer manowar-memory (migrations {sorted(done - known)}); upgrade"
                )
            for name, migrate in _migrations.MIGRATIONS:
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
        with self._keyword_lock:
            builds = list(self._keyword_builds.values())
        for thread in builds:  # they stop at their next check of _closed
            thread.join()
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
            clause, values = _sql.filter_where(q.filters, lambda p: SQLiteConnection._path_expr(p, json_col, source_col))
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


    def _insert(self, conn: sqlite3.Connection, rec: MemoryRecord) -> str:
        """Inside a write transaction: insert one row; a colliding id gets a suffix."""
        rev = self._next_rev(conn)
        for attempt in range(MAX_INSERT_ATTEMPTS):
            memory_id = suffixed_id(rec.id, attempt)
            try:
                conn.execute(_INSERT_SQL, _insert_params(rec, memory_id, rev))
                return memory_id
            except sqlite3.IntegrityError as exc:
                if "memory.id" not in str(exc):
                    raise StoreError(f"cannot insert memory row {rec.id}: {exc}") from exc
        raise insert_gave_up(rec.id)


    def _insert_many(self, conn: sqlite3.Connection, records: Sequence[MemoryRecord]) -> list[str]:
        """Inside a write transaction: insert ``records`` under their own ids, which the caller
        checked are free and distinct, in one statement (revs numbered in order, as
        :meth:`_insert` one by one would)."""
        if not records:
            return []
        last = int(conn.execute("UPDATE counters SET value = value + ? WHERE name = 'memory_rev' RETURNING value",
                                (len(records),)).fetchone()[0])
        first = last - len(records) + 1
        try:
            conn.executemany(_INSERT_SQL, [_insert_params(rec, rec.id, first + i) for i, rec in enumerate(records)])
        except sqlite3.IntegrityError as exc:
            raise StoreError(f"cannot insert memory rows {records[0].id}...{records[-1].id}: {exc}") from exc
        return [rec.id for rec in records]


    def _row_to_record(self, row: Sequence[Any], with_embedding: bool = False) -> MemoryRecord:
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


    @staticmethod
    def _fts_scopes(conn: sqlite3.Connection, query: MemoryQuery) -> list[tuple[int, tuple[str, str | None]]]:
        """The ``fts_scopes`` numbers a query reads, each with its ``(agent_wallet, user_address)``:
        its user's, and the agent's rows of no user (the agent's alone for a query of no user),
        in order; none that holds no row yet."""
        s = query.scope
        owners = [(s.agent_wallet, s.user_address)] + ([(s.agent_wallet, None)] if s.user_address is not None else [])
        by_key = {_sql.fts_scope_key(agent, user): (agent, user) for agent, user in owners}
        return [(int(r[0]), by_key[r[1]]) for r in conn.execute(
            f"SELECT id, key FROM fts_scopes WHERE key IN ({','.join('?' * len(by_key))}) ORDER BY id", list(by_key))]


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


_INSERT_SQL = (
    "INSERT INTO memory (id, agent_wallet, user_address, thread_id, mode, hai_id, content, "
    "context, source, status, retention, fact_hash, decay_score, access_count, created_at, "
    "updated_at, last_accessed_at, metadata, embedding, embedding_model, rev) "
    "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)"
)


def _insert_params(rec: MemoryRecord, memory_id: str, rev: int) -> tuple[Any, ...]:
    """The :data:`_INSERT_SQL` parameters of ``rec`` stored as ``memory_id`` at ``rev``."""
    emb = np.asarray(rec.embedding, dtype=np.float32).tobytes() if rec.embedding is not None else None
    return (
        memory_id, rec.agent_wallet, rec.user_address, rec.thread_id, rec.mode, rec.hai_id,
        rec.content, rec.context, rec.source, rec.metadata.get("status"), rec.metadata.get("retention"),
        rec.metadata.get("factHash"), rec.decay_score, rec.access_count, rec.created_at,
        rec.updated_at, rec.last_accessed_at, json.dumps(rec.metadata, ensure_ascii=False),
        emb, rec.embedding_model if emb is not None else None, rev,
    )
