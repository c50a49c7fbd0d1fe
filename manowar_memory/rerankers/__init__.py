"""Rerankers: hosted cross-encoders (Cohere, Voyage, Cloudflare), a local one, and a fake.

``resolve_reranker("cohere")``, ``"cohere:rerank-v3.5"``, ``"voyage[:model]"``,
``"cloudflare[:model]"``, ``"local:/path/to/cross-encoder"``, ``"fake"``, a
:class:`Reranker` instance, or None. Every reranker raises
:class:`~manowar_memory.errors.RerankError` when it cannot give scores (missing
credentials, timeout, HTTP error, unusable answer); the ranking stage then keeps its
order. Hosted rerankers default to a 0.8 s timeout, enforced by their HTTP client per
request (connect and read); a call's ``timeout=`` overrides it.

Each provider loads its SDK (or model) on first use, so importing this package loads none.
"""

from __future__ import annotations

from typing import Any

from ..errors import ConfigurationError
from ._shared import DEFAULT_TIMEOUT
from .base import Reranker, RerankResult
from .cloudflare import CloudflareReranker
from .cohere import CohereReranker
from .cross_encoder import CrossEncoderReranker
from .fake import FakeReranker
from .voyage import VoyageReranker

__all__ = [
    "DEFAULT_TIMEOUT",
    "CloudflareReranker",
    "CohereReranker",
    "CrossEncoderReranker",
    "FakeReranker",
    "RerankResult",
    "Reranker",
    "RerankerSpec",
    "VoyageReranker",
    "resolve_reranker",
]

RerankerSpec = Reranker | str | None

def resolve_reranker(spec: RerankerSpec, **options: Any) -> Reranker | None:
    """Turn a provider string (or an instance, or None) into a reranker.

    ``options`` go to the provider's constructor (``timeout=``, ``api_key=``, ...).
    Raises :class:`ConfigurationError` for an unknown provider or a ``local`` spec without
    a path, and :class:`~manowar_memory.errors.MissingDependencyError` when the SDK is missing.
    """
    if spec is None:
        return None
    if not isinstance(spec, str):
        if isinstance(spec, Reranker):
            return spec
        raise ConfigurationError(f"reranker must be a provider string or a Reranker, got {type(spec).__name__}")
    provider, _, model = spec.partition(":")
    provider = provider.strip().lower()
    model = model.strip()
    if provider == "cohere":
        return CohereReranker(model=model or "rerank-v3.5", **options)
    if provider == "voyage":
        return VoyageReranker(model=model or "rerank-2.5", **options)
    if provider == "cloudflare":
        return CloudflareReranker(model=model or "@cf/baai/bge-reranker-base", **options)
    if provider == "local":
        if not model:
            raise ConfigurationError(
                "the local reranker needs a path to a cross-encoder model saved on disk: 'local:/path/to/model'"
            )
        return CrossEncoderReranker(model, **options)
    if provider == "fake":
        return FakeReranker(**options)
    raise ConfigurationError(
        f"unknown reranker {spec!r}; use 'cohere[:model]', 'voyage[:model]', 'cloudflare[:model]', "
        "'local:/path/to/cross-encoder', 'fake', a Reranker instance, or None"
    )
