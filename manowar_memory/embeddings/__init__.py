"""Embedders: the protocol, providers named by string, the cache wrapper and a fake.

``resolve_embedder("voyage:voyage-4-large")``, ``"local"`` / ``"local:/path/to/model"``,
``"onnx"`` / ``"onnx:all-MiniLM-L6-v2"`` (the local model on ONNX Runtime; ``"onnx-int8"`` for
its int8 graph), ``"fake"`` / ``"fake:384"``, an :class:`Embedder` instance, or None / ``"none"``
(keyword-only). ``"auto"`` is ``$MANOWAR_EMBEDDER``, else the best local embedder installed
(:mod:`manowar_memory.embeddings.choice`). Providers load their SDK or model on first use and say which
extra to install when missing.
"""

from __future__ import annotations

from .base import BaseEmbedder, Embedder, InputType
from .cached import CachedEmbedder
from .choice import (
    AUTO,
    EMBEDDER_ENV,
    EmbedderChoice,
    EmbedderSpec,
    choose_embedder,
    installed_local_embedder,
    resolve_embedder,
)
from .fake import FakeEmbedder

__all__ = [
    "AUTO", "EMBEDDER_ENV", "BaseEmbedder", "CachedEmbedder", "Embedder", "EmbedderChoice", "EmbedderSpec",
    "FakeEmbedder", "InputType", "choose_embedder", "installed_local_embedder", "resolve_embedder",
]
