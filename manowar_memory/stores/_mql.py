"""Pure builders for the MongoDB store: the filter of a
:class:`~manowar_memory.stores.base.MemoryQuery` and every aggregation pipeline, naming the
collections and indexes of :mod:`~manowar_memory.stores._mql_schema`.

Nothing here talks to a server or imports pymongo, so ``tests/test_mql.py`` checks the exact
documents; :mod:`manowar_memory.stores.mongo` then sends the same documents to the server.

Scope rules (the same as the embedded store, :mod:`manowar_memory.stores.sqlite`):

* ``agentWallet`` equals the scope's agent;
* with a user: ``userAddress`` is that user **or null/missing** (the agent's shared rows);
  without a user: ``userAddress`` is null/missing (never other users' rows);
* ``threadId`` only when the query is not durable and the scope has a thread;
* ``mode`` and ``haiId`` when the scope sets them;
* ``active_only``: ``metadata.status`` not inactive (deleted, superseded, expired, forgotten); rows
  without a status match; memory rows also not expired (:func:`not_expired`, at ``query.now`` or now);
* ``sources`` / ``exclude_sources`` on memory rows;
* by-id reads and writes name the row's agent too (:func:`memory_id_filter`): row ids are
  unique per agent (``idx_vector_agent_id``), and a collection sharded on ``agentWallet`` routes
  such a call to the one shard owning the agent;
* caller filters (:mod:`manowar_memory.filters`): a primitive is an equality (``None`` matches
  null or missing), a list is ``$in``, operators are MongoDB's own, ``$and``/``$or`` groups nest. A filter on a key the scope already constrains is ANDed with it (through
  ``$and``), never allowed to replace it.

One difference from SQLite that no conformance test relies on: MongoDB equality on a field
that holds an *array* matches when any element equals the value; SQLite's ``json_extract``
compares the whole array. Filter paths name scalar fields in practice.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .._util import now_ms as _now_ms
from ..filters import FilterValue, Group, Ops
from ._mql_schema import (
    ACTIVE_FACT_FIELD,
    MEMORY,
    SCOPE_LIST_INDEX,
    SESSIONS,
    SYNC_FIELD,
    TRANSCRIPTS,
    USER_ROWS_INDEX,
    VECTOR_INDEX_NAME,
)
from .base import INACTIVE_STATUSES, MemoryQuery

__all__ = [
    "ATLAS_MAX_CANDIDATES",
    "DEFAULT_PREFILTER_FIELDS",
    "INACTIVE_STATUSES",
    "REFERENCE_FILTER_FIELDS",
    "SCOPE_PREFILTER_FIELDS",
    "active_fact_expr",
    "ann_sizes",
    "atlas_prefilter",
    "atlas_vector_pipeline",
    "date_to_ms",
    "embedding_model_counts_pipeline",
    "event_date_filter",
    "filter_clauses",
    "keyword_pipelines",
    "live_session_filter",
    "local_scan_query",
    "memory_id_filter",
    "memory_page_query",
    "memory_rows_of_users_filter",
    "memory_update_pipeline",
    "memory_user_counts_pipeline",
    "merge",
    "missing_scope_fields_filter",
    "ms_to_date",
    "not_expired",
    "other_model_filter",
    "parse_prefilter_fields",
    "scope_filter",
    "scope_list_hint",
    "scope_nulls_pipeline",
    "scope_prefilter",
    "scopes_pipeline",
    "stale_session_filter",
    "stats_pipeline",
    "text_users",
    "transcript_chunk_pipelines",
    "transcript_search_pipelines",
    "transcripts_created_between_filter",
    "union_by_score",
    "user_rows_hint",
    "users_condition",
    "vector_index_definition",
]

ATLAS_MAX_CANDIDATES = 10_000

# The reference's Atlas index filter fields (§2.1), plus the embedding model (ours: a row is
# only ever compared with a query vector of the same model).
REFERENCE_FILTER_FIELDS: tuple[str, ...] = (
    "agentWallet", "userAddress", "threadId", "mode", "haiId", "scopeKind", "scopeId", "source",
    "metadata.app_id", "metadata.status", "metadata.retention", "metadata.type",
)
# Always pushed into $vectorSearch (whatever MEMORY_VECTOR_PREFILTER_FIELDS says): the scope.
# The reference sent no prefilter by default, so a small agent (or one user of a large agent) in
# a large shared collection could get nothing back from the ANN limit (§13.1 item 5). The agent,
# mode and HAI are plain equalities; the user is "this user or null" (the agent's shared rows),
# which Atlas matches only on a stored null, not on a missing field, so the migration
# ``m003_memory_scope_nulls`` stores the null on rows written without the field.
SCOPE_PREFILTER_FIELDS: tuple[str, ...] = ("agentWallet", "userAddress", "threadId", "mode", "haiId")
# Prefiltered when MEMORY_VECTOR_PREFILTER_FIELDS is unset: the scope only.
DEFAULT_PREFILTER_FIELDS: tuple[str, ...] = ("agentWallet",)

_INACTIVE = list(INACTIVE_STATUSES)




# ----------------------------------------------------------------------------- time

_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)


def ms_to_date(ms: int) -> _dt.datetime:
    """Epoch milliseconds as a UTC datetime (a BSON Date, which keeps milliseconds)."""
    return _EPOCH + _dt.timedelta(milliseconds=int(ms))


def date_to_ms(value: Any) -> int:
    """A BSON Date (naive datetimes are UTC, as pymongo returns them) or a number as epoch ms."""
    if isinstance(value, _dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=_dt.UTC)
        delta: _dt.timedelta = value - _EPOCH
        return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000
    return int(value)


# ----------------------------------------------------------------------------- filters


def _condition(value: FilterValue) -> Any:
    if isinstance(value, tuple):
        return {"$in": list(value)}
    if isinstance(value, Ops):
        return {op: list(operand) if isinstance(operand, tuple) else operand for op, operand in value.items}
    return value


def filter_clauses(filters: Mapping[str, FilterValue]) -> list[tuple[str, Any]]:
    """The ``(key, condition)`` clauses of a normalised filter
    (:func:`manowar_memory.filters.normalize_filters`): a primitive is an equality, a tuple ``$in``,
    operators map to MongoDB's of the same name, ``$and``/``$or`` groups to lists of documents."""
    out: list[tuple[str, Any]] = []
    for path, value in filters.items():
        if isinstance(value, Group):
            out.append((value.op, [merge(filter_clauses(clause)) for clause in value.clauses]))
        else:
            out.append((path, _condition(value)))
    return out


