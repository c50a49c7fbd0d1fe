"""The SQLite store's in-process keyword indexes, one per full-text scope, and how they follow the table.

Each :class:`~manowar_memory.stores._keywords.ScopeKeywordIndex` holds one scope's BM25 postings.
:class:`KeywordIndexes` holds them together and keeps them in step with the ``memory`` table:
every write gives the rows it touches a new revision (and a delete leaves a tombstone at one), so
the store reads what changed since :attr:`KeywordIndexes.rev` and hands it to :meth:`~KeywordIndexes.apply`.
A changed row goes to the index of its scope, and leaves the index that held it before (a row
moved to another user); which index holds a row is kept by row, so a sync costs the rows that
changed, not the number of indexes held.

The indexes cost memory (a few kilobytes a row for a small scope, less per row for a large one):
past a bound of rows in all (the store's ``keyword_index_max_rows``), the index searched longest ago is dropped,
and its scope is scored by FTS5 until it is built again.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable

from .._keywords import ScopeKeywordIndex

__all__ = ["KeywordIndexes"]


class KeywordIndexes:
    """The in-process keyword indexes by full-text scope id, least recently searched first. Not
    thread-safe: the store holds its keyword lock around every call."""

    def __init__(self) -> None:
        #: Every held index reflects the table at least up to this revision.
        self.rev = 0
        self._held: OrderedDict[int, ScopeKeywordIndex] = OrderedDict()
        self._holder: dict[int, int] = {}  # rowid -> scope id of the index that holds it

    def __len__(self) -> int:
        return len(self._held)

    def __contains__(self, scope_id: object) -> bool:
        return scope_id in self._held

    @property
    def rows(self) -> int:
        """Rows held in all indexes."""
        return sum(len(index) for index in self._held.values())

    def get(self, scope_id: int) -> ScopeKeywordIndex | None:
        """Scope ``scope_id``'s index, marked as searched now; None when none is held."""
        index = self._held.get(scope_id)
        if index is not None:
            self._held.move_to_end(scope_id)
        return index

    def add(self, index: ScopeKeywordIndex, max_rows: int = 0) -> None:
        """Hold ``index`` (read at revision ``index.rev``; the next :meth:`apply` brings it up to
        date), in place of any index of its scope, dropping the ones searched longest ago while
        more than ``max_rows`` rows are held (0: no bound); ``index`` itself is kept."""
        self.drop(index.scope_id)
        self.rev = min(self.rev, index.rev) if self._held else index.rev
        self._held[index.scope_id] = index
        for rowid in index.rowids():
            self._holder[rowid] = index.scope_id
        held = self.rows
        while max_rows and held > max_rows and len(self._held) > 1:
            oldest = next(iter(self._held))
            held -= len(self._held[oldest])
            self.drop(oldest)

    def drop(self, scope_id: int) -> None:
        """Stop holding scope ``scope_id``'s index (no-op when none is held)."""
        index = self._held.pop(scope_id, None)
        if index is None:
            return
        for rowid in index.rowids():
            if self._holder.get(rowid) == scope_id:
                del self._holder[rowid]

    def stale(self, current: int) -> bool:
        """Whether an index is held that does not reflect revision ``current`` yet."""
        return bool(self._held) and self.rev < current

    def apply(self, tombstones: Iterable[tuple[int, int]],
              written: Iterable[tuple[int, int, str | None, str | None, int]], current: int) -> None:
        """Bring every index to revision ``current``: ``tombstones`` are the ``(rowid, rev)`` of
        the rows deleted after :attr:`rev`, ``written`` the ``(rowid, scope_id, content, context,
        rev)`` of the rows written after it, as they are now. Tombstones go first: SQLite reuses
        the rowid of a deleted last row, so a delete must never undo a later insert. A change an
        index already reflects (at or before its own ``rev``) is left alone."""
        for rowid, rev in tombstones:
            self._leave(rowid, rev)
        batches: dict[int, list[tuple[int, str | None, str | None]]] = {}
        for rowid, scope_id, content, context, rev in written:
            if self._holder.get(rowid, scope_id) != scope_id:
                self._leave(rowid, rev)  # moved to another scope
            index = self._held.get(scope_id)
            if index is not None and rev > index.rev:
                batches.setdefault(scope_id, []).append((rowid, content, context))
        for scope_id, rows in batches.items():
            self._held[scope_id].replace(rows)
            for rowid, _, _ in rows:
                self._holder[rowid] = scope_id
        self.rev = current

    def _leave(self, rowid: int, rev: int) -> None:
        """Row ``rowid`` leaves the index holding it, unless that index was read after ``rev``."""
        scope_id = self._holder.get(rowid)
        if scope_id is None:
            return
        index = self._held[scope_id]
        if rev > index.rev:
            index.remove(rowid)
            del self._holder[rowid]
