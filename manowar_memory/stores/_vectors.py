"""The in-process exact vector index both stores keep per embedding model.

One float32 matrix of normalised vectors plus the columns the scope mask needs (agent, user,
mode, hai, source as interned integer codes; live and active flags). Rows are keyed by the
store's own row key (SQLite ``rowid``, MongoDB ``_id``); the store decides when to refresh
it (SQLite from its revision counter, MongoDB from its sync watermark). Scores are cosine;
the stores report ``(1 + cos) / 2``.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable, Iterable

import numpy as np

from .base import MemoryQuery

__all__ = ["VectorIndex"]

_COLUMNS = ("agent", "user", "mode", "hai", "source", "live", "active")
_ROW_OVERHEAD = 7 * 4 + 120  # code columns, flags and the key's dict/list entries, roughly


class VectorIndex:
    """Every vector of one embedding model (optionally one agent), as a matrix."""

    def __init__(self, dims: int, capacity: int = 1024) -> None:
        self.dims = dims
        self.size = 0
        self.live_count = 0
        capacity = max(16, capacity)
        self.vectors = np.zeros((capacity, dims), dtype=np.float32)
        self.agent = np.zeros(capacity, dtype=np.int32)
        self.user = np.zeros(capacity, dtype=np.int32)
        self.mode = np.zeros(capacity, dtype=np.int32)
        self.hai = np.zeros(capacity, dtype=np.int32)
        self.source = np.zeros(capacity, dtype=np.int32)
        self.live = np.zeros(capacity, dtype=bool)
        self.active = np.zeros(capacity, dtype=bool)
        self.keys: list[Hashable] = []
        self.position: dict[Hashable, int] = {}
        self.codes: dict[str | None, int] = {None: 0}
        self.lock = threading.Lock()

    @staticmethod
    def row_bytes(dims: int) -> int:
        """Approximate memory per row of ``dims`` dimensions (the cache bound uses it)."""
        return 4 * dims + _ROW_OVERHEAD

    @property
    def nbytes(self) -> int:
        """Approximate memory held, by allocated capacity."""
        return self.vectors.shape[0] * self.row_bytes(self.dims)

    def code(self, value: str | None) -> int:
        """Interned integer for a column value (0 is None)."""
        found = self.codes.get(value)
        if found is None:
            found = self.codes[value] = len(self.codes)
        return found

    def _grow(self) -> None:
        cap = self.vectors.shape[0] * 2
        self.vectors = np.resize(self.vectors, (cap, self.dims))
        for name in _COLUMNS:
            arr = getattr(self, name)
            new = np.zeros(cap, dtype=arr.dtype)
            new[: self.size] = arr[: self.size]
            setattr(self, name, new)

    def upsert(
        self, key: Hashable, vector: np.ndarray, *, agent: str | None, user: str | None, mode: str | None,
        hai: str | None, source: str | None, active: bool,
    ) -> None:
        """Add or refresh one row (the vector is normalised here)."""
        norm = float(np.linalg.norm(vector))
        pos = self.position.get(key)
        if pos is None:
            if self.size == self.vectors.shape[0]:
                self._grow()
            pos = self.size
            self.size += 1
            self.position[key] = pos
            self.keys.append(key)
        if not self.live[pos]:
            self.live_count += 1
        self.vectors[pos] = vector / norm if norm else vector
        self.agent[pos] = self.code(agent)
        self.user[pos] = self.code(user)
        self.mode[pos] = self.code(mode)
        self.hai[pos] = self.code(hai)
        self.source[pos] = self.code(source)
        self.live[pos] = True
        self.active[pos] = active

    def remove(self, key: Hashable) -> None:
        """Mark a row dead (deleted, or re-embedded by another model)."""
        pos = self.position.get(key)
        if pos is not None and self.live[pos]:
            self.live[pos] = False
            self.live_count -= 1

    def live_keys(self) -> set[Hashable]:
        """Keys of the live rows."""
        return {self.keys[i] for i in np.flatnonzero(self.live[: self.size])}

    def mask(self, query: MemoryQuery) -> np.ndarray:
        """Rows the query's scope, status and sources allow (filters and threads are the store's job)."""
        n = self.size
        s = query.scope
        codes = self.codes
        agent = codes.get(s.agent_wallet)
        if agent is None:
            return np.zeros(n, dtype=bool)
        mask = self.live[:n] & (self.agent[:n] == agent)
        if query.active_only:
            mask &= self.active[:n]
        user_col = self.user[:n]
        if s.user_address is not None:
            mask &= (user_col == codes.get(s.user_address, -1)) | (user_col == 0)
        else:
            mask &= user_col == 0
        for value, col in ((s.mode, self.mode), (s.hai_id, self.hai)):
            if value is not None:
                mask &= col[:n] == codes.get(value, -1)
        src = self.source[:n]
        if query.sources is not None:
            mask &= np.isin(src, [codes.get(x, -1) for x in query.sources])
        if query.exclude_sources:
            mask &= ~np.isin(src, [codes.get(x, -1) for x in query.exclude_sources])
        return mask

    def only(self, mask: np.ndarray, allowed: Iterable[Hashable]) -> np.ndarray:
        """``mask`` narrowed to the rows whose key is in ``allowed``."""
        keep = np.zeros(mask.shape[0], dtype=bool)
        positions = [p for p in (self.position.get(k) for k in allowed) if p is not None and p < mask.shape[0]]
        keep[positions] = True
        return mask & keep

    def top(self, q: np.ndarray, mask: np.ndarray, k: int) -> list[tuple[Hashable, float]]:
        """The ``k`` best ``(key, cosine)`` among the masked rows, best first (ties in row order).
        ``q`` must be normalised."""
        n = mask.shape[0]
        candidates = int(mask.sum())
        if candidates == 0 or k <= 0:
            return []
        scores = np.where(mask, self.vectors[:n] @ q, -np.inf)
        k = min(k, candidates)
        best = np.argpartition(-scores, k - 1)[:k]
        best = best[np.argsort(-scores[best], kind="stable")]
        return [(self.keys[i], float(scores[i])) for i in best]