def merge(clauses: Iterable[tuple[str, Any]]) -> dict[str, Any]:
    """Clauses into one filter document; a second, different clause on a key goes into ``$and``
    (as do the clauses of an ``$and`` clause, so merging merged documents keeps every clause)."""
    out: dict[str, Any] = {}
    extra: list[dict[str, Any]] = []
    for key, cond in clauses:
        if key == "$and":
            extra.extend(c for c in cond if c not in extra)
        elif key not in out:
            out[key] = cond
        elif out[key] != cond and {key: cond} not in extra:
            extra.append({key: cond})
    if extra:
        out["$and"] = extra
    return out


def scope_filter(query: MemoryQuery, *, collection: str = MEMORY) -> dict[str, Any]:
    """The MQL filter of ``query`` for ``collection`` (memory rows, sessions, transcripts,
    patterns or archives). ``sources``/``exclude_sources`` apply to memory rows only."""
    s = query.scope
    clauses: list[tuple[str, Any]] = [("agentWallet", s.agent_wallet)]
    if s.user_address is not None:
        clauses.append(("userAddress", {"$in": [s.user_address, None]}))
    else:
        clauses.append(("userAddress", None))
    if not query.durable and s.thread_id is not None:
        clauses.append(("threadId", s.thread_id))
    if s.mode is not None:
        clauses.append(("mode", s.mode))
    if s.hai_id is not None:
        clauses.append(("haiId", s.hai_id))
    if query.active_only:
        clauses.append(("metadata.status", {"$nin": list(_INACTIVE)}))
        if collection == MEMORY:
            clauses.extend(not_expired(query.now if query.now is not None else _now_ms()).items())
    if collection == MEMORY:
        if query.sources is not None:
            clauses.append(("source", {"$in": list(query.sources)}))
        if query.exclude_sources:
            clauses.append(("source", {"$nin": list(query.exclude_sources)}))
    clauses.extend(filter_clauses(query.filters))
    return merge(clauses)


