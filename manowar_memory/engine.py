"""The engine facade: ``remember``, ``post_turn``, ``pre_turn`` and friends."""

from __future__ import annotations

import bisect
import concurrent.futures
import dataclasses
import itertools
import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import AliasChoices, BaseModel, ConfigDict, Field

from ._access import AccessBumps
from ._notes import collect, degrade
from ._twins import async_twin
from ._util import as_str, collapse_ws, content_hash, now_ms, truncate
from .cache.base import Cache, InMemoryCache
from .cache.namespace import QueryCache, cached_search, scope_of
from .candidates import Candidate
from .config import MemoryConfig
from .embeddings import AUTO, CachedEmbedder, EmbedderSpec, choose_embedder
from .errors import ConfigurationError, EmbeddingError, InvalidInputError, NotFoundError, PartialIngestError, ScopeError
from .expiry import EXPIRES_AT, check_expires_at_value, default_ttl_seconds, is_expired, resolve_expiry, ttl_to_ms
from .extraction import FactExtractor, RuleBasedExtractor, fact_time_metadata
from .filters import FilterValue, Group, Ops, conjoin, normalize_filters
from .jobs import core
from .jobs._store import ChangedScopes, job_store
from .jobs.core import Owner
from .jobs.reembed import ReembedParams, count_reembed, reembed
from .jobs.runner import invalidate_changes
from .layers import LAYER_SEARCHERS, LayerHits, LayerRequest, LayerSearcher, normalize_layers, search_memory_rows
from .lifecycle import SOURCE_MEMORY_ID
from .notes import DEFAULT_AGENT, ProjectNotes
from .packing import pack
from .ranking.trust import content_delimiter
from .records import FACT_TYPES, Job, Layer, MemoryRecord, Message, Pattern, Session, Transcript, WorkingMemory
from .redaction import install_log_redaction, redact
from .rerankers import resolve_reranker
from .rerankers.base import Reranker
from .resolver import FactResolver, resolve_updates
from .results import ForgetReport, PostTurnResult, PreTurnResult, RememberResult
from .retrieval.pipeline import RankingStage, RankOptions, StageInsert
from .scope import Scope, ScopeLike, owns
from .scoped import ScopedMemory
from .stores.base import INACTIVE_STATUSES, Hit, MemoryQuery, Store, TurnRows, missing_role_methods
from .stores.sqlite import SQLiteStore
from .threads import EngineThreads, blas_threads
from .validation import check_id, check_json_value, check_metadata, check_optional_text, check_text, check_timestamp

__all__ = [
    "FlushResult",
    "ForgetReport",
    "IngestItem",
    "IngestReport",
    "LayerSearchResult",
    "MemoryEngine",
    "PostTurnResult",
    "PreTurnResult",
    "ReembedReport",
    "RememberResult",
    "SearchOptions",
    "SearchOutcome",
]

log = logging.getLogger("manowar_memory")
install_log_redaction(log)  # no credential reaches a log line

NO_EMBEDDER = "vector lane disabled: no embedder configured"
def _plain(value: FilterValue) -> bool:
    """An equality or a "one of" list (no operators, no group)."""
    return not isinstance(value, (Ops, Group))


_SCOPE_FILTER_KEYS = {"agentWallet": "agent_wallet", "userAddress": "user_address", "threadId": "thread_id",
                      "mode": "mode", "haiId": "hai_id"}


class LayerSearchResult(BaseModel):
    """Raw hits per layer, before packing."""

    model_config = {"arbitrary_types_allowed": True}

    query: str
    layers: dict[str, list[Candidate]]
    totals: dict[str, int]
    lanes: dict[str, dict[str, Any]] = Field(default_factory=dict)
    degradations: list[str] = Field(default_factory=list)
    timings_ms: dict[str, float] = Field(
        default_factory=dict, description="Milliseconds per step: embed, each layer's lanes and ranking stages.")


@dataclasses.dataclass(frozen=True)
class SearchOptions:
    """What one layered search is asked for: the layers (None: all six), extra filters, hits
    per layer (None: ``PackerConfig.limit``) and the optional ranking stages."""

    layers: Sequence[str] | None = None
    filters: Mapping[str, Any] | None = None
    limit: int | None = None
    rank: RankOptions = dataclasses.field(default_factory=RankOptions)


@dataclasses.dataclass
class SearchOutcome:
    """A layered search's candidates per layer, counts, lane reports, degradations and timings."""

    layers: dict[str, list[Candidate]]
    totals: dict[str, int]
    lanes: dict[str, dict[str, Any]]
    degradations: list[str]
    timings_ms: dict[str, float]


class FlushResult(BaseModel):
    """Background work finished by ``flush``."""

    completed: int
    failed: int
    errors: list[str]
    facts_indexed: int = 0
    facts_reinforced: int = 0
    facts_superseded: int = 0
    notes: list[str] = Field(default_factory=list, description=(
        "Possible contradictions left alone (uncertain); with a resolver, also what it found already known or "
        "could not decide (see manowar_memory.resolver)."))


class IngestItem(BaseModel):
    """One memory row for :meth:`MemoryEngine.ingest`.

    ``key`` (also accepted as ``id``) is the item's idempotency key: an item with a key is
    stored once per scope (agent, user, mode, HAI) however many times it is ingested, so a
    failed or interrupted ingest can simply be run again."""

    model_config = ConfigDict(extra="forbid")

    key: str | None = Field(None, validation_alias=AliasChoices("key", "id"),
                            description="Idempotency key: the item is stored once per scope.")
    content: str
    source: str = "knowledge"
    created_at: int | None = None
    thread_id: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    context: str | None = Field(
        None, description="Text to find the row by but never show (default: the previous message of its thread).")
    ttl: Any = Field(None, description="Time to live: seconds or a timedelta, from created_at (overrides ingest's ttl).")
    expires_at: Any = Field(None, description="Absolute expiry: epoch ms or an aware datetime (overrides ingest's).")


#: the keys an ingest item may have (``id`` is an alias of ``key``)
_INGEST_KEYS = frozenset({*IngestItem.model_fields, "id"})


class IngestReport(BaseModel):
    """What :meth:`MemoryEngine.ingest_report` did: the row id of every item in order, how
    many rows it stored and which keys were already stored (by an earlier run)."""

    ids: list[str]
    inserted: int
    already_stored: list[str] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list, description=(
        "Possible contradictions left alone (uncertain) among the ingested facts; with a resolver, also what it "
        "found already known or could not decide (see manowar_memory.resolver)."))


@dataclasses.dataclass(frozen=True)
class ReembedReport:
    """What :meth:`MemoryEngine.reembed` did: the rows it read (``scanned``), gave a vector of
    ``model_id`` (``embedded``; in a dry run, would give), found embedded by that model already
    (``already_embedded``) and left alone as superseded, deleted or archived (``skipped_inactive``)."""

    model_id: str
    scanned: int
    embedded: int
    already_embedded: int
    skipped_inactive: int
    batches: int
    dry_run: bool = False


def _default_home() -> Path:
    return Path(os.environ.get("MANOWAR_HOME", "~/.manowar")).expanduser()


def _not_a_store(spec: object) -> str:
    missing = missing_role_methods(spec, Store)
    lacking = f" lacking {', '.join(missing)}: implement every role of manowar_memory.stores.Store" if missing else ""
    return f"store must be a URL string or a Store, got {type(spec).__name__}{lacking}"


def open_store(spec: Store | str | None) -> Store:
    """A store from an instance or a URL: ``sqlite:///path``, ``sqlite:///:memory:``, ``:memory:``,
    ``mongodb://...`` (with the ``mongo`` extra); None gives the embedded default file."""
    if spec is None:
        return SQLiteStore(_default_home() / "memory.db")
    if not isinstance(spec, str):
        if isinstance(spec, Store):
            return spec
        raise ConfigurationError(_not_a_store(spec))
    if spec == ":memory:" or spec == "sqlite:///:memory:" or spec == "sqlite://":
        return SQLiteStore(":memory:")
    if spec.startswith("sqlite:///"):  # a URL opens a database in an existing directory (never creates one)
        return SQLiteStore(spec[len("sqlite:///"):], create_dirs=False)
    if spec.startswith(("mongodb://", "mongodb+srv://")):
        try:
            from .stores.mongo import MongoStore
        except ImportError as exc:  # the module or pymongo is missing
            raise ConfigurationError(f"the MongoDB store is not available: {exc}") from exc
        return MongoStore(spec)
    raise ConfigurationError(
        f"unknown store {spec!r}; use 'sqlite:///path/to/memory.db', 'sqlite:///:memory:' or 'mongodb://host/db'"
    )


def _newest_until(messages: Iterable[tuple[int, str]], stamp: int, count: int) -> list[tuple[int, str]]:
    """The first ``count`` of ``messages`` (newest first) written at or before ``stamp``."""
    return list(itertools.islice((m for m in messages if m[0] <= stamp), count))


def _window_text(window: Sequence[tuple[int, str]], cap: int) -> str | None:
    """A thread context from its window (newest first): the messages oldest first, each cut to ``cap``."""
    return " ".join(text[:cap].strip() for _, text in reversed(window)) or None


def _thread_query(scope: Scope, thread: str) -> MemoryQuery:
    """The active rows of ``thread`` in ``scope`` that thread contexts are built from (facts are not messages)."""
    return MemoryQuery(scope=dataclasses.replace(scope, thread_id=thread), durable=False, exclude_sources=("fact",))


def _active(record: MemoryRecord) -> bool:
    """Whether searches (and thread contexts) see the row: neither soft-deleted nor superseded."""
    return record.metadata.get("status") not in INACTIVE_STATUSES


