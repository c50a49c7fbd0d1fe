"""Storage backends and the role protocols they implement.

The contract lives in :mod:`manowar_memory.stores.base` (re-exported here): one small
protocol per role (memory rows, threads, artifacts, cache fences, maintenance, schedules)
and :class:`Store`, their union. The backends are :mod:`~manowar_memory.stores.sqlite`
(embedded) and :mod:`~manowar_memory.stores.mongo` (MongoDB); their statements are built by
the pure modules ``_sql`` and ``_mql``. Importing this package loads no backend.
"""

from __future__ import annotations

from .base import (
    ROLES,
    ArtifactStore,
    CacheFenceStore,
    Hit,
    KeywordHits,
    MaintenanceStore,
    MemoryQuery,
    MemoryRowStore,
    PageCursor,
    ScheduleStore,
    ScopeKey,
    Store,
    ThreadStore,
    TurnBuilder,
    TurnRows,
    TurnWrite,
    VectorSearchInfo,
    missing_role_methods,
)

__all__ = [
    "ROLES",
    "ArtifactStore",
    "CacheFenceStore",
    "Hit",
    "KeywordHits",
    "MaintenanceStore",
    "MemoryQuery",
    "MemoryRowStore",
    "PageCursor",
    "ScheduleStore",
    "ScopeKey",
    "Store",
    "ThreadStore",
    "TurnBuilder",
    "TurnRows",
    "TurnWrite",
    "VectorSearchInfo",
    "missing_role_methods",
]