def memory_id_filter(memory_ids: str | Sequence[str], agent_wallet: str | None) -> dict[str, Any]:
    """The filter of memory rows by id (one id, or a list as ``$in``), of ``agent_wallet`` when
    given: that agent's rows only, one ``(agentWallet, vectorId)`` index lookup, routed to one
    shard. Without an agent (maintenance across agents) the call reads every agent's rows."""
    ids: Any = memory_ids if isinstance(memory_ids, str) else {"$in": list(dict.fromkeys(memory_ids))}
    return {"agentWallet": agent_wallet, "vectorId": ids} if agent_wallet is not None else {"vectorId": ids}


def scope_list_hint(query: MemoryQuery) -> str | None:
    """The index ``list_memories`` and ``count_memories`` name for ``query``:
    :data:`SCOPE_LIST_INDEX` (one (agent, user) range per user of the scope, newest first) when
    the scope alone narrows the read; None when a thread or caller filters do, and the planner
    picks (the thread indexes serve a thread's rows better)."""
    if query.filters or (not query.durable and query.scope.thread_id is not None):
        return None
    return SCOPE_LIST_INDEX


def event_date_filter(query: MemoryQuery, low: str, high: str, coarse: Sequence[str]) -> dict[str, Any]:
    """The rows of ``query``'s scope whose ``metadata.eventDate`` is at least ``low`` and under
    ``high``, or one of ``coarse`` (:func:`~manowar_memory.stores.base.event_date_keys`)."""
    dated: dict[str, Any] = {"$or": [{"metadata.eventDate": {"$gte": low, "$lt": high}},
                                     {"metadata.eventDate": {"$in": list(coarse)}}]}
    return {"$and": [scope_filter(query), dated]}


def missing_scope_fields_filter() -> dict[str, Any]:
    """Memory rows missing ``userAddress``, ``mode`` or ``haiId`` (written by the reference or by
    hand): a ``$vectorSearch`` prefilter matches null only where null is stored."""
    return {"$or": [{name: {"$exists": False}} for name in ("userAddress", "mode", "haiId")]}


def scope_nulls_pipeline() -> list[dict[str, Any]]:
    """An update pipeline storing null in a missing ``userAddress``, ``mode`` or ``haiId`` (a
    present value is kept), so the scope prefilter sees the row as MongoDB's filters do."""
    return [{"$set": {name: {"$ifNull": [f"${name}", None]} for name in ("userAddress", "mode", "haiId")}}]


def not_expired(now_ms: int) -> dict[str, Any]:
    """Memory rows that have not expired at ``now_ms``: ``metadata.expiresAt`` is not a number
    at or before it (missing, null and non-numbers never expire; numbers compare by value, as in
    SQLite's :func:`~manowar_memory.stores._sql.not_expired`). Not an Atlas prefilter: it stays
    in the post-ANN ``$match``."""
    return {"metadata.expiresAt": {"$not": {"$lte": int(now_ms)}}}


def live_session_filter(query: MemoryQuery, now_ms: int) -> dict[str, Any]:
    """Sessions of the query's scope that have not expired at ``now_ms``."""
    return merge([*scope_filter(query, collection=SESSIONS).items(), ("expiresAt", {"$gt": ms_to_date(now_ms)})])


def active_fact_expr() -> dict[str, Any]:
    """Aggregation expression of :data:`ACTIVE_FACT_FIELD` for the document being updated:
    its factHash when it is an active fact, else ``$$REMOVE`` (the field is dropped)."""
    return {
        "$cond": [
            {
                "$and": [
                    {"$eq": ["$source", "fact"]},
                    {"$ne": [{"$ifNull": ["$metadata.factHash", None]}, None]},
                    {"$not": [{"$in": [{"$ifNull": ["$metadata.status", None]}, _INACTIVE]}]},
                ]
            },
            "$metadata.factHash",
            "$$REMOVE",
        ]
    }


