"""The memory-rows role of the MongoDB store (:class:`~manowar_memory.stores.base.MemoryRowStore`):
writes, reads by id and scope, the keyword lane and the vector lanes (Atlas, the in-process
cache, the streaming scan)."""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import Any, cast

import numpy as np

from ..._util import now_ms, query_terms
from ...errors import MissingDependencyError, StoreError
from ...expiry import expires_at_of
from ...records import MemoryRecord
from .. import _mql, _mql_schema
from .. import base as _base
from .._mql_schema import (
    ACTIVE_FACT_FIELD,
    MEMORY,
    SYNC_FIELD,
)
from .._vectors import VectorIndex
from ..base import Hit, MemoryQuery, VectorSearchInfo, event_date_keys
from .connection import (
    _FLOAT32_DTYPE,
    _VECTOR_HEADER,
    MongoConnection,
    _CachePartition,
    decode_vector,
    doc_to_memory,
    log,
    memory_to_doc,
)

try:
    import pymongo
    from bson.binary import Binary
    from bson.objectid import ObjectId
    from pymongo.errors import BulkWriteError, DuplicateKeyError
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise MissingDependencyError("pymongo", "mongo", "The MongoDB store") from exc

__all__ = ["MongoRows"]


_ATLAS_READY_RECHECK_S = 30.0


_INSERT_CHUNK = 1_000  # rows per insert_many: each chunk is stamped just before it is sent


_DUPLICATE_KEY = 11000


