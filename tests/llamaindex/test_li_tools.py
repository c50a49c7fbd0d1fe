"""FunctionTools generated from the core tool catalog, bound to one scope."""

from __future__ import annotations

import json

import pytest
from llama_index.core.tools import FunctionTool, ToolOutput
from llama_index.core.tools.calling import acall_tool, call_tool
from llama_index.core.tools.tool_spec.base import BaseToolSpec

from llama_index_manowar import ManowarToolSpec, make_job_tools, make_tools
from manowar_memory import InvalidInputError, MemoryEngine, Scope, ToolCallError
from manowar_memory.tools import catalog, memory_tools

SCOPE_ARGS = {"scope", "agent_wallet", "agent_wallets", "agentWallet", "user_address", "userAddress", "mode",
              "hai", "hai_id", "haiId", "thread_id", "threadId"}
JOB_NAMES = [d.name for d in catalog(["jobs"])]


@pytest.fixture
def tools(engine: MemoryEngine, scope: Scope) -> dict[str, FunctionTool]:
    return {t.metadata.get_name(): t for t in make_tools(engine=engine, scope=scope)}


def _ok(output: ToolOutput) -> dict:
    """A successful output: JSON text content whose raw_output is the same dict."""
    assert output.is_error is False, output.content
    data = json.loads(output.content)
    assert isinstance(output.raw_output, dict) and data == json.loads(json.dumps(output.raw_output, default=str))
    return data


def test_tools_are_the_catalog_with_its_schemas(tools: dict[str, FunctionTool], engine: MemoryEngine,
                                                scope: Scope) -> None:
    """Names, descriptions and fn_schema come from the catalog; no argument names a scope."""
    defs = catalog()
    assert list(tools) == [d.name for d in defs]
    for d in defs:
        meta = tools[d.name].metadata
        assert isinstance(tools[d.name], FunctionTool)
        assert meta.description == d.description and meta.fn_schema is d.args_model
        assert tools[d.name].async_fn is not None
    every = ManowarToolSpec(engine=engine, scope=scope, groups=["memory", "items", "jobs"]).to_tool_list()
    assert len(every) == len(catalog(["memory", "items", "jobs"]))
    for tool in every:
        assert not set(tool.metadata.get_parameters_dict()["properties"]) & SCOPE_ARGS, tool.metadata.name


def test_remember_search_and_item_round_trip(tools: dict[str, FunctionTool], engine: MemoryEngine,
                                             scope: Scope) -> None:
    """remember → search → context → get → list → update → delete, JSON in and out."""
    saved = _ok(tools["memory_remember"].call(content="The user's cat is called Miso.", fact_type="relationship"))
    assert saved["fact_type"] == "relationship" and saved["deduplicated"] is False
    again = _ok(tools["memory_remember"].call(content="The user's cat is called Miso."))
    assert again["deduplicated"] is True and again["id"] == saved["id"]

    found = _ok(tools["memory_search"].call(query="What is the cat called?"))
    assert found["memories"][0]["id"] == saved["id"] and found["memories"][0]["trust"] == "learned"
    context = _ok(tools["memory_context"].call(query="What is the cat called?"))
    assert "Miso" in context["context"] and "<<<UNTRUSTED_" in context["context"]

    item = _ok(tools["memory_get"].call(memory_id=saved["id"]))["memory"]
    assert item["text"] == "The user's cat is called Miso." and item["source"] == "fact"
    listed = _ok(tools["memory_list"].call(source="fact"))["memories"]
    assert [i["id"] for i in listed] == [saved["id"]]

    updated = _ok(tools["memory_update"].call(memory_id=saved["id"], content="The user's cat is called Mochi.",
                                              metadata={"checked": True}))
    assert updated["updated"] is True and updated["memory"]["text"].endswith("Mochi.")
    assert engine.get_item(scope, saved["id"]).metadata["checked"] is True

    assert _ok(tools["memory_delete"].call(memory_id=saved["id"])) == {
        "deleted": True, "memory_id": saved["id"], "hard": False}
    assert tools["memory_get"].call(memory_id=saved["id"]).is_error


def test_results_are_json_not_a_python_dict_repr(tools: dict[str, FunctionTool], engine: MemoryEngine,
                                                 scope: Scope) -> None:
    """The model reads JSON (true/null, double quotes), not str(dict) (True/None, single quotes)."""
    output = tools["memory_remember"].call(content="The user flies on Fridays.")
    assert output.content == json.dumps(output.raw_output, ensure_ascii=False, default=str)
    assert "'id'" not in output.content and '"deduplicated": false' in output.content
    (job,) = make_job_tools(engine=engine, scope=scope, names=["memory_decay_update"])
    report = job.call(dry_run=True)
    assert json.loads(report.content)["status"] == "completed" and "'status'" not in report.content


def test_a_failure_is_a_structured_error_output(tools: dict[str, FunctionTool], engine: MemoryEngine,
                                               scope: Scope) -> None:
    """is_error=True with the catalog's structured error as JSON, the same as BoundTool (and LangChain)."""
    output = tools["memory_get"].call(memory_id="no-such-id")
    assert output.is_error is True
    assert json.loads(output.content) == output.raw_output
    assert output.raw_output["error"]["type"] == "NotFoundError" and output.raw_output["error"]["tool"] == "memory_get"
    assert isinstance(output.exception, ToolCallError)
    (bound,) = memory_tools(engine.scoped(scope), include=["memory_get"])
    with pytest.raises(ToolCallError) as raised:
        bound.call(memory_id="no-such-id")
    assert raised.value.payload == output.raw_output
    # invalid or extra arguments are the same structured error, not a crash
    bad = tools["memory_search"].call(query="x", k=0)
    assert bad.is_error and json.loads(bad.content)["error"]["type"] == "InvalidInputError"
    extra = tools["memory_search"].call(query="x", agent_wallet="someone-else")
    assert extra.is_error and "agent_wallet" in json.loads(extra.content)["error"]["message"]
    # LlamaIndex's own calling helpers pass the output through unchanged
    via_helper = call_tool(tools["memory_get"], {"memory_id": "no-such-id"})
    assert via_helper.is_error and json.loads(via_helper.content) == output.raw_output


