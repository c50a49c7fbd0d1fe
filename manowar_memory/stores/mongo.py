"""The MongoDB store (``pip install "manowar-memory[mongo]"``).

Same collections, field names (camelCase, ``vectorId`` as the row id) and indexes as the
reference (``memory``, ``session_transcripts``, ``sessions`` with a TTL index on the BSON
Date ``expiresAt``, ``patterns``, ``archives``, ``skills``, ``memory_jobs``); every filter and
pipeline comes from the pure builders in :mod:`manowar_memory.stores._mql`.

Vector search, chosen by ``vector_search``:

* ``"atlas"``: ``$vectorSearch`` on the Atlas index ``vector_index`` (cosine; filter fields from
  the reference plus ``MEMORY_VECTOR_PREFILTER_FIELDS`` and ``embeddingModel``), then the full
  scope filter. Scores are Atlas's ``(1 + cos) / 2``. If the stage fails, the search is served
  by the local scan and the result's notes say so.
* ``"local"``: for self-hosted servers, which have no ``$vectorSearch``. The scope's candidate
  rows are streamed from the server newest first (``_id`` and the embedding only, in batches of
  ``scan_batch_size``) and scored exactly with numpy, keeping a running top-k, so memory stays
  bounded by one batch plus ``k`` whatever the corpus size. ``max_scan`` caps the rows scored
  per query (the newest are kept; the notes say when the cap cut the scan).
* ``"auto"`` (default): asks the server once whether it has Atlas Search (``$listSearchIndexes``)
  and uses ``atlas`` or ``local``; :attr:`MongoStore.vector_search_choice` says which and why.

The local path first tries the **in-process vector cache** (``VectorSearchInfo.method ==
"local-cache"``): per (agent, user, embedding model), a numpy matrix of those rows (a query
with a user reads its user's partition and the agent's user-less one and merges their top
rows), scored exactly like the scan (and like the embedded store). It stays in sync with
every writer without re-reading the corpus:

* every write through a ``MongoStore`` stamps the row's ``_syncAt`` (epoch ms); before each
  search the partition re-reads its (agent, user) rows stamped since its last sync minus
  ``vector_cache_lag_ms`` (default 2 s: it should exceed a write's time in flight and the
  clock skew between writers), projected to ``_id`` and the stamp, and fetches only the rows
  whose stamp changed: inserts, re-embeddings, status changes (soft delete, supersede) and
  moves to another model (dropped: models never mix). Rows written within the lag are
  re-checked on every search, so a longer lag costs a little on each search while writes
  are flowing;
* hard deletes leave nothing to read, so at most every ``vector_cache_recount_s`` (default
  1 s) the partition compares its row count with the server's (a count on the
  ``(agentWallet, userAddress, embeddingModel)`` index) and drops the ids that are gone or
  moved to another user (until then such a row can take a candidate slot but is never
  returned); more rows on the server than cached means an insert was missed (written without
  the stamp by another client, or in flight longer than the lag), and the partition is
  reloaded; every partition is also reloaded after ``vector_cache_reload_s`` (default 300 s),
  which bounds how long an update missed that way (a re-embedding) can go unseen;
* the top rows are fetched with the query's full scope filter, so a row changed after the
  sync is never returned out of scope.

Memory is bounded by ``vector_cache_bytes`` (default 256 MiB, ``0`` turns the cache off):
about ``4 * dims + 150`` bytes per cached row (at 384 dimensions ~1.7 KB, so ~160k rows; at
1024, ~64k). Least recently used partitions are evicted to make room; a partition that would
not fit alone is not cached, and its searches use the streaming scan with a note saying so.

One user's reads never touch other users' rows of the same agent: the text indexes (memory;
transcripts; transcript chunks) have ``(agentWallet, userAddress)`` as equality prefixes, so a
scope with a user runs one ``$text`` query for the user and one for the agent's user-less rows
and merges them by score (MongoDB's textScore depends on the document alone, so the merged list
is the one a single query over both would give); the vector cache, the vector scan, patterns,
archives and sessions read (agent, user) index ranges too, and so do ``list_memories`` and
``count_memories`` (``idx_vector_wallet_user_created``). Atlas's ``$vectorSearch`` is
prefiltered on the whole scope (agent, user or the agent's shared rows, mode, HAI).

Shard-ready: every by-id call names the row's agent (``agentWallet``, the shard key the docs
recommend) besides its id, and row ids are unique per agent (the unique index is
``(agentWallet, vectorId)``), so ``mongos`` routes each call of one scope to one shard.

Schema changes are named, ordered migrations (:data:`MIGRATIONS`), recorded in the
``_manowar_migrations`` collection as SQLite records its own; a store applies the pending ones
when it opens (:meth:`MongoStore.migrate`; two engines starting together take turns through a
lease). They create every index; on a database made by an earlier version they replace its
old text indexes (while one builds, text queries fail with a
:class:`~manowar_memory.errors.StoreError`) and its unique ``vectorId`` index. An engine of an
earlier version opening the same database would put old indexes back, so upgrade every engine
of a database together.

One active fact per (agent, factHash): the store derives ``activeFactHash`` on every write
(the hash while the row is an active fact, absent once it is superseded or deleted, so the
fact can be remembered again) and a partial unique index on ``(agentWallet, activeFactHash)``
makes :meth:`MongoStore.add_fact_if_absent` atomic: the duplicate-key error of a concurrent
insert becomes "reinforce the existing row". :meth:`MongoStore.migrate_active_facts` prepares
collections written before the index (pre-existing duplicates are kept, marked superseded).

Only rows whose ``embeddingModel`` equals the query's model are scored; rows of other models
are counted in ``VectorSearchInfo.skipped_other_models``.

Embeddings are stored as BSON ``BinData`` vectors (subtype 9, float32) rather than arrays of
doubles: 4 bytes per dimension instead of about 13 (each array element carries a type byte
and its index as a key), one ``numpy.frombuffer`` per batch instead of a Python float per
dimension when scanning, the same float32 precision as the embedded store (so both stores
rank identically), and Atlas Vector Search indexes this type natively. Rows written by the
reference (arrays of numbers) are still read and scored.
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, ClassVar, TypeVar, cast

import numpy as np

from .._notes import degrade
from .._util import now_ms, query_terms
from ..errors import ConfigurationError, ConflictError, MissingDependencyError, StoreError, StoreUnavailableError
from ..expiry import expires_at_of
from ..records import Archive, Job, MemoryRecord, Pattern, Session, Skill, Transcript
from ..redaction import install_log_redaction
from . import _mql
from . import base as _base
from ._mql import (
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
from ._vectors import VectorIndex
from .base import Hit, MemoryQuery, PageCursor, ScopeKey, VectorSearchInfo, is_unique_fact

try:
    import pymongo
    from bson import encode as bson_encode
    from bson.binary import Binary, BinaryVectorDtype
    from bson.objectid import ObjectId
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

__all__ = ["MIGRATIONS", "MIGRATION_LEASE_MS", "VECTOR_SEARCH_MODES", "MongoStore"]

log = logging.getLogger("manowar_memory.mongo")
install_log_redaction(log)  # no credential reaches a log line

VECTOR_SEARCH_MODES = ("auto", "atlas", "local")
DEFAULT_DATABASE = "manowar_memory"
_VECTOR_HEADER = 2  # BinData vector: dtype byte + padding byte
_FLOAT32_DTYPE = 0x27
_INDEX_CONFLICT_CODES = {85, 86}  # IndexOptionsConflict, IndexKeySpecsConflict
_TURN_COUNTER = "turnCounter"  # on the session_turns document that numbers a transcript's turns
_TRANSACTION_SECONDS = 60.0  # how long a turn's transaction is tried again after transient errors
_NO_TRANSACTIONS = {20, 263}  # IllegalOperation (a standalone server), OperationNotSupportedInTransaction
_ATLAS_READY_RECHECK_S = 30.0
T = TypeVar("T")

_MEMORY_ALIASES = {name: (f.alias or name) for name, f in MemoryRecord.model_fields.items()}
#: On a transcript document: the sealed chunks (``seq``, ``digest``) that hold its older messages.
CHUNKS_FIELD = "messageChunks"
_DERIVED = ("_id", "scopeKind", "scopeId", "_score", ACTIVE_FACT_FIELD, SYNC_FIELD, CHUNKS_FIELD)
DEFAULT_TRANSCRIPT_CHUNK_BYTES = 4 * 2**20
_MORE = "_more"  # on a stored piece of a message: its content goes on in the next piece
_ENTRY_OVERHEAD = 16  # BSON bytes an array element adds beyond its document (type byte, index key)
_INSERT_CHUNK = 1_000  # rows per insert_many: each chunk is stamped just before it is sent
_DUPLICATE_KEY = 11000
_INDEX_NOT_FOUND = 27
#: driver errors that mean "no usable server right now" (down, unreachable, no primary yet)
_UNAVAILABLE = (AutoReconnect, ConnectionFailure, NotPrimaryError, ServerSelectionTimeoutError, WaitQueueTimeoutError)


# ----------------------------------------------------------------------------- conversions


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


def _split_text(text: str, budget: int) -> list[str]:
    """``text`` in pieces of at most ``budget`` UTF-8 bytes, cut between characters (at a
    space near the end of a piece when there is one, so words stay whole for the text index)."""
    raw = text.encode("utf-8")
    pieces: list[str] = []
    start = 0
    while len(raw) - start > budget:
        end = start + budget
        while end > start and (raw[end] & 0xC0) == 0x80:  # never start a piece inside a character
            end -= 1
        space = raw.rfind(b" ", max(start, end - 512), end)
        if space > start:
            end = space + 1
        pieces.append(raw[start:end].decode("utf-8"))
        start = end
    pieces.append(raw[start:].decode("utf-8"))
    return pieces


def transcript_entries(messages: Sequence[dict[str, Any]], chunk_bytes: int) -> list[tuple[dict[str, Any], int]]:
    """The stored entries of a transcript's messages with their BSON sizes. A message larger
    than ``chunk_bytes`` becomes several pieces, each but the last marked ``_more``: its
    content cut into text pieces (still found by the text index), then its other fields
    (tool calls) as BSON cut into binary ``_rest`` pieces."""
    out: list[tuple[dict[str, Any], int]] = []
    for msg in messages:
        size = len(bson_encode(msg)) + _ENTRY_OVERHEAD
        if size <= chunk_bytes:
            out.append((msg, size))
            continue
        head = {"role": msg["role"], "timestamp": msg.get("timestamp")}
        budget = chunk_bytes - len(bson_encode({**head, "content": "", _MORE: True})) - _ENTRY_OVERHEAD - 64
        pieces: list[dict[str, Any]] = [{**head, "content": p} for p in _split_text(msg["content"], budget)]
        rest = {k: v for k, v in msg.items() if k not in head and k != "content"}
        if rest:
            raw = bson_encode(rest)
            pieces += [{**head, "content": "", "_rest": Binary(raw[i : i + budget])} for i in range(0, len(raw), budget)]
        for k, piece in enumerate(pieces):
            if k < len(pieces) - 1:
                piece[_MORE] = True
            out.append((piece, len(bson_encode(piece)) + _ENTRY_OVERHEAD))
    return out


def pack_transcript(entries: Sequence[tuple[dict[str, Any], int]], chunk_bytes: int) -> list[list[dict[str, Any]]]:
    """Entries packed greedily, oldest first, into chunks of at most ``chunk_bytes``. Appending
    messages never changes a chunk before the last one, so sealed chunks are written once."""
    chunks: list[list[dict[str, Any]]] = []
    current: list[dict[str, Any]] = []
    used = 0
    for entry, size in entries:
        if current and used + size > chunk_bytes:
            chunks.append(current)
            current, used = [], 0
        current.append(entry)
        used += size
    chunks.append(current)
    return chunks


def join_transcript(entries: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages of stored entries: pieces marked ``_more`` joined with the next ones."""
    from bson import decode as bson_decode

    out: list[dict[str, Any]] = []
    pending: dict[str, Any] | None = None
    rest = b""
    for entry in entries:
        if pending is None:
            pending = {k: v for k, v in entry.items() if k not in (_MORE, "_rest")}
        else:
            pending["content"] += entry["content"]
        rest += bytes(entry.get("_rest") or b"")
        if not entry.get(_MORE):
            if rest:
                pending.update(bson_decode(rest))
            out.append(pending)
            pending, rest = None, b""
    if pending is not None:
        out.append(pending)
    return out