def memory_update_pipeline(sets: Mapping[str, Any], now_ms: int) -> list[dict[str, Any]]:
    """An update pipeline that sets ``sets`` (values taken literally), then re-derives
    :data:`ACTIVE_FACT_FIELD`, drops ``embeddingModel`` from a row left without an embedding
    (a model with no vector would make the vector cache's row count never match), and stamps
    :data:`SYNC_FIELD`."""
    stages = [{"$set": {key: {"$literal": value} for key, value in sets.items()}}] if sets else []
    derived: dict[str, Any] = {ACTIVE_FACT_FIELD: active_fact_expr(), SYNC_FIELD: int(now_ms)}
    if "embedding" in sets:
        derived["embeddingModel"] = {
            "$cond": [{"$eq": [{"$ifNull": ["$embedding", None]}, None]}, "$$REMOVE", "$embeddingModel"]}
    return [*stages, {"$set": derived}]


# ----------------------------------------------------------------------------- keyword lane


def text_users(query: MemoryQuery) -> list[str | None]:
    """The ``userAddress`` values whose rows the query's scope reads, one ``$text`` query each:
    the user and the agent's user-less rows (null or missing), or only the user-less rows.
    The text indexes have ``(agentWallet, userAddress)`` as equality prefixes, which a ``$in``
    cannot use, so each value is its own query on its own index range."""
    user = query.scope.user_address
    return [user, None] if user is not None else [None]


def _text_match(query: MemoryQuery, terms: Sequence[str], collection: str, user: str | None) -> dict[str, Any]:
    flt = scope_filter(query, collection=collection)
    flt["userAddress"] = user  # the scope's own clause; a caller filter on the field stays in $and
    return {"$text": {"$search": " ".join(terms)}, **flt}


def keyword_pipelines(query: MemoryQuery, terms: Sequence[str], limit: int) -> list[list[dict[str, Any]]]:
    """``$text`` over memory content and context (OR of the terms, English stemming; the text
    index weighs content 2 : context 1, as the embedded store's BM25 does), best textScore
    first, one pipeline per value of :func:`text_users`; :func:`union_by_score` makes them one
    pipeline. The score is returned as ``_score``; embeddings are not."""
    return [
        [
            {"$match": _text_match(query, terms, MEMORY, user)},
            {"$set": {"_score": {"$meta": "textScore"}}},
            {"$sort": {"_score": -1, "createdAt": -1, "_id": -1}},
            {"$limit": int(limit)},
            {"$project": {"embedding": 0}},
        ]
        for user in text_users(query)
    ]


def transcript_search_pipelines(query: MemoryQuery, terms: Sequence[str], limit: int) -> list[list[dict[str, Any]]]:
    """``$text`` over transcript summaries and message contents, best first (``_score``), one
    pipeline per value of :func:`text_users` (joined by :func:`union_by_score`)."""
    return [
        [
            {"$match": _text_match(query, terms, TRANSCRIPTS, user)},
            {"$set": {"_score": {"$meta": "textScore"}}},
            {"$sort": {"_score": -1, "createdAt": -1, "_id": -1}},
            {"$limit": int(limit)},
        ]
        for user in text_users(query)
    ]


def transcript_chunk_pipelines(query: MemoryQuery, terms: Sequence[str], limit: int) -> list[list[dict[str, Any]]]:
    """``$text`` over the sealed message chunks of long transcripts, one pipeline per value of
    :func:`text_users` (a chunk carries its transcript's ``userAddress``; chunks written before
    it did are found by the user-less query until their transcript is next written). Only the
    chunk's session, position and score come back; the store then reads the transcripts with
    the full scope filter. ``limit`` results are asked per pipeline."""
    return [
        [
            {"$match": {"$text": {"$search": " ".join(terms)}, "agentWallet": query.scope.agent_wallet,
                        "userAddress": user}},
            {"$project": {"sessionId": 1, "seq": 1, "digest": 1, "_score": {"$meta": "textScore"}}},
            {"$sort": {"_score": -1}},
            {"$limit": int(limit)},
        ]
        for user in text_users(query)
    ]


