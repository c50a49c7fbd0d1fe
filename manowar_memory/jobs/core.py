"""The maintenance jobs consolidate, patterns_extract, forget, decay_update, expire and cleanup
(archive_create and archive_restore are in :mod:`manowar_memory.jobs.archives`, pattern → skill
promotion in :mod:`manowar_memory.jobs.skills`, what the jobs share in :mod:`manowar_memory.jobs.base`).

Semantics follow the reference (manowar-behaviour §9, §10.2) with its quirks fixed:

* consolidate: duplicates are found within one whole scope only (agent, user, mode and HAI);
  rows already superseded (or soft-deleted) are never counted or touched again.
* patterns_extract: a pattern qualifies by the validate rule (count ≥ 2, success rate ≥ 0.55,
  confidence = min(1, count/10 × successRate) ≥ 0.2); the upsert sets createdAt only on insert.
* archive_create / archive_restore: an archive can be decoded back into rows; restoring
  skips rows that still exist.
* decay_update: only active rows are recomputed; the ≤ 0.05 of superseded rows and the 0 of
  soft-deleted rows stay. halfLifeDays must be > 0.
* cleanup: olderThanDays must be given and > 0; 0 or a negative value is rejected.
* expire: rows whose time to live ran out (``metadata.expiresAt``) are archived (status
  ``expired``) or deleted; with ``unused_days``, rows nobody recalled are forgotten too.

Every job takes a :class:`~manowar_memory.jobs._store.JobStore`, a params model, and
``dry_run`` (report what would change, write nothing) and returns a plain report dict.
``changes`` (a :class:`~manowar_memory.jobs._store.ChangedScopes`) collects the scopes of
every row the job changed, so the runner can invalidate exactly those cached queries.
"""

from __future__ import annotations

import base64
import gzip
import json
import math
from typing import Any, Literal, NamedTuple, Protocol, TypeVar

from pydantic import Field

from .._util import DAY_MS, content_hash, now_ms
from ..errors import InvalidInputError, PinningError
from ..expiry import EXPIRED, FORGOTTEN, is_expired, is_protected, kind_of
from ..records import MemoryRecord, Pattern, PatternStep, PatternTrigger
from ..scope import Scope
from ..stores.base import INACTIVE_STATUSES, MemoryQuery, by_agent
from ._store import ChangedScopes, JobStore
from .archives import decode_archive
from .base import _OWNER, Owner, Progress, TimeRange, _owned_by, _owner_tag, _owner_users, _Params, _tick, _window
from .pinning import PinataClient, PinataCredentials
from .skills import MIN_PATTERN_CONFIDENCE, MIN_PATTERN_COUNT, MIN_PATTERN_SUCCESS_RATE, _confidence

__all__ = [
    "STALE_DECAY_THRESHOLD",
    "SUPERSEDED_DECAY_CAP",
    "CleanupParams",
    "ConsolidateParams",
    "DecayUpdateParams",
    "ExpireParams",
    "ForgetParams",
    "PatternsExtractParams",
    "cleanup",
    "consolidate",
    "decay_update",
    "expire",
    "fingerprint",
    "forget",
    "patterns_extract",
]

SUPERSEDED_DECAY_CAP = 0.05
STALE_DECAY_THRESHOLD = 0.2
_INACTIVE = INACTIVE_STATUSES  # superseded, deleted, and archived by the expire job


# --------------------------------------------------------------------------- consolidate
class ConsolidateParams(_Params):
    """Supersede older duplicates of the same content within one scope (agent, user, mode, HAI)."""

    agent_wallets: list[str] | None = Field(default=None, description="agents to consolidate")
    agent_wallet: str | None = Field(default=None, description="one agent (used when agent_wallets is empty)")
    owner: Owner | None = _OWNER


def fingerprint(record: MemoryRecord) -> str:
    """The duplicate key of a row, first 20 hex chars of a hash of its whole scope (agent,
    user, mode, HAI, exactly as the row holds them), its source and its trimmed, lower-cased
    content. Rows of different scopes are never duplicates of each other: the reference left
    mode and HAI out, so the same text remembered in HAI h1, HAI h2 and global ended with
    only one of the three scopes seeing it."""
    key = json.dumps([record.agent_wallet, record.user_address, record.mode, record.hai_id, record.source,
                      record.content.strip().lower()], ensure_ascii=False)
    return content_hash(key, 20)


R = TypeVar("R", bound="_Dated")


class _Dated(Protocol):
    @property
    def created_at(self) -> int: ...
    @property
    def updated_at(self) -> int: ...


