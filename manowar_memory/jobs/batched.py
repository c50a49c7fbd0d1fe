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
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from pydantic import BaseModel

from .._util import DAY_MS
from ..errors import InvalidInputError
from ..records import MemoryRecord
from ._store import ChangedScopes, StoreAdapter, job_store
from .core import SUPERSEDED_DECAY_CAP, ConsolidateParams, DecayUpdateParams, fingerprint, _keep_newest
from .runner import parse_params

__all__ = ["BATCHED_JOB_TYPES", "DEFAULT_BATCH_SIZE", "JOB_MARKER_KEY", "finish_batched_report", "run_job_batch"]

#: job types that run in batches on Temporal
BATCHED_JOB_TYPES = ("consolidate", "decay_update")
#: rows per batch when the request gives none
DEFAULT_BATCH_SIZE = 5000
#: metadata key naming the consolidation job that superseded a row
JOB_MARKER_KEY = "consolidationJobId"
_INACTIVE = ("superseded", "deleted")
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
def _sqlite(s: StoreAdapter) -> Any | None:
    inner = s.inner
    return inner if getattr(inner, "name", None) == "sqlite" and hasattr(inner, "_conn") else None


def _mongo(s: StoreAdapter) -> Any | None:
    inner = s.inner
    return inner if getattr(inner, "name", None) == "mongo" and hasattr(inner, "memory") else None


def _sql_columns() -> str:
    """The SQLite store's memory columns, without reading the embedding blobs."""
    from ..stores.sqlite import _MEMORY_COLUMNS

    cols = [c.strip() for c in _MEMORY_COLUMNS.split(",")]
    return ", ".join("NULL AS embedding" if c == "embedding" else c for c in cols)


def _user_key(user: str | None) -> list[Any]:
    """Sort key for a user (no user first); JSON-safe so it can sit in a cursor."""
    return [0, ""] if user is None else [1, user]


def _user_counts(s: StoreAdapter, wallet: str) -> list[tuple[str | None, int]]:
    """Every user of the agent with its row count, in :func:`_user_key` order."""
    counts: dict[str | None, int] = {}
    if (db := _sqlite(s)) is not None:
        with db._conn() as conn:
            for user, n in conn.execute(
                    "SELECT user_address, COUNT(*) FROM memory WHERE agent_wallet = ? GROUP BY user_address", (wallet,)):
                counts[user] = int(n)
    elif (mg := _mongo(s)) is not None:
        for doc in mg.memory.aggregate([{"$match": {"agentWallet": wallet}},
                                        {"$group": {"_id": "$userAddress", "n": {"$sum": 1}}}]):
            counts[doc["_id"]] = counts.get(doc["_id"], 0) + int(doc["n"])
    else:
        for rec in s.iter_memories(wallet):
            counts[rec.user_address] = counts.get(rec.user_address, 0) + 1
    return sorted(counts.items(), key=lambda kv: _user_key(kv[0]))


def _group_rows(s: StoreAdapter, wallet: str, users: list[str | None]) -> Iterator[MemoryRecord]:
    """The agent's rows of these users (every status), in insertion order."""
    named = [u for u in users if u is not None]
    if (db := _sqlite(s)) is not None:
        clauses = []
        params: list[Any] = [wallet]
        if named:
            clauses.append(f"user_address IN ({','.join('?' * len(named))})")
            params += named
        if None in users:
            clauses.append("user_address IS NULL")
        with db._conn() as conn:
            rows = conn.execute(f"SELECT {_sql_columns()} FROM memory WHERE agent_wallet = ? AND ({' OR '.join(clauses)}) "
                                "ORDER BY rowid", params).fetchall()
        for row in rows:
            yield db._row_to_record(row)
    elif (mg := _mongo(s)) is not None:
        from ..stores.mongo import doc_to_memory

        for doc in mg.memory.find({"agentWallet": wallet, "userAddress": {"$in": users}}, {"embedding": 0}).sort("_id", 1):
            yield doc_to_memory(doc, with_embedding=False)
    else:
        wanted = set(users)
        for rec in s.iter_memories(wallet):
            if rec.user_address in wanted:
                yield rec


def _page(s: StoreAdapter, agent_wallet: str | None, after: Any, limit: int) -> tuple[list[MemoryRecord], Any]:
    """Up to ``limit`` rows after the position ``after`` (None: the start), and the position after them."""
    if (db := _sqlite(s)) is not None:
        sql = f"SELECT {_sql_columns()} FROM memory WHERE rowid > ?"
        params: list[Any] = [int(after or 0)]
        if agent_wallet is not None:
            sql += " AND agent_wallet = ?"
            params.append(agent_wallet)
        with db._conn() as conn:
            rows = conn.execute(sql + " ORDER BY rowid LIMIT ?", [*params, limit]).fetchall()
        return [db._row_to_record(r) for r in rows], (rows[-1]["rowid"] if rows else after)
    if (mg := _mongo(s)) is not None:
        from bson import ObjectId

        from ..stores.mongo import doc_to_memory

        flt: dict[str, Any] = {} if agent_wallet is None else {"agentWallet": agent_wallet}
        if after:
            flt["_id"] = {"$gt": ObjectId(after)}
        docs = list(mg.memory.find(flt, {"embedding": 0}).sort("_id", 1).limit(limit))
        return [doc_to_memory(d, with_embedding=False) for d in docs], (str(docs[-1]["_id"]) if docs else after)
    # any other store: an offset into its iteration order
    skip = int(after or 0)
    out: list[MemoryRecord] = []
    for i, rec in enumerate(s.iter_memories(agent_wallet)):
        if i < skip:
            continue
        if len(out) >= limit:
            break
        out.append(rec)
    return out, skip + len(out)


# --------------------------------------------------------------------------- consolidate
def _consolidate_batch(s: StoreAdapter, params: ConsolidateParams, cursor: dict[str, Any], acc: dict[str, Any],
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
        pending = [(u, n) for u, n in _user_counts(s, wallet) if after is None or _user_key(u) > list(after)]
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
    for rec in _group_rows(s, wallet, users):
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
        s.update_memories(updates)  # one call: a single transaction on SQLite
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
def _decay_batch(s: StoreAdapter, params: DecayUpdateParams, cursor: dict[str, Any], acc: dict[str, Any],
                 batch_size: int, now: int, dry_run: bool, progress: Progress | None,
                 changes: ChangedScopes | None) -> dict[str, Any]:
    half_life = params.half_life_days
    if not (isinstance(half_life, (int, float)) and math.isfinite(half_life) and half_life > 0):
        raise InvalidInputError(f"half_life_days must be a finite number > 0, got {half_life!r}")
    rep = {"updated": 0, "skippedInactive": 0, "halfLifeDays": half_life, "_scoreSum": 0.0, **acc}
    rows, after = _page(s, params.agent_wallet, cursor.get("after"), batch_size)
    updates: list[tuple[str, dict[str, Any]]] = []
    for rec in rows:
        if rec.status in _INACTIVE:
            rep["skippedInactive"] += 1
            continue
        score = 0.5 ** ((max(0, now - rec.created_at) / DAY_MS) / half_life)
        rep["_scoreSum"] += score
        rep["updated"] += 1
        updates.append((rec.id, {"decay_score": score, "updated_at": now}))
        if changes is not None and not dry_run:
            changes.add(rec)
    if updates and not dry_run:
        s.update_memories(updates)
    if progress is not None and rows:
        progress(len(rows))
    done = len(rows) < batch_size
    return {"report": rep, "cursor": None if done else {"after": after}, "rows": len(rows)}
