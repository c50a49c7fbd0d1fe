"""Embeddings both ways.

* :class:`ManowarEmbedding`: the engine's embedder as a LlamaIndex ``BaseEmbedding``.
  Give it to ``VectorStoreIndex``/``VectorMemoryBlock`` over a
  :class:`~llama_index_manowar.ManowarVectorStore`, so LlamaIndex and the engine embed
  in the same vector space (and share the engine's embedding cache).
* :class:`LlamaIndexEmbedder`: any LlamaIndex ``BaseEmbedding`` as an engine
  ``Embedder`` (``MemoryEngine(embedder=LlamaIndexEmbedder(embed_model))``). Its
  ``model_id`` is ``llamaindex:<class>:<model_name>``, so rows it embeds are never compared
  with vectors of another model.

:func:`to_engine_embedder` picks the right one: a ``ManowarEmbedding`` gives back the
engine embedder it wraps (same ``model_id``), anything else is wrapped.
"""

from __future__ import annotations

from typing import Any, cast

from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.bridge.pydantic import ConfigDict, Field, field_validator

from manowar_memory.embeddings import resolve_embedder
from manowar_memory.embeddings.base import BaseEmbedder, Embedder, InputType
from manowar_memory.errors import ConfigurationError

from ._fields import OptionalEngineField, OptionalScopeField, settings_surface

__all__ = ["LlamaIndexEmbedder", "ManowarEmbedding", "to_engine_embedder"]


class ManowarEmbedding(BaseEmbedding):
    """The engine's embedder (``engine=``, or an ``embedder=`` directly: an engine
    ``Embedder`` or a provider string such as ``"local"``, ``"voyage:voyage-4-large"`` or
    ``"fake"``) as a LlamaIndex embedding.

    Queries are embedded with ``input_type="query"`` and texts with ``"document"``, as the
    engine does, so asymmetric models behave the same on both sides. ``model_name`` is
    the engine embedder's ``model_id``. ``scope`` is accepted for a uniform constructor
    and not used (embeddings have no owner).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, protected_namespaces=("pydantic_model_",), extra="forbid")

    engine: OptionalEngineField = None
    scope: OptionalScopeField = None
    embedder: Any = Field(
        default=None, exclude=True, description="An engine Embedder or a provider string (default: the engine's).",
    )
    embed_batch_size: int = Field(default=64, gt=0, le=2048)

    @field_validator("embedder", mode="before")
    @classmethod
    def _resolve_embedder(cls, value: Any) -> Any:
        """A provider string becomes its embedder (as everywhere in the engine)."""
        return resolve_embedder(value)

    def model_post_init(self, context: Any, /) -> None:
        """Resolve the embedder and name the model after it."""
        super().model_post_init(context)
        if self.embedder is None and self.engine is not None:
            self.embedder = settings_surface(self.engine, self.scope).embedder
        if self.embedder is None:
            raise ConfigurationError(
                "ManowarEmbedding needs an embedder: the engine is keyword-only (embedder=None); "
                "build it with MemoryEngine(embedder='local' | 'voyage:...' | 'fake' | an Embedder)"
            )
        if not isinstance(self.embedder, Embedder):
            raise ConfigurationError(
                f"embedder must implement the manowar Embedder protocol, got {type(self.embedder).__name__}"
            )
        self.model_name = self.embedder.model_id

    @classmethod
    def class_name(cls) -> str:
        """Class name for serialisation."""
        return "ManowarEmbedding"

    @property
    def model_id(self) -> str:
        """The vector space: the engine embedder's ``model_id``."""
        return self._inner.model_id

    @property
    def _inner(self) -> Embedder:
        return cast(Embedder, self.embedder)

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._inner.embed([query], input_type="query")[0]

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return (await self._inner.aembed([query], input_type="query"))[0]

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._inner.embed([text], input_type="document")[0]

    async def _aget_text_embedding(self, text: str) -> list[float]:
        return (await self._inner.aembed([text], input_type="document"))[0]

    def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        return self._inner.embed(texts, input_type="document")

    async def _aget_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        return await self._inner.aembed(texts, input_type="document")


class LlamaIndexEmbedder(BaseEmbedder):
    """A LlamaIndex ``BaseEmbedding`` as an engine :class:`Embedder`.

    Documents go through ``get_text_embedding_batch`` and queries through
    ``get_query_embedding`` (``aget_*`` for :meth:`aembed`). Every answer is checked like
    any engine provider's (one vector per text, one dimension throughout), and any
    failure becomes :class:`EmbeddingError`; there is no fallback to another model.
    """

    def __init__(self, embed_model: BaseEmbedding, *, model_id: str | None = None, batch_size: int = 64) -> None:
        if not isinstance(embed_model, BaseEmbedding):
            raise ConfigurationError(f"embed_model must be a llama_index BaseEmbedding, got {type(embed_model).__name__}")
        self.embed_model = embed_model
        self.model_id = model_id or f"llamaindex:{type(embed_model).__name__}:{embed_model.model_name}"
        self.batch_size = batch_size
        self._dimensions = None

    def _embed_batch(self, texts: list[str], input_type: InputType) -> list[list[float]]:
        if input_type == "query":
            return [self.embed_model.get_query_embedding(t) for t in texts]
        return self.embed_model.get_text_embedding_batch(texts)

    async def _aembed_batch(self, texts: list[str], input_type: InputType) -> list[list[float]]:
        if input_type == "query":
            return [await self.embed_model.aget_query_embedding(t) for t in texts]
        return await self.embed_model.aget_text_embedding_batch(texts)


def to_engine_embedder(embed_model: BaseEmbedding) -> Embedder:
    """An engine embedder for a LlamaIndex embedding: the wrapped engine embedder for a
    :class:`ManowarEmbedding`, else a :class:`LlamaIndexEmbedder`."""
    if isinstance(embed_model, ManowarEmbedding):
        return cast(Embedder, embed_model.embedder)
    return LlamaIndexEmbedder(embed_model)
