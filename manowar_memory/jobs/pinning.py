"""Pinning archives to IPFS through Pinata's REST API (``POST /pinning/pinJSONToIPFS``).

Credentials: ``PINATA_JWT`` (sent as ``Authorization: Bearer``), else ``PINATA_API_KEY`` (or the
reference's misspelled ``PINATA_API_Key``) with ``PINATA_API_SECRET`` (sent as the headers
``pinata_api_key`` / ``pinata_secret_api_key``). The API base is ``PINATA_API_URL`` (default
``https://api.pinata.cloud``), so tests and gateways can point elsewhere.

Each request has a timeout; timeouts, network errors, 429 and 5xx answers are retried with
exponential back-off and jitter (a ``Retry-After`` header is honoured, capped), other answers
are not: a rejected credential fails at once. Pinning the same JSON twice gives the same CID,
so a retry after a timeout cannot create a second, different pin.

>>> from manowar_memory.jobs.pinning import ArchivePinParams, archive_pin
>>> archive_pin(store, ArchivePinParams(archive_id="arc_..."))   # doctest: +SKIP
{'archiveId': 'arc_...', 'pinned': True, 'ipfsHash': 'bafkrei...', 'pinSize': 1234, ...}
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict, Field
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential,
    wait_random,
)

from .._util import now_ms
from ..errors import ConfigurationError, NotFoundError, PinningError, StoreError, detach
from ..records import Archive
from ..redaction import redact, redact_library_logs, register_secret
from ._store import JobStore

__all__ = [
    "DEFAULT_PINATA_API_URL",
    "NO_CREDENTIALS",
    "ArchivePinParams",
    "PinResult",
    "PinataClient",
    "PinataCredentials",
    "archive_pin",
    "archive_pin_payload",
    "pin_archive",
    "pin_report_after_create",
]

DEFAULT_PINATA_API_URL = "https://api.pinata.cloud"
NO_CREDENTIALS = (
    "Pinata credentials not configured: set PINATA_JWT, or PINATA_API_KEY and PINATA_API_SECRET "
    "(or pass PinataCredentials)"
)


@dataclass(frozen=True, repr=False)
class PinataCredentials:
    """A Pinata JWT, or an API key with its secret (the JWT wins when both are given)."""

    jwt: str | None = None
    api_key: str | None = None
    api_secret: str | None = None

    def __post_init__(self) -> None:
        for secret in (self.jwt, self.api_key, self.api_secret):
            register_secret(secret)  # redacted from every message, log line and job document
        if self.jwt:
            return
        if self.api_key and self.api_secret:
            return
        if self.api_key or self.api_secret:
            missing = "api_secret (PINATA_API_SECRET)" if self.api_key else "api_key (PINATA_API_KEY)"
            raise ConfigurationError(f"Pinata credentials are incomplete: {missing} is missing; or use a JWT (PINATA_JWT)")
        raise ConfigurationError(NO_CREDENTIALS)

    def __repr__(self) -> str:  # never print secrets
        kind = "jwt" if self.jwt else "api_key"
        return f"PinataCredentials({kind}=***)"

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> PinataCredentials | None:
        """Credentials from the environment; None when none of the variables is set."""
        env = os.environ if environ is None else environ
        jwt = (env.get("PINATA_JWT") or "").strip() or None
        key = (env.get("PINATA_API_KEY") or env.get("PINATA_API_Key") or "").strip() or None
        secret = (env.get("PINATA_API_SECRET") or "").strip() or None
        if not (jwt or key or secret):
            return None
        return cls(jwt=jwt, api_key=key, api_secret=secret)

    def headers(self) -> dict[str, str]:
        """The authentication headers for a request."""
        if self.jwt:
            return {"Authorization": f"Bearer {self.jwt}"}
        return {"pinata_api_key": str(self.api_key), "pinata_secret_api_key": str(self.api_secret)}


@dataclass(frozen=True)
class PinResult:
    """What Pinata answered to a pin: the CID (``IpfsHash``), ``PinSize`` and ``Timestamp``."""

    cid: str
    pin_size: int | None = None
    timestamp: str | None = None
    is_duplicate: bool | None = None
    attempts: int = 1
    raw: dict[str, Any] = field(default_factory=dict, compare=False)


def _env_number(name: str, default: float) -> float:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigurationError(f"{name} must be a number, got {raw!r}") from None
    if not math.isfinite(value):
        raise ConfigurationError(f"{name} must be a finite number, got {raw!r}")
    return value


_NOT_JSON = object()  # a response body that did not decode


class _Transient(PinningError):
    """A failure worth retrying (timeout, network, 429, 5xx)."""

    def __init__(self, message: str, *, status: int | None = None, retry_after: float | None = None) -> None:
        super().__init__(message, status=status, retryable=True)
        self.retry_after = retry_after


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after")
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


def _reason(response: httpx.Response) -> str:
    """Pinata's ``{"error": {"reason", "details"}}`` (or any body) as one short line, with
    credentials redacted (before it is shortened: a cut key is no longer recognisable)."""
    return redact(_raw_reason(response))


def _raw_reason(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        text = redact(response.text.strip().replace("\n", " "))
        return text[:200] or response.reason_phrase
    err = body.get("error") if isinstance(body, dict) else None
    if isinstance(err, dict):
        parts = [str(err.get(k)) for k in ("reason", "details") if err.get(k)]
        if parts:
            return ": ".join(parts)
    if isinstance(err, str):
        return err
    if isinstance(body, dict) and body.get("message"):
        return str(body["message"])
    return redact(str(body))[:200]


class PinataClient:
    """A small synchronous client for Pinata's pinning API.

    ``credentials``: default :meth:`PinataCredentials.from_env` (missing ones raise
    :class:`ConfigurationError`). ``base_url``: default ``PINATA_API_URL`` or
    ``https://api.pinata.cloud``. ``timeout`` bounds each attempt (seconds; default
    ``PINATA_TIMEOUT_SECONDS`` or 30); ``max_attempts`` counts the first try (default
    ``PINATA_MAX_ATTEMPTS`` or 4); back-off starts at ``backoff_seconds`` and doubles,
    with jitter, up to ``max_backoff_seconds``. Pass ``http_client`` to reuse an ``httpx.Client``.
    """

    def __init__(
        self,
        credentials: PinataCredentials | None = None,
        *,
        base_url: str | None = None,
        timeout: float | None = None,
        max_attempts: int | None = None,
        backoff_seconds: float = 0.5,
        max_backoff_seconds: float = 8.0,
        http_client: httpx.Client | None = None,
    ) -> None:
        creds = credentials if credentials is not None else PinataCredentials.from_env()
        if creds is None:
            raise ConfigurationError(NO_CREDENTIALS)
        timeout = _env_number("PINATA_TIMEOUT_SECONDS", 30.0) if timeout is None else timeout
        max_attempts = int(_env_number("PINATA_MAX_ATTEMPTS", 4)) if max_attempts is None else max_attempts
        if not (timeout > 0):
            raise ConfigurationError(f"timeout must be > 0 seconds, got {timeout!r}")
        if max_attempts < 1:
            raise ConfigurationError(f"max_attempts must be at least 1, got {max_attempts!r}")
        self.credentials = creds
        redact_library_logs("httpx", "httpcore")
        self.base_url = (base_url or os.environ.get("PINATA_API_URL") or DEFAULT_PINATA_API_URL).rstrip("/")
        self.timeout = float(timeout)
        self.max_attempts = int(max_attempts)
        self.backoff_seconds = max(0.0, float(backoff_seconds))
        self.max_backoff_seconds = max(self.backoff_seconds, float(max_backoff_seconds))
        self._client = http_client
        self._owns_client = http_client is None
        # exponential back-off with jitter (so concurrent workers do not retry in lockstep)
        self._backoff = wait_exponential(multiplier=self.backoff_seconds, max=self.max_backoff_seconds) + wait_random(
            0, self.backoff_seconds)

    @classmethod
    def from_env(cls, **kwargs: Any) -> PinataClient:
        """A client from ``PINATA_*`` variables; raises :class:`ConfigurationError` without credentials."""
        return cls(None, **kwargs)

    # -- lifecycle --
    def _http(self) -> httpx.Client:
        if self._client is None:
            self._client = httpx.Client(timeout=self.timeout)
        return self._client

    def close(self) -> None:
        """Close the HTTP client when this object created it."""
        if self._owns_client and self._client is not None:
            self._client.close()
            self._client = None

    def __enter__(self) -> PinataClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- requests --
    def _wait(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome is not None else None
        hinted = getattr(exc, "retry_after", None)
        if hinted is not None:
            return float(min(hinted, self.max_backoff_seconds))
        return float(min(self._backoff(state), self.max_backoff_seconds))

    def _once(self, method: str, path: str, body: Any | None) -> dict[str, Any]:
        url = f"{self.base_url}{path}"
        transient: _Transient | None = None
        try:
            response = self._http().request(method, url, json=body, headers=self.credentials.headers(),
                                            timeout=httpx.Timeout(self.timeout))
        except httpx.TimeoutException as exc:
            transient = _Transient(f"Pinata did not answer within {self.timeout:g}s ({type(exc).__name__})")
        except httpx.TransportError as exc:
            transient = _Transient(f"could not reach Pinata at {self.base_url}: {type(exc).__name__}: {exc}")
        if transient is not None:  # no chain: httpx's error holds the request, credentials included
            raise detach(transient)
        status = response.status_code
        if status in (401, 403):
            raise PinningError(
                f"Pinata rejected the credentials (HTTP {status} {_reason(response)}); check PINATA_JWT, "
                "or PINATA_API_KEY and PINATA_API_SECRET, and that the key may pin", status=status)
        if status == 429 or status >= 500:
            raise _Transient(f"Pinata answered HTTP {status} ({_reason(response)})", status=status,
                             retry_after=_retry_after(response))
        if status >= 300:
            raise PinningError(f"Pinata refused the request (HTTP {status} {_reason(response)})", status=status)
        try:
            data = response.json()
        except ValueError:
            data = _NOT_JSON
        if data is _NOT_JSON:  # raised outside the handler: the decoder's error holds the whole body
            raise PinningError(f"Pinata answered HTTP {status} with a body that is not JSON", status=status)
        if not isinstance(data, dict):
            raise PinningError(f"Pinata answered HTTP {status} with an unexpected body: {redact(str(data))[:200]}",
                               status=status)
        return data

    def _request(self, method: str, path: str, body: Any | None = None) -> tuple[dict[str, Any], int]:
        attempts = 0

        def attempt() -> dict[str, Any]:
            nonlocal attempts
            attempts += 1
            return self._once(method, path, body)

        retrying = Retrying(
            stop=stop_after_attempt(self.max_attempts), wait=self._wait,
            retry=retry_if_exception(lambda e: isinstance(e, _Transient)), reraise=True,
        )
        failure: PinningError | None = None
        try:
            return retrying(attempt), attempts
        except _Transient as exc:
            failure = PinningError(f"{exc} (gave up after {attempts} attempt{'s' if attempts != 1 else ''})",
                                   status=exc.status, retryable=True)
        raise detach(failure)

    def pin_json(
        self, content: Any, *, name: str | None = None, key_values: Mapping[str, str | int | float] | None = None,
        cid_version: int = 1,
    ) -> PinResult:
        """Pin a JSON-able value; returns the CID. Raises :class:`PinningError` on failure."""
        metadata: dict[str, Any] = {}
        if name:
            metadata["name"] = name
        if key_values:
            metadata["keyvalues"] = dict(key_values)
        body: dict[str, Any] = {"pinataContent": content, "pinataOptions": {"cidVersion": cid_version}}
        if metadata:
            body["pinataMetadata"] = metadata
        data, attempts = self._request("POST", "/pinning/pinJSONToIPFS", body)
        cid = data.get("IpfsHash")
        if not isinstance(cid, str) or not cid:
            raise PinningError(f"Pinata answered without an IpfsHash: {redact(str(data))[:200]}")
        size = data.get("PinSize")
        return PinResult(cid=cid, pin_size=int(size) if isinstance(size, (int, float)) else None,
                         timestamp=data.get("Timestamp"), is_duplicate=data.get("isDuplicate"), attempts=attempts,
                         raw=data)

    def unpin(self, cid: str) -> bool:
        """``DELETE /pinning/unpin/{cid}``: stop pinning ``cid``. True when it was unpinned, False
        when the account did not pin it; :class:`PinningError` when Pinata refused or failed.
        Copies others fetched or pinned meanwhile are beyond reach."""
        url = f"{self.base_url}/pinning/unpin/{cid}"
        try:
            response = self._http().request("DELETE", url, headers=self.credentials.headers(),
                                            timeout=httpx.Timeout(self.timeout))
        except httpx.HTTPError as exc:
            raise PinningError(f"could not reach Pinata at {self.base_url} to unpin: {type(exc).__name__}",
                               retryable=True) from exc
        status = response.status_code
        if status == 404:
            return False
        if status >= 300:
            raise PinningError(f"Pinata refused to unpin {cid} (HTTP {status} {_reason(response)})", status=status,
                               retryable=status == 429 or status >= 500)
        return True

    def test_authentication(self) -> str:
        """``GET /data/testAuthentication``: Pinata's message when the credentials work;
        raises :class:`PinningError` when they are rejected."""
        data, _ = self._request("GET", "/data/testAuthentication")
        return str(data.get("message", ""))


# ----------------------------------------------------------------------------- archive pinning
class ArchivePinParams(BaseModel):
    """Pin a stored archive to IPFS and record its CID on the archive."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    archive_id: str = Field(description="the archive to pin")


