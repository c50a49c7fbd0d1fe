"""Consolidation and decay in bounded, resumable, idempotent batches.

The Temporal workflow runs one batch per activity and carries the returned ``cursor`` and
accumulated ``report`` from batch to batch (and across continue-as-new), so a job over many
rows never holds more than one batch in memory or in one activity, and a crashed batch can
simply run again:

* consolidate: a batch is a run of whole agent + user groups (duplicates never cross a
  scope, and a scope's mode and HAI lie inside its agent + user group, so a batch decides
  exactly what the inline job decides for those rows), taken in
  order of wallet then user until ``batch_size`` rows are reached. Every row it supersedes
  gets ``metadata.consolidationJobId``; when the batch runs again after a crash, rows that
  this job already superseded are counted again (so nothing is lost) but not written again.
* decay_update: a batch is the next ``batch_size`` rows after the cursor. Every batch of a
  job uses the job's fixed ``now``, so running it twice writes the same scores.

The final report has the inline job's keys and values (``consolidated``, ``duplicateGroups``,
``scanned``, ``byAgent``, ``supersededIds`` / ``updated``, ``avgDecayScore``,
``skippedInactive``, ``halfLifeDays``).

    out = run_job_batch(store, "decay_update", {"half_life_days": 30}, None, None, batch_size=1000, now=now)
    while out["cursor"] is not None:
        out = run_job_batch(store, "decay_update", {"half_life_days": 30}, out["cursor"], out["report"],
                            batch_size=1000, now=now)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel

from .._util import DAY_MS
from ..errors import InvalidInputError
from ..records import MemoryRecord
from ..stores.base import INACTIVE_STATUSES, by_agent
from ._store import ChangedScopes, JobStore, job_store
from .base import Owner, _owner_users
from .core import SUPERSEDED_DECAY_CAP, ConsolidateParams, DecayUpdateParams, _keep_newest, fingerprint
from .runner import parse_params

__all__ = ["BATCHED_JOB_TYPES", "DEFAULT_BATCH_SIZE", "JOB_MARKER_KEY", "finish_batched_report", "run_job_batch"]

#: job types that run in batches on Temporal
BATCHED_JOB_TYPES = ("consolidate", "decay_update")
#: rows per batch when the request gives none
DEFAULT_BATCH_SIZE = 5000
#: metadata key naming the consolidation job that superseded a row
JOB_MARKER_KEY = "consolidationJobId"
_INACTIVE = INACTIVE_STATUSES  # superseded, deleted, and archived by the expire job
_MAX_IDS = 200
_MAX_USERS_PER_BATCH = 500

Progress = Callable[[int], None]


def run_job_batch(store: Any, job_type: str, params: Mapping[str, Any] | BaseModel | None,
                  cursor: Mapping[str, Any] | None, report: Mapping[str, Any] | None, *, batch_size: int,
                  now: int, job_id: str | None = None, dry_run: bool = False,
                  progress: Progress | None = None, changes: ChangedScopes | None = None) -> dict[str, Any]:
    """Run the batch after ``cursor`` (None: the first one) and return
    ``{"report": accumulated report, "cursor": next cursor or None when done, "rows": rows read}``.

    ``report`` is the accumulated report returned by the previous batch (None for the first).
    When the returned cursor is None the report is final (see :func:`finish_batched_report`).
    ``changes`` collects the scopes of the rows the batch wrote (for cache invalidation).
    """
    if job_type not in BATCHED_JOB_TYPES:
        raise InvalidInputError(f"job {job_type!r} does not run in batches; batched jobs: {', '.join(BATCHED_JOB_TYPES)}")
    if batch_size < 1:
        raise InvalidInputError(f"batch_size must be >= 1, got {batch_size}")
    model = parse_params(job_type, params)
    s = job_store(store)
    if job_type == "consolidate":
        out = _consolidate_batch(s, model, dict(cursor or {}), dict(report or {}), batch_size, now, job_id,  # type: ignore[arg-type]
                                 dry_run, progress, changes)
    else:
        out = _decay_batch(s, model, dict(cursor or {}), dict(report or {}), batch_size, now, dry_run, progress,  # type: ignore[arg-type]
                           changes)
    if out["cursor"] is None:
        out["report"] = finish_batched_report(job_type, out["report"])
    return out


def finish_batched_report(job_type: str, report: Mapping[str, Any]) -> dict[str, Any]:
    """The inline job's report from an accumulated one (drops the running sums)."""
    rep = dict(report)
    if job_type == "decay_update":
        total = float(rep.pop("_scoreSum", 0.0))
        rep["avgDecayScore"] = total / rep["updated"] if rep.get("updated") else 0.0
    return rep


# --------------------------------------------------------------------------- row access
def _user_key(user: str | None) -> list[Any]:
    """Sort key for a user (no user first); JSON-safe so it can sit in a cursor."""
    return [0, ""] if user is None else [1, user]


def _user_counts(s: JobStore, wallet: str, owner: Owner | None = None) -> list[tuple[str | None, int]]:
    """Every user of the agent with its row count, in :func:`_user_key` order; for a job of one
    scope, its user alone, uncounted (a batch of one user is never split), so that no other
    user's rows are counted."""
    if owner is not None:
        return [(owner.user_address, 0)]
    return sorted(s.memory_user_counts(wallet).items(), key=lambda kv: _user_key(kv[0]))


