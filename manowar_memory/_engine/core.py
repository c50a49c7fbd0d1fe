"""The engine's state (built by ``__init__``) and the helpers every part shares."""

from __future__ import annotations

import bisect
import concurrent.futures
import dataclasses
import itertools
import logging
import os
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .._access import AccessBumps
from .._util import content_hash, now_ms
from ..cache.base import Cache, InMemoryCache
from ..cache.namespace import QueryCache, scope_of
from ..candidates import Candidate
from ..config import MemoryConfig
from ..embeddings import AUTO, CachedEmbedder, EmbedderSpec, choose_embedder
from ..errors import ConfigurationError, InvalidInputError, ScopeError
from ..expiry import EXPIRES_AT, check_expires_at_value, default_ttl_seconds, is_expired, resolve_expiry, ttl_to_ms
from ..extraction import FactExtractor, RuleBasedExtractor
from ..filters import FilterValue, Group, Ops, conjoin, normalize_filters
from ..layers import LayerHits, LayerRequest, LayerSearcher
from ..ranking.trust import content_delimiter
from ..records import MemoryRecord, Message
from ..redaction import install_log_redaction, redact
from ..rerankers import resolve_reranker
from ..rerankers.base import Reranker
from ..resolver import FactResolver
from ..retrieval.pipeline import StageInsert
from ..scope import Scope, ScopeLike
from ..stores.base import INACTIVE_STATUSES, MemoryQuery, Store, missing_role_methods
from ..stores.sqlite import SQLiteStore
from ..threads import EngineThreads, blas_threads
from ..validation import check_metadata, check_optional_text, check_text, check_timestamp
from .results import FlushResult, IngestItem

log = logging.getLogger("manowar_memory")


install_log_redaction(log)  # no credential reaches a log line


NO_EMBEDDER = "vector lane disabled: no embedder configured"


def _plain(value: FilterValue) -> bool:
    """An equality or a "one of" list (no operators, no group)."""
    return not isinstance(value, (Ops, Group))


_SCOPE_FILTER_KEYS = {"agentWallet": "agent_wallet", "userAddress": "user_address", "threadId": "thread_id",
                      "mode": "mode", "haiId": "hai_id"}


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
            from ..stores.mongo import MongoStore
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


class EngineBase:
    """The engine's state (built by ``__init__``) and the helpers every part shares."""

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

    def _submit(self, fn: Any, *args: Any) -> None:
        future = self.threads.background.submit(fn, *args)
        with self._pending_lock:
            self._pending.append(future)

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
