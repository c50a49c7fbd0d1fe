"""Memory operations as LlamaIndex ``FunctionTool``s for agents.

>>> tools = ManowarToolSpec(engine=engine, scope=scope).to_tool_list()
>>> agent = FunctionAgent(tools=tools, llm=llm)

Every tool is bound to the spec's scope: the model chooses what to remember or recall,
never whose memory it touches. Tools return JSON text. They come in groups, so an agent
can get only what it should have (``to_tool_list(groups=["memory"])``, or
``read_only=True`` to leave out the tools that write):

* ``memory``: ``manowar_remember`` (store a durable fact), ``manowar_recall`` (the packed
  context for a question, with the items it holds)
* ``items``: ``manowar_get_item``, ``manowar_list_items``, ``manowar_update_item``,
  ``manowar_delete_item``
* ``jobs``: empty for now. The engine has no maintenance jobs yet (consolidate,
  patterns_extract, archive_create, decay_update, cleanup); when it does, each becomes a
  method here plus one :class:`ToolDef` in :data:`TOOL_DEFS` under the ``jobs`` group, and
  nothing else changes.

This module deliberately has no ``from __future__ import annotations``: LlamaIndex reads
the tool schemas from the live annotations.
"""

import asyncio
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any

from llama_index.core.tools import FunctionTool
from llama_index.core.tools.tool_spec.base import BaseToolSpec

from manowar_memory.engine import MemoryEngine
from manowar_memory.errors import InvalidInputError
from manowar_memory.records import MemoryRecord
from manowar_memory.scope import Scope, ScopeLike

from ._convert import INTERNAL_ROW_KEYS

__all__ = ["TOOL_DEFS", "TOOL_GROUPS", "ManowarToolSpec", "ToolDef", "make_job_tools", "make_tools"]


@dataclass(frozen=True)
class ToolDef:
    """One tool: the spec's sync and async method names, its group and whether it writes."""

    name: str
    method: str
    amethod: str
    group: str
    writes: bool
    description: str


TOOL_GROUPS: tuple[str, ...] = ("memory", "items", "jobs")
"""Tool groups; ``jobs`` is reserved for the engine's maintenance jobs (none yet)."""

TOOL_DEFS: tuple[ToolDef, ...] = (
    ToolDef("manowar_remember", "remember", "aremember", "memory", True,
            "Store a durable fact about the user or the task in long-term memory (deduplicated). "
            "Use for preferences, identity, relationships, ongoing context."),
    ToolDef("manowar_recall", "recall", "arecall", "memory", False,
            "Recall what long-term memory holds about a question: a short packed context and its items."),
    ToolDef("manowar_get_item", "get_item", "aget_item", "items", False,
            "Read one memory item by id."),
    ToolDef("manowar_list_items", "list_items", "alist_items", "items", False,
            "List the newest memory items, optionally of one source (fact, session, knowledge, pattern, archive)."),
    ToolDef("manowar_update_item", "update_item", "aupdate_item", "items", True,
            "Correct a memory item: new content (re-embedded), merged metadata, confidence, or status "
            "(active, superseded, archived)."),
    ToolDef("manowar_delete_item", "delete_item", "adelete_item", "items", True,
            "Delete a memory item by id (soft by default; hard=true removes it for good)."),
    # jobs group: added here when the engine exposes maintenance jobs
)
"""Every tool the spec offers, in order."""


def _item(record: MemoryRecord) -> dict[str, Any]:
    return {
        "id": record.id,
        "content": record.content,
        "source": record.source,
        "status": record.status,
        "created_at": record.created_at,
        "updated_at": record.updated_at,
        "metadata": {k: v for k, v in record.metadata.items() if k not in INTERNAL_ROW_KEYS},
    }


def _json(data: Any) -> str:
    return json.dumps(data, ensure_ascii=False, default=str)


