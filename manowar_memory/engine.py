"""The engine facade: ``remember``, ``post_turn``, ``pre_turn`` and friends."""

from __future__ import annotations

from typing import Any

from ._engine.core import NO_EMBEDDER as NO_EMBEDDER
from ._engine.core import EngineBase
from ._engine.core import log as log
from ._engine.core import open_store as open_store
from ._engine.items import EngineItems
from ._engine.maintenance import EngineMaintenance
from ._engine.recall import EngineRecall
from ._engine.results import FlushResult as FlushResult
from ._engine.results import IngestItem as IngestItem
from ._engine.results import IngestReport as IngestReport
from ._engine.results import LayerSearchResult as LayerSearchResult
from ._engine.results import ReembedReport as ReembedReport
from ._engine.results import SearchOptions as SearchOptions
from ._engine.results import SearchOutcome as SearchOutcome
from ._engine.turns import EngineTurns
from ._engine.writes import EngineWrites
from ._twins import async_twin, steps_twin
from .notes import DEFAULT_AGENT, ProjectNotes
from .results import ForgetReport as ForgetReport
from .results import PostTurnResult as PostTurnResult
from .results import PreTurnResult as PreTurnResult
from .results import RememberResult as RememberResult
from .scope import ScopeLike
from .scoped import ScopedMemory

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


class MemoryEngine(EngineTurns, EngineRecall, EngineItems, EngineMaintenance):
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
    # Same arguments and results as the method they wrap, run in a worker thread (_twins.async_twin);
    # aremember and aingest await an async fact resolver on the event loop (_twins.steps_twin).
    aforget = async_twin(EngineMaintenance.forget)

    """Async twin of :meth:`forget`: the same arguments and result, run in a worker thread."""

    aremember = steps_twin(EngineWrites.remember_steps, name="remember")

    """Async twin of :meth:`remember`: the same arguments and result; the store work runs in worker
    threads and an async fact resolver (:class:`~manowar_memory.resolver.AsyncFactResolver`, such as
    ``LLMResolver(achat=...)``) is awaited on the event loop."""

    apost_turn = async_twin(EngineTurns.post_turn)

    """Async twin of :meth:`post_turn`: the same arguments and result, run in a worker thread."""

    apre_turn = async_twin(EngineRecall.pre_turn)

    """Async twin of :meth:`pre_turn`: the same arguments and result, run in a worker thread."""

    asearch_layers = async_twin(EngineRecall.search_layers)

    """Async twin of :meth:`search_layers`: the same arguments and result, run in a worker thread."""

    asearch = async_twin(EngineRecall.search)

    """Async twin of :meth:`search`: the same arguments and result, run in a worker thread."""

    aingest = steps_twin(EngineWrites.ingest_steps, name="ingest", then=lambda report: report.ids)

    """Async twin of :meth:`ingest`: the same arguments and result; the store work and the embedder
    run in worker threads and an async fact resolver is awaited on the event loop."""

    aget_item = async_twin(EngineItems.get_item)

    """Async twin of :meth:`get_item`: the same arguments and result, run in a worker thread."""

    aupdate_item = async_twin(EngineItems.update_item)

    """Async twin of :meth:`update_item`: the same arguments and result, run in a worker thread."""

    adelete_item = async_twin(EngineItems.delete_item)

    """Async twin of :meth:`delete_item`: the same arguments and result, run in a worker thread."""

    adelete_items = async_twin(EngineItems.delete_items)

    """Async twin of :meth:`delete_items`: the same arguments and result, run in a worker thread."""

    aresolve_conflict = async_twin(EngineItems.resolve_conflict)

    """Async twin of :meth:`resolve_conflict`: the same arguments and result, run in a worker thread."""

    aflush = async_twin(EngineBase.flush)

    """Async twin of :meth:`flush`: the same arguments and result, run in a worker thread."""
