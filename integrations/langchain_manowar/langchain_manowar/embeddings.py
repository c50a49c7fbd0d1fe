"""Embeddings both ways: any LangChain ``Embeddings`` as the engine's embedder, and the
engine's embedder as a LangChain ``Embeddings``."""

from __future__ import annotations

from typing import Any

from langchain_core.embeddings import Embeddings

from manowar_memory import MemoryEngine, Scope
from manowar_memory.embeddings import BaseEmbedder, Embedder, EmbedderSpec, InputType, resolve_embedder

__all__ = ["LangChainEmbedder", "ManowarEmbeddings", "langchain_model_name"]

_MODEL_ATTRS = ("model", "model_name", "model_id", "deployment", "deployment_name", "repo_id")


def langchain_model_name(embeddings: Embeddings) -> str:
    """The model an ``Embeddings`` object uses, from its usual attributes (``model``,
    ``model_name``...), else ``size<n>`` for fakes with a ``size``, else ``default``."""
    for attr in _MODEL_ATTRS:
        value = getattr(embeddings, attr, None)
        if isinstance(value, str) and value.strip():
            return value.strip()
    size = getattr(embeddings, "size", None)
    if isinstance(size, int) and not isinstance(size, bool):
        return f"size{size}"
    return "default"


class LangChainEmbedder(BaseEmbedder):
    """Any LangChain ``Embeddings`` as a manowar :class:`~manowar_memory.Embedder`.

    ``model_id`` is ``langchain:<class>:<model>`` (``langchain:OpenAIEmbeddings:text-embedding-3-small``),
    so rows it embeds never mix with another model's vector space. Documents go through
    ``embed_documents`` and queries through ``embed_query`` (asymmetric models stay right);
    async calls use ``aembed_documents`` / ``aembed_query``. Failures raise
    :class:`~manowar_memory.EmbeddingError`.

    Example::

        engine = MemoryEngine(store="sqlite:///:memory:", embedder=LangChainEmbedder(OpenAIEmbeddings()))
    """

    def __init__(self, embeddings: Embeddings, *, model: str | None = None, dimensions: int | None = None,
                 batch_size: int = 64) -> None:
        if not isinstance(embeddings, Embeddings):
            raise TypeError(f"embeddings must be a LangChain Embeddings, got {type(embeddings).__name__}")
        self.embeddings = embeddings
        self.model_id = f"langchain:{type(embeddings).__name__}:{model or langchain_model_name(embeddings)}"
        self._dimensions = dimensions
        self.batch_size = batch_size

    def _embed_batch(self, texts: list[str], input_type: InputType) -> list[list[float]]:
        if input_type == "query":
            return [self.embeddings.embed_query(t) for t in texts]
        return self.embeddings.embed_documents(texts)

    async def _aembed_batch(self, texts: list[str], input_type: InputType) -> list[list[float]]:
        if input_type == "query":
            return [await self.embeddings.aembed_query(t) for t in texts]
        return await self.embeddings.aembed_documents(texts)


class ManowarEmbeddings(Embeddings):
    """A manowar embedder (or an engine's) as a LangChain ``Embeddings``.

    ``ManowarEmbeddings("local")``, ``ManowarEmbeddings("voyage:voyage-4-large")``,
    ``ManowarEmbeddings(FakeEmbedder(32))`` or ``ManowarEmbeddings(engine=engine)`` (the
    engine's cached embedder, so a LangChain vector store shares the engine's vector space).
    Documents are embedded with ``input_type="document"``, queries with ``"query"``.
    """

    def __init__(self, embedder: EmbedderSpec = None, *, engine: MemoryEngine | None = None, **options: Any) -> None:
        if (embedder is None) == (engine is None):
            raise ValueError("pass exactly one of embedder= (a provider string or Embedder) and engine=")
        if engine is not None:
            # the embedder is the engine's whatever the scope; the scoped surface is how adapters reach it
            resolved: Embedder | None = engine.scoped(Scope(agent_wallet="manowar-embeddings")).embedder
            if resolved is None:
                raise ValueError("this engine is keyword-only (no embedder); it has no vectors to share")
        else:
            resolved = resolve_embedder(embedder, **options)
        assert resolved is not None
        self.embedder: Embedder = resolved

    @property
    def model_id(self) -> str:
        """The vector space of the wrapped embedder."""
        return self.embedder.model_id

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Embed stored documents."""
        return self.embedder.embed(list(texts), input_type="document") if texts else []

    def embed_query(self, text: str) -> list[float]:
        """Embed a search query."""
        return self.embedder.embed([text], input_type="query")[0]

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        """Async twin of :meth:`embed_documents`."""
        return await self.embedder.aembed(list(texts), input_type="document") if texts else []

    async def aembed_query(self, text: str) -> list[float]:
        """Async twin of :meth:`embed_query`."""
        return (await self.embedder.aembed([text], input_type="query"))[0]

    def __repr__(self) -> str:
        return f"ManowarEmbeddings(model_id={self.model_id!r})"