def _keep_newest(best: dict[Any, R], dupes: dict[Any, list[R]], key: Any, row: R) -> None:
    """Consolidation's keeper rule: of rows with the same key the newest (createdAt, then
    updatedAt) stays in ``best``; every other one goes to ``dupes[key]``."""
    cur = best.get(key)
    if cur is None:
        best[key] = row
        return
    newer, older = (row, cur) if (row.created_at, row.updated_at) > (cur.created_at, cur.updated_at) else (cur, row)
    best[key] = newer
    dupes.setdefault(key, []).append(older)


def consolidate(store: JobStore, params: ConsolidateParams, *, dry_run: bool = False,
                progress: Progress | None = None, now: int | None = None,
                changes: ChangedScopes | None = None) -> dict[str, Any]:
    now = now if now is not None else now_ms()
    wallets = params.agent_wallets or ([params.agent_wallet] if params.agent_wallet else [])
    if not wallets:
        raise InvalidInputError("consolidate needs agent_wallets (or agent_wallet)")
    wanted = list(dict.fromkeys(wallets))
    # (wallet, fingerprint) -> newest active row; only the light fields are kept in memory
    best: dict[tuple[str, str], _Row] = {}
    dupes: dict[tuple[str, str], list[_Row]] = {}
    scanned = 0
    # one agent: read its rows; several: one pass over the table beats one scan per agent
    users = _owner_users(params.owner)
    sources = ([store.iter_memories(w, users=users) for w in wanted] if len(wanted) == 1
               else [store.iter_memories(None, users=users)])
    wanted_set = set(wanted)
    for source in sources:
        for rec in _tick(source, progress):
            if rec.agent_wallet not in wanted_set or not _owned_by(params.owner, rec):
                continue
            scanned += 1
            if rec.status in _INACTIVE:
                continue  # already superseded / deleted: not counted again
            key = (rec.agent_wallet, fingerprint(rec))
            row = _Row(rec.id, rec.created_at, rec.updated_at, rec.decay_score, rec.metadata,
                       (rec.agent_wallet, rec.user_address, rec.mode, rec.hai_id))
            _keep_newest(best, dupes, key, row)
    per_agent: dict[str, int] = dict.fromkeys(wanted, 0)
    updates: list[tuple[str, dict[str, Any]]] = []
    owners: list[str] = []  # the agent of each update
    for (wallet, fp), olds in dupes.items():
        keeper = best[(wallet, fp)]
        per_agent[wallet] += len(olds)
        for old in olds:
            meta = {**old.metadata, "status": "superseded", "supersededAt": now,
                    "duplicateFingerprint": fp, "supersededBy": keeper.id}
            updates.append((old.id, {"decay_score": min(old.decay_score, SUPERSEDED_DECAY_CAP),
                                     "updated_at": now, "metadata": meta}))
            owners.append(wallet)
            if changes is not None and not dry_run:
                changes.add_key(old.scope)
    if updates and not dry_run:
        for agent, mine in by_agent(zip(owners, updates)).items():
            for i in range(0, len(mine), 1000):
                store.update_memories(mine[i:i + 1000], agent_wallet=agent)
    return {"consolidated": len(updates), "duplicateGroups": len(dupes), "scanned": scanned, "byAgent": per_agent,
            "supersededIds": [u[0] for u in updates[:200]]}


class _Row(NamedTuple):
    id: str
    created_at: int
    updated_at: int
    decay_score: float
    metadata: dict[str, Any]
    scope: tuple[str, str | None, str | None, str | None]


# --------------------------------------------------------------------------- patterns_extract
class PatternsExtractParams(_Params):
    """Find repeated tool-call sequences in an agent's transcripts and store them as patterns."""

    agent_wallet: str = Field(description="the agent whose transcripts are read")
    time_range: TimeRange | None = Field(default=None, description="explicit createdAt window")
    window_days: float | None = Field(default=None, description="window ending now, in days (default 1)")
    confidence_threshold: float = Field(
        default=MIN_PATTERN_CONFIDENCE, ge=MIN_PATTERN_CONFIDENCE, le=1.0,
        description="minimum confidence = min(1, count/10 × successRate); never below 0.2",
    )
    owner: Owner | None = _OWNER


def _call_failed(call: dict[str, Any]) -> bool:
    return call.get("success") is False or bool(call.get("error")) or call.get("status") in ("error", "failed")


