"""Maintenance jobs: consolidate, patterns_extract, archive_create (+ restore), decay_update
and cleanup; pattern → skill promotion; the jobs as tools; Temporal workflows.

>>> from manowar_memory.jobs import run_job
>>> job = run_job(engine, "decay_update", {"half_life_days": 30})   # doctest: +SKIP
>>> job.status, job.data["updated"]                                  # doctest: +SKIP
"""

from __future__ import annotations

from ._store import JobStore, StoreAdapter, job_store
from .core import (
    ArchiveCreateParams,
    ArchiveRestoreParams,
    CleanupParams,
    ConsolidateParams,
    DecayUpdateParams,
    ListSkillsParams,
    PatternsExtractParams,
    PromotePatternParams,
    TimeRange,
    ValidatePatternParams,
    archive_create,
    archive_restore,
    cleanup,
    consolidate,
    decay_update,
    decode_archive,
    fingerprint,
    get_skill,
    list_skills,
    patterns_extract,
    promote_pattern,
    validate_pattern,
)
from .runner import JOB_TYPES, JOBS, execute_job, parse_params, run_job
from .tools import JobTool, job_tools

__all__ = [
    "ArchiveCreateParams", "ArchiveRestoreParams", "CleanupParams", "ConsolidateParams", "DecayUpdateParams",
    "JOBS", "JOB_TYPES", "JobStore", "JobTool", "ListSkillsParams", "PatternsExtractParams", "PromotePatternParams",
    "StoreAdapter", "TimeRange", "ValidatePatternParams", "archive_create", "archive_restore", "cleanup",
    "consolidate", "decay_update", "decode_archive", "execute_job", "fingerprint", "get_skill", "job_store",
    "job_tools", "list_skills", "parse_params", "patterns_extract", "promote_pattern", "run_job",
    "validate_pattern",
]
