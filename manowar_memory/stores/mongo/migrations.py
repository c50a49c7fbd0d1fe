"""The MongoDB store's schema migrations: named, ordered steps recorded in ``_manowar_migrations``
(run by :meth:`MongoStore.migrate <manowar_memory.stores.mongo.MongoStore.migrate>`). Each step
takes the store and uses its public methods and collections only."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from ...errors import MissingDependencyError
from .. import _mql, _mql_schema
from .._mql_schema import (
    MEMORY,
)

try:
    from pymongo.errors import OperationFailure
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise MissingDependencyError("pymongo", "mongo", "The MongoDB store") from exc

__all__ = ["MIGRATIONS", "MigratingStore"]


class MigratingStore(Protocol):
    """What a migration step uses of the store (:class:`MongoStore` has it; the protocol keeps this
    module below the store's, which runs the steps)."""

    memory: Any  # the memory collection

    def create_indexes(self, coll_name: str, specs: Sequence[_mql_schema.IndexSpec]) -> None: ...
    def migrate_active_facts(self) -> int: ...


_INDEX_NOT_FOUND = 27


#: indexes created by the migrations after the baseline (m004 to m007)
_LATER_INDEXES = {_mql_schema.VECTOR_AGENT_ID_INDEX, _mql_schema.SCOPE_LIST_INDEX, _mql_schema.EVENT_DATE_INDEX,
                  _mql_schema.USER_ROWS_INDEX}


def _index(coll: str, name: str) -> _mql_schema.IndexSpec:
    return next(spec for spec in _mql_schema.INDEXES[coll] if spec.name == name)


def _m001_active_fact_hash(store: MigratingStore) -> None:
    """Derive ``activeFactHash`` for the unique active-fact index (earlier duplicates are kept,
    marked superseded: :meth:`MongoStore.migrate_active_facts`); nothing to do once the index exists."""
    if "idx_vector_active_fact" not in store.memory.index_information():
        store.migrate_active_facts()


def _m002_indexes(store: MigratingStore) -> None:
    """The indexes the store created on open before migrations were recorded (an earlier
    version's index of the same name or keys with other options is replaced)."""
    for coll, specs in _mql_schema.INDEXES.items():
        store.create_indexes(coll, [spec for spec in specs if spec.name not in _LATER_INDEXES])


def _m003_memory_scope_nulls(store: MigratingStore) -> None:
    """Store null in memory rows' missing ``userAddress``, ``mode`` and ``haiId`` (rows of the
    reference or written by hand), so the ``$vectorSearch`` scope prefilter, which matches a
    stored null but not a missing field, sees them as every other query does."""
    store.memory.update_many(_mql.missing_scope_fields_filter(), _mql.scope_nulls_pipeline())


def _m004_vector_id_per_agent(store: MigratingStore) -> None:
    """Row ids unique per agent: create the unique ``(agentWallet, vectorId)`` index, then drop
    the unique ``vectorId`` index of earlier versions (a collection sharded on ``agentWallet``
    cannot keep a unique index that does not start with it). The new index exists before the
    old one goes, so ids stay unique throughout."""
    store.create_indexes(MEMORY, [_index(MEMORY, _mql_schema.VECTOR_AGENT_ID_INDEX)])
    legacy = _mql_schema.LEGACY_VECTOR_ID_INDEX
    for info in store.memory.list_indexes():
        if info["name"] == legacy.name or list(info["key"].items()) == legacy.keys:
            try:
                store.memory.drop_index(info["name"])
            except OperationFailure as exc:
                if exc.code != _INDEX_NOT_FOUND:  # another engine dropped it first
                    raise


def _m005_scope_list_index(store: MigratingStore) -> None:
    """``(agentWallet, userAddress, createdAt, _id)`` for ``list_memories`` and ``count_memories``:
    one index range per user of the scope, already in the listing's order."""
    store.create_indexes(MEMORY, [_index(MEMORY, _mql_schema.SCOPE_LIST_INDEX)])


def _m006_event_date_index(store: MigratingStore) -> None:
    """``(agentWallet, userAddress, metadata.eventDate)`` for ``memories_dated_between``: facts
    say when they happened, often long before they are recorded."""
    store.create_indexes(MEMORY, [_index(MEMORY, _mql_schema.EVENT_DATE_INDEX)])


def _m007_user_rows_index(store: MigratingStore) -> None:
    """``(agentWallet, userAddress, _id)`` for a job's paged read of its users' rows: each page is
    one index range per user after the last ``_id``, in insertion order, so reading a user's rows
    costs as many keys as the user has rows, whatever the agent's other users hold."""
    store.create_indexes(MEMORY, [_index(MEMORY, _mql_schema.USER_ROWS_INDEX)])


#: The schema migrations of a MongoDB database, in order (recorded in ``_manowar_migrations``
#: by name; never renamed or reordered, new ones go at the end). A fresh database runs them all
#: and ends in the state of one upgraded from any earlier version: the indexes of
#: :data:`~manowar_memory.stores._mql_schema.INDEXES`.
MIGRATIONS: list[tuple[str, Callable[[MigratingStore], None]]] = [
    ("m001_active_fact_hash", _m001_active_fact_hash),
    ("m002_indexes", _m002_indexes),
    ("m003_memory_scope_nulls", _m003_memory_scope_nulls),
    ("m004_vector_id_per_agent", _m004_vector_id_per_agent),
    ("m005_scope_list_index", _m005_scope_list_index),
    ("m006_event_date_index", _m006_event_date_index),
    ("m007_user_rows_index", _m007_user_rows_index),
]
