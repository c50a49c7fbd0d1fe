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

import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from dataclasses import replace as replace_fields
from typing import TYPE_CHECKING, Any, Literal, Protocol

from . import validation
from ._twins import async_twin
from ._util import collapse_ws, now_ms, truncate
from .candidates import Candidate
from .config import MemoryConfig
from .errors import ConfigurationError, InvalidInputError, NotFoundError, ScopeError
from .jobs import core
from .jobs._store import ChangedScopes, job_store
from .jobs.pinning import ArchivePinParams, archive_pin
from .jobs.runner import invalidate_changes, query_cache_of, run_job
from .jobs.schedules import InlineSchedules, MaintenanceSchedule, ScheduleNotFoundError, schedule_table
from .notes import ProjectNotes
from .packing import PackResult, pack
from .ranking.trust import TRUST_LEVELS, content_delimiter, trust_level
from .records import MemoryRecord, Message, Pattern, Session, WorkingMemory
from .results import ForgetReport, PostTurnResult, PreTurnResult, RememberResult
from .scope import Scope, ScopeLike, owns, visible
from .stores.base import Hit, Store

if TYPE_CHECKING:
    import builtins

    from .jobs.schedules import InlineSchedules, ScheduleInfo
    from .records import Job, Skill

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

#: Metadata keys the engine reads as controls (trust, status, pinning, supersession, dedupe).
#: Only the application sets them, through explicit engine arguments.
RESERVED_METADATA_KEYS: frozenset[str] = frozenset({
    "trust", "trustLevel", "trust_level", "taintLevel", "status", "factHash", "pinned", "supersededBy",
    "supersededAt", "deletedAt", "winningMemoryId", "conflictResolution", "conflictResolvedAt", "conflictReason",
    "decayScore", "duplicateFingerprint", "docKey", "expiresAt", "forgottenAt", "forgottenReason",
    "sourceMemoryId", "outdated", "outdatedAt", "outdatedBy",
})
#: The metadata key of a keyed row's identity (a LangChain document id, a LlamaIndex node id, a LangGraph key).
DOC_KEY = "docKey"

TrustLevel = Literal["system", "learned", "external"]
#: How many memories a retriever returns when the caller does not say (LangChain's ``k`` default),
#: the same in every adapter.
DEFAULT_K = 4

_ROLES = {"user": "user", "human": "user", "assistant": "assistant", "ai": "assistant", "model": "assistant",
          "chatbot": "assistant", "system": "system", "developer": "system", "tool": "tool", "function": "tool"}


def chat_role(role: Any) -> str:
    """A framework's chat role as the engine's (user, assistant, system, tool), one rule for every
    adapter: ``human``/``ai``/``developer``/``function`` and the like map over; anything else is
    refused with :class:`InvalidInputError` rather than guessed or skipped."""
    key = str(getattr(role, "value", role)).strip().lower()
    if key not in _ROLES:
        raise InvalidInputError(
            f"unknown chat role {role!r}; use one of {sorted(_ROLES)} (map custom roles before recording them)"
        )
    return _ROLES[key]


def shortfall(k: int, *, found: int, kept: int, threshold: float | None = None,
              what: str = "memories") -> str | None:
    """Why a read that asked for ``k`` results returns ``kept`` (None when ``kept >= k``), one
    wording for every adapter: the search found only ``found`` (the scope, the filters and the
    search's own relevance cut-offs leave no more), and/or ``found - kept`` fell below the
    caller's ``threshold``."""
    if kept >= k:
        return None
    parts = []
    if found < k:
        parts.append(f"the search found {found} {what} for this query in the scope (after the filters and the "
                     "search's relevance cut-offs)")
    if found > kept:
        parts.append(f"{found - kept} scored below score_threshold={threshold}")
    return f"{kept} of k={k}: " + "; ".join(parts)


def check_metadata(metadata: Mapping[str, Any] | None, *, what: str = "metadata") -> dict[str, Any]:
    """A plain-JSON copy of caller-supplied metadata; raises :class:`InvalidInputError` if it is
    not JSON data the engine stores (the engine's own check, :func:`manowar_memory.validation.check_metadata`)
    or if it sets a reserved key (trust, status, ...)."""
    if metadata is None:
        return {}
    metadata = validation.check_metadata(metadata, what, max_chars=None)
    reserved = sorted(k for k in metadata if k in RESERVED_METADATA_KEYS)
    if reserved:
        raise InvalidInputError(
            f"{what} may not set the reserved key(s) {reserved}: the engine reads them as controls. Rename them "
            "(for example 'doc_status'); the application sets trust with engine.scoped(scope, trust=...)"
        )
    return dict(metadata)


#: The default character budget of a packer stage over another retriever's documents (RAG):
#: about 1 000 tokens; documents are not cut one by one, the budget decides.
DOCUMENT_BUDGET_CHARS = 4000

#: Metadata keys naming a document's source, in the order :func:`document_label` reads them.
DOCUMENT_LABEL_KEYS: tuple[str, ...] = ("source", "file_name", "file_path", "title", "url")