def pattern_id_for(agent_wallet: str, names: list[str], owner: Owner | None = None) -> str:
    tag = _owner_tag(owner)
    return f"pat_{agent_wallet[2:10]}_{content_hash('|'.join(names), 20)}" + (f"_{tag}" if tag else "")


def patterns_extract(store: JobStore, params: PatternsExtractParams, *, dry_run: bool = False,
                     progress: Progress | None = None, now: int | None = None,
                     changes: ChangedScopes | None = None) -> dict[str, Any]:
    now = now if now is not None else now_ms()
    start, end = _window(params.time_range, params.window_days, 1, now)
    read = store.list_transcripts(params.agent_wallet, start, end, users=_owner_users(params.owner))
    transcripts = [t for t in read if _owned_by(params.owner, t)]
    groups: dict[str, dict[str, Any]] = {}
    for t in _tick(transcripts, progress, every=100):
        names: list[str] = []
        failed = False
        for msg in t.messages:
            for call in msg.tool_calls or []:
                name = call.get("name") if isinstance(call, dict) else None
                if name:
                    names.append(str(name))
                    failed = failed or _call_failed(call)
        if not names:
            continue
        g = groups.setdefault("|".join(names), {"names": names, "count": 0, "ok": 0, "last": 0})
        g["count"] += 1
        g["ok"] += 0 if failed else 1
        g["last"] = max(g["last"], t.created_at)
    written: list[dict[str, Any]] = []
    skipped = 0
    for g in groups.values():
        count = g["count"]
        # reference rate min(0.99, 0.5 + count/20), scaled by the share of runs with no failed call
        success_rate = round(min(0.99, 0.5 + count / 20) * (g["ok"] / count), 6)
        confidence = _confidence(count, success_rate)
        if count < MIN_PATTERN_COUNT or success_rate < MIN_PATTERN_SUCCESS_RATE or confidence < params.confidence_threshold:
            skipped += 1
            continue
        names = g["names"]
        pid = pattern_id_for(params.agent_wallet, names, params.owner)
        pattern = Pattern(
            pattern_id=pid, agent_wallet=params.agent_wallet, **(params.owner.fields() if params.owner else {}),
            pattern_type="tool_sequence",
            trigger=PatternTrigger(type="context", value=names[0]),
            steps=[PatternStep(action=n, order=i) for i, n in enumerate(names)],
            summary=" -> ".join(names), success_rate=success_rate, execution_count=count, last_executed=g["last"],
            metadata={"taskType": "auto-extracted", "tags": ["tool-sequence", "learned"]},
            created_at=now, updated_at=now,
        )
        if not dry_run:
            existing = store.get_pattern(pid)
            if existing is not None and existing.metadata.get("taskType") == "promoted":
                pattern.metadata["taskType"] = "promoted"  # keep the promotion mark
            store.upsert_pattern(pattern)  # createdAt kept from the first insert by the store
            if changes is not None:
                changes.add(pattern)
        written.append({"patternId": pid, "summary": pattern.summary, "count": count,
                        "successRate": success_rate, "confidence": round(confidence, 6)})
    return {"patterns": len(written), "extracted": len(transcripts), "skippedGroups": skipped,
            "window": {"start": start, "end": end}, "items": written}


# --------------------------------------------------------------------------- forget
class ForgetParams(_Params):
    """Erase everything one scope owns: its rows of every layer, and its rows inside the agent's archives."""

    agent_wallet: str = Field(description="the agent of the scope")
    user_address: str | None = Field(default=None, description="the user (None: the agent's user-less rows)")
    mode: Literal["global", "local"] | None = Field(default=None, description="the mode of the scope")
    hai_id: str | None = Field(default=None, description="the HAI of the scope")


def _unpin(copies: list[dict[str, Any]], unpinner: Any | None) -> None:
    """Unpin each pinned copy (``unpinner``: a PinataClient, default from the environment) and
    note on it whether that worked; without credentials the copy is reported as still pinned."""
    client = unpinner
    if client is None:
        if PinataCredentials.from_env() is None:
            for copy in copies:
                copy.update(unpinned=False, reason="no Pinata credentials here: unpin it at the provider")
            return
        client = PinataClient.from_env()
    try:
        for copy in copies:
            try:
                copy["unpinned"] = bool(client.unpin(copy["ipfsHash"]))
                if not copy["unpinned"]:
                    copy["reason"] = "the provider did not pin it (already unpinned)"
            except PinningError as exc:
                copy.update(unpinned=False, reason=str(exc))
    finally:
        if unpinner is None:
            client.close()


