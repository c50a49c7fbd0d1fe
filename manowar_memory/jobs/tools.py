"""The jobs as callable tools: one typed callable per job (plus archive restore/pin,
validate/promote, skills) and per item operation (get, update, delete, resolve conflict),
each with a pydantic args model (``json_schema()``), for agent frameworks (LangChain,
LlamaIndex) to wrap."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..errors import InvalidInputError
from ..scope import Scope
from . import core
from ._store import ChangedScopes, job_store
from .pinning import ArchivePinParams, archive_pin
from .runner import JOBS, invalidate_changes, query_cache_of, run_job

__all__ = [
    "DeleteItemArgs", "GetItemArgs", "GetSkillArgs", "ItemScopeArgs", "JobTool", "ResolveConflictArgs",
    "UpdateItemArgs", "job_tools",
]


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
        try:
            args = schema.model_validate(kwargs)
        except ValidationError as exc:
            raise InvalidInputError(f"invalid arguments for tool {name!r}: {exc}") from exc
        return call(args)

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


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


class GetSkillArgs(_Args):
    """Arguments of ``memory_get_skill``."""

    skill_id: str = Field(description="the skill to read")


class ItemScopeArgs(_Args):
    """The scope an item operation acts in (the row must be visible in it)."""

    agent_wallet: str = Field(description="the agent the memory belongs to")
    user_address: str | None = Field(default=None, description="the user; without one only user-less rows are seen")
    mode: Literal["global", "local"] | None = Field(default=None, description="memory mode (local needs hai_id)")
    hai_id: str | None = Field(default=None, description="the HAI id, with mode local")

    def scope(self) -> Scope:
        return Scope(agent_wallet=self.agent_wallet, user_address=self.user_address, mode=self.mode,
                     hai_id=self.hai_id)


class GetItemArgs(ItemScopeArgs):
    """Arguments of ``memory_get_item``."""

    memory_id: str = Field(description="the memory row id (vectorId)")


class UpdateItemArgs(ItemScopeArgs):
    """Arguments of ``memory_update_item``."""

    memory_id: str = Field(description="the memory row id (vectorId)")
    content: str | None = Field(default=None, description="new text; it is embedded again")
    metadata: dict[str, Any] | None = Field(default=None, description="merged into the row's metadata")
    confidence: float | None = Field(default=None, ge=0, le=1, description="0..1")
    status: Literal["active", "superseded", "archived"] | None = Field(default=None, description="new status")


class DeleteItemArgs(ItemScopeArgs):
    """Arguments of ``memory_delete_item``."""

    memory_id: str = Field(description="the memory row id (vectorId)")
    hard: bool = Field(default=False, description="remove the row instead of marking it deleted")


class ResolveConflictArgs(ItemScopeArgs):
    """Arguments of ``memory_resolve_conflict``."""

    memory_id: str = Field(description="the row the conflict is about")
    resolution: Literal["supersede", "keep", "merge", "ignore"] = Field(
        description="supersede takes the row out of retrieval; the others keep it active")
    winning_memory_id: str | None = Field(default=None, description="the row that wins (another active row)")
    reason: str | None = Field(default=None, description="why, kept in the row's metadata")


def _item_doc(record: Any) -> dict[str, Any]:
    doc = record.to_doc()
    doc.pop("embedding", None)
    return doc


def _item_tools(engine: Any) -> list[JobTool]:
    def get_item(a: GetItemArgs) -> dict[str, Any]:
        return {"item": _item_doc(engine.get_item(a.scope(), a.memory_id))}

    def update_item(a: UpdateItemArgs) -> dict[str, Any]:
        rec = engine.update_item(a.scope(), a.memory_id, content=a.content, metadata=a.metadata,
                                 confidence=a.confidence, status=a.status)
        return {"updated": True, "item": _item_doc(rec)}

    def delete_item(a: DeleteItemArgs) -> dict[str, Any]:
        return {"deleted": engine.delete_item(a.scope(), a.memory_id, hard=a.hard), "hardDeleted": a.hard,
                "memoryId": a.memory_id}

    def resolve(a: ResolveConflictArgs) -> dict[str, Any]:
        rec = engine.resolve_conflict(a.scope(), a.memory_id, a.resolution, winning_memory_id=a.winning_memory_id,
                                      reason=a.reason)
        return {"resolved": True, "memoryId": a.memory_id, "status": rec.status, "item": _item_doc(rec)}

    return [
        _make("memory_get_item", "Read one active memory row by id.", GetItemArgs, get_item),  # type: ignore[arg-type]
        _make("memory_update_item", "Change a memory row's text (re-embedded), metadata, confidence or status.",
              UpdateItemArgs, update_item),  # type: ignore[arg-type]
        _make("memory_delete_item", "Delete a memory row: soft (kept as history, out of retrieval) or hard.",
              DeleteItemArgs, delete_item),  # type: ignore[arg-type]
        _make("memory_resolve_conflict", "Record how a conflict about a memory row was resolved (optionally supersede it).",
              ResolveConflictArgs, resolve),  # type: ignore[arg-type]
    ]


def job_tools(engine_or_store: Any) -> list[JobTool]:
    """Tools for the five jobs, archive restore and pin, pattern validation/promotion, skills,
    and (given a ``MemoryEngine``) the item operations get, update, delete and resolve conflict.

    Item tools need an engine (an update re-embeds with its embedder); a bare store gets only
    the job tools. With an engine, every tool that changes rows invalidates the cached queries
    of exactly the scopes it changed.
    """
    store = job_store(engine_or_store)

    def _cache() -> Any:
        return query_cache_of(engine_or_store)

    def _tracked(fn: Callable[[ChangedScopes], dict[str, Any]]) -> dict[str, Any]:
        changes = ChangedScopes()
        try:
            return fn(changes)
        finally:
            invalidate_changes(_cache(), changes)

    tools: list[JobTool] = []
    for job_type, (model, _) in JOBS.items():
        schema = _with_dry_run(model)

        def call(args: BaseModel, job_type: str = job_type, model: type[BaseModel] = model) -> dict[str, Any]:
            data = args.model_dump()
            dry = data.pop("dry_run", False)
            return run_job(store, job_type, model.model_validate(data), dry_run=dry, cache=_cache()).to_doc()

        tools.append(_make(f"memory_{job_type}", _DESCRIPTIONS[job_type], schema, call))
    restore_schema = _with_dry_run(core.ArchiveRestoreParams)
    tools.append(_make(
        "memory_archive_restore", "Restore the rows of an archive (rows that still exist are skipped).", restore_schema,
        lambda a: _tracked(lambda ch: core.archive_restore(
            store, core.ArchiveRestoreParams(archive_id=a.archive_id), dry_run=a.dry_run,  # type: ignore[attr-defined]
            changes=ch))))
    pin_schema = _with_dry_run(ArchivePinParams)
    tools.append(_make(
        "memory_archive_pin", "Pin a stored archive to IPFS through Pinata and record its CID (idempotent).",
        pin_schema,
        lambda a: _tracked(lambda ch: archive_pin(
            store, ArchivePinParams(archive_id=a.archive_id), dry_run=a.dry_run, changes=ch))))  # type: ignore[attr-defined]
    tools.append(_make(
        "memory_validate_pattern", "Check whether a pattern qualifies for promotion to a skill.",
        core.ValidatePatternParams, lambda a: core.validate_pattern(store, a.pattern_id)))  # type: ignore[attr-defined]
    tools.append(_make(
        "memory_promote_pattern", "Validate a pattern and promote it into a learned skill.",
        core.PromotePatternParams,
        lambda a: _tracked(lambda ch: core.promote_pattern(
            store, a.pattern_id, a.skill_name, changes=ch))))  # type: ignore[attr-defined]
    tools.append(_make(
        "memory_list_skills", "List learned skills, best first.", core.ListSkillsParams,
        lambda a: {"skills": [s.to_doc() for s in core.list_skills(
            store, a.agent_wallet, a.category, a.limit)]}))  # type: ignore[attr-defined]

    def get_skill(a: GetSkillArgs) -> dict[str, Any]:
        skill = core.get_skill(store, a.skill_id)
        return {"skill": skill.to_doc() if skill is not None else None}

    tools.append(_make("memory_get_skill", "Read one learned skill by id.", GetSkillArgs, get_skill))  # type: ignore[arg-type]
    if callable(getattr(engine_or_store, "resolve_conflict", None)):
        tools.extend(_item_tools(engine_or_store))
    return tools
