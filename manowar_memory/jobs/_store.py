"""The storage surface the maintenance jobs need, checked once when a job binds its store.

The jobs are written against :class:`JobStore`: the memory-row, thread, artifact and
maintenance roles of :mod:`manowar_memory.stores` (paging, grouped counts, bulk updates and
deletes, stale scopes). :func:`job_store` takes a store or a ``MemoryEngine`` (the store it
hands over, :func:`store_of`) and fails with a :class:`~manowar_memory.errors.ConfigurationError` naming every
missing method when a role is incomplete: there is no fallback path.

:class:`ChangedScopes` collects the scopes whose visible rows a job changed.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from ..errors import ConfigurationError
from ..scope import Scope
from ..stores import ArtifactStore, MaintenanceStore, MemoryRowStore, ScopeKey, ThreadStore, missing_role_methods

__all__ = ["JOB_ROLES", "ChangedScopes", "JobStore", "ScopeKey", "StoreOwner", "job_store", "store_of"]

#: the store roles every job needs
JOB_ROLES: tuple[type, ...] = (MemoryRowStore, ThreadStore, ArtifactStore, MaintenanceStore)


class ChangedScopes:
    """The scopes (agent, user, mode, hai) whose visible data a job changed.

    The jobs add every row they supersede, rescore, delete, restore or write; the runner then
    invalidates exactly these scopes in the engine's query cache. ``everything`` is set when
    a job changed rows whose scopes it could not list (the runner then invalidates all).
    """

    def __init__(self) -> None:
        self._keys: dict[ScopeKey, None] = {}
        self.everything = False

    def add(self, row: Any) -> None:
        """Add the scope of a stored row (anything with agent_wallet, user_address, mode, hai_id)."""
        self.add_key((row.agent_wallet, row.user_address, row.mode, row.hai_id))

    def add_key(self, key: ScopeKey) -> None:
        """Add a scope given as ``(agent_wallet, user_address, mode, hai_id)``."""
        self._keys[(key[0], key[1], key[2], key[3])] = None

    def scopes(self) -> list[Scope]:
        """The distinct scopes, in the order they were first added."""
        out = []
        for agent, user, mode, hai in self._keys:
            if mode == "local" and hai is None:  # cannot be a read scope: widen to any mode
                mode = None
            out.append(Scope(agent_wallet=agent, user_address=user, mode=mode, hai_id=hai))  # type: ignore[arg-type]
        return out

    def __len__(self) -> int:
        return len(self._keys)

    def __bool__(self) -> bool:
        return bool(self._keys) or self.everything


@runtime_checkable
class JobStore(MemoryRowStore, ThreadStore, ArtifactStore, MaintenanceStore, Protocol):
    """What the maintenance jobs call: the memory-row, thread, artifact and maintenance roles."""


@runtime_checkable
class StoreOwner(Protocol):
    """What the jobs take in place of a store (a ``MemoryEngine``): it hands over the store they act on."""

    def maintenance_store(self) -> Any:
        """The store the maintenance jobs act on."""
        ...


def store_of(obj: Any) -> Any:
    """The store ``obj`` stands for: a :class:`StoreOwner`'s (an engine's) ``maintenance_store()``,
    else ``obj`` itself."""
    return obj.maintenance_store() if isinstance(obj, StoreOwner) else obj


def job_store(obj: Any) -> JobStore:
    """The store of ``obj`` (a store, or the store a ``MemoryEngine`` hands over), checked to
    play every role in :data:`JOB_ROLES`; a :class:`ConfigurationError` names what is missing."""
    store = store_of(obj)
    missing = missing_role_methods(store, *JOB_ROLES)
    if missing:
        raise ConfigurationError(
            f"{type(store).__name__} cannot run maintenance jobs: it lacks {', '.join(missing)}. Implement "
            "those roles of manowar_memory.stores (the conformance suite checks them) or use the SQLite or "
            "MongoDB store")
    return store  # type: ignore[no-any-return]
