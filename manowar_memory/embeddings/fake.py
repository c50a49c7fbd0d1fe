"""A deterministic, offline embedder for tests and demos."""

from __future__ import annotations

import hashlib
import itertools

import numpy as np

from .._util import tokens
from .base import BaseEmbedder, InputType

__all__ = ["FakeEmbedder"]


class FakeEmbedder(BaseEmbedder):
    """Hashes words (and word bigrams) into a fixed number of buckets, then L2-normalises.

    Texts that share words get similar vectors, the same text always gets the same
    vector, and no model or network is needed. ``calls`` counts provider calls, so
    tests can check caching.
    """

    __test__ = False  # not a pytest test class

    def __init__(self, dimensions: int = 64, *, fail: bool = False) -> None:
        if dimensions < 2:
            raise ValueError("dimensions must be at least 2")
        self._dimensions = dimensions
        self.model_id = f"fake:{dimensions}"
        self.fail = fail
        self.calls = 0
        self.texts_embedded = 0

    def _vector(self, text: str) -> list[float]:
        vec = np.zeros(self._dimensions or 64, dtype=np.float64)
        words = tokens(text)
        feats = words + [f"{a} {b}" for a, b in itertools.pairwise(words)]
        for feat in feats or [text]:
            digest = hashlib.blake2b(feat.encode("utf-8"), digest_size=8).digest()
            idx = int.from_bytes(digest[:4], "little") % vec.shape[0]
            sign = 1.0 if digest[4] & 1 else -1.0
            vec[idx] += sign * (0.5 if " " in feat else 1.0)
        norm = float(np.linalg.norm(vec))
        if norm == 0.0:
            vec[0] = 1.0
            norm = 1.0
        unit: list[float] = (vec / norm).tolist()
        return unit

    def _embed_batch(self, texts: list[str], input_type: InputType) -> list[list[float]]:
        self.calls += 1
        if self.fail:
            raise RuntimeError("FakeEmbedder configured to fail")
        self.texts_embedded += len(texts)
        return [self._vector(t) for t in texts]
