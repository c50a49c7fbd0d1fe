"""Cloudflare Workers AI rerank (``@cf/baai/bge-reranker-base``) over httpx.

``POST {base_url}/accounts/{account}/ai/run/{model}`` with ``Authorization: Bearer {token}``
and ``{query, contexts: [{text}], top_k}``; the answer is
``{success, result: {response: [{id, score}]}}``. Scores of bge-reranker-base lie in [0, 1].
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import Any

import httpx

from ..errors import ConfigurationError, RerankError, detach
from ..redaction import redact, redact_library_logs, register_secret
from ._shared import DEFAULT_TIMEOUT, check_request, finish_results, resolve_timeout
from .base import RerankResult

__all__ = ["CloudflareReranker"]

TOKEN_ENV = ("CF_API_TOKEN", "CLOUDFLARE_API_KEY")
ACCOUNT_ENV = ("CF_ACCOUNT_ID", "CLOUDFLARE_ACCOUNT_ID")


def _first_env(names: tuple[str, ...]) -> str | None:
    return next((os.environ[n] for n in names if os.environ.get(n)), None)


class CloudflareReranker:
    """Reranks with a Cloudflare Workers AI model.

    The token is ``api_token``, else ``CF_API_TOKEN``, else ``CLOUDFLARE_API_KEY``; the account
    is ``account_id``, else ``CF_ACCOUNT_ID``, else ``CLOUDFLARE_ACCOUNT_ID`` (both read at call
    time; missing ones raise :class:`RerankError`). ``timeout`` (seconds) bounds connect, write,
    read and pool waits of each request; there are no retries. Pass ``client`` to reuse an
    ``httpx.Client``.
    """

    def __init__(
        self,
        model: str = "@cf/baai/bge-reranker-base",
        *,
        api_token: str | None = None,
        account_id: str | None = None,
        base_url: str = "https://api.cloudflare.com/client/v4",
        timeout: float = DEFAULT_TIMEOUT,
        client: httpx.Client | None = None,
    ) -> None:
        if not model:
            raise ConfigurationError("CloudflareReranker needs a model name, e.g. '@cf/baai/bge-reranker-base'")
        self.model = model.strip("/")
        self.model_id = f"cloudflare:{self.model}"
        self.base_url = base_url.rstrip("/")
        self.timeout = resolve_timeout(timeout, DEFAULT_TIMEOUT)
        self._api_token = api_token
        register_secret(api_token)
        redact_library_logs("httpx", "httpcore")
        self._account_id = account_id
        self._client = client
        self._owns_client = client is None
        self._lock = threading.Lock()

    def _http(self) -> httpx.Client:
        with self._lock:
            if self._client is None:
                self._client = httpx.Client(timeout=self.timeout)
            return self._client

    def close(self) -> None:
        """Close the HTTP client this reranker created."""
        with self._lock:
            if self._owns_client and self._client is not None:
                self._client.close()
                self._client = None

    def rerank(
        self, query: str, documents: Sequence[str], *, top_k: int | None = None, timeout: float | None = None
    ) -> list[RerankResult]:
        """Scores for ``documents``, best first (at most ``top_k``); RerankError on any failure."""
        docs, limit = check_request(query, documents, top_k)
        seconds = resolve_timeout(timeout, self.timeout)
        if not docs:
            return []
        token = self._api_token or _first_env(TOKEN_ENV)
        account = self._account_id or _first_env(ACCOUNT_ENV)
        missing = [label for label, value in (("CF_API_TOKEN or CLOUDFLARE_API_KEY", token),
                                              ("CF_ACCOUNT_ID or CLOUDFLARE_ACCOUNT_ID", account)) if not value]
        if missing:
            raise RerankError(f"{self.model_id}: missing credentials; set {' and '.join(missing)}")
        register_secret(token)
        url = f"{self.base_url}/accounts/{account}/ai/run/{self.model}"
        payload = {"query": query, "contexts": [{"text": d} for d in docs], "top_k": limit}
        failure: RerankError | None = None
        try:
            response = self._http().post(
                url, json=payload, headers={"Authorization": f"Bearer {token}"}, timeout=httpx.Timeout(seconds)
            )
        except httpx.TimeoutException:
            failure = RerankError(f"{self.model_id} timed out after {seconds:g} s")
        except httpx.HTTPError as exc:
            failure = RerankError(f"{self.model_id} could not reach {self.base_url}: {type(exc).__name__}: {exc}")
        if failure is not None:  # no chain: httpx's error holds the request, Authorization header included
            raise detach(failure)
        if not 200 <= response.status_code < 300:
            hint = " (check CF_API_TOKEN and CF_ACCOUNT_ID)" if response.status_code in (401, 403) else ""
            raise RerankError(
                f"{self.model_id} failed: HTTP {response.status_code}{hint}: {_snippet(response.text)}"
            )
        try:
            body = response.json()
        except ValueError:
            failure = RerankError(f"{self.model_id} returned a body that is not JSON: {_snippet(response.text)}")
        if failure is not None:  # the decoder's error holds the whole body
            raise detach(failure)
        return finish_results(self._pairs(body), len(docs), limit, self.model_id)

    def _pairs(self, body: Any) -> list[tuple[Any, Any]]:
        if not isinstance(body, dict):
            raise RerankError(f"{self.model_id} returned an unexpected body: {_snippet(str(body))}")
        if body.get("success") is False:
            errors = body.get("errors") or []
            detail = _snippet("; ".join(str(e.get("message", e)) if isinstance(e, dict) else str(e) for e in errors))
            raise RerankError(f"{self.model_id} failed: success=false ({detail or 'no error message'})")
        result = body.get("result")
        items = result.get("response") if isinstance(result, dict) else None
        if not isinstance(items, list):
            raise RerankError(f"{self.model_id} returned no result.response list: {_snippet(str(body))}")
        return [(item.get("id"), item.get("score")) for item in items if isinstance(item, dict)]

    def __repr__(self) -> str:
        return f"CloudflareReranker(model_id={self.model_id!r}, timeout={self.timeout})"


def _snippet(text: str, limit: int = 300) -> str:
    """The upstream's text on one line, credentials redacted before it is shortened."""
    return " ".join(redact(text).split())[:limit]