# --------------------------------------------------------------------------- consolidate
def _consolidate_batch(s: JobStore, params: ConsolidateParams, cursor: dict[str, Any], acc: dict[str, Any],
                       batch_size: int, now: int, job_id: str | None, dry_run: bool,
                       progress: Progress | None, changes: ChangedScopes | None) -> dict[str, Any]:
    wallets = list(dict.fromkeys(params.agent_wallets or ([params.agent_wallet] if params.agent_wallet else [])))
    if not wallets:
        raise InvalidInputError("consolidate needs agent_wallets (or agent_wallet)")
    rep = {"consolidated": 0, "duplicateGroups": 0, "scanned": 0, "byAgent": dict.fromkeys(wallets, 0),
           "supersededIds": [], **acc}
    rep["byAgent"] = {**dict.fromkeys(wallets, 0), **rep["byAgent"]}
    w = int(cursor.get("wallet", 0))
    after = cursor.get("afterUser")
    while w < len(wallets):
        wallet = wallets[w]
        pending = [(u, n) for u, n in _user_counts(s, wallet, params.owner)
                   if after is None or _user_key(u) > list(after)]
        if pending:
            break
        w, after = w + 1, None  # this agent is done (or has no rows)
    if w >= len(wallets):
        return {"report": rep, "cursor": None, "rows": 0}
    users: list[str | None] = []
    rows = 0
    for user, n in pending:
        if users and (rows + n > batch_size or len(users) >= _MAX_USERS_PER_BATCH):
            break
        users.append(user)
        rows += n
    wallet = wallets[w]
    best: dict[str, MemoryRecord] = {}
    dupes: dict[str, list[MemoryRecord]] = {}
    done_before: dict[str, list[str]] = {}  # rows this job already superseded (an earlier try of this batch)
    scanned = 0
    for rec in s.iter_user_memories(wallet, users):
        if params.owner is not None and not params.owner.owns(rec):
            continue
        scanned += 1
        if rec.status in _INACTIVE:
            if job_id and rec.metadata.get(JOB_MARKER_KEY) == job_id:
                fp = rec.metadata.get("duplicateFingerprint") or fingerprint(rec)
                done_before.setdefault(fp, []).append(rec.id)
            continue
        _keep_newest(best, dupes, fingerprint(rec), rec)
    updates: list[tuple[str, dict[str, Any]]] = []
    ids: list[str] = []
    groups = 0
    for fp in dict.fromkeys([*dupes, *done_before]):
        olds = dupes.get(fp, [])
        earlier = done_before.get(fp, [])
        if not olds and not earlier:
            continue
        groups += 1
        ids += earlier
        for old in olds:
            meta = {**old.metadata, "status": "superseded", "supersededAt": now, "duplicateFingerprint": fp,
                    "supersededBy": best[fp].id}
            if job_id:
                meta[JOB_MARKER_KEY] = job_id
            updates.append((old.id, {"decay_score": min(old.decay_score, SUPERSEDED_DECAY_CAP), "updated_at": now,
                                     "metadata": meta}))
            ids.append(old.id)
            if changes is not None and not dry_run:
                changes.add(old)
    if updates and not dry_run:
        s.update_memories(updates, agent_wallet=wallet)  # one call: a single transaction on SQLite
    if progress is not None and scanned:
        progress(scanned)
    rep["consolidated"] += len(ids)
    rep["duplicateGroups"] += groups
    rep["scanned"] += scanned
    rep["byAgent"][wallet] = rep["byAgent"].get(wallet, 0) + len(ids)
    rep["supersededIds"] = (list(rep["supersededIds"]) + ids)[:_MAX_IDS]
    last = _user_key(users[-1])
    more = len(users) < len(pending) or w + 1 < len(wallets)
    nxt = ({"wallet": w, "afterUser": last} if len(users) < len(pending) else {"wallet": w + 1, "afterUser": None})
    return {"report": rep, "cursor": nxt if more else None, "rows": scanned}


# --------------------------------------------------------------------------- decay_update
def _decay_batch(s: JobStore, params: DecayUpdateParams, cursor: dict[str, Any], acc: dict[str, Any],
                 batch_size: int, now: int, dry_run: bool, progress: Progress | None,
                 changes: ChangedScopes | None) -> dict[str, Any]:
    half_life = params.half_life_days
    if not (isinstance(half_life, (int, float)) and math.isfinite(half_life) and half_life > 0):
        raise InvalidInputError(f"half_life_days must be a finite number > 0, got {half_life!r}")
    rep = {"updated": 0, "skippedInactive": 0, "halfLifeDays": half_life, "_scoreSum": 0.0, **acc}
    if params.owner is not None and params.agent_wallet is None:
        raise InvalidInputError("decay_update of one scope's rows needs its agent_wallet")
    rows, after = s.page_memories(params.agent_wallet, cursor.get("after"), batch_size,
                                  users=_owner_users(params.owner))
    updates: list[tuple[str, tuple[str, dict[str, Any]]]] = []  # (agent, (id, changes))
    for rec in rows:
        if params.owner is not None and not params.owner.owns(rec):
            continue
        if rec.status in _INACTIVE:
            rep["skippedInactive"] += 1
            continue
        score = 0.5 ** ((max(0, now - rec.created_at) / DAY_MS) / half_life)
        rep["_scoreSum"] += score
        rep["updated"] += 1
        updates.append((rec.agent_wallet, (rec.id, {"decay_score": score, "updated_at": now})))
        if changes is not None and not dry_run:
            changes.add(rec)
    if updates and not dry_run:
        for agent, mine in by_agent(updates).items():
            s.update_memories(mine, agent_wallet=agent)
    if progress is not None and rows:
        progress(len(rows))
    done = len(rows) < batch_size
    return {"report": rep, "cursor": None if done else {"after": after}, "rows": len(rows)}
