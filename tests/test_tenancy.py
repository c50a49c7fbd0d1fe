"""One app, many users: blank ids are refused on every surface, a conversation needs a user
unless the engine is single-tenant, jobs act only on the caller's rows, and ``forget`` erases a
user from every table and collection."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from manowar_memory import MemoryEngine, Scope, ScopeError
from manowar_memory.errors import ConfigurationError, InvalidInputError, NotFoundError, ToolCallError
from manowar_memory.tools import memory_tools

pytest.importorskip("fastapi")

from fastapi.testclient import TestClient

from manowar_memory.server.app import create_app
from manowar_memory.server.auth import ApiKeys, hash_key

BLANKS = ["", " ", "\t \n"]


# ---------------------------------------------------------------- blank ids


@pytest.mark.parametrize("blank", BLANKS)
@pytest.mark.parametrize("field", ["agent_wallet", "user_address", "thread_id", "hai_id"])
def test_a_blank_id_is_a_scope_error_naming_the_field(field: str, blank: str) -> None:
    fields: dict[str, Any] = {"agent_wallet": "a", field: blank}
    with pytest.raises(ScopeError, match=f"{field} is blank"):
        Scope(**fields)


@pytest.mark.parametrize("blank", BLANKS)
@pytest.mark.parametrize("key", ["agentWallet", "userAddress", "user_id", "threadId", "haiId"])
def test_from_dict_refuses_a_blank_alias_rather_than_dropping_it(key: str, blank: str) -> None:
    with pytest.raises(ScopeError, match=f"{key} is blank"):
        Scope.from_dict({"agentWallet": "a", key: blank} if key != "agentWallet" else {key: blank})


def test_none_is_the_only_no_user() -> None:
    assert Scope(agent_wallet="a", user_address=None).user_address is None
    assert Scope.from_dict({"agentWallet": "a", "userAddress": None}).user_address is None
    assert Scope(agent_wallet="a", user_address=" bob ").user_address == "bob"


def test_the_engine_and_scoped_surface_refuse_a_blank_user() -> None:
    with MemoryEngine(store="sqlite:///:memory:", embedder="fake") as engine:
        with pytest.raises(ScopeError, match="userAddress is blank"):
            engine.remember({"agentWallet": "a", "userAddress": "  "}, "my pin is 4321")
        with pytest.raises(ScopeError, match="user_id is blank"):
            engine.scoped({"agentWallet": "a", "user_id": ""})
        assert engine.list_items(Scope(agent_wallet="a")) == []  # nothing landed in the shared space


def _rest(engine: MemoryEngine, keys: list[dict[str, Any]]) -> TestClient:
    return TestClient(create_app(engine, keys=ApiKeys(keys)))


def test_rest_refuses_a_blank_user_in_the_body() -> None:
    with MemoryEngine(store="sqlite:///:memory:", embedder="fake") as engine:
        http = _rest(engine, [{"sha256": hash_key("k-a"), "agentWallet": "agent-a"}])
        for blank in BLANKS:
            r = http.post("/api/memory/remember", headers={"X-API-Key": "k-a"},
                          json={"userAddress": blank, "content": "alice's pin is 4321"})
            assert r.status_code == 400, r.text
            assert "userAddress is blank" in r.json()["detail"]
        assert engine.list_items(Scope(agent_wallet="agent-a")) == []


@pytest.mark.parametrize("blank", BLANKS)
@pytest.mark.parametrize("key", ["userAddress", "user_id", "agentWallet"])
def test_a_key_file_entry_with_a_blank_id_is_refused(tmp_path: Path, key: str, blank: str) -> None:
    entry = {"sha256": hash_key("k"), "agentWallet": "agent-a", key: blank}
    path = tmp_path / "keys.json"
    path.write_text(json.dumps([entry]))
    with pytest.raises(ConfigurationError, match=f"'{key}' is blank"):
        ApiKeys.load(path)


def test_the_cli_refuses_blank_user_flags(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from manowar_memory.cli import cli

    runner = CliRunner()
    result = runner.invoke(cli, ["api-key", "--agent", "agent-a", "--user", " "])
    assert result.exit_code != 0 and "is blank" in result.output
    store = f"sqlite:///{tmp_path / 'm.db'}"
    result = runner.invoke(cli, ["remember", "my pin is 4321", "--agent", "agent-a", "--user", "", "--store", store])
    assert isinstance(result.exception, ScopeError) and "user_address is blank" in str(result.exception)
    result = runner.invoke(cli, ["mcp", "--agent", "agent-a", "--user", "  ", "--store", store])
    assert isinstance(result.exception, ScopeError) and "userAddress is blank" in str(result.exception)


# ---------------------------------------------------------------- conversations need a user


TURN = [{"role": "user", "content": "My locker code is 7781."}, {"role": "assistant", "content": "Noted."}]


def test_a_user_less_turn_is_refused_on_a_multi_user_engine() -> None:
    with MemoryEngine(store="sqlite:///:memory:", embedder="fake", extractor=None) as engine:
        anonymous = Scope(agent_wallet="a", thread_id="x")
        with pytest.raises(ScopeError, match=r"post_turn needs user_address.*single_tenant=True"):
            engine.post_turn(anonymous, TURN)
        scoped = engine.scoped(anonymous)
        with pytest.raises(ScopeError, match="needs user_address"):
            scoped.post_turn(TURN)
        with pytest.raises(ScopeError, match="needs user_address"):
            scoped.index_transcript(TURN)
        with pytest.raises(ScopeError, match="update_working needs user_address"):
            scoped.update_working(context=["locker 7781"])
        bob = Scope(agent_wallet="a", user_address="bob", thread_id="x")
        assert "7781" not in engine.pre_turn("locker code", bob).prompt  # nothing was stored agent-wide
        # agent-shared knowledge stays an explicit write
        assert engine.remember(Scope(agent_wallet="a"), "The office opens at 9.").id
        assert engine.scoped(Scope(agent_wallet="a")).add(["The gym closes at 22."])


def test_rest_refuses_a_user_less_turn_of_an_agent_key() -> None:
    with MemoryEngine(store="sqlite:///:memory:", embedder="fake", extractor=None) as engine:
        http = _rest(engine, [{"sha256": hash_key("k-a"), "agentWallet": "agent-a"}])
        r = http.post("/api/memory/turns/record", headers={"X-API-Key": "k-a"},
                      json={"threadId": "t", "messages": TURN})
        assert r.status_code == 400 and "needs user_address" in r.json()["detail"]
        r = http.post("/api/memory/turns/record", headers={"X-API-Key": "k-a"},
                      json={"threadId": "t", "userAddress": "bob", "messages": TURN})
        assert r.status_code == 200, r.text


def test_a_single_tenant_engine_records_user_less_turns() -> None:
    from manowar_memory import MemoryConfig

    with MemoryEngine(store="sqlite:///:memory:", embedder="fake", extractor=None,
                      config=MemoryConfig(single_tenant=True)) as engine:
        scope = Scope(agent_wallet="a", thread_id="x")
        engine.post_turn(scope, TURN)
        engine.scoped(scope).update_working(context=["locker 7781"])
        assert engine.thread_messages(scope)[0].content == "My locker code is 7781."


# ---------------------------------------------------------------- jobs, archives and pins of the caller's scope


AGENT = "agent-a"
ALICE = Scope(agent_wallet=AGENT, user_address="alice")
BOB = Scope(agent_wallet=AGENT, user_address="bob")


def _pinned_texts(pinata: Any) -> str:
    """Everything the fake pinning service received, archives decoded."""
    import base64
    import gzip

    out = []
    for req in pinata.requests:
        body = req.json or {}
        content = (body.get("pinataContent") or {}).get("content", "")
        if (body.get("pinataContent") or {}).get("compressed"):
            content = gzip.decompress(base64.b64decode(content)).decode("utf-8")
        out.append(req.body.decode("utf-8", "replace") + content)
    return "\n".join(out)


def _archived_users(engine: MemoryEngine, archive_id: str) -> set[Any]:
    from manowar_memory.jobs import decode_archive

    archive = engine.store.get_archive(archive_id)
    assert archive is not None
    return {row.get("userAddress") for row in decode_archive(archive)["vectors"]}


def _two_users(engine: MemoryEngine) -> dict[str, str]:
    return {"alice": engine.remember(ALICE, "Alice's vault code is zq-alice-4411.").id,
            "bob": engine.remember(BOB, "Bob's vault code is zq-bob-9022.").id,
            "shared": engine.remember(Scope(agent_wallet=AGENT), "The vault opens at nine.").id}


@pytest.mark.parametrize("allow_pin", [True, False])
def test_a_bob_key_archives_and_pins_only_bobs_rows(monkeypatch: pytest.MonkeyPatch, allow_pin: bool) -> None:
    from manowar_memory.testing.provider_servers import PinataServer

    with PinataServer(jwt="jwt-27") as pinata, MemoryEngine(store="sqlite:///:memory:", embedder="fake") as engine:
        monkeypatch.setenv("PINATA_JWT", "jwt-27")
        monkeypatch.setenv("PINATA_API_URL", pinata.url)
        monkeypatch.setenv("PINATA_MAX_ATTEMPTS", "1")
        _two_users(engine)
        keys = ApiKeys([{"sha256": hash_key("k-bob"), "agentWallet": AGENT, "userAddress": "bob"}])
        http = TestClient(create_app(engine, keys=keys, allow_pin=allow_pin))
        r = http.post("/api/memory/jobs", headers={"X-API-Key": "k-bob"},
                      json={"type": "archive_create", "params": {"pin": True}})
        if not allow_pin:
            assert r.status_code == 400 and "allow_pin" in r.json()["detail"]
            assert not pinata.requests
            return
        assert r.status_code == 200, r.text
        job = r.json()
        assert job["status"] == "completed", job
        assert job["data"]["memoriesArchived"] == 1 and job["data"]["pinned"] is True
        assert _archived_users(engine, job["data"]["archiveId"]) == {"bob"}
        pinned = _pinned_texts(pinata)
        assert "zq-bob-9022" in pinned and "zq-alice-4411" not in pinned and "nine" not in pinned
        # the job and its archive are bob's: alice's key does not see them
        alice = TestClient(create_app(engine, keys=ApiKeys([{"sha256": hash_key("k-al"), "agentWallet": AGENT,
                                                              "userAddress": "alice"}])))
        assert alice.get(f"/api/memory/jobs/{job['jobId']}", headers={"X-API-Key": "k-al"}).status_code == 404


def test_agent_wide_jobs_need_an_agent_scope_and_the_applications_opt_in() -> None:
    with MemoryEngine(store="sqlite:///:memory:", embedder="fake") as engine:
        _two_users(engine)
        agent = Scope(agent_wallet=AGENT)
        own = engine.scoped(agent).run_job("archive_create")
        assert own.data is not None and own.data["memoriesArchived"] == 1  # only the agent's user-less row
        everything = engine.scoped(agent, agent_jobs=True).run_job("archive_create")
        assert everything.data is not None and everything.data["memoriesArchived"] == 3
        # a user scope acts on its own rows even where the application opted in
        mine = engine.scoped(BOB, agent_jobs=True).run_job("archive_create")
        assert mine.data is not None and mine.data["memoriesArchived"] == 1
        with pytest.raises(InvalidInputError, match="owner is bound"):
            engine.scoped(BOB).run_job("archive_create", {"owner": None})
        with pytest.raises(ScopeError, match="agent_jobs=True"):
            engine.scoped(BOB, agent_jobs=True).create_agent_schedules()
        # bob neither restores nor pins the agent-wide archive, nor does an agent scope without agent_jobs
        with pytest.raises(NotFoundError):
            engine.scoped(BOB, allow_pin=True).pin_archive(everything.data["archiveId"])
        with pytest.raises(NotFoundError):
            engine.scoped(agent, allow_pin=True).pin_archive(everything.data["archiveId"], dry_run=True)
        assert engine.scoped(agent, allow_pin=True).pin_archive(own.data["archiveId"], dry_run=True)["pinned"] is False
        with pytest.raises(NotFoundError):
            engine.scoped(BOB).restore_archive(everything.data["archiveId"])


def test_a_toolkit_of_bob_archives_only_bobs_rows_and_cannot_pin() -> None:
    pytest.importorskip("langchain_core")
    from langchain_manowar import ManowarToolkit

    with MemoryEngine(store="sqlite:///:memory:", embedder="fake") as engine:
        _two_users(engine)
        tools = {t.name: t for t in ManowarToolkit(engine=engine, scope=BOB, jobs=True).get_tools()}
        out = json.loads(tools["memory_archive_create"].invoke({}))
        assert out["report"]["memoriesArchived"] == 1
        assert _archived_users(engine, out["report"]["archiveId"]) == {"bob"}
        refused = tools["memory_archive_create"].invoke({"pin": True})
        assert "allow_pin" in str(refused)
        pattern_rows = json.loads(tools["memory_patterns_extract"].invoke({}))
        assert pattern_rows["status"] == "completed"


def test_restore_never_brings_back_a_deleted_row_unless_the_application_asks() -> None:
    with MemoryEngine(store="sqlite:///:memory:", embedder="fake") as engine:
        ids = _two_users(engine)
        everything = engine.scoped(Scope(agent_wallet=AGENT), agent_jobs=True).run_job("archive_create")
        assert everything.data is not None
        alices = engine.scoped(ALICE).run_job("archive_create")
        assert alices.data is not None
        assert engine.scoped(ALICE).delete(ids["alice"], hard=True)
        # bob's restore tool: the agent-wide archive is not his, and his own holds none of alice's rows
        bob_tools = {t.name: t for t in memory_tools(engine.scoped(BOB), ["jobs"])}
        with pytest.raises(ToolCallError):
            bob_tools["memory_archive_restore"].call(archive_id=everything.data["archiveId"])
        with pytest.raises(ToolCallError):
            bob_tools["memory_archive_restore"].call(archive_id=alices.data["archiveId"])
        # alice's own restore keeps her deletion; the application can bring it back explicitly
        alice_tools = {t.name: t for t in memory_tools(engine.scoped(ALICE), ["jobs"])}
        report = alice_tools["memory_archive_restore"].call(archive_id=alices.data["archiveId"])
        assert report["restored"] == 0 and report["skippedDeleted"] == 1
        agent_restore = engine.scoped(Scope(agent_wallet=AGENT), agent_jobs=True).restore_archive(
            everything.data["archiveId"])
        assert agent_restore["restored"] == 0 and agent_restore["skippedDeleted"] == 1
        assert "zq-alice-4411" not in engine.pre_turn("vault code", ALICE).prompt
        back = engine.scoped(ALICE).restore_archive(alices.data["archiveId"], restore_deleted=True)
        assert back["restored"] == 1 and "zq-alice-4411" in engine.pre_turn("vault code", ALICE).prompt


def test_mcp_started_for_bob_archives_only_bobs_rows(tmp_path: Path) -> None:
    pytest.importorskip("mcp")
    import asyncio
    import os
    import sys

    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    store = f"sqlite:///{tmp_path / 'm.db'}"
    with MemoryEngine(store=store, embedder="fake") as engine:
        _two_users(engine)
    params = StdioServerParameters(command=sys.executable, env=dict(os.environ), args=[
        "-m", "manowar_memory.cli", "mcp", "--agent", AGENT, "--user", "bob", "--store", store, "--embedder", "fake",
        "--groups", "memory,items,jobs"])

    async def run() -> tuple[Any, Any]:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            refused = await session.call_tool("memory_archive_create", {"pin": True})
            made = await session.call_tool("memory_archive_create", {})
            return refused, made

    refused, made = asyncio.run(run())
    assert refused.is_error and "allow_pin" in refused.content[0].text
    report = json.loads(made.content[0].text)["report"]
    with MemoryEngine(store=store, embedder="fake") as engine:
        assert _archived_users(engine, report["archiveId"]) == {"bob"}


# ---------------------------------------------------------------- forget


def _scan_sqlite(path: Path, secrets: list[str]) -> list[str]:
    """Every secret found in any table of the SQLite file (listed from sqlite_master, FTS shadow tables too)."""
    import sqlite3

    conn = sqlite3.connect(path)
    found = []
    tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    assert "memory_fts_data" in tables  # the full-text shadow tables are scanned as well
    for table in tables:
        for row in conn.execute(f'SELECT * FROM "{table}"'):
            blob = b"\x00".join(v if isinstance(v, bytes) else str(v).encode("utf-8") for v in row)
            found += [f"{table}: {s}" for s in secrets if s.encode("utf-8") in blob]
    conn.close()
    return found


def _scan_mongo(db: Any, secrets: list[str]) -> list[str]:
    """Every secret found in any collection of the database."""
    from bson import BSON

    found = []
    for name in db.list_collection_names():
        for doc in db[name].find({}):
            raw = BSON.encode(doc)
            found += [f"{name}: {s}" for s in secrets if s.encode("utf-8") in raw]
    return found


def _fill(engine: MemoryEngine, scope: Scope, tag: str) -> list[str]:
    """Every kind of row a user leaves, each holding a secret of its own; the secrets."""
    secrets = [f"zq{tag}{kind}" for kind in ("fact", "doc", "turn", "work", "kv")]
    memory = engine.scoped(scope.with_thread(f"t-{tag}"))
    memory.remember(f"My passport number is {secrets[0]}.")
    memory.add([f"The contract says {secrets[1]}."])
    for i in range(4):  # a tool sequence seen 4 times becomes a pattern
        engine.post_turn(scope.with_thread(f"t-{tag}-{i}"),
                         [{"role": "user", "content": f"I am Dana and my code word is {secrets[2]}."},
                          {"role": "assistant", "content": "Noted."}],
                         tool_calls=[{"name": "lookup", "status": "completed"}, {"name": "book"}])
    memory.update_working(context=[f"remember {secrets[3]}"])
    memory.upsert([{"key": f"k-{tag}", "content": f"Keyed note {secrets[4]}"}])
    engine.flush()
    memory.run_job("patterns_extract")
    memory.run_job("archive_create")
    engine.search(secrets[0], scope)  # a cached result too
    return secrets


def test_forget_erases_a_user_from_every_layer_table_and_collection(engine_on_each_store: MemoryEngine,
                                                                  tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from manowar_memory.testing.provider_servers import PinataServer

    pinata = PinataServer(jwt="jwt-27").__enter__()
    monkeypatch.setenv("PINATA_JWT", "jwt-27")
    monkeypatch.setenv("PINATA_API_URL", pinata.url)
    monkeypatch.setenv("PINATA_MAX_ATTEMPTS", "1")
    engine = engine_on_each_store
    store = engine.store
    if store.name == "sqlite":  # a file, so that every table can be scanned from outside
        engine = MemoryEngine(store=f"sqlite:///{tmp_path / 'm.db'}", embedder="fake")
    try:
        alice_secrets = _fill(engine, ALICE, "alice")
        bob_secrets = _fill(engine, BOB, "bob")
        engine.remember(Scope(agent_wallet=AGENT), "Shared: the office opens at nine.")
        app = engine.scoped(Scope(agent_wallet=AGENT), agent_jobs=True, allow_pin=True)
        agent_wide = app.run_job("archive_create", {"pin": True})
        assert agent_wide.data is not None and agent_wide.data["memoriesArchived"] > 2
        cid = agent_wide.data["ipfsHash"]
        assert cid in pinata.pins
        bob_before = sorted(r.content for r in engine.list_items(BOB, limit=100))

        report = engine.forget(ALICE)
        assert report.memories >= 5 and report.transcripts == 4 and report.sessions >= 1
        assert report.patterns == 1 and report.archives == 1 and report.archives_rewritten == 1
        assert report.pinned_copies == [{"archiveId": agent_wide.data["archiveId"], "ipfsHash": cid, "unpinned": True}]
        assert cid not in pinata.pins
        again = engine.forget(ALICE)  # idempotent
        assert again.total == 0 and again.archives_rewritten == 0

        for secret in alice_secrets:
            assert secret not in engine.pre_turn(secret, ALICE.with_thread("t-alice")).prompt
            assert not any(secret in c.text for c in engine.scoped(ALICE).search(secret, layers=(
                "working", "scene", "graph", "patterns", "archives", "vectors")))
        http = TestClient(create_app(engine, keys=ApiKeys([{"sha256": hash_key("k-al"), "agentWallet": AGENT,
                                                             "userAddress": "alice"}])))
        r = http.post("/api/memory/items/search", headers={"X-API-Key": "k-al"}, json={"query": alice_secrets[0]})
        assert r.status_code == 200 and not any(s in r.text for s in alice_secrets)
        engine.flush()
        if engine.store.name == "sqlite":
            engine.close()
            assert _scan_sqlite(tmp_path / "m.db", alice_secrets) == []
            assert _scan_sqlite(tmp_path / "m.db", bob_secrets)  # the scan does find what is there
            engine = MemoryEngine(store=f"sqlite:///{tmp_path / 'm.db'}", embedder="fake")
        else:
            db = engine.store.db
            assert _scan_mongo(db, alice_secrets) == []
            assert _scan_mongo(db, bob_secrets)
        assert sorted(r.content for r in engine.list_items(BOB, limit=100)) == bob_before
        assert bob_secrets[2] in engine.pre_turn(bob_secrets[2], BOB.with_thread("t-bob-0")).prompt
        assert engine.search("office opens", Scope(agent_wallet=AGENT))[0]
    finally:
        pinata.__exit__(None, None, None)
        if engine is not engine_on_each_store:
            engine.close()


def test_forget_over_rest_and_the_cli(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from manowar_memory.cli import cli

    path = tmp_path / "m.db"
    with MemoryEngine(store=f"sqlite:///{path}", embedder="fake") as engine:
        _two_users(engine)
        keys = ApiKeys([{"sha256": hash_key("k-al"), "agentWallet": AGENT, "userAddress": "alice"},
                        {"sha256": hash_key("k-a"), "agentWallet": AGENT}])
        http = TestClient(create_app(engine, keys=keys))
        r = http.post("/api/memory/forget", headers={"X-API-Key": "k-al"}, json={"userAddress": "bob"})
        assert r.status_code == 403  # a user key erases its own user only
        r = http.post("/api/memory/forget", headers={"X-API-Key": "k-al"}, json={})
        assert r.status_code == 200 and r.json()["memories"] == 1, r.text
        assert engine.list_items(ALICE) == [item for item in engine.list_items(ALICE) if item.user_address is None]
        assert [i.user_address for i in engine.list_items(BOB)].count("bob") == 1
    result = CliRunner().invoke(cli, ["forget", "--agent", AGENT, "--user", "bob", "--store", f"sqlite:///{path}",
                                      "--yes"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["memories"] == 1
    with MemoryEngine(store=f"sqlite:///{path}", embedder="fake") as engine:
        assert [i.user_address for i in engine.list_items(BOB)] == [None]  # only the shared row is left


def test_the_forget_tool_is_offered_only_when_the_application_picks_its_group() -> None:
    from manowar_memory.tools import catalog

    assert "memory_forget" not in {d.name for d in catalog(["memory", "items", "jobs", "notes"])}
    assert "memory_forget" not in {d.name for d in catalog()}
    with MemoryEngine(store="sqlite:///:memory:", embedder="fake") as engine:
        _two_users(engine)
        tools = {t.name: t for t in memory_tools(engine.scoped(BOB), ["memory", "erasure"])}
        with pytest.raises(ToolCallError, match="confirm"):
            tools["memory_forget"].call()
        out = tools["memory_forget"].call(confirm=True)
        assert out["forgotten"] is True and out["memories"] == 1
        assert [r.user_address for r in engine.list_items(BOB)] == [None]
        assert [r.user_address for r in engine.list_items(ALICE)].count("alice") == 1