def document_label(metadata: Mapping[str, Any] | None) -> str | None:
    """A retrieved document's own source label: the first non-blank string among
    :data:`DOCUMENT_LABEL_KEYS` of its metadata (None when it names none). One rule for every
    adapter's compressor or postprocessor."""
    if not isinstance(metadata, Mapping):
        return None
    for key in DOCUMENT_LABEL_KEYS:
        value = metadata.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return None


def pack_context(
    query: str,
    candidates: Sequence[Candidate] | Mapping[str, Sequence[Candidate]],
    *,
    scope: Scope | None = None,
    max_items: int = 6,
    max_item_chars: int | None = 120,
    budget_chars: int = 900,
    header: str = "Memory context:",
    mmr_lambda: float | None = None,
    default_trust: str = "learned",
    semantic_weight: float = 0.45,
    foreign: bool = False,
    dates: bool = False,
    keep_order: bool = False,
) -> PackResult:
    """Pack candidates into a prompt block, always inside the untrusted-content wrapper for
    content below ``system`` trust (as ``pre_turn`` packs). With a ``scope`` the delimiter is
    stable for that scope and thread in this process; without one it is random per call.

    ``foreign=True``: the candidates come from another retriever (documents, nodes), so their
    metadata is not the engine's. Each item is labelled with the trust its metadata states
    when that is no higher than ``default_trust`` (an ``external`` row stays ``external``), and
    with ``default_trust`` otherwise: a document cannot claim ``system``; each line is tagged
    with the document's own source (:func:`document_label`), inside the wrapper with its text.
    ``dates`` tags each line with the day its memory was observed (when the candidate has a
    time). ``max_item_chars=None`` cuts no item on its own (the budget decides) and
    ``keep_order`` keeps the candidates' order, filling the budget in it (see
    :func:`manowar_memory.packing.pack`): what a RAG stage after another retriever wants."""
    if isinstance(candidates, Mapping):
        by_layer = {k: list(v) for k, v in candidates.items()}
    else:
        by_layer = {}
        for cand in candidates:
            by_layer.setdefault(cand.layer, []).append(cand)
    key = None
    if scope is not None:
        key = "\x1f".join(str(v) for v in (scope.agent_wallet, scope.user_address, scope.mode, scope.hai_id,
                                          scope.thread_id))
    try:
        return pack(query, by_layer, max_items=max_items, max_item_chars=max_item_chars, budget_chars=budget_chars,
                    header=header, mmr_lambda=mmr_lambda, untrusted_delimiter=content_delimiter(key),
                    default_trust=default_trust, semantic_weight=semantic_weight,
                    trust_ceiling=default_trust if foreign else None, dates=dates, keep_order=keep_order,
                    label=(lambda c: document_label(c.metadata)) if foreign else None)
    except ValueError as exc:
        raise InvalidInputError(str(exc)) from exc


@dataclass
class SearchHits:
    """Ranked memories of a search and what degraded while finding them."""

    candidates: list[Candidate]
    degradations: list[str] = field(default_factory=list)

    def __iter__(self) -> Any:
        return iter(self.candidates)

    def __len__(self) -> int:
        return len(self.candidates)