class MemoryEngine:
    """Layered long-term memory for an agent.

    >>> engine = MemoryEngine(store="sqlite:///:memory:", embedder="fake")
    >>> scope = Scope(agent_wallet="agent-1", user_address="user-1", thread_id="t-1")
    >>> _ = engine.remember(scope, "The user prefers short TypeScript examples.", fact_type="preference")
    >>> engine.pre_turn("Which examples does the user like?", scope).prompt.splitlines()[0]
    'Memory context:'

    ``store``: a Store or URL (default: an SQLite file under ``$MANOWAR_HOME``, ``~/.manowar``).
    ``embedder``: a provider string (``"onnx"``, ``"local"``, ``"voyage:voyage-4-large"``, ``"fake"``),
    an Embedder, or None for keyword-only memory (every result then says so). The default,
    ``"auto"``, is ``$MANOWAR_EMBEDDER`` when set, else the best local embedder installed (``onnx``,
    then ``local``), else keyword-only with a warning (:mod:`manowar_memory.embeddings.choice`);
    a named embedder that cannot load is an error, never replaced by another.
    ``reranker``: optional; used when a search asks for ``rerank=True``.
    ``extractor``: fact extractor for ``post_turn`` (default: offline rules; None disables).
    ``resolver``: optional :class:`~manowar_memory.resolver.FactResolver` (``LLMResolver(chat)``)
    asked what each new fact does to the nearest stored ones before the slot rules run
    (default: the slot rules alone; see :mod:`manowar_memory.resolver`).
    ``cache``: embedding/query cache (default: in-process).
    """

    def __init__(
        self,
        store: Store | str | None = None,
        embedder: EmbedderSpec = AUTO,
        *,
        reranker: Reranker | str | None = None,
        extractor: FactExtractor | str | None = "rules",
        resolver: FactResolver | None = None,
        cache: Cache | None = None,
        config: MemoryConfig | None = None,
    ) -> None:
        self.config = config or MemoryConfig()
        self.store = open_store(store)
        self.cache: Cache = cache if cache is not None else InMemoryCache()
        choice = choose_embedder(embedder)
        self.embedder: CachedEmbedder | None = (
            CachedEmbedder(choice.embedder, self.cache) if choice.embedder is not None else None
        )
        #: why the vector lane is off (reported in every result's degradations), or None when it is on
        self.keyword_only_note: str | None = (choice.note or NO_EMBEDDER) if self.embedder is None else None
        if isinstance(reranker, str):
            reranker = resolve_reranker(reranker)
        self.reranker: Reranker | None = reranker
        if extractor == "rules":
            extractor = RuleBasedExtractor(
                max_per_turn=self.config.fact_max_per_turn, min_confidence=self.config.fact_min_confidence,
                max_chars=self.config.fact_max_chars,
            )
        elif isinstance(extractor, str):
            raise ConfigurationError(f"unknown extractor {extractor!r}; pass 'rules', None or a FactExtractor")
        self.extractor: FactExtractor | None = extractor
        if resolver is not None and not isinstance(resolver, FactResolver):
            raise ConfigurationError(f"resolver must be a FactResolver such as LLMResolver(chat), got {resolver!r}")
        self.resolver: FactResolver | None = resolver
        use_query_cache = self.config.query_cache
        if use_query_cache is None:
            use_query_cache = getattr(self.cache, "name", "") == "redis"
        self.query_cache: QueryCache | None = (
            QueryCache(self.cache, ttl_seconds=self.config.query_cache_ttl_s, label="layer query cache",
                       fence=self.store if callable(getattr(self.store, "cache_fences", None)) else None)
            if use_query_cache else None
        )
        self.query_cache_hits = 0
        self.threads = EngineThreads()
        self.stage_inserts: list[StageInsert] = []
        if self.embedder is not None:
            blas_threads()  # find the BLAS libraries now, not in the first search's vector lane
        self._pending: list[concurrent.futures.Future[dict[str, int]]] = []
        self._pending_lock = threading.Lock()
        self._access = AccessBumps(self.store, self.threads.background, self.config.access_write_delay_s)

    # ------------------------------------------------------------------ helpers
    @property
    def model_id(self) -> str | None:
        """The vector space of this engine's embedder (None when keyword-only)."""
        return self.embedder.model_id if self.embedder is not None else None

    def _embed_documents(self, texts: list[str]) -> list[list[float]] | None:
        if self.embedder is None or not texts:
            return None
        return self.embedder.embed(texts, input_type="document")

    def _text(self, value: Any, what: str) -> str:
        """``value`` when it is storable text within ``config.max_text_chars``."""
        return check_text(value, what, max_chars=self.config.max_text_chars)

    def _metadata(self, metadata: Any, what: str = "metadata") -> dict[str, Any]:
        """A plain-JSON copy of ``metadata`` within ``config.max_metadata_chars`` (see
        :mod:`manowar_memory.validation`)."""
        return check_metadata(metadata, what, max_chars=self.config.max_metadata_chars)

    def _new_record(
        self, scope: Scope, content: str, *, source: str, metadata: dict[str, Any], created_at: int | None = None,
        embedding: list[float] | None = None, thread_id: str | None = None, context: str | None = None,
        ttl: Any = None, expires_at: Any = None,
    ) -> MemoryRecord:
        """A memory row from checked input: every write path builds its rows here, so text, time
        and metadata that no store can hold are refused (:class:`InvalidInputError`) before any write.
        Its expiry is set here too (:meth:`_expiry`)."""
        content = self._text(content, "content")
        context = check_optional_text(context, "context", max_chars=self.config.max_text_chars)
        metadata = self._metadata(metadata)
        stamp = check_timestamp(created_at, "created_at") if created_at is not None else now_ms()
        self._expiry(metadata, source, stamp, ttl, expires_at)
        return MemoryRecord(
            id=MemoryRecord.make_id(scope.agent_wallet, content, stamp),
            agent_wallet=scope.agent_wallet, user_address=scope.user_address,
            thread_id=thread_id if thread_id is not None else scope.thread_id, mode=scope.mode, hai_id=scope.hai_id,
            content=content, context=context or None, source=source, embedding=embedding,  # type: ignore[arg-type]
            embedding_model=self.model_id if embedding is not None else None,
            created_at=stamp, updated_at=stamp, last_accessed_at=stamp, metadata=metadata,
        )

    def _expiry(self, metadata: dict[str, Any], source: str, created_at: int, ttl: Any = None,
                expires_at: Any = None) -> None:
        """Set ``metadata.expiresAt`` (epoch ms) of a row being written: from ``ttl`` (counted from
        ``created_at``) or ``expires_at``; else a ``metadata.expiresAt`` given is checked (None:
        never expires, no default either); else ``config.ttl_by_kind`` applies (manowar_memory.expiry)."""
        explicit = resolve_expiry(ttl, expires_at, base=created_at)
        if explicit is not None:
            metadata[EXPIRES_AT] = explicit
        elif EXPIRES_AT in metadata:
            if metadata[EXPIRES_AT] is not None:
                metadata[EXPIRES_AT] = check_expires_at_value(metadata[EXPIRES_AT], "metadata.expiresAt")
        else:
            seconds = default_ttl_seconds(self.config.ttl_by_kind, source, metadata)
            if seconds is not None:
                metadata[EXPIRES_AT] = created_at + ttl_to_ms(seconds, f"the configured ttl of {source} rows")

    # ------------------------------------------------------------------ writes
    def remember(
        self,
        scope: ScopeLike,
        content: str,
        *,
        fact_type: str | None = None,
        confidence: float | None = None,
        importance: float | None = None,
        retention: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        created_at: int | None = None,
        ttl: Any = None,
        expires_at: Any = None,
    ) -> RememberResult:
        """Store an explicit durable fact in the graph layer.

        ``fact_type`` is one of :data:`~manowar_memory.records.FACT_TYPES` (default
        ``"context"``); any other value, a different case or stray spaces included, is refused
        with :class:`InvalidInputError` rather than guessed at. Remembering the same fact again
        (same agent, user and text, case-insensitive) reinforces the existing row instead
        of inserting a duplicate.

        ``ttl`` (seconds or a timedelta, from ``created_at``) or ``expires_at`` (epoch ms or an
        aware datetime) make the fact expire: reads hide it from then on (see
        :mod:`manowar_memory.expiry`); without either, ``config.ttl_by_kind`` may give one.
        Remembering a fact again with a ttl, or after it expired, sets its expiry anew.
        """
        scope = Scope.coerce(scope)
        text = as_str(content)
        if text is None:
            raise InvalidInputError("content is required: pass the fact to remember as a non-empty string")
        for name, value in (("confidence", confidence), ("importance", importance)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1):
                raise InvalidInputError(f"{name} must be a number between 0 and 1, got {value!r}")
        # everything is checked before the dedupe lookup: a refused call changes nothing
        text = self._text(text, "content")
        fact_type = check_optional_text(fact_type, "fact_type", max_chars=200)
        retention = check_optional_text(retention, "retention", max_chars=200)
        created_at = check_timestamp(created_at, "created_at") if created_at is not None else now_ms()
        expiry = resolve_expiry(ttl, expires_at, base=created_at)  # a ttl counts from the fact's created_at
        meta: dict[str, Any] = {**self._metadata(scope.metadata, "scope metadata"), **self._metadata(metadata)}
        if fact_type is not None and fact_type not in FACT_TYPES:
            raise InvalidInputError(f"fact_type must be one of {list(FACT_TYPES)} (or None for 'context'), "
                                    f"got {fact_type!r}")
        kind = fact_type or "context"
        fact_hash = self.fact_hash(scope, text)
        existing = self.store.find_fact_by_hash(scope.agent_wallet, fact_hash)
        if existing is not None:
            self.store.bump_access([existing.id], now_ms(), agent_wallet=scope.agent_wallet)
            self._renew(scope, existing, expiry)
            return RememberResult(id=existing.id, fact_type=str(existing.metadata.get("factType", kind)),
                                  fact_hash=fact_hash, deduplicated=True)
        meta.update({
            "type": fact_type or "explicit_save", "source": "remember", "layer": "graph", "factHash": fact_hash,
            "factType": kind, "confidence": 1.0 if confidence is None else float(confidence),
            "extractor": "explicit",
        })
        if importance is not None:
            meta["importance"] = float(importance)
        if retention is not None:
            meta["retention"] = retention
        vectors = self._embed_documents([text])
        record = self._new_record(scope, text, source="fact", metadata=meta, created_at=created_at,
                                  embedding=vectors[0] if vectors else None, expires_at=expiry)
        # atomic: a concurrent remember of the same fact (another thread or process) that got
        # past the lookup above makes this reinforce its row instead of inserting a duplicate
        stored, inserted = self.store.add_fact_if_absent(record)
        if not inserted:
            self._renew(scope, stored, expiry)
            return RememberResult(id=stored.id, fact_type=str(stored.metadata.get("factType", kind)),
                                  fact_hash=fact_hash, deduplicated=True)
        updates = resolve_updates(self.store, scope, [stored], now_ms(), resolver=self.resolver)
        self.invalidate(scope)
        if stored.id in updates.duplicates:  # the resolver found it already known: that fact was reinforced
            return RememberResult(id=updates.duplicates[stored.id], fact_type=kind, fact_hash=fact_hash,
                                  deduplicated=True, notes=updates.uncertain)
        return RememberResult(id=stored.id, fact_type=kind, fact_hash=fact_hash, superseded=updates.superseded,
                              notes=updates.uncertain)

    def _renew(self, scope: Scope, fact: MemoryRecord, expiry: int | None) -> None:
        """A fact remembered again lives again: with an explicit expiry, or when it had expired,
        its ``expiresAt`` is set anew (that expiry, else the configured default from now, else none)."""
        now = now_ms()
        if expiry is None and not is_expired(fact.metadata, now):
            return
        meta = {k: v for k, v in fact.metadata.items() if k != EXPIRES_AT}
        self._expiry(meta, fact.source, now, expires_at=expiry)
        if self.store.update_memory(fact.id, {"metadata": meta, "updated_at": now},
                                    agent_wallet=fact.agent_wallet) is not None:
            self.invalidate(scope)

    @staticmethod
    def fact_hash(scope: Scope, text: str) -> str:
        """The dedupe key of a fact: a hash of the whole scope (agent, user, mode, HAI, exactly as
        the scope holds them) and the trimmed, lower-cased text.

        The reference left mode and HAI out (a fact known in one HAI was never stored for
        another) and lower-cased the user while scopes are case-sensitive (``alice``'s fact was
        dropped as a duplicate of ``Alice``'s and the result pointed at Alice's row)."""
        import json

        parts = [scope.agent_wallet, scope.user_address, scope.mode, scope.hai_id, text.strip().lower()]
        return content_hash(json.dumps(parts, ensure_ascii=False))

    def ingest(
        self,
        scope: ScopeLike,
        items: Iterable[str | IngestItem | Mapping[str, Any]],
        *,
        batch_size: int = 128,
        progress: bool = False,
        dedupe: bool = True,
        ttl: Any = None,
        expires_at: Any = None,
    ) -> list[str]:
        """Bulk-load memory rows (vectors layer by default), embedding in batches.

        Each item is a string or ``{content, source, created_at, thread_id, metadata, key}``.
        Returns the row id of every item in order. An item with a ``key`` is stored once per
        scope: ingesting it again returns the id of the stored row and changes nothing, so a
        failed or interrupted ingest can be run again. An item without a key gets one from
        what it holds (see :meth:`content_key`), so the same items ingested again are stored
        once too, and two identical items of one call are one row; ``dedupe=False`` stores
        every item without a key as a new row. When the embedder fails part-way, the
        batches before the failure stay stored and :class:`PartialIngestError` (an
        :class:`EmbeddingError`) says which.

        ``ttl`` (seconds or a timedelta, from each row's created_at) or ``expires_at`` (epoch ms
        or an aware datetime) make every row expire; an item's own ``ttl``/``expires_at``
        overrides them, and without any ``config.ttl_by_kind`` may give one
        (:mod:`manowar_memory.expiry`). A row already stored keeps its expiry.
        """
        return self.ingest_report(scope, items, batch_size=batch_size, progress=progress, dedupe=dedupe,
                                  ttl=ttl, expires_at=expires_at).ids

    @staticmethod
    def content_key(item: IngestItem) -> str:
        """The idempotency key of an ingest item given none: ``content:`` and a hash of its
        stripped content, source, thread, creation time (when given) and metadata. Items that
        differ in any of these are different rows; the scope is added by :meth:`ingest_id`."""
        parts = [item.content.strip(), item.source, item.thread_id, item.created_at, item.context, item.metadata]
        return "content:" + content_hash(json.dumps(parts, ensure_ascii=True, sort_keys=True, default=str))

    @staticmethod
    def ingest_id(scope: ScopeLike, key: str) -> str:
        """The row id of the ingest item with idempotency ``key`` in ``scope``: a hash of the
        whole scope (agent, user, mode, HAI, as the scope holds them) and the key."""
        import json

        sc = Scope.coerce(scope)
        parts = [sc.agent_wallet, sc.user_address, sc.mode, sc.hai_id, key]
        return f"vec_{sc.agent_wallet[:8]}_key_{content_hash(json.dumps(parts, ensure_ascii=True))}"

    def ingest_report(
        self,
        scope: ScopeLike,
        items: Iterable[str | IngestItem | Mapping[str, Any]],
        *,
        batch_size: int = 128,
        progress: bool = False,
        dedupe: bool = True,
        ttl: Any = None,
        expires_at: Any = None,
    ) -> IngestReport:
        """:meth:`ingest`, returning how many rows were stored and which keys were already
        stored by an earlier run (the caller's keys; items keyed by content count in
        ``inserted`` only)."""
        scope = Scope.coerce(scope)
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise InvalidInputError(f"batch_size must be a positive integer (items embedded per call), got {batch_size!r}")
        if isinstance(items, (str, bytes, bytearray, Mapping, IngestItem)) or not isinstance(items, Iterable):
            raise InvalidInputError(
                f"items must be a list of strings, IngestItem or {{'content': ...}} dicts, got {type(items).__name__}; "
                "to ingest one text, pass [text]"
            )
        parsed: list[IngestItem] = []
        seen_keys: dict[str, int] = {}
        for i, item in enumerate(items):
            if isinstance(item, str):
                item = IngestItem(content=item)
            elif not isinstance(item, IngestItem):
                unknown = sorted(str(k) for k in item if k not in _INGEST_KEYS) if isinstance(item, Mapping) else []
                if unknown:
                    raise InvalidInputError(
                        f"ingest item {i} has unknown key(s) {unknown}: the keys are {sorted(_INGEST_KEYS)} "
                        "(a misspelt key would otherwise be dropped, and its metadata with it)"
                    )
                try:
                    item = IngestItem.model_validate(item)
                except Exception as exc:
                    raise InvalidInputError(f"ingest item {i} is invalid: {exc}") from exc
            if not item.content.strip():
                raise InvalidInputError(f"ingest item {i} has empty content")
            if item.source not in ("session", "knowledge", "pattern", "archive", "fact"):
                raise InvalidInputError(f"ingest item {i} has unknown source {item.source!r}")
            if item.key is not None:
                if not item.key.strip():
                    raise InvalidInputError(f"ingest item {i} has an empty key: give it a non-empty key or none")
                if item.key in seen_keys:
                    raise InvalidInputError(
                        f"ingest items {seen_keys[item.key]} and {i} have the same key {item.key!r}: "
                        "a key names one item"
                    )
                seen_keys[item.key] = i
            parsed.append(item)
        # every row is built (and so checked) before the first write: a bad item stores nothing
        contexts = self._thread_contexts(scope, parsed)
        rows = [
            self._new_record(scope, b.content.strip(), source=b.source, metadata={**scope.metadata, **b.metadata},
                             created_at=b.created_at, thread_id=b.thread_id, context=contexts[i],
                             **({"ttl": b.ttl, "expires_at": b.expires_at}
                                if b.ttl is not None or b.expires_at is not None
                                else {"ttl": ttl, "expires_at": expires_at}))
            for i, b in enumerate(parsed)
        ]
        ids: list[str] = []
        inserted = 0
        already: list[str] = []
        notes: list[str] = []
        bar = None
        if progress:
            from tqdm import tqdm

            bar = tqdm(total=len(parsed), unit="mem", desc="ingest")
        try:
            for start in range(0, len(parsed), batch_size):
                batch = parsed[start : start + batch_size]
                keyed = {j: self.ingest_id(scope, b.key if b.key is not None else self.content_key(b))
                         for j, b in enumerate(batch) if b.key is not None or dedupe}
                stored = (self.store.existing_memory_ids(list(keyed.values()), agent_wallet=scope.agent_wallet)
                          if keyed else set())
                batch_ids: list[str | None] = [keyed[j] if keyed.get(j) in stored else None for j in range(len(batch))]
                already.extend(b.key for j, b in enumerate(batch) if batch_ids[j] is not None and b.key is not None)
                todo = [j for j in range(len(batch)) if batch_ids[j] is None]
                try:
                    vectors = self._embed_documents([rows[start + j].content for j in todo])
                except EmbeddingError as exc:
                    done = [i for i in batch_ids if i is not None]
                    raise self._partial_ingest(parsed, ids + done, start, batch, batch_ids, exc) from exc
                records = {
                    j: rows[start + j].model_copy(update={"embedding": vectors[n], "embedding_model": self.model_id})
                    if vectors else rows[start + j]
                    for n, j in enumerate(todo)
                }
                with_key = [j for j in todo if j in keyed]
                without = [j for j in todo if j not in keyed]
                if with_key:
                    results = self.store.add_memories_if_absent(
                        [records[j].model_copy(update={"id": keyed[j]}) for j in with_key])
                    for j, (memory_id, new) in zip(with_key, results):
                        batch_ids[j] = memory_id
                        inserted += int(new)
                        if not new and memory_id == keyed[j] and batch[j].key is not None:  # stored first elsewhere
                            already.append(str(batch[j].key))
                if without:
                    for j, memory_id in zip(without, self.store.add_memories([records[j] for j in without])):
                        batch_ids[j] = memory_id
                    inserted += len(without)
                ids.extend(str(i) for i in batch_ids)
                # an ingested fact replaces what it contradicts, as remember's do (one read per batch)
                notes += resolve_updates(self.store, scope, [records[j].model_copy(update={"id": batch_ids[j]})
                                                             for j in todo if records[j].source == "fact"],
                                         now_ms(), resolver=self.resolver).uncertain
                if todo:
                    self.invalidate(scope)
                if bar is not None:
                    bar.update(len(batch))
        finally:
            if bar is not None:
                bar.close()
        return IngestReport(ids=ids, inserted=inserted, already_stored=already, notes=notes)

    @staticmethod
    def _partial_ingest(
        parsed: Sequence[IngestItem], stored_ids: list[str], start: int, batch: Sequence[IngestItem],
        batch_ids: Sequence[str | None], exc: EmbeddingError,
    ) -> PartialIngestError:
        """The error of an ingest whose embedder failed at the batch starting at ``start``."""
        done_items = list(parsed[:start]) + [b for b, i in zip(batch, batch_ids) if i is not None]
        pending_items = [b for b, i in zip(batch, batch_ids) if i is None] + list(parsed[start + len(batch):])
        stored_keys = [str(b.key) for b in done_items if b.key is not None]
        pending_keys = [str(b.key) for b in pending_items if b.key is not None]

        def shown(keys: list[str]) -> str:
            listed = ", ".join(repr(k) for k in keys[:3])
            return listed + (f", ... {keys[-1]!r}" if len(keys) > 3 else "")

        what = f"{len(done_items)} of {len(parsed)} ingest items are stored"
        if stored_keys:
            what += f" (keys {shown(stored_keys)})"
        unkeyed = len(done_items) - len(stored_keys)
        if unkeyed:
            fix = (f"{unkeyed} stored item(s) have no key and would be stored again by a re-run: give every item a "
                   f"key (IngestItem.key), or ingest only the items from position {start} on")
        else:
            fix = "run the same ingest again: items with a key are stored once, so it stores only the rest"
        return PartialIngestError(
            f"the embedder failed part-way through an ingest: {what}, the other {len(pending_items)} are not; "
            f"{fix}. Cause: {exc}",
            total=len(parsed), stored_ids=stored_ids, stored_keys=stored_keys, pending_keys=pending_keys,
        )

    @staticmethod
    def _delimiter(scope: ScopeLike) -> str:
        """The untrusted-content delimiter: stable for one scope and thread in this process (so a
        provider's prompt cache keeps working), unguessable by stored text."""
        sc = Scope.coerce(scope)
        return content_delimiter("\x1f".join(str(v) for v in (sc.agent_wallet, sc.user_address, sc.mode, sc.hai_id,
                                                             sc.thread_id)))

    def _thread_contexts(self, scope: Scope, items: Sequence[IngestItem]) -> list[str | None]:
        """Each item's ``context``: its own when given; else, with ``thread_context`` on and an
        item that names its ``thread_id`` (a message of a conversation, not a document that
        merely shares the scope's thread), the ``thread_context_messages`` messages it followed
        in that thread, oldest first, each cut to ``thread_context_chars``: the earlier items of
        the same thread in this call and, before them, the thread's stored rows written before it."""
        cap, count = self.config.thread_context_chars, self.config.thread_context_messages
        out: list[str | None] = []
        earlier: dict[str, list[tuple[int, str]]] = {}  # thread -> (created_at, content) of its items so far
        stored: dict[str, list[tuple[int, str]]] = {}  # thread -> its newest stored rows, read once per call
        for item in items:
            thread = item.thread_id
            stamp = item.created_at if item.created_at is not None else now_ms()
            context = item.context.strip() if item.context else None  # the caller's own: kept whole
            if item.context is None and self.config.thread_context and thread and cap > 0:
                # newest first: this call's earlier items (a batch in time order reads `count` of
                # them), then the stored rows
                window = _newest_until(reversed(earlier.get(thread, ())), stamp, count)
                if len(window) < count:
                    if thread not in stored:
                        stored[thread] = self._stored_in_thread(scope, thread)
                    window += _newest_until(stored[thread], stamp, count - len(window))
                context = _window_text(window, cap)
            out.append(context or None)
            if thread:
                earlier.setdefault(thread, []).append((stamp, item.content.strip()))
        return out

    def _stored_in_thread(self, scope: Scope, thread: str) -> list[tuple[int, str]]:
        """``(created_at, content)`` of the newest active rows of ``thread`` (this scope), newest first."""
        rows = self.store.list_memories(_thread_query(scope, thread), limit=20 + self.config.thread_context_messages)
        return [(row.created_at, row.content) for row in rows if row.thread_id == thread]

    def _newest_around(self, scope: Scope, thread: str, since: int) -> list[MemoryRecord]:
        """The thread's active rows (newest first) from the newest down to at least
        ``thread_context_messages`` rows written before ``since``: the rows after a change at
        ``since`` and every row their windows hold. A change near the thread's end (the usual
        delete) reads a page of rows, not the whole thread."""
        query, count = _thread_query(scope, thread), self.config.thread_context_messages
        page = max(64, 8 * count)
        rows = self.store.list_memories(query, limit=page)
        if len(rows) == page and sum(1 for r in rows if r.created_at < since) < count:
            rows = self.store.list_memories(query)  # the change is older than the page: read the thread
        return rows

    def _rebuild_thread_contexts(self, changes: Sequence[tuple[MemoryRecord, str | None, str | None]]) -> int:
        """Keep the thread context of the rows that followed changed rows true to their thread's
        active rows. Each change is ``(row, was, now)``: the row's text went from ``was`` to
        ``now`` (None: not an active row of the thread, as when deleted or superseded).

        An ingested row is indexed with the ``thread_context_messages`` active rows before it
        (:meth:`_thread_contexts`), so without this a deleted message's words would still find
        the rows after it. Each of the next ``thread_context_messages`` rows after a changed
        row whose context is the one the engine built from the thread as it was gets the one it
        builds now; a context the caller gave, or one the rows no longer rebuild (a row since
        deleted or back-filled, timestamps that tie), is left as it is. Reads each touched
        thread's newest active rows once (:meth:`_newest_around`); returns how many rows were rewritten."""
        cap, count = self.config.thread_context_chars, self.config.thread_context_messages
        if not self.config.thread_context or cap <= 0:
            return 0
        by_thread: dict[tuple[Scope, str], list[tuple[MemoryRecord, str | None, str | None]]] = {}
        for row, was, now in changes:
            if was != now and row.thread_id and row.source != "fact":
                by_thread.setdefault((scope_of(row), row.thread_id), []).append((row, was, now))

        def context_of(messages: list[tuple[int, str, str]], follower: MemoryRecord) -> str | None:
            # messages newest first: start at the first one written at or before the follower
            start = bisect.bisect_left(messages, -follower.created_at, key=lambda m: -m[0])
            window = itertools.islice(((at, text) for at, rid, text in (messages[i] for i in range(
                start, len(messages))) if rid != follower.id), count)
            return _window_text(list(window), cap)

        updates: dict[str, list[tuple[str, dict[str, Any]]]] = {}  # by agent: a by-id write names its agent
        for (scope, thread), touched in by_thread.items():
            changed = {row.id for row, _, _ in touched}
            rows = [r for r in self._newest_around(scope, thread, min(r.created_at for r, _, _ in touched))
                    if r.thread_id == thread and r.id not in changed]
            others = [(r.created_at, r.id, r.content) for r in rows]  # newest first, as the store lists them
            before = sorted([*others, *((r.created_at, r.id, was) for r, was, _ in touched if was)], key=lambda m: -m[0])
            after = sorted([*others, *((r.created_at, r.id, now) for r, _, now in touched if now)], key=lambda m: -m[0])
            oldest_first = sorted(rows, key=lambda r: r.created_at)
            # only rows of the changed row's own scope: an agent's shared row is never given a user's text
            stamps = [r.created_at for r in oldest_first]
            followers = {f.id: f for row, _, _ in touched
                         for start in (bisect.bisect_left(stamps, row.created_at),)
                         for f in oldest_first[start:start + count] if f.user_address == row.user_address}
            updates.setdefault(scope.agent_wallet, []).extend(
                (f.id, {"context": context_of(after, f)}) for f in followers.values()
                if f.context == context_of(before, f) != context_of(after, f))
        for agent, rows_of_agent in updates.items():
            if rows_of_agent:
                self.store.update_memories(rows_of_agent, agent_wallet=agent)
        return sum(len(u) for u in updates.values())

    def post_turn(
        self,
        scope: ScopeLike,
        messages: Sequence[Mapping[str, Any] | Message],
        tool_calls: Sequence[Mapping[str, Any]] | None = None,
        *,
        session_id: str | None = None,
        turn_id: str | None = None,
        summary: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        extract_facts: bool = True,
    ) -> PostTurnResult:
        """Record a turn: transcript (scene), working buffer and a session summary row
        in-band; fact extraction (graph) queued in the background (see :meth:`flush`).

        The summary is embedded before anything is written, so an embedder failure raises
        :class:`EmbeddingError` and leaves the store untouched. The transcript, the working
        buffer and the session row are then written in one atomic store write, after the
        turns committed before it (concurrent calls on a thread queue, none is lost). A turn
        is stored once per ``turn_id`` (given none, one is derived from client timestamps,
        else made up: see :meth:`_derived_turn_id`): repeating a call, also after a failure,
        answers ``created=False`` and writes nothing.
        """
        scope = Scope.coerce(scope)
        now = now_ms()
        msgs = self._normalize_messages(messages, tool_calls, now, max_chars=self.config.max_text_chars)
        if not msgs:
            raise InvalidInputError("messages must hold at least one message with non-blank content")
        if session_id is None and scope.thread_id is None:
            raise ScopeError("post_turn needs a thread: set Scope(thread_id=...) or pass session_id=...")
        self.check_conversation_scope(scope, "post_turn")
        session_id = check_optional_text(session_id, "session_id", max_chars=1000)
        turn_id = check_optional_text(turn_id, "turn_id", max_chars=1000)
        summary = check_optional_text(summary, "summary", max_chars=self.config.max_text_chars)
        caller_meta = {**self._metadata(scope.metadata, "scope metadata"), **self._metadata(metadata)}
        sid = as_str(session_id) or scope.thread_session_id()
        thread_id = scope.thread_id or sid
        tid = as_str(turn_id) or self._derived_turn_id(scope, sid, msgs, _client_stamped(messages, tool_calls))
        turn_summary = as_str(summary) or self._compact_summary(msgs)
        vectors = self._embed_documents([turn_summary])
        meta = {**caller_meta, "type": "agent_memory_turn", "turnId": tid, "sessionId": sid}
        thread_scope = scope.with_thread(thread_id)
        # the turn happened when its messages were said (client timestamps; never in the future),
        # not when it was stored: an imported conversation keeps its dates in the packed context
        said_at = min(now, max(m.timestamp for m in msgs))
        # checked here, before any write: build() below only assembles rows
        record = self._new_record(scope, turn_summary, source="session", metadata=meta, created_at=said_at,
                                  embedding=vectors[0] if vectors else None, thread_id=thread_id)
        record = record.model_copy(update={"id": MemoryRecord.make_id(scope.agent_wallet, f"{sid}\x00{tid}", now)})

        def build(existing: Transcript | None, live: Session | None) -> TurnRows:
            if existing is not None and (existing.user_address, existing.mode, existing.hai_id) != (
                scope.user_address, scope.mode, scope.hai_id
            ):
                raise InvalidInputError(
                    f"session {sid!r} belongs to another user or mode of this agent; use a session id of your own"
                )
            history = list(existing.messages) if existing else []
            all_msgs = history + msgs
            transcript = Transcript(
                session_id=sid, **Transcript.scope_fields(thread_scope), messages=all_msgs,
                summary=self._compact_summary(all_msgs), token_count=(existing.token_count if existing else 0),
                metadata={**(existing.metadata if existing else {}), **meta, "updatedAt": now},
                created_at=existing.created_at if existing else min(now, min(m.timestamp for m in msgs)),
            )
            session = self._working_session(thread_scope, live, msgs, meta, tid, sid, now)
            return TurnRows(transcript, session, record.model_copy(update={"context": self._turn_context(history)}))

        with collect() as cache_notes:
            written = self.store.append_turn(scope.agent_wallet, sid, thread_scope.thread_session_id(), tid, build)
            if written.created:
                self.invalidate(scope)
        queued = False
        if (written.created and extract_facts and self.extractor is not None
                and any(m.role == "user" for m in msgs)):
            self._submit(self._extract_and_index, scope.with_thread(thread_id), msgs, tid, dict(metadata or {}),
                         written.memory_id)
            queued = True
        notes = ([self.keyword_only_note] if self.keyword_only_note else []) + list(cache_notes)
        new = written.created
        return PostTurnResult(
            session_id=sid, thread_id=thread_id, turn_id=tid, vector_id=written.memory_id, created=new,
            seq=written.seq, stored={"transcript": new, "working": new, "vector": new},
            queued={"facts": queued}, degradations=notes,
        )

    @staticmethod
    def _derived_turn_id(scope: Scope, session_id: str, msgs: Sequence[Message], stable: bool) -> str:
        """The id of a turn given none. When every message (and tool call) carries the
        client's own timestamp, a hash of the scope, the session and the messages with their
        timestamps: a retry of the same turn gets the same id, and two turns that say the same
        words at different times do not. Otherwise a fresh random id: the same words sent
        twice may be two real turns ("yes", "yes"), so nothing without a stable client value
        is merged; pass ``turn_id`` to make such retries safe."""
        if not stable:
            return "turn_" + uuid.uuid4().hex
        parts = [scope.agent_wallet, scope.user_address, scope.mode, scope.hai_id, session_id,
                 [[m.role, m.content, m.timestamp, m.tool_calls] for m in msgs]]
        return "turn_" + content_hash(json.dumps(parts, ensure_ascii=True, sort_keys=True, default=str))

    @staticmethod
    def _normalize_messages(
        messages: Sequence[Mapping[str, Any] | Message], tool_calls: Sequence[Mapping[str, Any]] | None, now: int,
        *, max_chars: int | None = None,
    ) -> list[Message]:
        """Checked messages, oldest first: valid text within ``max_chars``, timestamps in range
        (a missing one is ``now`` plus the position), JSON tool-call payloads."""
        given: object = messages  # callers outside the type checker pass anything
        if isinstance(given, (str, bytes)) or not isinstance(given, Sequence):
            raise InvalidInputError("messages must be a list of {'role': ..., 'content': ...} dicts")
        out: list[Message] = []
        for i, raw in enumerate(messages):
            if isinstance(raw, Message):
                check_text(raw.content, f"messages[{i}].content", max_chars=max_chars, allow_blank=True)
                raw = raw.model_copy(update={
                    "timestamp": check_timestamp(raw.timestamp, f"messages[{i}].timestamp"),
                    "tool_calls": check_json_value(raw.tool_calls, f"messages[{i}].tool_calls"),
                })
                out.append(raw)
                continue
            if not isinstance(raw, Mapping):
                raise InvalidInputError(f"messages[{i}] must be a dict with 'role' and 'content'")
            role = raw.get("role")
            if role not in ("user", "assistant", "system", "tool"):
                raise InvalidInputError(f"messages[{i}].role must be user, assistant, system or tool, got {role!r}")
            content = as_str(raw.get("content"))
            if content is None:
                raise InvalidInputError(f"messages[{i}].content must be a non-blank string")
            check_text(content, f"messages[{i}].content", max_chars=max_chars)
            ts = raw.get("timestamp")
            stamp = check_timestamp(ts, f"messages[{i}].timestamp") if ts is not None else now + i
            calls = raw.get("tool_calls", raw.get("toolCalls"))
            if calls is not None:
                if not isinstance(calls, list) or not all(isinstance(c, Mapping) for c in calls):
                    raise InvalidInputError(f"messages[{i}].tool_calls must be a list of dicts (one per call), "
                                            f"got {calls!r:.80}")
                calls = check_json_value(list(calls), f"messages[{i}].tool_calls")
            out.append(Message(role=role, content=content, timestamp=stamp, tool_calls=calls))
        for j, event in enumerate(tool_calls or []):
            if not isinstance(event, Mapping):
                raise InvalidInputError(f"tool_calls[{j}] must be a dict with a 'name'")
            name = as_str(event.get("name") or event.get("toolName") or event.get("tool"))
            if name is None:
                raise InvalidInputError(f"tool_calls[{j}] needs a 'name'")
            args = event.get("args", event.get("input"))
            args = check_json_value(args, f"tool_calls[{j}].args") if isinstance(args, Mapping) else {}
            status = as_str(event.get("status")) or "completed"
            result = event.get("result", event.get("output"))
            text = f"tool:{name} status:{status}" + (f" result:{str(result)[:2000]}" if result is not None else "")
            check_text(text, f"tool_calls[{j}]", max_chars=max_chars)
            ts = event.get("timestamp")
            stamp = check_timestamp(ts, f"tool_calls[{j}].timestamp") if ts is not None else now + len(out) + j
            out.append(Message(role="tool", content=text, timestamp=stamp, tool_calls=[{"name": name, "args": args}]))
        out.sort(key=lambda m: m.timestamp)
        return out

    def _turn_context(self, history: Sequence[Message]) -> str | None:
        """A turn row's thread context: the exchange it follows (the session's last
        ``thread_context_messages`` user and assistant messages before it, at least two, each
        cut to ``thread_context_chars``), so "Yes, in June" is found by the question."""
        cap = self.config.thread_context_chars
        if not self.config.thread_context or cap <= 0:
            return None
        count = max(2, self.config.thread_context_messages)
        said = [collapse_ws(m.content) for m in history if m.role in ("user", "assistant") and m.content.strip()]
        return " ".join(text[:cap].strip() for text in said[-count:]).strip() or None

    @staticmethod
    def _compact_summary(msgs: Sequence[Message]) -> str:
        picked = [m for m in msgs if m.role in ("user", "assistant", "tool")][-6:]
        lines = [f"{m.role}: {truncate(collapse_ws(m.content), 500 if m.role == 'tool' else 800)}" for m in picked]
        return truncate("\n".join(lines), 1800) or "\n".join(f"{m.role}: {m.content}" for m in msgs)

    def _working_session(
        self, scope: Scope, existing: Session | None, msgs: Sequence[Message], meta: dict[str, Any], turn_id: str,
        session_id: str, now: int,
    ) -> Session:
        """The thread's working session after a turn: ``existing`` (the live one, or None) with
        the turn's user and assistant lines appended, cut to ``session_context_limit``."""
        if existing is not None and (existing.user_address, existing.mode, existing.hai_id) != (
            scope.user_address, scope.mode, scope.hai_id
        ):
            raise InvalidInputError(
                f"working session {existing.session_id!r} belongs to another user, mode or HAI of this agent; "
                "use a thread of your own"
            )
        lines = [truncate(f"{m.role}: {m.content}", 1000) for m in msgs if m.role in ("user", "assistant")]
        wm = existing.working_memory if existing else WorkingMemory()
        context = (wm.context + lines)[-self.config.session_context_limit:]
        state = {**wm.state, "lastSessionId": session_id, "lastTurnAt": now, "turnId": turn_id}
        return Session(
            session_id=scope.thread_session_id(), **Session.scope_fields(scope),
            working_memory=WorkingMemory(context=context, entities=dict(wm.entities), state=state),
            metadata={**(existing.metadata if existing else {}), **meta},
            created_at=existing.created_at if existing else now,
            expires_at=now + self.config.session_ttl_ms, last_accessed_at=now,
        )

    def _submit(self, fn: Any, *args: Any) -> None:
        future = self.threads.background.submit(fn, *args)
        with self._pending_lock:
            self._pending.append(future)

    def _extract_and_index(
        self, scope: Scope, msgs: list[Message], turn_id: str, metadata: dict[str, Any] | None = None,
        source_id: str | None = None,
    ) -> dict[str, Any]:
        assert self.extractor is not None
        facts = self.extractor.extract(msgs)
        indexed = reinforced = superseded = 0
        notes: list[str] = []
        said_at = max((m.timestamp for m in msgs if m.role == "user"), default=None)
        fresh = []
        for fact in facts:
            fact_hash = self.fact_hash(scope, fact.fact)
            existing = self.store.find_fact_by_hash(scope.agent_wallet, fact_hash)
            if existing is not None:
                self.store.bump_access([existing.id], now_ms(), agent_wallet=scope.agent_wallet)
                reinforced += 1
            else:
                fresh.append((fact, fact_hash))
        if fresh:
            vectors = self._embed_documents([f.fact for f, _ in fresh])
            records = []
            for i, (fact, fact_hash) in enumerate(fresh):
                meta = {
                    **scope.metadata, **(metadata or {}), "type": "extracted_fact", "layer": "graph", "factType": fact.type,
                    "factHash": fact_hash, "confidence": fact.confidence, "sourceTurnId": turn_id,
                    "extractor": self.extractor.name, **fact_time_metadata(fact),
                }
                if source_id is not None:  # the turn row it was read from (marked outdated once it is superseded)
                    meta[SOURCE_MEMORY_ID] = source_id
                # observed when the user said it: the turn's time, not the time extraction ran
                records.append(self._new_record(scope, fact.fact, source="fact", metadata=meta, created_at=said_at,
                                                embedding=vectors[i] if vectors else None))
            new: list[MemoryRecord] = []
            for record in records:  # each one atomic against concurrent writers of the same fact
                stored, inserted = self.store.add_fact_if_absent(record)
                if inserted:
                    new.append(stored)
                else:
                    reinforced += 1
            indexed = len(new)
            # the scope's facts read once
            updates = resolve_updates(self.store, scope, new, now_ms(), resolver=self.resolver)
            superseded, notes = len(updates.superseded), updates.uncertain
            indexed -= len(updates.duplicates)  # already known: the stored fact was reinforced
            reinforced += len(updates.duplicates)
            if new:
                self.invalidate(scope)
        return {"indexed": indexed, "reinforced": reinforced, "superseded": superseded, "notes": notes}

    def flush(self, timeout: float | None = None) -> FlushResult:
        """Write pending access bumps, wait for queued background work (fact extraction) and
        report how it went."""
        access_error: str | None = None
        try:
            self._access.flush()
        except Exception as write_error:  # noqa: BLE001 - reported in the result like a failed extraction
            access_error = redact(f"access bumps: {type(write_error).__name__}: {write_error}")
            log.warning("access bumps not written: %s", write_error)
        with self._pending_lock:
            pending, self._pending = self._pending, []
        done, not_done = concurrent.futures.wait(pending, timeout=timeout)
        with self._pending_lock:
            self._pending.extend(not_done)
        errors, indexed, reinforced, superseded = [], 0, 0, 0
        notes: list[str] = []
        for f in done:
            exc = f.exception()
            if exc is not None:
                errors.append(redact(f"{type(exc).__name__}: {exc}"))  # a key an upstream echoed stays out
                log.warning("background memory task failed: %s", exc)
            else:
                counts = f.result()
                indexed += counts.get("indexed", 0)
                reinforced += counts.get("reinforced", 0)
                superseded += counts.get("superseded", 0)
                said = counts.get("notes")
                notes += [str(n) for n in said] if isinstance(said, list) else []
        completed = len(done) - len(errors)
        if access_error is not None:
            errors.append(access_error)
        return FlushResult(completed=completed, failed=len(errors), errors=errors,
                           facts_indexed=indexed, facts_reinforced=reinforced, facts_superseded=superseded,
                           notes=notes)

    # ------------------------------------------------------------------ reads
    def insert_stage(self, stage: RankingStage, *, after: str | None = None, before: str | None = None) -> None:
        """Add a ranking stage of your own to every layer search of this engine, right
        ``after`` or ``before`` a named stage (``decay``, ``rerank``, ``boosts``, ``time``, ``mmr``,
        or one inserted earlier), or last; it runs for every layer (working, scene, patterns and
        archives have no ``rerank``). See :mod:`manowar_memory.retrieval.pipeline`."""
        self.stage_inserts.append(StageInsert(stage, after=after, before=before))

    def search_layers(
        self,
        query: str,
        scope: ScopeLike,
        layers: Sequence[str] | None = None,
        *,
        filters: Mapping[str, Any] | None = None,
        limit: int | None = None,
        decay: bool = True,
        rerank: bool = False,
        mmr: bool = False,
    ) -> LayerSearchResult:
        """Run the selected layers concurrently; raw hits plus per-layer totals."""
        found = self._search(query, scope, SearchOptions(layers, filters, limit, RankOptions(decay, rerank, mmr)))
        return LayerSearchResult(query=query, layers=found.layers, totals=found.totals, lanes=found.lanes,
                                 degradations=found.degradations, timings_ms=_rounded(found.timings_ms))

    def search(
        self,
        query: str,
        scope: ScopeLike,
        *,
        layers: Sequence[str] = ("graph", "vectors"),
        k: int = 10,
        filters: Mapping[str, Any] | None = None,
        decay: bool = True,
        rerank: bool = False,
        mmr: bool = False,
    ) -> tuple[list[Candidate], list[str]]:
        """Ranked candidates across the chosen layers (for retrievers), and the degradations.

        With ``mmr``, the ranking pipeline's MMR stage orders each layer's hits and lowers
        scores to follow that order, so the merge by score keeps it."""
        result = self.search_layers(query, scope, layers, filters=filters, limit=k, decay=decay, rerank=rerank, mmr=mmr)
        merged = [c for layer in result.layers.values() for c in layer]
        merged.sort(key=lambda c: c.score, reverse=True)
        return merged[:k], result.degradations

    def _search(self, query: str, scope: ScopeLike, options: SearchOptions) -> SearchOutcome:
        text = as_str(query)
        if text is None:
            raise InvalidInputError("query is required: pass the user's message or question as a non-empty string")
        text = self._text(text, "query")
        scope = Scope.coerce(scope)
        selected = normalize_layers(options.layers)
        merged_filters = self.merge_filters(scope, options.filters)
        limit = self.config.packer.limit if options.limit is None else options.limit
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise InvalidInputError(f"limit must be a positive integer, got {limit!r}")
        rank = options.rank
        if self.query_cache is None:
            return self._search_uncached(text, scope, selected, merged_filters, limit, rank)
        payload = {
            "query": text, "layers": sorted(selected), "limit": limit,
            "filters": {k: list(v) if isinstance(v, tuple) else v for k, v in merged_filters.items()},
            "decay": rank.decay, "rerank": rank.rerank, "mmr": rank.mmr, "model": self.model_id,
            "retrieval": self.config.retrieval.model_dump(),
            "stages": [(i.stage.name, i.after, i.before) for i in self.stage_inserts],
        }

        def compute() -> tuple[dict[str, list[Candidate]], dict[str, int], dict[str, Any], dict[str, float]]:
            found = self._search_uncached(text, scope, selected, merged_filters, limit, rank)
            for note in found.degradations:
                degrade(note)  # the cache stores a result's degradations with it
            return found.layers, found.totals, found.lanes, found.timings_ms

        with collect() as notes:
            (layers_out, totals, lanes, timings), hit = cached_search(
                self.query_cache, scope, payload, compute,
                thread_scoped=any(layer in ("working", "scene") for layer in selected),
            )
        if hit:
            self.query_cache_hits += 1
            lanes["_cache"] = {"hit": True}
            layers_out = _unexpired(layers_out)
        return SearchOutcome(layers_out, totals, lanes, list(notes), timings)

    def _search_uncached(
        self, text: str, scope: Scope, selected: list[Layer], merged_filters: dict[str, FilterValue], limit: int,
        rank: RankOptions,
    ) -> SearchOutcome:
        timings: dict[str, float] = {}
        notes: list[str] = []
        vector: list[float] | None = None
        vector_future: concurrent.futures.Future[list[float]] | None = None
        embed_job: concurrent.futures.Future[tuple[list[str], float]] | None = None
        if self.embedder is None:
            notes.append(self.keyword_only_note or NO_EMBEDDER)
        elif any(name in ("graph", "vectors") for name in selected):
            # the query is embedded on a lane thread while the layers start: keyword lanes and the
            # other layers need no vector (ONNX Runtime and torch release the GIL); with no lane
            # thread free it is embedded here first
            vector_future = concurrent.futures.Future()
            target = vector_future
            embed_job = self.threads.beside(lambda: self._embed_query(text, target))
            if embed_job is None:
                embed_notes, timings["embed"] = self._embed_query(text, vector_future)
                notes.extend(embed_notes)
                vector, vector_future = vector_future.result(), None
        req = LayerRequest(
            store=self.store, scope=scope, filters=merged_filters, text=text, limit=limit,
            config=self.config.retrieval, options=rank, vector=vector, model_id=self.model_id,
            reranker=self.reranker, inserts=tuple(self.stage_inserts), threads=self.threads,
            vector_future=vector_future,
        )
        t0 = time.perf_counter()
        # graph and vectors share the memory table: searched together when both are selected
        tasks: dict[str, LayerSearcher] = {layer: LAYER_SEARCHERS[layer] for layer in selected}
        if "graph" in tasks and "vectors" in tasks:
            del tasks["graph"], tasks["vectors"]
            tasks["graph+vectors"] = search_memory_rows
        outcomes: dict[str, tuple[LayerHits | None, BaseException | None]] = {}
        if self.config.concurrent_layers and len(tasks) > 1:
            futures = {name: self.threads.layers.submit(_timed_layer, name, fn, req) for name, fn in tasks.items()}
            outcomes = {name: _outcome(f) for name, f in futures.items()}
        else:
            for name, fn in tasks.items():
                try:
                    outcomes[name] = (_timed_layer(name, fn, req), None)
                except Exception as exc:  # noqa: BLE001 - the layer is left out and reported in the notes
                    outcomes[name] = (None, exc)
        if embed_job is not None:  # an embedding failure raises here, once no layer still waits for it
            embed_notes, timings["embed"] = embed_job.result()
            notes.extend(embed_notes)
        results: dict[str, list[Candidate]] = {}
        lanes: dict[str, dict[str, Any]] = {}
        for name, (hits, error) in outcomes.items():
            if hits is None:
                notes.append(f"layer {name} failed and was left out: {type(error).__name__}: {error}")
                continue
            for layer_name, found in hits.layers.items():
                results[layer_name] = found
            lanes.update({layer: report.as_dict() for layer, report in hits.lanes.items()})
            notes.extend(n for n in hits.degradations if n not in notes)
            timings.update(hits.timings_ms)
        results = {layer: results[layer] for layer in selected if layer in results}
        timings["layers"] = (time.perf_counter() - t0) * 1000
        totals = {layer: len(hits) for layer, hits in results.items()}
        return SearchOutcome(results, totals, lanes, notes, timings)

    def _embed_query(self, text: str, target: concurrent.futures.Future[list[float]]) -> tuple[list[str], float]:
        """Embed the query into ``target`` (its vector, or the embedder's error, which is also
        raised); returns the degradations the embedding cache reported and the embedding's own
        milliseconds."""
        assert self.embedder is not None
        t0 = time.perf_counter()
        try:
            with collect() as embed_notes:  # the embedding cache reports through the call's collector
                vector = self.embedder.embed([text], input_type="query")[0]
        except BaseException as exc:
            target.set_exception(exc)
            raise
        target.set_result(vector)
        return embed_notes, (time.perf_counter() - t0) * 1000

    def pre_turn(
        self,
        query: str,
        scope: ScopeLike,
        layers: Sequence[str] | None = None,
        *,
        filters: Mapping[str, Any] | None = None,
        limit: int | None = None,
        max_items: int | None = None,
        max_item_chars: int | None = None,
        budget_chars: int | None = None,
        rerank: bool = False,
        mmr: bool = False,
        explain: bool = False,
    ) -> PreTurnResult:
        """The memory context for a turn: search the layers, rank, and pack within the budget.

        Defaults: 12 hits per layer, 6 items, 120 characters per item, 900 characters in all.
        Every layer's hits go through the ranking stages (``timings_ms`` names each one that ran,
        ``<layer>.<stage>``); ``mmr`` adds the MMR stage there, and the packer only packs.
        ``explain=True`` adds a decision per candidate (kept, duplicate, below threshold,
        over budget, past max items).
        """
        p = self.config.packer
        max_items = p.max_items if max_items is None else max_items
        max_item_chars = p.max_item_chars if max_item_chars is None else max_item_chars
        budget_chars = p.budget_chars if budget_chars is None else budget_chars
        for name, value, low in (("max_items", max_items, 1), ("max_item_chars", max_item_chars, 20),
                                 ("budget_chars", budget_chars, len(p.header) + 1)):
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise InvalidInputError(f"{name} must be an integer of at least {low}, got {value!r}")
        t_start = time.perf_counter()
        with collect() as notes:
            found = self._search(query, scope, SearchOptions(layers, filters, limit, RankOptions(rerank=rerank, mmr=mmr)))
            for note in found.degradations:
                degrade(note)
            timings = found.timings_ms
            t0 = time.perf_counter()
            packed = pack(
                query, found.layers, layer_order=normalize_layers(layers), max_items=max_items,
                max_item_chars=max_item_chars, budget_chars=budget_chars, header=p.header,
                untrusted_delimiter=self._delimiter(scope) if p.wrap_untrusted else None,
                default_trust=self.config.retrieval.default_trust, semantic_weight=p.semantic_weight,
                dates=p.dates,
            )
            timings["pack"] = (time.perf_counter() - t0) * 1000
            kept_rows = [i.id for i in packed.items if i.layer in ("graph", "vectors")]
            if kept_rows:
                self._access.record(kept_rows, now_ms(), agent_wallet=Scope.coerce(scope).agent_wallet)
        timings["total"] = (time.perf_counter() - t_start) * 1000
        sc = Scope.coerce(scope)
        return PreTurnResult(
            prompt=packed.prompt, items=packed.items, totals=found.totals, omitted=packed.omitted,
            context_usage=packed.context_usage, decisions=packed.decisions if explain else None,
            degradations=list(notes), lanes=found.lanes, timings_ms=_rounded(timings),
            context_id="ctx_" + content_hash(f"{sc.cache_key()}|{query}|{now_ms()}"),
        )

    # ------------------------------------------------------------------ items
    def get_item(self, scope: ScopeLike, memory_id: str, *, filters: Mapping[str, Any] | None = None) -> MemoryRecord:
        """An active memory row visible in ``scope`` (thread ignored); raises :class:`NotFoundError`."""
        scope = Scope.coerce(scope)
        memory_id = check_id(memory_id)
        query = MemoryQuery(scope=scope, filters=self.merge_filters(scope, filters))
        record = self.store.get_memory(memory_id, query)
        if record is None:
            raise NotFoundError(f"memory {memory_id!r} does not exist in this scope (or was deleted or superseded)")
        return record

    def list_items(
        self, scope: ScopeLike, *, filters: Mapping[str, Any] | None = None, sources: Sequence[str] | None = None,
        limit: int = 50,
    ) -> list[MemoryRecord]:
        """Active memory rows of the scope, newest first."""
        scope = Scope.coerce(scope)
        query = MemoryQuery(scope=scope, filters=self.merge_filters(scope, filters),
                            sources=tuple(sources) if sources else None)
        return self.store.list_memories(query, limit)

    def update_item(
        self, scope: ScopeLike, memory_id: str, *, content: str | None = None,
        metadata: Mapping[str, Any] | None = None, confidence: float | None = None,
        status: str | None = None,
    ) -> MemoryRecord:
        """Change a row: new content is re-embedded (and its fact hash recomputed); metadata is
        merged; ``status`` is one of active, superseded, archived."""
        memory_id = check_id(memory_id)
        if content is not None:
            content = self._text(content, "content")
        current = self.get_item(scope, memory_id)
        changes: dict[str, Any] = {"updated_at": now_ms()}
        meta = {**current.metadata, **self._metadata(metadata)}
        if status is not None:
            if status not in ("active", "superseded", "archived"):
                raise InvalidInputError(f"status must be active, superseded or archived, got {status!r}")
            meta["status"] = status
        if confidence is not None:
            if isinstance(confidence, bool) or not isinstance(confidence, (int, float)) or not 0 <= confidence <= 1:
                raise InvalidInputError(f"confidence must be a number between 0 and 1, got {confidence!r}")
            meta["confidence"] = float(confidence)
        if content is not None:
            text = as_str(content)
            if text is None:
                raise InvalidInputError("content must be a non-empty string")
            if text != current.content:
                vectors = self._embed_documents([text])
                changes["content"] = text
                changes["embedding"] = vectors[0] if vectors else None
                changes["embedding_model"] = self.model_id if vectors else None
                if current.source == "fact":
                    meta["factHash"] = self.fact_hash(Scope.coerce(scope), text)
        changes["metadata"] = self._metadata(meta)
        updated = self.store.update_memory(memory_id, changes, agent_wallet=current.agent_wallet)
        if updated is None:
            raise NotFoundError(f"memory {memory_id!r} disappeared during the update")
        # the rows that followed it were indexed with its text while it was active
        self._rebuild_thread_contexts([(current, current.content if _active(current) else None,
                                        updated.content if _active(updated) else None)])
        self.invalidate(scope_of(current), scope_of(updated))
        return updated

    def delete_item(self, scope: ScopeLike, memory_id: str, *, hard: bool = False) -> bool:
        """Soft delete (``status: deleted``, ``decayScore: 0``, kept for history) or hard delete."""
        current = self.get_item(scope, memory_id)
        if hard:
            removed = self.store.delete_memory(memory_id, agent_wallet=current.agent_wallet)
        else:
            meta = {**current.metadata, "status": "deleted", "deletedAt": now_ms()}
            removed = self.store.update_memory(
                memory_id, {"metadata": meta, "decay_score": 0.0, "updated_at": now_ms()},
                agent_wallet=current.agent_wallet,
            ) is not None
        if removed and _active(current):
            self._rebuild_thread_contexts([(current, current.content, None)])  # its words leave the rows after it
        self.invalidate(scope_of(current))
        return removed

    def delete_items(self, scope: ScopeLike, memory_ids: Sequence[str], *, hard: bool = False) -> int:
        """:meth:`delete_item` for several rows of ``scope`` (each must be visible in it); the
        thread contexts of the rows after them are rebuilt once per thread. Returns how many went."""
        if isinstance(memory_ids, str):
            raise InvalidInputError("memory_ids must be a list of ids, not one string (delete_item deletes one row)")
        current = [self.get_item(scope, check_id(i)) for i in dict.fromkeys(memory_ids)]
        if not current:
            return 0
        agent = Scope.coerce(scope).agent_wallet  # every row was found in this scope: they are its agent's
        if hard:
            removed = self.store.delete_memories([r.id for r in current], agent_wallet=agent)
        else:
            at = now_ms()
            removed = self.store.update_memories([
                (r.id, {"metadata": {**r.metadata, "status": "deleted", "deletedAt": at}, "decay_score": 0.0,
                        "updated_at": at})
                for r in current
            ], agent_wallet=agent)
        self._rebuild_thread_contexts([(r, r.content, None) for r in current])
        self.invalidate(*(scope_of(r) for r in current))
        return removed

    def resolve_conflict(
        self, scope: ScopeLike, memory_id: str, resolution: str, *, winning_memory_id: str | None = None,
        reason: str | None = None,
    ) -> MemoryRecord:
        """Record how a conflict about an active row was resolved; returns the row after it.

        ``resolution``: ``supersede`` (the row becomes superseded, its decayScore capped at
        0.05, and it leaves retrieval), ``keep``, ``merge`` or ``ignore`` (the row stays
        active). ``winning_memory_id``, when given, must be another active row of the scope.
        The metadata gets ``conflictResolution``, ``conflictResolvedAt`` and, when given,
        ``winningMemoryId`` (also ``supersededBy``) and ``conflictReason``.
        """
        memory_id = check_id(memory_id)
        if winning_memory_id is not None:
            winning_memory_id = check_id(winning_memory_id, "winning_memory_id")
        reason = check_optional_text(reason, "reason", max_chars=self.config.max_text_chars)
        if not isinstance(resolution, str) or resolution not in ("supersede", "keep", "merge", "ignore"):
            raise InvalidInputError(f"resolution must be supersede, keep, merge or ignore, got {resolution!r}")
        current = self.get_item(scope, memory_id)
        if winning_memory_id is not None:
            if winning_memory_id == memory_id:
                raise InvalidInputError("winning_memory_id must name another row than memory_id")
            self.get_item(scope, winning_memory_id)  # raises NotFoundError when it is not an active row here
        now = now_ms()
        meta: dict[str, Any] = {**current.metadata, "conflictResolution": resolution, "conflictResolvedAt": now}
        if winning_memory_id is not None:
            meta["winningMemoryId"] = winning_memory_id
        if reason:
            meta["conflictReason"] = reason
        changes: dict[str, Any] = {"updated_at": now}
        if resolution == "supersede":
            meta.update({"status": "superseded", "supersededAt": now})
            if winning_memory_id is not None:
                meta["supersededBy"] = winning_memory_id
            changes["decay_score"] = min(current.decay_score, 0.05)
        changes["metadata"] = meta
        updated = self.store.update_memory(memory_id, changes, agent_wallet=current.agent_wallet)
        if updated is None:
            raise NotFoundError(f"memory {memory_id!r} disappeared while resolving the conflict")
        if not _active(updated):
            self._rebuild_thread_contexts([(current, current.content, None)])  # it left its thread's active rows
        self.invalidate(scope_of(current))
        return updated

    # ------------------------------------------------------------------ threads
    def _owned_thread_rows(self, scope: Scope) -> tuple[Transcript | None, Session | None]:
        sid = scope.thread_session_id()
        transcript = self.store.get_transcript(sid, scope.agent_wallet)
        session = self.store.get_session(sid, scope.agent_wallet)
        return (transcript if transcript is not None and owns(scope, transcript) else None,
                session if session is not None and owns(scope, session) else None)

    def thread_messages(self, scope: ScopeLike) -> list[Message]:
        """The messages of the scope's thread, oldest first: its transcript (scene layer), or,
        when a cleanup removed it, what the working buffer still holds."""
        scope = Scope.coerce(scope)
        if scope.thread_id is None:
            raise ScopeError("thread_messages needs a thread: set Scope(thread_id=...)")
        transcript, session = self._owned_thread_rows(scope)
        if transcript is not None:
            return list(transcript.messages)
        if session is None:
            return []
        out: list[Message] = []
        for i, line in enumerate(session.working_memory.context):
            role, sep, text = line.partition(": ")
            if sep and role in ("user", "assistant", "system"):
                out.append(Message(role=role, content=text, timestamp=session.created_at + i))  # type: ignore[arg-type]
        return out

    def forget(self, scope: ScopeLike) -> ForgetReport:
        """Erase everything ``scope`` owns (its agent, user, mode and HAI; every thread): memory
        rows of every layer, transcripts, working sessions, patterns and archives of the scope,
        its rows inside the agent's shared archives, their full-text and vector index entries and
        the cached results that could show them. Queued background work is finished first, so
        nothing of the scope is written after the erasure. Safe to run again after a failure
        part-way (it removes what is left) and a no-op on an erased scope. A user-less scope
        erases the agent's shared rows, never users' rows. Returns a :class:`ForgetReport`."""
        scope = Scope.coerce(scope)
        self.flush()
        params = core.ForgetParams(agent_wallet=scope.agent_wallet, user_address=scope.user_address, mode=scope.mode,
                                   hai_id=scope.hai_id)
        changes = ChangedScopes()
        try:
            report = core.forget(job_store(self), params, changes=changes)
        finally:
            invalidate_changes(self.query_cache, changes)
        return ForgetReport(memories=report["memories"], transcripts=report["transcripts"],
                            sessions=report["sessions"], patterns=report["patterns"], archives=report["archives"],
                            turns=report.get("turns", 0),
                            archives_rewritten=report["archivesRewritten"],
                            archived_rows_removed=report["archivedRowsRemoved"],
                            pinned_copies=report["pinnedCopies"])

    def check_conversation_scope(self, scope: ScopeLike, what: str = "post_turn") -> Scope:
        """``scope`` as a Scope when it may record a conversation (turns, working memory): it
        names a user, or the engine is single-tenant (``MemoryConfig.single_tenant``). Otherwise
        :class:`ScopeError`: a user-less turn is stored agent-wide and every user would read it."""
        scope = Scope.coerce(scope)
        if scope.user_address is None and not self.config.single_tenant:
            raise ScopeError(
                f"{what} needs user_address: a conversation recorded without a user is stored agent-wide and every "
                "user of the agent would read it. Pass Scope(..., user_address='...') (an anonymous visitor gets "
                "an id of its own), or build the engine with MemoryConfig(single_tenant=True) when it serves one "
                "person. Knowledge meant for every user is written with remember() or ingest() in a scope "
                "without a user."
            )
        return scope

    def clear_thread(self, scope: ScopeLike) -> None:
        """Empty the thread's transcript and working buffer. Durable memories (graph, vectors,
        patterns, archives) stay: they belong to the agent, not to the thread."""
        scope = Scope.coerce(scope)
        if scope.thread_id is None:
            raise ScopeError("clear_thread needs a thread: set Scope(thread_id=...)")
        transcript, session = self._owned_thread_rows(scope)
        if transcript is not None:
            self.store.upsert_transcript(transcript.model_copy(update={"messages": [], "summary": None,
                                                                       "token_count": 0}))
        if session is not None:
            wm = session.working_memory
            fresh = WorkingMemory(entities=dict(wm.entities), state=dict(wm.state))
            self.store.upsert_session(session.model_copy(update={"working_memory": fresh}))
        self.invalidate(scope)

    def agent_artifact(self, scope: ScopeLike, kind: str, artifact_id: str) -> Any:
        """An archive, pattern or skill of the scope's agent; :class:`NotFoundError` when it does
        not exist or belongs to another agent."""
        scope = Scope.coerce(scope)
        getters = {"archive": self.store.get_archive, "pattern": self.store.get_pattern, "skill": self.store.get_skill}
        if kind not in getters:
            raise InvalidInputError(f"kind must be archive, pattern or skill, got {kind!r}")
        found = getters[kind](artifact_id) if isinstance(artifact_id, str) and artifact_id else None
        owners = {getattr(found, "agent_wallet", None), *(getattr(found, "agents", None) or [])}
        if found is None or scope.agent_wallet not in owners:
            raise NotFoundError(f"{kind} {artifact_id!r} does not exist for this agent")
        return found

    # ------------------------------------------------------------------ what the scoped surface asks the engine
    # (ScopedMemory reaches the store and the query cache only through these)
    def merge_filters(self, scope: Scope, filters: Mapping[str, Any] | None) -> dict[str, FilterValue]:
        """The scope's filters AND ``filters`` (normalized); :class:`InvalidInputError` when the call
        contradicts the scope (filters narrow a scope and cannot override it)."""
        given = normalize_filters(filters)
        for path, value in given.items():
            if path in scope.filters and scope.filters[path] != value and _plain(value) and _plain(scope.filters[path]):
                raise InvalidInputError(f"filter {path!r} is given both in the scope and in the call, with different values")
        merged = conjoin(scope.filters, given)
        for path, attr in _SCOPE_FILTER_KEYS.items():
            if path in merged:
                scope_value = getattr(scope, attr)
                value = merged[path]
                if scope_value is not None and value != scope_value:
                    raise InvalidInputError(
                        f"filter {path}={value!r} conflicts with the scope's {attr}={scope_value!r}; "
                        "filters narrow a scope and cannot override it"
                    )
        return merged

    def invalidate(self, *scopes: Scope) -> None:
        """Tell the query cache that rows visible in these scopes changed."""
        if self.query_cache is not None:
            for s in dict.fromkeys(scopes):
                self.query_cache.invalidate(s)

    def vector_hits(self, scope: Scope, vector: Sequence[float], limit: int, *,
                    filters: Mapping[str, Any] | None = None, sources: Sequence[str] | None = None) -> list[Hit]:
        """The store's nearest rows to ``vector`` (of this engine's model) visible in ``scope``,
        at most ``limit``: no threshold, trust filter, decay or fusion (see ``ScopedMemory.similar``).
        :class:`ConfigurationError` on a keyword-only engine."""
        if self.model_id is None:
            raise ConfigurationError("a similarity search needs an engine with an embedder (this one is keyword-only)")
        q = MemoryQuery(scope=scope, filters=self.merge_filters(scope, filters),
                        sources=tuple(sources) if sources else None)
        hits, _ = self.store.vector_search(q, list(vector), self.model_id, limit)
        return hits

    def keyword_hits(self, scope: Scope, text: str, limit: int, *, filters: Mapping[str, Any] | None = None,
                     sources: Sequence[str] | None = None) -> list[Hit]:
        """The store's full-text hits for ``text`` visible in ``scope``, at most ``limit``, best
        first: no trust filter, decay or fusion (see ``ScopedMemory.keyword``)."""
        q = MemoryQuery(scope=scope, filters=self.merge_filters(scope, filters),
                        sources=tuple(sources) if sources else None)
        return self.store.keyword_search(q, text, limit)

    def find_patterns(self, scope: Scope, limit: int) -> list[Pattern]:
        """Patterns the store finds for ``scope``'s agent, at most ``limit`` (callers check visibility)."""
        return self.store.find_patterns(MemoryQuery(scope=scope), limit)

    def get_job(self, job_id: str) -> Job | None:
        """A maintenance job record by id, or None (callers check its agent and owner)."""
        return self.store.get_job(job_id)

    def thread_session(self, scope: Scope) -> Session | None:
        """The stored working session of ``scope``'s thread, whoever owns it (callers check), or None."""
        return self.store.get_session(scope.thread_session_id(), scope.agent_wallet)

    def put_session(self, session: Session) -> None:
        """Write a working session as given (callers check ownership and invalidate the cache)."""
        self.store.upsert_session(session)

    def maintenance_store(self) -> Store:
        """The store the maintenance jobs and schedules act on when given this engine
        (:func:`manowar_memory.jobs.run_job`, the schedules, the Temporal activities)."""
        return self.store

    @property
    def store_name(self) -> str:
        """The store's kind (``sqlite``, ``mongodb``...), as the servers announce it."""
        return self.store.name

    def check_store(self) -> None:
        """Read one (missing) row, so a store that cannot answer raises here (the readiness probe)."""
        self.store.get_memory("readyz-probe", agent_wallet="readyz-probe")  # by the index, never a scan

    def scoped(self, scope: ScopeLike, *, trust: str | None = None, require_thread: bool = False,
               agent_jobs: bool = False, allow_pin: bool = False) -> ScopedMemory:
        """This engine bound to one scope: the surface plugins, servers and tools use
        (ownership, trust, wrapper and cache invalidation; see :class:`ScopedMemory`).
        ``agent_jobs`` lets an agent-level scope run maintenance over every row of the agent;
        ``allow_pin`` lets archives be published to IPFS. Both are the application's choice."""
        return ScopedMemory(self, scope, require_thread=require_thread,  # mypy checks self against EngineCore
                            trust=trust,  # type: ignore[arg-type]  # ScopedMemory refuses an unknown level
                            agent_jobs=agent_jobs, allow_pin=allow_pin)

    def notes(self, project: Any = None, *, agent: str | None = None, user: str | None = None) -> ProjectNotes:
        """Project notes for coding agents on this engine (:class:`manowar_memory.notes.ProjectNotes`):
        ``project`` is a directory or a ``ProjectIdentity`` (default: the working directory's project)."""
        return ProjectNotes(self, project=project, agent=agent or DEFAULT_AGENT, user=user)

    def warm_up(self) -> bool:
        """Load the embedder now (model files, ONNX session) and embed one text, so the first
        call does not wait for it; the servers call this at startup. A model that cannot load
        raises here (:class:`EmbeddingError`, :class:`MissingDependencyError`). False when the
        engine is keyword-only."""
        if self.embedder is None:
            return False
        load = getattr(self.embedder.inner, "load", None)
        if callable(load):
            load()
        self.embedder.inner.embed(["warm up"], input_type="query")
        return True

    def reembed(self, agent_wallet: str | None = None, *, owner: ScopeLike | None = None,
                batch_size: int = 64, progress: bool = False, dry_run: bool = False) -> ReembedReport:
        """Give a vector of this engine's model to every active row that has none: rows written
        keyword-only or embedded by another model (vectors of different models never mix). Rows
        are embedded ``batch_size`` at a time and each batch is written at once, so a run that
        stops keeps what it wrote and running it again continues (rows this model embedded are
        skipped). ``agent_wallet``: only that agent (default: every row of the store);
        ``owner``: only the rows this scope owns (its agent, user, mode and HAI). ``progress``
        shows a tqdm bar. Raises :class:`ConfigurationError` on a keyword-only engine and
        :class:`EmbeddingError` when the embedder fails (saying how far it got)."""
        if self.embedder is None:
            raise ConfigurationError(
                f"reembed needs an embedder and this engine is keyword-only ({self.keyword_only_note}); name one "
                "(MemoryEngine(embedder='onnx'), `manowar reembed --embedder onnx`)")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise InvalidInputError(f"batch_size must be a positive integer (rows embedded per batch), got {batch_size!r}")
        wallet = agent_wallet
        owned: Owner | None = None
        if owner is not None:
            sc = Scope.coerce(owner)
            if wallet is not None and wallet != sc.agent_wallet:
                raise InvalidInputError(f"owner belongs to agent {sc.agent_wallet!r}, not {wallet!r}: pass one agent")
            wallet = sc.agent_wallet
            owned = Owner(user_address=sc.user_address, mode=sc.mode, hai_id=sc.hai_id)
        params = ReembedParams(agent_wallet=wallet, owner=owned, batch_size=batch_size)
        store = job_store(self)
        embedder = self.embedder.inner  # bulk document vectors would only crowd the query cache
        changes = ChangedScopes()
        bar = None
        if progress:
            from tqdm import tqdm

            bar = tqdm(total=count_reembed(store, params, embedder.model_id), unit="row",
                       desc=f"reembed {embedder.model_id}{' (dry run)' if dry_run else ''}")

        def tick(rows: int) -> None:
            if bar is not None:
                bar.update(rows)

        try:
            report = reembed(store, params, embedder=embedder, dry_run=dry_run, changes=changes, progress=tick)
        finally:
            invalidate_changes(self.query_cache, changes)
            if bar is not None:
                bar.close()
        return ReembedReport(model_id=report["modelId"], scanned=report["scanned"], embedded=report["embedded"],
                             already_embedded=report["alreadyEmbedded"], skipped_inactive=report["skippedInactive"],
                             batches=report["batches"], dry_run=dry_run)

    def stats(self, agent_wallet: str | None = None) -> dict[str, Any]:
        """Counts and ages of what is stored (optionally for one agent)."""
        return self.store.stats(agent_wallet)

    def close(self) -> None:
        """Finish background work and release the store."""
        self.flush()
        self.threads.shutdown(wait=True)
        self._access.flush()  # bumps of calls that raced close(), on this thread
        self.store.close()

    def __enter__(self) -> MemoryEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ async twins
    # Same arguments and results as the method they wrap, run in a worker thread (_twins.async_twin).
    aforget = async_twin(forget)
    """Async twin of :meth:`forget`: the same arguments and result, run in a worker thread."""
    aremember = async_twin(remember)
    """Async twin of :meth:`remember`: the same arguments and result, run in a worker thread."""
    apost_turn = async_twin(post_turn)
    """Async twin of :meth:`post_turn`: the same arguments and result, run in a worker thread."""
    apre_turn = async_twin(pre_turn)
    """Async twin of :meth:`pre_turn`: the same arguments and result, run in a worker thread."""
    asearch_layers = async_twin(search_layers)
    """Async twin of :meth:`search_layers`: the same arguments and result, run in a worker thread."""
    asearch = async_twin(search)
    """Async twin of :meth:`search`: the same arguments and result, run in a worker thread."""
    aingest = async_twin(ingest)
    """Async twin of :meth:`ingest`: the same arguments and result, run in a worker thread."""
    aget_item = async_twin(get_item)
    """Async twin of :meth:`get_item`: the same arguments and result, run in a worker thread."""
    aupdate_item = async_twin(update_item)
    """Async twin of :meth:`update_item`: the same arguments and result, run in a worker thread."""
    adelete_item = async_twin(delete_item)
    """Async twin of :meth:`delete_item`: the same arguments and result, run in a worker thread."""
    adelete_items = async_twin(delete_items)
    """Async twin of :meth:`delete_items`: the same arguments and result, run in a worker thread."""
    aresolve_conflict = async_twin(resolve_conflict)
    """Async twin of :meth:`resolve_conflict`: the same arguments and result, run in a worker thread."""
    aflush = async_twin(flush)
    """Async twin of :meth:`flush`: the same arguments and result, run in a worker thread."""


