"""Memory tools: what each built-in does, errors the model can read, and engine callables as tools."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from langchain_core.messages import ToolMessage
from langchain_manowar import (
    BUILTIN_TOOLS,
    ManowarToolkit,
    ToolSpec,
    create_manowar_tools,
    tools_from_callables,
)

from manowar_memory import MemoryEngine, NotFoundError, Scope

SCOPE = Scope(agent_wallet="agent-t", user_address="user-t")


@pytest.fixture
def engine() -> Iterator[MemoryEngine]:
    engine = MemoryEngine(store="sqlite:///:memory:", embedder="fake")
    yield engine
    engine.close()


def _tools(engine: MemoryEngine, **kwargs: Any) -> dict[str, Any]:
    return {t.name: t for t in create_manowar_tools(engine, SCOPE, **kwargs)}


def _call(tool: Any, args: dict[str, Any]) -> ToolMessage:
    return tool.invoke({"name": tool.name, "args": args, "id": "call-1", "type": "tool_call"})


class TestBuiltins:
    def test_names_and_schemas(self, engine: MemoryEngine) -> None:
        """All six tools exist, with schemas that describe their arguments (and no scope)."""
        tools = _tools(engine)
        assert list(tools) == list(BUILTIN_TOOLS)
        assert set(tools["remember"].args) == {"content", "fact_type", "confidence", "importance"}
        assert "scope" not in json.dumps([t.args for t in tools.values()])
        assert list(_tools(engine, include=["recall"], name_prefix="mem_")) == ["mem_recall"]
        with pytest.raises(ValueError, match="unknown tool"):
            create_manowar_tools(engine, SCOPE, include=["forget_everything"])

    def test_remember_then_recall_get_update_list_delete(self, engine: MemoryEngine) -> None:
        """The item lifecycle through the tools, as an agent would drive it."""
        tools = _tools(engine)
        said = tools["remember"].invoke({"content": "The user's cat is named Miso.", "fact_type": "relationship"})
        assert said.startswith("Remembered as memory vec_")
        memory_id = said.split("memory ", 1)[1].split(" ", 1)[0]
        again = tools["remember"].invoke({"content": "the user's cat is named miso."})
        assert again == f"Already remembered; reinforced memory {memory_id} (relationship)."

        recalled = _call(tools["recall"], {"query": "cat name", "k": 3})
        assert f"[GRAPH] The user's cat is named Miso. (id={memory_id}" in recalled.content
        assert recalled.artifact[0]["id"] == memory_id and recalled.artifact[0]["layer"] == "graph"

        got = json.loads(tools["get_memory"].invoke({"memory_id": memory_id}))
        assert got["content"] == "The user's cat is named Miso." and "embedding" not in got

        updated = tools["update_memory"].invoke({"memory_id": memory_id, "content": "The user's cat is named Mochi.",
                                                 "confidence": 0.8})
        assert updated == f"Updated memory {memory_id}: The user's cat is named Mochi."
        assert engine.get_item(SCOPE, memory_id).metadata["confidence"] == 0.8

        listed = _call(tools["list_memories"], {"source": "fact"})
        assert "The user's cat is named Mochi." in listed.content and len(listed.artifact) == 1

        assert "kept in history" in tools["delete_memory"].invoke({"memory_id": memory_id})
        with pytest.raises(NotFoundError):
            engine.get_item(SCOPE, memory_id)
        assert _call(tools["list_memories"], {}).content == "No memories yet."

    def test_engine_errors_become_readable_tool_results(self, engine: MemoryEngine) -> None:
        """A missing id or bad input comes back to the model as text, not as an exception."""
        tools = _tools(engine)
        missing = _call(tools["get_memory"], {"memory_id": "vec_nope"})
        assert isinstance(missing, ToolMessage) and missing.status == "error" and "does not exist" in missing.content
        bad = _call(tools["update_memory"], {"memory_id": "vec_nope", "confidence": 7})
        assert bad.status == "error" and bad.content.startswith("Invalid tool input: confidence: ")
        assert "does not exist" in tools["delete_memory"].invoke({"memory_id": "vec_nope"})

    def test_tools_are_bound_to_their_scope(self, engine: MemoryEngine) -> None:
        """Another user's tools cannot see or delete this user's memories."""
        mine = _tools(engine)
        theirs = {t.name: t for t in create_manowar_tools(engine, {"agent_wallet": "agent-t", "user_address": "other"})}
        said = mine["remember"].invoke({"content": "The user is vegetarian."})
        memory_id = said.split("memory ", 1)[1].split(" ", 1)[0]
        assert _call(theirs["recall"], {"query": "vegetarian"}).artifact == []
        assert "does not exist" in theirs["delete_memory"].invoke({"memory_id": memory_id})
        assert engine.get_item(SCOPE, memory_id).content == "The user is vegetarian."

    async def test_async_tools(self, engine: MemoryEngine) -> None:
        """Every tool has an async path that uses the engine's async twins."""
        tools = _tools(engine)
        said = await tools["remember"].ainvoke({"content": "The user runs marathons."})
        memory_id = said.split("memory ", 1)[1].split(" ", 1)[0]
        recalled = await tools["recall"].ainvoke({"name": "recall", "args": {"query": "marathons"}, "id": "1",
                                                  "type": "tool_call"})
        assert recalled.artifact[0]["id"] == memory_id
        assert json.loads(await tools["get_memory"].ainvoke({"memory_id": memory_id}))["id"] == memory_id
        assert (await tools["update_memory"].ainvoke({"memory_id": memory_id, "status": "archived"})).startswith("Updated")
        listed = await tools["list_memories"].ainvoke({"name": "list_memories", "args": {}, "id": "2", "type": "tool_call"})
        assert listed.artifact[0]["metadata"]["status"] == "archived"
        assert "for good" in await tools["delete_memory"].ainvoke({"memory_id": memory_id, "hard": True})
        assert engine.list_items(SCOPE) == []


