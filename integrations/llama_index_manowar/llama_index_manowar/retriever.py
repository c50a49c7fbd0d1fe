"""``ManowarRetriever``: the engine's layered hybrid search as a LlamaIndex retriever."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.callbacks.base import CallbackManager
from llama_index.core.schema import NodeWithScore, QueryBundle
from llama_index.core.vector_stores.types import MetadataFilters

from manowar_memory.engine import MemoryEngine
from manowar_memory.errors import InvalidInputError
from manowar_memory.filters import FilterValue, normalize_filters
from manowar_memory.layers import normalize_layers
from manowar_memory.scope import Scope, ScopeLike

from ._convert import candidate_to_node
from .filters import MATCH_NOTHING, translate_filters

__all__ = ["ManowarRetriever"]


class ManowarRetriever(BaseRetriever):
    """Retrieve memories of one scope from the engine, as ``NodeWithScore``.

    >>> retriever = ManowarRetriever(engine=engine, scope=scope, layers=["graph", "vectors"], k=5)
    >>> nodes = retriever.retrieve("Where does the user live?")
    >>> nodes[0].node.metadata["layer"], nodes[0].node.metadata["provenance"]["id"]

    Each node's id is the memory's id and its metadata holds ``layer``, ``score``,
    ``scope`` and ``provenance`` (source, times, lanes, ranking trace, row metadata);
    see :func:`llama_index_manowar._convert.candidate_to_node`. That metadata is hidden
    from the LLM, so prompts hold only memory text.

    Options: ``layers`` (default graph and vectors; any of the six), ``k`` (results),
    ``filters`` (the engine's allowlisted filters as a mapping, or LlamaIndex
    ``MetadataFilters`` on row metadata, translated by
    :func:`~llama_index_manowar.filters.translate_filters`), and the engine's ranking
    stages ``decay`` (on by default), ``rerank`` (the engine's reranker; skip rule and
    fail-soft) and ``mmr``. The degradations of the latest search (for example "rerank
    skipped: ...") are in :attr:`last_degradations` and in each node's metadata.
    """

    def __init__(
        self,
        *,
        engine: MemoryEngine,
        scope: ScopeLike,
        layers: Sequence[str] = ("graph", "vectors"),
        k: int = 10,
        filters: Mapping[str, Any] | MetadataFilters | None = None,
        decay: bool = True,
        rerank: bool = False,
        mmr: bool = False,
        callback_manager: CallbackManager | None = None,
        verbose: bool = False,
    ) -> None:
        if not isinstance(engine, MemoryEngine):
            raise InvalidInputError(f"engine must be a MemoryEngine, got {type(engine).__name__}")
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise InvalidInputError(f"k must be a positive integer, got {k!r}")
        self.engine = engine
        self.scope: Scope = Scope.coerce(scope)
        self.layers: list[str] = list(normalize_layers(list(layers)))
        self.k = k
        translated = translate_filters(filters) if isinstance(filters, MetadataFilters) else normalize_filters(filters)
        self._match_nothing = translated is MATCH_NOTHING
        self.filters: dict[str, FilterValue] = translated or {}
        self.decay = decay
        self.rerank = rerank
        self.mmr = mmr
        self.last_degradations: list[str] = []
        super().__init__(callback_manager=callback_manager, verbose=verbose)

    def _search_kwargs(self) -> dict[str, Any]:
        return {
            "layers": self.layers, "k": self.k, "filters": self.filters,
            "decay": self.decay, "rerank": self.rerank, "mmr": self.mmr,
        }

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        """Search the engine (sync)."""
        if self._match_nothing:
            self.last_degradations = []
            return []
        candidates, notes = self.engine.search(query_bundle.query_str, self.scope, **self._search_kwargs())
        self.last_degradations = list(notes)
        return [candidate_to_node(c, self.scope, notes) for c in candidates]

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        """Search the engine (async)."""
        if self._match_nothing:
            self.last_degradations = []
            return []
        candidates, notes = await self.engine.asearch(query_bundle.query_str, self.scope, **self._search_kwargs())
        self.last_degradations = list(notes)
        return [candidate_to_node(c, self.scope, notes) for c in candidates]
