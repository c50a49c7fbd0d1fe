"""The engine's ranking stages and packer as LlamaIndex node postprocessors.

They work on nodes from any LlamaIndex retriever, not only :class:`ManowarRetriever`:

* :class:`ManowarDecayPostprocessor`: temporal decay with a floor.
* :class:`ManowarRerankPostprocessor`: cross-encoder rerank with the skip rule, a timeout and fail-soft.
* :class:`ManowarMMRPostprocessor`: maximal marginal relevance (cosine over node
  embeddings when every node has one, else word overlap).
* :class:`ManowarPackerPostprocessor`: dedupe, score and fit the nodes into a character
  budget, with the packer's full accounting in :attr:`~ManowarPackerPostprocessor.last_result`.

Like every adapter they take ``engine=`` and ``scope=``; here both are optional. The
engine supplies defaults (its ranking config and its reranker); the scope keeps the
packer's untrusted-content delimiter stable for that scope. They read no memory and write
none: they rank and pack the nodes they are given. Unknown keyword arguments raise.

Nodes are never mutated: each stage returns copies whose ``metadata['manowar_trace']``
records what it did (``decay``, ``rerank``, ``mmr_rank``, ``pack_score``...), hidden from
the LLM. A node from another retriever is treated as a ``vectors`` memory (change with
``default_layer``); its age comes from ``time_key`` or the first usable of
``created_at``, ``creation_date``, ``last_modified_date``, ``timestamp``, ``date``.
"""

from __future__ import annotations

import time
from typing import Any

from llama_index.core.bridge.pydantic import ConfigDict, Field, PrivateAttr, field_validator
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle

from manowar_memory.candidates import Candidate
from manowar_memory.config import RetrievalConfig
from manowar_memory.errors import ConfigurationError
from manowar_memory.packing import PackResult
from manowar_memory.ranking import RerankOutcome, apply_decay, mmr_order, rerank_candidates
from manowar_memory.ranking.trust import content_delimiter, wrap_untrusted
from manowar_memory.records import Layer
from manowar_memory.rerankers import resolve_reranker
from manowar_memory.rerankers.base import Reranker
from manowar_memory.scoped import DOCUMENT_BUDGET_CHARS, document_label, pack_context

from ._convert import TRACE_KEY, node_to_candidate, with_trace
from ._fields import OptionalEngineField, OptionalScopeField, settings_surface

__all__ = [
    "ManowarDecayPostprocessor",
    "ManowarMMRPostprocessor",
    "ManowarPackerPostprocessor",
    "ManowarRerankPostprocessor",
]


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class _ManowarPostprocessor(BaseNodePostprocessor):
    """Shared fields and conversions."""

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    engine: OptionalEngineField = None
    scope: OptionalScopeField = None
    default_layer: Layer = Field(default="vectors", description="Layer assumed for nodes from other retrievers.")
    time_key: str | None = Field(default=None, description="Metadata key holding a node's timestamp.")

    def _retrieval_config(self) -> RetrievalConfig:
        return settings_surface(self.engine, self.scope).config.retrieval if self.engine is not None else RetrievalConfig()

    def _candidates(self, nodes: list[NodeWithScore]) -> list[Candidate]:
        return [node_to_candidate(n, default_layer=self.default_layer, time_key=self.time_key) for n in nodes]


