"""Memory rows the SQLite store has already read, by rowid and revision.

The keyword, vector and entity lanes read the same rows query after query, and turning a row
into a :class:`~manowar_memory.records.MemoryRecord` (its JSON metadata above all) cost more
than finding it. :class:`RowCache` keeps each row's record with the revision (``rev``) it was
read at. When a lane finds rows the cache holds, it first reads only their revision and
access columns (:func:`~manowar_memory.stores._sql.row_revisions`, which also applies the
scope filter) and takes a row from the cache only when its revision is the same: every write
of a row gives it a new revision, and a deleted row is not found at all. Rows the cache holds
none of are read whole at once. ``access_count`` and ``last_accessed_at`` are never served
from the cache, since access bumps change them without a new revision.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

from ...records import MemoryRecord, adopt_fields

__all__ = ["RowCache"]


class RowCache:
    """Records (no embedding) of up to ``size`` memory rows, each with its revision; the row
    read longest ago goes first. Safe to share between threads."""

    def __init__(self, size: int = 10_000) -> None:
        self.size = size
        self._rows: dict[int, tuple[int, dict[str, Any]]] = {}
        self._lock = threading.Lock()

    def holds_any(self, rowids: Iterable[int]) -> bool:
        """Whether any of ``rowids`` is held, at whatever revision."""
        rows = self._rows
        return any(rowid in rows for rowid in rowids)

    def get(self, rowid: int, rev: int, access_count: int, last_accessed_at: int | None) -> MemoryRecord | None:
        """A fresh copy of row ``rowid`` when it is held at revision ``rev``, with the access
        columns given (read with the revision), else None."""
        held = self._rows.get(rowid)
        if held is None or held[0] != rev:
            return None
        values = held[1].copy()
        values["metadata"] = dict(values["metadata"])
        values["access_count"] = access_count
        values["last_accessed_at"] = last_accessed_at
        return adopt_fields(MemoryRecord, values)

    def put(self, rowid: int, rev: int, record: MemoryRecord) -> None:
        """Hold ``record`` (read at revision ``rev``); the caller keeps ``record`` to change as it likes."""
        values = dict(record)  # the fields in declaration order
        values["metadata"] = dict(record.metadata)
        with self._lock:
            self._rows.pop(rowid, None)
            self._rows[rowid] = (rev, values)
            while len(self._rows) > self.size:
                del self._rows[next(iter(self._rows))]
