"""Maintenance jobs: consolidate, patterns_extract, archive_create (+ restore, + IPFS pin
through Pinata), decay_update, cleanup and expire (time to live and forgetting what nobody recalls),
reembed (vectors for the rows the configured model has not embedded); pattern → skill promotion; the jobs and item
operations (the tools are the catalog in :mod:`manowar_memory.tools`); Temporal workflows.

>>> from manowar_memory.jobs import run_job
>>> job = run_job(engine, "decay_update", {"half_life_days": 30})   # doctest: +SKIP
>>> job.status, job.data["updated"]                                  # doctest: +SKIP
"""

from __future__ import annotations

from ._store import ChangedScopes, JobStore, job_store
from .archives import ArchiveCreateParams, ArchiveRestoreParams, archive_create, archive_restore, decode_archive
from .base import Owner, TimeRange
from .batched import BATCHED_JOB_TYPES, DEFAULT_BATCH_SIZE, JOB_MARKER_KEY, finish_batched_report, run_job_batch
from .core import (
    CleanupParams,
    ConsolidateParams,
    DecayUpdateParams,
    ExpireParams,
    PatternsExtractParams,
    cleanup,
    consolidate,
    decay_update,
    expire,
    fingerprint,
    patterns_extract,
)
from .pinning import (
    ArchivePinParams,
    PinataClient,
    PinataCredentials,
    PinResult,
    archive_pin,
    archive_pin_payload,
    pin_archive,
)
from .reembed import DEFAULT_REEMBED_BATCH, ReembedParams, count_reembed, reembed
from .runner import (
    EMBEDDING_JOB_TYPES,
    JOB_TYPES,
    JOBS,
    execute_job,
    invalidate_changes,
    parse_params,
    query_cache_of,
    run_job,
)
from .schedules import (
    InlineSchedules,
    InvalidCronError,
    MaintenanceSchedule,
    ScheduleBackend,
    ScheduleInfo,
    ScheduleNotFoundError,
    ScheduleSettings,
    discover_agent_wallets,
    ensure_default_schedules,
    install_schedules,
    remove_schedules,
    schedule_table,
)
from .skills import (
    ListSkillsParams,
    PromotePatternParams,
    ValidatePatternParams,
    get_skill,
    list_skills,
    promote_pattern,
    validate_pattern,
)

__all__ = [
    "JOBS",
    "JOB_TYPES",
    "ArchiveCreateParams",
    "ArchivePinParams",
    "ArchiveRestoreParams",
    "ChangedScopes",
    "CleanupParams",
    "ConsolidateParams",
    "DecayUpdateParams",
    "ExpireParams",
    "JobStore",
    "ListSkillsParams",
    "Owner",
    "PatternsExtractParams",
    "PinResult",
    "PinataClient",
    "PinataCredentials",
    "PromotePatternParams",
    "TimeRange",
    "ValidatePatternParams",
    "archive_create",
    "archive_pin",
    "archive_pin_payload",
    "archive_restore",
    "cleanup",
    "consolidate",
    "decay_update",
    "decode_archive",
    "execute_job",
    "expire",
    "fingerprint",
    "get_skill",
    "invalidate_changes",
    "job_store",
    "list_skills",
    "parse_params",
    "patterns_extract",
    "pin_archive",
    "promote_pattern",
    "query_cache_of",
    "run_job",
    "validate_pattern",
]
# vectors for the rows the configured model has not embedded (needs the engine's embedder)
__all__ += ["DEFAULT_REEMBED_BATCH", "EMBEDDING_JOB_TYPES", "ReembedParams", "count_reembed", "reembed"]
# bounded, resumable batches (the Temporal workflows run consolidate and decay_update this way)
__all__ += ["BATCHED_JOB_TYPES", "DEFAULT_BATCH_SIZE", "JOB_MARKER_KEY", "finish_batched_report", "run_job_batch"]
# maintenance schedules (the Temporal backend is manowar_memory.jobs.temporal_schedules)
__all__ += [
    "InlineSchedules", "InvalidCronError", "MaintenanceSchedule", "ScheduleBackend", "ScheduleInfo",
    "ScheduleNotFoundError", "ScheduleSettings", "discover_agent_wallets", "ensure_default_schedules",
    "install_schedules", "remove_schedules", "schedule_table",
]
