"""``ManowarVectorStore``: a LangChain ``VectorStore`` whose documents are memories of one scope."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import VectorStore
from langchain_core.vectorstores.utils import maximal_marginal_relevance

from manowar_memory import InvalidInputError, MemoryEngine, MemoryRecord, Scope, ScopedMemory, ScopeError
from manowar_memory.candidates import vector_relevance
from manowar_memory.filters import conjoin, normalize_filters
from manowar_memory.scope import ScopeLike
from manowar_memory.scoped import DEFAULT_K, DOC_KEY, RESERVED_METADATA_KEYS, TrustLevel, check_metadata

from ._convert import coerce_scope
from .embeddings import LangChainEmbedder, ManowarEmbeddings

__all__ = ["DEFAULT_AGENT", "ManowarVectorStore"]

#: Metadata key marking the store's rows with its collection.
COLLECTION_KEY = "lc_collection"
#: Metadata key listing the document's own metadata keys (what comes back on a Document).
KEYS_KEY = "lc_keys"
_INTERNAL = frozenset({COLLECTION_KEY, KEYS_KEY})
_IN_MEMORY = "sqlite:///:memory:"
#: The agent of :meth:`ManowarVectorStore.from_texts` on its own in-memory engine, without ``scope=``.
DEFAULT_AGENT = "langchain-vectorstore"
_SEARCH_KWARGS = frozenset({"filter"})


def _check_kwargs(kwargs: Mapping[str, Any], allowed: Iterable[str] = ()) -> None:
    unknown = sorted(set(kwargs) - set(allowed))
    if unknown:
        raise TypeError(f"unknown keyword argument(s) {unknown}")


class ManowarVectorStore(VectorStore):
    """A LangChain vector store on a :class:`MemoryEngine`, for RAG over one scope's documents.

    Each document is a keyed row of the scope (``ScopedMemory.upsert``; the key is the
    document id; ``source="knowledge"``, so the engine's recall finds it in the vectors
    layer). Documents keep their id and their own metadata. Adding a document whose id
    exists replaces the scope's own row (a user scope never changes the agent's shared
    row: it writes its own copy). Without an id a uuid4 is given. ``delete(ids)`` removes
    the scope's own rows.

    Searches are plain nearest-neighbour reads with the engine's embedder
    (``ScopedMemory.similar``): the top ``k`` by cosine similarity, no keyword fusion,
    decay or score cut-off, as a LangChain vector store is expected to rank.
    Every score is relevance in [0, 1], ``(1 + cosine) / 2``
    (:func:`manowar_memory.candidates.vector_relevance`; 0.5 is an unrelated document):
    ``similarity_search_with_score`` and ``similarity_search_with_relevance_scores`` give the
    same number, and ``as_retriever(search_type="similarity_score_threshold",
    search_kwargs={"score_threshold": 0.75})`` compares with it. Fewer than ``k`` documents
    come back only when fewer documents of the collection match the filter (there is no
    score cut-off unless you ask for one). ``filter`` matches the documents' metadata in the engine's filter language
    (:mod:`manowar_memory.filters`): ``{"key": value}``, a list for any of several values, the
    operators ``$eq $ne $in $nin $gt $gte $lt $lte`` (``{"year": {"$gte": 2020}}``) and
    ``$and``/``$or`` groups, as LangChain's structured filters and langchain-mongodb write them;
    ``metadata.key`` is the same key as ``key``. Keys the engine reserves (``trust``,
    ``status``...) and unknown operators raise :class:`~manowar_memory.FilterError` (an
    :class:`~manowar_memory.InvalidInputError`), as does metadata that sets a reserved key.

    ``trust`` is the trust level of the documents written (the application's choice);
    ``collection`` keeps several stores apart in one scope.

    One store can serve every user of an app: built with an agent-level scope (no user) and
    ``per_call_user=True``, every call names its user with ``user_id=`` (writes, deletes,
    reads and searches; ``as_retriever().invoke(q, user_id=...)`` passes it on) and a call
    naming none raises :class:`~manowar_memory.ScopeError`. A store built with a user scope
    is bound to that user: ``user_id`` naming another raises
    :class:`~manowar_memory.ScopeError`, as it does on an agent-level store without
    ``per_call_user``.

    Example::

        store = ManowarVectorStore(engine=engine, scope=Scope(agent_wallet="kb"))
        store.add_documents([Document("Porto is in Portugal.", metadata={"topic": "geo"})])
        store.as_retriever(search_kwargs={"k": 2, "filter": {"topic": "geo"}}).invoke("Portugal")
    """

    def __init__(self, *, engine: MemoryEngine, scope: ScopeLike, trust: TrustLevel | None = None,
                 collection: str = "default", per_call_user: bool = False) -> None:
        if not isinstance(collection, str) or not collection.strip():
            raise InvalidInputError("collection must be a non-empty string")
        self.engine = engine
        self.memory: ScopedMemory = engine.scoped(coerce_scope(scope), trust=trust)
        if self.memory.embedder is None:
            raise InvalidInputError(
                "ManowarVectorStore needs an engine with an embedder (this one is keyword-only); use "
                "ManowarRetriever for keyword search"
            )
        if per_call_user and self.memory.scope.user_address is not None:
            raise ScopeError(
                f"per_call_user=True needs an agent-level scope (no user); this store is bound to user "
                f"{self.memory.scope.user_address!r}, which a call cannot change"
            )
        self.per_call_user = per_call_user
        self.collection = collection
        self._embeddings = ManowarEmbeddings(self.memory.embedder)

    # ---------------------------------------------------------------- helpers
    @property
    def embeddings(self) -> Embeddings:
        """The engine's embedder as LangChain ``Embeddings`` (the store embeds with it)."""
        return self._embeddings

    def memory_for(self, user_id: str | None = None) -> ScopedMemory:
        """The scoped surface of one call (``ScopedMemory.for_user``; see the class docstring)."""
        return self.memory.for_user(user_id, per_call_user=self.per_call_user)

    def _base(self) -> dict[str, Any]:
        return {f"metadata.{COLLECTION_KEY}": self.collection}

    def _filters(self, flt: Mapping[str, Any] | None) -> dict[str, Any]:
        if flt is not None and not isinstance(flt, Mapping):
            raise InvalidInputError(f"filter must be a mapping of metadata keys to values, got {type(flt).__name__}")
        own = normalize_filters(flt, documents=True, hidden=RESERVED_METADATA_KEYS | _INTERNAL)
        return conjoin(normalize_filters(self._base()), own)

    def _document(self, rec: MemoryRecord) -> Document:
        meta = rec.metadata
        keys = meta.get(KEYS_KEY)
        own = {k: meta[k] for k in keys if k in meta} if isinstance(keys, list) else {}
        return Document(id=str(meta.get(DOC_KEY) or rec.id), page_content=rec.content, metadata=own)

    def _items(self, texts: Sequence[str], metadatas: Sequence[Mapping[str, Any] | None] | None,
               ids: Sequence[str | None] | None) -> list[dict[str, Any]]:
        if isinstance(texts, str):
            raise InvalidInputError("texts must be a list of strings, not one string")
        metas = list(metadatas) if metadatas is not None else [None] * len(texts)
        keys = list(ids) if ids is not None else [None] * len(texts)
        if len(metas) != len(texts) or len(keys) != len(texts):
            raise InvalidInputError(f"got {len(texts)} texts, {len(metas)} metadatas and {len(keys)} ids")
        items = []
        for i, (text, meta, key) in enumerate(zip(texts, metas, keys, strict=True)):
            own = check_metadata(meta, what=f"metadatas[{i}]")
            clash = sorted(set(own) & _INTERNAL)
            if clash:
                raise InvalidInputError(f"metadatas[{i}] may not set {clash}: the store keeps its bookkeeping there")
            if key is not None and (not isinstance(key, str) or not key):
                raise InvalidInputError(f"ids[{i}] must be a non-empty string or None")
            items.append({"key": key or str(uuid.uuid4()), "content": text,
                          "metadata": {**own, COLLECTION_KEY: self.collection, KEYS_KEY: sorted(own)}})
        return items

    # ---------------------------------------------------------------- writes
    def add_texts(self, texts: Iterable[str], metadatas: list[dict[str, Any]] | None = None, *,
                  ids: list[str] | None = None, **kwargs: Any) -> list[str]:
        """Add (or replace, by id) texts with their metadata; returns their ids."""
        memory = self.memory_for(kwargs.pop("user_id", None))
        _check_kwargs(kwargs)
        items = self._items(list(texts), metadatas, ids)
        return memory.upsert(items, source="knowledge", key_filters=self._base())

    def add_documents(self, documents: list[Document], **kwargs: Any) -> list[str]:
        """Add (or replace, by id) documents; ``ids=`` or each document's ``id`` names them."""
        ids = kwargs.pop("ids", None)
        user = kwargs.pop("user_id", None)
        _check_kwargs(kwargs)
        if ids is None:
            ids = [d.id for d in documents]
        return self.add_texts([d.page_content for d in documents], [d.metadata for d in documents], ids=ids,
                              user_id=user)

    async def aadd_texts(self, texts: Iterable[str], metadatas: list[dict[str, Any]] | None = None, *,
                         ids: list[str] | None = None, **kwargs: Any) -> list[str]:
        """Async twin of :meth:`add_texts`."""
        memory = self.memory_for(kwargs.pop("user_id", None))
        _check_kwargs(kwargs)
        items = self._items(list(texts), metadatas, ids)
        return await memory.aupsert(items, source="knowledge", key_filters=self._base())

    async def aadd_documents(self, documents: list[Document], **kwargs: Any) -> list[str]:
        """Async twin of :meth:`add_documents`."""
        ids = kwargs.pop("ids", None)
        user = kwargs.pop("user_id", None)
        _check_kwargs(kwargs)
        if ids is None:
            ids = [d.id for d in documents]
        return await self.aadd_texts([d.page_content for d in documents], [d.metadata for d in documents], ids=ids,
                                     user_id=user)

    def delete(self, ids: list[str] | None = None, **kwargs: Any) -> bool | None:
        """Delete the scope's own documents with these ids (all of this collection's when None)."""
        memory = self.memory_for(kwargs.pop("user_id", None))
        _check_kwargs(kwargs)
        if ids is None:
            memory.delete_owned(filters=self._base())
            return True
        memory.delete_keys([str(i) for i in ids], filters=self._base())
        return True

    async def adelete(self, ids: list[str] | None = None, **kwargs: Any) -> bool | None:
        """Async twin of :meth:`delete`."""
        memory = self.memory_for(kwargs.pop("user_id", None))
        _check_kwargs(kwargs)
        if ids is None:
            await memory.adelete_owned(filters=self._base())
            return True
        await memory.adelete_keys([str(i) for i in ids], filters=self._base())
        return True

    # ---------------------------------------------------------------- reads
    def get_by_ids(self, ids: Sequence[str], /, *, user_id: str | None = None) -> list[Document]:
        """The documents with these ids that exist here, in the order asked."""
        found = self.memory_for(user_id).get_keys([str(i) for i in ids], filters=self._base())
        return [self._document(found[str(i)]) for i in dict.fromkeys(ids) if str(i) in found]

    async def aget_by_ids(self, ids: Sequence[str], /, *, user_id: str | None = None) -> list[Document]:
        """Async twin of :meth:`get_by_ids`."""
        found = await self.memory_for(user_id).aget_keys([str(i) for i in ids], filters=self._base())
        return [self._document(found[str(i)]) for i in dict.fromkeys(ids) if str(i) in found]

    def _pairs(self, query: str, k: int, flt: Mapping[str, Any] | None,
               user_id: str | None) -> list[tuple[MemoryRecord, float]]:
        return _relevance(self.memory_for(user_id).similar(query, k=k, filters=self._filters(flt)))

    def similarity_search_with_score(self, query: str, k: int = DEFAULT_K, filter: Mapping[str, Any] | None = None,  # noqa: A002
                                     **kwargs: Any) -> list[tuple[Document, float]]:
        """The ``k`` nearest documents with their relevance ``(1 + cosine) / 2`` in [0, 1], best first."""
        user = kwargs.pop("user_id", None)
        _check_kwargs(kwargs)
        return [(self._document(rec), score) for rec, score in self._pairs(query, k, filter, user)]

    async def asimilarity_search_with_score(self, query: str, k: int = DEFAULT_K,
                                            filter: Mapping[str, Any] | None = None,  # noqa: A002
                                            **kwargs: Any) -> list[tuple[Document, float]]:
        """Async twin of :meth:`similarity_search_with_score`."""
        memory = self.memory_for(kwargs.pop("user_id", None))
        _check_kwargs(kwargs)
        pairs = _relevance(await memory.asimilar(query, k=k, filters=self._filters(filter)))
        return [(self._document(rec), score) for rec, score in pairs]

    def similarity_search(self, query: str, k: int = DEFAULT_K, filter: Mapping[str, Any] | None = None,  # noqa: A002
                          **kwargs: Any) -> list[Document]:
        """The ``k`` nearest documents, best first (no score cut-off)."""
        return [doc for doc, _ in self.similarity_search_with_score(query, k, filter, **kwargs)]

    async def asimilarity_search(self, query: str, k: int = DEFAULT_K, filter: Mapping[str, Any] | None = None,  # noqa: A002
                                 **kwargs: Any) -> list[Document]:
        """Async twin of :meth:`similarity_search`."""
        return [doc for doc, _ in await self.asimilarity_search_with_score(query, k, filter, **kwargs)]

    def _select_relevance_score_fn(self) -> Callable[[float], float]:
        return lambda relevance: relevance  # the scores already are relevance in [0, 1]

    def max_marginal_relevance_search(self, query: str, k: int = DEFAULT_K, fetch_k: int = 20,
                                      lambda_mult: float = 0.5, filter: Mapping[str, Any] | None = None,  # noqa: A002
                                      **kwargs: Any) -> list[Document]:
        """``k`` documents picked among the ``fetch_k`` nearest for relevance and variety
        (``lambda_mult`` 1 is pure relevance, 0 pure variety)."""
        user = kwargs.pop("user_id", None)
        _check_kwargs(kwargs)
        pairs = self._pairs(query, max(k, fetch_k), filter, user)
        return self._mmr(query, pairs, k, lambda_mult)

    async def amax_marginal_relevance_search(self, query: str, k: int = DEFAULT_K, fetch_k: int = 20,
                                             lambda_mult: float = 0.5,
                                             filter: Mapping[str, Any] | None = None,  # noqa: A002
                                             **kwargs: Any) -> list[Document]:
        """Async twin of :meth:`max_marginal_relevance_search`."""
        memory = self.memory_for(kwargs.pop("user_id", None))
        _check_kwargs(kwargs)
        pairs = _relevance(await memory.asimilar(query, k=max(k, fetch_k), filters=self._filters(filter)))
        return self._mmr(query, pairs, k, lambda_mult)

    def _mmr(self, query: str, pairs: list[tuple[MemoryRecord, float]], k: int, lambda_mult: float) -> list[Document]:
        import numpy as np

        if not pairs:
            return []
        vectors = self._embeddings.embed_documents([rec.content for rec, _ in pairs])
        query_vector = self._embeddings.embed_query(query)
        picked = maximal_marginal_relevance(np.asarray(query_vector), vectors, lambda_mult=lambda_mult, k=k)
        return [self._document(pairs[i][0]) for i in picked]

    # ---------------------------------------------------------------- construction
    @classmethod
    def from_texts(cls, texts: list[str], embedding: Embeddings | None = None,
                   metadatas: list[dict[str, Any]] | None = None, *, ids: list[str] | None = None,
                   engine: MemoryEngine | None = None, scope: ScopeLike | None = None,
                   trust: TrustLevel | None = None, collection: str = "default", store: str = _IN_MEMORY,
                   **kwargs: Any) -> ManowarVectorStore:
        """A store holding ``texts``. With ``engine=`` the engine's embedder is used (``embedding``
        must then be None); without one an engine is made on ``store`` that embeds with
        ``embedding`` (wrapped in :class:`LangChainEmbedder`).

        ``scope``: whose documents these are. It may be left out only when the store is the
        store's own in-memory engine (``engine=None`` and the default ``store``, the way
        ``FAISS.from_texts(texts, embedding)`` is called): nobody else can read that engine,
        so its documents go to :data:`DEFAULT_AGENT` (no user). With an application's engine or
        a persistent ``store``, other scopes share the data, and ``scope`` is required: an
        agent-level default there would be read by every user of that agent."""
        _check_kwargs(kwargs)
        if scope is None:
            if engine is not None or store != _IN_MEMORY:
                raise InvalidInputError(
                    "from_texts needs scope= with engine= or a persistent store=: whose documents these are "
                    "(for example scope={'agent_wallet': 'kb', 'user_address': user_id}); only a store on its "
                    f"own in-memory engine defaults to agent {DEFAULT_AGENT!r}"
                )
            scope = Scope(agent_wallet=DEFAULT_AGENT)
        if engine is None:
            if embedding is None:
                raise InvalidInputError("pass engine= or an embedding to build one")
            engine = MemoryEngine(store=store, embedder=LangChainEmbedder(embedding))
        elif embedding is not None:
            raise InvalidInputError("with engine= the engine's embedder is used: pass embedding=None")
        vs = cls(engine=engine, scope=scope, trust=trust, collection=collection)
        vs.add_texts(texts, metadatas, ids=ids)
        return vs

    @classmethod
    async def afrom_texts(cls, texts: list[str], embedding: Embeddings | None = None,
                          metadatas: list[dict[str, Any]] | None = None, **kwargs: Any) -> ManowarVectorStore:
        """Async twin of :meth:`from_texts`."""
        import asyncio

        return await asyncio.to_thread(lambda: cls.from_texts(texts, embedding, metadatas, **kwargs))




def _relevance(pairs: list[tuple[MemoryRecord, float]]) -> list[tuple[MemoryRecord, float]]:
    return [(rec, vector_relevance(cosine)) for rec, cosine in pairs]
