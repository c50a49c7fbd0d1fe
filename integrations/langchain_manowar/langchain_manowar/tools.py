"""Memory tools for agents: LangChain ``StructuredTool``\\ s (sync and async) generated from the
engine's one tool catalog (:mod:`manowar_memory.tools`), bound to a scope.

:func:`create_manowar_tools` and :class:`ManowarToolkit` turn each catalog tool
(``memory_remember``, ``memory_search``, ``memory_context``, ``memory_list``, ``memory_get``,
``memory_update``, ``memory_delete``, ``memory_resolve_conflict``, and with the ``jobs``
group the maintenance tools) into a ``StructuredTool`` with the catalog's name, description
and argument schema. No argument names an agent, user, mode, HAI or thread: the
application binds the scope (and the trust level of what the tools write) when it builds
them, and the model cannot change it.

Results are JSON text (the tool message's content) with the same dict as the tool's
``artifact`` (``response_format="content_and_artifact"``, as LangChain's retriever tool
does), so an application reads the structured result without parsing. A failed call raises
``ToolException`` whose text is the structured error every framework returns
(``{"error": {"type", "message", "tool"}}``); with ``handle_tool_error=True`` the model
receives it as an error ``ToolMessage``. Invalid arguments come back the same way.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Annotated, Any

from langchain_core.tools import BaseTool, BaseToolkit, StructuredTool, ToolException
from pydantic import BeforeValidator, ConfigDict, InstanceOf

from manowar_memory import BoundTool, MemoryEngine, Scope, memory_tools
from manowar_memory.errors import ToolCallError
from manowar_memory.scope import ScopeLike
from manowar_memory.scoped import TrustLevel
from manowar_memory.tools import TOOL_GROUPS, catalog, tool_error_payload

from ._convert import coerce_scope

__all__ = ["TOOL_NAMES", "ManowarToolkit", "create_manowar_tools", "langchain_tool"]

#: Every tool name of the catalog, in catalog order (memory, items, jobs).
TOOL_NAMES: tuple[str, ...] = tuple(d.name for d in catalog(TOOL_GROUPS))


def _text(result: Any) -> str:
    return json.dumps(result, ensure_ascii=False, default=str)


def langchain_tool(bound: BoundTool, *, name_prefix: str = "") -> StructuredTool:
    """One catalog tool bound to a scope as a ``StructuredTool`` (sync and async)."""

    def run(**arguments: Any) -> tuple[str, dict[str, Any]]:
        try:
            result = bound.call(**arguments)
        except ToolCallError as err:
            raise ToolException(err.to_json()) from err
        return _text(result), result

    async def arun(**arguments: Any) -> tuple[str, dict[str, Any]]:
        try:
            result = await bound.acall(**arguments)
        except ToolCallError as err:
            raise ToolException(err.to_json()) from err
        return _text(result), result

    def invalid(exc: Exception) -> str:  # a pydantic (v2 or v1) ValidationError
        return _text(tool_error_payload(bound.name, exc))

    return StructuredTool(
        name=name_prefix + bound.name, description=bound.description, args_schema=bound.args_model,
        func=run, coroutine=arun, handle_tool_error=True, handle_validation_error=invalid,
        response_format="content_and_artifact",
    )


def create_manowar_tools(
    engine: MemoryEngine,
    scope: ScopeLike,
    *,
    groups: Sequence[str] | None = None,
    include: Sequence[str] | None = None,
    trust: TrustLevel | None = None,
    name_prefix: str = "",
) -> list[BaseTool]:
    """The catalog's tools bound to ``engine.scoped(scope, trust=trust)``.

    ``groups``: ``"memory"``, ``"items"``, ``"jobs"`` (default memory and items); ``include``
    picks tools by name instead (any group; unknown names raise). ``trust`` is the trust
    level of what the tools write, set by the application (never by the model).
    ``name_prefix`` prefixes every tool name."""
    memory = engine.scoped(coerce_scope(scope), trust=trust)
    bound = memory_tools(memory, groups=groups, include=list(include) if include is not None else None)
    return [langchain_tool(b, name_prefix=name_prefix) for b in bound]


class ManowarToolkit(BaseToolkit):
    """The memory tools of one scope as a LangChain toolkit.

    The ``memory`` and ``items`` groups of the catalog; ``jobs=True`` adds the maintenance
    tools bound to the scope's agent (consolidate, patterns, archives, decay, skills; never
    the store-wide cleanup). ``include`` picks tools by name instead. ``trust`` is the trust
    level of what the tools write.

    Example::

        tools = ManowarToolkit(engine=engine, scope=scope, jobs=True).get_tools()
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    engine: InstanceOf[MemoryEngine]
    """The memory engine."""
    scope: Annotated[InstanceOf[Scope], BeforeValidator(coerce_scope)]
    """The scope every tool acts in."""
    jobs: bool = False
    """Add the maintenance-job tools (bound to the scope's agent)."""
    include: Sequence[str] | None = None
    """Only these tools (by catalog name)."""
    trust: TrustLevel | None = None
    """Trust level of what the tools write (None: the engine's default)."""
    name_prefix: str = ""
    """Prefix of every tool name."""

    def get_tools(self) -> list[BaseTool]:
        """The tools, bound to this toolkit's engine and scope."""
        groups = ["memory", "items", *(["jobs"] if self.jobs else [])]
        return create_manowar_tools(self.engine, self.scope, groups=groups, include=self.include, trust=self.trust,
                                    name_prefix=self.name_prefix)
