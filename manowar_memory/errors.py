"""Errors raised by manowar_memory.

Every error derives from :class:`ManowarError`, so ``except ManowarError`` catches
anything this library raises on purpose.

Hierarchy::

    ManowarError
    ├── InvalidInputError (also ValueError)   bad arguments from the caller
    │   ├── ScopeError                         a scope that cannot be normalised
    │   ├── FilterError                        a filter outside the allowlist
    │   └── ConflictError                      a write that contradicts stored data (another active row has this text)
    ├── ConfigurationError                     a setting or provider that cannot work
    │   ├── InvalidConfigError (also ValueError)  a settings model refused a value (out of range, NaN, unknown field)
    │   └── MissingDependencyError (also ImportError)  an optional extra is not installed
    ├── EmbeddingError                         the configured embedder failed (never silently replaced)
    │   └── PartialIngestError                 ...part-way through an ingest: what was stored, what to re-run
    ├── RerankError                            a reranker failed (the ranking stage fails soft on it)
    ├── StoreError                             the storage backend failed
    │   ├── StoreUnavailableError              no server/primary reachable now (failover): retry the call
    │   └── NotFoundError (also KeyError)      a record that does not exist
    ├── PinningError                           pinning an archive to IPFS (Pinata) failed
    ├── ExtractionError                        a fact extractor failed
    └── ToolCallError                          a catalog tool failed; ``payload`` is the structured error
"""

from __future__ import annotations

from typing import Any, TypeVar

from .redaction import redact, redact_value

__all__ = [
    "ConfigurationError",
    "ConflictError",
    "EmbeddingError",
    "ExtractionError",
    "FilterError",
    "InvalidConfigError",
    "InvalidInputError",
    "ManowarError",
    "MissingDependencyError",
    "NotFoundError",
    "PartialIngestError",
    "PinningError",
    "RerankError",
    "ResolverError",
    "ScopeError",
    "StoreError",
    "StoreUnavailableError",
    "ToolCallError",
]

_E = TypeVar("_E", bound=BaseException)


def detach(error: _E) -> _E:
    """(For the library's provider code; not exported.) ``error`` with its exception chain cut (``__cause__`` and ``__context__`` cleared).

    A provider SDK's or HTTP client's exception can hold the upstream's raw answer and the
    request's headers (``Authorization: Bearer <key>``), and error trackers read the whole
    chain, suppressed context included. Raise the result *outside* any ``except`` block
    (Python sets ``__context__`` again when raising inside one)::

        failure = None
        try:
            ...
        except SDKError as exc:
            failure = RerankError(f"... {describe(exc)}")
        if failure is not None:
            raise detach(failure)
    """
    error.__cause__ = None
    error.__context__ = None
    error.__suppress_context__ = False
    return error


class ManowarError(Exception):
    """Root of every error raised by manowar_memory.

    The message is redacted (:func:`manowar_memory.redaction.redact`): a provider key that an
    upstream echoed into its error body never reaches an exception, a degradation or a log."""

    def __init__(self, *args: Any) -> None:
        if args and isinstance(args[0], str):
            args = (redact(args[0]), *args[1:])
        super().__init__(*args)


class InvalidInputError(ManowarError, ValueError):
    """The caller passed an argument that cannot be used; the message says what to pass instead."""


class ScopeError(InvalidInputError):
    """A scope is missing a required key or has an invalid value."""


class FilterError(InvalidInputError):
    """A filter uses a path, operator or value outside the allowlist."""


class ConflictError(InvalidInputError):
    """The write contradicts what is stored and retrying it cannot help: for example updating a
    fact to the text of another active fact of the same scope (the REST API answers 409).
    ``existing_id`` is the row that holds the text, when known."""

    def __init__(self, message: str, *, existing_id: str | None = None) -> None:
        super().__init__(message)
        self.existing_id = existing_id


class ConfigurationError(ManowarError):
    """A setting, provider name or credential cannot work as configured."""


