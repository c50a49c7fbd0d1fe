"""An embedding cache in front of any embedder, keyed per model and per input type."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import numpy as np

from .._notes import degrade
from .._util import content_hash
from ..cache.base import Cache
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

    @property
    def dimensions(self) -> int | None:
        """Vector length of the wrapped embedder."""
        return self.inner.dimensions

    def _key(self, text: str, input_type: InputType) -> str:
        kind = "q" if input_type == "query" else "d"
        return f"embedding:{self.model_id}:{kind}:{content_hash(text)}"

    def embed(self, texts: Sequence[str], *, input_type: InputType = "document") -> list[list[float]]:
        """Embed, reading and filling the cache."""
        texts = list(texts)
        if not texts:
            return []
        keys = [self._key(t, input_type) for t in texts]
        try:
            cached = self.cache.get_many(keys)
        except Exception as exc:
            degrade(f"embedding cache bypassed: {self.cache.name} read failed ({type(exc).__name__})")
            cached = [None] * len(texts)
        out: list[list[float] | None] = [
            np.frombuffer(c, dtype=np.float32).tolist() if c is not None else None for c in cached
        ]
        missing = [i for i, v in enumerate(out) if v is None]
        self.hits += len(texts) - len(missing)
        self.misses += len(missing)
        if missing:
            fresh = self.inner.embed([texts[i] for i in missing], input_type=input_type)
            for i, vector in zip(missing, fresh):
                out[i] = vector
                try:
                    self.cache.set(keys[i], np.asarray(vector, dtype=np.float32).tobytes(), self.ttl_seconds)
                except Exception as exc:
                    degrade(f"embedding cache bypassed: {self.cache.name} write failed ({type(exc).__name__})")
        return [v for v in out if v is not None]

    async def aembed(self, texts: Sequence[str], *, input_type: InputType = "document") -> list[list[float]]:
        """Async twin of :meth:`embed`."""
        return await asyncio.to_thread(self.embed, texts, input_type=input_type)
