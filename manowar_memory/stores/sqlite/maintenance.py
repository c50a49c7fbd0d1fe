"""The maintenance role of the SQLite store (:class:`~manowar_memory.stores.base.MaintenanceStore`)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from ...records import MemoryRecord
from .. import _sql
from ..base import (
    PageCursor,
    ScopeKey,
    check_memory_changes,
)
from .connection import SQLiteConnection, _agent_clause

__all__ = ["SQLiteMaintenance"]


class SQLiteMaintenance(SQLiteConnection):
    """Bulk updates and deletes, paging, retention counts, erasure, agent listing."""

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


    def page_memories(self, agent_wallet: str | None, after: PageCursor, limit: int, *,
                      users: Sequence[str | None] | None = None) -> tuple[list[MemoryRecord], PageCursor]:
        """Up to ``limit`` rows after the rowid ``after`` (every status, no embeddings), rowid order."""
        sql, params = _sql.memory_page(agent_wallet, int(after or 0), limit, users)
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
