"""Pure builders for the SQLite store's maintenance statements: each returns ``(sql, params)``.

Nothing here opens a connection, so ``tests/test_sql_builders.py`` checks the exact text;
:mod:`manowar_memory.stores.sqlite` runs the same statements. Memory rows are read in
``rowid`` order (insertion order), the SQLite twin of MongoDB's ``_id`` order.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ..filters import FilterValue, Group, Operand, Ops, Primitive
from ._fts import TERMS_FUNCTION
from .base import INACTIVE_STATUSES

__all__ = [
    "EVENT_DATE_SQL",
    "FTS_ROWID_SHIFT",
    "FTS_VOCAB",
    "MEMORY_COLUMNS",
    "Statement",
    "count_stale_sessions",
    "count_transcripts_older_than",
    "event_date_rowids",
    "expiry_column",
    "filter_where",
    "fts_rowid",
    "fts_scope_id",
    "fts_scope_insert",
    "fts_scope_key",
    "fts_scope_key_sql",
    "fts_sync_triggers",
    "fts_terms",
    "fts_vocab_create",
    "inactive_list",
    "keyword_pool",
    "keyword_rowids",
    "memory_columns",
    "memory_page",
    "memory_rows_of_users",
    "memory_update",
    "memory_user_counts",
    "not_expired",
    "row_revisions",
    "rows_by_rowid",
    "stale_session_scopes",
    "term_doc_counts",
    "transcript_scopes_older_than",
    "transcripts_created_between",
    "users_clause",
]

#: A statement and its parameters.
Statement = tuple[str, list[Any]]

#: The memory columns a record is built from (``rowid`` first, the embedding blob included).
MEMORY_COLUMNS = (
    "rowid, id, agent_wallet, user_address, thread_id, mode, hai_id, content, context, source, decay_score, "
    "access_count, created_at, updated_at, last_accessed_at, metadata, embedding, embedding_model"
)
_SCOPE = "agent_wallet, user_address, mode, hai_id"
_STALE_SESSION = "expires_at <= ? OR last_accessed_at < ?"


def inactive_list(statuses: Sequence[str] = INACTIVE_STATUSES) -> str:
    """The SQL list of the inactive statuses, ``('deleted', 'superseded', ...)``, for ``status NOT IN``."""
    return "(" + ", ".join("'" + s.replace("'", "''") + "'" for s in statuses) + ")"


def expiry_column(metadata: str = "metadata") -> str:
    """SQL of a memory row's expiry: ``metadata.expiresAt`` when it is a JSON number, else NULL."""
    return (f"CASE WHEN json_type({metadata}, '$.expiresAt') IN ('integer', 'real') "
            f"THEN json_extract({metadata}, '$.expiresAt') END")


def not_expired(now: int, metadata: str = "metadata") -> Statement:
    """The clause keeping memory rows that have not expired at ``now`` (epoch ms): no numeric
    ``metadata.expiresAt``, or one after ``now``. MongoDB's twin is
    :func:`~manowar_memory.stores._mql.not_expired`; a non-number never expires on either."""
    clause = (f"(COALESCE(json_type({metadata}, '$.expiresAt'), '') NOT IN ('integer', 'real') "
              f"OR json_extract({metadata}, '$.expiresAt') > ?)")
    return clause, [int(now)]


def memory_columns(*, with_embedding: bool = True) -> str:
    """:data:`MEMORY_COLUMNS`, or the same list with ``NULL AS embedding`` (no blob read)."""
    return MEMORY_COLUMNS if with_embedding else _MEMORY_COLUMNS_NO_BLOB


_MEMORY_COLUMNS_NO_BLOB = ", ".join(
    "NULL AS embedding" if c == "embedding" else c for c in (c.strip() for c in MEMORY_COLUMNS.split(","))
)


#: A memory row's FTS5 rowid is its scope's number (:func:`fts_rowid`) shifted by this many
#: bits, plus its own rowid: each agent-and-user scope owns one rowid range of the full-text
#: index, so a search reads only its scope's range however many other scopes the store holds.
FTS_ROWID_SHIFT = 36
_FTS_SCOPE_MASK = (1 << (63 - FTS_ROWID_SHIFT)) - 1  # scope numbers past it share ranges (filtered exactly)