def union_by_score(
    collection: str, pipelines: Sequence[Sequence[Mapping[str, Any]]], limit: int,
    sort: Mapping[str, int] | None = None,
) -> list[dict[str, Any]]:
    """One pipeline of several ``$text`` pipelines on ``collection`` (one per value of
    :func:`text_users`): the first, then each other through ``$unionWith``, sorted again by
    ``sort`` (default ``_score``, ``createdAt``, ``_id``, all descending) and cut to ``limit``:
    one round trip, and each branch still reads only its own (agent, user) index range.

    MongoDB's textScore is computed from the matched document alone (term frequencies, field
    weights, document length; no collection statistics such as IDF), so a document scores the
    same in its branch as it would in one query over both ranges: the merged list is the list
    a single query over the user's and the user-less rows gives."""
    first, *rest = pipelines
    out = [dict(stage) for stage in first]
    if not rest:
        return out
    out += [{"$unionWith": {"coll": collection, "pipeline": [dict(stage) for stage in p]}} for p in rest]
    return [*out, {"$sort": dict(sort or {"_score": -1, "createdAt": -1, "_id": -1})}, {"$limit": int(limit)}]


# ----------------------------------------------------------------------------- vector lane


def local_scan_query(query: MemoryQuery, model_id: str) -> tuple[dict[str, Any], dict[str, int], list[tuple[str, int]]]:
    """``(filter, projection, sort)`` of the self-hosted vector path's candidate stream: the
    scope's rows embedded by ``model_id``, newest first, projected to ``_id`` and ``embedding``."""
    flt = merge([*scope_filter(query, collection=MEMORY).items(), ("embeddingModel", model_id)])
    return flt, {"_id": 1, "embedding": 1}, [("createdAt", -1)]


def other_model_filter(query: MemoryQuery, model_id: str) -> dict[str, Any]:
    """The scope's rows embedded by another model (counted, never scored against this query)."""
    return merge([*scope_filter(query, collection=MEMORY).items(), ("embeddingModel", {"$nin": [model_id, None]})])


def parse_prefilter_fields(value: str | None) -> tuple[str, ...]:
    """``MEMORY_VECTOR_PREFILTER_FIELDS``: comma-separated field names, blanks dropped, order kept."""
    if not value:
        return ()
    return tuple(dict.fromkeys(part.strip() for part in value.split(",") if part.strip()))


def _atlas_safe(cond: Any) -> bool:
    # $vectorSearch filters cannot reproduce "null or missing" or "$nin matches missing fields"
    # reliably, so only plain non-null equalities and $in lists without null are pushed down.
    if cond is None:
        return False
    if isinstance(cond, (str, int, float, bool)):
        return True
    if isinstance(cond, Mapping) and set(cond) == {"$in"}:
        return all(v is not None and isinstance(v, (str, int, float, bool)) for v in cond["$in"])
    return False


def scope_prefilter(query: MemoryQuery) -> dict[str, Any]:
    """The scope part of the ``$vectorSearch`` prefilter (:data:`SCOPE_PREFILTER_FIELDS`): the
    agent; the user and the agent's shared rows (``{"$in": [user, null]}``), or only the shared
    rows (``null``); the thread of a non-durable read; mode and HAI when the scope sets them.
    The same rows as :func:`scope_filter`'s scope clauses, on rows that store null rather than
    omit a scope field (the store always writes them; ``m003_memory_scope_nulls`` fills older rows)."""
    s = query.scope
    out: dict[str, Any] = {"agentWallet": s.agent_wallet,
                           "userAddress": {"$in": [s.user_address, None]} if s.user_address is not None else None}
    if not query.durable and s.thread_id is not None:
        out["threadId"] = s.thread_id
    if s.mode is not None:
        out["mode"] = s.mode
    if s.hai_id is not None:
        out["haiId"] = s.hai_id
    return out


def atlas_prefilter(filter_doc: Mapping[str, Any], fields: Sequence[str], model_id: str,
                    query: MemoryQuery | None = None) -> dict[str, Any]:
    """The ``$vectorSearch`` prefilter: the embedding model, the query's scope
    (:func:`scope_prefilter`, when ``query`` is given), plus each other of ``fields`` that the
    filter constrains with a plain equality (or a null-free ``$in``). Everything else stays in
    the post-ANN ``$match``, which always re-applies the whole filter."""
    out: dict[str, Any] = {"embeddingModel": model_id}
    scoped = scope_prefilter(query) if query is not None else {}
    out.update(scoped)
    for name in fields:
        cond = filter_doc.get(name)
        if name not in scoped and name in filter_doc and _atlas_safe(cond):
            out[name] = cond
    return out


