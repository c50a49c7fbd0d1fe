"""Scoped invalidation of cached query results: namespace tokens, and a small query cache.

A cached result's key ends with a *token* derived from a few namespace keys of its scope. A
write changes the namespace keys of the rows it wrote, which changes the token of every read
that could see those rows, so their cached results are never found again (they expire on
their own TTL). Nothing is deleted and nothing is scanned.

**The rule.** A read in scope S sees a row W when (see :mod:`manowar_memory.stores.base`)

* the agent is the same;
* W has no user, or W's user is S's user;
* S sets no mode, or W has S's mode; likewise for the hai;
* (thread: the durable layers ignore it, so it plays no part in invalidation).

Keys (``{a}`` the agent, ``_`` no user, ``*`` any mode or hai)::

    read  S: memory:ns:*                        global epoch (bump_all only)
             memory:ns:a={a}                    agent epoch (bump_agent: maintenance jobs)
             memory:ns:a={a}:u=_:m={S.mode|*}:h={S.hai|*}        the agent's shared rows
             memory:ns:a={a}:u={S.user}:m={S.mode|*}:h={S.hai|*} (only when S has a user)
    write W: memory:ns:a={a}:u={W.user|_}:m={m}:h={h}  for m in {*, W.mode}, h in {*, W.hai}

So a read key (user u, mode m, hai h) is written exactly when the written row is visible to
the read: **a write for user A does not invalidate user B's cached queries; a write of
agent-wide (user-less) rows invalidates every user of that agent; a write in mode ``local``
for hai ``h1`` invalidates reads without a mode and reads of (local, h1), not reads of
``global`` or of another hai.** No write touches the global key: unlike the reference (§8.5
[QUIRK]), one agent's writes never empty another agent's caches. Filters are not part of the
rule (a write may invalidate a filtered read it could not affect; never the reverse).

**Values are random, not counters, and never "missing".** A bump sets each key to a fresh
random value (TTL 24 h by default). A read that finds a key missing (never written, expired,
or evicted by a full cache) first gives it a fresh random value too. So a token never repeats:
the reference's counters restart at 1 when they expire and can walk back to a value that an
old, still-live cached entry was keyed with, which serves a stale result.

**Ordering** (what callers must do): read the token *before* querying the store, and bump
*after* the write is committed. A write racing a read then either is seen by the read or
changes the token the read's result was stored under.

Scope values are encoded exactly (no lower-casing), so ``Alice`` and ``alice`` never share
a namespace or a cached result.

**Fences: an invalidation that could not be delivered.** A cache that hangs or is down when a
write tries to bump its keys cannot be told, and another engine sharing it would serve the old
result once it answers again. So a :class:`QueryCache` given a *fence* (the store: every engine
sharing the cache shares it) keys each cached read also by the fence epochs of its agent and of
``*``, read from the store before the query; a write whose bump failed adds one to its agent's
fence (``*`` for :meth:`QueryCache.invalidate_all`) in the store before it returns. Every read
after that write, from any engine, misses the entries filled before it. The price is one small
store read per cached query.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol
from urllib.parse import quote

from .._notes import collect, degrade
from .._util import content_hash
from ..candidates import Candidate
from ..records import Archive, MemoryRecord, Pattern, Session, Transcript
from ..scope import Scope
from .base import Cache

__all__ = [
    "CacheFence",
    "NamespaceTokens",
    "QueryCache",
    "cached_search",
    "decode_search",
    "encode_search",
    "scope_of",
]

NAMESPACE_TTL_SECONDS = 86_400
QUERY_TTL_SECONDS = 120


def _part(value: str | None, missing: str) -> str:
    return missing if value is None else "=" + quote(value, safe="")


class NamespaceTokens:
    """Namespace keys per scope on any :class:`~manowar_memory.cache.base.Cache`.

    ``token(scope)`` reads them (one ``get_many``); ``bump(scope)`` changes the keys a write
    in ``scope`` affects. Both raise what the cache raises; :class:`QueryCache` turns that
    into a bypass.
    """

    def __init__(self, cache: Cache, *, ttl_seconds: float = NAMESPACE_TTL_SECONDS, prefix: str = "memory:ns:") -> None:
        self.cache = cache
        self.ttl_seconds = ttl_seconds
        self.prefix = prefix

    # -- keys --
    def global_key(self) -> str:
        """Read by every scope; bumped only by :meth:`bump_all`."""
        return self.prefix + "*"

    def agent_key(self, agent_wallet: str) -> str:
        """Read by every scope of the agent; bumped by :meth:`bump_agent`."""
        return f"{self.prefix}a{_part(agent_wallet, '_')}"

    def _key(self, agent: str, user: str | None, mode: str, hai: str) -> str:
        return f"{self.agent_key(agent)}:u{user}:m{mode}:h{hai}"

    def read_keys(self, scope: Scope) -> list[str]:
        """The keys whose values make up the token of a read in ``scope``."""
        mode = _part(scope.mode, "*")
        hai = _part(scope.hai_id, "*")
        keys = [self.global_key(), self.agent_key(scope.agent_wallet),
                self._key(scope.agent_wallet, "_", mode, hai)]
        if scope.user_address is not None:
            keys.append(self._key(scope.agent_wallet, _part(scope.user_address, "_"), mode, hai))
        return keys

    def write_keys(self, scope: Scope) -> list[str]:
        """The keys a write of rows in ``scope`` (its user, mode and hai) changes."""
        user = _part(scope.user_address, "_")
        modes = dict.fromkeys(["*", _part(scope.mode, "*")])
        hais = dict.fromkeys(["*", _part(scope.hai_id, "*")])
        return [self._key(scope.agent_wallet, user, m, h) for m in modes for h in hais]

    # -- operations --
    def token(self, scope: Scope) -> str:
        """A short hash of the namespace values of ``scope``; missing keys get a fresh value first."""
        keys = self.read_keys(scope)
        values = list(self.cache.get_many(keys))
        missing = [i for i, v in enumerate(values) if v is None]
        if missing:
            fresh = self._set([keys[i] for i in missing])
            for i, value in zip(missing, fresh):
                values[i] = value
        joined = "|".join(v.decode("utf-8", "replace") for v in values if v is not None)
        return content_hash(joined, 16)

    def _set(self, keys: Sequence[str]) -> list[bytes]:
        values = [uuid.uuid4().hex.encode() for _ in keys]
        items = list(zip(keys, values))
        set_many = getattr(self.cache, "set_many", None)
        if callable(set_many):
            set_many(items, self.ttl_seconds)
        else:
            for key, value in items:
                self.cache.set(key, value, self.ttl_seconds)
        return values

    def bump(self, scope: Scope) -> int:
        """Invalidate cached reads that can see rows written in ``scope``; returns keys changed."""
        return len(self._set(self.write_keys(scope)))

    def bump_agent(self, agent_wallet: str) -> int:
        """Invalidate every cached read of one agent (maintenance that rewrites many rows)."""
        return len(self._set([self.agent_key(agent_wallet)]))

    def bump_all(self) -> int:
        """Invalidate every cached read of every agent (only for global maintenance)."""
        return len(self._set([self.global_key()]))


def _payload_hash(payload: Mapping[str, Any]) -> str:
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return content_hash(text)


def _scope_part(scope: Scope, thread_scoped: bool) -> str:
    parts = [
        _part(scope.agent_wallet, "_"), _part(scope.user_address, "_"), _part(scope.mode, "_"),
        _part(scope.hai_id, "_"), _part(scope.thread_id if thread_scoped else None, "_"),
    ]
    return "a{}:u{}:m{}:h{}:t{}".format(*parts)


class CacheFence(Protocol):
    """Where failed invalidations are recorded for every engine to see (a :class:`~manowar_memory.stores.base.Store`)."""

    def cache_fences(self, keys: Sequence[str]) -> dict[str, int]:
        """The epoch of each fence (0 for one never bumped)."""
        ...

    def bump_cache_fence(self, key: str) -> int:
        """Add one to a fence; the new epoch."""
        ...


def _fence_key(agent_wallet: str | None) -> str:
    return "*" if agent_wallet is None else "a" + _part(agent_wallet, "_")


class QueryCache:
    """Cached query results keyed by scope, payload and namespace token, that never fails a call.

    * ``lookup(kind, scope, payload)`` returns ``(value, key)``: the cached JSON value or None,
      and the key to :meth:`store` a fresh result under (None when the cache is bypassed).
    * ``store(key, value)`` saves a JSON-able value for ``ttl_seconds``.
    * ``invalidate(scope)`` / ``invalidate_agent(agent)`` / ``invalidate_all()`` after writes.

    Any cache error is reported with :func:`~manowar_memory._notes.degrade` and the call goes
    on without the cache. When an invalidation fails, this process also stops reading cached
    results for one query TTL, since entries it could not invalidate may be stale.
    ``thread_scoped=False`` leaves the thread out of the key, for reads of durable layers only.
    """

    def __init__(
        self,
        cache: Cache,
        *,
        ttl_seconds: float = QUERY_TTL_SECONDS,
        tokens: NamespaceTokens | None = None,
        prefix: str = "memory:query:",
        label: str = "query cache",
        fence: CacheFence | None = None,
    ) -> None:
        self.cache = cache
        self.fence = fence
        self.ttl_seconds = max(1.0, float(ttl_seconds))
        self.tokens = tokens or NamespaceTokens(cache, ttl_seconds=max(NAMESPACE_TTL_SECONDS, 10 * self.ttl_seconds))
        if self.tokens.ttl_seconds <= 2 * self.ttl_seconds:
            raise ValueError("the namespace TTL must be well above the query TTL (at least twice)")
        self.prefix = prefix
        self.label = label
        self._bypass_until = 0.0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def _name(self) -> str:
        return getattr(self.cache, "name", type(self.cache).__name__)

    def key(self, kind: str, scope: Scope, payload: Mapping[str, Any], *, thread_scoped: bool = True) -> str:
        """The full cache key (reads the namespace token; raises on cache errors)."""
        token = self.tokens.token(scope)
        if self.fence is not None:
            epochs = self.fence.cache_fences([_fence_key(None), _fence_key(scope.agent_wallet)])
            token += ":f" + ".".join(str(v) for v in epochs.values())
        return f"{self.prefix}{kind}:{_scope_part(scope, thread_scoped)}:{_payload_hash(payload)}:ns:{token}"

    def lookup(
        self, kind: str, scope: Scope, payload: Mapping[str, Any], *, thread_scoped: bool = True
    ) -> tuple[Any | None, str | None]:
        """The cached value (None on a miss) and the key for storing a fresh one."""
        if time.monotonic() < self._bypass_until:
            degrade(f"{self.label} bypassed: a recent invalidation failed, cached results may be stale")
            return None, None
        try:
            key = self.key(kind, scope, payload, thread_scoped=thread_scoped)
            raw = self.cache.get(key)
        except Exception as exc:  # noqa: BLE001 - any cache failure means "bypass"
            degrade(f"{self.label} bypassed: {self._name()} read failed ({type(exc).__name__})")
            return None, None
        if raw is None:
            self.misses += 1
            return None, key
        try:
            value = json.loads(raw)
        except ValueError:
            self.misses += 1
            return None, key
        self.hits += 1
        return value, key

    def store(self, key: str | None, value: Any) -> None:
        """Save ``value`` (JSON-able) under a key from :meth:`lookup`; a None key is a no-op."""
        if key is None:
            return
        try:
            data = json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
            self.cache.set(key, data, self.ttl_seconds)
        except Exception as exc:  # noqa: BLE001
            degrade(f"{self.label} bypassed: {self._name()} write failed ({type(exc).__name__})")

    def _invalidate(self, fence_agent: str | None, fn: Any, *args: Any) -> bool:
        try:
            fn(*args)
            return True
        except Exception as exc:  # noqa: BLE001
            with self._lock:
                self._bypass_until = time.monotonic() + self.ttl_seconds
            fenced = ""
            if self.fence is not None:
                try:
                    self.fence.bump_cache_fence(_fence_key(fence_agent))
                    fenced = "; the store's cache fence was raised, so no engine serves the stale entries"
                except Exception as fence_exc:  # noqa: BLE001
                    fenced = f"; raising the cache fence failed too ({type(fence_exc).__name__})"
            degrade(
                f"{self.label} invalidation failed: {self._name()} unavailable ({type(exc).__name__}); "
                f"cached reads are bypassed here for {self.ttl_seconds:.0f}s{fenced}"
            )
            return False

    def invalidate(self, scope: Scope) -> bool:
        """After a write of rows in ``scope``; False when the cache could not be told."""
        return self._invalidate(scope.agent_wallet, self.tokens.bump, scope)

    def invalidate_agent(self, agent_wallet: str) -> bool:
        """After maintenance that rewrote many rows of one agent."""
        return self._invalidate(agent_wallet, self.tokens.bump_agent, agent_wallet)

    def invalidate_all(self) -> bool:
        """After maintenance that changed rows whose scopes it cannot list: every cached query."""
        return self._invalidate(None, self.tokens.bump_all)


# ----------------------------------------------------------------------------- layer results as JSON

_RECORD_TYPES: dict[str, Any] = {
    "MemoryRecord": MemoryRecord, "Session": Session, "Transcript": Transcript, "Pattern": Pattern,
    "Archive": Archive,
}


def _encode_record(record: Any) -> Any:
    if record is None:
        return None
    kind = type(record).__name__
    if kind in _RECORD_TYPES:
        return {"kind": kind, "doc": record.model_dump(mode="json", by_alias=True)}
    return {"kind": "raw", "doc": record}


def _decode_record(value: Any) -> Any:
    if value is None:
        return None
    model = _RECORD_TYPES.get(value["kind"])
    return model.model_validate(value["doc"]) if model is not None else value["doc"]


def _encode_candidate(c: Candidate) -> dict[str, Any]:
    return {
        "layer": c.layer, "id": c.id, "text": c.text, "score": c.score, "created_at": c.created_at,
        "last_accessed_at": c.last_accessed_at, "access_count": c.access_count, "confidence": c.confidence,
        "importance": c.importance, "source": c.source, "metadata": c.metadata, "lanes": c.lanes,
        "trace": c.trace, "embedding": c.embedding, "record": _encode_record(c.record),
    }


def _decode_candidate(d: Mapping[str, Any]) -> Candidate:
    data = dict(d)
    data["record"] = _decode_record(data.get("record"))
    return Candidate(**data)


def encode_search(
    layers: Mapping[str, Sequence[Candidate]], totals: Mapping[str, int], lanes: Mapping[str, Any]
) -> dict[str, Any]:
    """A layered search result (what ``MemoryEngine._search`` returns) as JSON-able data."""
    return {
        "v": 1,
        "layers": {name: [_encode_candidate(c) for c in cands] for name, cands in layers.items()},
        "totals": dict(totals),
        "lanes": dict(lanes),
    }


def decode_search(data: Mapping[str, Any]) -> tuple[dict[str, list[Candidate]], dict[str, int], dict[str, Any]]:
    """The inverse of :func:`encode_search`; raises ``ValueError`` on an unknown shape."""
    if not isinstance(data, Mapping) or data.get("v") != 1:
        raise ValueError("not a cached layered search result")
    layers = {name: [_decode_candidate(c) for c in cands] for name, cands in data["layers"].items()}
    return layers, {k: int(v) for k, v in data["totals"].items()}, dict(data["lanes"])


def scope_of(record: Any) -> Scope:
    """The scope a stored row was written in (agent, user, mode, hai), for invalidating after
    an update or delete of that row."""
    return Scope(agent_wallet=record.agent_wallet, user_address=record.user_address, mode=record.mode,
                 hai_id=record.hai_id)


SearchResult = tuple[dict[str, list[Candidate]], dict[str, int], dict[str, Any], dict[str, float]]


def cached_search(
    cache: QueryCache | None,
    scope: Scope,
    payload: Mapping[str, Any],
    compute: Callable[[], SearchResult],
    *,
    thread_scoped: bool = True,
    kind: str = "layers",
) -> tuple[SearchResult, bool]:
    """Serve a layered search from ``cache`` or run ``compute`` and cache its result.

    ``compute`` returns ``(layers, totals, lanes, timings)`` (``MemoryEngine._search``). The
    degradations ``compute`` reported are stored with the result and reported again on a hit.
    A result is not cached when a degradation says something *failed* (a layer left out, a
    vector lane that failed, a cache write), so a partial answer is never pinned for the TTL
    (the reference cached partial results). Returns the result and whether it was a hit.
    """
    if cache is None:
        return compute(), False
    value, key = cache.lookup(kind, scope, payload, thread_scoped=thread_scoped)
    if value is not None:
        try:
            layers, totals, lanes = decode_search(value)
            for note in value.get("notes", []):
                degrade(note)
            return (layers, totals, lanes, {}), True
        except (ValueError, KeyError, TypeError):
            pass  # an entry of another shape: recompute and overwrite
    with collect() as notes:
        result = compute()
    for note in notes:
        degrade(note)
    if key is not None and not any("failed" in n for n in notes):
        entry = encode_search(result[0], result[1], result[2])
        entry["notes"] = list(notes)
        cache.store(key, entry)
    return result, False
