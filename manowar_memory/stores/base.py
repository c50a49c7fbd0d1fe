"""The storage protocol every backend implements, and the query shape it takes.

The engine never builds backend queries itself: it hands a :class:`MemoryQuery`
(scope + allowlisted filters + which rows) to the store, and the store turns it into
SQL or MQL, so scope and filters are enforced inside the store query.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, NamedTuple, Protocol, TypeVar, runtime_checkable

from ..errors import StoreError
from ..filters import FilterValue
from ..records import Archive, Job, MemoryRecord, Pattern, Session, Skill, Transcript
from ..scope import Scope

__all__ = [
    "MAX_INSERT_ATTEMPTS",
    "ROLES",
    "STATS_COUNTED",
    "UPDATABLE_MEMORY_FIELDS",
    "ArtifactStore",
    "CacheFenceStore",
    "EarlierRows",
    "EventDateRows",
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
    "TimeRangeRows",
    "TurnBuilder",
    "TurnRows",
    "TurnWrite",
    "VectorSearchInfo",
    "by_agent",
    "check_memory_changes",
    "event_date_keys",
    "insert_gave_up",
    "is_unique_fact",
    "missing_role_methods",
    "require_unique_fact",
    "stats_report",
    "suffixed_id",
]

#: statuses ``active_only`` hides: soft-deleted, superseded, and archived by the ``expire`` job
#: (``expired``: its time to live ran out; ``forgotten``: nobody recalled it)
INACTIVE_STATUSES = ("deleted", "superseded", "expired", "forgotten")
#: (agent_wallet, user_address, mode, hai_id) of a stored row
ScopeKey = tuple[str, "str | None", "str | None", "str | None"]
#: a position in :meth:`MaintenanceStore.page_memories` (JSON-safe; None: the start)
PageCursor = str | int | None


#: the snake_case record fields :meth:`MemoryRowStore.update_memory` may set
UPDATABLE_MEMORY_FIELDS = frozenset({
    "content", "context", "source", "decay_score", "access_count", "updated_at", "last_accessed_at",
    "metadata", "embedding", "embedding_model", "user_address", "thread_id", "created_at",
})
#: how often an insert tries before it gives up: a colliding id takes the next suffix
#: (``id_1``, ``id_2``, ...), a fact hash freed by a writer that bypassed the store is retried
MAX_INSERT_ATTEMPTS = 1000


_T = TypeVar("_T")


def by_agent(items: Iterable[tuple[str, _T]]) -> dict[str, list[_T]]:
    """``(agent_wallet, item)`` pairs grouped by agent, agents and items in first-seen order:
    a by-id write names one agent per call (one shard of a sharded MongoDB), so a job whose
    rows span agents writes each agent's rows in its own call."""
    out: dict[str, list[_T]] = {}
    for agent, item in items:
        out.setdefault(agent, []).append(item)
    return out


def check_memory_changes(changes: Mapping[str, Any]) -> None:
    """Raise :class:`StoreError` when ``changes`` names a field outside :data:`UPDATABLE_MEMORY_FIELDS`."""
    unknown = set(changes) - UPDATABLE_MEMORY_FIELDS
    if unknown:
        raise StoreError(f"cannot update memory field(s) {sorted(unknown)}")


def require_unique_fact(record: MemoryRecord) -> None:
    """Raise :class:`StoreError` unless ``record`` is an active fact row (what ``add_fact_if_absent`` takes)."""
    if not is_unique_fact(record.source, record.metadata):
        raise StoreError("add_fact_if_absent takes an active fact row (source 'fact' with metadata.factHash)")


def suffixed_id(record_id: str, n: int) -> str:
    """The id an insert tries after ``n`` id collisions."""
    return record_id if n == 0 else f"{record_id}_{n}"


def insert_gave_up(record_id: str) -> StoreError:
    """The error of an insert that found no free id (or fact hash) in :data:`MAX_INSERT_ATTEMPTS` tries."""
    return StoreError(f"could not insert {record_id} after {MAX_INSERT_ATTEMPTS} attempts (id or fact collisions)")


