"""`manowar mcp` as a real subprocess, driven by the MCP SDK's own client: over stdio (one
configured scope) and over streamable HTTP (API keys)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import jsonschema
import pytest

pytest.importorskip("mcp")

from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from manowar_memory import MemoryEngine, Scope
from manowar_memory.tools import catalog

pytestmark = pytest.mark.timeout(120)


def _params(store: str, agent: str, user: str | None = None) -> StdioServerParameters:
    args = ["-m", "manowar_memory.cli", "mcp", "--agent", agent, "--store", store, "--embedder", "fake",
            "--groups", "memory,items,jobs"]
    if user:
        args += ["--user", user]
    return StdioServerParameters(command=sys.executable, args=args, env={**os.environ, "MANOWAR_THREAD": "t1"})


def _data(result) -> dict:
    return json.loads(result.content[0].text)


async def test_stdio_lists_and_calls_every_memory_and_items_tool(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'm.db'}"
    other = MemoryEngine(store=store, embedder="fake")
    foreign = other.remember(Scope(agent_wallet="agent-b"), "agent b secret plan").id
    other.close()
    async with stdio_client(_params(store, "agent-a")) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        names = {t.name for t in (await session.list_tools()).tools}
        assert names == {d.name for d in catalog(["memory", "items", "jobs"])}
        schema = {t.name: t for t in (await session.list_tools()).tools}["memory_remember"].input_schema
        assert "agent_wallet" not in json.dumps(schema) and "content" in schema["properties"]

        r = await session.call_tool("memory_remember", {"content": "The user's favourite colour is teal"})
        assert not r.is_error
        mid = _data(r)["id"]
        r = await session.call_tool("memory_search", {"query": "favourite colour", "k": 3})
        assert _data(r)["memories"][0]["id"] == mid
        r = await session.call_tool("memory_context", {"query": "favourite colour"})
        assert "teal" in _data(r)["context"] and "UNTRUSTED" in _data(r)["context"]
        assert _data(await session.call_tool("memory_list", {"limit": 5}))["memories"][0]["id"] == mid
        assert _data(await session.call_tool("memory_get", {"memory_id": mid}))["memory"]["id"] == mid
        r = await session.call_tool("memory_update", {"memory_id": mid, "content": "Favourite colour: navy"})
        assert _data(r)["memory"]["text"] == "Favourite colour: navy"
        r = await session.call_tool("memory_resolve_conflict", {"memory_id": mid, "resolution": "keep"})
        assert _data(r)["resolved"] is True
        r = await session.call_tool("memory_consolidate", {"dry_run": True})
        assert _data(r)["status"] == "completed"
        assert _data(await session.call_tool("memory_list_skills", {}))["skills"] == []

        resources = await session.list_resources()
        assert [str(x.uri) for x in resources.resources] == ["memory://context"]
        text = (await session.read_resource("memory://context/favourite%20colour")).contents[0].text
        assert "navy" in text

        # a failing call is an MCP tool error carrying the structured error
        r = await session.call_tool("memory_get", {"memory_id": "missing"})
        assert r.is_error and _data(r)["error"]["type"] == "NotFoundError"
        r = await session.call_tool("memory_remember", {"content": "x", "agent_wallet": "agent-b"})
        assert r.is_error and _data(r)["error"]["type"] == "InvalidInputError"
        # another agent's row cannot be reached by id
        for tool, args in [("memory_get", {}), ("memory_update", {"content": "pwned"}), ("memory_delete", {"hard": True})]:
            r = await session.call_tool(tool, {"memory_id": foreign, **args})
            assert r.is_error and _data(r)["error"]["type"] == "NotFoundError"
        r = await session.call_tool("memory_search", {"query": "agent b secret plan"})
        assert "secret plan" not in r.content[0].text
        r = await session.call_tool("memory_delete", {"memory_id": mid, "hard": True})
        assert _data(r)["deleted"] is True
    check = MemoryEngine(store=store, embedder="fake")
    assert check.get_item(Scope(agent_wallet="agent-b"), foreign).content == "agent b secret plan"
    check.close()


async def test_streamable_http_uses_the_api_keys(tmp_path: Path) -> None:
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    from manowar_memory.server.auth import hash_key
    from tests.test_server import free_port, start, stop

    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps([{"sha256": hash_key("ka"), "agentWallet": "agent-a"},
                                {"sha256": hash_key("kb"), "agentWallet": "agent-b"}]))
    port = free_port()
    proc = start(["mcp", "--http", "--port", str(port), "--groups", "memory,items,jobs", "--store", f"sqlite:///{tmp_path / 'm.db'}",
                  "--embedder", "fake", "--keys", str(keys)], port, path="/mcp")
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        assert httpx2.post(url, json={}).status_code == 401

        async def session_for(key: str):
            http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=30)
            return http, streamable_http_client(url, http_client=http)

        http_a, transport = await session_for("ka")
        async with http_a, transport as streams, ClientSession(streams[0], streams[1]) as a:
            await a.initialize()
            assert len((await a.list_tools()).tools) == len(catalog(["memory", "items", "jobs"]))
            mid = _data(await a.call_tool("memory_remember", {"content": "agent a likes sailing"}))["id"]
        http_b, transport = await session_for("kb")
        async with http_b, transport as streams, ClientSession(streams[0], streams[1]) as b:
            await b.initialize()
            r = await b.call_tool("memory_get", {"memory_id": mid})
            assert r.is_error and _data(r)["error"]["type"] == "NotFoundError"
            r = await b.call_tool("memory_search", {"query": "sailing"})
            assert not r.is_error and "sailing" not in r.content[0].text
    finally:
        stop(proc)


async def test_streamable_http_notes_group_keeps_each_agents_notes(tmp_path: Path) -> None:
    """`manowar mcp --http --groups ...,notes`: the notes tools act for the key's agent, in the
    server's project; another key's agent neither finds nor hydrates them."""
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    from manowar_memory.server.auth import hash_key
    from tests.test_server import free_port, start, stop

    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps([{"sha256": hash_key("ka"), "agentWallet": "agent-a"},
                                {"sha256": hash_key("kb"), "agentWallet": "agent-b"}]))
    port = free_port()
    proc = start(["mcp", "--http", "--port", str(port), "--store", f"sqlite:///{tmp_path / 'm.db'}",
                  "--embedder", "fake", "--keys", str(keys), "--groups", "memory,notes"], port, path="/mcp",
                 env={"MANOWAR_PROJECT_ID": "http-proj", "MANOWAR_PROJECT_ROOT": str(tmp_path)})
    url = f"http://127.0.0.1:{port}/mcp"

    def session_for(key: str):
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=30)
        return http, streamable_http_client(url, http_client=http)

    try:
        http_a, transport = session_for("ka")
        async with http_a, transport as streams, ClientSession(streams[0], streams[1]) as a:
            await a.initialize()
            names = {t.name for t in (await a.list_tools()).tools}
            assert names == {d.name for d in catalog(["memory", "notes"])}
            r = await a.call_tool("notes_remember", {"title": "Deploys", "content": "Deploy with the blue-green script",
                                                     "kind": "decision"})
            assert not r.is_error, r.content[0].text
            card = _data(await a.call_tool("notes_search", {"query": "blue-green deploy"}))["items"][0]
            assert card["project_id"] == "http-proj"
        http_b, transport = session_for("kb")
        async with http_b, transport as streams, ClientSession(streams[0], streams[1]) as b:
            await b.initialize()
            found = _data(await b.call_tool("notes_search", {"query": "blue-green deploy"}))
            assert found["result_count"] == 0 and found["items"] == []
            r = await b.call_tool("notes_hydrate", {"item_id": card["item_id"]})
            assert r.is_error or "blue-green script" not in r.content[0].text
    finally:
        stop(proc)


def _minimal_arguments(schema: dict) -> dict:
    """The smallest valid arguments of a tool: its required fields only, each a plain value of its type."""
    out: dict = {}
    for name in schema.get("required", []):
        prop = schema["properties"][name]
        kind = prop.get("type") or next((o.get("type") for o in prop.get("anyOf", []) if o.get("type") != "null"), None)
        if "enum" in prop:
            out[name] = prop["enum"][0]
        elif kind == "integer":
            out[name] = prop.get("minimum", 1)
        elif kind == "number":
            out[name] = 1.0
        elif kind == "boolean":
            out[name] = False
        elif kind == "array":
            out[name] = []
        else:
            out[name] = "note://probe" if name.endswith("uri") else "probe"
    if "dry_run" in schema.get("properties", {}):
        out["dry_run"] = True  # nothing published or rewritten
    return out


async def test_stdio_calls_every_tool_of_every_group(tmp_path: Path) -> None:
    """Every tool of the four groups, called over stdio with its minimal arguments, answers with a
    result or an MCP tool error carrying the catalog's structured error; never a protocol error."""
    (tmp_path / "README.md").write_text("# Probe\n\nA probe document.\n")
    args = ["-m", "manowar_memory.cli", "mcp", "--agent", "agent-a", "--store", f"sqlite:///{tmp_path / 'm.db'}",
            "--embedder", "fake", "--groups", "memory,items,jobs,notes"]
    params = StdioServerParameters(command=sys.executable, args=args, env={
        **os.environ, "MANOWAR_THREAD": "t1", "MANOWAR_PROJECT_ID": "mcp-all", "MANOWAR_PROJECT_ROOT": str(tmp_path)})
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        tools = (await session.list_tools()).tools
        assert {t.name for t in tools} == {d.name for d in catalog(["memory", "items", "jobs", "notes"])}
        outcomes = {}
        for tool in sorted(tools, key=lambda t: t.name):
            result = await session.call_tool(tool.name, _minimal_arguments(tool.input_schema))
            data = _data(result)
            if result.is_error:
                assert set(data["error"]) == {"type", "message", "tool"} and data["error"]["tool"] == tool.name, data
            else:  # the structured result is the text's JSON and conforms to the declared output schema
                assert result.structured_content == data, tool.name
                jsonschema.validate(result.structured_content, tool.output_schema)
            outcomes[tool.name] = data["error"]["type"] if result.is_error else "ok"
        assert outcomes["notes_self_test"] == outcomes["notes_health"] == outcomes["notes_lint"] == "ok"
        assert outcomes["memory_get"] == "NotFoundError"  # a tool error, reported as one
        assert sum(v == "ok" for v in outcomes.values()) > len(outcomes) // 2, outcomes


