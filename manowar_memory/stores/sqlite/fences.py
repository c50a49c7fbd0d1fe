"""The cache-fences role of the SQLite store (:class:`~manowar_memory.stores.base.CacheFenceStore`)."""

from __future__ import annotations

from collections.abc import Sequence

from .connection import SQLiteConnection

__all__ = ["SQLiteCacheFences"]


class SQLiteCacheFences(SQLiteConnection):
    """Cache fences: counters that invalidate cached reads."""

    # -- cache fences (cache/namespace.py) --
    def cache_fences(self, keys: Sequence[str]) -> dict[str, int]:
        keys = list(dict.fromkeys(keys))
        with self._conn() as conn:
            rows = conn.execute(
                f"SELECT key, epoch FROM cache_fence WHERE key IN ({','.join('?' * len(keys))})", keys
            ).fetchall() if keys else []
        found = {r[0]: int(r[1]) for r in rows}
        return {k: found.get(k, 0) for k in keys}


    def bump_cache_fence(self, key: str) -> int:
        with self._write() as conn:
            row = conn.execute(
                "INSERT INTO cache_fence (key, epoch) VALUES (?, 1) "
                "ON CONFLICT (key) DO UPDATE SET epoch = epoch + 1 RETURNING epoch", (key,)
            ).fetchone()
        return int(row[0])
