"""The surface's state (built by ``__init__``) and the checks every part shares."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from .. import validation
from .._engine.results import IngestReport
from .._twins import Steps, run_steps, steps_twin
from ..candidates import Candidate
from ..config import MemoryConfig
from ..errors import ConfigurationError, InvalidInputError, NotFoundError, ScopeError
from ..notes.service import NotesMemory
from ..packing import PackResult, pack
from ..ranking.trust import TRUST_LEVELS, content_delimiter
from ..records import MemoryRecord, Message, Pattern, Session
from ..results import ForgetReport, PostTurnResult, PreTurnResult, RememberResult
from ..scope import Scope, ScopeLike, owns, visible
from ..stores.base import Hit, Store

if TYPE_CHECKING:
    import builtins

    from ..records import Job


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
    # the step forms of remember and ingest_report (manowar_memory._twins): the surface's writes
    # are written once on them, so its async twins await an async fact resolver on the event loop
    def remember_steps(self, scope: ScopeLike, content: str, *, fact_type: str | None = ...,
                        confidence: float | None = ..., importance: float | None = ..., retention: str | None = ...,
                        metadata: Mapping[str, Any] | None = ..., created_at: int | None = ..., ttl: Any = ...,
                        expires_at: Any = ...) -> Steps[RememberResult]: ...
    def ingest_steps(self, scope: ScopeLike, items: Iterable[Mapping[str, Any]], *, batch_size: int = ...,
                      progress: bool = ..., dedupe: bool = ..., ttl: Any = ...,
                      expires_at: Any = ...) -> Steps[IngestReport]: ...
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
    # returns a ScopedMemory, typed by what the notes use of it (the parts sit below scoped.py)
    def scoped(self, scope: ScopeLike, *, trust: str | None = ..., require_thread: bool = ...,
               agent_jobs: bool = ..., allow_pin: bool = ...) -> NotesMemory: ...
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


class ScopedCore:
    """The surface's state (built by ``__init__``) and the checks every part shares."""

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

    def get(self, memory_id: str) -> MemoryRecord:
        """A row visible in the scope; :class:`NotFoundError` otherwise."""
        return self._engine.get_item(self._scope, _require_id(memory_id))

    def messages(self) -> builtins.list[Message]:
        """The thread's messages, oldest first: its transcript, or what the working buffer
        still holds when the transcript is gone."""
        return self._engine.thread_messages(self._require_thread())

    def add(self, texts: Sequence[str], *, metadatas: Sequence[Mapping[str, Any] | None] | None = None,
            source: str = "knowledge", ttl: Any = None, expires_at: Any = None) -> builtins.list[str]:
        """Add unkeyed rows (vectors layer); returns the new row ids. ``ttl`` (seconds or a
        timedelta) or ``expires_at`` make them expire (see :meth:`MemoryEngine.ingest`)."""
        return run_steps(self._add_steps(texts, metadatas=metadatas, source=source, ttl=ttl, expires_at=expires_at))

    def _add_steps(self, texts: Sequence[str], *, metadatas: Sequence[Mapping[str, Any] | None] | None = None,
                   source: str = "knowledge", ttl: Any = None, expires_at: Any = None) -> Steps[builtins.list[str]]:
        """:meth:`add` as steps (:mod:`manowar_memory._twins`): one body for ``add`` and ``aadd``."""
        if isinstance(texts, str):
            raise InvalidInputError("texts must be a list of strings, not one string")
        texts = list(texts)
        metas = list(metadatas) if metadatas is not None else [None] * len(texts)
        if len(metas) != len(texts):
            raise InvalidInputError(f"got {len(texts)} texts but {len(metas)} metadatas")
        rows = [{"content": t, "source": source, "metadata": self._write_meta(m, what=f"metadatas[{i}]")}
                for i, (t, m) in enumerate(zip(texts, metas, strict=True))]
        if not rows:
            return []
        report = yield from self._engine.ingest_steps(self._scope, rows, ttl=ttl, expires_at=expires_at)
        return report.ids

    aadd = steps_twin(_add_steps, name="add")

    """Async twin of :meth:`add`: the same arguments and result; the store work runs in worker
    threads and an async fact resolver (a ``source="fact"`` write) is awaited on the event loop."""

    def post_turn(self, messages: Sequence[Mapping[str, Any] | Message], tool_calls: Sequence[Mapping[str, Any]] | None = None,
                  *, metadata: Mapping[str, Any] | None = None, extract_facts: bool = True,
                  turn_id: str | None = None) -> PostTurnResult:
        """Record a turn of the scope's thread (transcript, working buffer, session row, facts),
        once per ``turn_id`` (see :meth:`MemoryEngine.post_turn`)."""
        return self._engine.post_turn(self._require_thread(), messages, tool_calls,
                                      metadata=self._write_meta(metadata), extract_facts=extract_facts,
                                      turn_id=turn_id)

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
