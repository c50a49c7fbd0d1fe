"""The MongoDB store's connection object: the client, database and collections, the error
mapping, the recorded migrations run at open and the document helpers every role shares."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, ClassVar, TypeVar

import numpy as np

from ..._util import now_ms
from ...errors import ConfigurationError, ConflictError, MissingDependencyError, StoreError, StoreUnavailableError
from ...records import MemoryRecord, Session
from ...redaction import install_log_redaction
from .. import _mql, _mql_schema
from .. import base as _base
from .._mql_schema import (
    ACTIVE_FACT_FIELD,
    ARCHIVES,
    JOBS,
    MEMORY,
    PATTERNS,
    SESSIONS,
    SKILLS,
    SYNC_FIELD,
    TRANSCRIPT_CHUNKS,
    TRANSCRIPTS,
)
from .._vectors import VectorIndex
from ..base import MemoryQuery, is_unique_fact
from . import migrations as _migrations

try:
    import pymongo
    from bson.binary import Binary, BinaryVectorDtype
    from pymongo.errors import (
        AutoReconnect,
        BulkWriteError,
        ConnectionFailure,
        DuplicateKeyError,
        NotPrimaryError,
        OperationFailure,
        PyMongoError,
        ServerSelectionTimeoutError,
        WaitQueueTimeoutError,
    )
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise MissingDependencyError("pymongo", "mongo", "The MongoDB store") from exc

__all__ = ["DEFAULT_DATABASE", "MIGRATION_LEASE_MS", "VECTOR_SEARCH_MODES", "MongoConnection"]


log = logging.getLogger("manowar_memory.mongo")


install_log_redaction(log)  # no credential reaches a log line


VECTOR_SEARCH_MODES = ("auto", "atlas", "local")


DEFAULT_DATABASE = "manowar_memory"


_VECTOR_HEADER = 2  # BinData vector: dtype byte + padding byte


_FLOAT32_DTYPE = 0x27


_INDEX_CONFLICT_CODES = {85, 86}  # IndexOptionsConflict, IndexKeySpecsConflict


T = TypeVar("T")


_MEMORY_ALIASES = {name: (f.alias or name) for name, f in MemoryRecord.model_fields.items()}


#: On a transcript document: the sealed chunks (``seq``, ``digest``) that hold its older messages.
CHUNKS_FIELD = "messageChunks"


_DERIVED = ("_id", "scopeKind", "scopeId", "_score", ACTIVE_FACT_FIELD, SYNC_FIELD, CHUNKS_FIELD)


DEFAULT_TRANSCRIPT_CHUNK_BYTES = 4 * 2**20


#: driver errors that mean "no usable server right now" (down, unreachable, no primary yet)
_UNAVAILABLE = (AutoReconnect, ConnectionFailure, NotPrimaryError, ServerSelectionTimeoutError, WaitQueueTimeoutError)


def encode_vector(vector: Sequence[float] | None) -> Binary | None:
    """A vector as a BSON BinData float32 vector (subtype 9)."""
    if vector is None:
        return None
    return Binary.from_vector(np.asarray(vector, dtype=np.float32).tolist(), BinaryVectorDtype.FLOAT32)


def decode_vector(value: Any) -> np.ndarray | None:
    """A stored embedding (BinData float32 vector, or the reference's array of numbers) as float32."""
    if value is None:
        return None
    if isinstance(value, (bytes, bytearray, Binary)):
        raw = bytes(value)
        if len(raw) >= _VECTOR_HEADER and raw[0] == _FLOAT32_DTYPE:
            return np.frombuffer(raw, dtype="<f4", offset=_VECTOR_HEADER)
        raise StoreError(f"an embedding is stored as binary data of an unsupported kind (dtype byte {raw[:1]!r})")
    return np.asarray(value, dtype=np.float32)


def _scoped_doc(model: Any) -> dict[str, Any]:
    doc: dict[str, Any] = model.to_doc()
    doc["scopeKind"] = model.mode
    doc["scopeId"] = model.hai_id or model.agent_wallet
    return doc


def memory_to_doc(record: MemoryRecord) -> dict[str, Any]:
    """A memory row as stored: camelCase fields, ``scopeKind``/``scopeId``, a binary embedding."""
    doc = _scoped_doc(record)
    doc["embedding"] = encode_vector(record.embedding)
    if record.embedding is None:
        doc["embeddingModel"] = None
    if is_unique_fact(record.source, record.metadata):
        doc[ACTIVE_FACT_FIELD] = record.metadata["factHash"]
    return doc


def doc_to_memory(doc: dict[str, Any], with_embedding: bool = True) -> MemoryRecord:
    """A stored memory document as a record (embedding included only when asked and present)."""
    data = {k: v for k, v in doc.items() if k not in _DERIVED}
    emb = data.pop("embedding", None)
    vector = decode_vector(emb) if with_embedding else None
    data["embedding"] = vector.tolist() if vector is not None else None
    return MemoryRecord.model_validate(data)


def session_to_doc(session: Session) -> dict[str, Any]:
    """A session as stored: ``expiresAt`` is a BSON Date so the TTL index can expire it."""
    doc = _scoped_doc(session)
    doc["expiresAt"] = _mql.ms_to_date(session.expires_at)
    return doc


def doc_to_session(doc: dict[str, Any]) -> Session:
    """A stored session document as a :class:`Session` (``expiresAt`` back to epoch ms)."""
    data = {k: v for k, v in doc.items() if k not in _DERIVED}
    data["expiresAt"] = _mql.date_to_ms(data["expiresAt"])
    return Session.model_validate(data)


def _strip(doc: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if k not in _DERIVED}


def _database_from_uri(uri: str) -> str | None:
    """The database named in a connection string's path (no DNS lookup, unlike parse_uri for +srv)."""
    from urllib.parse import unquote

    rest = uri.split("://", 1)[1] if "://" in uri else uri
    rest = rest.split("?", 1)[0]
    if "/" not in rest:
        return None
    name = unquote(rest.split("/", 1)[1]).strip()
    return name or None


class _CachePartition(VectorIndex):
    """The cached vectors of one (agent, user, model), with each row's sync stamp."""

    def __init__(self, agent_wallet: str, user: str | None, dims: int, capacity: int) -> None:
        super().__init__(dims, capacity)
        self.agent_wallet = agent_wallet
        self.user_address = user
        self.stamps: dict[Any, Any] = {}
        self.watermark = 0
        self.loaded_at = 0.0
        self.counted_at = 0.0
        self.other_models = 0  # the agent's rows embedded by another model, refreshed when rows change


_MIGRATION_LEASE = "lease"


#: how long a migration lease lasts without renewal (the engine holding it renews it every quarter)
MIGRATION_LEASE_MS = 30_000


class MongoConnection:
    """The connection object every role of :class:`~manowar_memory.stores.mongo.MongoStore` works
    over (one module per role mixes into it): client, database, collections, options, caches."""

    name = "mongo"

    def __init__(
        self,
        uri: str | None = None,
        database: str | None = None,
        *,
        vector_search: str = "auto",
        client: Any = None,
        max_scan: int | None = 250_000,
        scan_batch_size: int = 1_000,
        vector_cache_bytes: int = 256 * 2**20,
        vector_cache_lag_ms: int = 2_000,
        vector_cache_reload_s: float = 300.0,
        vector_cache_recount_s: float = 1.0,
        prefilter_fields: Sequence[str] | None = None,
        vector_index_name: str = _mql_schema.VECTOR_INDEX_NAME,
        min_vector_score: float | None = None,
        transcript_chunk_bytes: int = DEFAULT_TRANSCRIPT_CHUNK_BYTES,
        create_indexes: bool = True,
        **client_options: Any,
    ) -> None:
        if vector_search not in VECTOR_SEARCH_MODES:
            raise ConfigurationError(f"vector_search must be one of {VECTOR_SEARCH_MODES}, got {vector_search!r}")
        if client is None and not uri:
            uri = os.environ.get("MONGO_MEMORY_URI") or os.environ.get("MONGODB_URI")
            if not uri:
                raise ConfigurationError(
                    "MongoStore needs a connection: pass MongoStore('mongodb://host:27017/db') or "
                    "client=MongoClient(...), "
                    "or set MONGO_MEMORY_URI"
                )
        if max_scan is not None and max_scan < 1:
            raise ConfigurationError("max_scan must be a positive integer or None")
        if scan_batch_size < 1:
            raise ConfigurationError("scan_batch_size must be a positive integer")
        if not 4096 <= transcript_chunk_bytes <= 8 * 2**20:
            raise ConfigurationError(
                f"transcript_chunk_bytes must be between 4096 and {8 * 2**20} (8 MiB), got {transcript_chunk_bytes!r}")
        self.transcript_chunk_bytes = int(transcript_chunk_bytes)
        self._owns_client = client is None
        if client is None:
            client = self._new_client(uri, client_options)
        self.client = client
        db_name = (
            database or (_database_from_uri(uri) if uri else None) or os.environ.get("MONGO_MEMORY_DB")
            or DEFAULT_DATABASE
        )
        self.db = client[db_name]
        self.database_name = db_name
        self.max_scan = max_scan
        self.scan_batch_size = scan_batch_size
        self._init_vector_search(
            vector_search, cache=(vector_cache_bytes, vector_cache_lag_ms, vector_cache_reload_s, vector_cache_recount_s),
            prefilter_fields=prefilter_fields, vector_index_name=vector_index_name, min_vector_score=min_vector_score)
        self._closed = False
        self._transactions: bool | None = None  # whether the server runs transactions; None: not yet known
        self._memory_indexes: set[str] | None = None  # the memory collection's index names, read once
        self._bind_collections()
        if create_indexes:
            self.migrate()

    @staticmethod
    def _new_client(uri: str | None, client_options: dict[str, Any]) -> Any:
        """The client the store creates (and closes) itself: ``client_options`` over the defaults."""
        # On a replica set: a write is acknowledged once a majority holds it (journaled), so a
        # primary that crashes right after cannot take it away in a rollback; a write or read
        # cut by an election is retried once by the driver on the new primary (it waits up to
        # serverSelectionTimeoutMS for one). Reads use the default primary (read-your-writes).
        options: dict[str, Any] = {
            "serverSelectionTimeoutMS": 10_000, "connectTimeoutMS": 10_000, "socketTimeoutMS": 30_000,
            "appname": "manowar-memory", "tz_aware": True,
            "w": "majority", "journal": True, "retryWrites": True, "retryReads": True,
        }
        options.update(client_options)
        return pymongo.MongoClient(uri, **options)

    def _init_vector_search(
        self, vector_search: str, *, cache: tuple[int, int, float, float], prefilter_fields: Sequence[str] | None,
        vector_index_name: str, min_vector_score: float | None,
    ) -> None:
        """The vector lane's options and state: the cache ``(bytes, lag_ms, reload_s, recount_s)``,
        the Atlas prefilter and index, and the method chosen on the first search."""
        vector_cache_bytes, vector_cache_lag_ms, vector_cache_reload_s, vector_cache_recount_s = cache
        if vector_cache_bytes < 0 or vector_cache_lag_ms < 0 or vector_cache_recount_s < 0 or vector_cache_reload_s <= 0:
            raise ConfigurationError(
                "vector_cache_bytes, vector_cache_lag_ms and vector_cache_recount_s must be >= 0, "
                "vector_cache_reload_s > 0"
            )
        self.vector_cache_recount_s = float(vector_cache_recount_s)
        self.vector_cache_bytes = int(vector_cache_bytes)
        self.vector_cache_lag_ms = int(vector_cache_lag_ms)
        self.vector_cache_reload_s = float(vector_cache_reload_s)
        self._partitions: dict[tuple[str, str | None, str], _CachePartition] = {}
        # each cached partition's bytes when last sized, and their sum: the bound is checked
        # on every search without walking every user's partition
        self._partition_bytes: dict[tuple[str, str | None, str], int] = {}
        self._cached_bytes = 0
        self._cache_lock = threading.Lock()
        if prefilter_fields is None:
            prefilter_fields = _mql.parse_prefilter_fields(os.environ.get("MEMORY_VECTOR_PREFILTER_FIELDS")) or (
                _mql.DEFAULT_PREFILTER_FIELDS
            )
        self.prefilter_fields = tuple(prefilter_fields)
        self.vector_index_name = vector_index_name
        self.min_vector_score = min_vector_score
        self.vector_search_mode = vector_search
        self.vector_search_choice: tuple[str, str] | None = None  # (method, why), set on first vector search
        self._choice_lock = threading.Lock()
        self._atlas_index_dims: int | None = None
        self._atlas_ready_checked_at = 0.0
        self._atlas_ready = False
        self._atlas_failed_until = 0.0
        self._atlas_error = ""

    def _bind_collections(self) -> None:
        """The store's collections, as attributes."""
        self.memory = self.db[MEMORY]
        self.transcripts = self.db[TRANSCRIPTS]
        self.transcript_chunks = self.db[TRANSCRIPT_CHUNKS]
        self.sessions = self.db[SESSIONS]
        self.turns = self.db[_mql_schema.TURNS]
        self.patterns = self.db[PATTERNS]
        self.archives = self.db[ARCHIVES]
        self.skills = self.db[SKILLS]
        self.jobs = self.db[JOBS]
        self.schedules = self.db[_mql_schema.SCHEDULES]

    # -- plumbing --
    @contextmanager
    def _errors(self, what: str) -> Iterator[None]:
        if self._closed:
            raise StoreError("this MongoStore is closed; create a new one")
        try:
            yield
        except StoreError:
            raise
        except _UNAVAILABLE as exc:
            raise StoreUnavailableError(
                f"MongoDB {what} failed: no server or primary reachable ({type(exc).__name__}: {exc}); "
                "the replica set may be electing a primary: retry the same call in a moment "
                "(see StoreUnavailableError for which calls are safe to repeat)", operation=what,
            ) from exc
        except PyMongoError as exc:
            if exc.has_error_label("RetryableWriteError") or exc.has_error_label("TransientTransactionError"):
                raise StoreUnavailableError(
                    f"MongoDB {what} failed during a primary change ({type(exc).__name__}: {exc}); "
                    "retry the same call in a moment", operation=what,
                ) from exc
            raise StoreError(f"MongoDB {what} failed: {type(exc).__name__}: {exc}") from exc

    def ensure_indexes(self) -> None:
        """Apply the pending schema migrations (:meth:`migrate`): the indexes are created by them."""
        self.migrate()

    def migrations(self) -> list[str]:
        """Names of the migrations applied to this database, in order."""
        with self._errors("migration listing"):
            docs = self.db[_mql_schema.MIGRATIONS_COLLECTION].find({"order": {"$exists": True}}, {"order": 1})
            return [str(d["_id"]) for d in sorted(docs, key=lambda d: (d["order"], d["_id"]))]

    def _pending_migrations(self) -> list[tuple[int, str, Callable[[MongoConnection], None]]]:
        done = set(self.migrations())
        known = {name for name, _ in _migrations.MIGRATIONS}
        if done - known:
            raise StoreError(
                f"the MongoDB database {self.database_name!r} was migrated by a newer manowar-memory "
                f"(migrations {sorted(done - known)}); upgrade manowar-memory to open it")
        return [(i, name, step) for i, (name, step) in enumerate(_migrations.MIGRATIONS, 1) if name not in done]

    def migrate(self) -> list[str]:
        """Apply the migrations (:data:`MIGRATIONS`) this database has not recorded, in order,
        each recorded in ``_manowar_migrations`` once done; returns the names applied now.

        Engines starting together do not run them twice at once: the one that takes the
        migration lease (a document in the same collection, renewed every few seconds while it
        works) applies them, the others wait until they are recorded. A lease left by an engine
        that died expires after :data:`MIGRATION_LEASE_MS` and the next engine takes over; the
        steps are idempotent, so a migration cut half-way is simply run again. A database
        migrated by a newer version (a migration this one does not know) is refused."""
        pending = self._pending_migrations()
        if not pending:
            return []
        coll = self.db[_mql_schema.MIGRATIONS_COLLECTION]
        token = os.urandom(8).hex()
        waited = False
        with self._errors("migration"):
            while not self._take_migration_lease(coll, token):
                if not waited:
                    log.info("MongoStore: another engine is migrating %s; waiting for it", self.database_name)
                    waited = True
                time.sleep(0.2)
                pending = self._pending_migrations()
                if not pending:
                    return []
            stop = threading.Event()
            heartbeat = threading.Thread(target=self._renew_migration_lease, args=(coll, token, stop),
                                         name="manowar-migration-lease", daemon=True)
            heartbeat.start()
            applied: list[str] = []
            try:
                for order, name, step in self._pending_migrations():  # again, now that the lease is ours
                    step(self)
                    coll.update_one({"_id": name}, {"$setOnInsert": {"order": order, "appliedAt": now_ms()}},
                                    upsert=True)
                    applied.append(name)
                    log.info("MongoStore: applied migration %s to %s", name, self.database_name)
            finally:
                stop.set()
                heartbeat.join()
                coll.delete_one({"_id": _MIGRATION_LEASE, "owner": token})
                self._memory_indexes = None  # the hints read the indexes again
        return applied

    @staticmethod
    def _take_migration_lease(coll: Any, token: str) -> bool:
        now = now_ms()
        try:
            doc = coll.find_one_and_update(
                {"_id": _MIGRATION_LEASE, "$or": [{"until": {"$lt": now}}, {"owner": token}]},
                {"$set": {"owner": token, "until": now + MIGRATION_LEASE_MS}},
                upsert=True, return_document=pymongo.ReturnDocument.AFTER)
        except DuplicateKeyError:  # another engine holds an unexpired lease
            return False
        return bool(doc and doc.get("owner") == token)

    @staticmethod
    def _renew_migration_lease(coll: Any, token: str, stop: threading.Event) -> None:
        while not stop.wait(MIGRATION_LEASE_MS / 4000):
            try:
                coll.update_one({"_id": _MIGRATION_LEASE, "owner": token},
                                {"$set": {"until": now_ms() + MIGRATION_LEASE_MS}})
            except PyMongoError as exc:  # the next renewal tries again; the lease outlives a few misses
                log.warning("MongoStore: could not renew the migration lease: %s", exc)

    def create_indexes(self, coll_name: str, specs: Sequence[_mql_schema.IndexSpec]) -> None:
        """Create indexes (idempotent). An index whose options changed is dropped and created
        again, as the reference does for sessions."""
        from pymongo import IndexModel

        coll = self.db[coll_name]
        models = [IndexModel(spec.keys, name=spec.name, **spec.options) for spec in specs]
        try:
            coll.create_indexes(models)
        except OperationFailure as exc:
            if exc.code not in _INDEX_CONFLICT_CODES:
                raise
            for spec, model in zip(specs, models):
                self._create_or_replace(coll, spec, model)

    def migrate_active_facts(self) -> int:
        """Prepare the unique active-fact index on a collection written without it.

        Derives ``activeFactHash`` on every row (set on active facts, removed elsewhere). Rows
        that duplicate an active fact (the old check-then-insert race) are not deleted: in each
        (agent, factHash) group the newest row (createdAt, updatedAt, then _id; the one
        ``find_fact_by_hash`` returned) stays active and the others are marked superseded as
        the consolidate job does (``supersededAt``, ``supersededBy``, ``supersededReason``), so
        nothing is lost and ``active_only=False`` reads still see them. Idempotent; returns
        how many rows were superseded (also logged)."""
        now = now_ms()
        inactive = list(_mql.INACTIVE_STATUSES)
        with self._errors("active-fact migration"):
            self.memory.update_many(
                {"$or": [
                    {"source": "fact", "metadata.factHash": {"$ne": None}, "metadata.status": {"$nin": inactive},
                     ACTIVE_FACT_FIELD: {"$exists": False}},
                    {ACTIVE_FACT_FIELD: {"$exists": True}},
                ]},
                _mql.memory_update_pipeline({}, now),
            )
            groups = self.memory.aggregate([
                {"$match": {ACTIVE_FACT_FIELD: {"$exists": True}}},
                {"$sort": {"createdAt": -1, "updatedAt": -1, "_id": -1}},
                {"$group": {"_id": {"a": "$agentWallet", "h": f"${ACTIVE_FACT_FIELD}"}, "ids": {"$push": "$_id"},
                            "keeper": {"$first": "$vectorId"}, "n": {"$sum": 1}}},
                {"$match": {"n": {"$gt": 1}}},
            ], allowDiskUse=True)
            superseded = 0
            for group in groups:
                superseded += self.memory.update_many(
                    {"agentWallet": group["_id"]["a"], "_id": {"$in": group["ids"][1:]}},
                    {"$set": {"metadata.status": "superseded", "metadata.supersededAt": now,
                              "metadata.supersededBy": group["keeper"],
                              "metadata.supersededReason": "duplicate active fact", "updatedAt": now,
                              SYNC_FIELD: now},
                     "$unset": {ACTIVE_FACT_FIELD: ""}},
                ).modified_count
        if superseded:
            log.warning("MongoStore: marked %d duplicate active fact rows superseded (kept, not deleted)", superseded)
        return superseded

    def _create_or_replace(self, coll: Any, spec: _mql_schema.IndexSpec, model: Any) -> None:
        """Create one index; when an index in its place differs (an earlier version's), drop
        that one and create it. Another engine opening the same database may be doing the
        same: each step is tried again once, and creating an index that now exists as
        specified is a no-op, so two engines end with the one index instead of dropping each
        other's."""
        for attempt in range(3):
            try:
                coll.create_indexes([model])
                return
            except OperationFailure as exc:
                if exc.code not in _INDEX_CONFLICT_CODES or attempt == 2:
                    raise
                if attempt == 1:
                    self._drop_conflicting(coll, spec)
                # attempt 0: another engine may have just replaced it; try creating it again

    @staticmethod
    def _drop_conflicting(coll: Any, spec: _mql_schema.IndexSpec) -> None:
        is_text = any(v == "text" for _, v in spec.keys)
        for info in coll.list_indexes():
            same_name = info["name"] == spec.name
            same_keys = list(info["key"].items()) == spec.keys
            text_clash = is_text and "_fts" in info["key"]
            if (same_name or same_keys or text_clash) and info["name"] != "_id_":
                try:
                    coll.drop_index(info["name"])
                except OperationFailure:
                    pass

    def close(self) -> None:
        """Close the client when this store created it."""
        if self._closed:
            return
        self._closed = True
        if self._owns_client:
            self.client.close()

    @staticmethod
    @contextmanager
    def _fact_conflict(what: str) -> Iterator[None]:
        try:
            yield
        except (DuplicateKeyError, BulkWriteError) as exc:
            if ACTIVE_FACT_FIELD not in str(getattr(exc, "details", None) or exc):
                raise
            raise ConflictError(
                f"cannot update memory {what}: the agent already has an active fact with this factHash "
                "(the same text in the same scope); supersede or delete that row first"
            ) from exc

    @staticmethod
    def _memory_sets(changes: dict[str, Any]) -> dict[str, Any]:
        sets: dict[str, Any] = {}
        for key, value in changes.items():
            if key == "embedding":
                sets["embedding"] = encode_vector(value)
            elif key == "metadata":
                sets["metadata"] = dict(value)
            else:
                sets[_MEMORY_ALIASES[key]] = value
        return sets

    def _scope_hint(self, query: MemoryQuery) -> str | None:
        """:func:`~manowar_memory.stores._mql.scope_list_hint`, when the database has that index
        (absent on one opened with ``create_indexes=False`` before its migrations ran)."""
        return self._hint(_mql.scope_list_hint(query))

    def _memory_page(self, agent_wallet: str | None, after: Any, limit: int, users: Sequence[str | None] | None,
                     *, created_from: int | None = None, created_to: int | None = None,
                     with_embedding: bool = True) -> list[dict[str, Any]]:
        """One page of memory documents after the ``_id`` ``after`` in ``_id`` order
        (:func:`~manowar_memory.stores._mql.memory_page_query`), read on the user-rows index when
        users are named: the page of ``page_memories`` and of ``iter_memories``."""
        flt = _mql.memory_page_query(agent_wallet, after, users, created_from=created_from, created_to=created_to)
        with self._errors("read"):
            return list(self.memory.find(flt, None if with_embedding else {"embedding": 0},
                                         hint=self._hint(_mql.user_rows_hint(agent_wallet, users)))
                        .sort("_id", 1).limit(limit))

    def _hint(self, index: str | None) -> str | None:
        """``index`` when the memory collection has it (the indexes of the later migrations are
        absent on a database opened with ``create_indexes=False`` before they ran), else None."""
        if index is None:
            return None
        if self._memory_indexes is None:
            self._memory_indexes = set(self.memory.index_information())
        return index if index in self._memory_indexes else None

    _CACHE_FIELDS: ClassVar[dict[str, int]] = {"embedding": 1, "embeddingModel": 1, "userAddress": 1, "mode": 1, "haiId": 1, "source": 1,
                     "metadata.status": 1, "metadata.expiresAt": 1, SYNC_FIELD: 1}

    def _upsert(self, coll: Any, key: dict[str, Any], doc: dict[str, Any], session: Any = None) -> None:
        for attempt in range(3):
            try:
                coll.replace_one(key, doc, upsert=True, session=session)
                return
            except DuplicateKeyError:  # two upserts raced to insert; the second now updates
                if attempt == 2 or session is not None:  # a transaction ends at its first error
                    raise

    def _get(self, coll: Any, key: str, value: str, model: Callable[..., T]) -> T | None:
        with self._errors("read"):
            doc = coll.find_one({key: value})
        return model.model_validate(_strip(doc)) if doc else None  # type: ignore[attr-defined]

    def _find(
        self, coll: Any, query: MemoryQuery, collection: str, sort: list[tuple[str, int]], limit: int,
        model: Callable[..., T],
    ) -> list[T]:
        if limit <= 0:
            return []
        with self._errors("read"):
            docs = coll.find(_mql.scope_filter(query, collection=collection)).sort(sort).limit(int(limit))
            return [model.model_validate(_strip(d)) for d in docs]  # type: ignore[attr-defined]

    def stats(self, agent_wallet: str | None = None) -> dict[str, Any]:
        flt = {"agentWallet": agent_wallet} if agent_wallet else {}
        with self._errors("stats"):
            (facets,) = list(self.memory.aggregate(_mql.stats_pipeline(agent_wallet)))
            colls = {"transcripts": self.transcripts, "sessions": self.sessions, "patterns": self.patterns,
                     "archives": self.archives}
            counts = {name: int(colls[name].count_documents(flt)) for name in _base.STATS_COUNTED}
        totals = facets["totals"][0] if facets["totals"] else {}
        return _base.stats_report(total=totals.get("count", 0), avg_decay=totals.get("avgDecay"),
                            oldest=totals.get("oldest"), newest=totals.get("newest"),
                            by_source=[(r["_id"], r["n"]) for r in facets["bySource"]],
                            by_status=[(r["_id"], r["n"]) for r in facets["byStatus"]], counts=counts)
