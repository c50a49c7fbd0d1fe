"""Memory tools for agents: LangChain ``StructuredTool``\\ s (sync and async) generated from the
engine's one tool catalog (:mod:`manowar_memory.tools`), bound to a scope.

:func:`create_manowar_tools` and :class:`ManowarToolkit` turn each catalog tool
(``memory_remember``, ``memory_search``, ``memory_context``, ``memory_list``, ``memory_get``,
``memory_update``, ``memory_delete``, ``memory_resolve_conflict``, and with the ``jobs``
group the maintenance tools) into a ``StructuredTool`` with the catalog's name, description
and argument schema. No argument names an agent, user, mode, HAI or thread: the
application binds the scope (and the trust level of what the tools write) when it builds
them, and the model cannot change it.

One set of tools can serve every user of an app: built with an agent-level scope (no
user) and ``per_call_user=True``, each call acts for the run's user, read from the
graph's ``runtime.context`` (``user_id``) or else from ``config["configurable"]["user_id"]``
(never from the model's arguments); a call whose run names no user fails with the
structured error. Tools bound to a user refuse a run that names another user.

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

from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, BaseToolkit, StructuredTool, ToolException
from pydantic import BeforeValidator, ConfigDict, InstanceOf

from manowar_memory import BoundTool, MemoryEngine, Scope, ScopeError, memory_tools
from manowar_memory.errors import ManowarError, ToolCallError
from manowar_memory.scope import ScopeLike
from manowar_memory.scoped import TrustLevel
from manowar_memory.tools import TOOL_GROUPS, catalog, tool_error_payload

from ._convert import coerce_scope, identity

__all__ = ["TOOL_NAMES", "ManowarToolkit", "create_manowar_tools", "langchain_tool"]

#: Every tool name of the catalog, in catalog order (memory, items, jobs).
TOOL_NAMES: tuple[str, ...] = tuple(d.name for d in catalog(TOOL_GROUPS))


def _text(result: Any) -> str:
    return json.dumps(result, ensure_ascii=False, default=str)


def _run_user(config: RunnableConfig | None) -> str | None:
    """The user of the run a tool is called in: ``runtime.context`` first, then ``configurable``."""
    try:
        from langgraph.runtime import get_runtime

        context = getattr(get_runtime(), "context", None)
    except (ImportError, RuntimeError):  # not inside a graph run
        context = None
    return identity(context, (config or {}).get("configurable"))[0]


def _for_call(bound: BoundTool, config: RunnableConfig | None, per_call_user: bool) -> BoundTool:
    try:
        memory = bound.memory.for_user(_run_user(config), per_call_user=per_call_user, from_run=True)
    except ManowarError as exc:
        raise ToolException(_text(tool_error_payload(bound.name, exc))) from exc
    return bound if memory is bound.memory else BoundTool(bound.definition, memory)


def langchain_tool(bound: BoundTool, *, name_prefix: str = "", per_call_user: bool = False) -> StructuredTool:
    """One catalog tool bound to a scope as a ``StructuredTool`` (sync and async); with
    ``per_call_user`` each call acts for its run's user (see the module docstring)."""

    def run(config: RunnableConfig, **arguments: Any) -> tuple[str, dict[str, Any]]:
        try:
            result = _for_call(bound, config, per_call_user).call(**arguments)
        except ToolCallError as err:
            raise ToolException(err.to_json()) from err
        return _text(result), result

    async def arun(config: RunnableConfig, **arguments: Any) -> tuple[str, dict[str, Any]]:
        try:
            result = await _for_call(bound, config, per_call_user).acall(**arguments)
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
    per_call_user: bool = False,
) -> list[BaseTool]:
    """The catalog's tools bound to ``engine.scoped(scope, trust=trust)``.

    ``groups``: ``"memory"``, ``"items"``, ``"jobs"`` (default memory and items); ``include``
    picks tools by name instead (any group; unknown names raise). ``trust`` is the trust
    level of what the tools write, set by the application (never by the model).
    ``name_prefix`` prefixes every tool name. ``per_call_user=True`` (agent-level scopes only)
    makes each call act for its run's user (see the module docstring)."""
    memory = engine.scoped(coerce_scope(scope), trust=trust)
    if per_call_user and memory.scope.user_address is not None:
        raise ScopeError(f"per_call_user=True needs an agent-level scope (no user); these tools are bound to user "
                         f"{memory.scope.user_address!r}")
    bound = memory_tools(memory, groups=groups, include=list(include) if include is not None else None)
    return [langchain_tool(b, name_prefix=name_prefix, per_call_user=per_call_user) for b in bound]


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
    per_call_user: bool = False
    """Each call acts for its run's user (agent-level scopes only; see the module docstring)."""

    def get_tools(self) -> list[BaseTool]:
        """The tools, bound to this toolkit's engine and scope."""
        groups = ["memory", "items", *(["jobs"] if self.jobs else [])]
        return create_manowar_tools(self.engine, self.scope, groups=groups, include=self.include, trust=self.trust,
                                    name_prefix=self.name_prefix, per_call_user=self.per_call_user)
