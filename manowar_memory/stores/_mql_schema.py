"""The MongoDB store's collections and indexes: names, the store-maintained fields of memory
rows, and every index of :data:`INDEXES` (what the recorded migrations leave a database with).
Pure data, no pymongo, for the store and for the query builders of
:mod:`manowar_memory.stores._mql` that name these collections and indexes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = [
    "ACTIVE_FACT_FIELD",
    "ARCHIVES",
    "CACHE_FENCE",
    "EVENT_DATE_INDEX",
    "INDEXES",
    "JOBS",
    "LEGACY_VECTOR_ID_INDEX",
    "MEMORY",
    "MIGRATIONS_COLLECTION",
    "PATTERNS",
    "SCHEDULES",
    "SCOPE_LIST_INDEX",
    "SESSIONS",
    "SKILLS",
    "SYNC_FIELD",
    "TRANSCRIPTS",
    "TRANSCRIPT_CHUNKS",
    "TURNS",
    "USER_ROWS_INDEX",
    "USER_SCAN_INDEX",
    "VECTOR_AGENT_ID_INDEX",
    "VECTOR_INDEX_NAME",
    "IndexSpec",
]

MEMORY = "memory"
TRANSCRIPTS = "session_transcripts"
TRANSCRIPT_CHUNKS = "session_transcript_chunks"  # the older messages of a transcript past one document's size
SESSIONS = "sessions"
TURNS = "session_turns"  # the turn ledger: one document per turn written to a transcript
PATTERNS = "patterns"
ARCHIVES = "archives"
SKILLS = "skills"
JOBS = "memory_jobs"
SCHEDULES = "memory_schedules"  # inline maintenance schedules (jobs/schedules.py)
CACHE_FENCE = "memory_cache_fence"  # cache fences (cache/namespace.py), one document per key
#: the recorded schema migrations (one document per applied migration, plus a lease while one runs)
MIGRATIONS_COLLECTION = "_manowar_migrations"

VECTOR_INDEX_NAME = "vector_index"
#: The index the self-hosted vector scan is hinted to: one (agent, user) range per user of the
#: scope, so other users' rows are never read (the planner may prefer the agent's model index
#: while a scope is small, and that one grows with every user of the agent).
USER_SCAN_INDEX = "idx_vector_wallet_user_model"
#: Row ids are unique per agent: a unique index of a collection sharded on ``agentWallet`` must
#: start with the shard key, and every by-id call names the agent, so it is one index lookup.
VECTOR_AGENT_ID_INDEX = "idx_vector_agent_id"
#: ``list_memories`` and ``count_memories``: one (agent, user) range per user of the scope,
#: newest first, so listing one user's rows never reads another user's.
SCOPE_LIST_INDEX = "idx_vector_wallet_user_created"
#: ``(agentWallet, userAddress, metadata.eventDate)``: the dated lane's read by event date.
EVENT_DATE_INDEX = "idx_vector_wallet_user_event_date"
#: ``(agentWallet, userAddress, _id)``: a job's paged read of its users' rows in insertion order
#: (``page_memories``, ``iter_memories``, ``iter_user_memories`` with ``users``), each page one
#: index range after the last ``_id`` read. Without it a page either walked the agent's whole
#: ``_id`` order, other users' rows included, or sorted all of the user's rows again.
USER_ROWS_INDEX = "idx_vector_wallet_user_id"

# Store-maintained fields of memory rows (never part of a record):
# * ACTIVE_FACT_FIELD: the row's metadata.factHash while it is an active fact (source "fact",
#   status not deleted/superseded), absent otherwise. A partial unique index on
#   (agentWallet, ACTIVE_FACT_FIELD) makes "one active fact per hash" atomic; partial filters
#   cannot say "status missing or not in (...)", so the store derives this field on every write.
# * SYNC_FIELD: epoch ms of the row's last write through a MongoStore; the in-process vector
#   cache re-reads the rows written since its last sync (minus a lag) by this field.
ACTIVE_FACT_FIELD = "activeFactHash"
SYNC_FIELD = "_syncAt"


class IndexSpec:
    """One index: name, key list and options (``unique``, ``expireAfterSeconds``...)."""

    __slots__ = ("keys", "name", "options")

    def __init__(self, name: str, keys: Sequence[tuple[str, Any]], **options: Any) -> None:
        self.name = name
        self.keys = list(keys)
        self.options = options

    def __repr__(self) -> str:
        return f"IndexSpec({self.name!r}, {self.keys!r}, **{self.options!r})"


_TEXT_OPTS = {"default_language": "english", "language_override": "_textLanguage"}

# The reference's indexes (§2.1–§2.7) with deliberate changes:
# * ``(agentWallet, vectorId)``, ``patternId``, ``archiveId``, ``skillId`` are unique (the reference's
#   were not, §13.1 item 27), so concurrent writers can never create duplicates of one id; row ids
#   are unique per agent (earlier versions had a unique ``vectorId`` alone, which a collection
#   sharded on ``agentWallet`` cannot have; migration ``m004_vector_id_per_agent`` replaces it);
# * sessions and transcripts are keyed by (agentWallet, sessionId), unique: session ids are unique
#   per agent (the reference made transcript session ids globally unique, so two agents with the
#   same session id overwrote each other's transcript);
# * text indexes for the keyword lane (memory content; transcript summary and messages), with the
#   agent and the user as equality prefixes, so a $text query only touches the postings of one
#   (agent, user) pair: other users of the same agent never cost a reader anything. MongoDB only
#   uses such an index when every prefix field is an equality, so a scope with a user runs one
#   $text query for the user and one for the agent's user-less rows (:func:`text_users`) and the
#   store sends them as one pipeline and merges them by score (:func:`union_by_score`);
# * (agentWallet, userAddress, ...) indexes for the other reads of one user's turn (the vector
#   lane's scan, patterns, archives, sessions, transcripts), for the same reason;
# * a few compound indexes for the store's own queries (fact dedupe, model-restricted scans).
#
# INDEXES is the state the recorded migrations (:mod:`manowar_memory.stores.mongo`, ``MIGRATIONS``)
# leave a database in; each migration creates its own part of it.
INDEXES: dict[str, list[IndexSpec]] = {
    MEMORY: [
        IndexSpec("idx_vector_wallet", [("agentWallet", 1)]),
        IndexSpec(VECTOR_AGENT_ID_INDEX, [("agentWallet", 1), ("vectorId", 1)], unique=True),
        IndexSpec("idx_vector_wallet_created", [("agentWallet", 1), ("createdAt", -1)]),
        IndexSpec("idx_vector_wallet_thread", [("agentWallet", 1), ("threadId", 1)]),
        IndexSpec("idx_vector_wallet_scope_thread", [("agentWallet", 1), ("mode", 1), ("haiId", 1), ("threadId", 1)]),
        IndexSpec("idx_vector_user", [("userAddress", 1)]),
        IndexSpec("idx_vector_source", [("source", 1)]),
        IndexSpec("idx_vector_app_id", [("metadata.app_id", 1)]),
        IndexSpec("idx_vector_decay", [("decayScore", -1)]),
        IndexSpec("idx_vector_last_accessed", [("lastAccessedAt", -1)]),
        IndexSpec("idx_vector_wallet_fact", [("agentWallet", 1), ("metadata.factHash", 1)]),
        IndexSpec("idx_vector_wallet_model", [("agentWallet", 1), ("embeddingModel", 1), ("createdAt", -1)]),
        IndexSpec("idx_vector_text",
                  [("agentWallet", 1), ("userAddress", 1), ("content", "text"), ("context", "text")],
                  weights={"content": 2, "context": 1}, **_TEXT_OPTS),
        IndexSpec(USER_SCAN_INDEX,
                  [("agentWallet", 1), ("userAddress", 1), ("embeddingModel", 1), ("createdAt", -1)]),
        IndexSpec(
            "idx_vector_active_fact", [("agentWallet", 1), (ACTIVE_FACT_FIELD, 1)], unique=True,
            partialFilterExpression={ACTIVE_FACT_FIELD: {"$exists": True}},
        ),
        IndexSpec("idx_vector_wallet_sync", [("agentWallet", 1), (SYNC_FIELD, 1)]),
        IndexSpec("idx_vector_wallet_user_sync", [("agentWallet", 1), ("userAddress", 1), (SYNC_FIELD, 1)]),
        IndexSpec(SCOPE_LIST_INDEX, [("agentWallet", 1), ("userAddress", 1), ("createdAt", -1), ("_id", -1)]),
        IndexSpec(EVENT_DATE_INDEX, [("agentWallet", 1), ("userAddress", 1), ("metadata.eventDate", 1)]),
        IndexSpec(USER_ROWS_INDEX, [("agentWallet", 1), ("userAddress", 1), ("_id", 1)]),
    ],
    TRANSCRIPTS: [
        IndexSpec("idx_transcript_session_id", [("sessionId", 1)]),
        IndexSpec("idx_transcript_wallet_session", [("agentWallet", 1), ("sessionId", 1)], unique=True),
        IndexSpec("idx_transcript_thread_id", [("threadId", 1)]),
        IndexSpec("idx_transcript_wallet", [("agentWallet", 1)]),
        IndexSpec("idx_transcript_wallet_created", [("agentWallet", 1), ("createdAt", -1)]),
        IndexSpec(
            "idx_transcript_wallet_scope_thread", [("agentWallet", 1), ("mode", 1), ("haiId", 1), ("threadId", 1)]
        ),
        IndexSpec("idx_transcript_user", [("userAddress", 1)]),
        IndexSpec("idx_transcript_app_id", [("metadata.app_id", 1)]),
        IndexSpec(
            "idx_transcript_text",
            [("agentWallet", 1), ("userAddress", 1), ("summary", "text"), ("messages.content", "text")],
            **_TEXT_OPTS,
        ),
        IndexSpec("idx_transcript_wallet_user_created", [("agentWallet", 1), ("userAddress", 1), ("createdAt", -1)]),
    ],
    TRANSCRIPT_CHUNKS: [
        IndexSpec("idx_transcript_chunk_key", [("agentWallet", 1), ("sessionId", 1), ("seq", 1), ("digest", 1)],
                  unique=True),
        IndexSpec(
            "idx_transcript_chunk_text", [("agentWallet", 1), ("userAddress", 1), ("messages.content", "text")],
            **_TEXT_OPTS,
        ),
    ],
    TURNS: [
        IndexSpec("idx_turn_key", [("agentWallet", 1), ("sessionId", 1), ("turnId", 1)], unique=True),
        IndexSpec("idx_turn_seq", [("agentWallet", 1), ("sessionId", 1), ("seq", -1)], unique=True),
        IndexSpec("idx_turn_wallet_user", [("agentWallet", 1), ("userAddress", 1)]),
    ],
    SESSIONS: [
        IndexSpec("idx_session_id", [("sessionId", 1)]),
        IndexSpec("idx_session_wallet_id", [("agentWallet", 1), ("sessionId", 1)], unique=True),
        IndexSpec("idx_session_wallet", [("agentWallet", 1)]),
        IndexSpec("idx_session_wallet_scope_thread", [("agentWallet", 1), ("mode", 1), ("haiId", 1), ("threadId", 1)]),
        IndexSpec("idx_session_app_id", [("metadata.app_id", 1)]),
        IndexSpec("idx_session_wallet_user_accessed", [("agentWallet", 1), ("userAddress", 1), ("lastAccessedAt", -1)]),
        IndexSpec("idx_session_ttl", [("expiresAt", 1)], expireAfterSeconds=0),
        IndexSpec("idx_session_last_accessed", [("lastAccessedAt", -1)]),
    ],
    PATTERNS: [
        IndexSpec("idx_pattern_wallet", [("agentWallet", 1)]),
        IndexSpec("idx_pattern_id", [("patternId", 1)], unique=True),
        IndexSpec("idx_pattern_wallet_type", [("agentWallet", 1), ("patternType", 1)]),
        IndexSpec("idx_pattern_trigger_lookup", [("trigger.type", 1), ("trigger.value", 1)]),
        IndexSpec("idx_pattern_success_rate", [("successRate", -1)]),
        IndexSpec("idx_pattern_last_executed", [("lastExecuted", -1)]),
        IndexSpec("idx_pattern_wallet_success", [("agentWallet", 1), ("successRate", -1)]),
        IndexSpec("idx_pattern_app_id", [("metadata.app_id", 1)]),
        IndexSpec("idx_pattern_wallet_user_success",
                  [("agentWallet", 1), ("userAddress", 1), ("successRate", -1), ("createdAt", -1)]),
    ],
    ARCHIVES: [
        IndexSpec("idx_archive_wallet", [("agentWallet", 1)]),
        IndexSpec("idx_archive_id", [("archiveId", 1)], unique=True),
        IndexSpec("idx_archive_wallet_created", [("agentWallet", 1), ("createdAt", -1)]),
        IndexSpec("idx_archive_date_range", [("dateRange.start", 1), ("dateRange.end", 1)]),
        IndexSpec("idx_archive_app_id", [("metadata.app_id", 1)]),
        IndexSpec("idx_archive_wallet_user_created", [("agentWallet", 1), ("userAddress", 1), ("createdAt", -1)]),
    ],
    SKILLS: [
        IndexSpec("idx_skill_id", [("skillId", 1)], unique=True),
        IndexSpec("idx_skill_creator", [("creator", 1)]),
        IndexSpec("idx_skill_trigger_type", [("trigger.type", 1)]),
        IndexSpec("idx_skill_success_usage", [("successRate", -1), ("usageCount", -1)]),
        IndexSpec("idx_skill_agents", [("agents", 1)]),
        IndexSpec("idx_skill_category", [("category", 1)]),
    ],
    JOBS: [
        IndexSpec("idx_memory_job_id", [("jobId", 1)], unique=True),
        IndexSpec("idx_memory_job_wallet_created", [("agentWallet", 1), ("createdAt", -1)]),
        IndexSpec("idx_memory_job_status_created", [("status", 1), ("createdAt", -1)]),
    ],
    SCHEDULES: [IndexSpec("idx_memory_schedule_id", [("scheduleId", 1)], unique=True)],
}
#: the unique index on ``vectorId`` alone of earlier versions (dropped by ``m004_vector_id_per_agent``)
LEGACY_VECTOR_ID_INDEX = IndexSpec("idx_vector_id", [("vectorId", 1)], unique=True)