class InvalidConfigError(ConfigurationError, ValueError):
    """A settings model (:class:`~manowar_memory.MemoryConfig`, ``RetrievalConfig``,
    ``PackerConfig``) refused a value: unknown field, wrong type, out of range, NaN or infinity.
    The message is pydantic's (each field and what it accepts); ``errors`` its structured list.
    Also a ``ValueError``, as pydantic's error was."""

    def __init__(self, message: str, *, errors: list[Any] | None = None) -> None:
        super().__init__(message)
        self.errors = list(errors or [])


class MissingDependencyError(ConfigurationError, ImportError):
    """An optional dependency is not installed; the message gives the pip command."""

    def __init__(self, package: str, extra: str, purpose: str) -> None:
        self.package = package
        self.extra = extra
        super().__init__(
            f"{purpose} needs the `{package}` package, which is not installed. "
            f'Install it with: pip install "manowar-memory[{extra}]"'
        )


class EmbeddingError(ManowarError):
    """The configured embedder failed. The engine never falls back to another embedder."""


class PartialIngestError(EmbeddingError):
    """The embedder failed part-way through an ingest: the batches before the failure are
    stored, nothing after them is.

    ``stored_ids`` / ``stored_keys`` are the rows stored by the call (the keys of those
    that had one), ``pending_keys`` the keys of the items not stored, ``total`` the number of
    items. Items with a key are stored once, so running the same ingest again stores only
    the rest."""

    def __init__(self, message: str, *, total: int, stored_ids: list[str], stored_keys: list[str],
                 pending_keys: list[str]) -> None:
        super().__init__(message)
        self.total = total
        self.stored_ids = stored_ids
        self.stored_keys = stored_keys
        self.pending_keys = pending_keys

    @property
    def stored(self) -> int:
        """How many items the failed call stored (or found already stored)."""
        return len(self.stored_ids)


class RerankError(ManowarError):
    """A reranker failed (credentials, timeout, upstream error, unusable answer)."""


class StoreError(ManowarError):
    """The storage backend failed or holds data this version cannot read."""


class StoreUnavailableError(StoreError):
    """The store could not be reached or had no writable primary for a while (a replica-set
    election after a crash, a network cut); the server answered nothing wrong about the data.

    ``retryable`` is always True: call the same method again after a short wait. A write may or
    may not have been applied before the error, so retry only calls that are idempotent:
    ``remember`` (one row per fact), ``ingest`` with item keys, deletes and reads. ``post_turn``
    is not idempotent: look for its ``turn_id`` (``thread_messages``) before sending it again.
    ``operation`` names the store operation that failed."""

    retryable = True

    def __init__(self, message: str, *, operation: str = "") -> None:
        super().__init__(message)
        self.operation = operation


class NotFoundError(StoreError, KeyError):
    """The requested record does not exist in this scope."""

    def __str__(self) -> str:  # KeyError quotes its message; keep it readable
        return str(self.args[0]) if self.args else "not found"


class PinningError(ManowarError):
    """Pinning an archive to IPFS failed: credentials rejected, upstream error or timeout.

    ``status`` is the HTTP status (None for a timeout or network error); ``retryable`` says
    whether trying again later may help (timeouts, 429 and 5xx answers)."""

    def __init__(self, message: str, *, status: int | None = None, retryable: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.retryable = retryable


class ExtractionError(ManowarError):
    """A fact extractor failed to produce facts."""


class ResolverError(ManowarError):
    """A fact resolver (an LLM asked which stored fact a new one updates) failed or gave an
    answer that could not be used; the engine then stores the fact as the slot rules would."""


class ToolCallError(ManowarError):
    """A catalog tool call failed; ``payload`` is the structured error every framework returns:
    ``{"error": {"type": ..., "message": ..., "tool": ...}}``."""

    def __init__(self, payload: dict[str, Any]) -> None:
        payload = redact_value(payload)
        super().__init__(payload["error"]["message"])
        self.payload = payload

    def to_json(self) -> str:
        """The payload as JSON text (what a model reads)."""
        import json

        return json.dumps(self.payload, ensure_ascii=False)