def fts_scope_key_sql(row: str) -> str:
    """SQL of the ``fts_scopes`` key of ``row`` (``new``, ``old`` or a table alias): the agent id's
    UTF-8 bytes in hex, then ``n`` for no user or ``u`` and the user id's bytes in hex."""
    return (f"hex({row}.agent_wallet) || CASE WHEN {row}.user_address IS NULL THEN 'n' "
            f"ELSE 'u' || hex({row}.user_address) END")


def fts_scope_key(agent_wallet: str, user_address: str | None) -> str:
    """The ``fts_scopes`` key of rows of this agent and user, as :func:`fts_scope_key_sql` computes it."""
    agent = agent_wallet.encode("utf-8").hex().upper()
    return f"{agent}n" if user_address is None else f"{agent}u{user_address.encode('utf-8').hex().upper()}"


def fts_scope_id(row: str) -> str:
    """SQL of the ``fts_scopes`` number of memory row ``row`` (its scope must be in ``fts_scopes``)."""
    return f"(SELECT id FROM fts_scopes WHERE key = {fts_scope_key_sql(row)})"


def fts_scope_insert(row: str) -> str:
    """A trigger's statement that numbers ``row``'s scope in ``fts_scopes`` if it is new. Not
    ``INSERT OR IGNORE``: the conflict clause of the statement firing a trigger overrides the
    trigger's own, so an upsert or ``INSERT OR REPLACE`` would make it fail, or renumber the
    scope and strand its index entries."""
    key = fts_scope_key_sql(row)
    return f"INSERT INTO fts_scopes(key) SELECT {key} WHERE NOT EXISTS (SELECT 1 FROM fts_scopes WHERE key = {key})"


def fts_rowid(row: str) -> str:
    """SQL of the FTS5 rowid of memory row ``row`` (its scope must be in ``fts_scopes``)."""
    return f"((({fts_scope_id(row)} & {_FTS_SCOPE_MASK}) << {FTS_ROWID_SHIFT}) | {row}.rowid)"


def fts_terms(row: str, column: str) -> str:
    """SQL of what a full-text index stores for ``row``'s ``column``: its scoped terms, computed
    by the function :data:`~manowar_memory.stores._fts.TERMS_FUNCTION` names
    (:func:`~manowar_memory.stores._fts.scoped_terms`)."""
    return f"{TERMS_FUNCTION}({fts_scope_id(row)}, {row}.{column})"


def fts_sync_triggers(table: str, fts: str, columns: Sequence[str], rowid: Callable[[str], str]) -> str:
    """The script that (re)creates the triggers keeping the contentless FTS5 table ``fts`` in
    step with ``table``: each of ``columns`` indexed as scoped terms (:func:`fts_terms`) under
    the FTS rowid ``rowid(row)`` gives for ``new`` or ``old``. A new scope is numbered first,
    and moving a row to another agent or user moves its entry."""
    cols = ", ".join(columns)

    def terms(row: str) -> str:
        return ", ".join(fts_terms(row, c) for c in columns)

    remove = f"INSERT INTO {fts}({fts}, rowid, {cols}) VALUES ('delete', {rowid('old')}, {terms('old')});"
    add = f"INSERT INTO {fts}(rowid, {cols}) VALUES ({rowid('new')}, {terms('new')});"
    return f"""
        DROP TRIGGER IF EXISTS {table}_ai;
        DROP TRIGGER IF EXISTS {table}_ad;
        DROP TRIGGER IF EXISTS {table}_au;
        CREATE TRIGGER {table}_ai AFTER INSERT ON {table} BEGIN
            {fts_scope_insert("new")};
            {add}
        END;
        CREATE TRIGGER {table}_ad AFTER DELETE ON {table} BEGIN
            {remove}
        END;
        CREATE TRIGGER {table}_au AFTER UPDATE OF {cols}, agent_wallet, user_address ON {table} BEGIN
            {fts_scope_insert("new")};
            {remove}
            {add}
        END;
        """