def archive_pin_payload(archive: Archive) -> dict[str, Any]:
    """What is pinned: ``{archiveId, agentWallet, summary, dateRange, compressed, content, metadata, createdAt}``."""
    return {
        "archiveId": archive.archive_id, "agentWallet": archive.agent_wallet, "summary": archive.summary,
        "dateRange": archive.date_range, "compressed": archive.compressed, "content": archive.content,
        "metadata": {k: v for k, v in archive.metadata.items() if k != "ipfs"}, "createdAt": archive.created_at,
    }


def pin_archive(store: JobStore, archive: Archive, client: PinataClient, *, now: int | None = None) -> dict[str, Any]:
    """Pin ``archive`` with ``client`` and store the CID (``ipfsCid``) and the pin details
    (``metadata.ipfs``) on it. An archive that already has a CID is not pinned again."""
    if archive.ipfs_cid:
        return {"archiveId": archive.archive_id, "pinned": True, "ipfsHash": archive.ipfs_cid, "alreadyPinned": True}
    result = client.pin_json(
        archive_pin_payload(archive), name=f"manowar-memory-archive-{archive.archive_id}",
        key_values={"archiveId": archive.archive_id, "agentWallet": archive.agent_wallet},
    )
    now = now if now is not None else now_ms()
    details = {"provider": "pinata", "pinSize": result.pin_size, "timestamp": result.timestamp, "pinnedAt": now}
    store.update_archive(archive.archive_id, {"ipfs_cid": result.cid, "metadata": {**archive.metadata, "ipfs": details}})
    return {"archiveId": archive.archive_id, "pinned": True, "ipfsHash": result.cid, "pinSize": result.pin_size,
            "timestamp": result.timestamp, "attempts": result.attempts, "alreadyPinned": False}


