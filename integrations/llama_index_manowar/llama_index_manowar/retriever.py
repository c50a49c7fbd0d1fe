"""``ManowarRetriever``: the engine's layered hybrid search as a LlamaIndex retriever."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextvars import ContextVar
from typing import Any

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.callbacks.base import CallbackManager
from llama_index.core.schema import NodeWithScore, QueryBundle, QueryType
from llama_index.core.vector_stores.types import MetadataFilters

from manowar_memory.engine import MemoryEngine
from manowar_memory.errors import InvalidInputError, ScopeError
from manowar_memory.filters import FilterValue, normalize_filters
from manowar_memory.layers import normalize_layers
from manowar_memory.scope import Scope, ScopeLike
from manowar_memory.scoped import DEFAULT_K, ScopedMemory, SearchHits

from ._convert import candidate_to_node
from .filters import MATCH_NOTHING, translate_filters

__all__ = ["ManowarRetriever"]

#: The user named by the running ``retrieve(..., user_id=...)`` call, per retriever (id) and context.
_CALL_USER: ContextVar[tuple[int, str | None] | None] = ContextVar("manowar_retriever_user", default=None)


class ManowarRetriever(BaseRetriever):
    """Retrieve memories of one scope from the engine, as ``NodeWithScore``.

    >>> retriever = ManowarRetriever(engine=engine, scope=scope, similarity_top_k=5)
    >>> nodes = retriever.retrieve("Where does the user live?")
    >>> nodes[0].node.metadata["layer"], nodes[0].node.metadata["trust"]

    Each node's id is the memory's id and its metadata is the one recalled-memory schema
    of both adapters (:func:`manowar_memory.tools.memory_view`): ``id``, ``layer``,
    ``score``, ``created_at``, ``trust``, ``source``, ``lanes`` and, with
    ``decisions=True``, the ranking ``decisions``. That metadata is hidden from the LLM, so
    prompts hold only memory text.

    Options: ``similarity_top_k`` (results; default :data:`~manowar_memory.scoped.DEFAULT_K`, 4),
    ``layers`` (default graph and vectors; any of the six), ``filters`` (the engine's
    allowlisted filters as a mapping, or LlamaIndex ``MetadataFilters`` on row metadata,
    translated by :func:`~llama_index_manowar.filters.translate_filters`), and the engine's
    ranking stages ``decay`` (on by default), ``rerank`` (the engine's reranker; skip rule
    and fail-soft) and ``mmr``. The degradations of the latest search (for example
    "rerank skipped: ...") are in :attr:`last_degradations`. Unknown keyword arguments raise
    ``TypeError``.

    One retriever can serve every user of an app: built with an agent-level scope (no user)
    and ``per_call_user=True``, each call names its user, ``retriever.retrieve(query,
    user_id="u1")`` (and ``aretrieve``); a call naming none raises
    :class:`~manowar_memory.ScopeError`. A retriever built with a user scope is bound to that
    user: ``user_id`` naming another user raises :class:`~manowar_memory.ScopeError`, as it
    does on an agent-level retriever without ``per_call_user``.
    """

    def __init__(
        self,
        *,
        engine: MemoryEngine,
        scope: ScopeLike,
        similarity_top_k: int = DEFAULT_K,
        layers: Sequence[str] = ("graph", "vectors"),
        filters: Mapping[str, Any] | MetadataFilters | None = None,
        decay: bool = True,
        rerank: bool = False,
        mmr: bool = False,
        decisions: bool = False,
        per_call_user: bool = False,
        callback_manager: CallbackManager | None = None,
        verbose: bool = False,
        **kwargs: Any,
    ) -> None:
        if kwargs:
            hint = " (LlamaIndex retrievers take similarity_top_k)" if "k" in kwargs or "top_k" in kwargs else ""
            raise TypeError(f"ManowarRetriever got unknown argument(s) {sorted(kwargs)}{hint}")
        if not isinstance(engine, MemoryEngine):
            raise InvalidInputError(f"engine must be a MemoryEngine, got {type(engine).__name__}")
        if isinstance(similarity_top_k, bool) or not isinstance(similarity_top_k, int) or similarity_top_k < 1:
            raise InvalidInputError(f"similarity_top_k must be a positive integer, got {similarity_top_k!r}")
        self._memory: ScopedMemory = engine.scoped(scope)
        if per_call_user and self._memory.scope.user_address is not None:
            raise ScopeError(
                f"per_call_user=True needs an agent-level scope (no user); this retriever is bound to user "
                f"{self._memory.scope.user_address!r}, which a call cannot change"
            )
        self.per_call_user = per_call_user
        self.similarity_top_k = similarity_top_k
        self.layers: list[str] = list(normalize_layers(list(layers)))
        translated = translate_filters(filters) if isinstance(filters, MetadataFilters) else normalize_filters(filters)
        self._match_nothing = translated is MATCH_NOTHING
        self.filters: dict[str, FilterValue] = translated or {}
        self.decay = decay
        self.rerank = rerank
        self.mmr = mmr
        self.decisions = decisions
        self.last_degradations: list[str] = []
        super().__init__(callback_manager=callback_manager, verbose=verbose)

    @property
    def scope(self) -> Scope:
        """The scope searched."""
        return self._memory.scope

    def retrieve(self, str_or_query_bundle: QueryType, *, user_id: str | None = None) -> list[NodeWithScore]:
        """Retrieve nodes for the query; ``user_id`` names the call's user (see the class docstring)."""
        token = _CALL_USER.set((id(self), user_id))
        try:
            return super().retrieve(str_or_query_bundle)
        finally:
            _CALL_USER.reset(token)

    async def aretrieve(self, str_or_query_bundle: QueryType, *, user_id: str | None = None) -> list[NodeWithScore]:
        """Async twin of :meth:`retrieve`."""
        token = _CALL_USER.set((id(self), user_id))
        try:
            return await super().aretrieve(str_or_query_bundle)
        finally:
            _CALL_USER.reset(token)

    def _call_memory(self) -> ScopedMemory:
        call = _CALL_USER.get()
        user = call[1] if call is not None and call[0] == id(self) else None
        return self._memory.for_user(user, per_call_user=self.per_call_user)

    def _search_kwargs(self) -> dict[str, Any]:
        return {
            "layers": tuple(self.layers), "k": self.similarity_top_k, "filters": self.filters,
            "decay": self.decay, "rerank": self.rerank, "mmr": self.mmr,
        }

    def _nodes(self, hits: SearchHits) -> list[NodeWithScore]:
        self.last_degradations = list(hits.degradations)
        trust = self._memory.default_trust
        return [candidate_to_node(c, default_trust=trust, decisions=self.decisions) for c in hits]

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        """Search the engine (sync)."""
        memory = self._call_memory()
        if self._match_nothing:
            self.last_degradations = []
            return []
        return self._nodes(memory.search(query_bundle.query_str, **self._search_kwargs()))

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        """Search the engine (async)."""
        memory = self._call_memory()
        if self._match_nothing:
            self.last_degradations = []
            return []
        return self._nodes(await memory.asearch(query_bundle.query_str, **self._search_kwargs()))