def forget(store: JobStore, params: ForgetParams, *, dry_run: bool = False, progress: Progress | None = None,
           now: int | None = None, changes: ChangedScopes | None = None, unpinner: Any | None = None) -> dict[str, Any]:
    """Erase the scope: first its rows are cut out of every archive of the agent that holds them
    (so a retry after a failure still finds them), then the store deletes its rows, transcripts,
    sessions, patterns and archives with their index entries (:meth:`erase_scope`). An archive
    that was pinned to IPFS is unpinned (``unpinner``, default a PinataClient from the
    environment) and listed in ``pinnedCopies`` with ``unpinned`` and the reason when it could
    not be: a public copy may have been fetched or pinned by others already. Idempotent."""
    owner = Owner(user_address=params.user_address, mode=params.mode, hai_id=params.hai_id)
    key = owner.key(params.agent_wallet)
    rewritten, removed_from_archives = 0, 0
    pinned_copies: list[dict[str, Any]] = []
    agent_scope = Scope(agent_wallet=params.agent_wallet)
    for archive in _tick(store.find_archives(MemoryQuery(scope=agent_scope), 1_000_000), progress, every=100):
        if owner.owns(archive):
            continue  # the scope's own archive: deleted with its rows below
        payload = decode_archive(archive)
        rows = payload.get("vectors", [])
        kept = [d for d in rows if (d.get("agentWallet"), d.get("userAddress"), d.get("mode"), d.get("haiId")) != key]
        if len(kept) == len(rows):
            continue
        rewritten += 1
        removed_from_archives += len(rows) - len(kept)
        if archive.ipfs_cid:
            pinned_copies.append({"archiveId": archive.archive_id, "ipfsHash": archive.ipfs_cid})
        if dry_run:
            continue
        text = json.dumps({**payload, "vectors": kept}, ensure_ascii=False, separators=(",", ":"))
        content = base64.b64encode(gzip.compress(text.encode("utf-8"))).decode("ascii") if archive.compressed else text
        meta = {**archive.metadata, "entryCount": len(kept), "originalSize": len(text.encode("utf-8")),
                "compressedSize": len(content.encode("utf-8"))}
        if archive.ipfs_cid:
            meta["ipfs"] = {**(meta.get("ipfs") or {}), "staleAfterErasure": True, "erasedCid": archive.ipfs_cid}
        store.update_archive(archive.archive_id, {"content": content, "metadata": meta, "ipfs_cid": None})
    if pinned_copies and not dry_run:
        _unpin(pinned_copies, unpinner)
    if dry_run:
        counts = {"memories": 0, "transcripts": 0, "sessions": 0, "patterns": 0, "archives": 0, "turns": 0}
    else:
        counts = store.erase_scope(key)
        if changes is not None:
            changes.add_key(key)
            if rewritten:
                changes.add_key((params.agent_wallet, None, None, None))
    return {**counts, "archivesRewritten": rewritten, "archivedRowsRemoved": removed_from_archives,
            "pinnedCopies": pinned_copies}


# --------------------------------------------------------------------------- decay_update
class DecayUpdateParams(_Params):
    """Recompute decayScore = 0.5^(age/halfLife) for active rows."""

    half_life_days: float = Field(default=30.0, description="half-life in days; must be > 0")
    agent_wallet: str | None = Field(default=None, description="only this agent (default: every agent)")
    owner: Owner | None = _OWNER


def decay_update(store: JobStore, params: DecayUpdateParams, *, dry_run: bool = False,
                 progress: Progress | None = None, now: int | None = None,
                 changes: ChangedScopes | None = None) -> dict[str, Any]:
    half_life = params.half_life_days
    if not (isinstance(half_life, (int, float)) and math.isfinite(half_life) and half_life > 0):
        raise InvalidInputError(f"half_life_days must be a finite number > 0, got {half_life!r}")
    now = now if now is not None else now_ms()
    updated = 0
    skipped_inactive = 0
    total = 0.0
    batch: list[tuple[str, tuple[str, dict[str, Any]]]] = []  # (agent, (id, changes))

    def write(rows: list[tuple[str, tuple[str, dict[str, Any]]]]) -> None:
        for agent, mine in by_agent(rows).items():
            store.update_memories(mine, agent_wallet=agent)

    if params.owner is not None and params.agent_wallet is None:
        raise InvalidInputError("decay_update of one scope's rows needs its agent_wallet")
    rows = store.iter_memories(params.agent_wallet, batch_size=5000, users=_owner_users(params.owner))
    for rec in _tick(rows, progress):
        if not _owned_by(params.owner, rec):
            continue
        if rec.status in _INACTIVE:
            skipped_inactive += 1  # keep the ≤ 0.05 / 0 floors
            continue
        age_days = max(0, now - rec.created_at) / DAY_MS
        score = 0.5 ** (age_days / half_life)
        total += score
        updated += 1
        if not dry_run:
            batch.append((rec.agent_wallet, (rec.id, {"decay_score": score, "updated_at": now})))
            if changes is not None:
                changes.add(rec)
            if len(batch) >= 5000:
                write(batch)
                batch = []
    if batch:
        write(batch)
    return {"updated": updated, "avgDecayScore": (total / updated) if updated else 0.0,
            "skippedInactive": skipped_inactive, "halfLifeDays": half_life}


