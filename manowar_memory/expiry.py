"""Forgetting on purpose: time to live of memory rows.

A row that should stop being recalled at some point carries ``metadata.expiresAt``, epoch
milliseconds (the one representation on every store). It comes from

* an explicit ``ttl`` (seconds as an int or float, or a :class:`datetime.timedelta`),
  counted from the row's ``created_at`` (its observation time, now unless given), or an
  absolute ``expires_at`` (epoch ms, or a timezone-aware :class:`datetime.datetime`), passed
  to ``remember`` / ``ingest`` and their scoped and async twins; or
* :attr:`~manowar_memory.config.MemoryConfig.ttl_by_kind` when the write gave none: the
  row's fact type (facts), then its source, then its layer, then ``"*"``
  (:func:`default_ttl_seconds`). A protected row (pinned, or ``system`` trust) gets no default TTL.

Every read with ``active_only`` (search, ``pre_turn``, the keyword, vector and entity lanes,
listing, ``get_item``) hides a row once ``expiresAt <= now``, evaluated by the store at query
time, before any job runs. The ``expire`` maintenance job
(:func:`manowar_memory.jobs.core.expire`) then archives (status :data:`EXPIRED`) or deletes
the expired rows, and optionally forgets rows nobody recalls (status :data:`FORGOTTEN`).
"""

from __future__ import annotations

import datetime as _dt
import math
from collections.abc import Mapping
from typing import Any

from .errors import InvalidInputError

__all__ = [
    "EXPIRED",
    "EXPIRES_AT",
    "FORGOTTEN",
    "TTL_KINDS",
    "TtlLike",
    "check_expires_at_value",
    "default_ttl_seconds",
    "expires_at_of",
    "is_expired",
    "is_protected",
    "kind_of",
    "resolve_expiry",
    "ttl_to_ms",
]

#: The metadata key holding a row's expiry (epoch ms).
EXPIRES_AT = "expiresAt"
#: Status of a row the ``expire`` job archived because its time to live ran out.
EXPIRED = "expired"
#: Status of a row the ``expire`` job archived because nobody recalled it (decay).
FORGOTTEN = "forgotten"
#: What a time to live may be given as: seconds, or a timedelta.
TtlLike = int | float | _dt.timedelta

_FACT_TYPES = ("preference", "identity", "context", "skill", "relationship", "event")
_SOURCES = ("session", "knowledge", "pattern", "archive", "fact")
#: The keys :attr:`MemoryConfig.ttl_by_kind` accepts: fact types, sources, the two memory-row layers, ``*``.
TTL_KINDS: tuple[str, ...] = (*_FACT_TYPES, *_SOURCES, "graph", "vectors", "*")
_MAX_MS = 253_402_300_799_999  # the end of year 9999, as validation.MAX_TIMESTAMP_MS


def ttl_to_ms(ttl: Any, what: str = "ttl") -> int:
    """A time to live in whole milliseconds (at least 1): ``ttl`` is seconds (int or float) or a
    :class:`~datetime.timedelta`. Zero, negative, NaN, infinite and other types are refused
    with :class:`InvalidInputError`."""
    if isinstance(ttl, _dt.timedelta):
        seconds = ttl.total_seconds()
    elif isinstance(ttl, bool) or not isinstance(ttl, (int, float)):
        raise InvalidInputError(
            f"{what} must be a number of seconds (int or float) or a datetime.timedelta, got {type(ttl).__name__}")
    else:
        seconds = float(ttl)
    if not math.isfinite(seconds) or seconds <= 0:
        raise InvalidInputError(
            f"{what} must be a positive, finite time to live, got {ttl!r}; leave it out (None) for a row that never "
            "expires, or delete the row to forget it now")
    return max(1, math.ceil(seconds * 1000))


def check_expires_at_value(value: Any, what: str = "expires_at") -> int:
    """An absolute expiry as epoch ms: an int/float of epoch milliseconds, or a timezone-aware
    :class:`~datetime.datetime`. A naive datetime is refused (its zone would be a guess)."""
    if isinstance(value, _dt.datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise InvalidInputError(
                f"{what} is a naive datetime; pass a timezone-aware one (datetime.now(timezone.utc) + ...)")
        ms = math.floor(value.timestamp() * 1000)
    elif isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidInputError(
            f"{what} must be epoch milliseconds (int) or a timezone-aware datetime, got {type(value).__name__}")
    elif not math.isfinite(value):
        raise InvalidInputError(f"{what} must be a finite number of epoch milliseconds, got {value!r}")
    else:
        ms = int(value)
    if not 0 < ms <= _MAX_MS:
        raise InvalidInputError(f"{what}={value!r} is not a time between 1970 and year 9999 in epoch milliseconds")
    return ms


def resolve_expiry(ttl: Any = None, expires_at: Any = None, *, base: int) -> int | None:
    """The ``expiresAt`` of a write: ``base + ttl`` (``base``: the row's created_at), or the
    absolute ``expires_at``, or None when neither is given. Both at once is refused."""
    if ttl is not None and expires_at is not None:
        raise InvalidInputError("pass ttl or expires_at, not both")
    if ttl is not None:
        return min(_MAX_MS, base + ttl_to_ms(ttl))
    if expires_at is not None:
        return check_expires_at_value(expires_at)
    return None


def expires_at_of(metadata: Mapping[str, Any] | None) -> int | None:
    """A row's expiry (epoch ms) from its metadata; None when it has none (or not a number)."""
    if not metadata:
        return None
    value = metadata.get(EXPIRES_AT)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return int(value)


def is_expired(metadata: Mapping[str, Any] | None, now: int) -> bool:
    """Whether a row with this metadata has expired at ``now`` (epoch ms)."""
    at = expires_at_of(metadata)
    return at is not None and at <= now


def is_protected(metadata: Mapping[str, Any] | None) -> bool:
    """Whether a row is protected from forgetting by default: pinned (``retention="pinned"`` or
    ``pinned`` true) or of the ``system`` trust level. Such a row gets no default TTL and is
    never forgotten by decay; an explicit TTL on it still applies."""
    meta = metadata or {}
    if meta.get("retention") == "pinned" or meta.get("pinned") is True:
        return True
    return any(meta.get(key) == "system" for key in ("trust", "trustLevel", "trust_level"))


def kind_of(source: str, metadata: Mapping[str, Any] | None) -> str:
    """The kind a row is reported and configured by: its fact type for a fact with one, else its source."""
    fact_type = (metadata or {}).get("factType")
    if source == "fact" and isinstance(fact_type, str) and fact_type in _FACT_TYPES:
        return fact_type
    return source


def default_ttl_seconds(ttl_by_kind: Mapping[str, float], source: str, metadata: Mapping[str, Any]) -> float | None:
    """The configured time to live of a row written without one: the first of its fact type
    (facts), its source, its layer (``graph`` for facts, ``vectors`` otherwise) and ``*``
    found in ``ttl_by_kind``. None for a protected row (:func:`is_protected`) or when none applies."""
    if not ttl_by_kind or is_protected(metadata):
        return None
    layer = "graph" if source == "fact" else "vectors"
    for key in (kind_of(source, metadata), source, layer, "*"):
        if key in ttl_by_kind:
            return float(ttl_by_kind[key])
    return None
