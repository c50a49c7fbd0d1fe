"""The maintenance role of the MongoDB store (:class:`~manowar_memory.stores.base.MaintenanceStore`)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from ..._util import now_ms
from ...errors import MissingDependencyError
from ...records import MemoryRecord
from .. import _mql
from .. import base as _base
from ..base import PageCursor, ScopeKey
from .connection import (
    CHUNKS_FIELD,
    MongoConnection,
    doc_to_memory,
)
from .threads import _TURN_COUNTER

try:
    import pymongo
    from bson.objectid import ObjectId
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise MissingDependencyError("pymongo", "mongo", "The MongoDB store") from exc

__all__ = ["MongoMaintenance"]


class MongoMaintenance(MongoConnection):
    """Bulk updates and deletes, paging, retention counts, erasure, agent listing."""

    def update_memories(self, updates: Sequence[tuple[str, dict[str, Any]]], *,
                        agent_wallet: str | None = None) -> int:
        """Apply ``(id, changes)`` pairs to rows of ``agent_wallet`` in one bulk write (maintenance
        jobs); returns rows matched."""
        ops = []
        for memory_id, changes in updates:
            _base.check_memory_changes(changes)
            if changes:
                ops.append(pymongo.UpdateOne(
                    _mql.memory_id_filter(memory_id, agent_wallet), _mql.memory_update_pipeline(self._memory_sets(changes), now_ms())
                ))
        if not ops:
            return 0
        with self._errors("bulk update"), self._fact_conflict("rows"):
            return int(self.memory.bulk_write(ops, ordered=False).matched_count)

    def delete_memories(self, memory_ids: Sequence[str], *, agent_wallet: str | None = None) -> int:
        """Hard delete many rows of ``agent_wallet``; returns how many were removed."""
        if not memory_ids:
            return 0
        with self._errors("delete"):
            return int(self.memory.delete_many(_mql.memory_id_filter(memory_ids, agent_wallet)).deleted_count)

    def page_memories(self, agent_wallet: str | None, after: PageCursor, limit: int, *,
                      users: Sequence[str | None] | None = None) -> tuple[list[MemoryRecord], PageCursor]:
        """Up to ``limit`` rows after the ``_id`` ``after`` (every status, no embeddings), ``_id`` order."""
        docs = self._memory_page(agent_wallet, ObjectId(str(after)) if after else None, int(limit), users,
                                 with_embedding=False)
        return [doc_to_memory(d, with_embedding=False) for d in docs], (str(docs[-1]["_id"]) if docs else after)

    def memory_user_counts(self, agent_wallet: str) -> dict[str | None, int]:
        """Rows per user of the agent (None: the user-less rows, null or missing), every status."""
        counts: dict[str | None, int] = {}
        with self._errors("read"):
            for doc in self.memory.aggregate(_mql.memory_user_counts_pipeline(agent_wallet)):
                counts[doc["_id"]] = counts.get(doc["_id"], 0) + int(doc["n"])
        return counts

    def iter_user_memories(self, agent_wallet: str, users: Sequence[str | None]) -> Iterator[MemoryRecord]:
        """The agent's rows of these users, every status, no embeddings, in ``_id`` order."""
        with self._errors("read"):
            docs = self.memory.find(_mql.memory_rows_of_users_filter(agent_wallet, users), {"embedding": 0},
                                    hint=self._hint(_mql.user_rows_hint(agent_wallet, users))).sort("_id", 1)
            for doc in docs:
                yield doc_to_memory(doc, with_embedding=False)

    def delete_sessions_older_than(self, cutoff: int) -> int:
        """Delete sessions last used before ``cutoff`` (cleanup)."""
        with self._errors("delete"):
            return int(self.sessions.delete_many({"lastAccessedAt": {"$lt": cutoff}}).deleted_count)

    def count_stale_sessions(self, now: int, cutoff: int) -> int:
        """Sessions that cleanup would delete: expired at ``now`` or last used before ``cutoff``."""
        with self._errors("count"):
            return int(self.sessions.count_documents(_mql.stale_session_filter(now, cutoff)))

    def stale_session_scopes(self, now: int, cutoff: int) -> list[ScopeKey]:
        """Distinct (agent, user, mode, hai) of the sessions cleanup would delete."""
        return self._distinct_scopes(self.sessions, _mql.stale_session_filter(now, cutoff))

    def _distinct_scopes(self, coll: Any, flt: dict[str, Any]) -> list[ScopeKey]:
        with self._errors("read"):
            rows = coll.aggregate(_mql.scopes_pipeline(flt))
            return [(r["_id"].get("a"), r["_id"].get("u"), r["_id"].get("m"), r["_id"].get("h")) for r in rows]

    def erase_scope(self, key: ScopeKey) -> dict[str, int]:
        """Delete everything one scope owns (see :class:`~manowar_memory.stores.base.MaintenanceStore`)."""
        match = {"agentWallet": key[0], "userAddress": key[1], "mode": key[2], "haiId": key[3]}
        counts: dict[str, int] = {}
        with self._errors("delete"):
            sessions = [d["sessionId"] for d in self.transcripts.find(match, {"sessionId": 1})]
            counts["memories"] = int(self.memory.delete_many(match).deleted_count)
            counts["transcripts"] = int(self.transcripts.delete_many(match).deleted_count)
            counts["turns"] = int(self.turns.delete_many({**match, _TURN_COUNTER: {"$exists": False}}).deleted_count)
            self.turns.delete_many({**match, _TURN_COUNTER: True})  # the counters of its transcripts
            for start in range(0, len(sessions), 500):  # chunks and turn counters of its transcripts
                of_sessions = {"agentWallet": key[0], "sessionId": {"$in": sessions[start:start + 500]}}
                self.transcript_chunks.delete_many(of_sessions)
                self.turns.delete_many(of_sessions)
            self.transcript_chunks.delete_many(match)
            counts["sessions"] = int(self.sessions.delete_many(match).deleted_count)
            counts["patterns"] = int(self.patterns.delete_many(match).deleted_count)
            counts["archives"] = int(self.archives.delete_many(match).deleted_count)
        return counts

    def delete_transcripts_older_than(self, cutoff: int) -> int:
        """Delete transcripts created before ``cutoff`` (cleanup), with their message chunks."""
        with self._errors("delete"):
            chunked = [
                {"agentWallet": d["agentWallet"], "sessionId": d["sessionId"]}
                for d in self.transcripts.find({"createdAt": {"$lt": cutoff}, CHUNKS_FIELD: {"$exists": True}},
                                               {"agentWallet": 1, "sessionId": 1})
            ]
            deleted = int(self.transcripts.delete_many({"createdAt": {"$lt": cutoff}}).deleted_count)
            for start in range(0, len(chunked), 500):
                self.transcript_chunks.delete_many({"$or": chunked[start : start + 500]})
            return deleted

    def count_transcripts_older_than(self, cutoff: int) -> int:
        """Transcripts created before ``cutoff`` (a cleanup dry run)."""
        with self._errors("count"):
            return int(self.transcripts.count_documents({"createdAt": {"$lt": cutoff}}))

    def old_transcript_scopes(self, cutoff: int) -> list[ScopeKey]:
        """Distinct (agent, user, mode, hai) of the transcripts created before ``cutoff``."""
        return self._distinct_scopes(self.transcripts, {"createdAt": {"$lt": cutoff}})

    # -- maintenance schedules (jobs/schedules.py) --
    def list_agent_wallets(self, limit: int | None = None) -> list[str]:
        """Distinct agents of memory, transcripts, patterns, archives and sessions, in that
        order, exactly as stored; at most ``limit``."""
        out: dict[str, None] = {}
        with self._errors("read"):
            for coll in (self.memory, self.transcripts, self.patterns, self.archives, self.sessions):
                for wallet in sorted(w for w in coll.distinct("agentWallet") if isinstance(w, str)):
                    out.setdefault(wallet)
                    if limit is not None and len(out) >= limit:
                        return list(out)
        return list(out)
