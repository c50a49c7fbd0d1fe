"""The scoped surface: an engine bound to one scope, the only way plugins, servers and tools
read and write memory.

:meth:`MemoryEngine.scoped` returns a :class:`ScopedMemory`. It owns the rules every
adapter would otherwise have to repeat (and did, differently):

* **Ownership.** A scope writes, updates and deletes only rows it owns: same agent, user,
  mode and HAI (:func:`owns`). Reads follow the engine's visibility rules (:func:`visible`):
  a user scope also sees the agent's shared (user-less) rows, but a write through it never
  touches them; a keyed write (:meth:`ScopedMemory.upsert`) shadows a shared row with the
  scope's own copy instead.
* **Trust.** ``trust`` and the other reserved metadata keys (:data:`RESERVED_METADATA_KEYS`)
  are set by the application only, through ``ScopedMemory(trust=...)``; metadata that a
  model, a document or a node supplies may not carry them (:class:`InvalidInputError`). A
  row whose text is rewritten through the surface takes the surface's trust level.
* **The untrusted-content wrapper** is on every packed context (:meth:`ScopedMemory.pack`,
  :func:`pack_context`), as ``pre_turn`` packs it.
* **Cache invalidation**: every write goes through an engine method that tells the query
  cache exactly which scopes changed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace as replace_fields
from typing import TYPE_CHECKING, Any

from ._scoped.core import DEFAULT_K as DEFAULT_K
from ._scoped.core import DOC_KEY as DOC_KEY
from ._scoped.core import DOCUMENT_BUDGET_CHARS as DOCUMENT_BUDGET_CHARS
from ._scoped.core import DOCUMENT_LABEL_KEYS as DOCUMENT_LABEL_KEYS
from ._scoped.core import RESERVED_METADATA_KEYS as RESERVED_METADATA_KEYS
from ._scoped.core import EngineCore as EngineCore
from ._scoped.core import ScopedCore, _positive
from ._scoped.core import SearchHits as SearchHits
from ._scoped.core import TrustLevel as TrustLevel
from ._scoped.core import chat_role as chat_role
from ._scoped.core import check_metadata as check_metadata
from ._scoped.core import document_label as document_label
from ._scoped.core import new_key as new_key
from ._scoped.core import pack_context as pack_context
from ._scoped.core import shortfall as shortfall
from ._scoped.jobs import ScopedJobs
from ._scoped.threads import ScopedThreads
from ._twins import Steps, async_twin, run_steps, steps_twin
from .candidates import Candidate
from .errors import ConfigurationError, InvalidInputError, NotFoundError, ScopeError
from .notes import ProjectNotes
from .packing import PackResult
from .ranking.trust import trust_level
from .records import MemoryRecord
from .results import PreTurnResult, RememberResult
from .scope import Scope, owns, visible

if TYPE_CHECKING:
    import builtins

__all__ = [
    "DEFAULT_K",
    "DOCUMENT_BUDGET_CHARS",
    "DOCUMENT_LABEL_KEYS",
    "DOC_KEY",
    "RESERVED_METADATA_KEYS",
    "EngineCore",
    "ScopedMemory",
    "SearchHits",
    "chat_role",
    "check_metadata",
    "document_label",
    "owns",
    "pack_context",
    "shortfall",
    "visible",
]


class ScopedMemory(ScopedThreads, ScopedJobs):
    """A :class:`MemoryEngine` bound to one :class:`Scope`; build it with ``engine.scoped(scope)``.

    ``trust``: the trust level of what this surface writes (``None`` leaves it to the
    engine's default, ``learned``). ``require_thread``: fail now, not at the first write,
    when the scope has no thread. ``max_scan`` bounds the rows read to find owned or keyed rows.

    Maintenance jobs, archives and pins act on the rows this scope owns. ``agent_jobs``: an
    agent-level scope (no user) runs them over every row of the agent, its schedules included
    (the application's opt-in; a user scope always acts on its own rows only). ``allow_pin``:
    archives may be published to IPFS (``pin``), which no model-facing surface does unless the
    application says so.
    """

    def with_thread(self, thread_id: str | None) -> ScopedMemory:
        """The same surface on another thread of the scope."""
        return ScopedMemory(self._engine, self._scope.with_thread(thread_id), trust=self._trust,
                            max_scan=self._max_scan, agent_jobs=self._agent_jobs, allow_pin=self._allow_pin)

    def for_user(self, user_id: Any = None, *, per_call_user: bool = False, from_run: bool = False) -> ScopedMemory:
        """This surface for one call that may name its user (an adapter's per-call ``user_id``).

        A user-bound surface serves only its own user: naming another raises
        :class:`ScopeError` (a model or a call cannot redirect it). An agent-level surface
        (no user) serves the named user's scope of the same agent only when the application
        built the adapter for it (``per_call_user=True``); then a call must name its user.
        ``from_run``: the id is the run's ambient user (a framework's run config), which an
        agent-level surface without ``per_call_user`` ignores (it keeps reading shared rows)
        instead of refusing. Blank or non-string ids raise :class:`ScopeError`; no id keeps
        this surface."""
        if from_run and user_id is not None and not per_call_user and self._scope.user_address is None:
            return self
        if user_id is None:
            if per_call_user and self._scope.user_address is None:
                raise ScopeError("this serves many users (per_call_user=True) and the call names none: pass its "
                                 "user_id")
            return self
        if not isinstance(user_id, str) or not user_id.strip():
            raise ScopeError(f"user_id must be a non-blank string, got {user_id!r}")
        bound = self._scope.user_address
        if bound is not None:
            if user_id != bound:
                raise ScopeError(f"this is bound to user {bound!r}; a call cannot act for user {user_id!r}")
            return self
        if not per_call_user:
            raise ScopeError("this is bound to the agent's shared memories (no user); the application lets a call "
                             "choose the user with per_call_user=True")
        return ScopedMemory(self._engine, replace_fields(self._scope, user_address=user_id), trust=self._trust,
                            max_scan=self._max_scan)

    # ---------------------------------------------------------------- reads
    def search(self, query: str, *, k: int = DEFAULT_K, layers: Sequence[str] = ("graph", "vectors"),
               filters: Mapping[str, Any] | None = None, decay: bool = True, rerank: bool = False,
               mmr: bool = False) -> SearchHits:
        """Ranked memories visible in the scope (see :meth:`MemoryEngine.search`)."""
        cands, notes = self._engine.search(query, self._scope, layers=layers, k=k, filters=filters, decay=decay,
                                           rerank=rerank, mmr=mmr)
        return SearchHits(cands, list(notes))

    def context(self, /, query: str, **kwargs: Any) -> PreTurnResult:
        """The packed, wrapped memory context of a turn (:meth:`MemoryEngine.pre_turn`)."""
        return self._engine.pre_turn(query, self._scope, **kwargs)

    def pack(self, query: str, candidates: Sequence[Candidate] | Mapping[str, Sequence[Candidate]], *,
             max_items: int | None = None, max_item_chars: int | None = None, budget_chars: int | None = None,
             mmr: bool = False) -> PackResult:
        """Pack any candidates (from this engine or another retriever) into a wrapped prompt
        block, with the engine's packer settings as defaults."""
        p = self._engine.config.packer
        return pack_context(
            query, candidates, scope=self._scope, max_items=p.max_items if max_items is None else max_items,
            max_item_chars=p.max_item_chars if max_item_chars is None else max_item_chars,
            budget_chars=p.budget_chars if budget_chars is None else budget_chars, header=p.header,
            mmr_lambda=self._engine.config.retrieval.mmr_lambda if mmr else None,
            default_trust=self.default_trust, semantic_weight=p.semantic_weight, dates=p.dates,
        )

    def list(self, *, filters: Mapping[str, Any] | None = None, sources: Sequence[str] | None = None,
             limit: int = 50) -> builtins.list[MemoryRecord]:
        """Active rows visible in the scope, newest first."""
        return self._engine.list_items(self._scope, filters=filters, sources=sources, limit=_positive(limit, "limit"))

    def owned(self, *, filters: Mapping[str, Any] | None = None, sources: Sequence[str] | None = None,
              limit: int | None = None) -> builtins.list[MemoryRecord]:
        """Active rows this scope owns (not the agent's shared ones), newest first."""
        rows = self._engine.list_items(self._scope, filters=filters, sources=sources, limit=self._max_scan)
        mine = [r for r in rows if owns(self._scope, r)]
        return mine[: _positive(limit, "limit")] if limit is not None else mine

    def similar(self, query: str | None, *, k: int = DEFAULT_K, filters: Mapping[str, Any] | None = None,
                sources: Sequence[str] | None = None,
                vector: Sequence[float] | None = None) -> builtins.list[tuple[MemoryRecord, float]]:
        """Plain nearest-neighbour read for vector-store adapters: the ``k`` visible rows whose
        embedding is closest to the query's, best first, each with its cosine similarity.

        Unlike :meth:`search` there is no keyword lane, similarity threshold, decay or fusion:
        this is the contract a framework's vector store has (top k by similarity, no score
        cut-off). The engine's trust filter (``retrieval.include_trust``) still applies.
        ``vector``: search with this query vector instead of embedding ``query`` (a framework
        that only has the vector); it must come from the engine's model (a vector of another
        size raises :class:`~manowar_memory.StoreError`). Raises :class:`ConfigurationError`
        on a keyword-only engine."""
        import math

        engine = self._engine
        text = query.strip() if isinstance(query, str) else ""
        if not text and vector is None:
            raise InvalidInputError("query must be a non-empty string (or pass vector=)")
        k = _positive(k, "k")
        if engine.embedder is None or engine.model_id is None:
            raise ConfigurationError("a similarity search needs an engine with an embedder (this one is keyword-only)")
        if vector is not None:
            if isinstance(vector, (str, bytes)) or not all(
                    isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in vector):
                raise InvalidInputError("vector must be a sequence of finite numbers")
            if not len(vector):
                raise InvalidInputError("vector is empty")
            vector = [float(x) for x in vector]
        else:
            vector = engine.embedder.embed([text], input_type="query")[0]
        hits = engine.vector_hits(self._scope, vector, k * 2, filters=filters,  # room for trust-filtered rows
                                  sources=sources)
        allowed = set(engine.config.retrieval.include_trust)
        out = [(h.record, 2.0 * h.score - 1.0) for h in hits
               if trust_level(h.record.metadata, self.default_trust) in allowed]
        out.sort(key=lambda pair: pair[1], reverse=True)
        return out[:k]

    def keyword(self, query: str, *, k: int = DEFAULT_K, filters: Mapping[str, Any] | None = None,
                sources: Sequence[str] | None = None) -> builtins.list[tuple[MemoryRecord, float]]:
        """Plain full-text read, the keyword twin of :meth:`similar`: the ``k`` visible rows the
        store's keyword index ranks first for ``query`` (an OR of its content terms), best first,
        each with its raw BM25 score (higher is better; only the order is comparable across
        stores). No vector lane, fusion or decay; the engine's trust filter applies."""
        engine = self._engine
        text = query.strip() if isinstance(query, str) else ""
        if not text:
            raise InvalidInputError("query must be a non-empty string")
        k = _positive(k, "k")
        allowed = set(engine.config.retrieval.include_trust)
        hits = engine.keyword_hits(self._scope, text, k * 2, filters=filters, sources=sources)  # room for trust-filtered rows
        return [(h.record, h.score) for h in hits if trust_level(h.record.metadata, self.default_trust) in allowed][:k]

    # ---------------------------------------------------------------- keyed rows
    def get_keys(self, keys: Sequence[str], *, filters: Mapping[str, Any] | None = None) -> dict[str, MemoryRecord]:
        """The row of each key visible here: this scope's own copy first, else a shared one."""
        wanted = [str(k) for k in keys]
        out: dict[str, MemoryRecord] = {}
        for key in dict.fromkeys(wanted):
            rows = self._engine.list_items(self._scope, filters={**(filters or {}), f"metadata.{DOC_KEY}": key},
                                           limit=20)
            rows.sort(key=lambda r: not owns(self._scope, r))
            if rows:
                out[key] = rows[0]
        return out

    def upsert(self, items: Iterable[Mapping[str, Any]], *, source: str = "knowledge",
               key_filters: Mapping[str, Any] | None = None, ttl: Any = None,
               expires_at: Any = None) -> builtins.list[str]:
        """Write keyed rows: ``{"key", "content", "metadata"?, "context"?, "ttl"?, "expires_at"?}``
        each. The row this scope owns under that key is replaced; a shared row under the same key
        is shadowed by a new own copy, never changed. ``ttl``/``expires_at`` (an item's own
        first) make rows expire (see :meth:`MemoryEngine.ingest`). Returns the keys in order."""
        return run_steps(self._upsert_steps(items, source=source, key_filters=key_filters, ttl=ttl,
                                            expires_at=expires_at))

    def _upsert_steps(self, items: Iterable[Mapping[str, Any]], *, source: str = "knowledge",
                      key_filters: Mapping[str, Any] | None = None, ttl: Any = None,
                      expires_at: Any = None) -> Steps[builtins.list[str]]:
        """:meth:`upsert` as steps (:mod:`manowar_memory._twins`): one body for ``upsert`` and ``aupsert``."""
        batch: builtins.list[tuple[str, dict[str, Any]]] = []
        for i, item in enumerate(items):
            if not isinstance(item, Mapping):
                raise InvalidInputError(f"item {i} must be a mapping with 'key' and 'content'")
            key = item.get("key")
            if not isinstance(key, str) or not key:
                raise InvalidInputError(f"item {i} needs a non-empty string 'key'")
            batch.append((key, dict(item)))
        last = dict(batch)  # the last write of a key wins
        self.delete_keys(list(last), filters=key_filters)
        rows = []
        for key, item in last.items():
            meta = self._write_meta(item.get("metadata"))
            meta[DOC_KEY] = key
            rows.append({"content": item.get("content"), "source": source, "metadata": meta,
                         "context": item.get("context"), "ttl": item.get("ttl"), "expires_at": item.get("expires_at")})
        if rows:
            yield from self._engine.ingest_steps(self._scope, rows, ttl=ttl, expires_at=expires_at)
        return [key for key, _ in batch]

    def ingest(self, items: Iterable[Mapping[str, Any]], *, ttl: Any = None,
               expires_at: Any = None) -> builtins.list[str]:
        """Write rows keyed by an idempotency key: ``{"key", "content", "metadata"?, "context"?,
        "source"?, "ttl"?, "expires_at"?}`` each. A key this scope already stored is left as it is
        (see :meth:`MemoryEngine.ingest`); returns the row ids, :meth:`ingest_id` of each key."""
        return run_steps(self._ingest_steps(items, ttl=ttl, expires_at=expires_at))

    def _ingest_steps(self, items: Iterable[Mapping[str, Any]], *, ttl: Any = None,
                      expires_at: Any = None) -> Steps[builtins.list[str]]:
        """:meth:`ingest` as steps (:mod:`manowar_memory._twins`): one body for ``ingest`` and ``aingest``."""
        rows = []
        for i, item in enumerate(items):
            if not isinstance(item, Mapping):
                raise InvalidInputError(f"item {i} must be a mapping with 'key' and 'content'")
            rows.append({**item, "metadata": self._write_meta(item.get("metadata"), what=f"items[{i}].metadata")})
        if not rows:
            return []
        report = yield from self._engine.ingest_steps(self._scope, rows, ttl=ttl, expires_at=expires_at)
        return report.ids

    def ingest_id(self, key: str) -> str:
        """The row id of the keyed row ``key`` of this scope (written by :meth:`ingest`)."""
        return self._engine.ingest_id(self._scope, key)

    def delete_keys(self, keys: Sequence[str], *, filters: Mapping[str, Any] | None = None) -> int:
        """Remove this scope's own rows under these keys (shared rows stay); how many went."""
        rows = [row.id for key in dict.fromkeys(str(k) for k in keys)
                for row in self.owned(filters={**(filters or {}), f"metadata.{DOC_KEY}": key})]
        return self._engine.delete_items(self._scope, rows, hard=True) if rows else 0

    # ---------------------------------------------------------------- writes
    def remember(self, content: str, *, fact_type: str | None = None, confidence: float | None = None,
                 importance: float | None = None, retention: str | None = None,
                 metadata: Mapping[str, Any] | None = None, ttl: Any = None,
                 expires_at: Any = None) -> RememberResult:
        """Store a durable fact in the graph layer (deduplicated within the scope); ``ttl``
        (seconds or a timedelta) or ``expires_at`` make it expire (see :meth:`MemoryEngine.remember`)."""
        return run_steps(self.remember_steps(content, fact_type=fact_type, confidence=confidence,
                                             importance=importance, retention=retention, metadata=metadata, ttl=ttl,
                                             expires_at=expires_at))

    def remember_steps(self, content: str, *, fact_type: str | None = None, confidence: float | None = None,
                       importance: float | None = None, retention: str | None = None,
                       metadata: Mapping[str, Any] | None = None, ttl: Any = None,
                       expires_at: Any = None) -> Steps[RememberResult]:
        """:meth:`remember` as a step generator (:mod:`manowar_memory._twins`): it yields each call
        to the fact resolver and returns the :class:`RememberResult`. One body for ``remember``,
        ``aremember`` and a caller written once for both paths (the ``memory_remember`` tool)."""
        return (yield from self._engine.remember_steps(
            self._scope, content, fact_type=fact_type, confidence=confidence, importance=importance,
            retention=retention, metadata=self._write_meta(metadata), ttl=ttl, expires_at=expires_at))

    def check_can_record(self) -> Scope:
        """The scope a turn of this surface would be recorded in, or :class:`ScopeError` now when
        :meth:`post_turn` would refuse it (no thread, or no user on a multi-tenant engine): an
        adapter calls this before the model runs, so no answer is lost to a refused write."""
        return self._engine.check_conversation_scope(self._require_thread())

    def _owned_row(self, memory_id: str) -> MemoryRecord:
        row = self.get(memory_id)
        if not owns(self._scope, row):
            raise NotFoundError(
                f"memory {memory_id!r} is not one of this scope's own rows: it is shared by the agent or belongs "
                "to another scope, so it can be read here but not changed"
            )
        return row

    def update(self, memory_id: str, *, content: str | None = None, metadata: Mapping[str, Any] | None = None,
               confidence: float | None = None, status: str | None = None) -> MemoryRecord:
        """Change one of the scope's own rows. New text takes this surface's trust level."""
        current = self._owned_row(memory_id)
        meta = check_metadata(metadata)
        if content is not None and content != current.content:
            if self._trust is not None:
                meta["trust"] = self._trust
            elif any(k in current.metadata for k in ("trust", "trustLevel", "trust_level", "taintLevel")):
                meta["trust"] = self.default_trust
        return self._engine.update_item(self._scope, current.id, content=content, metadata=meta or None,
                                        confidence=confidence, status=status)

    def delete(self, memory_id: str, *, hard: bool = False) -> bool:
        """Delete one of the scope's own rows (soft by default: kept as history)."""
        current = self._owned_row(memory_id)
        return self._engine.delete_item(self._scope, current.id, hard=hard)

    def delete_owned(self, *, filters: Mapping[str, Any] | None = None, hard: bool = True) -> int:
        """Delete every row this scope owns that matches ``filters``; how many went."""
        rows = self.owned(filters=filters)
        return self._engine.delete_items(self._scope, [r.id for r in rows], hard=hard) if rows else 0

    def resolve_conflict(self, memory_id: str, resolution: str, *, winning_memory_id: str | None = None,
                         reason: str | None = None) -> MemoryRecord:
        """Resolve a conflict about one of the scope's own rows."""
        current = self._owned_row(memory_id)
        return self._engine.resolve_conflict(self._scope, current.id, resolution,
                                             winning_memory_id=winning_memory_id, reason=reason)

    def clear_thread(self) -> None:
        """Empty the thread's transcript and working buffer (durable memories stay)."""
        self._engine.clear_thread(self._require_thread())

    def forget(self) -> Any:
        """Erase everything this scope owns (see :meth:`MemoryEngine.forget`); the
        :class:`~manowar_memory.engine.ForgetReport`."""
        return self._engine.forget(self._scope)

    def flush(self, timeout: float | None = None) -> Any:
        """Wait for queued background work (fact extraction)."""
        return self._engine.flush(timeout)

    def notes(self, project: Any = None) -> ProjectNotes:
        """This scope's agent and user's project notes (:class:`manowar_memory.notes.ProjectNotes`);
        ``project``: a directory or ``ProjectIdentity`` (default: the working directory's project)."""
        return ProjectNotes(self._engine, project=project, agent=self._scope.agent_wallet,
                            user=self._scope.user_address)

    def invalidate(self) -> None:
        """Tell the engine's query cache that rows visible in this scope changed (the surface's
        own writes do this already)."""
        self._engine.invalidate(self._scope)

    def __repr__(self) -> str:
        return f"ScopedMemory(scope={self._scope.as_dict()!r}, trust={self._trust!r})"

    # ------------------------------------------------------------------ async twins
    # Same arguments and results as the method they wrap, run in a worker thread (_twins.async_twin);
    # the writes that may ask the fact resolver (aremember, aingest, aupsert, and aadd beside add in
    # _scoped/core.py) are their step bodies run by _twins.steps_twin: the store work in worker
    # threads, an async resolver awaited on the event loop.
    aforget = async_twin(forget)

    """Async twin of :meth:`forget`: the same arguments and result, run in a worker thread."""

    asearch = async_twin(search)

    """Async twin of :meth:`search`: the same arguments and result, run in a worker thread."""

    acontext = async_twin(context)

    """Async twin of :meth:`context`: the same arguments and result, run in a worker thread."""

    aget = async_twin(ScopedCore.get)

    """Async twin of :meth:`get`: the same arguments and result, run in a worker thread."""

    alist = async_twin(list)  # noqa: A003 - the method list, defined above

    """Async twin of :meth:`list`: the same arguments and result, run in a worker thread."""

    amessages = async_twin(ScopedCore.messages)

    """Async twin of :meth:`messages`: the same arguments and result, run in a worker thread."""

    asimilar = async_twin(similar)

    """Async twin of :meth:`similar`: the same arguments and result, run in a worker thread."""

    aget_keys = async_twin(get_keys)

    """Async twin of :meth:`get_keys`: the same arguments and result, run in a worker thread."""

    aupsert = steps_twin(_upsert_steps, name="upsert")

    """Async twin of :meth:`upsert`: the same arguments and result; the store work runs in worker
    threads and an async fact resolver (a ``source="fact"`` write) is awaited on the event loop."""

    aingest = steps_twin(_ingest_steps, name="ingest")

    """Async twin of :meth:`ingest`: the same arguments and result; the store work runs in worker
    threads and an async fact resolver (items of ``source="fact"``) is awaited on the event loop."""

    adelete_keys = async_twin(delete_keys)

    """Async twin of :meth:`delete_keys`: the same arguments and result, run in a worker thread."""

    aremember = steps_twin(remember_steps, name="remember")

    """Async twin of :meth:`remember`: the same arguments and result; the store work runs in worker
    threads and an async fact resolver (:class:`~manowar_memory.resolver.AsyncFactResolver`, such as
    ``LLMResolver(achat=...)``) is awaited on the event loop."""

    apost_turn = async_twin(ScopedCore.post_turn)

    """Async twin of :meth:`post_turn`: the same arguments and result, run in a worker thread (the
    fact resolver runs in the background extraction, not in the call)."""

    aupdate = async_twin(update)

    """Async twin of :meth:`update`: the same arguments and result, run in a worker thread."""

    adelete = async_twin(delete)

    """Async twin of :meth:`delete`: the same arguments and result, run in a worker thread."""

    adelete_owned = async_twin(delete_owned)

    """Async twin of :meth:`delete_owned`: the same arguments and result, run in a worker thread."""

    aclear_thread = async_twin(clear_thread)

    """Async twin of :meth:`clear_thread`: the same arguments and result, run in a worker thread."""

    aflush = async_twin(flush)

    """Async twin of :meth:`flush`: the same arguments and result, run in a worker thread."""