async def test_the_default_server_offers_memory_and_items_with_titles_hints_and_instructions(tmp_path: Path) -> None:
    """`manowar mcp` without --groups: the memory and items tools only, each with a title and
    MCP's hints (read-only reads; update, delete and resolve marked destructive), and
    instructions for the client."""
    store = f"sqlite:///{tmp_path / 'm.db'}"
    args = ["-m", "manowar_memory.cli", "mcp", "--agent", "agent-a", "--store", store, "--embedder", "fake"]
    params = StdioServerParameters(command=sys.executable, args=args, env=dict(os.environ))
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        init = await session.initialize()
        assert init.instructions and "memory_context" in init.instructions and "untrusted" in init.instructions
        tools = {t.name: t for t in (await session.list_tools()).tools}
    assert set(tools) == {d.name for d in catalog()} and "memory_archive_pin" not in tools
    for name, tool in tools.items():
        hints = tool.annotations
        assert tool.title and hints is not None and hints.title == tool.title, name
        assert hints.open_world_hint is False, name
        if name in ("memory_search", "memory_context", "memory_list", "memory_get"):
            assert hints.read_only_hint is True and hints.destructive_hint is False and hints.idempotent_hint, name
        else:
            assert hints.read_only_hint is False, name
    assert tools["memory_remember"].annotations.destructive_hint is False  # it only adds (or reinforces)
    assert tools["memory_remember"].annotations.idempotent_hint is False
    for name in ("memory_update", "memory_delete", "memory_resolve_conflict"):
        assert tools[name].annotations.destructive_hint is True, name