class EngineCore(Protocol):
    """What the scoped surface uses of the engine it is bound to (:class:`~manowar_memory.engine.MemoryEngine`
    implements it and hands itself over in :meth:`MemoryEngine.scoped`). The surface sits below the
    engine's module and reads the engine through this interface only, so neither imports the other
    in a circle. Its members keep the engine's names and signatures."""

    @property
    def store(self) -> Store: ...
    @property
    def config(self) -> MemoryConfig: ...
    @property
    def embedder(self) -> Any: ...
    @property
    def reranker(self) -> Any: ...
    @property
    def extractor(self) -> Any: ...
    @property
    def model_id(self) -> str | None: ...

    def search(self, query: str, scope: ScopeLike, *, layers: Sequence[str] = ..., k: int = ...,
               filters: Mapping[str, Any] | None = ..., decay: bool = ..., rerank: bool = ...,
               mmr: bool = ...) -> tuple[list[Candidate], list[str]]: ...
    def pre_turn(self, query: str, scope: ScopeLike, layers: Sequence[str] | None = ..., *,
                 filters: Mapping[str, Any] | None = ..., limit: int | None = ..., max_items: int | None = ...,
                 max_item_chars: int | None = ..., budget_chars: int | None = ..., rerank: bool = ...,
                 mmr: bool = ..., explain: bool = ...) -> PreTurnResult: ...
    def post_turn(self, scope: ScopeLike, messages: Sequence[Mapping[str, Any] | Message],
                  tool_calls: Sequence[Mapping[str, Any]] | None = ..., *, session_id: str | None = ...,
                  turn_id: str | None = ..., summary: str | None = ..., metadata: Mapping[str, Any] | None = ...,
                  extract_facts: bool = ...) -> PostTurnResult: ...
    def remember(self, scope: ScopeLike, content: str, *, fact_type: str | None = ..., confidence: float | None = ...,
                 importance: float | None = ..., retention: str | None = ...,
                 metadata: Mapping[str, Any] | None = ..., created_at: int | None = ..., ttl: Any = ...,
                 expires_at: Any = ...) -> RememberResult: ...
    def ingest(self, scope: ScopeLike, items: Iterable[Mapping[str, Any]], *, batch_size: int = ...,
               progress: bool = ..., dedupe: bool = ..., ttl: Any = ..., expires_at: Any = ...) -> list[str]: ...
    def ingest_id(self, scope: ScopeLike, key: str) -> str: ...
    def get_item(self, scope: ScopeLike, memory_id: str, *,
                 filters: Mapping[str, Any] | None = ...) -> MemoryRecord: ...
    def list_items(self, scope: ScopeLike, *, filters: Mapping[str, Any] | None = ...,
                   sources: Sequence[str] | None = ..., limit: int = ...) -> list[MemoryRecord]: ...
    def update_item(self, scope: ScopeLike, memory_id: str, *, content: str | None = ...,
                    metadata: Mapping[str, Any] | None = ..., confidence: float | None = ...,
                    status: str | None = ...) -> MemoryRecord: ...
    def delete_item(self, scope: ScopeLike, memory_id: str, *, hard: bool = ...) -> bool: ...
    def delete_items(self, scope: ScopeLike, memory_ids: Sequence[str], *, hard: bool = ...) -> int: ...
    def resolve_conflict(self, scope: ScopeLike, memory_id: str, resolution: str, *,
                         winning_memory_id: str | None = ..., reason: str | None = ...) -> MemoryRecord: ...
    def thread_messages(self, scope: ScopeLike) -> list[Message]: ...
    def check_conversation_scope(self, scope: ScopeLike, what: str = ...) -> Scope: ...
    def clear_thread(self, scope: ScopeLike) -> None: ...
    def forget(self, scope: ScopeLike) -> ForgetReport: ...
    def flush(self, timeout: float | None = ...) -> Any: ...
    def reembed(self, agent_wallet: str | None = ..., *, owner: ScopeLike | None = ..., batch_size: int = ...,
                progress: bool = ..., dry_run: bool = ...) -> Any: ...
    def agent_artifact(self, scope: ScopeLike, kind: str, artifact_id: str) -> Any: ...
    def scoped(self, scope: ScopeLike, *, trust: str | None = ..., require_thread: bool = ...,
               agent_jobs: bool = ..., allow_pin: bool = ...) -> ScopedMemory: ...
    def merge_filters(self, scope: Scope, filters: Mapping[str, Any] | None) -> dict[str, Any]: ...
    def invalidate(self, *scopes: Scope) -> None: ...
    def vector_hits(self, scope: Scope, vector: Sequence[float], limit: int, *,
                    filters: Mapping[str, Any] | None = ..., sources: Sequence[str] | None = ...) -> list[Hit]: ...
    def keyword_hits(self, scope: Scope, text: str, limit: int, *, filters: Mapping[str, Any] | None = ...,
                     sources: Sequence[str] | None = ...) -> list[Hit]: ...
    def find_patterns(self, scope: Scope, limit: int) -> list[Pattern]: ...
    def get_job(self, job_id: str) -> Job | None: ...
    def thread_session(self, scope: Scope) -> Session | None: ...
    def put_session(self, session: Session) -> None: ...
    def maintenance_store(self) -> Store: ...