#: The per-connection ``fts5vocab`` table (``row`` kind) over the memory index: one row per term
#: with the number of rows holding it. Terms are scoped (:mod:`~manowar_memory.stores._fts`), so a
#: term's count is its scope's own.
FTS_VOCAB = "temp.memory_fts_vocab"


def fts_vocab_create() -> str:
    """The statement creating :data:`FTS_VOCAB` on a connection (a temporary table, nothing is
    written to the file; it reads the memory index, which may be created after it)."""
    return f"CREATE VIRTUAL TABLE IF NOT EXISTS {FTS_VOCAB} USING fts5vocab(main, memory_fts, 'row')"


def term_doc_counts(terms: Sequence[str]) -> Statement:
    """``(term, rows holding it)`` of each of ``terms`` (scoped terms) the memory index holds,
    read from :data:`FTS_VOCAB` by term (a missing term has no row). FTS5 counts the rows by
    walking the term's postings without scoring them, far cheaper than BM25 over them."""
    return f"SELECT term, doc FROM {FTS_VOCAB} WHERE term IN ({','.join('?' * len(terms))})", list(terms)


def _keyword_arms(arms: Sequence[tuple[int, str]], context_weight: float) -> Statement:
    """FTS5 arms, one per ``(scope_id, match)``: ``(fts_rowid, score)`` of every match of the
    scope's query (its scoped terms, :func:`~manowar_memory.stores._fts.scoped_match`) in the
    scope's rowid range."""
    sql = " UNION ALL ".join(
        f"SELECT rowid AS fts_rowid, -bm25(memory_fts, 1.0, {float(context_weight)!r}) AS score "
        f"FROM memory_fts WHERE memory_fts MATCH ? AND rowid BETWEEN ? AND ?"
        for _ in arms
    )
    arm_params: list[Any] = []
    for sid, match in arms:
        low = (sid & _FTS_SCOPE_MASK) << FTS_ROWID_SHIFT
        arm_params += [match, low, low + (1 << FTS_ROWID_SHIFT) - 1]
    return sql, arm_params


def keyword_pool(arms: Sequence[tuple[int, str]], pool: int, context_weight: float) -> Statement:
    """The first step of the keyword lane: ``(rowid, score)`` of the best ``pool`` full-text
    matches of the ``(scope_id, match)`` arms, in the lane's order (score descending, then
    memory rowid), read from the full-text index alone (no memory row is touched).

    If at least ``limit`` of them pass the scope filter (:func:`row_revisions`), the first
    ``limit`` passing ones are exactly what :func:`keyword_rowids` returns, because every row
    outside the pool comes later in that order; otherwise the store runs :func:`keyword_rowids`."""
    union, arm_params = _keyword_arms(arms, context_weight)
    mask = (1 << FTS_ROWID_SHIFT) - 1
    sql = (f"SELECT f.fts_rowid & {mask} AS memory_rowid, f.score FROM ({union}) f "
           "ORDER BY f.score DESC, memory_rowid LIMIT ?")
    return sql, [*arm_params, pool]


#: SQL of a memory row's event date (``metadata.eventDate``), as the (agent, user, eventDate)
#: index (migration m012) holds it.
EVENT_DATE_SQL = "json_extract(metadata, '$.eventDate')"


