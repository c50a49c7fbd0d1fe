"""Embedders: the protocol, providers named by string, the cache wrapper and a fake.

``resolve_embedder("voyage:voyage-4-large")``, ``"local"`` / ``"local:/path/to/model"``,
``"onnx"`` / ``"onnx:all-MiniLM-L6-v2"`` (the local model on ONNX Runtime; ``"onnx-int8"`` for
its int8 graph), ``"fake"`` / ``"fake:384"``, an :class:`Embedder` instance, or None / ``"none"``
(keyword-only). ``"auto"`` is ``$MANOWAR_EMBEDDER``, else the best local embedder installed
(:mod:`manowar_memory.embeddings.choice`). Providers are imported lazily and say which extra to
install when missing.
"""

from __future__ import annotations

from typing import Any

from ..errors import ConfigurationError
from .base import BaseEmbedder, Embedder, InputType
from .cached import CachedEmbedder
from .choice import AUTO, EMBEDDER_ENV, EmbedderChoice, choose_embedder, installed_local_embedder
from .fake import FakeEmbedder

__all__ = [
    "AUTO", "EMBEDDER_ENV", "BaseEmbedder", "CachedEmbedder", "Embedder", "EmbedderChoice", "EmbedderSpec",
    "FakeEmbedder", "InputType", "choose_embedder", "installed_local_embedder", "resolve_embedder",
]

EmbedderSpec = Embedder | str | None


def resolve_embedder(spec: EmbedderSpec, **options: Any) -> Embedder | None:
    """Turn a provider string (or an instance, or None) into an embedder.

    Raises :class:`ConfigurationError` for an unknown provider and
    :class:`MissingDependencyError` when the provider's extra is not installed.
    """
    if spec is None:
        return None
    if not isinstance(spec, str):
        if isinstance(spec, Embedder):
            return spec
        raise ConfigurationError(
            f"embedder must be a provider string or an Embedder, got {type(spec).__name__}"
        )
    provider, _, model = spec.partition(":")
    provider = provider.strip().lower()
    model = model.strip()
    if provider == "none" and not model:
        return None
    if provider == "auto" and not model:
        return choose_embedder(spec, **options).embedder
    if provider == "fake":
        return FakeEmbedder(int(model) if model else options.pop("dimensions", 64), **options)
    if provider == "voyage":
        from .voyage import VoyageEmbedder

        return VoyageEmbedder(model=model or "voyage-4-large", **options)
    if provider == "local":
        from .local import LocalEmbedder

        return LocalEmbedder(model=model or "all-MiniLM-L6-v2", **options)
    if provider in ("onnx", "onnx-int8"):
        from .onnx import OnnxEmbedder

        if provider == "onnx-int8":
            options["quantize"] = "int8"
        return OnnxEmbedder(model=model or "all-MiniLM-L6-v2", **options)
    raise ConfigurationError(
        f"unknown embedder {spec!r}; use 'voyage[:model]', 'local[:model or path]', 'onnx[:model or path]', "
        "'onnx-int8[:model or path]', 'fake[:dimensions]', "
        "'auto' (the best one installed), an Embedder instance, or 'none' / None for keyword-only memory"
    )
