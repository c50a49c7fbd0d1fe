"""A Redis cache (``pip install "manowar-memory[redis]"``) implementing the
:class:`~manowar_memory.cache.base.Cache` protocol.

Errors propagate as :class:`CacheUnavailableError`; callers bypass the cache and report it
(:class:`~manowar_memory.embeddings.cached.CachedEmbedder` and
:class:`~manowar_memory.cache.namespace.QueryCache` do). Two things keep an outage cheap:

* short socket timeouts (``socket_timeout=0.25`` s by default), so a slow or hung server costs
  at most that per call;
* a circuit breaker: after a failure, calls fail at once for ``retry_after`` seconds instead
  of waiting on the network again, then one call probes the server.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Sequence
from typing import Any

from ..errors import ManowarError, MissingDependencyError

try:
    import redis as _redis
except ImportError as exc:  # pragma: no cover - only without the extra
    raise MissingDependencyError("redis", "redis", "The Redis cache") from exc

__all__ = ["CacheUnavailableError", "RedisCache"]

# INCR that gives a new counter its TTL in the same atomic step (no counter left without expiry).
_INCR_WITH_TTL = """
local v = redis.call('INCR', KEYS[1])
if v == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
return v
"""


class CacheUnavailableError(ManowarError):
    """The cache server could not answer (down, slow, or the circuit breaker is open)."""


class RedisCache:
    """Byte cache on Redis: ``RedisCache("redis://127.0.0.1:6379/0")`` or ``RedisCache(client)``.

    Every key is prefixed with ``prefix`` (default ``"manowar:"``). Values are raw bytes;
    TTLs are in seconds (fractions allowed, at least 1 ms; the engine clamps to 1 s).
    """

    name = "redis"

    def __init__(
        self,
        url_or_client: str | Any = "redis://127.0.0.1:6379/0",
        *,
        prefix: str = "manowar:",
        socket_timeout: float = 0.25,
        socket_connect_timeout: float | None = None,
        retry_after: float = 5.0,
        **client_options: Any,
    ) -> None:
        if isinstance(url_or_client, str):
            self._owns_client = True
            self.client = _redis.Redis.from_url(
                url_or_client,
                socket_timeout=socket_timeout,
                socket_connect_timeout=socket_connect_timeout if socket_connect_timeout is not None else socket_timeout,
                retry_on_timeout=False,
                health_check_interval=0,
                **client_options,
            )
        else:
            self._owns_client = False
            self.client = url_or_client
        self.prefix = prefix
        self.retry_after = retry_after
        self._open_until = 0.0
        self._last_error: str | None = None
        self._lock = threading.Lock()
        self._incr = self.client.register_script(_INCR_WITH_TTL)

    # -- plumbing --
    def _k(self, key: str) -> str:
        return self.prefix + key

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        now = time.monotonic()
        if now < self._open_until:
            raise CacheUnavailableError(
                f"Redis {what} skipped: the cache is unavailable since a recent failure ({self._last_error}); "
                f"retrying in {self._open_until - now:.1f}s"
            )
        try:
            result = fn(*args, **kwargs)
        except _redis.exceptions.RedisError as exc:
            with self._lock:
                self._open_until = time.monotonic() + self.retry_after
                self._last_error = f"{type(exc).__name__}: {exc}"
            raise CacheUnavailableError(f"Redis {what} failed: {type(exc).__name__}: {exc}") from exc
        return result

    @property
    def available(self) -> bool:
        """False while the circuit breaker is open after a failure."""
        return time.monotonic() >= self._open_until

    @staticmethod
    def _ttl_ms(ttl_seconds: float) -> int:
        return max(1, math.ceil(float(ttl_seconds) * 1000))

    # -- the Cache protocol --
    def get(self, key: str) -> bytes | None:
        value: bytes | None = self._call("GET", self.client.get, self._k(key))
        return value

    def get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        if not keys:
            return []
        return list(self._call("MGET", self.client.mget, [self._k(k) for k in keys]))

    def set(self, key: str, value: bytes, ttl_seconds: float) -> None:
        self._call("SET", self.client.set, self._k(key), value, px=self._ttl_ms(ttl_seconds))

    def set_many(self, items: Sequence[tuple[str, bytes]], ttl_seconds: float) -> None:
        """Set several keys with one TTL in one round trip (a pipeline)."""
        if not items:
            return

        def run() -> None:
            pipe = self.client.pipeline(transaction=False)
            ttl = self._ttl_ms(ttl_seconds)
            for key, value in items:
                pipe.set(self._k(key), value, px=ttl)
            pipe.execute()

        self._call("SET (pipeline)", run)

    def incr(self, key: str, ttl_seconds: float) -> int:
        return int(self._call("INCR", self._incr, keys=[self._k(key)], args=[self._ttl_ms(ttl_seconds)]))

    # -- extras --
    def delete(self, *keys: str) -> int:
        """Delete keys; returns how many existed."""
        if not keys:
            return 0
        return int(self._call("DEL", self.client.delete, *[self._k(k) for k in keys]))

    def ping(self) -> bool:
        """True when the server answers (bypasses the circuit breaker)."""
        try:
            return bool(self.client.ping())
        except _redis.exceptions.RedisError:
            return False

    def close(self) -> None:
        """Close the connection pool when this cache created the client."""
        if self._owns_client:
            self.client.close()
