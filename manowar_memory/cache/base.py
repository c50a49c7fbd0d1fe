"""The cache protocol and the in-process cache."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from cachetools import TTLCache

__all__ = ["Cache", "InMemoryCache"]


@runtime_checkable
class Cache(Protocol):
    """A byte cache with expiry and counters. Implementations may raise on outage;
    the engine catches that, bypasses the cache and reports it."""

    name: str

    def get(self, key: str) -> bytes | None:
        """The value, or None on a miss."""
        ...

    def get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        """Values for ``keys`` in order, None for misses."""
        ...

    def set(self, key: str, value: bytes, ttl_seconds: float) -> None:
        """Store ``value`` for ``ttl_seconds``."""
        ...

    def incr(self, key: str, ttl_seconds: float) -> int:
        """Increment a counter; a new counter gets ``ttl_seconds`` of life. Returns the new value."""
        ...


class InMemoryCache:
    """A thread-safe, size-bounded cache in this process (the embedded default)."""

    name = "memory"
    #: reads are a dict lookup under a lock (no round trip): a cached query embedding is taken
    #: before the search's lanes start (see ``CachedEmbedder.peek``)
    in_process = True

    def __init__(self, maxsize: int = 50_000, max_ttl_seconds: float = 86_400) -> None:
        self._data: TTLCache[str, tuple[float, bytes]] = TTLCache(maxsize=maxsize, ttl=max_ttl_seconds)
        self._counters: dict[str, tuple[float, int]] = {}
        self._lock = threading.Lock()

    def get(self, key: str) -> bytes | None:
        with self._lock:
            entry = self._data.get(key)
            if entry is None:
                return None
            expires, value = entry
            if expires < time.monotonic():
                self._data.pop(key, None)
                return None
            return value

    def get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        return [self.get(k) for k in keys]

    def set(self, key: str, value: bytes, ttl_seconds: float) -> None:
        with self._lock:
            self._data[key] = (time.monotonic() + max(1.0, ttl_seconds), value)

    def incr(self, key: str, ttl_seconds: float) -> int:
        with self._lock:
            now = time.monotonic()
            expires, value = self._counters.get(key, (now + ttl_seconds, 0))
            if expires < now:
                expires, value = now + ttl_seconds, 0
            value += 1
            self._counters[key] = (expires, value)
            self._data[key] = (expires, str(value).encode())
            return value

    def clear(self) -> None:
        """Drop everything."""
        with self._lock:
            self._data.clear()
            self._counters.clear()