def _chunk_digest(chunk: list[dict[str, Any]]) -> str:
    import hashlib

    return hashlib.sha256(bson_encode({"m": chunk})).hexdigest()[:32]


def _database_from_uri(uri: str) -> str | None:
    """The database named in a connection string's path (no DNS lookup, unlike parse_uri for +srv)."""
    from urllib.parse import unquote

    rest = uri.split("://", 1)[1] if "://" in uri else uri
    rest = rest.split("?", 1)[0]
    if "/" not in rest:
        return None
    name = unquote(rest.split("/", 1)[1]).strip()
    return name or None


# ----------------------------------------------------------------------------- the store


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


class MongoStore:
    """MongoDB backend of the :class:`~manowar_memory.stores.base.Store` protocol.

    ``MongoStore("mongodb://127.0.0.1:27017/?replicaSet=rs0")`` or
    ``MongoStore(client=pymongo.MongoClient(...), database="memory")``.

    * ``database``: explicit name, else the URI's path, else ``"manowar_memory"``.
    * ``vector_search``: ``"auto"`` (default), ``"atlas"`` or ``"local"`` (see the module doc).
    * ``max_scan``: most rows the local path scores per query (None: no cap).
    * ``scan_batch_size``: rows per batch of the streaming scan and of cache loads.
    * ``vector_cache_bytes``, ``vector_cache_lag_ms``, ``vector_cache_recount_s``,
      ``vector_cache_reload_s``: the in-process vector cache of the local path (see the module doc; 0 bytes turns it off).
    * ``prefilter_fields``: fields pushed into the ``$vectorSearch`` prefilter
      (default ``MEMORY_VECTOR_PREFILTER_FIELDS``, else ``agentWallet``).
    * ``min_vector_score``: optional server-side score threshold on Atlas's scale.
    * ``transcript_chunk_bytes``: a transcript is stored in chunks of at most this many bytes
      of messages (default 4 MiB): its newest chunk in the ``session_transcripts`` document,
      the older, sealed ones in ``session_transcript_chunks``, so a transcript of any length
      stays under MongoDB's 16 MB document limit. Reads put the messages back together.
    * ``create_indexes``: apply the pending schema migrations (:meth:`migrate`, which create
      the indexes) on open (default True).
    * ``client_options``: passed to :class:`pymongo.MongoClient` when the store creates it.
    """

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
        vector_index_name: str = _mql.VECTOR_INDEX_NAME,
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
            client = pymongo.MongoClient(uri, **options)
        self.client = client
        db_name = (
            database or (_database_from_uri(uri) if uri else None) or os.environ.get("MONGO_MEMORY_DB")
            or DEFAULT_DATABASE
        )
        self.db = client[db_name]
        self.database_name = db_name
        self.max_scan = max_scan
        self.scan_batch_size = scan_batch_size
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
        self._closed = False
        self._transactions: bool | None = None  # whether the server runs transactions; None: not yet known
        self._user_scan_index: bool | None = None
        self._scope_list_index: bool | None = None
        self.memory = self.db[MEMORY]
        self.transcripts = self.db[TRANSCRIPTS]
        self.transcript_chunks = self.db[TRANSCRIPT_CHUNKS]
        self.sessions = self.db[SESSIONS]
        self.turns = self.db[_mql.TURNS]
        self.patterns = self.db[PATTERNS]
        self.archives = self.db[ARCHIVES]
        self.skills = self.db[SKILLS]
        self.jobs = self.db[JOBS]
        self.schedules = self.db[_mql.SCHEDULES]
        if create_indexes:
            self.migrate()

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
            docs = self.db[_mql.MIGRATIONS_COLLECTION].find({"order": {"$exists": True}}, {"order": 1})
            return [str(d["_id"]) for d in sorted(docs, key=lambda d: (d["order"], d["_id"]))]

    def _pending_migrations(self) -> list[tuple[int, str, Callable[[MongoStore], None]]]:
        done = set(self.migrations())
        known = {name for name, _ in MIGRATIONS}
        if done - known:
            raise StoreError(
                f"the MongoDB database {self.database_name!r} was migrated by a newer manowar-memory "
                f"(migrations {sorted(done - known)}); upgrade manowar-memory to open it")
        return [(i, name, step) for i, (name, step) in enumerate(MIGRATIONS, 1) if name not in done]

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
        coll = self.db[_mql.MIGRATIONS_COLLECTION]
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

    def create_indexes(self, coll_name: str, specs: Sequence[_mql.IndexSpec]) -> None:
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

    def _create_or_replace(self, coll: Any, spec: _mql.IndexSpec, model: Any) -> None:
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
    def _drop_conflicting(coll: Any, spec: _mql.IndexSpec) -> None:
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

    def update_memories(self, updates: Sequence[tuple[str, dict[str, Any]]], *,
                        agent_wallet: str | None = None) -> int:
        """Apply ``(id, changes)`` pairs to rows of ``agent_wallet`` in one bulk write (maintenance
        jobs); returns rows matched."""
        ops = []
        for memory_id, changes in updates:
            _base.check_memory_changes(changes)
            if changes:
                ops.append(pymongo.UpdateOne(
                    _mql.memory_id_filter(memory_id, agent_wallet), _mql.memory_update_pipeline(self._memory_sets(changes), now_ms())
                ))
        if not ops:
            return 0
        with self._errors("bulk update"), self._fact_conflict("rows"):
            return int(self.memory.bulk_write(ops, ordered=False).matched_count)

    def delete_memory(self, memory_id: str, *, agent_wallet: str | None = None) -> bool:
        with self._errors("delete"):
            return bool(self.memory.delete_one(_mql.memory_id_filter(memory_id, agent_wallet)).deleted_count == 1)

    def delete_memories(self, memory_ids: Sequence[str], *, agent_wallet: str | None = None) -> int:
        """Hard delete many rows of ``agent_wallet``; returns how many were removed."""
        if not memory_ids:
            return 0
        with self._errors("delete"):
            return int(self.memory.delete_many(_mql.memory_id_filter(memory_ids, agent_wallet)).deleted_count)

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

    def _scope_hint(self, query: MemoryQuery) -> str | None:
        """:func:`~manowar_memory.stores._mql.scope_list_hint`, when the database has that index
        (absent on one opened with ``create_indexes=False`` before its migrations ran)."""
        hint = _mql.scope_list_hint(query)
        if hint is None:
            return None
        if self._scope_list_index is None:
            self._scope_list_index = hint in self.memory.index_information()
        return hint if self._scope_list_index else None

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

    def iter_memories(
        self, agent_wallet: str | None = None, *, created_from: int | None = None,
        created_to: int | None = None, batch_size: int = 1000,
    ) -> Iterator[MemoryRecord]:
        base: dict[str, Any] = {}
        if agent_wallet is not None:
            base["agentWallet"] = agent_wallet
        created: dict[str, int] = {}
        if created_from is not None:
            created["$gte"] = created_from
        if created_to is not None:
            created["$lte"] = created_to
        if created:
            base["createdAt"] = created
        last: ObjectId | None = None
        while True:
            flt = dict(base)
            if last is not None:
                flt["_id"] = {"$gt": last}
            with self._errors("read"):
                docs = list(self.memory.find(flt).sort("_id", 1).limit(max(1, int(batch_size))))
            if not docs:
                return
            for doc in docs:
                yield doc_to_memory(doc)
            last = docs[-1]["_id"]

    def page_memories(self, agent_wallet: str | None, after: PageCursor, limit: int
                      ) -> tuple[list[MemoryRecord], PageCursor]:
        """Up to ``limit`` rows after the ``_id`` ``after`` (every status, no embeddings), ``_id`` order."""
        flt = _mql.memory_page_query(agent_wallet, ObjectId(str(after)) if after else None)
        with self._errors("read"):
            docs = list(self.memory.find(flt, {"embedding": 0}).sort("_id", 1).limit(int(limit)))
        return [doc_to_memory(d, with_embedding=False) for d in docs], (str(docs[-1]["_id"]) if docs else after)

    def memory_user_counts(self, agent_wallet: str) -> dict[str | None, int]:
        """Rows per user of the agent (None: the user-less rows, null or missing), every status."""
        counts: dict[str | None, int] = {}
        with self._errors("read"):
            for doc in self.memory.aggregate(_mql.memory_user_counts_pipeline(agent_wallet)):
                counts[doc["_id"]] = counts.get(doc["_id"], 0) + int(doc["n"])
        return counts

    def iter_user_memories(self, agent_wallet: str, users: Sequence[str | None]) -> Iterator[MemoryRecord]:
        """The agent's rows of these users, every status, no embeddings, in ``_id`` order."""
        with self._errors("read"):
            docs = self.memory.find(_mql.memory_rows_of_users_filter(agent_wallet, users), {"embedding": 0}).sort("_id", 1)
            for doc in docs:
                yield doc_to_memory(doc, with_embedding=False)

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
            parts: list[_CachePartition] = []
            for user in _mql.text_users(query):
                part = self._partition(agent, user, model_id, dims)
                if isinstance(part, str):
                    return part
                parts.append(part)
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

    def _partition(self, agent: str, user: str | None, model_id: str, dims: int) -> _CachePartition | str:
        """The synced partition of (agent, user, model), loading or reloading it when needed."""
        key = (agent, user, model_id)
        with self._cache_lock:
            part = self._partitions.pop(key, None)
            if part is not None:
                self._partitions[key] = part  # most recently used last
        if part is not None and time.monotonic() - part.loaded_at < self.vector_cache_reload_s:
            with part.lock:
                if self._sync(part, model_id):
                    return part if self._fits(key, part) else self._too_big(agent, user, model_id, part.live_count, dims)
        rows = int(self.memory.count_documents(self._rows_of(agent, user, model_id)))
        if rows * VectorIndex.row_bytes(dims) > self.vector_cache_bytes:
            with self._cache_lock:
                self._partitions.pop(key, None)
            return self._too_big(agent, user, model_id, rows, dims)
        old = part
        part = self._load(agent, user, model_id, dims, rows)
        part.adopt_ann(old)  # the approximate indexes survive the periodic reload
        part.other_models = self._count_other_models(part, model_id)
        with self._cache_lock:
            self._partitions[key] = part
        return part if self._fits(key, part) else self._too_big(agent, user, model_id, part.live_count, dims)

    def _count_other_models(self, part: _CachePartition, model_id: str) -> int:
        """The partition's (agent, user) rows embedded by another model (never scored against this one)."""
        return int(self.memory.count_documents(
            self._rows_of(part.agent_wallet, part.user_address, {"$nin": [model_id, None]})))

    def _too_big(self, agent: str, user: str | None, model_id: str, rows: int, dims: int) -> str:
        mb = rows * VectorIndex.row_bytes(dims) / 2**20
        whose = f"user {user!r} of agent {agent!r}" if user is not None else f"agent {agent!r} (rows without a user)"
        return (f"vector cache skipped: {whose} has {rows} rows of {model_id} (~{mb:.0f} MiB), more than "
                f"vector_cache_bytes ({self.vector_cache_bytes / 2**20:.0f} MiB); served by local-scan")

    def _fits(self, key: tuple[str, str | None, str], part: _CachePartition) -> bool:
        """Evict least recently used partitions until the cache is within its byte bound;
        False (and ``part`` dropped) when ``part`` alone exceeds it."""
        with self._cache_lock:
            if part.nbytes > self.vector_cache_bytes:
                self._partitions.pop(key, None)
                return False
            while sum(p.nbytes for p in self._partitions.values()) > self.vector_cache_bytes:
                oldest = next(iter(self._partitions))
                if oldest == key:
                    break
                del self._partitions[oldest]
            return True

    _CACHE_FIELDS: ClassVar[dict[str, int]] = {"embedding": 1, "embeddingModel": 1, "userAddress": 1, "mode": 1, "haiId": 1, "source": 1,
                     "metadata.status": 1, "metadata.expiresAt": 1, SYNC_FIELD: 1}

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

    def _load(self, agent: str, user: str | None, model_id: str, dims: int, rows: int) -> _CachePartition:
        part = _CachePartition(agent, user, dims, rows + 64)
        part.watermark = now_ms()  # rows written during the load are re-read by the next sync
        batch: list[dict[str, Any]] = []
        cursor = self.memory.find(self._rows_of(agent, user, model_id), self._CACHE_FIELDS,
                                  sort=[("_id", 1)], batch_size=self.scan_batch_size)
        try:
            for doc in cursor:
                batch.append(doc)
                if len(batch) >= self.scan_batch_size:
                    self._apply(part, model_id, batch)
                    batch = []
        finally:
            cursor.close()
        self._apply(part, model_id, batch)
        part.loaded_at = time.monotonic()
        return part

    def _sync(self, part: _CachePartition, model_id: str) -> bool:
        """Apply the partition's rows written since the last sync; False when a full reload is needed.

        Only the partition's (agent, user) range is read. A row moved to another user (its
        ``userAddress`` changed) is read by that user's partition; here it is dropped at the
        next recount, and until then the final fetch (full scope filter) never returns it."""
        started = now_ms()
        agent, user = part.agent_wallet, part.user_address
        window = self.memory.find(
            {"agentWallet": agent, "userAddress": user, SYNC_FIELD: {"$gte": part.watermark - self.vector_cache_lag_ms}},
            {SYNC_FIELD: 1},
        )
        # every row of the window is read again, even one whose stamp the cache already holds: a
        # second write in the same millisecond carries the same stamp and would otherwise be missed
        stale = [d["_id"] for d in window]
        for i in range(0, len(stale), self.scan_batch_size):
            ids = stale[i : i + self.scan_batch_size]
            docs = list(self.memory.find({"agentWallet": agent, "_id": {"$in": ids}}, self._CACHE_FIELDS))
            self._apply(part, model_id, docs)
            for gone in set(ids) - {d["_id"] for d in docs}:
                part.remove(gone)
        part.watermark = started
        if stale:  # a row of the partition changed: it may have moved to or from another model
            part.other_models = self._count_other_models(part, model_id)
        # hard deletes (and moves to another user) leave no row to read (and the final fetch never
        # returns such a row): compare counts now and then, and reconcile ids when they differ
        if time.monotonic() - part.counted_at < self.vector_cache_recount_s:
            return True
        part.counted_at = time.monotonic()
        part.other_models = self._count_other_models(part, model_id)
        rows = self._rows_of(agent, user, model_id)
        server = int(self.memory.count_documents(rows))
        if server < part.live_count:
            present = {d["_id"] for d in self.memory.find(rows, {"_id": 1})}
            for gone in part.live_keys() - present:
                part.remove(gone)
        # more rows than cached: written without the sync stamp (not through a MongoStore)
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
            if self._user_scan_index is None:  # absent on a database opened with create_indexes=False
                self._user_scan_index = _mql.USER_SCAN_INDEX in self.memory.index_information()
            cursor = self.memory.find(flt, projection, sort=sort, batch_size=self.scan_batch_size,
                                      hint=_mql.USER_SCAN_INDEX if self._user_scan_index else None)
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

    # -- sessions --
    def get_session(self, session_id: str, agent_wallet: str) -> Session | None:
        with self._errors("read"):
            doc = self.sessions.find_one(
                {"sessionId": session_id, "agentWallet": agent_wallet, "expiresAt": {"$gt": _mql.ms_to_date(now_ms())}}
            )
        return doc_to_session(doc) if doc else None

    def _upsert(self, coll: Any, key: dict[str, Any], doc: dict[str, Any], session: Any = None) -> None:
        for attempt in range(3):
            try:
                coll.replace_one(key, doc, upsert=True, session=session)
                return
            except DuplicateKeyError:  # two upserts raced to insert; the second now updates
                if attempt == 2 or session is not None:  # a transaction ends at its first error
                    raise

    def upsert_session(self, session: Session) -> None:
        with self._errors("upsert"):
            self._upsert(
                self.sessions, {"agentWallet": session.agent_wallet, "sessionId": session.session_id},
                session_to_doc(session),
            )

    def find_sessions(self, query: MemoryQuery, limit: int) -> list[Session]:
        if limit <= 0:
            return []
        with self._errors("read"):
            docs = self.sessions.find(_mql.live_session_filter(query, now_ms())).sort(
                [("lastAccessedAt", -1), ("_id", -1)]
            ).limit(int(limit))
            return [doc_to_session(d) for d in docs]

    def purge_expired_sessions(self, now: int) -> int:
        with self._errors("delete"):
            return int(self.sessions.delete_many({"expiresAt": {"$lte": _mql.ms_to_date(now)}}).deleted_count)

    def delete_sessions_older_than(self, cutoff: int) -> int:
        """Delete sessions last used before ``cutoff`` (cleanup)."""
        with self._errors("delete"):
            return int(self.sessions.delete_many({"lastAccessedAt": {"$lt": cutoff}}).deleted_count)

    def count_stale_sessions(self, now: int, cutoff: int) -> int:
        """Sessions that cleanup would delete: expired at ``now`` or last used before ``cutoff``."""
        with self._errors("count"):
            return int(self.sessions.count_documents(_mql.stale_session_filter(now, cutoff)))

    def stale_session_scopes(self, now: int, cutoff: int) -> list[ScopeKey]:
        """Distinct (agent, user, mode, hai) of the sessions cleanup would delete."""
        return self._distinct_scopes(self.sessions, _mql.stale_session_filter(now, cutoff))

    def _distinct_scopes(self, coll: Any, flt: dict[str, Any]) -> list[ScopeKey]:
        with self._errors("read"):
            rows = coll.aggregate(_mql.scopes_pipeline(flt))
            return [(r["_id"].get("a"), r["_id"].get("u"), r["_id"].get("m"), r["_id"].get("h")) for r in rows]

    # -- transcripts --
    def upsert_transcript(self, transcript: Transcript) -> None:
        """Insert or replace a transcript. Its messages are packed into chunks of at most
        ``transcript_chunk_bytes``: the newest chunk stays in the transcript document, the
        sealed older ones go to ``session_transcript_chunks`` (written once: appending
        messages only adds chunks), so no document nears 16 MB however long the transcript."""
        with self._errors("upsert"):
            self._put_transcript(transcript)

    def _put_transcript(self, transcript: Transcript, session: Any = None) -> None:
        doc = _scoped_doc(transcript)
        key = {"agentWallet": transcript.agent_wallet, "sessionId": transcript.session_id}
        chunks = pack_transcript(transcript_entries(doc["messages"], self.transcript_chunk_bytes),
                                 self.transcript_chunk_bytes)
        sealed = [(seq, _chunk_digest(chunk), chunk) for seq, chunk in enumerate(chunks[:-1])]
        doc["messages"] = chunks[-1]
        if sealed:
            doc[CHUNKS_FIELD] = [{"seq": seq, "digest": digest} for seq, digest, _ in sealed]
        user = transcript.user_address
        stored = {(c["seq"], c["digest"])
                  for c in self.transcript_chunks.find(key, {"seq": 1, "digest": 1}, session=session)}
        for seq, digest, chunk in sealed:  # the chunks first: the document never names a missing one
            if (seq, digest) not in stored:
                try:
                    self.transcript_chunks.insert_one(
                        {**key, "userAddress": user, "seq": seq, "digest": digest, "messages": chunk},
                        session=session)
                except DuplicateKeyError:  # a concurrent writer stored the same chunk
                    pass
        if stored:  # chunks keep the transcript's user (the text index's prefix); older ones had none
            self.transcript_chunks.update_many({**key, "userAddress": {"$ne": user}}, {"$set": {"userAddress": user}},
                                              session=session)
        self._upsert(self.transcripts, key, doc, session)
        stale = stored - {(seq, digest) for seq, digest, _ in sealed}
        if stale:
            self.transcript_chunks.delete_many(
                {**key, "$or": [{"seq": seq, "digest": digest} for seq, digest in sorted(stale)]}, session=session)

    def _transcript(self, doc: dict[str, Any], session: Any = None) -> Transcript:
        """A stored transcript document as a :class:`Transcript`, its older messages read back
        from its chunks."""
        for _attempt in range(3):
            refs = doc.get(CHUNKS_FIELD) or []
            data = _strip(doc)
            if not refs and not any(_MORE in m for m in data.get("messages", [])):
                return Transcript.model_validate(data)
            key = {"agentWallet": doc["agentWallet"], "sessionId": doc["sessionId"]}
            found = {
                (c["seq"], c["digest"]): c["messages"]
                for c in self.transcript_chunks.find({**key, "digest": {"$in": [r["digest"] for r in refs]}},
                                                     session=session)
            }
            if all((r["seq"], r["digest"]) in found for r in refs):
                entries = [e for r in sorted(refs, key=lambda r: r["seq"]) for e in found[(r["seq"], r["digest"])]]
                data["messages"] = join_transcript(entries + list(data.get("messages", [])))
                return Transcript.model_validate(data)
            # a concurrent rewrite replaced a chunk between the two reads: read the document again
            fresh = self.transcripts.find_one(key, session=session)
            if fresh is None:
                break
            doc = fresh
        raise StoreError(
            f"transcript {doc.get('sessionId')!r} of agent {doc.get('agentWallet')!r} names message chunks that "
            "are missing from session_transcript_chunks; it was changed by another writer while being read, "
            "try again"
        )

    def append_turn(
        self, agent_wallet: str, session_id: str, working_id: str, turn_id: str, build: _base.TurnBuilder
    ) -> _base.TurnWrite:
        """One multi-document transaction per turn (a replica set or sharded cluster, even of one
        member): the ledger check, the reads ``build`` sees and every write. Its first write
        takes the transcript's next sequence number from a counter document in ``session_turns``,
        so of two turns on one transcript the second conflicts at once, before reading anything
        large, and is run again (after a short random pause, growing with each conflict) on what
        the first committed. On a standalone server, which has no transactions, the turn is
        written without one, the ledger entry last, and a degradation says so."""
        key = {"agentWallet": agent_wallet, "sessionId": session_id}

        def run(session: Any) -> _base.TurnWrite:
            done = self.turns.find_one({**key, "turnId": turn_id}, {"seq": 1, "memoryId": 1}, session=session)
            if done is not None:
                return _base.TurnWrite(False, done.get("memoryId"), int(done["seq"]))
            counter = self.turns.find_one_and_update(
                {**key, _TURN_COUNTER: True}, {"$inc": {"lastSeq": 1}}, upsert=True,
                projection={"lastSeq": 1, "userAddress": 1}, return_document=pymongo.ReturnDocument.AFTER, session=session)
            seq = int(counter["lastSeq"])
            doc = self.transcripts.find_one(key, session=session)
            live = self.sessions.find_one(
                {"sessionId": working_id, "agentWallet": agent_wallet, "expiresAt": {"$gt": _mql.ms_to_date(now_ms())}},
                session=session)
            rows = build(self._transcript(doc, session) if doc else None, doc_to_session(live) if live else None)
            rec = rows.record
            if counter.get("userAddress") != rec.user_address:  # erasure by user finds the counter too
                self.turns.update_one({**key, "_id": counter["_id"]}, {"$set": {"userAddress": rec.user_address}},
                                      session=session)
            self._put_transcript(rows.transcript, session)
            self._upsert(self.sessions, {"agentWallet": rows.session.agent_wallet, "sessionId": rows.session.session_id},
                         session_to_doc(rows.session), session)
            self._insert_turn_record(rec, session)
            self._put_turn({**key, "turnId": turn_id, "seq": seq, "memoryId": rec.id,
                            "userAddress": rec.user_address, "threadId": rec.thread_id, "mode": rec.mode,
                            "haiId": rec.hai_id, "createdAt": rec.created_at}, session)
            return _base.TurnWrite(True, rec.id, seq)

        with self._errors("turn write"):
            if self._transactions is not False:
                try:
                    result = self._in_transaction(run)
                    self._transactions = True
                    return result
                except OperationFailure as exc:
                    if self._transactions or exc.code not in _NO_TRANSACTIONS:
                        raise
                    self._transactions = False
            degrade("MongoDB server without transactions (standalone): post_turn wrote the turn's rows one by one; "
                    "concurrent turns on one thread may overwrite each other. Run MongoDB as a replica set "
                    "(one member is enough) for atomic turns")
            return run(None)

    def _in_transaction(self, run: Callable[[Any], T]) -> T:
        """``run(session)`` in a transaction, run again after a transient error (a write
        conflict with a concurrent turn) with a random pause that doubles up to 100 ms, for up
        to 60 s; a commit whose outcome is unknown is committed again. A server that cannot be
        reached (no primary, an election) is not waited for here: that error goes to the caller
        at once as :class:`StoreUnavailableError`, within the client's own timeouts, and the
        turn's id makes the caller's retry safe."""
        deadline = time.monotonic() + _TRANSACTION_SECONDS
        pause = 0.002
        with self.client.start_session() as session:
            while True:
                session.start_transaction()
                try:
                    result = run(session)
                except BaseException as exc:
                    if session.in_transaction:
                        session.abort_transaction()
                    if (isinstance(exc, PyMongoError) and not isinstance(exc, _UNAVAILABLE)
                            and exc.has_error_label("TransientTransactionError") and time.monotonic() < deadline):
                        time.sleep(random.uniform(0, pause))
                        pause = min(2 * pause, 0.1)
                        continue
                    raise
                while True:
                    try:
                        session.commit_transaction()
                        return result
                    except PyMongoError as exc:
                        if time.monotonic() >= deadline or isinstance(exc, _UNAVAILABLE):
                            raise
                        if exc.has_error_label("UnknownTransactionCommitResult"):
                            continue
                        if exc.has_error_label("TransientTransactionError"):
                            break
                        raise

    def _insert_turn_record(self, record: MemoryRecord, session: Any) -> None:
        """A turn's session row (its id is unique to the turn)."""
        self.memory.insert_one({**memory_to_doc(record), SYNC_FIELD: now_ms()}, session=session)

    def _put_turn(self, doc: dict[str, Any], session: Any) -> None:
        """A turn's ledger entry."""
        self.turns.insert_one(doc, session=session)

    def get_transcript(self, session_id: str, agent_wallet: str) -> Transcript | None:
        with self._errors("read"):
            doc = self.transcripts.find_one({"agentWallet": agent_wallet, "sessionId": session_id})
            return self._transcript(doc) if doc else None

    def search_transcripts(self, query: MemoryQuery, text: str | None, limit: int) -> list[tuple[Transcript, float]]:
        if limit <= 0:
            return []
        with self._errors("transcript search"):
            if not text:
                docs = self.transcripts.find(_mql.scope_filter(query, collection=TRANSCRIPTS)).sort(
                    [("createdAt", -1), ("_id", -1)]
                ).limit(int(limit))
                return [(self._transcript(d), 0.0) for d in docs]
            terms = query_terms(text)
            if not terms:
                return []
            docs = list(self.transcripts.aggregate(
                _mql.union_by_score(TRANSCRIPTS, _mql.transcript_search_pipelines(query, terms, limit), limit)))
            scored = {d["sessionId"]: (d, float(d["_score"])) for d in docs}
            # the older messages of long transcripts are in chunks: find their sessions too
            try:
                many = max(1000, 20 * int(limit))
                chunk_hits = list(self.transcript_chunks.aggregate(_mql.union_by_score(
                    TRANSCRIPT_CHUNKS, _mql.transcript_chunk_pipelines(query, terms, many), 2 * many, {"_score": -1})))
            except OperationFailure as exc:
                if exc.code != _INDEX_NOT_FOUND:
                    raise
                log.warning("MongoStore: session_transcript_chunks has no text index (run migrate()); "
                            "the older messages of long transcripts are not searched")
                chunk_hits = []
            best: dict[str, float] = {}
            hit_chunks: dict[str, set[tuple[int, str]]] = {}
            for c in chunk_hits:
                best[c["sessionId"]] = max(best.get(c["sessionId"], 0.0), float(c["_score"]))
                hit_chunks.setdefault(c["sessionId"], set()).add((c["seq"], c["digest"]))
            if best:
                flt = _mql.merge([*_mql.scope_filter(query, collection=TRANSCRIPTS).items(),
                                   ("sessionId", {"$in": sorted(best)})])
                for d in self.transcripts.find(flt):
                    refs = {(r["seq"], r["digest"]) for r in d.get(CHUNKS_FIELD) or []}
                    if not refs & hit_chunks[d["sessionId"]]:
                        continue  # only a stale chunk matched
                    score = best[d["sessionId"]]
                    if d["sessionId"] not in scored or scored[d["sessionId"]][1] < score:
                        scored[d["sessionId"]] = (d, score)
            ranked = sorted(scored.values(), key=lambda ds: (-ds[1], -int(ds[0].get("createdAt") or 0)))[: int(limit)]
            return [(self._transcript(d), score) for d, score in ranked]

    def erase_scope(self, key: ScopeKey) -> dict[str, int]:
        """Delete everything one scope owns (see :class:`~manowar_memory.stores.base.MaintenanceStore`)."""
        match = {"agentWallet": key[0], "userAddress": key[1], "mode": key[2], "haiId": key[3]}
        counts: dict[str, int] = {}
        with self._errors("delete"):
            sessions = [d["sessionId"] for d in self.transcripts.find(match, {"sessionId": 1})]
            counts["memories"] = int(self.memory.delete_many(match).deleted_count)
            counts["transcripts"] = int(self.transcripts.delete_many(match).deleted_count)
            counts["turns"] = int(self.turns.delete_many({**match, _TURN_COUNTER: {"$exists": False}}).deleted_count)
            self.turns.delete_many({**match, _TURN_COUNTER: True})  # the counters of its transcripts
            for start in range(0, len(sessions), 500):  # chunks and turn counters of its transcripts
                of_sessions = {"agentWallet": key[0], "sessionId": {"$in": sessions[start:start + 500]}}
                self.transcript_chunks.delete_many(of_sessions)
                self.turns.delete_many(of_sessions)
            self.transcript_chunks.delete_many(match)
            counts["sessions"] = int(self.sessions.delete_many(match).deleted_count)
            counts["patterns"] = int(self.patterns.delete_many(match).deleted_count)
            counts["archives"] = int(self.archives.delete_many(match).deleted_count)
        return counts

    def delete_transcripts_older_than(self, cutoff: int) -> int:
        """Delete transcripts created before ``cutoff`` (cleanup), with their message chunks."""
        with self._errors("delete"):
            chunked = [
                {"agentWallet": d["agentWallet"], "sessionId": d["sessionId"]}
                for d in self.transcripts.find({"createdAt": {"$lt": cutoff}, CHUNKS_FIELD: {"$exists": True}},
                                               {"agentWallet": 1, "sessionId": 1})
            ]
            deleted = int(self.transcripts.delete_many({"createdAt": {"$lt": cutoff}}).deleted_count)
            for start in range(0, len(chunked), 500):
                self.transcript_chunks.delete_many({"$or": chunked[start : start + 500]})
            return deleted

    def count_transcripts_older_than(self, cutoff: int) -> int:
        """Transcripts created before ``cutoff`` (a cleanup dry run)."""
        with self._errors("count"):
            return int(self.transcripts.count_documents({"createdAt": {"$lt": cutoff}}))

    def old_transcript_scopes(self, cutoff: int) -> list[ScopeKey]:
        """Distinct (agent, user, mode, hai) of the transcripts created before ``cutoff``."""
        return self._distinct_scopes(self.transcripts, {"createdAt": {"$lt": cutoff}})

    def list_transcripts(self, agent_wallet: str, created_from: int, created_to: int) -> list[Transcript]:
        """Transcripts of an agent created in ``[created_from, created_to]``, oldest first."""
        with self._errors("read"):
            docs = self.transcripts.find(
                {"agentWallet": agent_wallet, "createdAt": {"$gte": created_from, "$lte": created_to}}
            ).sort([("createdAt", 1), ("_id", 1)])
            return [self._transcript(d) for d in docs]

    # -- patterns, archives, skills, jobs --
    def upsert_pattern(self, pattern: Pattern) -> None:
        doc = _scoped_doc(pattern)
        created = doc.pop("createdAt")
        with self._errors("upsert"):
            for attempt in range(3):
                try:
                    self.patterns.update_one(
                        {"patternId": pattern.pattern_id},
                        {"$set": doc, "$setOnInsert": {"createdAt": created}},
                        upsert=True,
                    )
                    return
                except DuplicateKeyError:
                    if attempt == 2:
                        raise

    def get_pattern(self, pattern_id: str) -> Pattern | None:
        return self._get(self.patterns, "patternId", pattern_id, Pattern)

    def find_patterns(self, query: MemoryQuery, limit: int) -> list[Pattern]:
        order = [("successRate", -1), ("createdAt", -1), ("_id", -1)]
        return self._find(self.patterns, query, PATTERNS, order, limit, Pattern)

    def add_archive(self, archive: Archive) -> None:
        with self._errors("insert"):
            try:
                self.archives.insert_one(_scoped_doc(archive))
            except DuplicateKeyError as exc:
                raise StoreError(f"archive {archive.archive_id} already exists") from exc

    def get_archive(self, archive_id: str) -> Archive | None:
        return self._get(self.archives, "archiveId", archive_id, Archive)

    def update_archive(self, archive_id: str, changes: dict[str, Any]) -> None:
        archive = self.get_archive(archive_id)
        if archive is None:
            raise StoreError(f"archive {archive_id} does not exist")
        updated = archive.model_copy(update=changes)
        with self._errors("update"):
            self.archives.replace_one({"archiveId": archive_id}, _scoped_doc(updated))

    def find_archives(self, query: MemoryQuery, limit: int) -> list[Archive]:
        return self._find(self.archives, query, ARCHIVES, [("createdAt", -1), ("_id", -1)], limit, Archive)

    def add_skill(self, skill: Skill) -> None:
        with self._errors("insert"):
            try:
                self.skills.insert_one(skill.to_doc())
            except DuplicateKeyError as exc:
                raise StoreError(f"skill {skill.skill_id} already exists") from exc

    def get_skill(self, skill_id: str) -> Skill | None:
        return self._get(self.skills, "skillId", skill_id, Skill)

    def list_skills(self, agent_wallet: str | None, category: str | None, limit: int) -> list[Skill]:
        flt: dict[str, Any] = {}
        if agent_wallet is not None:
            flt["agents"] = agent_wallet
        if category is not None:
            flt["category"] = category
        if limit <= 0:
            return []
        with self._errors("read"):
            docs = self.skills.find(flt).sort(
                [("successRate", -1), ("usageCount", -1), ("createdAt", -1)]
            ).limit(int(limit))
            return [Skill.model_validate(_strip(d)) for d in docs]

    def put_job(self, job: Job) -> None:
        with self._errors("upsert"):
            self._upsert(self.jobs, {"jobId": job.job_id}, job.to_doc())

    def get_job(self, job_id: str) -> Job | None:
        return self._get(self.jobs, "jobId", job_id, Job)

    # -- cache fences (cache/namespace.py) --
    def cache_fences(self, keys: Sequence[str]) -> dict[str, int]:
        keys = list(dict.fromkeys(keys))
        with self._errors("read cache fences"):
            found = {d["_id"]: int(d.get("epoch", 0)) for d in self.db[_mql.CACHE_FENCE].find({"_id": {"$in": keys}})}
        return {k: found.get(k, 0) for k in keys}

    def bump_cache_fence(self, key: str) -> int:
        from pymongo import ReturnDocument

        with self._errors("bump a cache fence"):
            doc = self.db[_mql.CACHE_FENCE].find_one_and_update(
                {"_id": key}, {"$inc": {"epoch": 1}}, upsert=True, return_document=ReturnDocument.AFTER)
        return int(doc["epoch"])

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

    # -- maintenance schedules (jobs/schedules.py) --
    def list_agent_wallets(self, limit: int | None = None) -> list[str]:
        """Distinct agents of memory, transcripts, patterns, archives and sessions, in that
        order, exactly as stored; at most ``limit``."""
        out: dict[str, None] = {}
        with self._errors("read"):
            for coll in (self.memory, self.transcripts, self.patterns, self.archives, self.sessions):
                for wallet in sorted(w for w in coll.distinct("agentWallet") if isinstance(w, str)):
                    out.setdefault(wallet)
                    if limit is not None and len(out) >= limit:
                        return list(out)
        return list(out)

    def get_schedule(self, schedule_id: str) -> dict[str, Any] | None:
        """The schedule doc with its ``rev``, or None."""
        with self._errors("read"):
            doc: dict[str, Any] | None = self.schedules.find_one({"scheduleId": schedule_id}, {"_id": 0})
        return doc

    def list_schedules(self) -> list[dict[str, Any]]:
        """Every schedule doc (with ``rev``), by id."""
        with self._errors("read"):
            return list(self.schedules.find({}, {"_id": 0}).sort("scheduleId", 1))

    def save_schedule(self, doc: dict[str, Any], expected_rev: int | None = None) -> int | None:
        """Write ``doc`` (keyed by ``doc["scheduleId"]``). With ``expected_rev`` only when the
        stored rev is still that (compare-and-set), else create or replace. Returns the new
        rev, or None when the compare failed."""
        body = {k: v for k, v in doc.items() if k not in ("rev", "_id")}
        key = {"scheduleId": doc["scheduleId"]}
        with self._errors("write"):
            if expected_rev is not None:
                done = self.schedules.update_one({**key, "rev": expected_rev},
                                                 {"$set": {**body, "rev": expected_rev + 1}})
                return expected_rev + 1 if done.matched_count else None
            for attempt in range(3):
                try:
                    saved = self.schedules.find_one_and_update(
                        key, {"$set": body, "$inc": {"rev": 1}}, upsert=True,
                        return_document=pymongo.ReturnDocument.AFTER, projection={"rev": 1})
                    return int(saved["rev"])
                except DuplicateKeyError:  # two upserts raced to insert; the second now updates
                    if attempt == 2:
                        raise
        return None

    def delete_schedule(self, schedule_id: str) -> bool:
        """Delete the schedule; False when there was none."""
        with self._errors("delete"):
            return bool(self.schedules.delete_one({"scheduleId": schedule_id}).deleted_count > 0)

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



