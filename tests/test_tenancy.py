"""One app, many users: blank ids are refused on every surface, a conversation needs a user
unless the engine is single-tenant, jobs act only on the caller's rows, and ``forget`` erases a
user from every table and collection."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from manowar_memory import MemoryEngine, Scope, ScopeError
from manowar_memory.errors import ConfigurationError

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