def ann_sizes(limit: int) -> tuple[int, int]:
    """``(ann_limit, num_candidates)`` for $vectorSearch: the reference's over-fetch
    (``max(limit, min(500, 10·limit))`` rows, 20 candidates per row), capped at Atlas's
    10 000-candidate maximum so large limits do not fail."""
    limit = max(1, int(limit))
    ann_limit = min(ATLAS_MAX_CANDIDATES, max(limit, min(500, limit * 10)))
    num_candidates = min(ATLAS_MAX_CANDIDATES, max(ann_limit, ann_limit * 20))
    return ann_limit, num_candidates


def atlas_vector_pipeline(
    query: MemoryQuery,
    vector: Sequence[float],
    model_id: str,
    limit: int,
    *,
    index_name: str = VECTOR_INDEX_NAME,
    prefilter_fields: Sequence[str] = DEFAULT_PREFILTER_FIELDS,
    min_score: float | None = None,
) -> list[dict[str, Any]]:
    """Atlas Vector Search: ANN prefiltered on the scope (agent, user or the shared rows, mode,
    HAI; the thread of a non-durable read) and the model, then the full scope filter, an optional
    score threshold on Atlas's scale (``(1 + cos) / 2`` for cosine, which the embedded store
    reports too), and ``limit`` rows. The score comes back as ``_score``."""
    full = scope_filter(query, collection=MEMORY)
    ann_limit, num_candidates = ann_sizes(limit)
    stage: dict[str, Any] = {
        "index": index_name,
        "path": "embedding",
        "queryVector": [float(x) for x in vector],
        "numCandidates": num_candidates,
        "limit": ann_limit,
        "filter": atlas_prefilter(full, prefilter_fields, model_id, query),
    }
    pipeline: list[dict[str, Any]] = [
        {"$vectorSearch": stage},
        {"$set": {"_score": {"$meta": "vectorSearchScore"}}},
        {"$match": merge([*full.items(), ("embeddingModel", model_id)])},
    ]
    if min_score is not None:
        pipeline.append({"$match": {"_score": {"$gte": float(min_score)}}})
    pipeline += [{"$limit": int(limit)}, {"$project": {"embedding": 0}}]
    return pipeline


def vector_index_definition(dimensions: int, filter_fields: Sequence[str] = ()) -> dict[str, Any]:
    """The Atlas ``vectorSearch`` index on ``embedding`` (cosine): the reference's filter
    fields, the prefilter fields and ``embeddingModel``. ``numDimensions`` is the embedder's."""
    paths = list(dict.fromkeys([*REFERENCE_FILTER_FIELDS, *filter_fields, "embeddingModel"]))
    return {
        "fields": [
            {"type": "vector", "path": "embedding", "numDimensions": int(dimensions), "similarity": "cosine"},
            *({"type": "filter", "path": p} for p in paths),
        ]
    }


# ----------------------------------------------------------------------------- stats


def stats_pipeline(agent_wallet: str | None) -> list[dict[str, Any]]:
    """Counts, mean decay and age range of memory rows, by source and by status, in one pass."""
    pipeline: list[dict[str, Any]] = []
    if agent_wallet:
        pipeline.append({"$match": {"agentWallet": agent_wallet}})
    pipeline.append(
        {
            "$facet": {
                "totals": [
                    {
                        "$group": {
                            "_id": None,
                            "count": {"$sum": 1},
                            "avgDecay": {"$avg": "$decayScore"},
                            "oldest": {"$min": "$createdAt"},
                            "newest": {"$max": "$createdAt"},
                        }
                    }
                ],
                "bySource": [{"$group": {"_id": "$source", "n": {"$sum": 1}}}],
                "byStatus": [{"$group": {"_id": "$metadata.status", "n": {"$sum": 1}}}],
            }
        }
    )
    return pipeline


# ----------------------------------------------------------------------------- maintenance


def memory_page_query(agent_wallet: str | None, after: Any, users: Sequence[str | None] | None = None, *,
                      created_from: int | None = None, created_to: int | None = None) -> dict[str, Any]:
    """The filter of the memory rows (every status) after the ``_id`` ``after`` (None: from the
    start), optionally of one agent, of some of its users (None among them: the user-less rows,
    null or missing) and created in ``[created_from, created_to]``; read sorted by ``_id``: a
    page of ``page_memories`` and of ``iter_memories``."""
    flt: dict[str, Any] = {} if agent_wallet is None else {"agentWallet": agent_wallet}
    if users is not None:
        flt["userAddress"] = users_condition(users)
    created = {op: bound for op, bound in (("$gte", created_from), ("$lte", created_to)) if bound is not None}
    if created:
        flt["createdAt"] = created
    if after is not None:
        flt["_id"] = {"$gt": after}
    return flt