def stats_report(*, total: int, avg_decay: float | None, oldest: int | None, newest: int | None,
                 by_source: Iterable[tuple[Any, int]], by_status: Iterable[tuple[Any, int]],
                 counts: Mapping[str, int]) -> dict[str, Any]:
    """The :meth:`Store.stats` answer: memory totals and age range, rows by source (None:
    ``unknown``) and by status (None: ``active``), and the counts of ``transcripts``,
    ``sessions``, ``patterns`` and ``archives``."""

    def tally(pairs: Iterable[tuple[Any, int]], missing: str) -> dict[str, int]:
        out: dict[str, int] = {}
        for key, n in pairs:
            name = str(key) if key else missing
            out[name] = out.get(name, 0) + int(n)
        return out

    return {
        "totalVectors": int(total),
        "avgDecayScore": float(avg_decay or 0.0),
        "oldestVector": int(oldest or 0),
        "newestVector": int(newest or 0),
        "bySource": tally(by_source, "unknown"),
        "byStatus": tally(by_status, "active"),
        "totalTranscripts": int(counts["transcripts"]),
        "totalSessions": int(counts["sessions"]),
        "totalPatterns": int(counts["patterns"]),
        "totalArchives": int(counts["archives"]),
    }


#: the tables / collections :meth:`Store.stats` counts besides memory
STATS_COUNTED = ("transcripts", "sessions", "patterns", "archives")


def is_unique_fact(source: str | None, metadata: Any) -> bool:
    """Whether a row takes part in the one-active-fact rule: a ``fact`` row with a
    ``metadata.factHash`` whose status is not inactive (:data:`INACTIVE_STATUSES`). Stores keep at most one
    such row per (agent, factHash); a soft-deleted or superseded row frees the hash."""
    if source != "fact" or not isinstance(metadata, dict) or metadata.get("factHash") is None:
        return False
    return metadata.get("status") not in INACTIVE_STATUSES


@dataclass(frozen=True)
class MemoryQuery:
    """Which rows a read may see.

    * ``scope``: agent (exact), user (that user's rows plus the agent's user-less rows;
      without a user only user-less rows), mode and hai_id when set, thread when
      ``durable`` is False and the scope has one.
    * ``filters``: normalised allowlisted filters (see :mod:`manowar_memory.filters`).
    * ``sources`` / ``exclude_sources``: restrict ``memory`` rows by source.
    * ``active_only``: hide inactive rows (:data:`INACTIVE_STATUSES`) and memory rows whose
      ``metadata.expiresAt`` (a number of epoch ms) is at or before ``now``.
    * ``now``: the time expiry is judged at (epoch ms); None: the store's clock when it runs the read.
    """

    scope: Scope
    filters: dict[str, FilterValue] = field(default_factory=dict)
    durable: bool = True
    sources: tuple[str, ...] | None = None
    exclude_sources: tuple[str, ...] = ()
    active_only: bool = True
    now: int | None = None


@dataclass
class Hit:
    """A memory row with the score a lane gave it."""

    record: MemoryRecord
    score: float


class KeywordHits(list[Hit]):
    """What :meth:`MemoryRowStore.keyword_search` may return instead of a plain list: the hits,
    best first, and ``pruned_terms``, the number of the query's terms the store left out of the
    search because they were too common to score every row holding them (0: the search was
    exact). The engine reports it in the lane report (``keyword_pruned_terms``)."""

    def __init__(self, hits: Iterable[Hit] = (), *, pruned_terms: int = 0) -> None:
        super().__init__(hits)
        self.pruned_terms = pruned_terms


@dataclass
class VectorSearchInfo:
    """How a vector search was served, for the result's accounting."""

    method: str
    candidates: int = 0
    skipped_other_models: int = 0
    notes: list[str] = field(default_factory=list)


