"""Access bumps of the rows ``pre_turn`` packs, written to the store in batches.

Every packed memory row gets ``access_count + 1`` and a new ``last_accessed_at`` (ranking and
maintenance read both). Writing them after each call costs a write transaction per call, and on
SQLite that write also empties every other connection's page cache, so the next query reads its
pages again: in a loop of back-to-back ``pre_turn`` calls it cost the next call about 0.4 ms. The
bumps are therefore gathered for ``delay`` seconds (:attr:`MemoryConfig.access_write_delay_s`)
and written together on the engine's background thread: a row packed three times in that window
gets ``+3``. :meth:`AccessBumps.flush` (``engine.flush()`` and ``engine.close()``) writes what is
pending at once; a process that dies loses at most the last ``delay`` seconds of bumps.
``delay=0`` hands each call's bumps to the background thread at once, as before.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
from collections.abc import Sequence

from .stores.base import Store

__all__ = ["AccessBumps"]

log = logging.getLogger("manowar_memory")


class AccessBumps:
    """Pending access bumps of one engine, written on ``pool`` (the engine's background thread)."""

    def __init__(self, store: Store, pool: concurrent.futures.Executor, delay: float) -> None:
        self._store = store
        self._pool = pool
        self._delay = delay
        self._lock = threading.Lock()  # the pending counts and the timer
        self._writing = threading.Lock()  # one write at a time: flush() waits for a background one
        self._counts: dict[tuple[str | None, str], int] = {}  # (agent, row id): bumps pending
        self._last: dict[tuple[str | None, str], int] = {}
        self._timer: threading.Timer | None = None

    def record(self, memory_ids: Sequence[str], at: int, *, agent_wallet: str | None = None) -> None:
        """Count one access of each of ``memory_ids`` (rows of ``agent_wallet``) at ``at`` (ms);
        written within ``delay`` seconds."""
        if not memory_ids:
            return
        with self._lock:
            for memory_id in memory_ids:
                key = (agent_wallet, memory_id)
                self._counts[key] = self._counts.get(key, 0) + 1
                self._last[key] = max(at, self._last.get(key, at))
            if self._delay > 0:
                if self._timer is None:
                    self._timer = threading.Timer(self._delay, self._due)
                    self._timer.daemon = True
                    self._timer.start()
                return
        self._due()

    def _due(self) -> None:
        with self._lock:
            self._timer = None
        try:
            self._pool.submit(self._write_logged)
        except RuntimeError:  # the pool is shut down: close() writes what is left
            pass

    def _write_logged(self) -> None:
        try:
            self.write()
        except Exception as exc:  # noqa: BLE001 - a background write has no caller to raise to
            log.warning("access bumps not written: %s", exc)

    def write(self) -> None:
        """Write the pending bumps: per agent (each call names its rows' agent), one
        ``bump_access`` per access count (a row packed ``n`` times is in the first ``n`` calls),
        each stamped with the latest access time among its rows, so ``last_accessed_at`` may be
        up to ``delay`` seconds late. Bumps that fail to write are lost (they are ranking
        signals, not data)."""
        with self._writing:
            with self._lock:
                counts, last = self._counts, self._last
                self._counts, self._last = {}, {}
            for agent in dict.fromkeys(a for a, _ in counts):
                mine = {key: count for key, count in counts.items() if key[0] == agent}
                for n in range(1, max(mine.values(), default=0) + 1):
                    keys = [key for key, count in mine.items() if count >= n]
                    self._store.bump_access([i for _, i in keys], max(last[key] for key in keys), agent_wallet=agent)

    def flush(self) -> None:
        """Stop the timer and write what is pending on the caller's thread (errors raise)."""
        with self._lock:
            timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()
        self.write()
