"""``ManowarVectorStore``: a LlamaIndex vector store on the engine's memory rows.

>>> store = ManowarVectorStore(engine=engine, scope=scope)
>>> index = VectorStoreIndex.from_vector_store(store, embed_model=store.embed_model)
>>> index.insert(Document(text="...", metadata={"topic": "billing"}))
>>> index.as_retriever(filters=MetadataFilters(filters=[MetadataFilter(key="topic", value="billing")]))

How nodes map to rows: each node is one engine memory row (``source="knowledge"``, the
vectors layer) in the store's scope. The row's content is the node's text, and its
metadata is the node's metadata plus ``node_id``, ``ref_doc_id``/``doc_id``/``document_id``,
``li_collection`` (the store's collection) and the serialised node (``_node_content``), so
nodes come back whole. Re-adding a node id replaces its row. Queries run the engine's
hybrid search (keyword + vector lanes, RRF, decay) within the scope and collection, so
``VectorStoreIndex`` and ``VectorMemoryBlock`` get the engine's ranking and filters.

Vector spaces never mix: the engine embeds what it stores and searches with its own
embedder, and this store checks that vectors LlamaIndex computed (node embeddings on
add, the query embedding on query) come from the same model. Use :attr:`embed_model`
(a :class:`~llama_index_manowar.ManowarEmbedding`) as the index's ``embed_model``, and
the check costs nothing (the engine's embedding cache answers it). Another model raises
:class:`~llama_index_manowar.errors.EmbeddingModelMismatchError`. ``check_embed_model=False``
skips the check (for example with custom ``embedding_strs`` in a ``QueryBundle``); the
store still never uses a foreign vector, it searches with ``query_str``.

Filters: LlamaIndex ``MetadataFilters`` (EQ and IN, combined with AND) become the
engine's allowlisted ``metadata.*`` filters; anything else raises
:class:`~llama_index_manowar.errors.UnsupportedFilterError`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

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

from manowar_memory.embeddings.base import InputType
from manowar_memory.engine import IngestItem
from manowar_memory.errors import InvalidInputError
from manowar_memory.filters import FilterValue
from manowar_memory.records import MemoryRecord

from ._fields import EngineField, ScopeField
from .embeddings import ManowarEmbedding
from .errors import EmbeddingModelMismatchError
from .filters import MATCH_NOTHING, merge_filters, translate_filters

__all__ = ["RESERVED_METADATA_KEYS", "SUPPORTED_QUERY_MODES", "ManowarVectorStore"]

COLLECTION_KEY = "li_collection"
NODE_ID_KEY = "node_id"
RESERVED_METADATA_KEYS = frozenset({
    # the engine reads these from row metadata (status hides rows; confidence/importance rank them)
    "status", "deletedAt", "retention", "factHash", "factType", "confidence", "importance", "layer",
    # this store's own bookkeeping
    COLLECTION_KEY, NODE_ID_KEY,
})
"""Node metadata keys that would change how the engine treats a row, so they are refused."""

SUPPORTED_QUERY_MODES = (
    VectorStoreQueryMode.DEFAULT, VectorStoreQueryMode.HYBRID, VectorStoreQueryMode.TEXT_SEARCH,
    VectorStoreQueryMode.MMR,
)
"""Query modes served: all run the engine's hybrid search (MMR adds the engine's MMR stage)."""

_PAGE = 500


def _cosine(a: Sequence[float], b: Sequence[float]) -> float:
    va, vb = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    na, nb = float(np.linalg.norm(va)), float(np.linalg.norm(vb))
    if na == 0.0 or nb == 0.0:
        return 1.0 if na == nb else 0.0
    return float(va @ vb / (na * nb))


class ManowarVectorStore(BasePydanticVectorStore):
    """A ``stores_text`` vector store whose rows are the engine's memory rows of one scope.

    Options: ``collection`` (rows of different collections never see each other; default
    ``"llamaindex"``), ``check_embed_model`` (see the module docs; on by default) and
    ``similarity_tolerance`` (the cosine two vectors of one text by one model must reach).
    The degradations of the latest query are in :attr:`last_degradations`.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    stores_text: bool = True
    is_embedding_query: bool = True
    flat_metadata: bool = False

    engine: EngineField
    scope: ScopeField
    collection: str = Field(default="llamaindex", min_length=1, description="Namespace of this store's rows.")
    check_embed_model: bool = Field(default=True, description="Check that LlamaIndex vectors come from the engine's model.")
    similarity_tolerance: float = Field(default=0.99, gt=0, le=1)

    _last_degradations: list[str] = PrivateAttr(default_factory=list)

    @classmethod
    def class_name(cls) -> str:
        """Class name for serialisation."""
        return "ManowarVectorStore"

    @property
    def client(self) -> Any:
        """The engine."""
        return self.engine

    @property
    def embed_model(self) -> ManowarEmbedding:
        """The engine's embedder as a LlamaIndex embedding: the ``embed_model`` to build indexes with."""
        return ManowarEmbedding(engine=self.engine)

    @property
    def last_degradations(self) -> list[str]:
        """Degradations of the latest query (for example a vector lane that fell back to keywords)."""
        return list(self._last_degradations)

    # ---------------------------------------------------------------- embedding checks
    def _mismatch(self, what: str, detail: str) -> EmbeddingModelMismatchError:
        return EmbeddingModelMismatchError(
            f"{what} does not come from the engine's embedder {self.engine.model_id} ({detail}); vectors of "
            "different models must never mix. Build the index or memory block with "
            "embed_model=store.embed_model (ManowarEmbedding), or give the engine the same model "
            "(MemoryEngine(embedder=LlamaIndexEmbedder(your_embed_model)))."
        )

    def _check_vector(
        self, what: str, vector: Sequence[float], texts: Sequence[str], input_type: InputType
    ) -> None:
        embedder = self.engine.embedder
        if embedder is None:
            raise EmbeddingModelMismatchError(
                f"{what} was computed by LlamaIndex, but the engine is keyword-only (embedder=None) and would "
                "drop it; give the engine an embedder, or pass check_embed_model=False for keyword-only search"
            )
        for text in dict.fromkeys(t for t in texts if t):
            ours = embedder.embed([text], input_type=input_type)[0]
            if len(ours) != len(vector):
                raise self._mismatch(what, f"{len(vector)} dimensions, the engine's have {len(ours)}")
            if _cosine(ours, vector) >= self.similarity_tolerance:
                return
        raise self._mismatch(what, f"cosine with the engine's own vector is below {self.similarity_tolerance}")

    # ---------------------------------------------------------------- writes
    def _row(self, node: BaseNode) -> IngestItem:
        text = node.get_content(metadata_mode=MetadataMode.NONE)
        if not text.strip():
            raise InvalidInputError(f"node {node.node_id!r} has no text; the engine stores text rows only")
        reserved = sorted(RESERVED_METADATA_KEYS & set(node.metadata))
        if reserved:
            raise InvalidInputError(
                f"node {node.node_id!r} has metadata key(s) {reserved}, reserved by the engine "
                f"({sorted(RESERVED_METADATA_KEYS)}); rename them"
            )
        metadata = node_to_metadata_dict(node, remove_text=True, flat_metadata=self.flat_metadata)
        metadata[NODE_ID_KEY] = node.node_id
        metadata[COLLECTION_KEY] = self.collection
        return IngestItem(content=text, source="knowledge", metadata=metadata)

    def _check_node(self, node: BaseNode) -> None:
        if not self.check_embed_model or node.embedding is None:
            return
        # VectorStoreIndex embeds the text with metadata (EMBED mode); VectorMemoryBlock the bare text
        texts = [node.get_content(metadata_mode=MetadataMode.EMBED), node.get_content(metadata_mode=MetadataMode.NONE)]
        self._check_vector(f"the embedding of node {node.node_id!r}", node.embedding, texts, "document")

    def add(self, nodes: Sequence[BaseNode], **add_kwargs: Any) -> list[str]:
        """Store nodes as memory rows (a node id added again replaces its row); returns the node ids."""
        if not nodes:
            return []
        rows = [self._row(node) for node in nodes]
        for node in nodes:
            self._check_node(node)
        new_ids = set(self.engine.ingest(self.scope, rows))
        # replace: drop older rows of the same node ids, only once the new rows are stored
        filters = self._owned_filters({f"metadata.{NODE_ID_KEY}": tuple(dict.fromkeys(n.node_id for n in nodes))})
        while True:
            listed = self.engine.list_items(self.scope, filters=filters, limit=len(new_ids) + _PAGE)
            old = [row for row in listed if row.id not in new_ids]
            if not old:
                break
            for row in old:
                self.engine.delete_item(self.scope, row.id, hard=True)
        return [node.node_id for node in nodes]

    async def async_add(self, nodes: Sequence[BaseNode], **kwargs: Any) -> list[str]:
        """Async twin of :meth:`add`."""
        return await asyncio.to_thread(self.add, nodes, **kwargs)

    def _owned_filters(self, extra: dict[str, FilterValue]) -> dict[str, FilterValue]:
        # only this store's rows, and only rows owned by this scope's user (a user's store
        # must not delete the agent's shared rows it can read)
        owned: dict[str, FilterValue] = {f"metadata.{COLLECTION_KEY}": self.collection}
        if self.scope.user_address is not None:
            owned["userAddress"] = self.scope.user_address
        return {**owned, **extra}

    def _delete_where(self, filters: dict[str, FilterValue]) -> int:
        merged = merge_filters(self._owned_filters({}), filters)
        return 0 if merged is MATCH_NOTHING else self._delete_filtered(merged)

    def _delete_filtered(self, filters: dict[str, FilterValue]) -> int:
        deleted = 0
        while True:
            rows = self.engine.list_items(self.scope, filters=filters, limit=_PAGE)
            removed = sum(1 for row in rows if self.engine.delete_item(self.scope, row.id, hard=True))
            deleted += removed
            if not rows or not removed:
                return deleted

    def delete(self, ref_doc_id: str, **delete_kwargs: Any) -> None:
        """Hard-delete every row of the document ``ref_doc_id``."""
        self._delete_where({"metadata.ref_doc_id": ref_doc_id})

    async def adelete(self, ref_doc_id: str, **delete_kwargs: Any) -> None:
        """Async twin of :meth:`delete`."""
        await asyncio.to_thread(self.delete, ref_doc_id)

    def delete_nodes(
        self, node_ids: list[str] | None = None, filters: MetadataFilters | None = None, **delete_kwargs: Any
    ) -> None:
        """Hard-delete the rows of ``node_ids`` and/or matching ``filters`` (at least one is
        required; use :meth:`clear` to empty the collection)."""
        if not node_ids and filters is None:
            if node_ids is not None:
                return  # an empty list deletes nothing
            raise InvalidInputError("delete_nodes needs node_ids or filters; use clear() to delete every node")
        parts: list[dict[str, FilterValue] | None] = [self._owned_filters({}), translate_filters(filters)]
        if node_ids:
            parts.append({f"metadata.{NODE_ID_KEY}": tuple(node_ids)})
        merged = merge_filters(*parts)
        if merged is not MATCH_NOTHING:
            self._delete_filtered(merged)

    async def adelete_nodes(
        self, node_ids: list[str] | None = None, filters: MetadataFilters | None = None, **delete_kwargs: Any
    ) -> None:
        """Async twin of :meth:`delete_nodes`."""
        await asyncio.to_thread(self.delete_nodes, node_ids, filters)

    def clear(self) -> None:
        """Hard-delete every row of this collection owned by the scope."""
        self._delete_filtered(self._owned_filters({}))

    async def aclear(self) -> None:
        """Async twin of :meth:`clear`."""
        await asyncio.to_thread(self.clear)

    # ---------------------------------------------------------------- reads
    def _to_node(self, record: MemoryRecord) -> BaseNode:
        metadata = record.metadata
        if "_node_content" in metadata:
            return metadata_dict_to_node(metadata, text=record.content)
        visible = {k: v for k, v in metadata.items() if k not in (COLLECTION_KEY,)}
        return TextNode(id_=str(metadata.get(NODE_ID_KEY) or record.id), text=record.content, metadata=visible)

    def get_nodes(
        self, node_ids: list[str] | None = None, filters: MetadataFilters | None = None, limit: int = 10_000
    ) -> list[BaseNode]:
        """Nodes by id and/or filters, newest first (at most ``limit``)."""
        parts: list[dict[str, FilterValue] | None] = [
            {f"metadata.{COLLECTION_KEY}": self.collection}, translate_filters(filters),
        ]
        if node_ids is not None:
            if not node_ids:
                return []
            parts.append({f"metadata.{NODE_ID_KEY}": tuple(node_ids)})
        merged = merge_filters(*parts)
        if merged is MATCH_NOTHING:
            return []
        rows = self.engine.list_items(self.scope, filters=merged, limit=limit)
        return [self._to_node(row) for row in rows]

    async def aget_nodes(
        self, node_ids: list[str] | None = None, filters: MetadataFilters | None = None
    ) -> list[BaseNode]:
        """Async twin of :meth:`get_nodes`."""
        return await asyncio.to_thread(self.get_nodes, node_ids, filters)

    def _query_filters(self, query: VectorStoreQuery) -> dict[str, FilterValue] | None:
        parts: list[dict[str, FilterValue] | None] = [
            {f"metadata.{COLLECTION_KEY}": self.collection}, translate_filters(query.filters),
        ]
        if query.doc_ids:
            parts.append({"metadata.ref_doc_id": tuple(query.doc_ids)})
        if query.node_ids:  # VectorStoreIndex passes [] for "no restriction"
            parts.append({f"metadata.{NODE_ID_KEY}": tuple(query.node_ids)})
        return merge_filters(*parts)

    def query(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        """The engine's hybrid search over this collection; similarities are the engine's scores."""
        if query.mode not in SUPPORTED_QUERY_MODES:
            raise InvalidInputError(
                f"query mode {query.mode.value!r} is not supported; ManowarVectorStore serves "
                f"{[m.value for m in SUPPORTED_QUERY_MODES]} (all through the engine's hybrid search)"
            )
        text = (query.query_str or "").strip()
        if not text:
            raise InvalidInputError(
                "ManowarVectorStore needs query_str: the engine searches with text (keyword lane) and embeds "
                "the query itself, so that a vector from another model is never used"
            )
        filters = self._query_filters(query)
        if filters is MATCH_NOTHING:
            self._last_degradations = []
            return VectorStoreQueryResult(nodes=[], similarities=[], ids=[])
        if self.check_embed_model and query.query_embedding is not None:
            self._check_vector("the query embedding", query.query_embedding, [text], "query")
        candidates, notes = self.engine.search(
            text, self.scope, layers=("vectors",), k=max(1, query.similarity_top_k), filters=filters,
            mmr=query.mode == VectorStoreQueryMode.MMR,
        )
        self._last_degradations = list(notes)
        nodes = [self._to_node(c.record) for c in candidates]
        return VectorStoreQueryResult(
            nodes=nodes, similarities=[c.score for c in candidates], ids=[n.node_id for n in nodes],
        )

    async def aquery(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        """Async twin of :meth:`query`."""
        return await asyncio.to_thread(self.query, query, **kwargs)