class TestEngineCallables:
    def test_callables_with_scope_binding_and_async_twins(self, engine: MemoryEngine) -> None:
        """A `scope` parameter is bound and hidden; (sync, async) pairs and ToolSpec overrides work."""
        seen: list[Scope] = []

        def consolidate(scope: Scope, dry_run: bool = True, max_items: int = 100) -> dict[str, Any]:
            """Merge duplicate facts.

            Long description that is not part of the tool description."""
            seen.append(scope)
            return {"dry_run": dry_run, "merged": 0, "max_items": max_items}

        async def aconsolidate(scope: Scope, dry_run: bool = True, max_items: int = 100) -> dict[str, Any]:
            seen.append(scope)
            return {"dry_run": dry_run, "merged": 0, "async": True}

        def decay_update(scope: Scope) -> str:
            return f"decayed for {scope.agent_wallet}"

        tools = {t.name: t for t in tools_from_callables(
            {"consolidate": (consolidate, aconsolidate), "decay": ToolSpec(func=decay_update, description="Age scores.")},
            SCOPE,
        )}
        assert tools["consolidate"].description == "Merge duplicate facts."
        assert set(tools["consolidate"].args) == {"dry_run", "max_items"}
        assert json.loads(tools["consolidate"].invoke({"dry_run": False})) == {"dry_run": False, "merged": 0, "max_items": 100}
        assert tools["decay"].invoke({}) == "decayed for agent-t" and tools["decay"].description == "Age scores."
        assert seen == [SCOPE]

    async def test_async_only_and_sync_only_callables(self, engine: MemoryEngine) -> None:
        """An async-only callable still runs synchronously, a sync-only one asynchronously."""

        async def archive_create(scope: Scope, older_than_days: int = 30) -> dict[str, int]:
            """Compress old memories into an archive."""
            return {"older_than_days": older_than_days}

        def cleanup(scope: Scope) -> list[str]:
            """Remove expired sessions."""
            return ["ok"]

        tools = {t.name: t for t in tools_from_callables([archive_create, cleanup], SCOPE)}
        assert json.loads(tools["archive_create"].invoke({"older_than_days": 7})) == {"older_than_days": 7}
        assert json.loads(await tools["archive_create"].ainvoke({})) == {"older_than_days": 30}
        assert json.loads(await tools["cleanup"].ainvoke({})) == ["ok"]

    def test_errors_from_callables_are_readable(self, engine: MemoryEngine) -> None:
        """A ManowarError raised by an engine callable becomes a tool error message."""

        def find(scope: Scope, memory_id: str) -> Any:
            """Find a memory."""
            return engine.get_item(scope, memory_id)

        (tool,) = tools_from_callables([find], SCOPE)
        msg = tool.invoke({"name": "find", "args": {"memory_id": "nope"}, "id": "x", "type": "tool_call"})
        assert msg.status == "error" and "does not exist" in msg.content
        with pytest.raises(TypeError):
            tools_from_callables([42], SCOPE)
        with pytest.raises(ValueError):
            ToolSpec()


