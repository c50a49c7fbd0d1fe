"""Run a maintenance job inline and record it as a :class:`~manowar_memory.records.Job`."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel, ValidationError

from .._util import content_hash, now_ms
from ..errors import InvalidInputError
from ..records import Job
from ..redaction import redact
from . import archives, core, reembed
from ._store import ChangedScopes, JobStore, job_store

__all__ = ["EMBEDDING_JOB_TYPES", "JOBS", "JOB_TYPES", "execute_job", "invalidate_changes", "new_job_id", "parse_params", "query_cache_of",
           "run_job"]

JobFunc = Callable[..., dict[str, Any]]

#: job type -> (params model, function)
JOBS: dict[str, tuple[type[BaseModel], JobFunc]] = {
    "consolidate": (core.ConsolidateParams, core.consolidate),
    "patterns_extract": (core.PatternsExtractParams, core.patterns_extract),
    "archive_create": (archives.ArchiveCreateParams, archives.archive_create),
    "decay_update": (core.DecayUpdateParams, core.decay_update),
    "cleanup": (core.CleanupParams, core.cleanup),
    "forget": (core.ForgetParams, core.forget),
    "expire": (core.ExpireParams, core.expire),
    "reembed": (reembed.ReembedParams, reembed.reembed),
}
JOB_TYPES = tuple(JOBS)
#: the jobs that need the engine's embedder (passed by :func:`run_job`)
EMBEDDING_JOB_TYPES = ("reembed",)


def parse_params(job_type: str, params: Mapping[str, Any] | BaseModel | None) -> BaseModel:
    """Validate ``params`` (snake_case or camelCase keys) for ``job_type``."""
    if job_type not in JOBS:
        raise InvalidInputError(f"unknown job type {job_type!r}; use one of {', '.join(JOB_TYPES)}")
    model = JOBS[job_type][0]
    if isinstance(params, model):
        return params
    if isinstance(params, BaseModel):
        params = params.model_dump()
    data = {_snake(k): v for k, v in dict(params or {}).items()}
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise InvalidInputError(f"invalid parameters for job {job_type!r}: {exc}") from exc


def _snake(key: str) -> str:
    return "".join("_" + c.lower() if c.isupper() else c for c in key)


def new_job_id(job_type: str, params: Mapping[str, Any], now: int) -> str:
    """``memjob_`` + H(type | JSON(params) | now)."""
    return "memjob_" + content_hash(f"{job_type}|{json.dumps(params, sort_keys=True, default=str)}|{now}")


def execute_job(store: JobStore, job_type: str, params: BaseModel, *, dry_run: bool = False,
                progress: Callable[[int], None] | None = None, changes: ChangedScopes | None = None,
                embedder: Any = None) -> dict[str, Any]:
    """Run the job function itself (no job record); ``changes`` collects the scopes it changed.
    ``embedder`` goes to the jobs of :data:`EMBEDDING_JOB_TYPES` (the others embed nothing)."""
    extra = {"embedder": embedder} if job_type in EMBEDDING_JOB_TYPES else {}
    return JOBS[job_type][1](store, params, dry_run=dry_run, progress=progress, changes=changes, **extra)


def query_cache_of(obj: Any) -> Any | None:
    """The query cache of a ``MemoryEngine`` (None for a bare store or an engine without one)."""
    return getattr(obj, "query_cache", None)


def invalidate_changes(cache: Any | None, changes: ChangedScopes) -> int:
    """Invalidate, in a :class:`~manowar_memory.cache.namespace.QueryCache`, exactly the scopes a
    job changed (every cached query when ``changes.everything``). Returns the scopes told;
    a cache outage is reported by the cache and never fails the job."""
    if cache is None or not changes:
        return 0
    if changes.everything:
        return 1 if cache.invalidate_all() else 0
    return sum(1 for scope in changes.scopes() if cache.invalidate(scope))


def _agent_of(params: BaseModel) -> str | None:
    wallet: str | None = getattr(params, "agent_wallet", None)
    if wallet:
        return wallet
    wallets = getattr(params, "agent_wallets", None)
    return wallets[0] if wallets and len(wallets) == 1 else None


def _ticker(bar: Any) -> Callable[[int], None] | None:
    """A job's progress callback that advances a tqdm bar (None without one)."""
    if bar is None:
        return None

    def tick(rows: int) -> None:
        bar.update(rows)

    return tick


def run_job(store_or_engine: Any, type: str, params: Mapping[str, Any] | BaseModel | None = None, *,  # noqa: A002
            dry_run: bool = False, progress: bool = False, cache: Any | None = None) -> Job:
    """Run one maintenance job inline and return its record.

    An unknown type or malformed parameters raise :class:`InvalidInputError` before anything
    is written. Otherwise a ``running`` record is stored, the job runs, and the record becomes
    ``completed`` (``data`` = the job's report) or ``failed`` (``error`` = the message); the
    record is returned in both cases. ``reembed`` embeds with the engine's embedder (it fails
    on a bare store). ``dry_run`` reports what would change and writes
    nothing but the job record (``data.dryRun`` is true). ``progress`` shows a tqdm bar.

    Cached queries that could see a changed row are invalidated (superseded, rescored,
    deleted or restored rows, new patterns and archives): in ``cache`` (a ``QueryCache``)
    or else the engine's query cache when an engine is passed. ``data.invalidatedScopes``
    says how many scopes were told.
    """
    model = parse_params(type, params)
    store = job_store(store_or_engine)
    now = now_ms()
    dumped = model.model_dump(mode="json")
    job = Job(job_id=new_job_id(type, dumped, now), type=type, execution="inline", status="running",  # type: ignore[arg-type]
              agent_wallet=_agent_of(model), data={"input": dumped, "dryRun": dry_run}, created_at=now)
    store.put_job(job)
    qcache = cache if cache is not None else query_cache_of(store_or_engine)
    changes = ChangedScopes()
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(desc=f"{type}{' (dry run)' if dry_run else ''}", unit="row")
    try:
        report = execute_job(store, type, model, dry_run=dry_run, progress=_ticker(bar), changes=changes,
                             embedder=getattr(store_or_engine, "embedder", None))
        told = invalidate_changes(qcache, changes)
        job = job.model_copy(update={"status": "completed", "completed_at": now_ms(),
                                     "data": {**report, "input": dumped, "dryRun": dry_run, "invalidatedScopes": told}})
    except Exception as exc:  # noqa: BLE001 - every failure is recorded, as in the reference
        invalidate_changes(qcache, changes)  # rows changed before the failure must not be served stale
        job = job.model_copy(update={"status": "failed", "completed_at": now_ms(),
                                     "error": redact(f"{exc.__class__.__name__}: {exc}")})
    finally:
        if bar is not None:
            bar.close()
    store.put_job(job)
    return job