@runtime_checkable
class MemoryRowStore(Protocol):
    """Memory rows: the vectors layer and graph facts, with the keyword and vector lanes.

    By-id methods take the row's agent (``agent_wallet``, keyword): the store then matches
    only that agent's rows, so an id of another agent is "not found" and never touched, and a
    sharded MongoDB (shard key ``agentWallet``) routes the call to the one shard owning the
    agent. The engine always passes it; ``None`` (any agent) is for maintenance across agents
    and is broadcast to every shard. Row ids are unique per agent (MongoDB's unique index is
    ``(agentWallet, vectorId)``; SQLite's ids are unique outright)."""

    def add_memories(self, records: Sequence[MemoryRecord]) -> list[str]:
        """Insert rows; returns their ids (a colliding id gets a suffix). An active fact whose
        (agent, factHash) already has an active row is not inserted: that row is reinforced as
        by :meth:`add_fact_if_absent` and its id is returned in the record's place."""
        ...

    def add_memories_if_absent(self, records: Sequence[MemoryRecord]) -> list[tuple[str, bool]]:
        """Insert each row unless a row with its id already exists (any status): the write of
        a retryable ingest, whose row ids are derived from idempotency keys. Atomic per row
        across threads and processes (the id is unique), so two concurrent runs of one ingest
        store each row once. An active fact whose (agent, factHash) is taken reinforces that
        row as in :meth:`add_memories`. Returns, in order, the id holding each record and
        whether this call inserted it."""
        ...

    def existing_memory_ids(self, memory_ids: Sequence[str], *, agent_wallet: str | None = None) -> set[str]:
        """The ids among ``memory_ids`` that have a row (any status) of ``agent_wallet``, so a
        retried ingest skips (and does not re-embed) what an earlier run stored."""
        ...

    def get_memory(self, memory_id: str, query: MemoryQuery | None = None, *,
                   agent_wallet: str | None = None) -> MemoryRecord | None:
        """One row by id of ``agent_wallet`` (else of the query's agent), optionally constrained
        by a query's scope, filters and status."""
        ...

    def update_memory(self, memory_id: str, changes: dict[str, Any], *,
                      agent_wallet: str | None = None) -> MemoryRecord | None:
        """Set fields (snake_case record attributes) on a row of ``agent_wallet``; returns the
        row after the update (None: the agent has no such row)."""
        ...

    def delete_memory(self, memory_id: str, *, agent_wallet: str | None = None) -> bool:
        """Hard delete a row of ``agent_wallet``; True when a row was removed."""
        ...

    def find_fact_by_hash(self, agent_wallet: str, fact_hash: str) -> MemoryRecord | None:
        """An active fact row of the agent with this ``metadata.factHash``."""
        ...

    def add_fact_if_absent(self, record: MemoryRecord) -> tuple[MemoryRecord, bool]:
        """Insert an active fact row unless the agent already has an active fact with the same
        ``metadata.factHash``; then reinforce that row instead (accessCount += 1,
        lastAccessedAt = the record's ``last_accessed_at``). Atomic across threads and
        processes. Returns the stored row (without its embedding) and whether it was inserted."""
        ...

    def bump_access(self, memory_ids: Sequence[str], at: int, *, agent_wallet: str | None = None) -> None:
        """accessCount += 1 and lastAccessedAt = at for each id of ``agent_wallet``'s rows."""
        ...

    def list_memories(self, query: MemoryQuery, limit: int | None = None) -> list[MemoryRecord]:
        """Rows matching the query, newest first."""
        ...

    def iter_memories(
        self, agent_wallet: str | None = None, *, created_from: int | None = None,
        created_to: int | None = None, batch_size: int = 1000, users: Sequence[str | None] | None = None,
    ) -> Iterator[MemoryRecord]:
        """Every row (any status), optionally for one agent, some of its ``users`` (None among
        them: the user-less rows; a job of one scope reads only its user's rows) and a
        createdAt range, oldest first."""
        ...

    def count_memories(self, query: MemoryQuery) -> int:
        """Number of rows matching the query."""
        ...

    def keyword_search(self, query: MemoryQuery, text: str, limit: int) -> list[Hit]:
        """Full-text search (BM25 where the backend has it), best first; score higher is better.
        A store that leaves query terms out (too common to score at scale) returns a
        :class:`KeywordHits` saying how many."""
        ...

    def vector_search(
        self, query: MemoryQuery, vector: Sequence[float], model_id: str, limit: int
    ) -> tuple[list[Hit], VectorSearchInfo]:
        """Nearest rows embedded by ``model_id``; score on the Atlas scale (1 + cos) / 2."""
        ...


@runtime_checkable
class TimeRangeRows(Protocol):
    """An optional capability of a store (not part of :class:`Store`): the rows of a scope
    recorded in a time range, for the search's dated lane (a query naming "15 May 2023" reads
    that day's rows). A store without it still works; such searches leave the lane out and
    say so in their degradations. The SQLite and MongoDB stores serve it from their
    (agent, user, createdAt) index."""

    def memories_created_between(self, query: MemoryQuery, start: int, end: int, limit: int) -> list[MemoryRecord]:
        """At most ``limit`` rows matching ``query`` (scope, filters, status, expiry, sources)
        with ``start <= created_at < end`` (epoch ms), oldest first, with their embeddings."""
        ...