class TestEngineToolDescriptions:
    def test_job_tool_like_objects_get_their_agent_from_the_scope(self) -> None:
        """Objects with name/description/args_schema/func/afunc become tools; agent fields are bound, not asked."""
        from dataclasses import dataclass

        from pydantic import BaseModel, Field

        class Params(BaseModel):
            """Recompute decay scores."""

            half_life_days: float = Field(30.0, description="half-life in days")
            agent_wallet: str | None = Field(None, description="only this agent (default: every agent)")
            agent_wallets: list[str] | None = None

        calls: list[dict[str, Any]] = []

        def func(**kwargs: Any) -> dict[str, Any]:
            calls.append(kwargs)
            return {"status": "completed", **Params.model_validate(kwargs).model_dump()}

        async def afunc(**kwargs: Any) -> dict[str, Any]:
            return {"async": True, **func(**kwargs)}

        @dataclass(frozen=True)
        class JobLike:
            name: str
            description: str
            args_schema: type[BaseModel]
            func: Any
            afunc: Any

        (tool,) = tools_from_callables([JobLike("memory_decay_update", "Recompute decay.", Params, func, afunc)], SCOPE)
        assert tool.name == "memory_decay_update" and tool.description == "Recompute decay."
        assert set(tool.args) == {"half_life_days"}
        out = json.loads(tool.invoke({"half_life_days": 7}))
        assert out["agent_wallet"] == "agent-t" and out["agent_wallets"] == ["agent-t"]
        assert calls[-1] == {"half_life_days": 7.0, "agent_wallet": "agent-t", "agent_wallets": ["agent-t"]}
        msg = tool.invoke({"name": tool.name, "args": {"agent_wallet": "someone-else"}, "id": "1", "type": "tool_call"})
        assert calls[-1]["agent_wallet"] == "agent-t" and json.loads(msg.content)["agent_wallet"] == "agent-t"

    async def test_job_tool_like_async(self) -> None:
        """The async side of a tool description is used by ainvoke."""
        from manowar_memory.jobs import JobTool
        from pydantic import BaseModel

        class Empty(BaseModel):
            agent_wallet: str | None = None

        async def afunc(**kwargs: Any) -> dict[str, Any]:
            return {"async": True, **kwargs}

        job = JobTool(name="j", description="d", args_schema=Empty, func=lambda **kw: {"async": False, **kw}, afunc=afunc)
        (tool,) = tools_from_callables([job], SCOPE)
        assert json.loads(await tool.ainvoke({})) == {"async": True, "agent_wallet": "agent-t"}
        assert json.loads(tool.invoke({})) == {"async": False, "agent_wallet": "agent-t"}


class TestToolkit:
    def test_toolkit_adds_the_engines_maintenance_jobs(self, engine: MemoryEngine) -> None:
        """jobs=True adds the jobs that can be confined to the scope's agent, with the agent bound."""
        engine.remember(SCOPE, "The user likes jazz.")
        kit = ManowarToolkit(engine=engine, scope=SCOPE, include=[], jobs=True)
        tools = {t.name: t for t in kit.get_tools()}
        assert "memory_decay_update" in tools and "memory_consolidate" in tools
        assert "memory_cleanup" not in tools  # acts on every agent: only when named
        assert all(not ({"agent_wallet", "agent_wallets", "scope"} & set(t.args)) for t in tools.values())
        report = json.loads(tools["memory_decay_update"].invoke({"half_life_days": 30, "dry_run": True}))
        assert report["status"] == "completed" and report["agentWallet"] == "agent-t"
        named = ManowarToolkit(engine=engine, scope=SCOPE, include=[], jobs=["memory_cleanup"]).get_tools()
        assert [t.name for t in named] == ["memory_cleanup"]
        with pytest.raises(ValueError, match="unknown job tool"):
            ManowarToolkit(engine=engine, scope=SCOPE, jobs=["memory_everything"]).get_tools()

    def test_toolkit_adds_the_engines_own_tools(self) -> None:
        """When the engine offers tools() (the future maintenance jobs), the toolkit exposes them too."""

        class EngineWithJobs(MemoryEngine):
            def tools(self) -> list[Any]:
                def decay_update(scope: Scope, half_life_days: float = 30.0) -> dict[str, Any]:
                    """Recompute decay scores."""
                    return {"agent": scope.agent_wallet, "half_life_days": half_life_days}

                return [decay_update]

        engine = EngineWithJobs(store="sqlite:///:memory:", embedder="fake")
        try:
            kit = ManowarToolkit(engine=engine, scope=SCOPE, include=["remember", "recall"])
            tools = {t.name: t for t in kit.get_tools()}
            assert list(tools) == ["remember", "recall", "decay_update"]
            assert json.loads(tools["decay_update"].invoke({"half_life_days": 7})) == {"agent": "agent-t", "half_life_days": 7.0}
            assert [t.name for t in ManowarToolkit(engine=engine, scope=SCOPE, engine_tools=False).get_tools()] == list(BUILTIN_TOOLS)

            def recall(scope: Scope) -> str:
                """Clashes with the built-in."""
                return ""

            with pytest.raises(ValueError, match="share the name"):
                ManowarToolkit(engine=engine, scope=SCOPE, extra=[recall]).get_tools()
        finally:
            engine.close()
