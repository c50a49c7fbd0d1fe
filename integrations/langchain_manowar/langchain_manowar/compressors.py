"""Document compressors for any LangChain retrieval pipeline: temporal decay, rerank, MMR and the packer.

They take Documents from any retriever (ours, a vector store's, BM25...), so they work in
``ContextualCompressionRetriever`` and ``DocumentCompressorPipeline``
(``langchain_classic.retrievers``) or on their own. Each returns new Documents (the input
is not modified) and writes what it did into the metadata:

* a numeric ``metadata["score"]`` is used as the relevance when every document has one;
  otherwise the retriever's order stands in (see each compressor);
* the creation time is read from ``created_at`` / ``createdAt`` / ``timestamp`` / ``date``
  / ``created`` (milliseconds, seconds, ISO text or datetime), or our ``provenance``;
* ``metadata["layer"]`` (one of the six layers) is used by the packer, else ``vectors``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from langchain_core.callbacks import Callbacks
from langchain_core.documents import BaseDocumentCompressor, Document
from langchain_core.embeddings import Embeddings
from pydantic import ConfigDict, Field, field_validator

from manowar_memory import Candidate
from manowar_memory.packing import PackResult
from manowar_memory.ranking import apply_decay, mmr_order, rerank_candidates
from manowar_memory.ranking.trust import TRUST_LEVELS, wrap_untrusted
from manowar_memory.rerankers import resolve_reranker
from manowar_memory.rerankers.base import Reranker
from manowar_memory.scoped import DOCUMENT_BUDGET_CHARS, pack_context

from ._convert import DEFAULT_TIME_KEYS, documents_to_candidates

__all__ = [
    "MMRCompressor",
    "PackerCompressor",
    "RerankCompressor",
    "TemporalDecayCompressor",
    "pack_documents",
    "render_memory_context",
]


def _rebuild(cand: Candidate, extra: dict[str, Any]) -> Document:
    doc: Document = cand.record
    return doc.model_copy(update={"metadata": {**doc.metadata, **extra}})


class TemporalDecayCompressor(BaseDocumentCompressor):
    """Weaken old documents: ``score × max(floor, 0.5 ** (age / half_life_days))``, then sort.

    The floor keeps an old but relevant document in play. Documents without a creation
    time keep their score (multiplier 1). Without scores on every document, the
    retriever's order gives them (``1 - i/n``). Writes ``score`` (decayed),
    ``score_before_decay`` and ``decay`` (the multiplier) into the metadata.
    """

    half_life_days: float = Field(30.0, gt=0)
    floor: float = Field(0.35, ge=0.0, le=1.0)
    score_key: str = "score"
    time_keys: tuple[str, ...] = DEFAULT_TIME_KEYS
    now_ms: int | None = None
    """Fixed "now" in milliseconds (tests); None uses the clock."""

    def compress_documents(
        self, documents: Sequence[Document], query: str, callbacks: Callbacks | None = None
    ) -> Sequence[Document]:
        """Decay, sort best first, and annotate."""
        cands, _ = documents_to_candidates(documents, score_key=self.score_key, time_keys=self.time_keys)
        before = {id(c): c.score for c in cands}
        ranked = apply_decay(cands, half_life_days=self.half_life_days, floor=self.floor, now=self.now_ms)
        return [
            _rebuild(c, {self.score_key: c.score, "score_before_decay": before[id(c)], "decay": c.trace["decay"]})
            for c in ranked
        ]


class RerankCompressor(BaseDocumentCompressor):
    """Rerank with a cross-encoder, with the engine's skip rule and fail-soft.

    ``reranker``: a manowar :class:`~manowar_memory.Reranker` or a provider string
    (``"cohere"``, ``"voyage"``, ``"cloudflare"``, ``"local:/path"``, ``"fake"``).
    Skipped (order kept) when there are fewer than ``min_candidates`` documents or the best
    score beats the second by ``dominance_delta``; on a timeout or provider error the
    incoming order is kept and the reason is reported. Without scores on every document
    all count as equal (no dominance), so the reranker decides. Writes ``rerank_status``
    (``reranked``, ``skipped: <reason>``, ``failed: <message>``), ``rerank_score`` (when
    reranked), ``score`` and, on failure, ``degradations``. ``top_n`` keeps the best n.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    reranker: Any
    top_n: int | None = Field(None, ge=1)
    timeout: float = Field(0.8, gt=0)
    min_candidates: int = Field(3, ge=2)
    dominance_delta: float = Field(0.05, ge=0)
    score_key: str = "score"

    @field_validator("reranker", mode="before")
    @classmethod
    def _resolve(cls, value: Any) -> Reranker:
        resolved = resolve_reranker(value)
        if resolved is None:
            raise ValueError("reranker is required: pass a Reranker or a provider string such as 'cohere'")
        return resolved

    def compress_documents(
        self, documents: Sequence[Document], query: str, callbacks: Callbacks | None = None
    ) -> Sequence[Document]:
        """Rerank (or keep the order and say why), best first, at most ``top_n``."""
        cands, _ = documents_to_candidates(documents, score_key=self.score_key, unscored="equal")
        if not cands:
            return []
        ranked, outcome = rerank_candidates(
            query, cands, self.reranker, timeout=self.timeout, min_candidates=self.min_candidates,
            dominance_delta=self.dominance_delta,
        )
        notes = [outcome.reason] if outcome.status == "failed" and outcome.reason else []
        status = outcome.status if outcome.reason is None else f"{outcome.status}: {outcome.reason}"
        out = []
        for c in ranked[: self.top_n] if self.top_n else ranked:
            extra: dict[str, Any] = {"rerank_status": status, self.score_key: c.score}
            if "rerank" in c.trace:
                extra["rerank_score"] = c.trace["rerank"]
            if notes:
                extra["degradations"] = list(notes)
            out.append(_rebuild(c, extra))
        return out


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    return float(a @ b / (na * nb)) if na and nb else 0.0