class ManowarDecayPostprocessor(_ManowarPostprocessor):
    """Multiply each node's score by ``0.5 ** (age / half_life_days)``, never below ``floor``,
    and sort by the new score. Nodes without a timestamp keep their score (multiplier 1).

    Defaults come from the engine's config (30 days, floor 0.35) when none are given. A node
    the engine already decayed (a :class:`ManowarRetriever` node with ``decay=True`` and
    ``decisions=True``, whose decisions say so) or that went through this stage before is not decayed twice unless ``force=True``.
    """

    half_life_days: float | None = Field(default=None, gt=0, description="Half-life in days.")
    floor: float | None = Field(default=None, ge=0, le=1, description="Lowest multiplier.")
    now: int | None = Field(default=None, description="Current time in epoch ms (default: the clock).")
    force: bool = Field(default=False, description="Decay nodes that were decayed already.")

    @classmethod
    def class_name(cls) -> str:
        """Class name for serialisation."""
        return "ManowarDecayPostprocessor"

    def _postprocess_nodes(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
    ) -> list[NodeWithScore]:
        config = self._retrieval_config()
        half_life = self.half_life_days if self.half_life_days is not None else config.decay_half_life_days
        floor = self.floor if self.floor is not None else config.decay_floor
        candidates = self._candidates(nodes)
        fresh = [c for c in candidates if self.force or not _already_decayed(c)]
        apply_decay(fresh, half_life_days=half_life, floor=floor, now=self.now if self.now is not None else _now_ms())
        fresh_ids = {id(c) for c in fresh}
        ordered = sorted(candidates, key=lambda c: c.score, reverse=True)
        return [
            with_trace(c.record, c.score, {"decay": c.trace["decay"]} if id(c) in fresh_ids else {})
            for c in ordered
        ]


def _already_decayed(cand: Candidate) -> bool:
    for key in ("decisions", TRACE_KEY):  # the retriever's decisions (decisions=True), or this stage's trace
        trace = cand.metadata.get(key)
        if isinstance(trace, dict) and "decay" in trace:
            return True
    return False


class ManowarRerankPostprocessor(_ManowarPostprocessor):
    """Rerank nodes with a cross-encoder: ``reranker=`` a manowar ``Reranker`` or a provider
    string (``"cohere"``, ``"voyage:rerank-2.5"``, ``"local:/path"``, ``"fake"``...), else the
    engine's reranker.

    The skip rule comes first: fewer than ``min_candidates`` nodes (``few-candidates``) or
    a top node ahead of the second by ``dominance_delta`` (``top1-dominates``) keeps the
    order without calling the reranker. A timeout, missing credentials or an upstream
    error fail soft: the incoming order is kept and the reason is in
    :attr:`last_degradations`. :attr:`last_outcome` says ``reranked``, ``skipped`` (with the
    reason) or ``failed``. Without a query the nodes pass through unchanged. ``top_n``
    keeps the best n afterwards.
    """

    reranker: Any = Field(
        default=None, exclude=True, description="A manowar Reranker or a provider string; default: the engine's.",
    )
    top_n: int | None = Field(default=None, ge=1, description="Keep at most this many nodes.")
    timeout: float | None = Field(default=None, gt=0, description="Seconds to wait for the reranker.")
    min_candidates: int | None = Field(default=None, ge=2, description="Skip when fewer nodes than this.")
    dominance_delta: float | None = Field(default=None, ge=0, description="Skip when top1 - top2 >= this.")

    _last_outcome: RerankOutcome | None = PrivateAttr(default=None)
    _last_degradations: list[str] = PrivateAttr(default_factory=list)

    @field_validator("reranker", mode="before")
    @classmethod
    def _resolve_reranker(cls, value: Any) -> Any:
        """A provider string becomes its reranker (as everywhere in the engine)."""
        return resolve_reranker(value)

    def model_post_init(self, context: Any, /) -> None:
        """Resolve the reranker (given, else the engine's) and fail early when there is none."""
        super().model_post_init(context)
        if self.reranker is None and self.engine is not None:
            self.reranker = settings_surface(self.engine, self.scope).reranker
        if self.reranker is None:
            raise ConfigurationError(
                "ManowarRerankPostprocessor needs a reranker: pass reranker=... or an engine built with "
                "MemoryEngine(reranker=...)"
            )
        if not isinstance(self.reranker, Reranker):
            raise ConfigurationError(
                f"reranker must implement the manowar Reranker protocol, got {type(self.reranker).__name__}"
            )

    @classmethod
    def class_name(cls) -> str:
        """Class name for serialisation."""
        return "ManowarRerankPostprocessor"

    @property
    def last_outcome(self) -> RerankOutcome | None:
        """What the latest call did: ``reranked``, ``skipped`` (with the reason) or ``failed``."""
        return self._last_outcome

    @property
    def last_degradations(self) -> list[str]:
        """Degradations of the latest call (for example ``rerank skipped: ... timed out``)."""
        return list(self._last_degradations)

    def _postprocess_nodes(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
    ) -> list[NodeWithScore]:
        if query_bundle is None or not query_bundle.query_str.strip():
            self._last_outcome = RerankOutcome("skipped", "no-query")
            self._last_degradations = []
            return list(nodes)[: self.top_n] if self.top_n else list(nodes)
        config = self._retrieval_config()
        candidates = self._candidates(nodes)
        ranked, outcome = rerank_candidates(
            query_bundle.query_str, candidates, self.reranker,
            timeout=self.timeout if self.timeout is not None else config.rerank_timeout_s,
            min_candidates=self.min_candidates if self.min_candidates is not None else config.rerank_min_candidates,
            dominance_delta=self.dominance_delta if self.dominance_delta is not None else config.rerank_dominance_delta,
        )
        self._last_outcome = outcome
        # a failed rerank carries its degradation message as the reason
        self._last_degradations = [outcome.reason] if outcome.status == "failed" and outcome.reason else []
        status = outcome.status if outcome.reason is None else f"{outcome.status}: {outcome.reason}"
        if self.top_n:
            ranked = ranked[: self.top_n]
        return [
            with_trace(c.record, c.score, {"rerank": c.trace["rerank"], "rerank_status": status}
                       if "rerank" in c.trace and outcome.status == "reranked" else {"rerank_status": status})
            for c in ranked
        ]


