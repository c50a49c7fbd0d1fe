"""API keys: each key is bound to one agent (and optionally one user) and stored only as its
SHA-256 hash.

A key file (or the ``MANOWAR_API_KEYS`` environment variable) holds JSON, a list of entries::

    [{"sha256": "<hex of sha256(key)>", "agentWallet": "agent-a", "userAddress": "alice", "name": "ci"}]

``manowar api-key --agent agent-a`` prints a new key and its entry. A request naming another
agent (or, for a user-bound key, another user) than its key's is refused, whatever the body says.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigurationError, ManowarError
from ..scope import Scope

__all__ = [
    "KEYS_ENV",
    "ApiKeys",
    "AuthError",
    "ForbiddenScopeError",
    "KeyBinding",
    "hash_key",
    "new_key",
    "presented_key",
    "scope_for",
]

#: The environment variable read for key entries when no key file is given.
KEYS_ENV = "MANOWAR_API_KEYS"

_AGENT = ("agentWallet", "agent_wallet", "agent_id")
_USER = ("userAddress", "user_address", "user_id")


class AuthError(ManowarError):
    """No API key, or an unknown one (HTTP 401)."""


class ForbiddenScopeError(ManowarError):
    """A request names an agent or user its key is not bound to (HTTP 403)."""


def hash_key(key: str) -> str:
    """The hex SHA-256 of an API key, as key entries store it."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def new_key() -> str:
    """A fresh random API key (``mk_`` and 43 URL-safe characters)."""
    return "mk_" + secrets.token_urlsafe(32)


def presented_key(headers: Mapping[str, str]) -> str | None:
    """The API key a request presents (``headers`` with lowercase names, as HTTP servers give
    them): ``X-API-Key`` when not empty, else the credentials of an ``Authorization: Bearer``
    header (the scheme in any case); None when neither is there. The REST API documents both
    as security schemes, and reads them so."""
    api_key = headers.get("x-api-key")
    if api_key:
        return api_key
    scheme, _, credentials = (headers.get("authorization") or "").partition(" ")
    credentials = credentials.strip()
    return credentials if scheme and credentials and scheme.lower() == "bearer" else None


@dataclass(frozen=True)
class KeyBinding:
    """Who a key acts for: one agent, and one user when set."""

    agent_wallet: str
    user_address: str | None = None
    name: str | None = None


class ApiKeys:
    """The configured keys, by hash. Empty means no authentication (loopback only)."""

    def __init__(self, entries: Iterable[Mapping[str, Any]] = ()) -> None:
        self._by_hash: dict[str, KeyBinding] = {}
        for i, entry in enumerate(entries):
            if not isinstance(entry, Mapping):
                raise ConfigurationError(f"API key entry {i} must be an object")
            digest = entry.get("sha256")
            for key in (*_AGENT, *_USER):
                value = entry.get(key)
                if isinstance(value, str) and not value.strip():
                    raise ConfigurationError(
                        f"API key entry {i}: '{key}' is blank; give the id, or leave the key out for a key that "
                        "acts for any user of its agent (an empty id is never read as 'no user')")
            agent = next((entry[k] for k in _AGENT if entry.get(k) is not None), None)
            user = next((entry[k] for k in _USER if entry.get(k) is not None), None)
            if not isinstance(digest, str) or len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
                raise ConfigurationError(f"API key entry {i} needs 'sha256', the lowercase hex SHA-256 of the key")
            if not isinstance(agent, str):
                raise ConfigurationError(f"API key entry {i} needs 'agentWallet', the agent the key acts for")
            if user is not None and not isinstance(user, str):
                raise ConfigurationError(f"API key entry {i}: 'userAddress' must be a string")
            self._by_hash[digest] = KeyBinding(agent, user, entry.get("name"))

    @classmethod
    def load(cls, path: str | Path | None = None, *, env: Mapping[str, str] | None = None) -> ApiKeys:
        """Keys from ``path`` (a JSON file), else from ``$MANOWAR_API_KEYS`` (JSON), else none."""
        if path is not None:
            try:
                text = Path(path).read_text(encoding="utf-8")
            except OSError as exc:
                raise ConfigurationError(f"cannot read the API key file {path}: {exc}") from exc
        else:
            text = (env if env is not None else os.environ).get(KEYS_ENV, "")
            if not text.strip():
                return cls()
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigurationError(f"the API keys are not JSON ({exc})") from exc
        if isinstance(data, Mapping):
            data = data.get("keys", [])
        if not isinstance(data, list):
            raise ConfigurationError("the API keys must be a JSON list of entries (or {\"keys\": [...]})")
        return cls(data)

    def __len__(self) -> int:
        return len(self._by_hash)

    def __bool__(self) -> bool:
        return bool(self._by_hash)

    def authenticate(self, key: str | None) -> KeyBinding:
        """The binding of ``key``; :class:`AuthError` when missing or unknown."""
        if not key:
            raise AuthError("an API key is required: send it as a bearer token (Authorization header) or in X-API-Key")
        digest = hash_key(key)
        found = None
        for known, binding in self._by_hash.items():  # compare every entry: no early exit on a match
            if hmac.compare_digest(known, digest):
                found = binding
        if found is None:
            raise AuthError("unknown API key")
        return found


def scope_for(data: Mapping[str, Any], binding: KeyBinding | None) -> Scope:
    """The scope of a request: its (aliased) scope fields, with the key's agent and user filled
    in; naming another agent or user than the key's raises :class:`ForbiddenScopeError`."""
    raw = {k: v for k, v in data.items() if v is not None}
    if binding is not None:
        for names, bound, what in ((_AGENT, binding.agent_wallet, "agent"), (_USER, binding.user_address, "user")):
            given = [raw.pop(n) for n in names if n in raw]
            if bound is None:
                if given:
                    raw[names[0]] = given[0]
                continue
            if any(g != bound for g in given):
                raise ForbiddenScopeError(f"this API key acts for one {what} only and cannot name another")
            raw[names[0]] = bound
    return Scope.from_dict(raw)
