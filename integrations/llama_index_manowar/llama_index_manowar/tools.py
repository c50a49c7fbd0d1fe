"""The memory tool catalog as LlamaIndex ``FunctionTool``\\ s for agents.

>>> tools = ManowarToolSpec(engine=engine, scope=scope).to_tool_list()
>>> agent = FunctionAgent(tools=tools, llm=llm)

Every tool is generated from :func:`manowar_memory.tools.memory_tools`, the one catalog
the LangChain adapter and the MCP server use too: same names, descriptions, argument
schemas (``fn_schema`` is the catalog's pydantic model), results and errors. Each is bound
to the spec's scope when it is built: no argument names an agent, user, mode, HAI or
thread, so the model chooses what to remember or recall, never whose memory it touches.

Groups (``to_tool_list(groups=[...])``): ``memory`` (memory_remember, memory_search,
memory_context), ``items`` (memory_list, memory_get, memory_update, memory_delete,
memory_resolve_conflict) and ``jobs`` (the engine's maintenance jobs on the scope's agent:
memory_consolidate, memory_patterns_extract, memory_archive_create, memory_decay_update,
memory_archive_restore, memory_archive_pin, memory_validate_pattern,
memory_promote_pattern, memory_list_skills, memory_get_skill). The default is memory and
items; ``read_only=True`` leaves out the tools that write.

Results: a tool's ``ToolOutput`` content is the result as JSON text, and ``raw_output``
the result dict. A failure does not raise: it is ``ToolOutput(is_error=True)`` (LlamaIndex's
convention, as its agents build for a tool that raises) whose content is the structured
error, the same JSON as in LangChain (:attr:`manowar_memory.ToolCallError.payload`)::

    {"error": {"type": "NotFoundError", "message": "...", "tool": "memory_get"}}
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from llama_index.core.tools import FunctionTool, ToolMetadata, ToolOutput
from llama_index.core.tools.tool_spec.base import BaseToolSpec

from manowar_memory.engine import MemoryEngine
from manowar_memory.errors import InvalidInputError, ToolCallError
from manowar_memory.scope import Scope, ScopeLike
from manowar_memory.scoped import ScopedMemory
from manowar_memory.tools import TOOL_GROUPS, BoundTool, memory_tools

__all__ = ["TOOL_GROUPS", "ManowarFunctionTool", "ManowarToolSpec", "make_job_tools", "make_tools"]


def _json(data: Any) -> str:
    return json.dumps(data, ensure_ascii=False, default=str)


def _as_json(output: ToolOutput) -> ToolOutput:
    """The output with the result dict as JSON text (FunctionTool would give its Python repr)."""
    return ToolOutput(content=_json(output.raw_output), tool_name=output.tool_name, raw_input=output.raw_input,
                      raw_output=output.raw_output)


class ManowarFunctionTool(FunctionTool):
    """A ``FunctionTool`` over one catalog tool: JSON text content with the result dict as
    ``raw_output``, and a failure as ``ToolOutput(is_error=True)`` carrying the structured
    error (its ``raw_output`` is the payload dict, its ``exception`` the
    :class:`~manowar_memory.ToolCallError`)."""

    def _error(self, exc: ToolCallError, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> ToolOutput:
        return ToolOutput(
            content=exc.to_json(), tool_name=self.metadata.get_name(),
            raw_input={"args": args, "kwargs": dict(kwargs)}, raw_output=exc.payload, is_error=True, exception=exc,
        )

    def call(self, *args: Any, **kwargs: Any) -> ToolOutput:
        """Run the tool; a failure comes back as ``is_error=True`` output, not an exception."""
        try:
            return _as_json(super().call(*args, **kwargs))
        except ToolCallError as exc:
            return self._error(exc, args, kwargs)

    async def acall(self, *args: Any, **kwargs: Any) -> ToolOutput:
        """Async twin of :meth:`call`."""
        try:
            return _as_json(await super().acall(*args, **kwargs))
        except ToolCallError as exc:
            return self._error(exc, args, kwargs)


def _function_tool(bound: BoundTool, metadata: ToolMetadata | None = None) -> ManowarFunctionTool:
    def run(*args: Any, **arguments: Any) -> dict[str, Any]:
        if args:
            raise ToolCallError({"error": {"type": "InvalidInputError", "tool": bound.name,
                                           "message": "pass the arguments by name"}})
        return bound.call(**arguments)

    async def arun(*args: Any, **arguments: Any) -> dict[str, Any]:
        if args:
            raise ToolCallError({"error": {"type": "InvalidInputError", "tool": bound.name,
                                           "message": "pass the arguments by name"}})
        return await bound.acall(**arguments)

    run.__name__ = arun.__name__ = bound.name
    run.__doc__ = arun.__doc__ = bound.description
    meta = metadata or ToolMetadata(name=bound.name, description=bound.description, fn_schema=bound.args_model)
    return ManowarFunctionTool(fn=run, async_fn=arun, metadata=meta)


class ManowarToolSpec(BaseToolSpec):
    """The memory tool catalog bound to one scope, as a LlamaIndex tool spec.

    ``groups`` picks the catalog groups this spec offers (default memory and items;
    ``["memory", "items", "jobs"]`` for all), ``trust`` the trust level of what its tools
    write (the application's choice; default the engine's). :attr:`spec_functions` lists
    the tool names; ``to_tool_list()`` builds them, ``to_tool_list(groups=["jobs"])`` or
    ``to_tool_list(spec_functions=["memory_search"])`` a selection.
    """

    def __init__(
        self, *, engine: MemoryEngine, scope: ScopeLike, groups: Sequence[str] | None = None,
        trust: Literal["system", "learned", "external"] | None = None,
    ) -> None:
        if not isinstance(engine, MemoryEngine):
            raise InvalidInputError(f"engine must be a MemoryEngine, got {type(engine).__name__}")
        self._memory: ScopedMemory = engine.scoped(scope, trust=trust)
        self.groups = list(groups) if groups is not None else None
        self.spec_functions = [t.name for t in memory_tools(self._memory, groups=self.groups)]

    @property
    def scope(self) -> Scope:
        """The scope every tool acts in."""
        return self._memory.scope

    def bound_tools(
        self, *, groups: Sequence[str] | None = None, include: Sequence[str] | None = None, read_only: bool = False,
    ) -> list[BoundTool]:
        """The catalog tools selected by ``groups`` (default: the spec's) or ``include`` (names),
        without the writing ones when ``read_only``."""
        if include is not None:
            tools = memory_tools(self._memory, include=include)
        else:
            tools = memory_tools(self._memory, groups=self.groups if groups is None else groups)
        return [t for t in tools if not (read_only and t.definition.writes)]

    def to_tool_list(
        self,
        spec_functions: Sequence[str | tuple[str, str]] | None = None,
        func_to_metadata_mapping: dict[str, ToolMetadata] | None = None,
        *,
        groups: Sequence[str] | None = None,
        read_only: bool = False,
    ) -> list[FunctionTool]:
        """``FunctionTool``\\ s of the catalog, each with a sync and an async function.

        ``spec_functions`` (tool names; a ``(name, name)`` pair counts as its first name)
        or ``groups`` select tools, ``read_only`` drops the writing ones, and
        ``func_to_metadata_mapping`` replaces a tool's ``ToolMetadata`` as in ``BaseToolSpec``.
        """
        if spec_functions is not None and groups is not None:
            raise InvalidInputError("pass spec_functions or groups, not both")
        include = None
        if spec_functions is not None:
            include = [f[0] if isinstance(f, tuple) else f for f in spec_functions]
        mapping = func_to_metadata_mapping or {}
        return [_function_tool(t, mapping.get(t.name))
                for t in self.bound_tools(groups=groups, include=include, read_only=read_only)]


def make_tools(
    *, engine: MemoryEngine, scope: ScopeLike, groups: Sequence[str] | None = None, read_only: bool = False,
    trust: Literal["system", "learned", "external"] | None = None,
) -> list[FunctionTool]:
    """``ManowarToolSpec(engine=, scope=, trust=).to_tool_list(groups=, read_only=)`` in one call."""
    return ManowarToolSpec(engine=engine, scope=scope, trust=trust).to_tool_list(groups=groups, read_only=read_only)


def make_job_tools(
    *, engine: MemoryEngine, scope: ScopeLike, names: Sequence[str] | None = None,
) -> list[FunctionTool]:
    """The catalog's ``jobs`` group bound to ``scope``: maintenance jobs on the scope's agent
    only (the model cannot name another agent or user); ``names`` picks a subset."""
    spec = ManowarToolSpec(engine=engine, scope=scope, groups=["jobs"])
    if names is None:
        return spec.to_tool_list()
    jobs = set(spec.spec_functions)
    unknown = sorted(set(names) - jobs)
    if unknown:
        raise InvalidInputError(f"unknown job tool(s) {unknown}; the jobs group has {sorted(jobs)}")
    return spec.to_tool_list(spec_functions=list(names))