def event_date_rowids(agent_wallet: str, user_address: str | None, low: str, high: str,
                      coarse: Sequence[str]) -> Statement:
    """The rowids of the agent's rows, of the user and of no user (no user alone for
    ``user_address`` None), whose ``metadata.eventDate`` is at least ``low`` and under ``high``
    or one of ``coarse`` (:func:`~manowar_memory.stores.base.event_date_keys`): each a range of the
    (agent, user, eventDate) index. The caller applies the scope filter to the rows."""
    ev = EVENT_DATE_SQL
    arms: list[str] = []
    params: list[Any] = []
    for user in ([user_address, None] if user_address is not None else [None]):
        user_sql = "user_address IS NULL" if user is None else "user_address = ?"
        user_params = [] if user is None else [user]
        arms.append(f"SELECT rowid FROM memory INDEXED BY idx_memory_event_date WHERE agent_wallet = ? AND {user_sql} "
                    f"AND {ev} >= ? AND {ev} < ?")
        params += [agent_wallet, *user_params, low, high]
        if coarse:
            arms.append(f"SELECT rowid FROM memory INDEXED BY idx_memory_event_date WHERE agent_wallet = ? "
                        f"AND {user_sql} AND {ev} IN ({','.join('?' * len(coarse))})")
            params += [agent_wallet, *user_params, *coarse]
    return " UNION ALL ".join(arms), params


def row_revisions(rowids: Sequence[int], where: str | None = None, params: Sequence[Any] = ()) -> Statement:
    """``(rowid, rev, access_count, last_accessed_at)`` of the memory rows among ``rowids`` that
    pass ``where`` (a WHERE clause over ``memory``; every row when None), read by rowid
    (``NOT INDEXED``: a scope index would otherwise read the whole scope); in no particular
    order. The store serves the rows it holds at that revision from its row cache
    (:class:`~manowar_memory.stores.sqlite.rowcache.RowCache`) and reads the others with
    :func:`rows_by_rowid`."""
    return _by_rowid("rowid, rev, access_count, last_accessed_at", rowids, where, params)


def rows_by_rowid(rowids: Sequence[int], where: str | None = None, params: Sequence[Any] = ()) -> Statement:
    """The memory rows among ``rowids`` that pass ``where`` (every row when None), as
    :func:`memory_columns` (no embedding) followed by their ``rev``, read by rowid as
    :func:`row_revisions` reads them; in no particular order."""
    return _by_rowid(f"{_MEMORY_COLUMNS_NO_BLOB}, rev", rowids, where, params)


def _by_rowid(columns: str, rowids: Sequence[int], where: str | None, params: Sequence[Any]) -> Statement:
    sql = (f"SELECT {columns} FROM memory NOT INDEXED WHERE rowid IN ({','.join('?' * len(rowids))})"
           + (f" AND ({where})" if where else ""))
    return sql, [*rowids, *(params if where else ())]


def keyword_rowids(arms: Sequence[tuple[int, str]], where: str, params: Sequence[Any], limit: int,
                   context_weight: float) -> Statement:
    """The keyword lane's query: ``(rowid, score)`` of the best ``limit`` rows of ``memory m``
    passing ``where`` for the ``(scope_id, match)`` arms, best first (BM25 with the
    ``context`` column weighed ``context_weight`` against the content's 1).

    Each arm's query holds its scope's terms and reads its scope's rowid range (the asking
    user's and the agent's user-less rows), so other scopes' rows are never scored nor
    joined, and BM25's document frequencies are the scope's own; ``where`` still decides
    which rows qualify. Only rowids and scores are read here; the store then reads the
    winning rows alone, without their embeddings."""
    union, arm_params = _keyword_arms(arms, context_weight)
    sql = (
        f"SELECT m.rowid, f.score FROM ({union}) f JOIN memory m ON m.rowid = (f.fts_rowid & "
        f"{(1 << FTS_ROWID_SHIFT) - 1}) WHERE {where} ORDER BY f.score DESC, m.rowid LIMIT ?"
    )
    return sql, [*arm_params, *params, limit]


def memory_update(changes: Mapping[str, Any]) -> tuple[list[str], list[Any]]:
    """The ``SET`` assignments and their parameters for snake_case record changes (``rev``
    excluded: the store adds it inside its transaction). ``metadata`` also sets the columns
    derived from it (status, retention, fact_hash); removing an embedding clears its model."""
    sets: list[str] = []
    params: list[Any] = []
    for key, value in changes.items():
        if key == "metadata":
            sets += ["metadata = ?", "status = ?", "retention = ?", "fact_hash = ?"]
            params += [json.dumps(value, ensure_ascii=False), value.get("status"), value.get("retention"),
                       value.get("factHash")]
        elif key == "embedding":
            sets.append("embedding = ?")
            params.append(np.asarray(value, dtype=np.float32).tobytes() if value is not None else None)
            if value is None:  # no vector, no model: as on insert
                sets.append("embedding_model = NULL")
        else:
            sets.append(f"{key} = ?")
            params.append(value)
    return sets, params


