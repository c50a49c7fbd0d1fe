"""An embedding cache in front of any embedder, keyed per model and per input type."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import numpy as np

from .._notes import degrade
from .._util import content_hash
from ..cache.base import Cache
from ..errors import EmbeddingError, detach
from .base import Embedder, InputType

__all__ = ["CachedEmbedder"]

EMBEDDING_TTL_SECONDS = 86_400


class CachedEmbedder:
    """Wraps an embedder with a cache. Query and document inputs use separate keys
    (``embedding:{model}:q:{H}`` / ``embedding:{model}:d:{H}``), and the model id is in
    the key, so vectors of different models never mix. A failing cache is bypassed and
    reported; a failing embedder raises (no fallback)."""

    def __init__(self, embedder: Embedder, cache: Cache, ttl_seconds: float = EMBEDDING_TTL_SECONDS) -> None:
        self.inner = embedder
        self.cache = cache
        self.ttl_seconds = ttl_seconds
        self.model_id = embedder.model_id
        self.hits = 0
        self.misses = 0
        self._dims: int | None = None

    @property
    def dimensions(self) -> int | None:
        """Vector length of the wrapped embedder."""
        return self.inner.dimensions

    def _key(self, text: str, input_type: InputType) -> str:
        kind = "q" if input_type == "query" else "d"
        return f"embedding:{self.model_id}:{kind}:{content_hash(text)}"

    def peek(self, text: str, *, input_type: InputType = "query") -> list[float] | None:
        """The cached vector of ``text`` when the cache lives in this process (``in_process``)
        and holds it: no embedder call and no round trip, so a search can take it before its
        lanes start instead of embedding on a lane thread. None when it is not cached, the
        cache is remote, or the cache read fails (:meth:`embed` then reads it again and
        reports). A hit counts in ``hits``."""
        if not getattr(self.cache, "in_process", False):
            return None
        try:
            (found,) = self.cache.get_many([self._key(text, input_type)])
        except Exception:  # noqa: BLE001 - embed() reads the cache again and reports the failure
            return None
        if found is None:
            return None
        vector = _decode(found)
        self._check_dimensions([vector])
        self.hits += 1
        return vector

    def embed(self, texts: Sequence[str], *, input_type: InputType = "document") -> list[list[float]]:
        """Embed, reading and filling the cache."""
        texts = list(texts)
        if not texts:
            return []
        keys = [self._key(t, input_type) for t in texts]
        try:
            cached = self.cache.get_many(keys)
        except Exception as exc:  # noqa: BLE001 - a cache failure is reported and bypassed
            degrade(f"embedding cache bypassed: {self.cache.name} read failed ({type(exc).__name__})")
            cached = [None] * len(texts)
        out: list[list[float] | None] = [
            _decode(c) if c is not None else None for c in cached
        ]
        missing = [i for i, v in enumerate(out) if v is None]
        self.hits += len(texts) - len(missing)
        self.misses += len(missing)
        if missing:
            asked = [texts[i] for i in missing]
            failure: EmbeddingError | None = None
            try:
                fresh = self.inner.embed(asked, input_type=input_type)
            except EmbeddingError as exc:
                failure = exc
            except Exception as exc:  # noqa: BLE001 - a custom embedder's own errors become the library's
                failure = EmbeddingError(
                    f"{self.model_id} failed to embed {len(asked)} text(s): {type(exc).__name__}: {exc}")
            if failure is not None:  # no chain: a client's error may hold the request's headers
                raise detach(failure)
            fresh = self._checked(fresh, len(asked))
            for i, vector in zip(missing, fresh):
                out[i] = vector
                try:
                    self.cache.set(keys[i], np.asarray(vector, dtype=np.float32).tobytes(), self.ttl_seconds)
                except Exception as exc:  # noqa: BLE001 - a cache failure is reported and bypassed
                    degrade(f"embedding cache bypassed: {self.cache.name} write failed ({type(exc).__name__})")
        done = [v for v in out if v is not None]
        self._check_dimensions(done)
        return done

    def _checked(self, vectors: Any, count: int) -> list[list[float]]:
        """The embedder's answer as ``count`` finite float vectors of one dimension (the model's,
        pinned by its first answer), or :class:`EmbeddingError`: a wrong answer must never be
        stored, where a vector of another length would turn the vector lane off for the model."""
        if isinstance(vectors, np.ndarray):
            vectors = list(vectors)
        if not isinstance(vectors, (list, tuple)):
            raise EmbeddingError(
                f"{self.model_id} returned {type(vectors).__name__}; embed() must return a list of vectors, one per text"
            )
        if len(vectors) != count:
            raise EmbeddingError(
                f"{self.model_id} returned {len(vectors)} vectors for {count} texts; embed() must return one per text"
            )
        out: list[list[float]] = []
        for i, vector in enumerate(vectors):
            try:
                arr = np.asarray(vector, dtype=np.float64)
            except (TypeError, ValueError) as exc:
                raise EmbeddingError(f"{self.model_id} returned vector {i} that is not a list of numbers: {exc}") from None
            if arr.ndim != 1 or arr.shape[0] == 0:
                raise EmbeddingError(f"{self.model_id} returned vector {i} that is empty or not flat (shape {arr.shape})")
            if not np.isfinite(arr).all():
                raise EmbeddingError(f"{self.model_id} returned vector {i} with values that are not finite (NaN or inf)")
            if np.abs(arr).max() > np.finfo(np.float32).max:
                raise EmbeddingError(f"{self.model_id} returned vector {i} with values beyond float32 (not finite there)")
            out.append(arr.tolist())
        self._check_dimensions(out)
        return out

    def _check_dimensions(self, vectors: list[list[float]]) -> None:
        expected = self._dims or self.inner.dimensions
        for vector in vectors:
            if expected is None:
                expected = len(vector)
            elif len(vector) != expected:
                raise EmbeddingError(
                    f"{self.model_id} returned a {len(vector)}-dimension vector where its vectors have {expected}: "
                    "one model id must always give one dimension (give another model id to another model)"
                )
        if expected is not None and vectors:
            self._dims = expected

    async def aembed(self, texts: Sequence[str], *, input_type: InputType = "document") -> list[list[float]]:
        """Async twin of :meth:`embed`."""
        return await asyncio.to_thread(self.embed, texts, input_type=input_type)


def _decode(value: bytes) -> list[float]:
    """A cached vector (float32 bytes) as a list."""
    vector: list[float] = np.frombuffer(value, dtype=np.float32).tolist()
    return vector
