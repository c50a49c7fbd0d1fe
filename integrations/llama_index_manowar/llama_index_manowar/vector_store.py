"""``ManowarVectorStore``: a LlamaIndex vector store on the engine's memory rows.

>>> store = ManowarVectorStore(engine=engine, scope=scope)
>>> index = VectorStoreIndex.from_vector_store(store, embed_model=store.embed_model)
>>> index.insert(Document(text="...", metadata={"topic": "billing"}))
>>> index.as_retriever(filters=MetadataFilters(filters=[MetadataFilter(key="topic", value="billing")]))

How nodes map to rows: each node is one keyed engine memory row (``source="knowledge"``,
the vectors layer) written through the scoped surface (``engine.scoped(scope)``): its key
is the node id, its content the node's text, and its metadata the node's metadata plus
``ref_doc_id``/``doc_id``/``document_id``, ``li_collection`` (the store's collection) and
the serialised node (``_node_content``), so nodes come back whole. Re-adding a node id
replaces this scope's own row of that id and never another scope's (a user's store
shadows the agent's shared row with its own copy). ``delete``, ``delete_nodes`` and
``clear`` remove only rows this scope owns (same agent, user, mode and HAI). Queries run
the engine's hybrid search (keyword + vector lanes, RRF, decay) within the scope and
collection. A ``DEFAULT`` query (what ``VectorStoreIndex`` and ``VectorMemoryBlock`` send)
is a nearest-neighbour read: the nearest nodes even when no word matches; ``HYBRID``,
``TEXT_SEARCH`` and ``MMR`` run the engine's hybrid search (keyword + vector lanes). Every
similarity is relevance in [0, 1].

Trust is the application's: ``ManowarVectorStore(trust="external")`` marks every row it
writes; node metadata may not set ``trust``, ``status`` or the engine's other reserved keys
(:class:`~manowar_memory.InvalidInputError`).

Vector spaces never mix: the engine embeds what it stores and searches with its own
embedder, and this store checks that vectors LlamaIndex computed (node embeddings on
add, the query embedding on query) come from the same model. Use :attr:`embed_model`
(a :class:`~llama_index_manowar.ManowarEmbedding`) as the index's ``embed_model``, and
the check costs nothing (the engine's embedding cache answers it). Another model raises
:class:`~llama_index_manowar.errors.EmbeddingModelMismatchError`. ``check_embed_model=False``
skips the check (for example with custom ``embedding_strs`` in a ``QueryBundle``); the
store still never uses a foreign vector, it searches with ``query_str``.

Filters: LlamaIndex ``MetadataFilters`` (EQ, NE, IN, NIN, GT, GTE, LT, LTE, combined with
AND/OR, nested) become the engine's filter language on the nodes' metadata
(:mod:`llama_index_manowar.filters`); anything else raises
:class:`~llama_index_manowar.errors.UnsupportedFilterError`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from typing import Any, Literal

import numpy as np
from llama_index.core.bridge.pydantic import ConfigDict, Field, PrivateAttr
from llama_index.core.schema import BaseNode, MetadataMode, TextNode
from llama_index.core.vector_stores.types import (
    BasePydanticVectorStore,
    MetadataFilters,
    VectorStoreQuery,
    VectorStoreQueryMode,
    VectorStoreQueryResult,
)
from llama_index.core.vector_stores.utils import metadata_dict_to_node, node_to_metadata_dict

from manowar_memory.candidates import relevance, vector_relevance
from manowar_memory.embeddings.base import InputType
from manowar_memory.errors import InvalidInputError, ScopeError
from manowar_memory.filters import FilterValue
from manowar_memory.records import MemoryRecord
from manowar_memory.scoped import DOC_KEY, ScopedMemory, check_metadata, shortfall
from manowar_memory.scoped import RESERVED_METADATA_KEYS as ENGINE_RESERVED_KEYS

from ._fields import EngineField, ScopeField
from .embeddings import ManowarEmbedding
from .errors import EmbeddingModelMismatchError
from .filters import MATCH_NOTHING, merge_filters, translate_filters

__all__ = ["RESERVED_METADATA_KEYS", "SUPPORTED_QUERY_MODES", "ManowarVectorStore"]

COLLECTION_KEY = "li_collection"
RESERVED_METADATA_KEYS = ENGINE_RESERVED_KEYS | frozenset({
    # the engine ranks or classifies rows by these
    "retention", "factType", "confidence", "importance", "layer",
    # this store's own bookkeeping
    COLLECTION_KEY,
})
"""Node metadata keys that would change how the engine treats a row (trust, status, ranking
inputs, this store's bookkeeping), so they are refused."""

SUPPORTED_QUERY_MODES = (
    VectorStoreQueryMode.DEFAULT, VectorStoreQueryMode.HYBRID, VectorStoreQueryMode.TEXT_SEARCH,
    VectorStoreQueryMode.MMR,
)
"""Query modes served: DEFAULT is nearest-neighbour; the others run the engine's hybrid search (MMR adds
the engine's MMR stage)."""



def _cosine(a: Sequence[float], b: Sequence[float]) -> float:
    va, vb = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    na, nb = float(np.linalg.norm(va)), float(np.linalg.norm(vb))
    if na == 0.0 or nb == 0.0:
        return 1.0 if na == nb else 0.0
    return float(va @ vb / (na * nb))


class ManowarVectorStore(BasePydanticVectorStore):
    """A ``stores_text`` vector store whose rows are the engine's memory rows of one scope.

    Options: ``collection`` (rows of different collections never see each other; default
    ``"llamaindex"``), ``trust`` (the trust level of the rows it writes, set by the
    application: ``"system"``, ``"learned"`` or ``"external"``; default: the engine's),
    ``check_embed_model`` (see the module docs; on by default) and ``similarity_tolerance``
    (the cosine two vectors of one text by one model must reach). The degradations of the
    latest query are in :attr:`last_degradations`. Unknown keyword arguments raise.

    One store can serve every user of an app: built with an agent-level scope (no user) and
    ``per_call_user=True``, every call names its user with ``user_id=`` (``add``, ``query``,
    ``get_nodes``, the deletes, ``clear``; an index passes it with
    ``index.as_retriever(vector_store_kwargs={"user_id": ...})``), and a call naming none
    raises :class:`~manowar_memory.ScopeError`. A store built with a user scope is bound to
    that user: ``user_id`` naming another raises :class:`~manowar_memory.ScopeError`, as it
    does on an agent-level store without ``per_call_user``.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    stores_text: bool = True
    is_embedding_query: bool = True
    flat_metadata: bool = False

    engine: EngineField
    scope: ScopeField
    collection: str = Field(default="llamaindex", min_length=1, description="Namespace of this store's rows.")
    trust: Literal["system", "learned", "external"] | None = Field(
        default=None, description="Trust level of the rows written (the application's choice).",
    )
    check_embed_model: bool = Field(default=True, description="Check that LlamaIndex vectors come from the engine's model.")
    similarity_tolerance: float = Field(default=0.99, gt=0, le=1)
    per_call_user: bool = Field(default=False, description="Let each call name its user (agent-level scopes only).")

    _memory: ScopedMemory = PrivateAttr()
    _last_degradations: list[str] = PrivateAttr(default_factory=list)
    _last_shortfall: str | None = PrivateAttr(default=None)

    def __init__(self, **data: Any) -> None:
        super().__init__(**data)
        # outside pydantic's validation, so the ScopeError itself reaches the caller
        if self.per_call_user and self.scope.user_address is not None:
            raise ScopeError(
                f"per_call_user=True needs an agent-level scope (no user); this store is bound to user "
                f"{self.scope.user_address!r}, which a call cannot change"
            )

    def model_post_init(self, context: Any, /) -> None:
        """Bind the store to its scope through the engine's scoped surface."""
        super().model_post_init(context)
        self._memory = self.engine.scoped(self.scope, trust=self.trust)

    def memory_for(self, user_id: str | None = None) -> ScopedMemory:
        """The scoped surface of one call (``ScopedMemory.for_user``; see the class docstring)."""
        return self._memory.for_user(user_id, per_call_user=self.per_call_user)

    @classmethod
    def class_name(cls) -> str:
        """Class name for serialisation."""
        return "ManowarVectorStore"

    @property
    def client(self) -> Any:
        """The engine."""
        return self.engine

    @property
    def memory(self) -> ScopedMemory:
        """The scoped surface every read and write goes through."""
        return self._memory

    @property
    def embed_model(self) -> ManowarEmbedding:
        """The engine's embedder as a LlamaIndex embedding: the ``embed_model`` to build indexes with."""
        return ManowarEmbedding(engine=self.engine)

    @property
    def last_shortfall(self) -> str | None:
        """Why the latest query returned fewer than ``similarity_top_k`` nodes (None when it did not)."""
        return self._last_shortfall

    @property
    def last_degradations(self) -> list[str]:
        """Degradations of the latest query (for example a vector lane that fell back to keywords)."""
        return list(self._last_degradations)

    # ---------------------------------------------------------------- embedding checks
    def _mismatch(self, what: str, detail: str) -> EmbeddingModelMismatchError:
        return EmbeddingModelMismatchError(
            f"{what} does not come from the engine's embedder {self._memory.model_id} ({detail}); vectors of "
            "different models must never mix. Build the index or memory block with "
            "embed_model=store.embed_model (ManowarEmbedding), or give the engine the same model "
            "(MemoryEngine(embedder=LlamaIndexEmbedder(your_embed_model)))."
        )

    def _check_vector(
        self, what: str, vector: Sequence[float], texts: Sequence[str], input_type: InputType
    ) -> None:
        if self._memory.model_id is None:
            raise EmbeddingModelMismatchError(
                f"{what} was computed by LlamaIndex, but the engine is keyword-only (embedder=None) and would "
                "drop it; give the engine an embedder, or pass check_embed_model=False for keyword-only search"
            )
        embedder = self.embed_model.embedder
        for text in dict.fromkeys(t for t in texts if t):
            ours = embedder.embed([text], input_type=input_type)[0]
            if len(ours) != len(vector):
                raise self._mismatch(what, f"{len(vector)} dimensions, the engine's have {len(ours)}")
            if _cosine(ours, vector) >= self.similarity_tolerance:
                return
        raise self._mismatch(what, f"cosine with the engine's own vector is below {self.similarity_tolerance}")

    # ---------------------------------------------------------------- writes
    def _item(self, node: BaseNode) -> dict[str, Any]:
        text = node.get_content(metadata_mode=MetadataMode.NONE)
        if not text.strip():
            raise InvalidInputError(f"node {node.node_id!r} has no text; the engine stores text rows only")
        check_metadata(node.metadata, what=f"metadata of node {node.node_id!r}")
        reserved = sorted(RESERVED_METADATA_KEYS & set(node.metadata))
        if reserved:
            raise InvalidInputError(
                f"node {node.node_id!r} has metadata key(s) {reserved}, reserved by the engine "
                f"({sorted(RESERVED_METADATA_KEYS)}); rename them"
            )
        metadata = node_to_metadata_dict(node, remove_text=True, flat_metadata=self.flat_metadata)
        metadata[COLLECTION_KEY] = self.collection
        return {"key": node.node_id, "content": text, "metadata": metadata}

    def _check_node(self, node: BaseNode) -> None:
        if not self.check_embed_model or node.embedding is None:
            return
        # VectorStoreIndex embeds the text with metadata (EMBED mode); VectorMemoryBlock the bare text
        texts = [node.get_content(metadata_mode=MetadataMode.EMBED), node.get_content(metadata_mode=MetadataMode.NONE)]
        self._check_vector(f"the embedding of node {node.node_id!r}", node.embedding, texts, "document")

    def _collection(self) -> dict[str, FilterValue]:
        return {f"metadata.{COLLECTION_KEY}": self.collection}

    def add(self, nodes: Sequence[BaseNode], **add_kwargs: Any) -> list[str]:
        """Store nodes as this scope's rows (a node id added again replaces this scope's own
        row of that id, nothing else); returns the node ids."""
        memory = self.memory_for(add_kwargs.get("user_id"))
        if not nodes:
            return []
        items = [self._item(node) for node in nodes]
        for node in nodes:
            self._check_node(node)
        return memory.upsert(items, source="knowledge", key_filters=self._collection())

    async def async_add(self, nodes: Sequence[BaseNode], **kwargs: Any) -> list[str]:
        """Async twin of :meth:`add`."""
        return await asyncio.to_thread(self.add, nodes, **kwargs)

    def delete(self, ref_doc_id: str, **delete_kwargs: Any) -> None:
        """Hard-delete this scope's rows of the document ``ref_doc_id``."""
        self.memory_for(delete_kwargs.get("user_id")).delete_owned(
            filters={**self._collection(), "metadata.ref_doc_id": ref_doc_id})

    async def adelete(self, ref_doc_id: str, **delete_kwargs: Any) -> None:
        """Async twin of :meth:`delete`."""
        await asyncio.to_thread(self.delete, ref_doc_id, **delete_kwargs)

    def delete_nodes(
        self, node_ids: list[str] | None = None, filters: MetadataFilters | None = None, **delete_kwargs: Any
    ) -> None:
        """Hard-delete this scope's rows of ``node_ids`` and/or matching ``filters`` (at least
        one is required; use :meth:`clear` to empty the collection)."""
        memory = self.memory_for(delete_kwargs.get("user_id"))
        if not node_ids and filters is None:
            if node_ids is not None:
                return  # an empty list deletes nothing
            raise InvalidInputError("delete_nodes needs node_ids or filters; use clear() to delete every node")
        merged = merge_filters(self._collection(), translate_filters(filters))
        if merged is MATCH_NOTHING:
            return
        if node_ids:
            memory.delete_keys(node_ids, filters=merged)
        else:
            memory.delete_owned(filters=merged)

    async def adelete_nodes(
        self, node_ids: list[str] | None = None, filters: MetadataFilters | None = None, **delete_kwargs: Any
    ) -> None:
        """Async twin of :meth:`delete_nodes`."""
        await asyncio.to_thread(self.delete_nodes, node_ids, filters, **delete_kwargs)

    def clear(self, *, user_id: str | None = None) -> None:
        """Hard-delete every row of this collection that this scope owns (rows of other modes,
        HAIs or users, and the agent's shared rows, stay)."""
        self.memory_for(user_id).delete_owned(filters=self._collection())

    async def aclear(self, *, user_id: str | None = None) -> None:
        """Async twin of :meth:`clear`."""
        await asyncio.to_thread(self.clear, user_id=user_id)

    # ---------------------------------------------------------------- reads
    def _to_node(self, record: MemoryRecord) -> BaseNode:
        metadata = record.metadata
        if "_node_content" in metadata:
            return metadata_dict_to_node(metadata, text=record.content)
        visible = {k: v for k, v in metadata.items() if k not in RESERVED_METADATA_KEYS}
        return TextNode(id_=str(metadata.get(DOC_KEY) or record.id), text=record.content, metadata=visible)

    @staticmethod
    def _own_copies_first(memory: ScopedMemory, records: Iterable[MemoryRecord]) -> list[MemoryRecord]:
        """One row per node id: this scope's own copy where it shadows a shared one."""
        best: dict[str, MemoryRecord] = {}
        order: list[str] = []
        for rec in records:
            key = str(rec.metadata.get(DOC_KEY) or rec.id)
            if key not in best:
                order.append(key)
                best[key] = rec
            elif memory.owns(rec) and not memory.owns(best[key]):
                best[key] = rec
        return [best[k] for k in order]

    def get_nodes(
        self, node_ids: list[str] | None = None, filters: MetadataFilters | None = None, limit: int = 10_000,
        *, user_id: str | None = None,
    ) -> list[BaseNode]:
        """Nodes by id and/or filters, newest first (at most ``limit``)."""
        memory = self.memory_for(user_id)
        merged = merge_filters(self._collection(), translate_filters(filters))
        if merged is MATCH_NOTHING or (node_ids is not None and not node_ids):
            return []
        if node_ids is not None:
            found = memory.get_keys(node_ids, filters=merged)
            return [self._to_node(found[k]) for k in dict.fromkeys(node_ids) if k in found][:limit]
        rows = self._own_copies_first(memory, memory.list(filters=merged, limit=limit))
        return [self._to_node(row) for row in rows]

    async def aget_nodes(
        self, node_ids: list[str] | None = None, filters: MetadataFilters | None = None,
        *, user_id: str | None = None,
    ) -> list[BaseNode]:
        """Async twin of :meth:`get_nodes`."""
        return await asyncio.to_thread(self.get_nodes, node_ids, filters, user_id=user_id)

    def _query_filters(self, query: VectorStoreQuery) -> dict[str, FilterValue] | None:
        parts: list[dict[str, FilterValue] | None] = [self._collection(), translate_filters(query.filters)]
        if query.doc_ids:
            parts.append({"metadata.ref_doc_id": tuple(query.doc_ids)})
        if query.node_ids:  # VectorStoreIndex passes [] for "no restriction"
            parts.append({f"metadata.{DOC_KEY}": tuple(query.node_ids)})
        return merge_filters(*parts)

    def query(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        """The ``similarity_top_k`` nodes of this collection nearest to the query.

        ``DEFAULT`` mode is a plain nearest-neighbour read (``ScopedMemory.similar``): the
        nearest nodes by cosine, whatever their words, with ``query_str`` (the engine embeds
        it) or, without one, ``query_embedding`` (it must come from the engine's model).
        ``HYBRID``, ``TEXT_SEARCH`` and ``MMR`` run the engine's hybrid search and need
        ``query_str``. Similarities are relevance in [0, 1] in every mode
        (:func:`manowar_memory.candidates.relevance`; nearest-neighbour: ``(1 + cosine) / 2``).
        Why fewer than ``similarity_top_k`` came back is in :attr:`last_shortfall`."""
        memory = self.memory_for(kwargs.get("user_id"))
        if query.mode not in SUPPORTED_QUERY_MODES:
            raise InvalidInputError(
                f"query mode {query.mode.value!r} is not supported; ManowarVectorStore serves "
                f"{[m.value for m in SUPPORTED_QUERY_MODES]}"
            )
        text = (query.query_str or "").strip()
        nearest = query.mode == VectorStoreQueryMode.DEFAULT
        if not text and not (nearest and query.query_embedding is not None):
            raise InvalidInputError(
                f"query mode {query.mode.value!r} needs query_str (the engine's hybrid search reads text); the "
                "default mode also takes query_embedding alone"
            )
        k = max(1, query.similarity_top_k)
        filters = self._query_filters(query)
        self._last_degradations = []
        if filters is MATCH_NOTHING:
            self._last_shortfall = shortfall(k, found=0, kept=0, what="nodes")
            return VectorStoreQueryResult(nodes=[], similarities=[], ids=[])
        if self.check_embed_model and query.query_embedding is not None and text:
            self._check_vector("the query embedding", query.query_embedding, [text], "query")
        scores: dict[int, float] = {}
        if nearest:
            vector = None if text else list(query.query_embedding or [])
            pairs = memory.similar(text or None, k=2 * k, filters=filters, vector=vector)  # room for shadowed rows
            records = [rec for rec, _ in pairs]
            scores = {id(rec): vector_relevance(cos) for rec, cos in pairs}
        else:
            hits = memory.search(text, layers=("vectors",), k=k, filters=filters,
                                 mmr=query.mode == VectorStoreQueryMode.MMR)
            self._last_degradations = list(hits.degradations)
            records = [c.record for c in hits]
            scores = {id(c.record): relevance(c) for c in hits}
        rows = self._own_copies_first(memory, records)[:k]
        self._last_shortfall = shortfall(k, found=len(rows), kept=len(rows), what="nodes")
        nodes = [self._to_node(row) for row in rows]
        return VectorStoreQueryResult(
            nodes=nodes, similarities=[scores[id(row)] for row in rows], ids=[n.node_id for n in nodes],
        )

    async def aquery(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        """Async twin of :meth:`query`."""
        return await asyncio.to_thread(self.query, query, **kwargs)