class MongoRows(MongoConnection):
    """Memory rows: writes, reads by id and scope, the keyword and vector lanes."""

    # -- memory rows --
    def _insert_chunked(self, records: Sequence[MemoryRecord],
                        on_duplicate: Callable[[dict[str, Any], MemoryRecord], Any]) -> list[Any]:
        """Insert ``records`` in unordered chunks; each row whose insert hit a duplicate key is
        handed to ``on_duplicate(doc, record)`` and its result kept (None for the rows inserted)."""
        out: list[Any] = [None] * len(records)
        with self._errors("insert"):
            for start in range(0, len(records), _INSERT_CHUNK):
                chunk = records[start : start + _INSERT_CHUNK]
                stamp = now_ms()
                docs = [{**memory_to_doc(r), SYNC_FIELD: stamp} for r in chunk]
                try:
                    self.memory.insert_many(docs, ordered=False)
                except BulkWriteError as exc:
                    errors = exc.details.get("writeErrors", [])
                    others = [e for e in errors if e.get("code") != _DUPLICATE_KEY]
                    if others:
                        raise StoreError(f"MongoDB insert failed: {others[0].get('errmsg')}") from exc
                    for e in sorted(errors, key=lambda e: e["index"]):
                        i = e["index"]
                        out[start + i] = on_duplicate(docs[i], chunk[i])
        return out

    def add_memories(self, records: Sequence[MemoryRecord]) -> list[str]:
        found = self._insert_chunked(records, lambda doc, rec: self._insert_one(doc, rec)[0])
        return [f if f is not None else r.id for f, r in zip(found, records, strict=True)]

    def add_memories_if_absent(self, records: Sequence[MemoryRecord]) -> list[tuple[str, bool]]:
        found = self._insert_chunked(records, self._insert_keyed)
        return [f if f is not None else (r.id, True) for f, r in zip(found, records, strict=True)]

    def _insert_keyed(self, doc: dict[str, Any], record: MemoryRecord) -> tuple[str, bool]:
        """Insert one row whose id is its identity: a taken id means it is already stored; a
        taken active-fact hash reinforces the row holding it."""
        for _ in range(_base.MAX_INSERT_ATTEMPTS):
            try:
                self.memory.insert_one({k: v for k, v in doc.items() if k != "_id"})
                return record.id, True
            except DuplicateKeyError as exc:
                if ACTIVE_FACT_FIELD not in str(exc.details or exc):
                    return record.id, False  # the unique vectorId: an earlier (or concurrent) run stored it
                if self.memory.find_one(_mql.memory_id_filter(record.id, record.agent_wallet), {"_id": 1}) is not None:
                    return record.id, False
                holder = self._reinforce_fact(record.agent_wallet, doc[ACTIVE_FACT_FIELD], record.last_accessed_at)
                if holder is not None:
                    return str(holder["vectorId"]), False
        raise _base.insert_gave_up(record.id)

    def existing_memory_ids(self, memory_ids: Sequence[str], *, agent_wallet: str | None = None) -> set[str]:
        ids = list(dict.fromkeys(memory_ids))
        found: set[str] = set()
        with self._errors("read"):
            for start in range(0, len(ids), 1000):
                docs = self.memory.find(_mql.memory_id_filter(ids[start : start + 1000], agent_wallet),
                                        {"vectorId": 1, "_id": 0})
                found.update(str(d["vectorId"]) for d in docs)
        return found

    def add_fact_if_absent(self, record: MemoryRecord) -> tuple[MemoryRecord, bool]:
        _base.require_unique_fact(record)
        with self._errors("insert"):
            memory_id, holder = self._insert_one({**memory_to_doc(record), SYNC_FIELD: now_ms()}, record)
        if holder is not None:
            return doc_to_memory(holder, with_embedding=False), False
        return record.model_copy(update={"id": memory_id, "embedding": None}), True

    def _insert_one(self, doc: dict[str, Any], record: MemoryRecord) -> tuple[str, dict[str, Any] | None]:
        """Insert one row: a colliding id gets a suffix; an active fact whose hash is taken
        reinforces the row holding it. Returns the id and, when reinforced, that row."""
        candidate, suffix = record.id, 0
        for _ in range(_base.MAX_INSERT_ATTEMPTS):
            fresh = {k: v for k, v in doc.items() if k != "_id"}
            fresh["vectorId"] = candidate
            try:
                self.memory.insert_one(fresh)
                return candidate, None
            except DuplicateKeyError as exc:
                if ACTIVE_FACT_FIELD not in str(exc.details or exc):
                    suffix += 1
                    candidate = _base.suffixed_id(record.id, suffix)
                    continue
                holder = self._reinforce_fact(record.agent_wallet, doc[ACTIVE_FACT_FIELD], record.last_accessed_at)
                if holder is not None:
                    return str(holder["vectorId"]), holder
                # the hash was held by a row made inactive by a writer that bypassed this store: retry
        raise _base.insert_gave_up(record.id)

    def _reinforce_fact(self, agent_wallet: str, fact_hash: Any, at: int) -> dict[str, Any] | None:
        """accessCount += 1 on the active fact holding ``fact_hash``; None (after freeing the
        hash) when the row holding it is no longer an active fact."""
        doc: dict[str, Any] | None = self.memory.find_one_and_update(
            {"agentWallet": agent_wallet, ACTIVE_FACT_FIELD: fact_hash, "source": "fact",
             "metadata.status": {"$nin": list(_mql.INACTIVE_STATUSES)}},
            {"$inc": {"accessCount": 1}, "$set": {"lastAccessedAt": at}},
            projection={"embedding": 0}, return_document=pymongo.ReturnDocument.AFTER,
        )
        if doc is None:
            self.memory.update_many(
                {"agentWallet": agent_wallet, ACTIVE_FACT_FIELD: fact_hash},
                _mql.memory_update_pipeline({}, now_ms()),
            )
        return doc

    def get_memory(self, memory_id: str, query: MemoryQuery | None = None, *,
                   agent_wallet: str | None = None) -> MemoryRecord | None:
        if query is not None:
            if agent_wallet is not None and agent_wallet != query.scope.agent_wallet:
                return None  # another agent's row is never in this query's scope
            agent_wallet = query.scope.agent_wallet
        flt = _mql.memory_id_filter(memory_id, agent_wallet)
        if query is not None:
            flt = _mql.merge([*flt.items(), *_mql.scope_filter(query).items()])
        with self._errors("read"):
            doc = self.memory.find_one(flt)
        return doc_to_memory(doc) if doc else None

    def update_memory(self, memory_id: str, changes: dict[str, Any], *,
                      agent_wallet: str | None = None) -> MemoryRecord | None:
        _base.check_memory_changes(changes)
        if not changes:
            return self.get_memory(memory_id, agent_wallet=agent_wallet)
        with self._errors("update"), self._fact_conflict(memory_id):
            doc = self.memory.find_one_and_update(
                _mql.memory_id_filter(memory_id, agent_wallet), _mql.memory_update_pipeline(self._memory_sets(changes), now_ms()),
                return_document=pymongo.ReturnDocument.AFTER,
            )
        return doc_to_memory(doc) if doc else None

    def delete_memory(self, memory_id: str, *, agent_wallet: str | None = None) -> bool:
        with self._errors("delete"):
            return bool(self.memory.delete_one(_mql.memory_id_filter(memory_id, agent_wallet)).deleted_count == 1)

    def find_fact_by_hash(self, agent_wallet: str, fact_hash: str) -> MemoryRecord | None:
        with self._errors("read"):
            doc = self.memory.find_one(
                {
                    "agentWallet": agent_wallet, "metadata.factHash": fact_hash, "source": "fact",
                    "metadata.status": {"$nin": list(_mql.INACTIVE_STATUSES)},
                },
                projection={"embedding": 0},
                sort=[("createdAt", -1), ("_id", -1)],
            )
        return doc_to_memory(doc, with_embedding=False) if doc else None

    def bump_access(self, memory_ids: Sequence[str], at: int, *, agent_wallet: str | None = None) -> None:
        if not memory_ids:
            return
        # an id listed twice is bumped twice, as the embedded store does
        by_count: dict[int, list[str]] = {}
        for memory_id, n in Counter(memory_ids).items():
            by_count.setdefault(n, []).append(memory_id)
        ops = [
            pymongo.UpdateMany(_mql.memory_id_filter(ids, agent_wallet), {"$inc": {"accessCount": n}, "$set": {"lastAccessedAt": at}})
            for n, ids in by_count.items()
        ]
        with self._errors("update"):
            self.memory.bulk_write(ops, ordered=False)

    def list_memories(self, query: MemoryQuery, limit: int | None = None) -> list[MemoryRecord]:
        with self._errors("read"):
            cursor = self.memory.find(_mql.scope_filter(query), projection={"embedding": 0},
                                      hint=self._scope_hint(query)).sort(
                [("createdAt", -1), ("_id", -1)]
            )
            if limit is not None:
                if limit <= 0:
                    return []
                cursor = cursor.limit(int(limit))
            return [doc_to_memory(d, with_embedding=False) for d in cursor]

    def memories_created_between(self, query: MemoryQuery, start: int, end: int, limit: int) -> list[MemoryRecord]:
        """:meth:`~manowar_memory.stores.base.TimeRangeRows.memories_created_between`: served by
        the (agentWallet, userAddress, createdAt) index (``SCOPE_LIST_INDEX``)."""
        if end <= start:
            return []
        return self._rows_by_time(query, {"$gte": int(start), "$lt": int(end)}, 1, limit)

    def memories_created_before(self, query: MemoryQuery, end: int, limit: int) -> list[MemoryRecord]:
        """:meth:`~manowar_memory.stores.base.EarlierRows.memories_created_before`: the
        (agentWallet, userAddress, createdAt) index (``SCOPE_LIST_INDEX``) read backwards."""
        return self._rows_by_time(query, {"$lt": int(end)}, -1, limit)

    def _rows_by_time(self, query: MemoryQuery, bound: dict[str, int], direction: int, limit: int) -> list[MemoryRecord]:
        """At most ``limit`` rows of ``query`` with ``createdAt`` in ``bound``, oldest first
        (``direction`` 1) or newest first (-1), with embeddings."""
        if limit <= 0:
            return []
        flt = {"$and": [_mql.scope_filter(query), {"createdAt": bound}]}
        with self._errors("read"):
            cursor = self.memory.find(flt, hint=self._scope_hint(query)).sort(
                [("createdAt", direction), ("_id", direction)]).limit(int(limit))
            return [doc_to_memory(d) for d in cursor]

    def memories_dated_between(self, query: MemoryQuery, start: int, end: int, limit: int) -> list[MemoryRecord]:
        """:meth:`~manowar_memory.stores.base.EventDateRows.memories_dated_between`: served by the
        (agentWallet, userAddress, metadata.eventDate) index (``EVENT_DATE_INDEX``)."""
        if limit <= 0 or end <= start:
            return []
        flt = _mql.event_date_filter(query, *event_date_keys(start, end))
        with self._errors("read"):
            cursor = self.memory.find(flt).sort(
                [("metadata.eventDate", 1), ("createdAt", 1), ("_id", 1)]).limit(int(limit))
            return [doc_to_memory(d) for d in cursor]

    def iter_memories(
        self, agent_wallet: str | None = None, *, created_from: int | None = None,
        created_to: int | None = None, batch_size: int = 1000, users: Sequence[str | None] | None = None,
    ) -> Iterator[MemoryRecord]:
        last: ObjectId | None = None
        while True:
            docs = self._memory_page(agent_wallet, last, max(1, int(batch_size)), users, created_from=created_from,
                                     created_to=created_to)
            if not docs:
                return
            for doc in docs:
                yield doc_to_memory(doc)
            last = docs[-1]["_id"]

    def count_memories(self, query: MemoryQuery) -> int:
        with self._errors("count"):
            hint = self._scope_hint(query)
            return int(self.memory.count_documents(_mql.scope_filter(query), **({"hint": hint} if hint else {})))

    def keyword_search(self, query: MemoryQuery, text: str, limit: int) -> list[Hit]:
        terms = query_terms(text or "")
        if not terms or limit <= 0:
            return []
        with self._errors("text search"):
            docs = list(self.memory.aggregate(
                _mql.union_by_score(MEMORY, _mql.keyword_pipelines(query, terms, limit), limit)))
        return [Hit(doc_to_memory(d, with_embedding=False), float(d["_score"])) for d in docs]

    # -- vector search --
    def _chosen(self) -> tuple[str, str] | None:
        return self.vector_search_choice

    def _choose_vector_method(self) -> tuple[str, str]:
        if self.vector_search_choice is not None:
            return self.vector_search_choice
        with self._choice_lock:
            chosen = self._chosen()  # again under the lock: another thread may have chosen meanwhile
            if chosen is not None:
                return chosen
            if self.vector_search_mode == "local":
                choice = ("local", "vector_search='local'")
            elif self.vector_search_mode == "atlas":
                choice = ("atlas", "vector_search='atlas'")
            else:
                try:
                    with self._errors("search index listing"):
                        list(self.memory.aggregate([{"$listSearchIndexes": {}}]))
                    choice = ("atlas", "vector_search='auto': the server has Atlas Search ($listSearchIndexes works)")
                except StoreError as exc:
                    reason = str(exc.__cause__ or exc).split(", full error")[0]
                    choice = ("local", f"vector_search='auto': no Atlas Search on this server ({reason})")
            log.info("MongoStore vector search: %s (%s)", *choice)
            self.vector_search_choice = choice
            return choice

    def ensure_vector_index(self, dimensions: int) -> None:
        """Create or update the Atlas ``vectorSearch`` index for ``dimensions`` (Atlas only)."""
        from pymongo.operations import SearchIndexModel

        definition = _mql.vector_index_definition(dimensions, self.prefilter_fields)
        with self._errors("vector index creation"):
            existing = list(self.memory.list_search_indexes(self.vector_index_name))
            if existing:
                current = existing[0].get("latestDefinition") or existing[0].get("definition") or {}
                if current != definition:
                    self.memory.update_search_index(self.vector_index_name, definition)
            else:
                self.memory.create_search_index(
                    SearchIndexModel(definition=definition, name=self.vector_index_name, type="vectorSearch")
                )
        self._atlas_index_dims = dimensions

    def _atlas_index_ready(self, dimensions: int) -> bool:
        if self._atlas_index_dims != dimensions:
            self.ensure_vector_index(dimensions)
            self._atlas_ready = False
            self._atlas_ready_checked_at = 0.0
        if self._atlas_ready:
            return True
        now = time.monotonic()
        if now - self._atlas_ready_checked_at < _ATLAS_READY_RECHECK_S and self._atlas_ready_checked_at:
            return False
        self._atlas_ready_checked_at = now
        with self._errors("search index listing"):
            found = list(self.memory.list_search_indexes(self.vector_index_name))
        self._atlas_ready = bool(found and found[0].get("queryable"))
        return self._atlas_ready

    def vector_search(
        self, query: MemoryQuery, vector: Sequence[float], model_id: str, limit: int
    ) -> tuple[list[Hit], VectorSearchInfo]:
        q = np.asarray(vector, dtype=np.float32)
        if q.ndim != 1 or q.shape[0] == 0:
            raise StoreError("the query vector must be a non-empty list of numbers")
        if limit <= 0:
            return [], VectorSearchInfo(method="none")
        method, _ = self._choose_vector_method()
        notes: list[str] = []
        if method == "atlas":
            if time.monotonic() < self._atlas_failed_until:
                notes.append(f"Atlas $vectorSearch unavailable ({self._atlas_error}); served by the local path")
            else:
                try:
                    if self._atlas_index_ready(q.shape[0]):
                        return self._atlas_search(query, q, model_id, limit)
                    notes.append(
                        f"Atlas vector index {self.vector_index_name!r} is not queryable yet; served by the local path"
                    )
                except StoreError as exc:
                    # retried after a pause, not on every query
                    self._atlas_error = str(exc)[:200]
                    self._atlas_failed_until = time.monotonic() + _ATLAS_READY_RECHECK_S
                    notes.append(f"Atlas $vectorSearch failed ({self._atlas_error}); served by the local path")
        cached = self._cached_search(query, q, model_id, limit) if self.vector_cache_bytes else None
        if isinstance(cached, tuple):
            hits, info = cached
        else:
            hits, info = self._local_scan(query, q, model_id, limit)
            if cached:
                notes.append(cached)
        info.notes = notes + info.notes
        return hits, info

    # -- in-process vector cache (self-hosted path) --
    def _cached_search(
        self, query: MemoryQuery, q: np.ndarray, model_id: str, limit: int
    ) -> tuple[list[Hit], VectorSearchInfo] | str | None:
        """Exact search over the cached matrices of (agent, user, model): the scope's user and
        the agent's user-less rows, each its own partition, so other users' rows are never
        loaded, synced, counted or masked for this query. A reason string (or None when there
        is nothing to say) when a partition cannot be cached."""
        dims = q.shape[0]
        agent = query.scope.agent_wallet
        with self._errors("vector cache sync"):
            parts = self._partitions_of(agent, _mql.text_users(query), model_id, dims)
            if isinstance(parts, str):
                return parts
            norm = float(np.linalg.norm(q))
            qn = q / norm if norm else q
            info = VectorSearchInfo(method="local-cache")
            base = _mql.merge([*_mql.scope_filter(query).items(), ("embeddingModel", model_id)])
            narrowed = None
            if query.filters or (not query.durable and query.scope.thread_id):
                narrowed = [d["_id"] for d in self.memory.find(base, {"_id": 1})]
            picked: list[tuple[Any, float]] = []
            for part in parts:
                with part.lock:
                    if part.live_count and part.dims != dims:
                        raise StoreError(
                            f"query vector has {dims} dimensions but rows embedded by {model_id} have {part.dims}")
                    mask = part.mask(query)
                    if narrowed is not None:
                        mask = part.only(mask, narrowed)
                    info.candidates += int(mask.sum())
                    # a few spare candidates: rows changed since the sync are re-checked below
                    picked += part.top(qn, mask, limit + min(limit, 16), part.groups_of(query))
                info.skipped_other_models += part.other_models  # kept by the sync: no count on the hot path
            if not picked:
                return [], info
            docs = {
                d["_id"]: d
                for d in self.memory.find({**base, "_id": {"$in": [k for k, _ in picked]}}, projection={"embedding": 0})
            }
        ranked = sorted(((k, c) for k, c in picked if k in docs), key=lambda p: (-p[1], p[0]))[:limit]
        return [Hit(doc_to_memory(docs[k], with_embedding=False), (1.0 + c) / 2.0) for k, c in ranked], info

    @staticmethod
    def _rows_of(agent: str, user: str | None, model_id: str | dict[str, Any]) -> dict[str, Any]:
        """The filter of one partition's rows: one (agent, user) range of ``USER_SCAN_INDEX``."""
        return {"agentWallet": agent, "userAddress": user, "embeddingModel": model_id}

    def _partitions_of(self, agent: str, users: Sequence[str | None], model_id: str,
                       dims: int) -> list[_CachePartition] | str:
        """The synced partitions of (agent, user, model) for each of ``users``, loading or
        reloading those that need it. The held ones are synced together (one find for their new
        rows, one aggregate when they are due a count) and the others loaded together (one count),
        so the user's partition and the agent's user-less one cost one round trip, not two."""
        held: dict[str | None, _CachePartition] = {}
        with self._cache_lock:
            for user in users:
                part = self._partitions.pop((agent, user, model_id), None)
                if part is not None:
                    self._partitions[(agent, user, model_id)] = part  # most recently used last
                    held[user] = part
        fresh = [p for p in held.values() if time.monotonic() - p.loaded_at < self.vector_cache_reload_s]
        synced = {p.user_address for p in self._sync(fresh, model_id)} if fresh else set()
        loaded = self._load_all(agent, [u for u in users if u not in synced], model_id, dims, held)
        if isinstance(loaded, str):
            return loaded
        out = []
        for user in users:
            part = loaded[user] if user in loaded else held[user]
            if not self._fits((agent, user, model_id), part):
                return self._too_big(agent, user, model_id, part.live_count, dims)
            out.append(part)
        return out

    def _load_all(self, agent: str, users: Sequence[str | None], model_id: str, dims: int,
                  old: dict[str | None, _CachePartition]) -> dict[str | None, _CachePartition] | str:
        """Load the partitions of ``users`` (counted in one aggregate), replacing ``old``'s; the
        reason when one is too big to cache."""
        if not users:
            return {}
        started = now_ms()  # rows written from here on are read again by the next sync
        counts = self._model_counts(agent, users, model_id)
        out: dict[str | None, _CachePartition] = {}
        for user in users:
            rows, other_models = counts.get(user, (0, 0))
            key = (agent, user, model_id)
            if rows * VectorIndex.row_bytes(dims) > self.vector_cache_bytes:
                with self._cache_lock:
                    self._uncache(key)
                return self._too_big(agent, user, model_id, rows, dims)
            part = self._load(agent, user, model_id, dims, rows, started)
            part.adopt_ann(old.get(user))  # the approximate indexes survive the periodic reload
            part.other_models = other_models
            with self._cache_lock:
                self._partitions[key] = part
            out[user] = part
        return out

    def _model_counts(self, agent: str, users: Sequence[str | None], model_id: str) -> dict[str | None, tuple[int, int]]:
        """For each of the agent's ``users``: its rows embedded by ``model_id``, and those
        embedded by another model (never scored against this one), in one round trip."""
        counts: dict[str | None, tuple[int, int]] = {}
        for row in self.memory.aggregate(_mql.embedding_model_counts_pipeline(agent, users)):
            user = row["user"]
            ours, others = counts.get(user, (0, 0))
            if row["model"] == model_id:
                ours += int(row["n"])
            else:
                others += int(row["n"])
            counts[user] = (ours, others)
        return counts

    def _too_big(self, agent: str, user: str | None, model_id: str, rows: int, dims: int) -> str:
        mb = rows * VectorIndex.row_bytes(dims) / 2**20
        whose = f"user {user!r} of agent {agent!r}" if user is not None else f"agent {agent!r} (rows without a user)"
        return (f"vector cache skipped: {whose} has {rows} rows of {model_id} (~{mb:.0f} MiB), more than "
                f"vector_cache_bytes ({self.vector_cache_bytes / 2**20:.0f} MiB); served by local-scan")

    def _fits(self, key: tuple[str, str | None, str], part: _CachePartition) -> bool:
        """Evict least recently used partitions until the cache is within its byte bound;
        False (and ``part`` dropped) when ``part`` alone exceeds it.

        ``part`` was just loaded or synced, the only times a partition grows, so its size is
        taken again here and the others' recorded sizes are current: the running total
        (``_cached_bytes``) makes this check independent of how many users are cached. Only
        what the cache holds is counted: a ``part`` another thread evicted or replaced meanwhile
        still serves this search, uncounted."""
        with self._cache_lock:
            size = part.nbytes
            held = self._partitions.get(key) is part
            if size > self.vector_cache_bytes:
                if held:
                    self._uncache(key)
                return False
            if not held:
                return True
            self._cached_bytes += size - self._partition_bytes.get(key, 0)
            self._partition_bytes[key] = size
            while self._cached_bytes > self.vector_cache_bytes:
                oldest = next(iter(self._partitions))
                if oldest == key:
                    break
                self._uncache(oldest)
            return True

    def _uncache(self, key: tuple[str, str | None, str]) -> None:
        """Drop a partition from the cache and its size from the total (``_cache_lock`` held)."""
        self._partitions.pop(key, None)
        self._cached_bytes -= self._partition_bytes.pop(key, 0)

    def _apply(self, part: _CachePartition, model_id: str, docs: list[dict[str, Any]]) -> None:
        """Upsert rows of the partition's model and user, drop the others (re-embedded, embedding
        removed, moved to another user)."""
        mine = []
        for d in docs:
            part.stamps[d["_id"]] = d.get(SYNC_FIELD)
            if (d.get("embeddingModel") == model_id and d.get("embedding") is not None
                    and d.get("userAddress") == part.user_address):  # a row moved to another user is that user's now
                mine.append(d)
            else:
                part.remove(d["_id"])
        if not mine:
            return
        matrix = self._decode_batch([d["embedding"] for d in mine], part.dims, model_id)
        for d, vec in zip(mine, matrix):
            meta = d.get("metadata") or {}
            part.upsert(d["_id"], vec, agent=part.agent_wallet, user=d.get("userAddress"), mode=d.get("mode"),
                        hai=d.get("haiId"), source=d.get("source"),
                        active=meta.get("status") not in _mql.INACTIVE_STATUSES, expires_at=expires_at_of(meta))

    def _load(self, agent: str, user: str | None, model_id: str, dims: int, rows: int,
              watermark: int) -> _CachePartition:
        """The partition of ``rows`` rows (counted at ``watermark``, ms: rows written since are
        read again by the next sync); an empty one is not read at all (a new user, an agent
        without user-less rows)."""
        part = _CachePartition(agent, user, dims, rows + 64)
        part.watermark = watermark
        part.loaded_at = time.monotonic()
        if rows:
            self._read_into([part], model_id, self._rows_of(agent, user, model_id), sort=[("_id", 1)])
        return part

    def _read_into(self, parts: Sequence[_CachePartition], model_id: str, flt: dict[str, Any],
                   sort: list[tuple[str, int]] | None = None) -> Counter[str | None]:
        """Apply the rows ``flt`` matches to the partition of each row's user among ``parts``,
        read with the cache's fields in batches of ``scan_batch_size``; how many rows were read
        for each user."""
        by_user = {p.user_address: p for p in parts}
        read: Counter[str | None] = Counter()
        batches: dict[str | None, list[dict[str, Any]]] = {user: [] for user in by_user}
        cursor = self.memory.find(flt, self._CACHE_FIELDS, sort=sort, batch_size=self.scan_batch_size)
        try:
            for doc in cursor:
                user = doc.get("userAddress")  # ``flt`` reads these partitions' users only
                batch = batches[user]
                read[user] += 1
                batch.append(doc)
                if len(batch) >= self.scan_batch_size:
                    self._apply(by_user[user], model_id, batch)
                    batch.clear()
        finally:
            cursor.close()
        for user, batch in batches.items():
            self._apply(by_user[user], model_id, batch)
        return read

    def _sync(self, parts: Sequence[_CachePartition], model_id: str) -> list[_CachePartition]:
        """Apply the partitions' rows written since their last sync, in one find; the partitions
        that are current (the others need a full reload).

        Only the partitions' (agent, user) ranges are read. A row moved to another user (its
        ``userAddress`` changed) is read by that user's partition; here it is dropped at the
        next recount, and until then the final fetch (full scope filter) never returns it."""
        with contextlib.ExitStack() as held:
            # one lock order for every thread: a user's partition before the user-less one
            for part in sorted(parts, key=lambda p: p.user_address is None):
                held.enter_context(part.lock)
            return self._sync_held(parts, model_id)

    def _sync_held(self, parts: Sequence[_CachePartition], model_id: str) -> list[_CachePartition]:
        started = now_ms()
        # every row of the window is read again (in the same round trip that finds it), even one
        # whose stamp the cache already holds: a second write in the same millisecond carries the
        # same stamp and would otherwise be missed
        windows = [{"agentWallet": p.agent_wallet, "userAddress": p.user_address,
                    SYNC_FIELD: {"$gte": p.watermark - self.vector_cache_lag_ms}} for p in parts]
        read = self._read_into(parts, model_id, windows[0] if len(windows) == 1 else {"$or": windows})
        now = time.monotonic()
        # hard deletes (and moves to another user) leave no row to read (and the final fetch never
        # returns such a row): compare counts now and then, and reconcile ids when they differ; a
        # partition with changed rows is counted too (a row may have moved to or from another model)
        due = [now - p.counted_at >= self.vector_cache_recount_s for p in parts]
        counted = [p.user_address for p, recount in zip(parts, due) if recount or read[p.user_address]]
        counts = self._model_counts(parts[0].agent_wallet, counted, model_id) if counted else {}
        current = []
        for part, recount in zip(parts, due):
            part.watermark = started
            if part.user_address in counted:
                server, part.other_models = counts.get(part.user_address, (0, 0))
                if recount and not self._reconciled(part, server, model_id, now):
                    continue
            current.append(part)
        return current

    def _reconciled(self, part: _CachePartition, server: int, model_id: str, now: float) -> bool:
        """Drop the partition's rows the server no longer has (``server`` rows of the model);
        False when the server has rows the partition lacks (written without the sync stamp, not
        through a MongoStore): it needs a full reload."""
        part.counted_at = now
        if server < part.live_count:
            rows = self._rows_of(part.agent_wallet, part.user_address, model_id)
            present = {d["_id"] for d in self.memory.find(rows, {"_id": 1})}
            for gone in part.live_keys() - present:
                part.remove(gone)
        return server == part.live_count

    def _atlas_search(
        self, query: MemoryQuery, q: np.ndarray, model_id: str, limit: int
    ) -> tuple[list[Hit], VectorSearchInfo]:
        pipeline = _mql.atlas_vector_pipeline(
            query, q.tolist(), model_id, limit, index_name=self.vector_index_name,
            prefilter_fields=self.prefilter_fields, min_score=self.min_vector_score,
        )
        with self._errors("$vectorSearch"):
            docs = list(self.memory.aggregate(pipeline))
        info = VectorSearchInfo(method="atlas", candidates=pipeline[0]["$vectorSearch"]["numCandidates"])
        return [Hit(doc_to_memory(d, with_embedding=False), float(d["_score"])) for d in docs], info

    def _local_scan(
        self, query: MemoryQuery, q: np.ndarray, model_id: str, limit: int
    ) -> tuple[list[Hit], VectorSearchInfo]:
        info = VectorSearchInfo(method="local-scan")
        dims = q.shape[0]
        norm = float(np.linalg.norm(q))
        q = q / norm if norm else q
        top_scores = np.empty(0, dtype=np.float32)
        top_ids: list[Any] = []
        batch_ids: list[Any] = []
        batch_vecs: list[Any] = []
        scanned = 0
        capped = False

        def flush() -> None:
            nonlocal top_scores, top_ids
            if not batch_ids:
                return
            matrix = self._decode_batch(batch_vecs, dims, model_id)
            norms = np.linalg.norm(matrix, axis=1)
            norms[norms == 0] = 1.0
            scores = np.concatenate([top_scores, ((matrix @ q) / norms).astype(np.float32, copy=False)])
            ids = top_ids + batch_ids
            k = min(limit, len(ids))
            keep = np.argpartition(-scores, k - 1)[:k] if k < len(ids) else np.arange(len(ids))
            top_scores = scores[keep]
            top_ids = [ids[i] for i in keep]
            batch_ids.clear()
            batch_vecs.clear()

        flt, projection, sort = _mql.local_scan_query(query, model_id)
        with self._errors("vector scan"):
            cursor = self.memory.find(flt, projection, sort=sort, batch_size=self.scan_batch_size,
                                      hint=self._hint(_mql_schema.USER_SCAN_INDEX))
            try:
                for doc in cursor:
                    if self.max_scan is not None and scanned >= self.max_scan:
                        capped = True
                        break
                    scanned += 1
                    batch_ids.append(doc["_id"])
                    batch_vecs.append(doc["embedding"])
                    if len(batch_ids) >= self.scan_batch_size:
                        flush()
            finally:
                cursor.close()
            flush()
            info.candidates = scanned
            info.skipped_other_models = int(self.memory.count_documents(_mql.other_model_filter(query, model_id)))
            if capped:
                info.notes.append(
                    f"local-scan scored only the newest {self.max_scan} rows of this scope (max_scan); "
                    "older rows were not considered"
                )
            if not top_ids:
                return [], info
            docs = {
                d["_id"]: d for d in self.memory.find({"agentWallet": query.scope.agent_wallet, "_id": {"$in": top_ids}},
                                                      projection={"embedding": 0})
            }
        # best first; exact ties in insertion order (ObjectId), as the embedded store orders them
        ranked = sorted(zip(top_ids, top_scores.tolist()), key=lambda p: (-p[1], p[0]))
        hits = [
            Hit(doc_to_memory(docs[i], with_embedding=False), (1.0 + s) / 2.0) for i, s in ranked if i in docs
        ]
        return hits, info

    @staticmethod
    def _decode_batch(values: list[Any], dims: int, model_id: str) -> np.ndarray:
        width = _VECTOR_HEADER + 4 * dims
        if all(isinstance(v, (bytes, Binary)) for v in values):
            raw = b"".join(values)
            if len(raw) != width * len(values):
                sizes = sorted({(len(v) - _VECTOR_HEADER) // 4 for v in values})
                found = sizes[0] if len(sizes) == 1 else sizes
                raise StoreError(f"query vector has {dims} dimensions but rows embedded by {model_id} have {found}")
            block = np.frombuffer(raw, dtype=np.uint8).reshape(len(values), width)
            if np.any(block[:, 0] != _FLOAT32_DTYPE):
                raise StoreError("an embedding is stored as binary data that is not a float32 vector")
            return np.ascontiguousarray(block[:, _VECTOR_HEADER:]).view("<f4").astype(np.float32, copy=False)
        rows = [decode_vector(v) for v in values]
        bad = {r.shape[0] for r in rows if r is not None and r.shape[0] != dims}
        if bad:
            raise StoreError(f"query vector has {dims} dimensions but rows embedded by {model_id} have {sorted(bad)}")
        return np.vstack(cast(list[np.ndarray], rows)).astype(np.float32, copy=False)  # the rows all have vectors