def users_clause(users: Sequence[str | None]) -> Statement:
    """The rows of these users (None among them: the user-less rows), as an SQL condition."""
    named = [u for u in users if u is not None]
    clauses: list[str] = []
    if named:
        clauses.append(f"user_address IN ({','.join('?' * len(named))})")
    if None in users:
        clauses.append("user_address IS NULL")
    return f"({' OR '.join(clauses) or '0'})", named


def memory_page(agent_wallet: str | None, after_rowid: int, limit: int,
                users: Sequence[str | None] | None = None, *, created_from: int | None = None,
                created_to: int | None = None, with_embedding: bool = False) -> Statement:
    """Up to ``limit`` rows (every status; no embedding unless ``with_embedding``) after
    ``after_rowid``, in rowid order, optionally of one agent, of some of its users (None among
    them: the user-less rows) and created in ``[created_from, created_to]``: a page of
    ``page_memories`` and of ``iter_memories``."""
    sql = f"SELECT {memory_columns(with_embedding=with_embedding)} FROM memory WHERE rowid > ?"
    params: list[Any] = [after_rowid]
    if agent_wallet is not None:
        sql += " AND agent_wallet = ?"
        params.append(agent_wallet)
    if users is not None:
        clause, named = users_clause(users)
        sql += f" AND {clause}"
        params += named
    if created_from is not None:
        sql += " AND created_at >= ?"
        params.append(created_from)
    if created_to is not None:
        sql += " AND created_at <= ?"
        params.append(created_to)
    return sql + " ORDER BY rowid LIMIT ?", [*params, limit]


def transcripts_created_between(agent_wallet: str, created_from: int, created_to: int,
                                users: Sequence[str | None] | None = None) -> Statement:
    """The transcripts (``doc``) of an agent created in ``[created_from, created_to]``, oldest
    first, optionally of some of its users (None among them: the user-less ones)."""
    sql = "SELECT doc FROM transcripts WHERE agent_wallet = ? AND created_at BETWEEN ? AND ?"
    params: list[Any] = [agent_wallet, created_from, created_to]
    if users is not None:
        clause, named = users_clause(users)
        sql += f" AND {clause}"
        params += named
    return sql + " ORDER BY created_at", params


def memory_user_counts(agent_wallet: str) -> Statement:
    """``(user_address, rows)`` of every user of the agent (every status)."""
    return "SELECT user_address, COUNT(*) FROM memory WHERE agent_wallet = ? GROUP BY user_address", [agent_wallet]


def memory_rows_of_users(agent_wallet: str, users: Sequence[str | None]) -> Statement:
    """The agent's rows (every status, no embedding) of these users (None: the user-less rows), by rowid."""
    clause, named = users_clause(users)
    sql = f"SELECT {memory_columns(with_embedding=False)} FROM memory WHERE agent_wallet = ? AND {clause} ORDER BY rowid"
    return sql, [agent_wallet, *named]


def count_transcripts_older_than(cutoff: int) -> Statement:
    """How many transcripts were created before ``cutoff``."""
    return "SELECT COUNT(*) FROM transcripts WHERE created_at < ?", [cutoff]


def transcript_scopes_older_than(cutoff: int) -> Statement:
    """The distinct scopes of the transcripts created before ``cutoff``."""
    return f"SELECT DISTINCT {_SCOPE} FROM transcripts WHERE created_at < ?", [cutoff]


def count_stale_sessions(now: int, cutoff: int) -> Statement:
    """How many sessions expired at ``now`` or were last used before ``cutoff``."""
    return f"SELECT COUNT(*) FROM sessions WHERE {_STALE_SESSION}", [now, cutoff]


