"""The memory-rows role of the SQLite store (:class:`~manowar_memory.stores.base.MemoryRowStore`)."""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, cast

import numpy as np

from ...errors import StoreError
from ...records import MemoryRecord
from .. import _fts, _keywords, _sql
from .._keywords import ScopeKeywordIndex
from .._vectors import VectorIndex
from ..base import (
    Hit,
    KeywordHits,
    MemoryQuery,
    VectorSearchInfo,
    check_memory_changes,
    event_date_keys,
    is_unique_fact,
    require_unique_fact,
)
from .connection import _MEMORY_COLUMNS, SQLiteConnection, _agent_clause, _qualify, _VectorIndex
from .migrations import _ACTIVE_FACT_WHERE, _INACTIVE_SQL

__all__ = ["SQLiteRows"]

log = logging.getLogger("manowar_memory")


class SQLiteRows(SQLiteConnection):
    """Memory rows: writes, reads by id and scope, the keyword and vector lanes."""

    def add_memories(self, records: Sequence[MemoryRecord]) -> list[str]:
        with self._write() as conn:
            return [memory_id for memory_id, _ in self._add_rows(conn, records, keyed=False)]


    def add_memories_if_absent(self, records: Sequence[MemoryRecord]) -> list[tuple[str, bool]]:
        with self._write() as conn:  # BEGIN IMMEDIATE: the id checks and the inserts are one transaction
            return self._add_rows(conn, records, keyed=True)


    def _add_rows(self, conn: sqlite3.Connection, records: Sequence[MemoryRecord], *,
                  keyed: bool) -> list[tuple[str, bool]]:
        """Inside a write transaction: store ``records`` in order, as ``(id, inserted)``. With
        ``keyed``, a row whose id its agent already holds is already stored. Runs of rows with
        a free id not seen before in the call, not unique facts, are inserted in one statement
        each; the others go row by row (:meth:`_add_row`: a suffixed id, a reinforced fact)."""
        holders = self._id_holders(conn, records)  # id -> agent, kept up to date as rows go in
        out: list[tuple[str, bool]] = []
        run: list[MemoryRecord] = []

        def flush() -> None:
            out.extend((memory_id, True) for memory_id in self._insert_many(conn, run))
            run.clear()

        for rec in records:
            if rec.id in holders or is_unique_fact(rec.source, rec.metadata):
                flush()
                out.append(self._add_row(conn, rec, keyed and holders.get(rec.id) == rec.agent_wallet))
                holders.setdefault(out[-1][0], rec.agent_wallet)  # a suffixed id is taken now too
            else:
                run.append(rec)
                holders[rec.id] = rec.agent_wallet
        flush()
        return out


    def _add_row(self, conn: sqlite3.Connection, rec: MemoryRecord, stored: bool) -> tuple[str, bool]:
        """Inside a write transaction: store one row as ``(id, inserted)``; ``stored``: a keyed row
        its agent already holds; a unique fact whose hash is held reinforces its holder."""
        if stored:
            return rec.id, False
        holder = self._reinforce_fact(conn, rec) if is_unique_fact(rec.source, rec.metadata) else None
        return (holder["id"], False) if holder is not None else (self._insert(conn, rec), True)


    @staticmethod
    def _id_holders(conn: sqlite3.Connection, records: Sequence[MemoryRecord]) -> dict[str, str]:
        """The agent holding each id of ``records`` already stored (an id is unique in the table)."""
        ids = list(dict.fromkeys(rec.id for rec in records))
        holders: dict[str, str] = {}
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            holders.update((r[0], r[1]) for r in conn.execute(
                f"SELECT id, agent_wallet FROM memory WHERE id IN ({','.join('?' * len(chunk))})", chunk))
        return holders


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


    def delete_memory(self, memory_id: str, *, agent_wallet: str | None = None) -> bool:
        agent_sql, agent_params = _agent_clause(agent_wallet)
        with self._write() as conn:
            row = conn.execute(f"DELETE FROM memory WHERE id = ?{agent_sql} RETURNING rowid",
                               (memory_id, *agent_params)).fetchone()
            if row is None:
                return False
            conn.execute("INSERT INTO memory_tombstones VALUES (?, ?)", (row[0], self._next_rev(conn)))
            return True


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


    def memories_created_between(self, query: MemoryQuery, start: int, end: int, limit: int) -> list[MemoryRecord]:
        """:meth:`~manowar_memory.stores.base.TimeRangeRows.memories_created_between`: a range of
        the (agent, user, created_at) index per user of the scope."""
        if end <= start:
            return []
        return self._rows_by_time(query, "created_at >= ? AND created_at < ?", [int(start), int(end)],
                                  "created_at, rowid", limit)

    def memories_created_before(self, query: MemoryQuery, end: int, limit: int) -> list[MemoryRecord]:
        """:meth:`~manowar_memory.stores.base.EarlierRows.memories_created_before`: the
        (agent, user, created_at) index read backwards from ``end``."""
        return self._rows_by_time(query, "created_at < ?", [int(end)], "created_at DESC, rowid DESC", limit)

    def _rows_by_time(self, query: MemoryQuery, bound: str, bound_params: list[int], order: str,
                      limit: int) -> list[MemoryRecord]:
        """At most ``limit`` rows of ``query`` within the ``created_at`` bound, in ``order``, with embeddings."""
        if limit <= 0:
            return []
        where, params = self._memory_where(query)
        sql = f"SELECT {_MEMORY_COLUMNS} FROM memory WHERE {where} AND {bound} ORDER BY {order} LIMIT ?"
        with self._conn() as conn:
            rows = conn.execute(sql, [*params, *bound_params, int(limit)]).fetchall()
        return [self._row_to_record(r, with_embedding=True) for r in rows]

    def memories_dated_between(self, query: MemoryQuery, start: int, end: int, limit: int) -> list[MemoryRecord]:
        """:meth:`~manowar_memory.stores.base.EventDateRows.memories_dated_between`: ranges of the
        (agent, user, eventDate) index (migration m012), one per user of the scope and kind of
        date (:func:`~manowar_memory.stores._sql.event_date_rowids`); the scope filter then
        decides which rows qualify."""
        if limit <= 0 or end <= start:
            return []
        s = query.scope
        arms, arm_params = _sql.event_date_rowids(s.agent_wallet, s.user_address, *event_date_keys(start, end))
        where, params = self._memory_where(query)
        sql = (f"SELECT {_MEMORY_COLUMNS} FROM memory WHERE rowid IN ({arms}) AND {where} "
               f"ORDER BY {_sql.EVENT_DATE_SQL}, created_at, rowid LIMIT ?")
        with self._conn() as conn:
            rows = conn.execute(sql, [*arm_params, *params, int(limit)]).fetchall()
        return [self._row_to_record(r, with_embedding=True) for r in rows]


    def iter_memories(
        self, agent_wallet: str | None = None, *, created_from: int | None = None,
        created_to: int | None = None, batch_size: int = 1000, users: Sequence[str | None] | None = None,
    ) -> Iterator[MemoryRecord]:
        last = 0
        while True:
            sql, params = _sql.memory_page(agent_wallet, last, batch_size, users, created_from=created_from,
                                           created_to=created_to, with_embedding=True)
            with self._conn() as conn:
                rows = conn.execute(sql, params).fetchall()
            if not rows:
                return
            for row in rows:
                yield self._row_to_record(row, with_embedding=True)
            last = rows[-1]["rowid"]


    def count_memories(self, query: MemoryQuery) -> int:
        where, params = self._memory_where(query)
        with self._conn() as conn:
            return int(conn.execute(f"SELECT COUNT(*) FROM memory WHERE {where}", params).fetchone()[0])


    def keyword_search(self, query: MemoryQuery, text: str, limit: int) -> KeywordHits:
        phrases = _fts.query_phrases(text)
        if not phrases:
            return KeywordHits()
        where, params = self._memory_where(query)
        with self._conn() as conn:
            scopes = self._fts_scopes(conn, query)
            if not scopes:
                return KeywordHits()
            table = self._fts_table_size(conn)
            large = self.keyword_index_min_matches > 0 and self.keyword_index_min_rows <= table[0]
            counts = self._term_counts(conn, [sid for sid, _ in scopes], phrases, large)
            indexed = self._keyword_indexes_for(conn, scopes, phrases, counts) if large else {}
            arms, pruned = self._keyword_arms([sid for sid, _ in scopes if sid not in indexed], phrases, counts)
            matches = self._indexed_matches(indexed, phrases, table)
            picked = self._keyword_rows(conn, arms, matches, where, params, limit)
        return KeywordHits((Hit(record, score) for record, score in picked), pruned_terms=pruned)


    @staticmethod
    def _fts_table_size(conn: sqlite3.Connection) -> tuple[int, int]:
        """``(rows, tokens)`` of the whole memory full-text table (its averages record)."""
        blob = conn.execute("SELECT block FROM memory_fts_data WHERE id = 1").fetchone()
        return _keywords.averages(blob[0] if blob else None)


    def _term_counts(self, conn: sqlite3.Connection, scope_ids: Sequence[int],
                     phrases: list[tuple[str, ...]], large: bool) -> dict[int, dict[str, int]]:
        """Each scope's document count of each word of ``phrases`` (scoped terms), for the scopes
        not scored in process, when the pruning budget or (for a ``large`` table) the in-process
        index needs them."""
        if self.keyword_postings_budget <= 0 and not large:
            return {}
        out: dict[int, dict[str, int]] = {}
        for sid in scope_ids:
            if large and sid in self._keyword_indexes:  # scored in process: no FTS5 arm to prune
                continue
            sql, term_params = _sql.term_doc_counts(_fts.phrase_words(sid, phrases))
            out[sid] = {str(t): int(n) for t, n in conn.execute(sql, term_params)}
        return out


    def _keyword_indexes_for(self, conn: sqlite3.Connection, scopes: Sequence[tuple[int, tuple[str, str | None]]],
                             phrases: list[tuple[str, ...]],
                             counts: dict[int, dict[str, int]]) -> dict[int, ScopeKeywordIndex]:
        """The in-process indexes (:attr:`keyword_index_min_matches`) that score this query's
        scopes, up to date: the ones held, and new ones for scopes where the query's words are
        held by at least that many rows. None when a phrase is one the index does not hold."""
        threshold = self.keyword_index_min_matches
        if threshold <= 0 or not ScopeKeywordIndex.holds(phrases):
            return {}
        with self._keyword_lock:
            self._sync_keyword_indexes(conn)
            out: dict[int, ScopeKeywordIndex] = {}
            for sid, (agent, user) in scopes:
                index = self._keyword_indexes.get(sid)
                if index is None and sum(counts.get(sid, {}).values()) >= threshold:
                    if self.keyword_index_in_background and not self._memory:
                        self._start_keyword_build(sid, agent, user)  # FTS5 scores the scope meanwhile
                    else:
                        index = self._build_keyword_index(conn, sid, agent, user)
                        self._keyword_indexes.add(index, self.keyword_index_max_rows)
                if index is not None:
                    out[sid] = index
            return out


    def _start_keyword_build(self, sid: int, agent: str, user: str | None) -> None:
        """Build scope ``sid``'s index on a thread of its own (its own connection), unless one is
        already under way; the index joins the others when built. Caller holds the keyword lock."""
        if sid in self._keyword_builds:
            return

        def build() -> None:
            try:
                with self._conn() as conn:
                    index = self._build_keyword_index(conn, sid, agent, user)
                with self._keyword_lock:
                    if not self._closed:
                        self._keyword_indexes.add(index, self.keyword_index_max_rows)  # synced from its revision by the next search
            except Exception as exc:  # noqa: BLE001 - the scope stays on FTS5; a later search tries again
                log.warning("keyword index build of scope %s failed (%s: %s); FTS5 scores it", sid,
                            type(exc).__name__, exc)
            finally:
                with self._keyword_lock:
                    self._keyword_builds.pop(sid, None)

        thread = threading.Thread(target=build, name=f"manowar-keyword-index-{sid}", daemon=True)
        self._keyword_builds[sid] = thread
        thread.start()


    def wait_for_keyword_indexes(self, timeout: float | None = None) -> bool:
        """Wait until the in-process keyword indexes being built (:attr:`keyword_index_in_background`)
        are ready; False if ``timeout`` seconds passed first. For warm-ups and benchmarks."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._keyword_lock:
                builds = list(self._keyword_builds.values())
            if not builds:
                return True
            for thread in builds:
                thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
                if thread.is_alive():
                    return False


    def _build_keyword_index(self, conn: sqlite3.Connection, sid: int, agent: str, user: str | None) -> ScopeKeywordIndex:
        """Scope ``sid``'s in-process index, from its rows as they are now."""
        index = ScopeKeywordIndex(sid)
        index.rev = self._memory_rev(conn)  # rows changed after this are replayed by the next sync
        sql = ("SELECT rowid, content, context FROM memory WHERE agent_wallet = ? AND "
               + ("user_address IS NULL" if user is None else "user_address = ?"))
        rows = conn.execute(sql, [agent] if user is None else [agent, user])
        index.load(self._until_closed(rows))
        return index


    def _until_closed(self, rows: Iterable[tuple[int, str | None, str | None]]) -> Iterator[tuple[int, str | None, str | None]]:
        """``rows``, stopping with :class:`StoreError` once the store is closed (a background
        build must not read a connection :meth:`close` is closing)."""
        for i, row in enumerate(rows):
            if i % 64 == 0:
                if self._closed:
                    raise StoreError("the store was closed during a keyword index build")
                time.sleep(0)  # let a waiting search take the interpreter (the build is pure Python)
            yield row


    @staticmethod
    def _memory_rev(conn: sqlite3.Connection) -> int:
        return int(conn.execute("SELECT value FROM counters WHERE name = 'memory_rev'").fetchone()[0])


    def _sync_keyword_indexes(self, conn: sqlite3.Connection) -> None:
        """Bring every in-process index up to the table's revision: the rows deleted and written
        since go to :meth:`KeywordIndexes.apply <manowar_memory.stores.sqlite.keywordindexes.KeywordIndexes.apply>`,
        tombstones first, as for the vector index. Caller holds the keyword lock."""
        indexes = self._keyword_indexes
        current = self._memory_rev(conn)
        if not indexes.stale(current):
            return
        since = indexes.rev
        tombstones = conn.execute("SELECT row_id, rev FROM memory_tombstones WHERE rev > ? AND rev <= ?",
                                  (since, current)).fetchall()
        written = conn.execute(f"SELECT m.rowid, {_sql.fts_scope_id('m')}, m.content, m.context, m.rev FROM memory m "
                               "WHERE m.rev > ? AND m.rev <= ?", (since, current))
        indexes.apply(tombstones, written, current)


    def _indexed_matches(self, indexed: dict[int, ScopeKeywordIndex], phrases: list[tuple[str, ...]],
                         table: tuple[int, int]) -> tuple[np.ndarray, np.ndarray] | None:
        """Every match of the scopes scored in process, as ``(rowids, scores)`` best first (ties
        by rowid), scored as FTS5 would over the whole ``table``'s ``(rows, tokens)``; None when
        none is."""
        if not indexed:
            return None
        rows, tokens = table
        with self._keyword_lock:  # a sync from another thread must not change an index mid-read
            parts = [index.matches(phrases, rows, tokens, self.context_weight) for index in indexed.values()]
        if len(parts) == 1:
            return parts[0]
        rowids = np.concatenate([p[0] for p in parts])
        scores = np.concatenate([p[1] for p in parts])
        order = np.lexsort((rowids, -scores))
        return rowids[order], scores[order]


    def _keyword_arms(self, scope_ids: Sequence[int], phrases: list[tuple[str, ...]],
                      counts: dict[int, dict[str, int]]) -> tuple[list[tuple[int, str]], int]:
        """The ``(scope_id, match)`` arms of a keyword search, each scope's query pruned to
        :attr:`keyword_postings_budget` (:func:`~manowar_memory.stores._fts.prune_phrases`,
        over the terms' document counts in the scope, ``counts``), and how many of the query's
        phrases were left out of at least one arm."""
        budget = self.keyword_postings_budget
        arms: list[tuple[int, str]] = []
        pruned: set[tuple[str, ...]] = set()
        for sid in scope_ids:
            kept = phrases
            if budget > 0:
                kept, left_out = _fts.prune_phrases(sid, phrases, counts.get(sid, {}), budget)
                pruned.update(left_out)
            arms.append((sid, _fts.scoped_match(sid, kept)))
        return arms, len(pruned)


    def _keyword_rows(self, conn: sqlite3.Connection, arms: list[tuple[int, str]],
                      indexed: tuple[np.ndarray, np.ndarray] | None, where: str, params: list[Any],
                      limit: int) -> list[tuple[MemoryRecord, float]]:
        """The keyword lane's best ``limit`` rows (no embedding) with their scores, best first.

        They come from the best ``keyword_pool_factor * limit`` full-text matches of the
        ``arms`` FTS5 scores, read from the index alone, merged with ``indexed`` (every match of
        the scopes scored in process), whose memory rows are read ``limit`` at a time in that
        order, each read keeping only rows that pass the scope filter: one read when they all
        pass, as they usually do (the index is already split by scope). Only when fewer than
        ``limit`` of the pool pass does the lane rank every match against the filter."""
        pool = limit * self.keyword_pool_factor
        if pool > 0 or not arms:
            candidates: list[tuple[int, float]] = []
            ends: list[tuple[int, float]] = []  # the last candidate of each source that has more
            if arms:
                sql, pool_params = _sql.keyword_pool(arms, pool, self.context_weight)
                candidates = [(int(r[0]), float(r[1])) for r in conn.execute(sql, pool_params)]
                if len(candidates) >= pool:
                    ends.append(candidates[-1])
            if indexed is not None and indexed[0].shape[0]:
                head = max(pool, limit)
                top = list(zip(indexed[0][:head].tolist(), indexed[1][:head].tolist(), strict=True))
                if indexed[0].shape[0] > head:
                    ends.append(top[-1])
                candidates = sorted(candidates + top, key=lambda c: (-c[1], c[0])) if candidates else top
            # past the last candidate of a source that has more, its unread matches may rank first
            end = min((candidates.index(last) + 1 for last in ends), default=len(candidates))
            picked: list[tuple[MemoryRecord, float]] = []
            for start in range(0, end, limit):
                chunk = candidates[start:min(start + limit, end)]
                by_rowid = self._records_by_rowid(conn, [rowid for rowid, _ in chunk], where, params)
                picked += [(by_rowid[rowid], score) for rowid, score in chunk if rowid in by_rowid]
                if len(picked) >= limit:
                    return picked[:limit]
            if not ends:
                return picked  # exact: every match outside the pool ranks after the whole pool
        ranked: list[tuple[int, float]] = []
        if arms:
            sql, fts_params = _sql.keyword_rowids(arms, _qualify(where, "m"), params, limit, self.context_weight)
            ranked = [(int(r[0]), float(r[1])) for r in conn.execute(sql, fts_params)]
        if indexed is not None:
            every = list(zip(indexed[0].tolist(), indexed[1].tolist(), strict=True))
            ranked = sorted(ranked + self._passing(conn, every, where, params, limit), key=lambda c: (-c[1], c[0]))
        if not ranked:
            return []
        by_rowid = self._records_by_rowid(conn, [rowid for rowid, _ in ranked[:limit]])
        return [(by_rowid[rowid], score) for rowid, score in ranked[:limit] if rowid in by_rowid]


    def _passing(self, conn: sqlite3.Connection, ranked: list[tuple[int, float]], where: str, params: list[Any],
                 limit: int) -> list[tuple[int, float]]:
        """The first ``limit`` of ``ranked`` whose rows pass ``where``, read ``limit`` at a time."""
        out: list[tuple[int, float]] = []
        for start in range(0, len(ranked), limit):
            chunk = ranked[start:start + limit]
            sql, rev_params = _sql.row_revisions([rowid for rowid, _ in chunk], where, params)
            passing = {int(r[0]) for r in conn.execute(sql, rev_params)}
            out += [c for c in chunk if c[0] in passing]
            if len(out) >= limit:
                break
        return out[:limit]


    def _records_by_rowid(self, conn: sqlite3.Connection, rowids: Sequence[int], where: str | None = None,
                          params: Sequence[Any] = ()) -> dict[int, MemoryRecord]:
        """The records (no embedding) of the rows among ``rowids`` that pass ``where`` (every
        one when None), by rowid; rows deleted meanwhile are missing. When the row cache holds
        some of them, only their revisions and access columns are read first, and a row held at
        its current revision is not read again (:mod:`~manowar_memory.stores.sqlite.rowcache`);
        the others are read whole, in one statement, and cached."""
        if not self._row_cache.holds_any(rowids):
            return self._read_rows(conn, rowids, where, params)
        out: dict[int, MemoryRecord] = {}
        missing: list[int] = []
        sql, rev_params = _sql.row_revisions(rowids, where, params)
        for rowid, rev, access_count, last_accessed_at in conn.execute(sql, rev_params):
            record = self._row_cache.get(rowid, rev, access_count, last_accessed_at)
            if record is None:
                missing.append(rowid)
            else:
                out[rowid] = record
        if missing:
            out.update(self._read_rows(conn, missing))
        return out


    def _read_rows(self, conn: sqlite3.Connection, rowids: Sequence[int], where: str | None = None,
                   params: Sequence[Any] = ()) -> dict[int, MemoryRecord]:
        """The rows among ``rowids`` that pass ``where``, read whole and put in the row cache."""
        out: dict[int, MemoryRecord] = {}
        sql, row_params = _sql.rows_by_rowid(rowids, where, params)
        for row in conn.execute(sql, row_params):
            *values, rev = row
            out[values[0]] = record = self._row_to_record(values)
            self._row_cache.put(values[0], rev, record)
        return out


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
                mask, count = index.mask_and_count(query)
                if query.filters or (not query.durable and query.scope.thread_id):
                    where, params = self._memory_where(query)
                    mask = index.only(mask, (r[0] for r in conn.execute(f"SELECT rowid FROM memory WHERE {where}", params)))
                    count = int(np.count_nonzero(mask))
                info.candidates = count
                picked = index.top(q, mask, limit, index.groups_of(query), count)
                if not picked:
                    return [], info
            info.skipped_other_models = self._other_model_rows.get(model_id, 0)
            by_rowid = self._records_by_rowid(conn, [cast(int, rowid) for rowid, _ in picked])  # the index's keys
        hits = [Hit(by_rowid[rowid], (1.0 + cos) / 2.0) for rowid, cos in picked if rowid in by_rowid]
        return hits, info