@runtime_checkable
class EarlierRows(Protocol):
    """An optional capability of a store (not part of :class:`Store`): the rows of a scope
    recorded last before a time, newest first. A "when" question reads the turns just before a
    reply in its thread with it (:func:`~manowar_memory.retrieval.hybrid.when_neighbours`); with
    a store without it, that step is left out and the search says so. The SQLite and MongoDB
    stores serve it from their (agent, user, createdAt) index."""

    def memories_created_before(self, query: MemoryQuery, end: int, limit: int) -> list[MemoryRecord]:
        """At most ``limit`` rows matching ``query`` (scope, filters, status, expiry, sources)
        with ``created_at < end`` (epoch ms), newest first, with their embeddings."""
        ...


@runtime_checkable
class EventDateRows(Protocol):
    """An optional capability of a store (not part of :class:`Store`): the rows of a scope whose
    event date (``metadata.eventDate``, ISO: ``2023-06-12``, ``2023-06`` or ``2023``, what fact
    extraction sets from "last Friday", "in June") falls in a time range, however long after it
    they were recorded: the dated lane reads them beside :class:`TimeRangeRows`. The SQLite
    and MongoDB stores serve it from an (agent, user, eventDate) index."""

    def memories_dated_between(self, query: MemoryQuery, start: int, end: int, limit: int) -> list[MemoryRecord]:
        """At most ``limit`` rows matching ``query`` whose event date overlaps ``[start, end)``
        (epoch ms; a month or year date overlaps when any of its days does,
        :func:`event_date_keys`), by event date then creation, with their embeddings."""
        ...