def stale_session_scopes(now: int, cutoff: int) -> Statement:
    """The distinct scopes of the sessions expired at ``now`` or last used before ``cutoff``."""
    return f"SELECT DISTINCT {_SCOPE} FROM sessions WHERE {_STALE_SESSION}", [now, cutoff]


# ----------------------------------------------------------------------------- caller filters


def _type_of(expr: str) -> str:
    # JSON values keep their JSON type (true is not 1); plain columns their SQL type
    if expr.startswith("json_extract("):
        return expr.replace("json_extract(", "json_type(", 1)
    return f"typeof({expr})"


def _eq_sql(expr: str, value: Primitive) -> Statement:
    if value is None:
        return f"{expr} IS NULL", []
    is_json = expr.startswith("json_extract(")
    kind = _type_of(expr)
    if isinstance(value, bool):
        if is_json:
            return f"{kind} = '{'true' if value else 'false'}'", []
        return f"{expr} = ?", [value]
    if not is_json:
        return f"{expr} = ?", [value]
    if isinstance(value, (int, float)):
        return f"({expr} = ? AND {kind} IN ('integer', 'real'))", [value]
    return f"({expr} = ? AND {kind} = 'text')", [value]


def _any_sql(expr: str, values: Sequence[Primitive]) -> Statement:
    parts: list[str] = []
    params: list[Any] = []
    for v in values:
        sql, p = _eq_sql(expr, v)
        parts.append(sql)
        params.extend(p)
    return "(" + " OR ".join(parts) + ")", params


_RANGE_SQL = {"$gt": ">", "$gte": ">=", "$lt": "<", "$lte": "<="}


def _op_sql(expr: str, op: str, operand: Operand) -> Statement:
    if op in ("$eq", "$ne"):
        sql, params = _eq_sql(expr, operand)  # type: ignore[arg-type]
        return (sql, params) if op == "$eq" else (f"NOT COALESCE({sql}, 0)", params)
    if op in ("$in", "$nin"):
        sql, params = _any_sql(expr, operand)  # type: ignore[arg-type]
        return (sql, params) if op == "$in" else (f"NOT COALESCE({sql}, 0)", params)
    kinds = "('integer', 'real')" if not isinstance(operand, str) else "('text')"
    return f"({expr} {_RANGE_SQL[op]} ? AND {_type_of(expr)} IN {kinds})", [operand]


def filter_where(filters: Mapping[str, FilterValue], expr_of: Callable[[str], str]) -> Statement:
    """SQL (an AND of its entries, ``"1"`` when empty) of a normalised filter
    (:func:`manowar_memory.filters.normalize_filters`); ``expr_of`` gives a path's SQL expression.

    Semantics of :func:`manowar_memory.filters.matches_filters` (and MongoDB's): equality keeps
    JSON types (``true`` is not ``1``, ``"1"`` is not ``1``), ``None`` matches null or missing,
    ``$ne``/``$nin`` match a missing value, ranges compare numbers with numbers and strings
    with strings."""
    parts: list[str] = []
    params: list[Any] = []
    for path, value in filters.items():
        if isinstance(value, Group):
            subs = [filter_where(clause, expr_of) for clause in value.clauses]
            joiner = " AND " if value.op == "$and" else " OR "
            sql = "(" + joiner.join(f"({s})" for s, _ in subs) + ")"
            values = [v for _, p in subs for v in p]
        else:
            expr = expr_of(path)
            if isinstance(value, Ops):
                pieces = [_op_sql(expr, op, operand) for op, operand in value.items]
                sql = "(" + " AND ".join(s for s, _ in pieces) + ")"
                values = [v for _, p in pieces for v in p]
            elif isinstance(value, tuple):
                sql, values = _any_sql(expr, value)
            else:
                sql, values = _eq_sql(expr, value)
                sql = f"({sql})"
        parts.append(sql)
        params.extend(values)
    return (" AND ".join(parts) if parts else "1"), params