# --------------------------------------------------------------------------- expire
class ExpireParams(_Params):
    """Forget on purpose: archive or delete the rows whose time to live ran out and, with
    ``unused_days``, the rows nobody recalls (decay). Pinned and ``system``-trust rows are never
    forgotten by decay (an explicit TTL on them still applies)."""

    agent_wallet: str | None = Field(default=None, description="only this agent (default: every agent)")
    owner: Owner | None = _OWNER
    action: Literal["archive", "delete"] = Field(
        default="archive", description=(
            "what happens to an expired row: archive (kept with status 'expired', forgottenAt and "
            "forgottenReason, hidden from every read) or delete (the row, its vector and full-text entries)"))
    unused_days: float | None = Field(
        default=None, gt=0, allow_inf_nan=False, description=(
            "decay: also forget active rows created and last recalled (lastAccessedAt) at least this many days "
            "ago; None (default): no decay"))
    max_access_count: int | None = Field(
        default=None, ge=0, description="decay only rows recalled at most this many times (None: any count)")
    keep_importance: float = Field(
        default=0.5, ge=0.0, le=1.0, allow_inf_nan=False,
        description="decay keeps rows whose metadata.importance is at least this (a row without one counts as 0)")
    max_decay_score: float | None = Field(
        default=None, ge=0.0, le=1.0, allow_inf_nan=False,
        description="decay only rows whose decayScore (see decay_update) is below this (None: any score)")
    kinds: list[str] | None = Field(
        default=None, description="decay only rows of these kinds (fact types or sources; None: every kind)")
    decay_action: Literal["archive", "delete"] | None = Field(
        default=None, description="what happens to a decayed row (default: action); archived ones get status 'forgotten'")


def _decays(rec: MemoryRecord, params: ExpireParams, now: int) -> bool:
    """Whether decay forgets ``rec``: old, not recalled lately nor often, unimportant, of a chosen kind."""
    assert params.unused_days is not None
    cutoff = now - int(params.unused_days * DAY_MS)
    if rec.created_at > cutoff or rec.last_accessed_at > cutoff:
        return False
    if params.max_access_count is not None and rec.access_count > params.max_access_count:
        return False
    importance = rec.metadata.get("importance")
    if isinstance(importance, (int, float)) and not isinstance(importance, bool) and importance >= params.keep_importance:
        return False
    if params.max_decay_score is not None and rec.decay_score >= params.max_decay_score:
        return False
    return params.kinds is None or kind_of(rec.source, rec.metadata) in params.kinds