def _unexpired(layers: dict[str, list[Candidate]]) -> dict[str, list[Candidate]]:
    """Cached layer results without the memories that expired since they were cached."""
    now = now_ms()
    return {layer: [c for c in found if not is_expired(c.metadata, now)] for layer, found in layers.items()}


def _client_stamped(messages: object, tool_calls: object) -> bool:
    """Whether the caller gave every message and tool call its own timestamp."""
    def stamped(m: object) -> bool:
        if isinstance(m, Message):
            return "timestamp" in m.model_fields_set
        return isinstance(m, Mapping) and m.get("timestamp") is not None

    items = [*(messages if isinstance(messages, Sequence) else []), *(tool_calls or [])]  # type: ignore[misc]
    return bool(items) and all(stamped(m) for m in items)


def _outcome(future: concurrent.futures.Future[LayerHits]) -> tuple[LayerHits | None, BaseException | None]:
    exc = future.exception()
    return (None, exc) if exc is not None else (future.result(), None)


def _timed_layer(name: str, searcher: LayerSearcher, req: LayerRequest) -> LayerHits:
    """Run one layer's search; its wall time goes into the hits' ``timings_ms`` under ``name``."""
    t0 = time.perf_counter()
    hits = searcher(req)
    hits.timings_ms[name] = (time.perf_counter() - t0) * 1000
    return hits


def _rounded(timings: Mapping[str, float]) -> dict[str, float]:
    return {k: round(v, 3) for k, v in timings.items()}

