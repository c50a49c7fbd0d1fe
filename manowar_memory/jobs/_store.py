"""The storage surface the maintenance jobs need, and an adapter over the stores.

The jobs are written against :class:`JobStore`, not the engine's ``Store`` protocol,
because they need a few bulk/maintenance methods that protocol does not declare.
:func:`job_store` wraps any store (or a ``MemoryEngine``) that has the base methods and
fills in the optional ones:

* ``update_memories(updates)``: bulk update; SQLite gets a single-transaction version,
  any other store falls back to ``update_memory`` per row.
* ``count_transcripts_older_than(cutoff)`` / ``count_stale_sessions(now, cutoff)``: used
  only by dry-run cleanup; SQLite answers them directly, other stores must provide
  them (a dry run without them reports ``None`` for those counts).
* ``old_transcript_scopes(cutoff)`` / ``stale_session_scopes(now, cutoff)``: the scopes
  cleanup is about to delete from, so the query cache can be told exactly; a store
  without them answers None and the runner then invalidates every cached query.

:class:`ChangedScopes` collects the scopes whose visible rows a job changed.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any, Protocol, runtime_checkable

from ..records import Archive, Job, MemoryRecord, Pattern, Skill, Transcript
from ..scope import Scope

__all__ = ["ChangedScopes", "JobStore", "ScopeKey", "StoreAdapter", "job_store"]

#: (agent_wallet, user_address, mode, hai_id) of a stored row
ScopeKey = tuple[str, "str | None", "str | None", "str | None"]


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
class JobStore(Protocol):
    """What the maintenance jobs call."""

    def iter_memories(
        self, agent_wallet: str | None = None, *, created_from: int | None = None,
        created_to: int | None = None, batch_size: int = 1000,
    ) -> Iterator[MemoryRecord]: ...
    def get_memory(self, memory_id: str) -> MemoryRecord | None: ...
    def add_memories(self, records: Sequence[MemoryRecord]) -> list[str]: ...
    def update_memory(self, memory_id: str, changes: dict[str, Any]) -> MemoryRecord | None: ...
    def update_memories(self, updates: Sequence[tuple[str, dict[str, Any]]]) -> int: ...
    def delete_memories(self, memory_ids: Sequence[str]) -> int: ...
    def list_transcripts(self, agent_wallet: str, created_from: int, created_to: int) -> list[Transcript]: ...
    def delete_transcripts_older_than(self, cutoff: int) -> int: ...
    def count_transcripts_older_than(self, cutoff: int) -> int | None: ...
    def delete_sessions_older_than(self, cutoff: int) -> int: ...
    def purge_expired_sessions(self, now: int) -> int: ...
    def count_stale_sessions(self, now: int, cutoff: int) -> int | None: ...
    def old_transcript_scopes(self, cutoff: int) -> list[ScopeKey] | None: ...
    def stale_session_scopes(self, now: int, cutoff: int) -> list[ScopeKey] | None: ...
    def upsert_pattern(self, pattern: Pattern) -> None: ...
    def get_pattern(self, pattern_id: str) -> Pattern | None: ...
    def add_archive(self, archive: Archive) -> None: ...
    def get_archive(self, archive_id: str) -> Archive | None: ...
    def update_archive(self, archive_id: str, changes: dict[str, Any]) -> None: ...
    def add_skill(self, skill: Skill) -> None: ...
    def get_skill(self, skill_id: str) -> Skill | None: ...
    def list_skills(self, agent_wallet: str | None, category: str | None, limit: int) -> list[Skill]: ...
    def put_job(self, job: Job) -> None: ...
    def get_job(self, job_id: str) -> Job | None: ...


class StoreAdapter:
    """Delegates to the wrapped store; adds the optional JobStore methods it lacks."""

    def __init__(self, store: Any) -> None:
        self.inner = store

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def get_memory(self, memory_id: str) -> MemoryRecord | None:
        return self.inner.get_memory(memory_id)

    def _is_sqlite(self) -> bool:
        return getattr(self.inner, "name", None) == "sqlite" and hasattr(self.inner, "_write")

    def update_memories(self, updates: Sequence[tuple[str, dict[str, Any]]]) -> int:
        """Apply ``(id, changes)`` pairs; returns how many rows were updated."""
        if hasattr(self.inner, "update_memories"):
            return int(self.inner.update_memories(updates))
        if self._is_sqlite():
            return self._sqlite_update_many(updates)
        return sum(1 for memory_id, changes in updates if self.inner.update_memory(memory_id, changes) is not None)

    def _sqlite_update_many(self, updates: Sequence[tuple[str, dict[str, Any]]]) -> int:
        # One transaction for the batch; same columns and revision bump as SQLiteStore.update_memory.
        allowed = {"decay_score", "updated_at", "metadata"}
        done = 0
        store = self.inner
        with store._write() as conn:
            for memory_id, changes in updates:
                if set(changes) - allowed:
                    # anything unusual goes through the public method (after this transaction)
                    raise ValueError(f"bulk update supports only {sorted(allowed)}")
                sets: list[str] = []
                params: list[Any] = []
                for key, value in changes.items():
                    if key == "metadata":
                        sets += ["metadata = ?", "status = ?", "retention = ?", "fact_hash = ?"]
                        params += [json.dumps(value, ensure_ascii=False), value.get("status"),
                                   value.get("retention"), value.get("factHash")]
                    else:
                        sets.append(f"{key} = ?")
                        params.append(value)
                sets.append("rev = ?")
                params.append(store._next_rev(conn))
                cur = conn.execute(f"UPDATE memory SET {', '.join(sets)} WHERE id = ?", [*params, memory_id])
                done += cur.rowcount
        return done

    def count_transcripts_older_than(self, cutoff: int) -> int | None:
        if hasattr(self.inner, "count_transcripts_older_than"):
            return int(self.inner.count_transcripts_older_than(cutoff))
        if self._is_sqlite():
            with self.inner._conn() as conn:
                return int(conn.execute("SELECT COUNT(*) FROM transcripts WHERE created_at < ?", (cutoff,)).fetchone()[0])
        return None

    def count_stale_sessions(self, now: int, cutoff: int) -> int | None:
        if hasattr(self.inner, "count_stale_sessions"):
            return int(self.inner.count_stale_sessions(now, cutoff))
        if self._is_sqlite():
            with self.inner._conn() as conn:
                return int(conn.execute(
                    "SELECT COUNT(*) FROM sessions WHERE expires_at <= ? OR last_accessed_at < ?", (now, cutoff)
                ).fetchone()[0])
        return None

    def old_transcript_scopes(self, cutoff: int) -> list[ScopeKey] | None:
        """Distinct scopes of the transcripts created before ``cutoff``; None when unknown."""
        if hasattr(self.inner, "old_transcript_scopes"):
            return list(self.inner.old_transcript_scopes(cutoff))
        if self._is_sqlite():
            with self.inner._conn() as conn:
                return [tuple(r) for r in conn.execute(  # type: ignore[misc]
                    "SELECT DISTINCT agent_wallet, user_address, mode, hai_id FROM transcripts WHERE created_at < ?",
                    (cutoff,)).fetchall()]
        return None

    def stale_session_scopes(self, now: int, cutoff: int) -> list[ScopeKey] | None:
        """Distinct scopes of the sessions expired at ``now`` or last used before ``cutoff``; None when unknown."""
        if hasattr(self.inner, "stale_session_scopes"):
            return list(self.inner.stale_session_scopes(now, cutoff))
        if self._is_sqlite():
            with self.inner._conn() as conn:
                return [tuple(r) for r in conn.execute(  # type: ignore[misc]
                    "SELECT DISTINCT agent_wallet, user_address, mode, hai_id FROM sessions "
                    "WHERE expires_at <= ? OR last_accessed_at < ?", (now, cutoff)).fetchall()]
        return None


def job_store(obj: Any) -> StoreAdapter:
    """A JobStore for a store, a ``MemoryEngine`` (its ``.store``) or an existing adapter."""
    if isinstance(obj, StoreAdapter):
        return obj
    store = getattr(obj, "store", obj)
    return StoreAdapter(store)