def test_every_catalog_tool_has_a_title_and_only_pinning_reaches_outside() -> None:
    tools = catalog(["memory", "items", "jobs", "notes", "erasure"])
    assert all(d.title for d in tools)
    assert [d.name for d in tools if d.open_world] == ["memory_archive_pin"]
    assert all(not d.destructive and d.idempotent for d in tools if not d.writes)


async def test_the_default_tools_declare_output_schemas_and_answer_conforming_structured_content(tmp_path: Path) -> None:
    """Every tool of the default server has a title, MCP's three behaviour hints and an output
    schema; none is a job tool; each call's structuredContent validates against its schema."""
    store = f"sqlite:///{tmp_path / 'm.db'}"
    args = ["-m", "manowar_memory.cli", "mcp", "--agent", "agent-a", "--store", store, "--embedder", "fake"]
    params = StdioServerParameters(command=sys.executable, args=args, env=dict(os.environ))
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        tools = {t.name: t for t in (await session.list_tools()).tools}
        assert not set(tools) & {d.name for d in catalog(["jobs"])}
        for name, tool in tools.items():
            hints = tool.annotations
            assert tool.title and hints is not None, name
            assert None not in (hints.read_only_hint, hints.destructive_hint, hints.idempotent_hint), name
            assert tool.output_schema is not None and tool.output_schema["type"] == "object", name
            jsonschema.Draft202012Validator.check_schema(tool.output_schema)

        results = {}

        async def call(name: str, arguments: dict) -> dict:
            r = await session.call_tool(name, arguments)
            assert not r.is_error and r.structured_content == _data(r), (name, r.content)
            jsonschema.validate(r.structured_content, tools[name].output_schema)
            results[name] = r.structured_content
            return r.structured_content

        mid = (await call("memory_remember", {"content": "The user's favourite colour is teal"}))["id"]
        await call("memory_search", {"query": "favourite colour"})
        await call("memory_context", {"query": "favourite colour"})
        await call("memory_list", {})
        await call("memory_get", {"memory_id": mid})
        await call("memory_update", {"memory_id": mid, "confidence": 0.5})
        await call("memory_resolve_conflict", {"memory_id": mid, "resolution": "keep"})
        await call("memory_delete", {"memory_id": mid})
    assert set(results) == set(tools)
    assert results["memory_search"]["memories"][0]["id"] == mid and results["memory_delete"]["deleted"] is True
    # a result off its declared shape is refused by the schema (the check can fail)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**results["memory_get"], "memory": {"id": mid}}, tools["memory_get"].output_schema)