def user_rows_hint(agent_wallet: str | None, users: Sequence[str | None] | None) -> str | None:
    """The index a read of some users' rows of one agent in ``_id`` order names
    (:func:`memory_page_query`, :func:`memory_rows_of_users_filter`): :data:`USER_ROWS_INDEX`,
    one index range per user already in ``_id`` order (the planner, left alone, walks the
    ``_id`` index through every other user's rows when the user-less rows are asked for too);
    None without an agent or users, and the planner picks."""
    return USER_ROWS_INDEX if agent_wallet is not None and users is not None else None


def transcripts_created_between_filter(agent_wallet: str, created_from: int, created_to: int,
                                       users: Sequence[str | None] | None = None) -> dict[str, Any]:
    """The transcripts of an agent created in ``[created_from, created_to]``, optionally of some
    of its users (None among them: the user-less ones); read sorted by ``createdAt``, ``_id``."""
    flt: dict[str, Any] = {"agentWallet": agent_wallet, "createdAt": {"$gte": created_from, "$lte": created_to}}
    if users is not None:
        flt["userAddress"] = users_condition(users)
    return flt


def memory_user_counts_pipeline(agent_wallet: str) -> list[dict[str, Any]]:
    """``{_id: userAddress, n: rows}`` of every user of the agent (every status)."""
    return [{"$match": {"agentWallet": agent_wallet}}, {"$group": {"_id": "$userAddress", "n": {"$sum": 1}}}]


def embedding_model_counts_pipeline(agent_wallet: str, users: Sequence[str | None]) -> list[dict[str, Any]]:
    """``{user, model, n}`` rows: for each of the agent's ``users`` (None: its user-less rows),
    how many rows each embedding model embedded (rows without an embedding left out), so the
    vector cache partitions' own rows and those of other models are counted in one round trip.
    Each user is its own branch (``$unionWith``) on its (agent, user, model) range of
    :data:`USER_SCAN_INDEX`: a user's count is covered by the index (no document read), which
    one ``$in`` holding null would not be."""
    branches = [_model_count_branch(agent_wallet, user) for user in users]
    if not branches:
        raise ValueError("name at least one user to count")
    first, *rest = branches
    return [*first, *({"$unionWith": {"coll": MEMORY, "pipeline": branch}} for branch in rest)]


def _model_count_branch(agent_wallet: str, user: str | None) -> list[dict[str, Any]]:
    return [{"$match": {"agentWallet": agent_wallet, "userAddress": user, "embeddingModel": {"$ne": None}}},
            {"$group": {"_id": "$embeddingModel", "n": {"$sum": 1}}},
            {"$project": {"_id": 0, "user": {"$literal": user}, "model": "$_id", "n": 1}}]


def users_condition(users: Sequence[str | None]) -> dict[str, Any]:
    """The ``userAddress`` condition of these users' rows (None among them: the user-less rows,
    null or missing)."""
    return {"$in": list(users)}


def memory_rows_of_users_filter(agent_wallet: str, users: Sequence[str | None]) -> dict[str, Any]:
    """The agent's rows (every status) of these users; None matches the user-less rows."""
    return {"agentWallet": agent_wallet, "userAddress": users_condition(users)}


def stale_session_filter(now_ms: int, cutoff: int) -> dict[str, Any]:
    """Sessions expired at ``now_ms`` or last used before ``cutoff`` (what cleanup deletes)."""
    return {"$or": [{"expiresAt": {"$lte": ms_to_date(now_ms)}}, {"lastAccessedAt": {"$lt": cutoff}}]}


def scopes_pipeline(match: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The distinct (agent, user, mode, hai) of the documents matching ``match``."""
    return [{"$match": dict(match)},
            {"$group": {"_id": {"a": "$agentWallet", "u": "$userAddress", "m": "$mode", "h": "$haiId"}}}]