class ScopedMemory:
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

    def __init__(self, engine: EngineCore, scope: ScopeLike, *, trust: TrustLevel | None = None,
                 require_thread: bool = False, max_scan: int = 10_000, agent_jobs: bool = False,
                 allow_pin: bool = False) -> None:
        self._engine = engine
        self._scope = Scope.coerce(scope)
        self._agent_jobs = bool(agent_jobs)
        self._allow_pin = bool(allow_pin)
        if trust is not None and trust not in TRUST_LEVELS:
            raise ConfigurationError(f"trust must be one of {list(TRUST_LEVELS)} or None, got {trust!r}")
        self._trust: TrustLevel | None = trust
        if require_thread and self._scope.thread_id is None:
            raise ScopeError("this needs a thread: pass Scope(..., thread_id='...') (for example the session id)")
        if not isinstance(max_scan, int) or isinstance(max_scan, bool) or max_scan < 1:
            raise ConfigurationError(f"max_scan must be a positive integer, got {max_scan!r}")
        self._max_scan = max_scan

    # ---------------------------------------------------------------- identity
    @property
    def scope(self) -> Scope:
        """The scope every call acts in."""
        return self._scope

    @property
    def trust(self) -> str | None:
        """The trust level of rows written here (None: the engine's default)."""
        return self._trust

    @property
    def model_id(self) -> str | None:
        """The engine's vector space (None when keyword-only)."""
        return self._engine.model_id

    @property
    def embedder(self) -> Any:
        """The engine's embedder (None when keyword-only), for adapters that expose it as their
        framework's embeddings object (a vector store's ``embeddings``, MMR over fetched rows)."""
        return self._engine.embedder

    @property
    def reranker(self) -> Any:
        """The engine's reranker (None when none is configured), for adapters whose rerank
        stage runs on another framework's results (a node postprocessor, a compressor)."""
        return self._engine.reranker

    @property
    def config(self) -> Any:
        """The engine's configuration (read it, do not change it): the defaults of an
        adapter's ranking and packing stages."""
        return self._engine.config

    @property
    def default_trust(self) -> str:
        """The trust level the engine gives rows that do not say."""
        return self._engine.config.retrieval.default_trust

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

    def owns(self, record: Any) -> bool:
        """Whether this scope may write ``record``."""
        return owns(self._scope, record)

    def _require_thread(self) -> Scope:
        if self._scope.thread_id is None:
            raise ScopeError("this needs a thread: pass Scope(..., thread_id='...') (for example the session id)")
        return self._scope

    def _write_meta(self, metadata: Mapping[str, Any] | None, *, what: str = "metadata") -> dict[str, Any]:
        meta = check_metadata(metadata, what=what)
        if self._trust is not None:
            meta["trust"] = self._trust
        return meta

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

    def get(self, memory_id: str) -> MemoryRecord:
        """A row visible in the scope; :class:`NotFoundError` otherwise."""
        return self._engine.get_item(self._scope, _require_id(memory_id))

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

    def messages(self) -> builtins.list[Message]:
        """The thread's messages, oldest first: its transcript, or what the working buffer
        still holds when the transcript is gone."""
        return self._engine.thread_messages(self._require_thread())

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
            self._engine.ingest(self._scope, rows, ttl=ttl, expires_at=expires_at)
        return [key for key, _ in batch]

    def ingest(self, items: Iterable[Mapping[str, Any]], *, ttl: Any = None,
               expires_at: Any = None) -> builtins.list[str]:
        """Write rows keyed by an idempotency key: ``{"key", "content", "metadata"?, "context"?,
        "source"?, "ttl"?, "expires_at"?}`` each. A key this scope already stored is left as it is
        (see :meth:`MemoryEngine.ingest`); returns the row ids, :meth:`ingest_id` of each key."""
        rows = []
        for i, item in enumerate(items):
            if not isinstance(item, Mapping):
                raise InvalidInputError(f"item {i} must be a mapping with 'key' and 'content'")
            rows.append({**item, "metadata": self._write_meta(item.get("metadata"), what=f"items[{i}].metadata")})
        return self._engine.ingest(self._scope, rows, ttl=ttl, expires_at=expires_at) if rows else []

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
        return self._engine.remember(self._scope, content, fact_type=fact_type, confidence=confidence,
                                     importance=importance, retention=retention, metadata=self._write_meta(metadata),
                                     ttl=ttl, expires_at=expires_at)

    def add(self, texts: Sequence[str], *, metadatas: Sequence[Mapping[str, Any] | None] | None = None,
            source: str = "knowledge", ttl: Any = None, expires_at: Any = None) -> builtins.list[str]:
        """Add unkeyed rows (vectors layer); returns the new row ids. ``ttl`` (seconds or a
        timedelta) or ``expires_at`` make them expire (see :meth:`MemoryEngine.ingest`)."""
        if isinstance(texts, str):
            raise InvalidInputError("texts must be a list of strings, not one string")
        texts = list(texts)
        metas = list(metadatas) if metadatas is not None else [None] * len(texts)
        if len(metas) != len(texts):
            raise InvalidInputError(f"got {len(texts)} texts but {len(metas)} metadatas")
        rows = [{"content": t, "source": source, "metadata": self._write_meta(m, what=f"metadatas[{i}]")}
                for i, (t, m) in enumerate(zip(texts, metas, strict=True))]
        return self._engine.ingest(self._scope, rows, ttl=ttl, expires_at=expires_at) if rows else []

    def check_can_record(self) -> Scope:
        """The scope a turn of this surface would be recorded in, or :class:`ScopeError` now when
        :meth:`post_turn` would refuse it (no thread, or no user on a multi-tenant engine): an
        adapter calls this before the model runs, so no answer is lost to a refused write."""
        return self._engine.check_conversation_scope(self._require_thread())

    def post_turn(self, messages: Sequence[Mapping[str, Any] | Message], tool_calls: Sequence[Mapping[str, Any]] | None = None,
                  *, metadata: Mapping[str, Any] | None = None, extract_facts: bool = True,
                  turn_id: str | None = None) -> PostTurnResult:
        """Record a turn of the scope's thread (transcript, working buffer, session row, facts),
        once per ``turn_id`` (see :meth:`MemoryEngine.post_turn`)."""
        return self._engine.post_turn(self._require_thread(), messages, tool_calls,
                                      metadata=self._write_meta(metadata), extract_facts=extract_facts,
                                      turn_id=turn_id)

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

    def run_job(self, job_type: str, params: Mapping[str, Any] | None = None, *, dry_run: bool = False) -> Any:
        """Run a maintenance job on the rows this scope owns (on every row of its agent for an
        agent-level scope with ``agent_jobs``; never another agent's)."""
        return run_job(self._engine, job_type, self._job_params(job_type, params), dry_run=dry_run)

    def reembed(self, *, batch_size: int = 64, dry_run: bool = False) -> Any:
        """Give a vector of the engine's model to this scope's own rows that have none (every row
        of the agent for an agent-level scope with ``agent_jobs``); see :meth:`MemoryEngine.reembed`.
        Returns its :class:`~manowar_memory.engine.ReembedReport`."""
        return self._engine.reembed(self._scope.agent_wallet, owner=None if self.agent_wide_jobs else self._scope,
                                    batch_size=batch_size, dry_run=dry_run)

    @property
    def agent_wide_jobs(self) -> bool:
        """Whether jobs here act on every row of the agent (an agent-level scope the application
        opted in with ``agent_jobs``) rather than on this scope's own rows."""
        return self._agent_jobs and self._scope.user_address is None

    @property
    def allow_pin(self) -> bool:
        """Whether archives may be published to IPFS through this surface."""
        return self._allow_pin

    def _owner(self) -> dict[str, Any] | None:
        if self.agent_wide_jobs:
            return None
        s = self._scope
        return {"user_address": s.user_address, "mode": s.mode, "hai_id": s.hai_id}

    def _check_pin(self) -> None:
        if not self._allow_pin:
            raise InvalidInputError(
                "publishing archives to IPFS is off here: a public pin cannot be taken back. The application "
                "turns it on with engine.scoped(scope, allow_pin=True) (the servers' --allow-pin)")

    def _require_agent_jobs(self, what: str) -> None:
        if not self.agent_wide_jobs:
            raise ScopeError(
                f"{what} acts on every row of the agent: it needs an agent-level scope (no user) that the "
                "application opted in with engine.scoped(scope, agent_jobs=True) (the servers' --agent-jobs)")

    def artifact(self, kind: Literal["archive", "pattern", "skill"], artifact_id: str) -> Any:
        """An archive, pattern or skill of this scope's agent that this scope may see (an
        archive or pattern of another user is not); :class:`NotFoundError` otherwise."""
        found = self._engine.agent_artifact(self._scope, kind, artifact_id)
        if kind != "skill" and not visible(self._scope, found):
            raise NotFoundError(f"{kind} {artifact_id!r} does not exist for this agent")
        return found

    def _own_archive(self, archive_id: str) -> Any:
        """An archive this scope may restore or pin: its own, or any of the agent's for agent-wide jobs."""
        archive = self.artifact("archive", archive_id)
        # an archive of one scope names its owner; one without (agent-wide, or older) holds every user's rows
        if not self.agent_wide_jobs and (archive.metadata.get("owner") is None or not owns(self._scope, archive)):
            raise NotFoundError(
                f"archive {archive_id!r} is not one of this scope's own archives: it holds rows of the whole agent, "
                "so only the application restores or pins it (an agent-level scope with agent_jobs=True)")
        return archive

    def restore_archive(self, archive_id: str, *, dry_run: bool = False, restore_deleted: bool = False) -> dict[str, Any]:
        """Bring back this scope's rows of an archive that no longer hold their archived state.
        Rows that still exist (superseded and soft-deleted ones too) stay as they are; rows
        deleted or erased since the archive was made stay gone unless ``restore_deleted``, which
        only the application passes. Rows of other scopes are never restored. Returns the report
        ``{archiveId, restored, skippedExisting, skippedDeleted, entryCount}``."""
        archive = self._own_archive(archive_id)
        changes = ChangedScopes()
        owner = self._owner()
        params = core.ArchiveRestoreParams(archive_id=archive.archive_id, restore_deleted=restore_deleted,
                                           owner=core.Owner(**owner) if owner is not None else None)
        try:
            return core.archive_restore(job_store(self._engine), params, dry_run=dry_run, changes=changes)
        finally:
            invalidate_changes(query_cache_of(self._engine), changes)

    def pin_archive(self, archive_id: str, *, dry_run: bool = False) -> dict[str, Any]:
        """Pin one of this scope's archives to IPFS (needs ``allow_pin``); idempotent."""
        self._check_pin()
        archive = self._own_archive(archive_id)
        return archive_pin(job_store(self._engine), ArchivePinParams(archive_id=archive.archive_id), dry_run=dry_run,
                           changes=ChangedScopes())

    def notes(self, project: Any = None) -> ProjectNotes:
        """This scope's agent and user's project notes (:class:`manowar_memory.notes.ProjectNotes`);
        ``project``: a directory or ``ProjectIdentity`` (default: the working directory's project)."""
        return ProjectNotes(self._engine, project=project, agent=self._scope.agent_wallet,
                            user=self._scope.user_address)

    def patterns(self, *, limit: int = 20, pattern_type: str | None = None,
                 min_success_rate: float | None = None) -> builtins.list[Any]:
        """Patterns visible in the scope, best success rate first (optionally of one type and
        at least a success rate)."""
        limit = _positive(limit, "limit")
        rows = self._engine.find_patterns(self._scope, self._max_scan)
        rows = [p for p in rows if visible(self._scope, p)
                and (pattern_type is None or p.pattern_type == pattern_type)
                and (min_success_rate is None or p.success_rate >= min_success_rate)]
        return rows[:limit]

    def job(self, job_id: str) -> Any:
        """A maintenance job record of this scope (a job of another user, or an agent-wide job
        seen from a user scope, is not); :class:`NotFoundError` otherwise."""
        found = self._engine.get_job(job_id) if isinstance(job_id, str) and job_id else None
        if found is None or found.agent_wallet != self._scope.agent_wallet or not self._sees_job(found):
            raise NotFoundError(f"job {job_id!r} does not exist for this agent")
        return found

    def _sees_job(self, job: Any) -> bool:
        if self.agent_wide_jobs:
            return True
        owner = ((job.data or {}).get("input") or {}).get("owner")
        return owner == self._owner()

    # ---------------------------------------------------------------- patterns, skills and the cache
    def validate_pattern(self, pattern_id: str) -> dict[str, Any]:
        """Whether a pattern visible here may become a skill: ``{patternId, valid, confidence,
        occurrences, successRate, toolSequence}`` (:class:`NotFoundError` for a pattern of
        another agent or user)."""
        self.artifact("pattern", pattern_id)
        return core.validate_pattern(job_store(self._engine), pattern_id)

    def promote_pattern(self, pattern_id: str, skill_name: str) -> dict[str, Any]:
        """Validate a pattern visible here again and, when valid, make it the agent's skill
        ``skill_name`` (the same pattern and name twice returns the existing skill with
        ``promoted: False``); the cached queries it could change are invalidated."""
        self.artifact("pattern", pattern_id)
        changes = ChangedScopes()
        try:
            return core.promote_pattern(job_store(self._engine), pattern_id, skill_name, changes=changes)
        finally:
            invalidate_changes(query_cache_of(self._engine), changes)

    def skills(self, *, category: str | None = None, limit: int = 20) -> builtins.list[Skill]:
        """The skills of this scope's agent (shared by all its users), optionally of one
        ``category``, at most ``limit`` (capped at 100)."""
        return core.list_skills(job_store(self._engine), self._scope.agent_wallet, category, _positive(limit, "limit"))

    def invalidate(self) -> None:
        """Tell the engine's query cache that rows visible in this scope changed (the surface's
        own writes do this already)."""
        self._engine.invalidate(self._scope)

    # ---------------------------------------------------------------- threads: index, working buffer, compress
    def index_transcript(self, messages: Sequence[Mapping[str, Any] | Message], *,
                         metadata: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Store a whole conversation of the scope's thread and make each of its messages
        searchable: the transcript and working buffer as :meth:`post_turn` records them (no fact
        extraction), then one ``session`` row per user or assistant message (metadata
        ``sessionId``, ``role``, ``timestamp``, ``messageIndex`` plus ``metadata``). Nothing is
        written when no user or assistant message has text. Returns ``{indexed, messageCount,
        vectorCount}``."""
        scope = self._require_thread()
        msgs = [m if isinstance(m, Message) else Message.model_validate(
            {**m, "role": chat_role(m.get("role"))} if isinstance(m, Mapping) else m) for m in messages]
        spoken = [(i, m) for i, m in enumerate(msgs) if m.role in ("user", "assistant") and m.content.strip()]
        if not spoken:
            return {"indexed": False, "messageCount": len(msgs), "vectorCount": 0}
        extra = check_metadata(metadata)
        self.post_turn(msgs, metadata=extra, extract_facts=False)
        session_id = scope.thread_id
        metas = [{**extra, "sessionId": session_id, "role": m.role, "timestamp": m.timestamp, "messageIndex": i}
                 for i, m in spoken]
        ids = self.add([m.content for _, m in spoken], metadatas=metas, source="session")
        return {"indexed": True, "messageCount": len(msgs), "vectorCount": len(ids)}

    def _own_session(self) -> Any:
        scope = self._require_thread()
        session = self._engine.thread_session(scope)
        if session is not None and not owns(scope, session):
            raise NotFoundError("this thread's working session belongs to another user, mode or HAI of the agent")
        return session

    def working(self) -> Any:
        """The thread's working session (:class:`~manowar_memory.records.Session`: context lines,
        entities, state), or None when the thread has none."""
        return self._own_session()

    def update_working(self, *, context: Sequence[str] | None = None, entities: Mapping[str, Any] | None = None,
                       state: Mapping[str, Any] | None = None, metadata: Mapping[str, Any] | None = None,
                       replace: bool = False) -> Any:
        """Change the thread's working session (created when missing) and return it. By default
        ``context`` lines are appended (the buffer keeps the newest ``session_context_limit``)
        and ``entities``, ``state`` and ``metadata`` are merged key by key; ``replace`` sets all
        four to what is given (empty when omitted). The expiry is refreshed."""
        scope = self._engine.check_conversation_scope(self._require_thread(), "update_working")
        config = self._engine.config
        lines = [validation.check_text(line, f"context[{i}]", max_chars=config.max_text_chars)
                 for i, line in enumerate(context or [])]
        ents = validation.check_metadata(entities, "entities")
        st = validation.check_metadata(state, "state")
        meta = check_metadata(metadata)
        existing = self._own_session()
        now = now_ms()
        wm = existing.working_memory if existing is not None and not replace else WorkingMemory()
        old_meta = existing.metadata if existing is not None and not replace else {}
        session = Session(
            session_id=scope.thread_session_id(), **Session.scope_fields(scope),
            working_memory=WorkingMemory(context=(wm.context + lines)[-config.session_context_limit:],
                                         entities={**wm.entities, **ents}, state={**wm.state, **st}),
            metadata={**old_meta, **meta}, compressed=bool(existing.compressed) if existing is not None else False,
            created_at=existing.created_at if existing is not None else now,
            expires_at=now + config.session_ttl_ms, last_accessed_at=now)
        self._engine.put_session(session)
        self._engine.invalidate(scope)
        return session

    def compress_thread(self, *, max_chars: int = 1800) -> dict[str, Any]:
        """Summarise the thread into one ``archive`` row of this scope (so the scope's reads find
        it): an extractive summary of its latest user and assistant lines (no model call, at most
        ``max_chars``), with ``keyFacts`` the engine's fact extractor finds in the whole thread;
        the working session is marked compressed. :class:`NotFoundError` when the thread has no
        messages. Returns ``{sessionId, summary, keyFacts, archiveRowId, entitiesExtracted}``."""
        scope = self._require_thread()
        msgs = self.messages()
        if not msgs:
            raise NotFoundError(f"thread {scope.thread_id!r} has no messages in this scope")
        lines = [f"{m.role}: {collapse_ws(m.content)}" for m in msgs if m.role in ("user", "assistant")]
        picked: builtins.list[str] = []
        for line in reversed(lines):  # newest lines first, as many as fit
            if sum(len(x) + 1 for x in picked) + len(line) > max_chars:
                if not picked:
                    picked.append(truncate(line, max_chars))
                break
            picked.append(line)
        summary = "\n".join(reversed(picked)) or truncate(" ".join(m.content for m in msgs), max_chars)
        extractor = self._engine.extractor
        facts = list(dict.fromkeys(f.fact for f in extractor.extract(msgs))) if extractor is not None else []
        meta = {"sessionId": scope.thread_id, "type": "session_compression", "keyFacts": facts,
                "messageCount": len(msgs)}
        row_id = self.add([summary], metadatas=[meta], source="archive")[0]
        session = self._own_session()
        if session is not None and not session.compressed:
            self._engine.put_session(session.model_copy(update={"compressed": True}))
        return {"sessionId": scope.thread_id, "summary": summary, "keyFacts": facts, "archiveRowId": row_id,
                "entitiesExtracted": len(facts)}

    # ---------------------------------------------------------------- schedules of this agent (inline backend)
    def _schedules(self) -> InlineSchedules:
        return InlineSchedules(self._engine)

    def _is_mine(self, info: ScheduleInfo) -> bool:
        """A schedule acts for this agent only: its parameters name the agent (or a one-agent list)."""
        s = info.schedule
        agent = self._scope.agent_wallet
        return not s.all_agents and s.job_type != "cleanup" and (
            s.params.get("agent_wallet") == agent or s.params.get("agent_wallets") == [agent])

    def agent_schedules(self) -> builtins.list[ScheduleInfo]:
        """The inline maintenance schedules of this scope's agent
        (:class:`~manowar_memory.jobs.schedules.ScheduleInfo`), by id. Store-wide schedules
        (consolidation of every agent, decay of every agent, cleanup) are the application's."""
        return [i for i in self._schedules().list() if self._is_mine(i)]

    def agent_schedule(self, schedule_id: str) -> ScheduleInfo:
        """One schedule of this agent; :class:`NotFoundError` when missing or another's."""
        try:
            info = self._schedules().describe(schedule_id)
        except ScheduleNotFoundError:
            info = None
        if info is None or not self._is_mine(info):
            raise NotFoundError(f"schedule {schedule_id!r} does not exist for this agent")
        return info

    def create_agent_schedules(self, job_types: Sequence[str] | None = None) -> builtins.list[ScheduleInfo]:
        """Create (or replace, keeping a pause) this agent's schedules: daily consolidation
        (``memory-daily-consolidation:{agent}``), hourly decay (``memory-hourly-decay:{agent}``),
        daily pattern extraction and the weekly archive, with the crons and windows of
        :class:`~manowar_memory.jobs.schedules.ScheduleSettings`; ``job_types`` keeps only some."""
        self._require_agent_jobs("an agent schedule")
        agent = self._scope.agent_wallet
        table = []
        for s in schedule_table([agent]):
            if s.job_type == "cleanup":
                continue
            if s.all_agents or s.job_type == "decay_update":
                params = {**s.params, "agent_wallet": agent}
                s = MaintenanceSchedule.model_validate({**s.model_dump(), "schedule_id": f"{s.schedule_id}:{agent}",
                                                        "all_agents": False, "params": params,
                                                        "note": f"{s.job_type} of {agent}"})
            table.append(s)
        if job_types is not None:
            unknown = sorted(set(job_types) - {s.job_type for s in table})
            if unknown:
                raise InvalidInputError(f"no agent schedule for job type(s) {unknown}; use "
                                        f"{sorted({s.job_type for s in table})}")
            table = [s for s in table if s.job_type in set(job_types)]
        return self._schedules().install(table)

    def delete_agent_schedules(self) -> builtins.list[str]:
        """Delete every schedule of this agent; the ids deleted."""
        self._require_agent_jobs("an agent schedule")
        backend = self._schedules()
        return [i.schedule_id for i in self.agent_schedules() if backend.delete(i.schedule_id)]

    def pause_agent_schedule(self, schedule_id: str, note: str | None = None) -> ScheduleInfo:
        """Pause one of this agent's schedules (a run in progress finishes)."""
        self._require_agent_jobs("an agent schedule")
        self.agent_schedule(schedule_id)
        return self._schedules().pause(schedule_id, note)

    def resume_agent_schedule(self, schedule_id: str, note: str | None = None) -> ScheduleInfo:
        """Resume one of this agent's schedules from its next fire time."""
        self._require_agent_jobs("an agent schedule")
        self.agent_schedule(schedule_id)
        return self._schedules().resume(schedule_id, note)

    def trigger_agent_schedule(self, schedule_id: str) -> Job | None:
        """Run one of this agent's schedules now (inline, under its overlap policy): the job
        record, or None when a run of it is still going."""
        self._require_agent_jobs("an agent schedule")
        self.agent_schedule(schedule_id)
        return self._schedules().trigger(schedule_id)

    # ---------------------------------------------------------------- jobs on Temporal
    def _job_params(self, job_type: str, params: Mapping[str, Any] | None) -> dict[str, Any]:
        data = {**dict(params or {})}
        for key in ("agent_wallet", "agentWallet", "agent_wallets", "agentWallets"):
            if key in data and data[key] not in (None, self._scope.agent_wallet, [self._scope.agent_wallet]):
                raise InvalidInputError(f"{key} is bound to this scope's agent and cannot name another")
            data.pop(key, None)
        if job_type == "cleanup":
            raise InvalidInputError("cleanup acts on every agent of the store; run it from the application "
                                    "(manowar_memory.jobs.run_job), not through a scope")
        if job_type == "forget":
            raise InvalidInputError("forget erases a scope; the application calls engine.forget(scope) or "
                                    "ScopedMemory.forget(), never through a job of a scope")
        if "owner" in data:
            raise InvalidInputError("owner is bound to this scope and cannot be passed")
        if data.get("pin"):
            self._check_pin()
        data["agent_wallet"] = self._scope.agent_wallet
        data["owner"] = self._owner()
        return data

    async def astart_temporal_job(self, client: Any, job_type: str, params: Mapping[str, Any] | None = None, *,
                                  dry_run: bool = False, task_queue: str | None = None) -> Any:
        """Start a maintenance job of this scope's agent as a Temporal workflow (a worker,
        ``manowar worker``, runs it) and return its running record (``execution: "temporal"``)."""
        from .jobs.temporal import DEFAULT_TASK_QUEUE, start_temporal_job

        return await start_temporal_job(client, self._engine, job_type, self._job_params(job_type, params),
                                        dry_run=dry_run, task_queue=task_queue or DEFAULT_TASK_QUEUE)

    async def arefresh_job(self, client: Any, job: Any) -> Any:
        """A job record of this agent brought in line with its Temporal workflow (unchanged
        when it is inline or finished, or Temporal cannot be reached)."""
        from .jobs.temporal import refresh_temporal_job

        if job.agent_wallet != self._scope.agent_wallet:
            raise NotFoundError(f"job {job.job_id!r} does not exist for this agent")
        return await refresh_temporal_job(client, self._engine, job)

    def __repr__(self) -> str:
        return f"ScopedMemory(scope={self._scope.as_dict()!r}, trust={self._trust!r})"

    # ------------------------------------------------------------------ async twins
    # Same arguments and results as the method they wrap, run in a worker thread (_twins.async_twin).
    aforget = async_twin(forget)
    """Async twin of :meth:`forget`: the same arguments and result, run in a worker thread."""
    asearch = async_twin(search)
    """Async twin of :meth:`search`: the same arguments and result, run in a worker thread."""
    acontext = async_twin(context)
    """Async twin of :meth:`context`: the same arguments and result, run in a worker thread."""
    aget = async_twin(get)
    """Async twin of :meth:`get`: the same arguments and result, run in a worker thread."""
    alist = async_twin(list)  # noqa: A003 - the method list, defined above
    """Async twin of :meth:`list`: the same arguments and result, run in a worker thread."""
    amessages = async_twin(messages)
    """Async twin of :meth:`messages`: the same arguments and result, run in a worker thread."""
    asimilar = async_twin(similar)
    """Async twin of :meth:`similar`: the same arguments and result, run in a worker thread."""
    aget_keys = async_twin(get_keys)
    """Async twin of :meth:`get_keys`: the same arguments and result, run in a worker thread."""
    aupsert = async_twin(upsert)
    """Async twin of :meth:`upsert`: the same arguments and result, run in a worker thread."""
    adelete_keys = async_twin(delete_keys)
    """Async twin of :meth:`delete_keys`: the same arguments and result, run in a worker thread."""
    aremember = async_twin(remember)
    """Async twin of :meth:`remember`: the same arguments and result, run in a worker thread."""
    aadd = async_twin(add)
    """Async twin of :meth:`add`: the same arguments and result, run in a worker thread."""
    apost_turn = async_twin(post_turn)
    """Async twin of :meth:`post_turn`: the same arguments and result, run in a worker thread."""
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


def _require_id(memory_id: Any) -> str:
    if not isinstance(memory_id, str) or not memory_id.strip():
        raise InvalidInputError(f"memory_id must be a non-empty string, got {memory_id!r}")
    return memory_id


def _positive(value: Any, name: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise InvalidInputError(f"{name} must be a positive integer, got {value!r}")
    return value


def new_key() -> str:
    """A fresh document key (uuid4), for writes that name none."""
    return str(uuid.uuid4())
