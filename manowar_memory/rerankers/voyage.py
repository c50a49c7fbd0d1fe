"""Voyage AI rerank through the official ``voyageai`` SDK (``POST /v1/rerank``)."""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import Any

from ..embeddings.voyage import describe_voyage_error
from ..errors import ConfigurationError, MissingDependencyError, RerankError
from ..redaction import redact_library_logs, register_secret
from ._shared import DEFAULT_TIMEOUT, check_request, finish_results, resolve_timeout
from .base import RerankResult

__all__ = ["VoyageReranker"]

ENV_API_KEY = "VOYAGE_API_KEY"


class VoyageReranker:
    """Reranks with a Voyage model (``rerank-2.5`` by default).

    The key is ``api_key``, else ``VOYAGE_API_KEY`` (read at call time); without one,
    :meth:`rerank` raises :class:`RerankError`. ``base_url`` includes ``/v1``. ``timeout``
    (seconds) bounds each request (connect and read) with no retries; the SDK fixes it per
    client, so one client is kept per timeout value. A ``client`` you pass is used as is
    (its own timeout applies).
    """

    def __init__(
        self,
        model: str = "rerank-2.5",
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        client: Any | None = None,
    ) -> None:
        if not model:
            raise ConfigurationError("VoyageReranker needs a model name, e.g. 'rerank-2.5'")
        try:
            import voyageai
        except ImportError as exc:
            raise MissingDependencyError("voyageai", "voyage", "The Voyage reranker") from exc
        redact_library_logs("voyage", "voyageai", "requests", "urllib3")  # the SDK logs upstream error bodies
        self._voyageai = voyageai
        self.model = model
        self.model_id = f"voyage:{model}"
        self.timeout = resolve_timeout(timeout, DEFAULT_TIMEOUT)
        self.base_url = base_url
        self._api_key = api_key
        self._client = client
        register_secret(api_key)
        register_secret(getattr(client, "api_key", None))
        self._clients: dict[tuple[str, float], Any] = {}
        self._lock = threading.Lock()

    def _get_client(self, seconds: float) -> Any:
        if self._client is not None:
            return self._client
        key = self._api_key or os.environ.get(ENV_API_KEY)
        if not key:
            raise RerankError(f"{self.model_id}: no API key; set {ENV_API_KEY} or pass api_key=...")
        register_secret(key)
        with self._lock:
            client = self._clients.get((key, seconds))
            if client is None:
                if len(self._clients) >= 8:
                    self._clients.clear()
                client = self._voyageai.Client(
                    api_key=key, max_retries=0, timeout=seconds, base_url=self.base_url
                )
                self._clients[(key, seconds)] = client
            return client

    def rerank(
        self, query: str, documents: Sequence[str], *, top_k: int | None = None, timeout: float | None = None
    ) -> list[RerankResult]:
        """Scores for ``documents``, best first (at most ``top_k``); RerankError on any failure."""
        docs, limit = check_request(query, documents, top_k)
        seconds = resolve_timeout(timeout, self.timeout)
        if not docs:
            return []
        client = self._get_client(seconds)
        failure: str | None = None
        pairs: list[tuple[Any, Any]] = []
        try:
            response = client.rerank(query, docs, model=self.model, top_k=limit)
            pairs = [(r.index, r.relevance_score) for r in response.results]
        except Exception as exc:  # noqa: BLE001 - any SDK failure becomes a RerankError

            failure = describe_voyage_error(exc, timeout=seconds, secrets=(self._api_key,))
        if failure is not None:
            # raised outside the handler, so neither __cause__ nor __context__ holds the SDK's
            # error: it keeps the upstream's raw answer (which may echo the key)
            raise RerankError(f"{self.model_id} failed: {failure}")
        return finish_results(pairs, len(docs), limit, self.model_id)

    def __repr__(self) -> str:
        return f"VoyageReranker(model_id={self.model_id!r}, timeout={self.timeout})"
