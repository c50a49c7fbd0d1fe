"""The embedder protocol and the base class providers build on."""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Literal, Protocol, runtime_checkable

from ..errors import EmbeddingError, detach

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

    async def _aembed_batch(self, texts: list[str], input_type: InputType) -> list[list[float]]:
        """Async hook for one batch; the default runs :meth:`_embed_batch` in a worker thread."""
        return await asyncio.to_thread(self._embed_batch, texts, input_type)

    @staticmethod
    def _validate_call(texts: Sequence[str], input_type: str) -> list[str]:
        if isinstance(texts, str):
            raise TypeError("embed() takes a sequence of strings, not a single string")
        if input_type not in ("query", "document"):
            raise ValueError(f"input_type must be 'query' or 'document', got {input_type!r}")
        return list(texts)

    def _checked(self, batch: list[str], vectors: list[list[float]]) -> list[list[float]]:
        """One vector per text, one dimension throughout, as floats."""
        if len(vectors) != len(batch):
            raise EmbeddingError(f"{self.model_id} returned {len(vectors)} vectors for {len(batch)} texts")
        for vector in vectors:
            if self._dimensions is None:
                self._dimensions = len(vector)
            elif len(vector) != self._dimensions:
                raise EmbeddingError(
                    f"{self.model_id} returned a {len(vector)}-dimensional vector, expected {self._dimensions}"
                )
        return [[float(x) for x in v] for v in vectors]

    def _wrap(self, exc: Exception, count: int) -> EmbeddingError:
        if isinstance(exc, EmbeddingError):
            return exc
        return EmbeddingError(f"{self.model_id} failed to embed {count} text(s): {exc}")

    def embed(self, texts: Sequence[str], *, input_type: InputType = "document") -> list[list[float]]:
        """Embed ``texts`` in batches of ``batch_size``, checking the provider's answer."""
        items = self._validate_call(texts, input_type)
        out: list[list[float]] = []
        for start in range(0, len(items), self.batch_size):
            batch = items[start : start + self.batch_size]
            failure: EmbeddingError | None = None
            try:
                vectors = self._embed_batch(batch, input_type)
            except Exception as exc:  # noqa: BLE001 - provider errors of every kind become one error type
                failure = self._wrap(exc, len(batch))
            if failure is not None:  # no chain: the provider's error may hold the request's headers
                raise detach(failure)
            out.extend(self._checked(batch, vectors))
        return out

    async def aembed(self, texts: Sequence[str], *, input_type: InputType = "document") -> list[list[float]]:
        """Async twin of :meth:`embed` (through :meth:`_aembed_batch`)."""
        items = self._validate_call(texts, input_type)
        out: list[list[float]] = []
        for start in range(0, len(items), self.batch_size):
            batch = items[start : start + self.batch_size]
            failure: EmbeddingError | None = None
            try:
                vectors = await self._aembed_batch(batch, input_type)
            except Exception as exc:  # noqa: BLE001 - as in embed()
                failure = self._wrap(exc, len(batch))
            if failure is not None:
                raise detach(failure)
            out.extend(self._checked(batch, vectors))
        return out

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model_id={self.model_id!r})"