class ManowarToolSpec(BaseToolSpec):
    """The engine's memory operations for one scope, as a LlamaIndex tool spec."""

    spec_functions = [(d.method, d.amethod) for d in TOOL_DEFS]

    def __init__(self, *, engine: MemoryEngine, scope: ScopeLike, recall_budget_chars: int | None = None) -> None:
        if not isinstance(engine, MemoryEngine):
            raise InvalidInputError(f"engine must be a MemoryEngine, got {type(engine).__name__}")
        self.engine = engine
        self.scope = Scope.coerce(scope)
        self.recall_budget_chars = recall_budget_chars

    # ------------------------------------------------------------ memory
    def remember(
        self,
        content: Annotated[str, "The fact, as one self-contained sentence."],
        fact_type: Annotated[
            str | None, "preference, identity, context, skill, relationship or event (default context)."
        ] = None,
        importance: Annotated[float | None, "0 to 1; how much this fact matters."] = None,
    ) -> str:
        """Store a durable fact."""
        result = self.engine.remember(self.scope, content, fact_type=fact_type, importance=importance)
        return _json({"id": result.id, "fact_type": result.fact_type, "deduplicated": result.deduplicated})

    async def aremember(
        self,
        content: Annotated[str, "The fact, as one self-contained sentence."],
        fact_type: Annotated[
            str | None, "preference, identity, context, skill, relationship or event (default context)."
        ] = None,
        importance: Annotated[float | None, "0 to 1; how much this fact matters."] = None,
    ) -> str:
        """Store a durable fact."""
        result = await self.engine.aremember(self.scope, content, fact_type=fact_type, importance=importance)
        return _json({"id": result.id, "fact_type": result.fact_type, "deduplicated": result.deduplicated})

    def _recall_json(self, result: Any) -> str:
        return _json({
            "context": result.prompt,
            "items": [{"id": i.id, "layer": i.layer, "text": i.text, "score": i.score} for i in result.items],
            "degradations": result.degradations,
        })

    def recall(self, query: Annotated[str, "What to look up, as a question or keywords."]) -> str:
        """Recall what memory holds about a question."""
        return self._recall_json(self.engine.pre_turn(query, self.scope, budget_chars=self.recall_budget_chars))

    async def arecall(self, query: Annotated[str, "What to look up, as a question or keywords."]) -> str:
        """Recall what memory holds about a question."""
        return self._recall_json(await self.engine.apre_turn(query, self.scope, budget_chars=self.recall_budget_chars))

    # ------------------------------------------------------------ items
    def get_item(self, memory_id: Annotated[str, "The memory item's id."]) -> str:
        """Read one memory item."""
        return _json(_item(self.engine.get_item(self.scope, memory_id)))

    async def aget_item(self, memory_id: Annotated[str, "The memory item's id."]) -> str:
        """Read one memory item."""
        return _json(_item(await self.engine.aget_item(self.scope, memory_id)))

    def list_items(
        self,
        source: Annotated[str | None, "Only this source: fact, session, knowledge, pattern or archive."] = None,
        limit: Annotated[int, "How many items, newest first (1 to 100)."] = 20,
    ) -> str:
        """List the newest memory items."""
        rows = self.engine.list_items(self.scope, sources=[source] if source else None, limit=max(1, min(100, limit)))
        return _json([_item(r) for r in rows])

    async def alist_items(
        self,
        source: Annotated[str | None, "Only this source: fact, session, knowledge, pattern or archive."] = None,
        limit: Annotated[int, "How many items, newest first (1 to 100)."] = 20,
    ) -> str:
        """List the newest memory items."""
        return await asyncio.to_thread(self.list_items, source, limit)

    def update_item(
        self,
        memory_id: Annotated[str, "The memory item's id."],
        content: Annotated[str | None, "New content (re-embedded)."] = None,
        metadata: Annotated[dict[str, Any] | None, "Metadata to merge into the item's."] = None,
        confidence: Annotated[float | None, "0 to 1."] = None,
        status: Annotated[str | None, "active, superseded or archived."] = None,
    ) -> str:
        """Correct a memory item."""
        record = self.engine.update_item(
            self.scope, memory_id, content=content, metadata=metadata, confidence=confidence, status=status,
        )
        return _json(_item(record))

    async def aupdate_item(
        self,
        memory_id: Annotated[str, "The memory item's id."],
        content: Annotated[str | None, "New content (re-embedded)."] = None,
        metadata: Annotated[dict[str, Any] | None, "Metadata to merge into the item's."] = None,
        confidence: Annotated[float | None, "0 to 1."] = None,
        status: Annotated[str | None, "active, superseded or archived."] = None,
    ) -> str:
        """Correct a memory item."""
        record = await self.engine.aupdate_item(
            self.scope, memory_id, content=content, metadata=metadata, confidence=confidence, status=status,
        )
        return _json(_item(record))

    def delete_item(
        self,
        memory_id: Annotated[str, "The memory item's id."],
        hard: Annotated[bool, "True removes it for good; False (default) marks it deleted."] = False,
    ) -> str:
        """Delete a memory item."""
        return _json({"id": memory_id, "deleted": self.engine.delete_item(self.scope, memory_id, hard=hard), "hard": hard})

    async def adelete_item(
        self,
        memory_id: Annotated[str, "The memory item's id."],
        hard: Annotated[bool, "True removes it for good; False (default) marks it deleted."] = False,
    ) -> str:
        """Delete a memory item."""
        deleted = await self.engine.adelete_item(self.scope, memory_id, hard=hard)
        return _json({"id": memory_id, "deleted": deleted, "hard": hard})

    # ------------------------------------------------------------ tools
    def tool_defs(self, *, groups: Sequence[str] | None = None, read_only: bool = False) -> list[ToolDef]:
        """The tool definitions selected by ``groups`` (default: all) and ``read_only``."""
        wanted = list(groups) if groups is not None else list(TOOL_GROUPS)
        unknown = [g for g in wanted if g not in TOOL_GROUPS]
        if unknown:
            raise InvalidInputError(f"unknown tool group(s) {unknown}; choose from {list(TOOL_GROUPS)}")
        return [d for d in TOOL_DEFS if d.group in wanted and not (read_only and d.writes)]

    def to_tool_list(
        self,
        spec_functions: list[Any] | None = None,
        func_to_metadata_mapping: dict[str, Any] | None = None,
        *,
        groups: Sequence[str] | None = None,
        read_only: bool = False,
    ) -> list[FunctionTool]:
        """``FunctionTool``s named ``manowar_*``, each with a sync and an async function.

        ``groups`` and ``read_only`` select tools; ``spec_functions`` (method names) and
        ``func_to_metadata_mapping`` behave as in ``BaseToolSpec``.
        """
        if spec_functions is not None or func_to_metadata_mapping is not None:
            return super().to_tool_list(spec_functions, func_to_metadata_mapping)
        tools = []
        for d in self.tool_defs(groups=groups, read_only=read_only):
            sync: Callable[..., Any] = getattr(self, d.method)
            asynchronous: Callable[..., Any] = getattr(self, d.amethod)
            tools.append(FunctionTool.from_defaults(fn=sync, async_fn=asynchronous, name=d.name, description=d.description))
        return tools


