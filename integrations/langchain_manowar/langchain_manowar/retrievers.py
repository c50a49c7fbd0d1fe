"""``ManowarRetriever``: the engine's layered search as a LangChain retriever."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from manowar_memory import Candidate, MemoryEngine, Scope
from manowar_memory.layers import normalize_layers
from manowar_memory.ranking import mmr_order
from pydantic import BeforeValidator, ConfigDict, Field, InstanceOf, field_validator

from ._convert import candidate_to_document, coerce_scope

__all__ = ["ManowarRetriever"]

ScopeField = Annotated[InstanceOf[Scope], BeforeValidator(coerce_scope)]
_OVERRIDABLE = ("k", "layers", "filters", "decay", "rerank", "mmr", "min_score")


class ManowarRetriever(BaseRetriever):
    """Retrieve memories from chosen layers of a :class:`MemoryEngine`.

    Each Document is one memory: ``page_content`` is its text, ``id`` its memory id,
    and ``metadata`` carries ``layer``, ``score``, ``scope`` (the reading scope),
    ``provenance`` (memory id, source, times, thread, session/turn, extractor, embedding
    model), plus ``lanes`` / ``trace`` (how the ranking got there), ``confidence``,
    ``importance``, ``access_count``, the memory's own ``memory_metadata`` and, when the
    call degraded (keyword-only, rerank skipped...), ``degradations``.

    ``k``, ``layers``, ``filters``, ``decay``, ``rerank``, ``mmr`` and ``min_score`` can also
    be given per call: ``retriever.invoke("query", k=3, layers=["graph"])``.

    Example::

        retriever = ManowarRetriever(engine=engine, scope={"agent_wallet": "a1"}, k=5, layers=["graph"])
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    engine: InstanceOf[MemoryEngine]
    """The memory engine."""
    scope: ScopeField
    """Whose memories are searched."""
    k: int = Field(4, ge=1)
    """Number of documents returned."""
    layers: Sequence[str] = ("graph", "vectors")
    """Layers searched (any of working, scene, graph, patterns, archives, vectors)."""
    filters: dict[str, Any] | None = None
    """Allowlisted filters (``metadata.*``, ``source``...) narrowing the scope."""
    decay: bool = True
    """Apply temporal decay (with its floor)."""
    rerank: bool = False
    """Rerank with the engine's reranker (skip rule and fail-soft apply)."""
    mmr: bool = False
    """Order by maximal marginal relevance."""
    min_score: float | None = None
    """Drop documents scoring below this."""

    @field_validator("layers", mode="before")
    @classmethod
    def _check_layers(cls, value: Any) -> tuple[str, ...]:
        return tuple(normalize_layers([value] if isinstance(value, str) else list(value)))

    def _options(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(kwargs) - set(_OVERRIDABLE))
        if unknown:
            raise TypeError(f"unknown retriever option(s) {unknown}; per-call options are {list(_OVERRIDABLE)}")
        opts = {name: kwargs.get(name, getattr(self, name)) for name in _OVERRIDABLE}
        k = opts["k"]
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"k must be a positive integer, got {k!r}")
        opts["layers"] = tuple(opts["layers"])
        return opts

    def _search_kwargs(self, opts: dict[str, Any]) -> dict[str, Any]:
        # MMR runs here, over the merged layers: the engine's search re-sorts its merged
        # hits by score, which would undo an MMR order computed per layer.
        k = opts["k"] * 2 if opts["mmr"] else opts["k"]
        return {"layers": opts["layers"], "k": k, "filters": opts["filters"], "decay": opts["decay"],
                "rerank": opts["rerank"], "mmr": False}

    def _documents(self, found: list[Candidate], notes: list[str], opts: dict[str, Any]) -> list[Document]:
        min_score = opts["min_score"]
        kept = [c for c in found if min_score is None or c.score >= min_score]
        if opts["mmr"]:
            kept = mmr_order(kept, lambda_=self.engine.config.retrieval.mmr_lambda)
        return [candidate_to_document(c, self.scope, degradations=notes) for c in kept[: opts["k"]]]

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        opts = self._options(kwargs)
        found, notes = self.engine.search(query, self.scope, **self._search_kwargs(opts))
        return self._documents(found, notes, opts)

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        opts = self._options(kwargs)
        found, notes = await self.engine.asearch(query, self.scope, **self._search_kwargs(opts))
        return self._documents(found, notes, opts)
