"""The maintenance jobs as LlamaIndex FunctionTools."""

from __future__ import annotations

from llama_index_manowar import make_job_tools

from manowar_memory import MemoryEngine, Scope


def test_job_tools_are_function_tools_with_schemas() -> None:
    engine = MemoryEngine(store=":memory:", embedder="fake", extractor=None)
    tools = {t.metadata.name: t for t in make_job_tools(engine=engine)}
    assert {"memory_consolidate", "memory_decay_update", "memory_cleanup"} <= set(tools)
    schema = tools["memory_consolidate"].metadata.get_parameters_dict()
    assert "dry_run" in schema["properties"]


def test_consolidate_tool_supersedes_a_duplicate() -> None:
    engine = MemoryEngine(store=":memory:", embedder="fake", extractor=None)
    scope = Scope(agent_wallet="agent", user_address="u")
    engine.ingest(scope, ["The user drinks green tea", "The user drinks green tea"])
    (tool,) = make_job_tools(engine=engine, names=["memory_consolidate"])
    output = tool.call(agent_wallets=["agent"])
    assert output.raw_output["status"] == "completed"
    assert len(engine.list_items(scope)) == 1