class ManowarMMRPostprocessor(_ManowarPostprocessor):
    """Reorder nodes by maximal marginal relevance: each pick maximises
    ``λ·relevance − (1−λ)·similarity to what was already picked``, so near-duplicates give
    way to variety. Similarity is cosine over node embeddings when every node has one,
    else Jaccard over word sets. Scores are unchanged; the MMR position is recorded as
    ``mmr_rank``. ``lambda_`` defaults to the engine's (0.7); ``top_n`` keeps the first n.
    """

    lambda_: float | None = Field(default=None, ge=0, le=1, description="1 = relevance only, 0 = variety only.")
    top_n: int | None = Field(default=None, ge=1, description="Keep at most this many nodes.")

    @classmethod
    def class_name(cls) -> str:
        """Class name for serialisation."""
        return "ManowarMMRPostprocessor"

    def _postprocess_nodes(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
    ) -> list[NodeWithScore]:
        lam = self.lambda_ if self.lambda_ is not None else self._retrieval_config().mmr_lambda
        ordered = mmr_order(self._candidates(nodes), lambda_=lam, limit=self.top_n)
        if self.top_n:
            ordered = ordered[: self.top_n]
        return [with_trace(c.record, c.record.score, {"mmr_rank": c.trace["mmr_rank"]}) for c in ordered]