def archive_pin(store: JobStore, params: ArchivePinParams, *, client: PinataClient | None = None,
                dry_run: bool = False, changes: Any | None = None, now: int | None = None) -> dict[str, Any]:
    """Pin a stored archive (idempotent). Raises :class:`NotFoundError` for an unknown archive,
    :class:`ConfigurationError` without credentials and :class:`PinningError` when Pinata fails;
    the archive itself is never changed by a failure."""
    archive = store.get_archive(params.archive_id)
    if archive is None:
        raise NotFoundError(f"archive {params.archive_id} does not exist; list archives or create one first")
    if archive.ipfs_cid or dry_run:
        out = {"archiveId": archive.archive_id, "pinned": bool(archive.ipfs_cid), "ipfsHash": archive.ipfs_cid,
               "alreadyPinned": bool(archive.ipfs_cid)}
        return {**out, "dryRun": True} if dry_run else out
    own = client is None
    pinner = client if client is not None else PinataClient.from_env()
    try:
        report = pin_archive(store, archive, pinner, now=now)
    finally:
        if own:
            pinner.close()
    if changes is not None:
        changes.add(archive)
    return report


def pin_report_after_create(store: JobStore, archive_id: str, client: PinataClient | None,
                            now: int | None = None) -> dict[str, Any]:
    """Pin a just-created archive and report the outcome; never raises for a missing
    credential or a Pinata failure (the archive is kept and the report says why it is not pinned)."""
    archive = store.get_archive(archive_id)
    if archive is None:  # pragma: no cover - created just before
        return {"pinned": False, "reason": f"not pinned: archive {archive_id} was not found after creation"}
    own = client is None
    try:
        pinner = client if client is not None else PinataClient.from_env()
    except ConfigurationError as exc:
        if str(exc) == NO_CREDENTIALS:
            return {"pinned": False,
                    "reason": "not pinned: no credentials (set PINATA_JWT, or PINATA_API_KEY and PINATA_API_SECRET)"}
        return {"pinned": False, "reason": f"not pinned: {exc}"}
    try:
        report = pin_archive(store, archive, pinner, now=now)
    except PinningError as exc:
        return {"pinned": False, "reason": f"not pinned: {exc}", "status": exc.status, "retryable": exc.retryable}
    except StoreError as exc:  # pinned, but the CID could not be saved: say so, keep the archive
        return {"pinned": False, "reason": f"pinned but the CID was not saved on the archive: {exc}",
                "retryable": True}
    finally:
        if own:
            pinner.close()
    return {k: v for k, v in report.items() if k != "archiveId"}
