"""The embedded store: one SQLite file (or ``:memory:``), no server.

* WAL mode, one connection per thread for files (readers never block the writer);
  ``:memory:`` uses a single connection behind a lock.
* FTS5 for the keyword lane, on memory rows and transcripts. The memory index holds scoped
  terms (:mod:`._fts`: words stemmed in Python, prefixed with the row's agent/user scope) under
  rowids in the scope's range, so a search reads only its own scope's rows and BM25's document
  frequencies are its scope's own, however many other scopes the store holds.
* Vectors are stored with their row (float32 blob plus the embedding model id). Vector
  search is exact: an in-process matrix per model, refreshed incrementally from a
  revision counter, so writes from other processes are seen on the next search.
* Schema changes are named, ordered migrations recorded in ``_manowar_migrations``.

One module per role of :mod:`manowar_memory.stores.base` (the same split as the conformance
suite, :mod:`manowar_memory.testing.conformance`): :mod:`.rows`, :mod:`.threads`,
:mod:`.artifacts`, :mod:`.fences`, :mod:`.maintenance` and :mod:`.schedules` each hold one
mixin over the connection object of :mod:`.connection`; :class:`SQLiteStore` combines them.
The schema migrations are in :mod:`.migrations`.
"""

from __future__ import annotations

from .artifacts import SQLiteArtifacts
from .fences import SQLiteCacheFences
from .maintenance import SQLiteMaintenance
from .rows import SQLiteRows
from .schedules import SQLiteSchedules
from .threads import SQLiteThreads

__all__ = ["SQLiteStore"]


class SQLiteStore(SQLiteRows, SQLiteThreads, SQLiteArtifacts, SQLiteCacheFences, SQLiteMaintenance, SQLiteSchedules):
    """The embedded store. ``SQLiteStore(":memory:")`` for tests, or a file path."""