async def test_tools_async(tools: dict[str, FunctionTool]) -> None:
    """acall runs the async functions, with the same result and error shapes."""
    saved = _ok(await tools["memory_remember"].acall(content="The user plays the cello."))
    found = _ok(await tools["memory_search"].acall(query="Which instrument does the user play?"))
    assert found["memories"][0]["id"] == saved["id"]
    assert _ok(await tools["memory_get"].acall(memory_id=saved["id"]))["memory"]["id"] == saved["id"]
    assert len(_ok(await tools["memory_list"].acall(limit=5))["memories"]) == 1
    updated = _ok(await tools["memory_update"].acall(memory_id=saved["id"], status="archived"))
    assert updated["memory"]["status"] == "archived"
    assert _ok(await tools["memory_delete"].acall(memory_id=saved["id"], hard=True))["deleted"] is True
    missing = await acall_tool(tools["memory_get"], {"memory_id": saved["id"]})
    assert missing.is_error and json.loads(missing.content)["error"]["type"] == "NotFoundError"


def test_tools_are_bound_to_their_scope(engine: MemoryEngine, scope: Scope) -> None:
    """Another user's tools cannot read, change or delete this user's memories."""
    mine = {t.metadata.get_name(): t for t in make_tools(engine=engine, scope=scope)}
    theirs = {t.metadata.get_name(): t for t in make_tools(engine=engine, scope={"agentWallet": "agent-li",
                                                                                  "userAddress": "user-2"})}
    saved = _ok(mine["memory_remember"].call(content="The user's PIN hint is 'blue door'."))
    assert _ok(theirs["memory_list"].call())["memories"] == []
    assert "blue door" not in _ok(theirs["memory_context"].call(query="PIN hint"))["context"]
    for name, kwargs in (("memory_get", {}), ("memory_update", {"content": "hacked"}), ("memory_delete", {})):
        assert theirs[name].call(memory_id=saved["id"], **kwargs).is_error
    assert engine.get_item(scope, saved["id"]).content == "The user's PIN hint is 'blue door'."


def test_groups_spec_functions_and_read_only(engine: MemoryEngine, scope: Scope) -> None:
    """to_tool_list(groups=["jobs"]) gives the catalog's job tools; spec_functions and read_only select."""
    spec = ManowarToolSpec(engine=engine, scope=scope)
    assert isinstance(spec, BaseToolSpec)
    assert spec.spec_functions == [d.name for d in catalog()]
    names = lambda ts: [t.metadata.name for t in ts]  # noqa: E731
    assert names(spec.to_tool_list(groups=["jobs"])) == JOB_NAMES and JOB_NAMES
    assert names(spec.to_tool_list(groups=["memory"])) == ["memory_remember", "memory_search", "memory_context"]
    assert names(spec.to_tool_list(spec_functions=["memory_search", ("memory_get", "memory_get")])) == [
        "memory_search", "memory_get"]
    assert names(spec.to_tool_list(read_only=True)) == ["memory_search", "memory_context", "memory_list",
                                                        "memory_get"]
    jobs_spec = ManowarToolSpec(engine=engine, scope=scope, groups=["jobs"])
    assert jobs_spec.spec_functions == JOB_NAMES and names(jobs_spec.to_tool_list()) == JOB_NAMES
    with pytest.raises(InvalidInputError, match="unknown tool group"):
        spec.to_tool_list(groups=["admin"])
    with pytest.raises(InvalidInputError, match="unknown tool"):
        spec.to_tool_list(spec_functions=["recall"])
    with pytest.raises(InvalidInputError, match="MemoryEngine"):
        ManowarToolSpec(engine="engine", scope=scope)  # type: ignore[arg-type]


def test_job_tools_act_on_the_scope_agent_only(engine: MemoryEngine) -> None:
    """make_job_tools is the jobs group bound to a scope: the model cannot name another agent."""
    mine, other = Scope(agent_wallet="agent", user_address="u"), Scope(agent_wallet="other-agent", user_address="u")
    for s in (mine, other):
        engine.ingest(s, ["The user drinks green tea", "The user drinks green tea"], dedupe=False)  # a duplicate to merge
    with pytest.raises(TypeError):
        make_job_tools(engine=engine)  # type: ignore[call-arg]
    (tool,) = make_job_tools(engine=engine, scope=mine, names=["memory_consolidate"])
    schema = tool.metadata.get_parameters_dict()["properties"]
    assert set(schema) == {"dry_run"}
    refused = tool.call(agent_wallets=["other-agent"])
    assert refused.is_error and len(engine.list_items(other)) == 2
    report = json.loads(tool.call().content)
    assert report["status"] == "completed"
    assert len(engine.list_items(mine)) == 1 and len(engine.list_items(other)) == 2
    with pytest.raises(InvalidInputError, match="unknown job tool"):
        make_job_tools(engine=engine, scope=mine, names=["memory_cleanup"])