def event_date_keys(start: int, end: int) -> tuple[str, str, list[str]]:
    """What an ``eventDate`` overlapping ``[start, end)`` (epoch ms, UTC days) can be: at least the
    first string and under the second (a day of the range, ISO, with or without a time), or one
    of the listed months and years the range touches (``2023-06``, ``2023``). Pure: both stores
    build their reads from it."""
    first = dt.datetime.fromtimestamp(start / 1000, tz=dt.UTC).date()
    last = dt.datetime.fromtimestamp((end - 1) / 1000, tz=dt.UTC).date()
    coarse: dict[str, None] = {}
    month = dt.date(first.year, first.month, 1)
    while month <= last:
        coarse.setdefault(f"{month.year:04d}", None)
        coarse[f"{month.year:04d}-{month.month:02d}"] = None
        month = dt.date(month.year + month.month // 12, month.month % 12 + 1, 1)
    return first.isoformat(), (last + dt.timedelta(days=1)).isoformat(), list(coarse)


class TurnRows(NamedTuple):
    """What one turn writes: the thread's transcript and working session after the turn, and
    the turn's session row."""

    transcript: Transcript
    session: Session
    record: MemoryRecord


#: Builds a turn's rows from the transcript and live working session as they stand (None when
#: absent). The store calls it inside the turn's write, possibly more than once (a transaction
#: retried after a conflict), so it must be pure; an exception it raises aborts the turn.
TurnBuilder = Callable[[Transcript | None, Session | None], TurnRows]


class TurnWrite(NamedTuple):
    """The outcome of :meth:`ThreadStore.append_turn`."""

    created: bool
    """False when the turn id was already recorded: nothing was written."""
    memory_id: str | None
    """The turn's session row (for a duplicate, the one the first write stored)."""
    seq: int
    """The turn's place in its transcript (1, 2, ...): the order the turns were committed in."""


@runtime_checkable
class ThreadStore(Protocol):
    """Threads: sessions (the working layer) and transcripts (the scene layer)."""

    def get_session(self, session_id: str, agent_wallet: str) -> Session | None:
        """A live (unexpired) session."""
        ...

    def upsert_session(self, session: Session) -> None:
        """Insert or replace a session by (agent, session id)."""
        ...

    def find_sessions(self, query: MemoryQuery, limit: int) -> list[Session]:
        """Live sessions matching the query, most recently used first."""
        ...

    def purge_expired_sessions(self, now: int) -> int:
        """Delete expired sessions; returns how many."""
        ...

    def upsert_transcript(self, transcript: Transcript) -> None:
        """Insert or replace a transcript by session id. Any number of messages of any length:
        a backend with a document size limit splits it, and every read returns it whole."""
        ...

    def get_transcript(self, session_id: str, agent_wallet: str) -> Transcript | None:
        """A transcript by agent and session id (session ids are unique per agent)."""
        ...

    def append_turn(
        self, agent_wallet: str, session_id: str, working_id: str, turn_id: str, build: TurnBuilder
    ) -> TurnWrite:
        """Record one turn exactly once: in one atomic write, unless ``turn_id`` is already in
        the transcript ``session_id``'s turn ledger, read that transcript and the live working
        session ``working_id``, call ``build`` on them, and store the transcript, the session,
        the turn's session row and a ledger entry with the next sequence number. Concurrent
        calls on one transcript are serialized, none overwrites another; a failure leaves
        nothing of the turn, so the same call can be repeated."""
        ...

    def search_transcripts(self, query: MemoryQuery, text: str | None, limit: int) -> list[tuple[Transcript, float]]:
        """Transcripts matching ``text`` (full text, best first), or the newest when ``text`` is None."""
        ...

    def list_transcripts(self, agent_wallet: str, created_from: int, created_to: int, *,
                         users: Sequence[str | None] | None = None) -> list[Transcript]:
        """Transcripts of an agent created in ``[created_from, created_to]``, oldest first;
        ``users``: only those of these users (None among them: the user-less ones)."""
        ...


@runtime_checkable
class ArtifactStore(Protocol):
    """Artifacts: patterns, archives, skills and job records."""

    def upsert_pattern(self, pattern: Pattern) -> None:
        """Insert or update a pattern by id (createdAt kept from the first insert)."""
        ...

    def get_pattern(self, pattern_id: str) -> Pattern | None:
        """A pattern by id."""
        ...

    def find_patterns(self, query: MemoryQuery, limit: int) -> list[Pattern]:
        """Patterns matching the query, best success rate first."""
        ...

    def add_archive(self, archive: Archive) -> None:
        """Insert an archive."""
        ...

    def get_archive(self, archive_id: str) -> Archive | None:
        """An archive by id."""
        ...

    def update_archive(self, archive_id: str, changes: dict[str, Any]) -> None:
        """Set fields on an archive."""
        ...

    def find_archives(self, query: MemoryQuery, limit: int) -> list[Archive]:
        """Archives matching the query, newest first."""
        ...

    def add_skill(self, skill: Skill) -> None:
        """Insert a skill."""
        ...

    def get_skill(self, skill_id: str) -> Skill | None:
        """A skill by id."""
        ...

    def list_skills(self, agent_wallet: str | None, category: str | None, limit: int) -> list[Skill]:
        """Skills, best first."""
        ...

    def put_job(self, job: Job) -> None:
        """Insert or replace a job record."""
        ...

    def get_job(self, job_id: str) -> Job | None:
        """A job record by id."""
        ...


@runtime_checkable
class CacheFenceStore(Protocol):
    """Cache fences shared by every engine on the store."""

    def cache_fences(self, keys: Sequence[str]) -> dict[str, int]:
        """The epoch of each cache fence (0 for one never bumped). A write whose cache
        invalidation could not be delivered bumps its fence here, where every engine sharing
        the store sees it, and every cached read is keyed by the fences it read."""
        ...

    def bump_cache_fence(self, key: str) -> int:
        """Add one to a cache fence (created at 1); returns the new epoch."""
        ...


@runtime_checkable
class MaintenanceStore(Protocol):
    """What the maintenance jobs need beyond rows and artifacts: cursor paging, grouped
    counts, bulk updates and deletes, the stale scopes cleanup is about to delete from."""

    def page_memories(self, agent_wallet: str | None, after: PageCursor, limit: int, *,
                      users: Sequence[str | None] | None = None) -> tuple[list[MemoryRecord], PageCursor]:
        """Up to ``limit`` rows (every status, without embeddings) after the position ``after``
        (None: the start), in insertion order, and the position after them (JSON-safe, to be
        passed back unchanged; ``after`` itself when there were no more rows); ``users`` as
        :meth:`MemoryRowStore.iter_memories`."""
        ...

    def memory_user_counts(self, agent_wallet: str) -> dict[str | None, int]:
        """Every user of the agent (None: its user-less rows) with its row count, every status."""
        ...

    def iter_user_memories(self, agent_wallet: str, users: Sequence[str | None]) -> Iterator[MemoryRecord]:
        """The agent's rows of these users (None: the user-less rows), every status, without
        embeddings, in insertion order."""
        ...

    def update_memories(self, updates: Sequence[tuple[str, dict[str, Any]]], *,
                        agent_wallet: str | None = None) -> int:
        """Apply ``(id, changes)`` pairs (as :meth:`MemoryRowStore.update_memory`) to rows of
        ``agent_wallet`` in one bulk write; returns how many rows matched."""
        ...

    def delete_memories(self, memory_ids: Sequence[str], *, agent_wallet: str | None = None) -> int:
        """Hard delete many rows of ``agent_wallet``; returns how many were removed."""
        ...

    def delete_transcripts_older_than(self, cutoff: int) -> int:
        """Delete transcripts created before ``cutoff``; returns how many."""
        ...

    def count_transcripts_older_than(self, cutoff: int) -> int:
        """How many transcripts were created before ``cutoff`` (a cleanup dry run)."""
        ...

    def old_transcript_scopes(self, cutoff: int) -> list[ScopeKey]:
        """The distinct scopes of the transcripts created before ``cutoff``."""
        ...

    def delete_sessions_older_than(self, cutoff: int) -> int:
        """Delete sessions last used before ``cutoff``; returns how many."""
        ...

    def count_stale_sessions(self, now: int, cutoff: int) -> int:
        """How many sessions expired at ``now`` or were last used before ``cutoff``."""
        ...

    def stale_session_scopes(self, now: int, cutoff: int) -> list[ScopeKey]:
        """The distinct scopes of the sessions expired at ``now`` or last used before ``cutoff``."""
        ...

    def erase_scope(self, key: ScopeKey) -> dict[str, int]:
        """Delete everything the scope ``(agent, user, mode, hai)`` owns exactly (a None part
        matches only None): memory rows, transcripts (with their chunks), sessions, patterns and
        archives of that scope, its entries in the turn ledger, and their full-text and vector
        index entries, leaving no segment of an index that still holds the erased text. Other
        scopes' rows, the agent's shared rows included, are untouched. Returns how many went of
        each kind (``memories``, ``transcripts``, ``sessions``, ``patterns``, ``archives``,
        ``turns``); running it
        again removes nothing more."""
        ...

    def list_agent_wallets(self, limit: int | None = None) -> list[str]:
        """Distinct agents of memory, transcripts, patterns, archives and sessions, in that
        order (each sorted), exactly as stored; at most ``limit``."""
        ...


@runtime_checkable
class ScheduleStore(Protocol):
    """Inline maintenance schedules, written with compare-and-set."""

    def get_schedule(self, schedule_id: str) -> dict[str, Any] | None:
        """The schedule doc with its ``rev``, or None."""
        ...

    def list_schedules(self) -> list[dict[str, Any]]:
        """Every schedule doc (with ``rev``), by id."""
        ...

    def save_schedule(self, doc: dict[str, Any], expected_rev: int | None = None) -> int | None:
        """Write ``doc`` (keyed by ``doc["scheduleId"]``). With ``expected_rev`` only when the
        stored rev is still that (compare-and-set), else create or replace. Returns the new
        rev, or None when the compare failed."""
        ...

    def delete_schedule(self, schedule_id: str) -> bool:
        """Delete the schedule; False when there was none."""
        ...


@runtime_checkable
class Store(MemoryRowStore, ThreadStore, ArtifactStore, CacheFenceStore, MaintenanceStore, ScheduleStore,
            Protocol):
    """What the engine, the jobs and the schedulers need from a backend: the union of the role
    protocols. ``manowar_memory.testing`` holds the conformance suite (one class per role)
    every implementation must pass unchanged."""

    name: str

    def stats(self, agent_wallet: str | None = None) -> dict[str, Any]:
        """Counts and ages of what is stored."""
        ...

    def close(self) -> None:
        """Release connections."""
        ...


#: every role protocol, by name
ROLES: dict[str, type] = {
    "memory rows": MemoryRowStore, "threads": ThreadStore, "artifacts": ArtifactStore,
    "cache fences": CacheFenceStore, "maintenance": MaintenanceStore, "schedules": ScheduleStore,
}


def role_methods(role: type) -> list[str]:
    """The methods a role protocol declares (its own and its bases'), sorted."""
    names: set[str] = set()
    for klass in role.__mro__:
        if klass is object or klass is Protocol or klass is Generic:
            continue
        names.update(n for n, v in vars(klass).items() if callable(v) and not n.startswith("_"))
    return sorted(names)


def missing_role_methods(obj: Any, *roles: type) -> list[str]:
    """The methods of ``roles`` (:class:`Store`: every role) that ``obj`` lacks, as ``Role.method``."""
    leaves = [k for role in roles for k in role.__mro__ if k in ROLES.values()] or list(roles)
    return [f"{role.__name__}.{name}" for role in dict.fromkeys(leaves) for name in sorted(vars(role))
            if not name.startswith("_") and callable(vars(role)[name]) and not callable(getattr(obj, name, None))]