class MMRCompressor(BaseDocumentCompressor):
    """Order by maximal marginal relevance: ``λ·relevance − (1−λ)·max similarity to those picked``.

    Similarity is cosine over ``embeddings`` when given (any LangChain Embeddings), else
    Jaccard over word sets. Relevance is ``metadata["score"]`` when every document has one;
    otherwise cosine to the query (with ``embeddings``) or the retriever's order. ``k``
    keeps the first k. Writes ``mmr_rank``.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    lambda_mult: float = Field(0.7, ge=0.0, le=1.0)
    k: int | None = Field(None, ge=1)
    embeddings: Embeddings | None = None
    score_key: str = "score"

    def _order(self, documents: Sequence[Document], query: str, vectors: list[list[float]] | None,
               query_vector: list[float] | None) -> list[Document]:
        cands, scored = documents_to_candidates(documents, score_key=self.score_key)
        if vectors is not None:
            for cand, vec in zip(cands, vectors, strict=True):
                cand.embedding = list(vec)
            if not scored and query_vector is not None:
                q = np.asarray(query_vector, dtype=np.float64)
                for cand in cands:
                    cand.score = _cosine(q, np.asarray(cand.embedding, dtype=np.float64))
        ordered = mmr_order(cands, lambda_=self.lambda_mult, limit=self.k)
        kept = ordered[: self.k] if self.k else ordered
        return [_rebuild(c, {"mmr_rank": c.trace["mmr_rank"]}) for c in kept]

    def compress_documents(
        self, documents: Sequence[Document], query: str, callbacks: Callbacks | None = None
    ) -> Sequence[Document]:
        """Reorder for variety; keep ``k``."""
        if not documents:
            return []
        vectors = query_vector = None
        if self.embeddings is not None:
            vectors = self.embeddings.embed_documents([d.page_content for d in documents])
            query_vector = self.embeddings.embed_query(query) if query else None
        return self._order(documents, query, vectors, query_vector)

    async def acompress_documents(
        self, documents: Sequence[Document], query: str, callbacks: Callbacks | None = None
    ) -> Sequence[Document]:
        """Async twin of :meth:`compress_documents` (embeds with the async API)."""
        if not documents:
            return []
        vectors = query_vector = None
        if self.embeddings is not None:
            vectors = await self.embeddings.aembed_documents([d.page_content for d in documents])
            query_vector = await self.embeddings.aembed_query(query) if query else None
        return self._order(documents, query, vectors, query_vector)


def pack_documents(
    documents: Sequence[Document],
    query: str,
    *,
    max_items: int = 6,
    max_item_chars: int | None = None,
    budget_chars: int = DOCUMENT_BUDGET_CHARS,
    header: str = "Memory context:",
    mmr_lambda: float | None = None,
    score_key: str = "score",
    layer_key: str = "layer",
    default_layer: str = "vectors",
    keep_order: bool = True,
) -> tuple[PackResult, list[Document]]:
    """Run the engine's packer over any Documents (:func:`manowar_memory.scoped.pack_context`):
    the :class:`PackResult` (prompt, items, decisions, context usage) and the kept Documents in
    packed order, annotated.

    The prompt is always inside the untrusted-content wrapper, as ``pre_turn`` packs it:
    a document's own metadata cannot lift it out, since it comes from a retriever, not from
    the application; a ``trust`` it states can only lower its label (``external`` documents
    are labelled ``external``, see :func:`manowar_memory.scoped.pack_context`).

    RAG defaults: ``budget_chars`` (:data:`~manowar_memory.scoped.DOCUMENT_BUDGET_CHARS`,
    4000) is the one limit: documents are not cut one by one (``max_item_chars=None``; set it
    to cut each), the last one that fits in part is cut to the room left; ``keep_order`` keeps
    the order the retriever (or the previous compressor) chose (``False``: the packer's own
    score order); each line is tagged with the document's own source
    (:func:`~manowar_memory.scoped.document_label`, else its layer), inside the
    untrusted-content wrapper with its text."""
    cands, _ = documents_to_candidates(documents, score_key=score_key, layer_key=layer_key,
                                       default_layer=default_layer)
    result = pack_context(query, cands, max_items=max_items, max_item_chars=max_item_chars,
                          budget_chars=budget_chars, header=header, mmr_lambda=mmr_lambda, foreign=True,
                          keep_order=keep_order)
    by_id = {c.id: c for c in cands}
    kept = []
    for item in result.items:
        cand = by_id[item.id]
        kept.append(_rebuild(cand, {
            "packed_text": item.text, "packed_line": item.line,
            "packed_score": item.score, "packed_characters": item.characters, "packed_trust": item.trust,
            "layer": item.layer,
        }))
    return result, kept


def render_memory_context(documents: Sequence[Document], header: str = "Memory context:") -> str:
    """The prompt block of documents returned by :class:`PackerCompressor`: the header and the
    packed lines inside the untrusted-content wrapper (as the packer rendered them; a fresh
    random delimiter)."""
    packed = [d for d in documents if "packed_line" in d.metadata]
    if not packed:
        return ""
    levels = {str(d.metadata.get("packed_trust") or "learned") for d in packed}
    plain = [d.metadata["packed_line"] for d in packed if d.metadata.get("packed_trust") == "system"]
    inside = [d.metadata["packed_line"] for d in packed if d.metadata.get("packed_trust") != "system"]
    lines = list(plain)
    if inside:
        trust = ", ".join(t for t in TRUST_LEVELS if t in levels and t != "system")
        lines.append(wrap_untrusted("\n".join(inside), trust=trust))
    return header + "\n" + "\n".join(lines)


class PackerCompressor(BaseDocumentCompressor):
    """Keep what fits a character budget, as the engine's packer does.

    Deduplicates by fingerprint and packs at most ``max_items`` lines into ``budget_chars``
    (header and the untrusted-content wrapper included: retrieved documents are data, never
    instructions), in the order the documents came in (``keep_order=False``: by the packer's
    score: layer priority, relevance, query overlap, confidence, importance, recency). The
    budget is the limit: no document is cut on its own unless ``max_item_chars`` is set; the
    last one that fits in part is cut to the room left. Each line is tagged with the
    document's own source (``metadata["source"]``, ``file_name``, ``title``, ``url``) inside
    the wrapper. Returns the kept documents in packed order with ``packed_line`` /
    ``packed_text`` / ``packed_score`` / ``packed_characters``; :func:`render_memory_context`
    turns them into the prompt block, and :func:`pack_documents` also gives the full accounting.
    """

    max_items: int = Field(6, ge=1)
    max_item_chars: int | None = Field(None, ge=20)
    budget_chars: int = Field(DOCUMENT_BUDGET_CHARS, ge=20)
    keep_order: bool = True
    header: str = "Memory context:"
    mmr_lambda: float | None = Field(None, ge=0.0, le=1.0)
    score_key: str = "score"
    layer_key: str = "layer"
    default_layer: str = "vectors"

    def compress_documents(
        self, documents: Sequence[Document], query: str, callbacks: Callbacks | None = None
    ) -> Sequence[Document]:
        """The documents that fit the budget, in packed order."""
        if not documents:
            return []
        _, kept = pack_documents(
            documents, query, max_items=self.max_items, max_item_chars=self.max_item_chars,
            budget_chars=self.budget_chars, header=self.header, mmr_lambda=self.mmr_lambda,
            score_key=self.score_key, layer_key=self.layer_key, default_layer=self.default_layer,
            keep_order=self.keep_order,
        )
        return kept