def make_tools(
    *, engine: MemoryEngine, scope: ScopeLike, groups: Sequence[str] | None = None, read_only: bool = False,
    recall_budget_chars: int | None = None,
) -> list[FunctionTool]:
    """``ManowarToolSpec(engine=, scope=).to_tool_list(groups=, read_only=)`` in one call."""
    spec = ManowarToolSpec(engine=engine, scope=scope, recall_budget_chars=recall_budget_chars)
    return spec.to_tool_list(groups=groups, read_only=read_only)


def make_job_tools(*, engine: MemoryEngine, names: Sequence[str] | None = None) -> list[FunctionTool]:
    """The engine's maintenance jobs (consolidate, patterns_extract, archive_create,
    archive_restore, decay_update, cleanup, validate/promote pattern, list skills) as
    FunctionTools with their JSON-schema arguments; ``names`` picks a subset.

    These act on stored data across the agent(s) named in their arguments, so give them only
    to agents trusted with maintenance.
    """
    from manowar_memory.jobs import job_tools

    tools = []
    for jt in job_tools(engine):
        if names is not None and jt.name not in names:
            continue
        tools.append(FunctionTool.from_defaults(
            fn=jt.func, async_fn=jt.afunc, name=jt.name, description=jt.description, fn_schema=jt.args_schema,
        ))
    return tools