# ----------------------------------------------------------------------------- migrations

_MIGRATION_LEASE = "lease"
#: how long a migration lease lasts without renewal (the engine holding it renews it every quarter)
MIGRATION_LEASE_MS = 30_000
#: indexes created by the migrations after the baseline (m004, m005)
_LATER_INDEXES = {_mql.VECTOR_AGENT_ID_INDEX, _mql.SCOPE_LIST_INDEX}


def _index(coll: str, name: str) -> _mql.IndexSpec:
    return next(spec for spec in _mql.INDEXES[coll] if spec.name == name)


def _m001_active_fact_hash(store: MongoStore) -> None:
    """Derive ``activeFactHash`` for the unique active-fact index (earlier duplicates are kept,
    marked superseded: :meth:`MongoStore.migrate_active_facts`); nothing to do once the index exists."""
    if "idx_vector_active_fact" not in store.memory.index_information():
        store.migrate_active_facts()


def _m002_indexes(store: MongoStore) -> None:
    """The indexes the store created on open before migrations were recorded (an earlier
    version's index of the same name or keys with other options is replaced)."""
    for coll, specs in _mql.INDEXES.items():
        store.create_indexes(coll, [spec for spec in specs if spec.name not in _LATER_INDEXES])


def _m003_memory_scope_nulls(store: MongoStore) -> None:
    """Store null in memory rows' missing ``userAddress``, ``mode`` and ``haiId`` (rows of the
    reference or written by hand), so the ``$vectorSearch`` scope prefilter, which matches a
    stored null but not a missing field, sees them as every other query does."""
    store.memory.update_many(_mql.missing_scope_fields_filter(), _mql.scope_nulls_pipeline())


