"""``ManowarRetriever``: the engine's layered search as a LangChain retriever."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Any

from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableConfig, ensure_config
from pydantic import BeforeValidator, ConfigDict, Field, InstanceOf, PrivateAttr, field_validator, model_validator

from manowar_memory import MemoryEngine, Scope, ScopedMemory, ScopeError, SearchHits
from manowar_memory.candidates import relevance
from manowar_memory.layers import normalize_layers
from manowar_memory.scoped import DEFAULT_K, shortfall

from ._convert import coerce_scope, memory_document

__all__ = ["ManowarRetriever"]

ScopeField = Annotated[InstanceOf[Scope], BeforeValidator(coerce_scope)]
#: What ``search_kwargs`` and per-call keyword arguments may set.
SEARCH_OPTIONS: tuple[str, ...] = ("k", "filter", "filters", "layers", "decay", "rerank", "mmr", "min_score",
                                   "score_threshold", "decisions")


class ManowarRetriever(BaseRetriever):
    """Retrieve memories from chosen layers of a :class:`MemoryEngine`, through ``engine.scoped(scope)``.

    Each Document is one memory: ``page_content`` is its text, ``id`` its memory id, and
    ``metadata`` is the one schema every adapter uses (:func:`manowar_memory.tools.memory_view`):
    ``id``, ``layer``, ``score``, ``created_at``, ``trust``, ``source``, ``lanes``, plus
    ``decisions`` (how the ranking got there) with ``decisions=True`` and
    ``degradations`` when the search degraded (keyword-only, rerank skipped...).

    As LangChain's ``VectorStoreRetriever``: ``k`` (default :data:`DEFAULT_K`, 4) and
    ``search_kwargs`` (``{"k": 2, "filter": {...}, "layers": [...], "score_threshold": 0.2}``)
    set the search; the same keys can be given per call (``retriever.invoke("q", k=3)``).
    ``filter`` (or ``filters``) takes the engine's filter language (:mod:`manowar_memory.filters`):
    flat metadata keys (``{"topic": "x"}``, the same as ``{"metadata.topic": "x"}``), the row fields
    (``source``...), the operators ``$eq $ne $in $nin $gt $gte $lt $lte`` and ``$and``/``$or``.
    Unknown keys raise ``TypeError``.

    Scores: ``metadata["score"]`` is the memory's relevance in [0, 1]
    (:func:`manowar_memory.candidates.relevance`: the strongest lane evidence, the vector lane's
    being ``(1 + cosine) / 2``); ``score_threshold`` (or ``min_score``) keeps documents whose
    relevance reaches it; the order stays the engine's ranking (``metadata["rank_score"]``).
    When fewer than ``k`` documents come back, each carries ``metadata["shortfall"]`` saying
    why (the search found fewer, or the threshold cut some), and :attr:`last_shortfall` holds
    it for the latest call (also when nothing came back).

    One retriever can serve every user of an app: built with an agent-level scope (no user)
    and ``per_call_user=True``, each call names its user, in the run's config
    (``retriever.invoke(q, config={"configurable": {"user_id": "u1"}})``, so a retriever
    inside an agent run follows the run's user) or as an argument (``user_id="u1"``, which
    wins); a call that names none raises :class:`~manowar_memory.ScopeError`. A retriever
    built with a user scope is bound to that user: a call naming another user raises
    :class:`~manowar_memory.ScopeError`. An agent-level retriever without ``per_call_user``
    reads the agent's shared memories and refuses a ``user_id`` argument.

    Example::

        retriever = ManowarRetriever(engine=engine, scope={"agent_wallet": "a1"}, search_kwargs={"k": 5})
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    engine: InstanceOf[MemoryEngine]
    """The memory engine."""
    scope: ScopeField
    """Whose memories are searched."""
    k: int = Field(DEFAULT_K, ge=1)
    """Number of documents returned (``search_kwargs["k"]`` overrides it)."""
    search_kwargs: dict[str, Any] = Field(default_factory=dict)
    """Search options, as a ``VectorStoreRetriever`` takes them (see the class docstring)."""
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
    """Drop documents scoring below this (``score_threshold`` in ``search_kwargs``)."""
    decisions: bool = False
    """Add the ranking decisions to each document's metadata."""
    per_call_user: bool = False
    """Let each call choose the user (``configurable.user_id`` or ``user_id=``); agent-level scopes only."""
    _memory: ScopedMemory = PrivateAttr()
    _last_shortfall: str | None = PrivateAttr(default=None)

    def __init__(self, **data: Any) -> None:
        super().__init__(**data)
        # outside pydantic's validation, so the ScopeError itself reaches the caller
        if self.per_call_user and self.scope.user_address is not None:
            raise ScopeError(
                f"per_call_user=True needs an agent-level scope (no user); this retriever is bound to user "
                f"{self.scope.user_address!r}, which a call cannot change"
            )

    @field_validator("layers", mode="before")
    @classmethod
    def _check_layers(cls, value: Any) -> tuple[str, ...]:
        return tuple(normalize_layers([value] if isinstance(value, str) else list(value)))

    @model_validator(mode="after")
    def _bind(self) -> ManowarRetriever:
        self._memory = self.engine.scoped(self.scope)
        self._options(self.search_kwargs, where="search_kwargs")  # unknown keys fail now, not at the first call
        return self

    @property
    def memory(self) -> ScopedMemory:
        """The scoped surface the retriever reads through."""
        return self._memory

    def invoke(self, input: str, config: RunnableConfig | None = None, **kwargs: Any) -> list[Document]:  # noqa: A002
        """Retrieve for ``input``; the run's ``configurable.user_id`` is passed on as the call's user."""
        config = ensure_config(config)
        return super().invoke(input, config, **_config_user(config, kwargs))

    async def ainvoke(self, input: str, config: RunnableConfig | None = None,  # noqa: A002
                      **kwargs: Any) -> list[Document]:
        """Async twin of :meth:`invoke`."""
        config = ensure_config(config)
        return await super().ainvoke(input, config, **_config_user(config, kwargs))

    def memory_for(self, user_id: str | None, *, from_config: bool = False) -> ScopedMemory:
        """The scoped surface of one call (``ScopedMemory.for_user``): the retriever's own, or the
        named user's with ``per_call_user``. An agent-level retriever without ``per_call_user``
        ignores the run's ``configurable.user_id`` (it reads shared rows) and refuses ``user_id=``."""
        return self._memory.for_user(user_id, per_call_user=self.per_call_user, from_run=from_config)

    def _call_memory(self, kwargs: dict[str, Any]) -> ScopedMemory:
        from_config = _CONFIG_USER in kwargs
        user = kwargs.pop("user_id", None)
        config_user = kwargs.pop(_CONFIG_USER, None)
        return self.memory_for(user if user is not None else config_user,
                               from_config=from_config and user is None)

    def _options(self, kwargs: dict[str, Any], *, where: str = "per-call options") -> dict[str, Any]:
        unknown = sorted(set(kwargs) - set(SEARCH_OPTIONS))
        if unknown:
            raise TypeError(f"unknown retriever option(s) {unknown} in {where}; use {list(SEARCH_OPTIONS)}")
        merged = {**self.search_kwargs, **kwargs}
        if "filter" in merged and "filters" in merged:
            raise TypeError("give filter or filters, not both")
        opts = {
            "k": merged.get("k", self.k),
            "layers": merged.get("layers", self.layers),
            "filters": merged.get("filter", merged.get("filters", self.filters)),
            "decay": merged.get("decay", self.decay),
            "rerank": merged.get("rerank", self.rerank),
            "mmr": merged.get("mmr", self.mmr),
            "min_score": merged.get("score_threshold", merged.get("min_score", self.min_score)),
            "decisions": merged.get("decisions", self.decisions),
        }
        k = opts["k"]
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"k must be a positive integer, got {k!r}")
        layers = opts["layers"]
        opts["layers"] = tuple(normalize_layers([layers] if isinstance(layers, str) else list(layers)))
        return opts

    @staticmethod
    def _search_kwargs(opts: dict[str, Any]) -> dict[str, Any]:
        return {"k": opts["k"], "layers": opts["layers"], "filters": opts["filters"], "decay": opts["decay"],
                "rerank": opts["rerank"], "mmr": opts["mmr"]}

    @property
    def last_shortfall(self) -> str | None:
        """Why the latest call returned fewer than ``k`` documents (None when it returned ``k``)."""
        return self._last_shortfall

    def _documents(self, hits: SearchHits, opts: dict[str, Any]) -> list[Document]:
        min_score = opts["min_score"]
        k = opts["k"]
        kept = [c for c in hits.candidates if min_score is None or relevance(c) >= min_score][:k]
        reason = shortfall(k, found=len(hits.candidates), kept=len(kept), threshold=min_score)
        self._last_shortfall = reason
        docs = [memory_document(c, default_trust=self._memory.default_trust, decisions=opts["decisions"],
                                degradations=hits.degradations) for c in kept]
        if reason is not None:
            for doc in docs:
                doc.metadata["shortfall"] = reason
        return docs

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        memory = self._call_memory(kwargs)
        opts = self._options(kwargs)
        return self._documents(memory.search(query, **self._search_kwargs(opts)), opts)

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        memory = self._call_memory(kwargs)
        opts = self._options(kwargs)
        return self._documents(await memory.asearch(query, **self._search_kwargs(opts)), opts)


_CONFIG_USER = "_manowar_config_user"


def _config_user(config: RunnableConfig, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The call's keyword arguments plus the run's ``configurable.user_id`` (under a private key)."""
    configurable = config.get("configurable") or {}
    user = configurable.get("user_id") if isinstance(configurable, Mapping) else None
    out = dict(kwargs)
    if user is not None:
        out[_CONFIG_USER] = user
    return out
