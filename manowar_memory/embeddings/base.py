"""The embedder protocol and the base class providers build on."""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Literal, Protocol, runtime_checkable

from ..errors import EmbeddingError

__all__ = ["BaseEmbedder", "Embedder", "InputType"]

InputType = Literal["query", "document"]


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into vectors.

    ``model_id`` names the vector space (``"voyage:voyage-4-large"``); rows embedded by one
    model are never compared with vectors from another. ``input_type`` tells asymmetric
    models whether the texts are search queries or stored documents.
    """

    model_id: str

    @property
    def dimensions(self) -> int | None:
        """Vector length, when known before the first call."""
        ...

    def embed(self, texts: Sequence[str], *, input_type: InputType = "document") -> list[list[float]]:
        """Embed ``texts`` in order; raise :class:`EmbeddingError` on failure."""
        ...

    async def aembed(self, texts: Sequence[str], *, input_type: InputType = "document") -> list[list[float]]:
        """Async twin of :meth:`embed`."""
        ...


class BaseEmbedder(ABC):
    """Base for providers: implement :meth:`_embed_batch`; batching, checks and async come for free."""

    model_id: str = "base"
    batch_size: int = 64
    _dimensions: int | None = None

    @property
    def dimensions(self) -> int | None:
        """Vector length, when known."""
        return self._dimensions

    @abstractmethod
    def _embed_batch(self, texts: list[str], input_type: InputType) -> list[list[float]]:
        """Embed one batch; may raise anything, which :meth:`embed` wraps in EmbeddingError."""

    def embed(self, texts: Sequence[str], *, input_type: InputType = "document") -> list[list[float]]:
        """Embed ``texts`` in batches of ``batch_size``, checking the provider's answer."""
        if isinstance(texts, str):
            raise TypeError("embed() takes a sequence of strings, not a single string")
        if input_type not in ("query", "document"):
            raise ValueError(f"input_type must be 'query' or 'document', got {input_type!r}")
        texts = list(texts)
        out: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            batch = texts[start : start + self.batch_size]
            try:
                vectors = self._embed_batch(batch, input_type)
            except EmbeddingError:
                raise
            except Exception as exc:  # provider errors of every kind become one error type
                raise EmbeddingError(f"{self.model_id} failed to embed {len(batch)} text(s): {exc}") from exc
            if len(vectors) != len(batch):
                raise EmbeddingError(f"{self.model_id} returned {len(vectors)} vectors for {len(batch)} texts")
            for vector in vectors:
                if self._dimensions is None:
                    self._dimensions = len(vector)
                elif len(vector) != self._dimensions:
                    raise EmbeddingError(
                        f"{self.model_id} returned a {len(vector)}-dimensional vector, expected {self._dimensions}"
                    )
            out.extend([float(x) for x in v] for v in vectors)
        return out

    async def aembed(self, texts: Sequence[str], *, input_type: InputType = "document") -> list[list[float]]:
        """Async twin of :meth:`embed` (runs the sync call in a worker thread unless overridden)."""
        return await asyncio.to_thread(self.embed, texts, input_type=input_type)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model_id={self.model_id!r})"