def test_every_catalog_tool_result_is_checked_against_its_model() -> None:
    from pydantic import ValidationError

    for d in catalog(["memory", "items", "jobs", "notes", "erasure"]):
        schema = d.output_schema()
        assert schema["type"] == "object" and schema["properties"], d.name
    get = {d.name: d for d in catalog()}["memory_get"]
    with pytest.raises(ValidationError):
        get.result({"memory": {"id": "m1"}})  # a handler answering off its model is a bug, caught here


@pytest.mark.parametrize("client", ["claude", "vscode", "cursor"])
def test_print_config_gives_each_client_a_working_configuration(tmp_path: Path, client: str) -> None:
    """`manowar mcp --print-config CLIENT` prints the client's own format with an absolute
    command, the scope and store in the arguments (a relative SQLite path made absolute) and the
    embedder in the env block."""
    run = _print_config(client, "--agent", "agent-a", "--user", "ana", "--store", "sqlite:///rel.db",
                        "--embedder", "fake", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    config = json.loads(run.stdout)
    if client == "vscode":
        entry = config["servers"]["manowar-memory"]
        assert entry["type"] == "stdio"
    else:
        entry = config["mcpServers"]["manowar-memory"]
        assert "type" not in entry
    assert Path(entry["command"]).is_absolute() and Path(entry["command"]).is_file()
    args = entry["args"]
    assert args[args.index("mcp") + 1:args.index("mcp") + 5] == ["--agent", "agent-a", "--user", "ana"]
    assert args[args.index("--store") + 1] == f"sqlite:///{(tmp_path / 'rel.db').resolve()}"
    source = {"PYTHONPATH": os.pathsep.join(str(Path(p).resolve()) for p in os.environ["PYTHONPATH"].split(os.pathsep)
                                            if p)} if os.environ.get("PYTHONPATH") else {}
    assert entry["env"] == {"MANOWAR_EMBEDDER": "fake", **source} and args[args.index("--embedder") + 1] == "fake"


def _print_config(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None):
    import subprocess

    return subprocess.run([sys.executable, "-m", "manowar_memory.cli", "mcp", "--print-config", *args],
                          capture_output=True, text=True, cwd=cwd, timeout=60, env={**os.environ, **(env or {})})


async def test_a_printed_configuration_starts_the_server_from_elsewhere(tmp_path: Path) -> None:
    """The Claude Desktop configuration, started as a client would (another working directory),
    serves the default tools on the printed store; without --store the env names MANOWAR_HOME."""
    import asyncio

    (tmp_path / "project").mkdir()
    (tmp_path / "elsewhere").mkdir()
    run = await asyncio.to_thread(_print_config, "claude", "--agent", "agent-a", "--store", "sqlite:///m.db",
                                  "--embedder", "fake", cwd=tmp_path / "project")
    assert run.returncode == 0, run.stderr
    entry = json.loads(run.stdout)["mcpServers"]["manowar-memory"]
    # the client's environment: the SDK's minimal default one plus the config's env block, nothing of ours
    params = StdioServerParameters(command=entry["command"], args=entry["args"], cwd=tmp_path / "elsewhere",
                                   env=entry["env"])
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        assert {t.name for t in (await session.list_tools()).tools} == {d.name for d in catalog()}
        r = await session.call_tool("memory_remember", {"content": "The user lives in Porto"})
        assert not r.is_error
    engine = MemoryEngine(store=f"sqlite:///{tmp_path / 'project' / 'm.db'}", embedder="fake")
    assert engine.get_item(Scope(agent_wallet="agent-a"), _data(r)["id"]).content == "The user lives in Porto"
    engine.close()
    run = await asyncio.to_thread(_print_config, "cursor", "--agent", "agent-a", env={"MANOWAR_HOME": str(tmp_path / "home")})
    entry = json.loads(run.stdout)["mcpServers"]["manowar-memory"]
    assert entry["env"]["MANOWAR_HOME"] == str(tmp_path / "home") and "--store" not in entry["args"]
    run = await asyncio.to_thread(_print_config, "claude", env={"MANOWAR_AGENT": ""})
    assert run.returncode != 0 and "--agent" in run.stderr