def expire(store: JobStore, params: ExpireParams, *, dry_run: bool = False, progress: Progress | None = None,
           now: int | None = None, changes: ChangedScopes | None = None) -> dict[str, Any]:
    """Archive or delete the expired rows of the agent (the owner's only, for a scope's job) and,
    with ``unused_days``, forget the rows nobody recalls. Reads already hide expired rows from
    their expiry on; this job makes it lasting (archived rows free their fact's dedupe slot) or
    frees the space. Idempotent: an archived row is not counted again. The report:
    ``examined``, ``expired``, ``decayed``, ``archived``, ``deleted``, ``protected`` (rows decay
    would have forgotten but that are pinned or ``system``), ``alreadyInactive`` (expired rows
    already archived, superseded or deleted) and ``byType`` (per kind: expired and decayed)."""
    if params.owner is not None and params.agent_wallet is None:
        raise InvalidInputError("expire of one scope's rows needs its agent_wallet")
    now = now if now is not None else now_ms()
    decay_action = params.decay_action or params.action
    examined = expired = decayed = protected = already = 0
    by_type: dict[str, dict[str, int]] = {}
    archive: list[tuple[str, tuple[str, dict[str, Any]]]] = []  # (agent, (id, changes))
    delete: list[tuple[str, str]] = []  # (agent, id)

    def flush() -> None:
        if dry_run:
            return
        for agent, mine in by_agent(archive).items():
            store.update_memories(mine, agent_wallet=agent)
        for agent, ids in by_agent(delete).items():
            store.delete_memories(ids, agent_wallet=agent)

    archived = deleted = 0
    cursor: Any = None
    while True:
        rows, cursor = store.page_memories(params.agent_wallet, cursor, 1000, users=_owner_users(params.owner))
        if not rows:
            break
        for rec in _tick(rows, progress):
            if not _owned_by(params.owner, rec):
                continue
            examined += 1
            inactive = rec.status in _INACTIVE
            if is_expired(rec.metadata, now):
                if inactive and params.action == "archive":
                    already += 1
                    continue
                expired += 1
                by_type.setdefault(kind_of(rec.source, rec.metadata), {"expired": 0, "decayed": 0})["expired"] += 1
                how, status, reason = params.action, EXPIRED, "time to live ran out"
            elif params.unused_days is not None and not inactive and _decays(rec, params, now):
                if is_protected(rec.metadata):
                    protected += 1
                    continue
                decayed += 1
                by_type.setdefault(kind_of(rec.source, rec.metadata), {"expired": 0, "decayed": 0})["decayed"] += 1
                how, status = decay_action, FORGOTTEN
                reason = f"not recalled for {params.unused_days:g} days"
            else:
                continue
            if how == "delete":
                delete.append((rec.agent_wallet, rec.id))
                deleted += 1
            else:
                archive.append((rec.agent_wallet, (rec.id, {"updated_at": now, "metadata": {
                    **rec.metadata, "status": status, "forgottenAt": now, "forgottenReason": reason}})))
                archived += 1
            if changes is not None and not dry_run:
                changes.add(rec)
        if len(archive) + len(delete) >= 1000:
            flush()
            archive, delete = [], []
    flush()
    return {"examined": examined, "expired": expired, "decayed": decayed, "archived": archived, "deleted": deleted,
            "protected": protected, "alreadyInactive": already, "byType": by_type, "action": params.action,
            "decayAction": decay_action if params.unused_days is not None else None, "now": now}


# --------------------------------------------------------------------------- cleanup
class CleanupParams(_Params):
    """Delete stale low-decay unpinned rows, expired/stale sessions and old transcripts."""

    older_than_days: float | None = Field(
        default=None, description="required, > 0: only data older than this many days is removed")


def cleanup(store: JobStore, params: CleanupParams, *, dry_run: bool = False,
            progress: Progress | None = None, now: int | None = None,
            changes: ChangedScopes | None = None) -> dict[str, Any]:
    days = params.older_than_days
    if days is None or not math.isfinite(days) or days <= 0:
        raise InvalidInputError(
            f"cleanup needs older_than_days > 0 (got {days!r}); 0 or a negative value would delete everything")
    now = now if now is not None else now_ms()
    cutoff = now - int(days * DAY_MS)
    victims: list[tuple[str, str]] = []  # (agent, id)
    freed = 0
    for rec in _tick(store.iter_memories(None, created_to=cutoff - 1), progress):
        if rec.created_at < cutoff and rec.decay_score < STALE_DECAY_THRESHOLD and rec.metadata.get("retention") != "pinned":
            victims.append((rec.agent_wallet, rec.id))
            freed += len(rec.content.encode("utf-8"))
            if changes is not None and not dry_run:
                changes.add(rec)
    if not dry_run and changes is not None:  # listed before the delete: the rows are gone after it
        for key in [*store.stale_session_scopes(now, cutoff), *store.old_transcript_scopes(cutoff)]:
            changes.add_key(key)
    if dry_run:
        vectors, sessions, transcripts = len(victims), store.count_stale_sessions(now, cutoff), store.count_transcripts_older_than(cutoff)
    else:
        vectors = sum(store.delete_memories(ids[i:i + 1000], agent_wallet=agent)
                      for agent, ids in by_agent(victims).items() for i in range(0, len(ids), 1000))
        sessions = store.purge_expired_sessions(now) + store.delete_sessions_older_than(cutoff)
        transcripts = store.delete_transcripts_older_than(cutoff)
    deleted = vectors + sessions + transcripts
    return {"deleted": deleted, "vectorsDeleted": vectors, "sessionsDeleted": sessions,
            "transcriptsDeleted": transcripts, "freedBytes": freed, "cutoff": cutoff}