def _m004_vector_id_per_agent(store: MongoStore) -> None:
    """Row ids unique per agent: create the unique ``(agentWallet, vectorId)`` index, then drop
    the unique ``vectorId`` index of earlier versions (a collection sharded on ``agentWallet``
    cannot keep a unique index that does not start with it). The new index exists before the
    old one goes, so ids stay unique throughout."""
    store.create_indexes(MEMORY, [_index(MEMORY, _mql.VECTOR_AGENT_ID_INDEX)])
    legacy = _mql.LEGACY_VECTOR_ID_INDEX
    for info in store.memory.list_indexes():
        if info["name"] == legacy.name or list(info["key"].items()) == legacy.keys:
            try:
                store.memory.drop_index(info["name"])
            except OperationFailure as exc:
                if exc.code != _INDEX_NOT_FOUND:  # another engine dropped it first
                    raise


def _m005_scope_list_index(store: MongoStore) -> None:
    """``(agentWallet, userAddress, createdAt, _id)`` for ``list_memories`` and ``count_memories``:
    one index range per user of the scope, already in the listing's order."""
    store.create_indexes(MEMORY, [_index(MEMORY, _mql.SCOPE_LIST_INDEX)])


#: The schema migrations of a MongoDB database, in order (recorded in ``_manowar_migrations``
#: by name; never renamed or reordered, new ones go at the end). A fresh database runs them all
#: and ends in the state of one upgraded from any earlier version: the indexes of
#: :data:`~manowar_memory.stores._mql.INDEXES`.
MIGRATIONS: list[tuple[str, Callable[[MongoStore], None]]] = [
    ("m001_active_fact_hash", _m001_active_fact_hash),
    ("m002_indexes", _m002_indexes),
    ("m003_memory_scope_nulls", _m003_memory_scope_nulls),
    ("m004_vector_id_per_agent", _m004_vector_id_per_agent),
    ("m005_scope_list_index", _m005_scope_list_index),
]
