"""The jobs as callable tools: one typed callable per job (plus validate/promote/skills),
each with a pydantic args model, for agent frameworks (LangChain, LlamaIndex) to wrap."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from . import core
from ._store import job_store
from .runner import JOBS, run_job

__all__ = ["JobTool", "job_tools"]


@dataclass(frozen=True)
class JobTool:
    """A tool: call ``func(**kwargs)`` (or ``await afunc(**kwargs)``); kwargs follow ``args_schema``."""

    name: str
    description: str
    args_schema: type[BaseModel]
    func: Callable[..., dict[str, Any]]
    afunc: Callable[..., Awaitable[dict[str, Any]]]

    def json_schema(self) -> dict[str, Any]:
        """The JSON schema of the arguments."""
        return self.args_schema.model_json_schema()



def _with_dry_run(model: type[BaseModel]) -> type[BaseModel]:
    from pydantic import Field, create_model

    return create_model(  # type: ignore[call-overload,no-any-return]
        f"{model.__name__}Tool", __base__=model,
        dry_run=(bool, Field(default=False, description="report what would change without writing")),
    )


def _make(name: str, description: str, schema: type[BaseModel], call: Callable[[BaseModel], dict[str, Any]]) -> JobTool:
    def func(**kwargs: Any) -> dict[str, Any]:
        return call(schema.model_validate(kwargs))

    async def afunc(**kwargs: Any) -> dict[str, Any]:
        return await asyncio.to_thread(func, **kwargs)

    func.__name__ = afunc.__name__ = name
    func.__doc__ = afunc.__doc__ = description
    return JobTool(name=name, description=description, args_schema=schema, func=func, afunc=afunc)


_DESCRIPTIONS = {
    "consolidate": "Mark older duplicate memories of the same agent and user as superseded (history kept).",
    "patterns_extract": "Find repeated tool-call sequences in recent transcripts and store them as patterns.",
    "archive_create": "Compress an agent's memories of a date range into an archive (rows are kept).",
    "decay_update": "Recompute the decay score of active memories from their age and a half-life.",
    "cleanup": "Delete stale, low-decay, unpinned memories, stale sessions and transcripts older than N days.",
}


def job_tools(engine_or_store: Any) -> list[JobTool]:
    """Tools for the five jobs, archive restore, pattern validation/promotion and skill listing."""
    store = job_store(engine_or_store)
    tools: list[JobTool] = []
    for job_type, (model, _) in JOBS.items():
        schema = _with_dry_run(model)

        def call(args: BaseModel, job_type: str = job_type, model: type[BaseModel] = model) -> dict[str, Any]:
            data = args.model_dump()
            dry = data.pop("dry_run", False)
            return run_job(store, job_type, model.model_validate(data), dry_run=dry).to_doc()

        tools.append(_make(f"memory_{job_type}", _DESCRIPTIONS[job_type], schema, call))
    restore_schema = _with_dry_run(core.ArchiveRestoreParams)
    tools.append(_make(
        "memory_archive_restore", "Restore the rows of an archive (rows that still exist are skipped).", restore_schema,
        lambda a: core.archive_restore(store, core.ArchiveRestoreParams(archive_id=a.archive_id),  # type: ignore[attr-defined]
                                       dry_run=a.dry_run)))  # type: ignore[attr-defined]
    tools.append(_make(
        "memory_validate_pattern", "Check whether a pattern qualifies for promotion to a skill.",
        core.ValidatePatternParams, lambda a: core.validate_pattern(store, a.pattern_id)))  # type: ignore[attr-defined]
    tools.append(_make(
        "memory_promote_pattern", "Validate a pattern and promote it into a learned skill.",
        core.PromotePatternParams,
        lambda a: core.promote_pattern(store, a.pattern_id, a.skill_name)))  # type: ignore[attr-defined]
    tools.append(_make(
        "memory_list_skills", "List learned skills, best first.", core.ListSkillsParams,
        lambda a: {"skills": [s.to_doc() for s in core.list_skills(
            store, a.agent_wallet, a.category, a.limit)]}))  # type: ignore[attr-defined]
    return tools
