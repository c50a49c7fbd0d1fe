"""Rerankers: hosted cross-encoders (Cohere, Voyage, Cloudflare), a local one, and a fake.

``resolve_reranker("cohere")``, ``"cohere:rerank-v3.5"``, ``"voyage[:model]"``,
``"cloudflare[:model]"``, ``"local:/path/to/cross-encoder"``, ``"fake"``, a
:class:`Reranker` instance, or None. Every reranker raises
:class:`~manowar_memory.errors.RerankError` when it cannot give scores (missing
credentials, timeout, HTTP error, unusable answer); the ranking stage then keeps its
order. Hosted rerankers default to a 0.8 s timeout, enforced by their HTTP client per
request (connect and read); a call's ``timeout=`` overrides it.

Provider classes are imported on first use, so their SDKs load only when needed.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import ConfigurationError, InvalidInputError, RerankError
from .base import Reranker, RerankResult

if TYPE_CHECKING:
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

DEFAULT_TIMEOUT = 0.8
"""Seconds a hosted reranker waits for an answer unless told otherwise."""

RerankerSpec = Reranker | str | None

_LAZY = {
    "CloudflareReranker": ".cloudflare",
    "CohereReranker": ".cohere",
    "CrossEncoderReranker": ".cross_encoder",
    "FakeReranker": ".fake",
    "VoyageReranker": ".voyage",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


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
        from .cohere import CohereReranker

        return CohereReranker(model=model or "rerank-v3.5", **options)
    if provider == "voyage":
        from .voyage import VoyageReranker

        return VoyageReranker(model=model or "rerank-2.5", **options)
    if provider == "cloudflare":
        from .cloudflare import CloudflareReranker

        return CloudflareReranker(model=model or "@cf/baai/bge-reranker-base", **options)
    if provider == "local":
        from .cross_encoder import CrossEncoderReranker

        if not model:
            raise ConfigurationError(
                "the local reranker needs a path to a cross-encoder model saved on disk: 'local:/path/to/model'"
            )
        return CrossEncoderReranker(model, **options)
    if provider == "fake":
        from .fake import FakeReranker

        return FakeReranker(**options)
    raise ConfigurationError(
        f"unknown reranker {spec!r}; use 'cohere[:model]', 'voyage[:model]', 'cloudflare[:model]', "
        "'local:/path/to/cross-encoder', 'fake', a Reranker instance, or None"
    )


# -- helpers shared by the providers --------------------------------------------------------


def check_request(query: str, documents: Sequence[str], top_k: int | None) -> tuple[list[str], int]:
    """Validate a rerank call; return the documents as a list and the effective ``top_k``."""
    if isinstance(documents, str):
        raise InvalidInputError("rerank() takes a sequence of documents, not a single string")
    if not isinstance(query, str):
        raise InvalidInputError(f"query must be a string, got {type(query).__name__}")
    docs = [str(d) for d in documents]
    if top_k is None:
        return docs, len(docs)
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        raise InvalidInputError(f"top_k must be a positive integer or None, got {top_k!r}")
    return docs, min(top_k, len(docs))


def resolve_timeout(timeout: float | None, default: float) -> float:
    """The call's timeout, else the reranker's; must be positive."""
    value = default if timeout is None else timeout
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
        raise InvalidInputError(f"timeout must be a positive number of seconds, got {value!r}")
    return float(value)


def finish_results(
    pairs: Iterable[tuple[Any, Any]], n_documents: int, top_k: int, model_id: str
) -> list[RerankResult]:
    """Keep (index, score) pairs with an integer index in range and a finite score (first one
    per index), best first (ties by index), at most ``top_k``. No usable pair -> RerankError."""
    best: dict[int, float] = {}
    for index, score in pairs:
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < n_documents:
            continue
        if isinstance(score, bool):
            continue
        try:
            value = float(score)
        except (TypeError, ValueError):
            continue
        if math.isfinite(value) and index not in best:
            best[index] = value
    if not best and n_documents > 0:
        raise RerankError(f"{model_id} returned no usable scores for {n_documents} document(s)")
    ordered = sorted(best.items(), key=lambda item: (-item[1], item[0]))
    return [RerankResult(index=i, score=s) for i, s in ordered[:top_k]]
