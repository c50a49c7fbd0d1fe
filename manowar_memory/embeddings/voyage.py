"""Voyage AI embeddings through the official ``voyageai`` SDK.

The key comes from ``api_key`` or ``VOYAGE_API_KEY``. Keys starting ``al-`` are MongoDB
Atlas keys; the SDK then sends them to MongoDB's AI gateway (``https://ai.mongodb.com/v1``).
No retries: a failure raises :class:`~manowar_memory.errors.EmbeddingError` at once
(the engine never falls back to another embedder).
"""

from __future__ import annotations

import os
import threading
from typing import Any

from ..errors import ConfigurationError, EmbeddingError, MissingDependencyError
from ..redaction import redact, redact_library_logs, register_secret
from .base import BaseEmbedder, InputType

__all__ = ["VoyageEmbedder", "describe_voyage_error"]

ENV_API_KEY = "VOYAGE_API_KEY"


def _import_voyageai() -> Any:
    try:
        import voyageai
    except ImportError as exc:
        raise MissingDependencyError("voyageai", "voyage", "The Voyage embedder") from exc
    redact_library_logs("voyage", "voyageai", "requests", "urllib3")  # the SDK logs upstream error bodies
    return voyageai


def describe_voyage_error(exc: BaseException, *, timeout: float | None = None,
                          secrets: tuple[str | None, ...] = ()) -> str:
    """A one-line description of a ``voyageai`` error: its kind, HTTP status and message,
    with credentials (``secrets`` and any credential shape) redacted before it is shortened."""
    name = type(exc).__name__
    status = getattr(exc, "http_status", None)
    message = getattr(exc, "user_message", None) or str(exc) or name
    message = " ".join(redact(str(message), secrets).split())[:300]
    if name == "Timeout" or "timed out" in message.lower():
        return f"timed out after {timeout:g} s" if timeout is not None else "timed out"
    if name == "APIConnectionError":
        return f"could not connect: {message}"
    hint = ""
    if status == 401:
        hint = f" (check {ENV_API_KEY} or api_key)"
    elif status == 429:
        hint = " (rate limited)"
    body = getattr(exc, "http_body", None)
    if isinstance(status, int) and status >= 500 and body:
        clean = " ".join(redact(str(body), secrets).split())
        if clean not in message:
            message = f"{message} {clean[:200]}"
    where = f"HTTP {status} " if status is not None else ""
    return f"{where}{name}: {message}{hint}"


class VoyageEmbedder(BaseEmbedder):
    """Voyage embeddings (``voyage-4-large`` at 1024 dimensions by default).

    ``input_type`` (``"query"`` / ``"document"``) is passed through, ``dimensions`` is sent as
    ``output_dimension`` and is part of :attr:`model_id` (``"voyage:voyage-4-large@1024"``),
    because vectors of different lengths live in different spaces. ``timeout`` (seconds) bounds
    each request (connect and read). Pass ``client`` (a ``voyageai.Client``) to reuse your own;
    :meth:`aembed` then runs it in a worker thread unless ``async_client`` is given too.
    """

    batch_size = 128

    def __init__(
        self,
        model: str = "voyage-4-large",
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        dimensions: int | None = 1024,
        timeout: float = 8.0,
        client: Any | None = None,
        async_client: Any | None = None,
    ) -> None:
        if not model:
            raise ConfigurationError("VoyageEmbedder needs a model name, e.g. 'voyage-4-large'")
        if dimensions is not None and dimensions < 1:
            raise ConfigurationError(f"dimensions must be positive, got {dimensions}")
        if timeout <= 0:
            raise ConfigurationError(f"timeout must be positive, got {timeout}")
        self.model = model
        self.timeout = float(timeout)
        self.base_url = base_url
        self._dimensions = dimensions
        self.model_id = f"voyage:{model}@{dimensions}" if dimensions is not None else f"voyage:{model}"
        self._voyageai = _import_voyageai()
        self._api_key: str | None = None
        if client is None:
            key = api_key or os.environ.get(ENV_API_KEY)
            if not key:
                raise ConfigurationError(
                    f"The Voyage embedder needs an API key: set {ENV_API_KEY} or pass api_key=..."
                )
            self._api_key = key
            register_secret(key)
            client = self._make_client(self._voyageai.Client)
        else:
            register_secret(getattr(client, "api_key", None))
        self._client = client
        self._async_client = async_client
        self._owns_clients = self._api_key is not None
        self._async_lock = threading.Lock()

    def _make_client(self, cls: Any) -> Any:
        return cls(api_key=self._api_key, max_retries=0, timeout=self.timeout, base_url=self.base_url)

    def _error(self, exc: BaseException, count: int) -> EmbeddingError:
        detail = describe_voyage_error(exc, timeout=self.timeout, secrets=(self._api_key,))
        return EmbeddingError(f"{self.model_id} failed to embed {count} text(s): {detail}")

    def _call_kwargs(self, input_type: InputType) -> dict[str, Any]:
        return {"model": self.model, "input_type": input_type, "output_dimension": self._dimensions}

    def _embed_batch(self, texts: list[str], input_type: InputType) -> list[list[float]]:
        try:
            result = self._client.embed(texts, **self._call_kwargs(input_type))
            return [list(v) for v in result.embeddings]
        except self._voyageai.error.VoyageError as exc:
            # not chained: the SDK's error holds the upstream's raw answer (which may echo the key)
            raise self._error(exc, len(texts)) from None
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise EmbeddingError(
                f"{self.model_id} returned an unusable response for {len(texts)} text(s): {type(exc).__name__}: {exc}"
            ) from exc

    def _get_async_client(self) -> Any:
        with self._async_lock:
            if self._async_client is None:
                self._async_client = self._make_client(self._voyageai.AsyncClient)
            return self._async_client

    async def _aembed_batch(self, texts: list[str], input_type: InputType) -> list[list[float]]:
        """One batch through ``voyageai.AsyncClient`` (a thread when only a sync client was given)."""
        if self._async_client is None and not self._owns_clients:
            return await super()._aembed_batch(texts, input_type)
        client = self._get_async_client()
        try:
            result = await client.embed(texts, **self._call_kwargs(input_type))
            return [list(v) for v in result.embeddings]
        except self._voyageai.error.VoyageError as exc:
            # not chained: the SDK's error holds the upstream's raw answer (which may echo the key)
            raise self._error(exc, len(texts)) from None
        except Exception as exc:
            raise EmbeddingError(
                f"{self.model_id} failed to embed {len(texts)} text(s): {type(exc).__name__}: {exc}"
            ) from exc
