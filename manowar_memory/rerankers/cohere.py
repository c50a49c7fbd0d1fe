"""Cohere rerank through the official ``cohere`` SDK (``ClientV2``, ``POST /v2/rerank``)."""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import Any

from ..errors import ConfigurationError, MissingDependencyError, RerankError
from ..redaction import redact, redact_library_logs, register_secret
from ._shared import DEFAULT_TIMEOUT, check_request, finish_results, resolve_timeout
from .base import RerankResult

__all__ = ["CohereReranker"]

ENV_KEYS = ("CO_API_KEY", "COHERE_API_KEY")


def _import_cohere() -> Any:
    try:
        import cohere
    except ImportError as exc:
        raise MissingDependencyError("cohere", "cohere", "The Cohere reranker") from exc
    redact_library_logs("cohere", "fern", "httpx", "httpcore")
    return cohere


class CohereReranker:
    """Reranks with a Cohere model (``rerank-v3.5`` by default).

    The key is ``api_key``, else ``CO_API_KEY``, else ``COHERE_API_KEY``, read at call time;
    without one, :meth:`rerank` raises :class:`RerankError` (so the ranking stage fails soft).
    ``base_url`` (no ``/v2``) defaults to ``CO_API_URL`` or Cohere's API. ``timeout`` (seconds)
    is passed to the SDK per request, with no retries. Pass ``client`` to reuse a ``ClientV2``.
    """

    def __init__(
        self,
        model: str = "rerank-v3.5",
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        client: Any | None = None,
    ) -> None:
        if not model:
            raise ConfigurationError("CohereReranker needs a model name, e.g. 'rerank-v3.5'")
        self.model = model
        self.model_id = f"cohere:{model}"
        self.timeout = resolve_timeout(timeout, DEFAULT_TIMEOUT)
        self.base_url = base_url or os.environ.get("CO_API_URL") or None
        self._api_key = api_key
        register_secret(api_key)
        self._cohere = _import_cohere()
        self._client = client
        self._client_key: str | None = None
        self._lock = threading.Lock()

    def _get_client(self) -> Any:
        if self._client is not None and self._client_key is None:
            return self._client  # supplied by the caller
        key = self._api_key or next((os.environ[k] for k in ENV_KEYS if os.environ.get(k)), None)
        if not key:
            raise RerankError(f"{self.model_id}: no API key; set CO_API_KEY (or COHERE_API_KEY) or pass api_key=...")
        register_secret(key)
        with self._lock:
            if self._client is None or self._client_key != key:
                self._client = self._cohere.ClientV2(
                    api_key=key, base_url=self.base_url, timeout=self.timeout, max_retries=0
                )
                self._client_key = key
            return self._client

    def rerank(
        self, query: str, documents: Sequence[str], *, top_k: int | None = None, timeout: float | None = None
    ) -> list[RerankResult]:
        """Scores for ``documents``, best first (at most ``top_k``); RerankError on any failure."""
        docs, limit = check_request(query, documents, top_k)
        seconds = resolve_timeout(timeout, self.timeout)
        if not docs:
            return []
        client = self._get_client()
        failure: str | None = None
        pairs: list[tuple[Any, Any]] = []
        try:
            response = client.rerank(
                model=self.model,
                query=query,
                documents=docs,
                top_n=limit,
                request_options={"timeout_in_seconds": seconds, "timeout": seconds, "max_retries": 0},
            )
            pairs = [(r.index, r.relevance_score) for r in (response.results or [])]
        except Exception as exc:  # noqa: BLE001 - any SDK failure becomes a RerankError
            failure = self._describe(exc, seconds)
        if failure is not None:
            # raised outside the handler, so neither __cause__ nor __context__ holds the SDK's
            # error: it keeps the upstream's raw answer and headers (which may echo the key)
            raise RerankError(f"{self.model_id} failed: {failure}")
        return finish_results(pairs, len(docs), limit, self.model_id)

    def _describe(self, exc: BaseException, seconds: float) -> str:
        """One line about ``exc``, credentials redacted before anything is shortened."""
        import httpx

        secrets = (self._api_key, self._client_key)

        if isinstance(exc, httpx.TimeoutException):
            return f"timed out after {seconds:g} s"
        if isinstance(exc, httpx.HTTPError):
            return redact(f"could not reach {self.base_url or 'api.cohere.com'}: {type(exc).__name__}: {exc}", secrets)
        status = getattr(exc, "status_code", None)
        if status is not None:
            body = getattr(exc, "body", None)
            message = body.get("message") if isinstance(body, dict) else body
            text = " ".join(redact(str(message), secrets).split())[:300] if message else type(exc).__name__
            if isinstance(status, int) and 200 <= status < 300:
                return f"unusable response (HTTP {status}): {text}"
            hint = " (check CO_API_KEY or api_key)" if status == 401 else " (rate limited)" if status == 429 else ""
            return f"HTTP {status}: {text}{hint}"
        return redact(f"{type(exc).__name__}: {exc}", secrets)

    def __repr__(self) -> str:
        return f"CohereReranker(model_id={self.model_id!r}, timeout={self.timeout})"
