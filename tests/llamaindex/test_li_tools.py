"""FunctionTools for remember, recall and the item operations."""

from __future__ import annotations

import json

import pytest
from llama_index.core.tools import FunctionTool

from llama_index_manowar import ManowarToolSpec, make_tools
from llama_index_manowar.tools import TOOL_DEFS, TOOL_GROUPS
from manowar_memory import InvalidInputError, MemoryEngine, NotFoundError, Scope


@pytest.fixture
def tools(engine: MemoryEngine, scope: Scope) -> dict[str, FunctionTool]:
    return {t.metadata.get_name(): t for t in make_tools(engine=engine, scope=scope)}


def _call(tool: FunctionTool, **kwargs: object) -> object:
    return json.loads(tool.call(**kwargs).content)


def test_tool_names_descriptions_and_schemas(tools: dict[str, FunctionTool]) -> None:
    """Six manowar_* tools, described, with argument schemas an LLM can fill."""
    assert list(tools) == [
        "manowar_remember", "manowar_recall", "manowar_get_item", "manowar_list_items",
        "manowar_update_item", "manowar_delete_item",
    ]
    remember = tools["manowar_remember"].metadata
    schema = remember.fn_schema.model_json_schema()  # type: ignore[union-attr]
    assert schema["required"] == ["content"]
    assert "preference" in schema["properties"]["fact_type"]["description"]
    assert "durable fact" in remember.description
    assert tools["manowar_delete_item"].metadata.fn_schema.model_json_schema()["properties"]["hard"]["default"] is False  # type: ignore[union-attr]
    # the scope is not an argument: the model cannot choose whose memory it touches
    assert all("scope" not in t.metadata.fn_schema.model_json_schema()["properties"] for t in tools.values())  # type: ignore[union-attr]


def test_remember_recall_and_item_round_trip(tools: dict[str, FunctionTool], engine: MemoryEngine, scope: Scope) -> None:
    """remember → recall → get → list → update → delete, all through the tools."""
    saved = _call(tools["manowar_remember"], content="The user's cat is called Miso.", fact_type="relationship")
    assert isinstance(saved, dict) and saved["fact_type"] == "relationship" and saved["deduplicated"] is False
    again = _call(tools["manowar_remember"], content="The user's cat is called Miso.")
    assert isinstance(again, dict) and again["deduplicated"] is True and again["id"] == saved["id"]

    recalled = _call(tools["manowar_recall"], query="What is the cat called?")
    assert isinstance(recalled, dict)
    assert "Miso" in recalled["context"] and recalled["items"][0]["id"] == saved["id"]

    item = _call(tools["manowar_get_item"], memory_id=saved["id"])
    assert isinstance(item, dict) and item["content"] == "The user's cat is called Miso." and item["source"] == "fact"
    listed = _call(tools["manowar_list_items"], source="fact")
    assert isinstance(listed, list) and [i["id"] for i in listed] == [saved["id"]]

    updated = _call(tools["manowar_update_item"], memory_id=saved["id"], content="The user's cat is called Mochi.",
                    metadata={"checked": True})
    assert isinstance(updated, dict) and updated["content"].endswith("Mochi.") and updated["metadata"]["checked"] is True
    assert engine.get_item(scope, saved["id"]).content == "The user's cat is called Mochi."

    deleted = _call(tools["manowar_delete_item"], memory_id=saved["id"])
    assert deleted == {"id": saved["id"], "deleted": True, "hard": False}
    with pytest.raises(NotFoundError):
        tools["manowar_get_item"].call(memory_id=saved["id"])


async def test_tools_async(tools: dict[str, FunctionTool]) -> None:
    """acall runs the async functions."""
    saved = json.loads((await tools["manowar_remember"].acall(content="The user plays the cello.")).content)
    recalled = json.loads((await tools["manowar_recall"].acall(query="Which instrument does the user play?")).content)
    assert "cello" in recalled["context"]
    item = json.loads((await tools["manowar_get_item"].acall(memory_id=saved["id"])).content)
    assert item["id"] == saved["id"]
    assert len(json.loads((await tools["manowar_list_items"].acall(limit=5)).content)) == 1
    updated = json.loads((await tools["manowar_update_item"].acall(memory_id=saved["id"], status="archived")).content)
    assert updated["status"] == "archived"
    gone = json.loads((await tools["manowar_delete_item"].acall(memory_id=saved["id"], hard=True)).content)
    assert gone["deleted"] is True and gone["hard"] is True


def test_tools_are_bound_to_their_scope(engine: MemoryEngine, scope: Scope) -> None:
    """Another user's tools cannot read or delete this user's memories."""
    mine = {t.metadata.get_name(): t for t in make_tools(engine=engine, scope=scope)}
    other_user = {"agentWallet": "agent-li", "userAddress": "user-2"}
    theirs = {t.metadata.get_name(): t for t in make_tools(engine=engine, scope=other_user)}
    saved = _call(mine["manowar_remember"], content="The user's PIN hint is 'blue door'.")
    assert isinstance(saved, dict)
    assert _call(theirs["manowar_list_items"]) == []
    assert "blue door" not in _call(theirs["manowar_recall"], query="PIN hint")["context"]  # type: ignore[index]
    with pytest.raises(NotFoundError):
        theirs["manowar_delete_item"].call(memory_id=saved["id"])


def test_groups_read_only_and_the_reserved_jobs_group(engine: MemoryEngine, scope: Scope) -> None:
    """Tools can be chosen by group or read-only; jobs is a group reserved for the engine's jobs."""
    assert TOOL_GROUPS == ("memory", "items", "jobs")
    assert [d for d in TOOL_DEFS if d.group == "jobs"] == []  # no engine jobs yet
    names = lambda ts: [t.metadata.name for t in ts]  # noqa: E731
    assert names(make_tools(engine=engine, scope=scope, groups=["memory"])) == ["manowar_remember", "manowar_recall"]
    assert names(make_tools(engine=engine, scope=scope, read_only=True)) == [
        "manowar_recall", "manowar_get_item", "manowar_list_items",
    ]
    assert make_tools(engine=engine, scope=scope, groups=["jobs"]) == []
    with pytest.raises(InvalidInputError, match="unknown tool group"):
        make_tools(engine=engine, scope=scope, groups=["admin"])
    # the BaseToolSpec protocol still works with explicit spec functions
    spec = ManowarToolSpec(engine=engine, scope=scope)
    assert [t.metadata.name for t in spec.to_tool_list(spec_functions=["recall"])] == ["recall"]
    with pytest.raises(InvalidInputError, match="MemoryEngine"):
        ManowarToolSpec(engine="engine", scope=scope)  # type: ignore[arg-type]


def test_recall_budget(engine: MemoryEngine, scope: Scope) -> None:
    """recall_budget_chars caps the recalled context."""
    for i in range(10):
        engine.remember(scope, f"The user visited city number {i} and liked the museums there a lot.")
    tool = make_tools(engine=engine, scope=scope, groups=["memory"], recall_budget_chars=260)[1]
    recalled = _call(tool, query="Which cities did the user visit?")
    assert isinstance(recalled, dict) and 0 < len(recalled["context"]) <= 260