class ManowarPackerPostprocessor(_ManowarPostprocessor):
    """Fit the nodes into a character budget with the engine's packer, inside the
    untrusted-content wrapper.

    Nodes are deduplicated by fingerprint and kept in the order they came in (the previous
    stage's ranking; ``keep_order=False``: by the packer's score: layer priority, retrieval
    score, query overlap, confidence, importance, recency) while they fit ``budget_chars``
    (default :data:`~manowar_memory.scoped.DOCUMENT_BUDGET_CHARS`, 4000; at most
    ``max_items``), with the packer's score as their score. The budget is the limit: no node
    is cut on its own unless ``max_item_chars`` is set; the last one that fits in part is
    cut to the room left. Each line is tagged with the node's own source (``source``,
    ``file_name``, ``title``, ``url`` metadata; :func:`~manowar_memory.scoped.document_label`). :attr:`last_result` holds the packed prompt (wrapped as
    ``pre_turn`` wraps it, see :func:`manowar_memory.scoped.pack_context`), the context
    usage and a decision per node (kept, duplicate, below_threshold, over_budget,
    max_items). ``mmr_lambda`` selects by MMR instead. ``max_items`` defaults to the
    engine's packer config (6).

    What reaches the LLM is wrapped too: each kept node's text (the packed, sanitised line
    with ``use_packed_text``, the default; else its own text) is put inside the
    untrusted-content markers, one delimiter per call, labelled with the node's trust. Node
    metadata can lower a node's trust (``external``) but never raise it (a document could
    claim ``trust: "system"``), so every node is wrapped; the
    markers come on top of ``budget_chars``, which bounds the packed lines. The node's
    metadata that LlamaIndex would show the LLM goes inside the wrapper too (before the
    text), and is excluded from LlamaIndex's own rendering, so nothing a document supplies
    reaches the prompt outside the markers.
    """

    max_items: int | None = Field(default=None, ge=1)
    max_item_chars: int | None = Field(default=None, ge=20, description="Cut each node to this (None: the budget decides).")
    budget_chars: int = Field(default=DOCUMENT_BUDGET_CHARS, ge=2, description="Characters of the packed lines in all.")
    keep_order: bool = Field(default=True, description="Keep the order the nodes came in (False: the packer's score).")
    header: str | None = Field(default=None, description="First line of the packed prompt.")
    mmr_lambda: float | None = Field(default=None, ge=0, le=1)
    use_packed_text: bool = Field(default=True, description="Replace kept nodes' text with the packed line.")

    _last_result: PackResult | None = PrivateAttr(default=None)

    @classmethod
    def class_name(cls) -> str:
        """Class name for serialisation."""
        return "ManowarPackerPostprocessor"

    @property
    def last_result(self) -> PackResult | None:
        """The packer's result of the latest call: prompt, items, decisions, omitted, context usage."""
        return self._last_result

    def pack_nodes(self, nodes: list[NodeWithScore], query: str = "") -> tuple[list[NodeWithScore], PackResult]:
        """Pack ``nodes`` for ``query``; returns the kept (wrapped) nodes and the full :class:`PackResult`."""
        packer = settings_surface(self.engine, self.scope).config.packer if self.engine is not None else None
        retrieval = self._retrieval_config()
        candidates = self._candidates(nodes)
        # the packer reports by candidate id: make ids unique when two nodes share one
        seen: dict[str, int] = {}
        for cand in candidates:
            count = seen.get(cand.id, 0)
            seen[cand.id] = count + 1
            if count:
                cand.id = f"{cand.id}#{count}"
        result = pack_context(
            query, candidates, scope=self.scope,
            max_items=self.max_items or (packer.max_items if packer else 6),
            max_item_chars=self.max_item_chars, budget_chars=self.budget_chars,
            header=self.header if self.header is not None else (packer.header if packer else "Memory context:"),
            mmr_lambda=self.mmr_lambda, default_trust=retrieval.default_trust, foreign=True,
            keep_order=self.keep_order,
        )
        by_id = {c.id: c for c in candidates}
        delimiter = content_delimiter()
        kept: list[NodeWithScore] = []
        for rank, item in enumerate(result.items):
            cand = by_id[item.id]
            text = item.text if self.use_packed_text else cand.text
            meta = cand.record.node.get_metadata_str(mode=MetadataMode.LLM)
            if meta:
                text = f"{meta}\n\n{text}"
            elif self.use_packed_text and (label := document_label(cand.metadata)):
                text = f"[{label}] {text}"
            node = with_trace(
                cand.record, item.score,
                {"pack_score": item.score, "pack_rank": rank, "pack_characters": item.characters,
                 "retrieval_score": cand.record.score if cand.record.score is not None else 0.0},
                text=wrap_untrusted(text, trust=item.trust, delimiter=delimiter),
            )
            node.node.excluded_llm_metadata_keys = list(node.node.metadata)  # rendered inside the wrapper
            kept.append(node)
        self._last_result = result
        return kept, result

    def _postprocess_nodes(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
    ) -> list[NodeWithScore]:
        kept, _ = self.pack_nodes(nodes, query_bundle.query_str if query_bundle is not None else "")
        return kept
