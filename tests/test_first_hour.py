"""A new user's first commands, with no flags: the best local model installed is used, so recall
finds a memory by meaning; rows written keyword-only are found after `manowar reembed`. The same
through `manowar mcp` started as its printed client configuration says, and through `manowar serve`.

The question shares no word with the memory: keyword-only recall misses it (checked by the CLI test
with ``--embedder none``; the server tests fail the same way with MANOWAR_EMBEDDER=none in the
child's environment)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest
from click.testing import CliRunner

from manowar_memory.cli import cli
from manowar_memory.embeddings import EMBEDDER_ENV, installed_local_embedder
from manowar_memory.engine import NO_EMBEDDER

from test_server import stop

pytestmark = [pytest.mark.local_model, pytest.mark.xdist_group("onnx-export")]

QUESTION = "what time is the daily meeting?"
MEMORY = "Standup is at 9:30"
#: What the test adds to a server's environment: the module's model cache, and no network.
TEST_ENV = ("MANOWAR_CACHE_DIR", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
STARTUP_DEADLINE_S = 180.0  # generous: the first start may export the ONNX model


@pytest.fixture(scope="module")
def model_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One ONNX export for the module, outside the user's cache."""
    return tmp_path_factory.mktemp("first-hour-cache")


@pytest.fixture
def new_user(tmp_path: Path, model_cache: Path, monkeypatch: pytest.MonkeyPatch,
             unavailable: Callable[[str], NoReturn]) -> Iterator[CliRunner]:
    """No MANOWAR_EMBEDDER, a fresh $MANOWAR_HOME (the default store), a local model installed."""
    monkeypatch.delenv(EMBEDDER_ENV, raising=False)
    monkeypatch.setenv("MANOWAR_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("MANOWAR_CACHE_DIR", str(model_cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    (tmp_path / "home").mkdir()
    if installed_local_embedder() is None:
        # CI installs every extra: there a missing model is a broken install, not a skip
        unavailable("no local embedder is installed (pip install 'manowar-memory[onnx]')")
    yield CliRunner()


def _ok(runner: CliRunner, *args: str) -> str:
    result = runner.invoke(cli, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def test_remember_then_recall_by_meaning_with_no_flags(new_user: CliRunner) -> None:
    assert "stored vec_" in _ok(new_user, "remember", "Standup is at 9:30", "--agent", "me")
    recalled = _ok(new_user, "recall", QUESTION, "--agent", "me")
    assert "Standup is at 9:30" in recalled
    assert "vector lane disabled" not in recalled
    # the words alone do not find it: it was found by meaning
    assert "Standup is at 9:30" not in _ok(new_user, "recall", QUESTION, "--agent", "me", "--embedder", "none")


def test_a_row_written_keyword_only_is_found_after_reembed(new_user: CliRunner) -> None:
    _ok(new_user, "remember", "Standup is at 9:30", "--agent", "me", "--embedder", "none")
    assert "Standup is at 9:30" not in _ok(new_user, "recall", QUESTION, "--agent", "me")
    assert "embedded 1 rows with local:all-MiniLM-L6-v2" in _ok(new_user, "reembed")
    assert "Standup is at 9:30" in _ok(new_user, "recall", QUESTION, "--agent", "me")
    assert "embedded 0 rows" in _ok(new_user, "reembed")  # resumable: nothing left to do


def _server_env(config_env: dict[str, str]) -> dict[str, str]:
    """``config_env`` plus the test's model cache and offline flags, never MANOWAR_EMBEDDER: the
    embedder is the server's default choice."""
    env = {**config_env, **{name: os.environ[name] for name in TEST_ENV}}
    assert EMBEDDER_ENV not in env
    return env


async def test_mcp_started_from_its_printed_config_recalls_by_meaning(new_user: CliRunner, tmp_path: Path) -> None:
    """`manowar mcp --print-config claude` with no --embedder, started as a client would (its command,
    args and env over the SDK's default environment, which has no MANOWAR_EMBEDDER), finds the
    standup by meaning. With MANOWAR_EMBEDDER=none added to the env it fails: keyword-only misses it."""
    pytest.importorskip("mcp")
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    store = f"sqlite:///{tmp_path / 'mcp.db'}"
    printed = new_user.invoke(cli, ["mcp", "--print-config", "claude", "--agent", "me", "--user", "alice",
                                    "--store", store])
    assert printed.exit_code == 0, printed.output
    entry = json.loads(printed.stdout)["mcpServers"]["manowar-memory"]
    assert EMBEDDER_ENV not in entry["env"]  # the documented config leaves the choice to the server
    params = StdioServerParameters(command=entry["command"], args=entry["args"], env=_server_env(entry["env"]))
    with (tmp_path / "mcp-stderr.log").open("w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            stored = await session.call_tool("memory_remember", {"content": MEMORY})
            assert not stored.is_error, stored.content
            found = await session.call_tool("memory_search", {"query": QUESTION, "k": 3})
            assert not found.is_error, found.content
            result: dict[str, Any] = found.structured_content or {}
    log = (tmp_path / "mcp-stderr.log").read_text()
    assert MEMORY in [m["text"] for m in result["memories"]], (result, log[-2000:])
    assert NO_EMBEDDER not in result["degradations"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_serve_with_no_embedder_flag_recalls_by_meaning(new_user: CliRunner, tmp_path: Path) -> None:
    """`manowar serve` with no --embedder and no MANOWAR_EMBEDDER: a memory remembered over REST is
    found by a question that shares none of its words. With MANOWAR_EMBEDDER=none in the child's
    env it fails: keyword-only misses it."""
    httpx = pytest.importorskip("httpx")
    pytest.importorskip("uvicorn")
    from manowar_memory.server.auth import hash_key

    key = "key-first-hour"
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps([{"sha256": hash_key(key), "agentWallet": "me"}]))
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k != EMBEDDER_ENV}
    errlog = tmp_path / "serve-stderr.log"
    with errlog.open("w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "manowar_memory.cli", "serve", "--port", str(port),
                                 "--keys", str(keys), "--store", f"sqlite:///{tmp_path / 'serve.db'}"],
                                stdout=subprocess.DEVNULL, stderr=err, env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + STARTUP_DEADLINE_S
        while True:
            assert proc.poll() is None, f"manowar serve exited: {errlog.read_text()[-2000:]}"
            try:
                httpx.get(f"{base}/healthz", timeout=2)
                break
            except httpx.HTTPError:
                assert time.monotonic() < deadline, f"manowar serve did not start: {errlog.read_text()[-2000:]}"
                time.sleep(0.2)
        auth = {"Authorization": f"Bearer {key}"}
        with httpx.Client(base_url=f"{base}/api/memory", headers=auth, timeout=60) as client:
            stored = client.post("/remember", json={"content": MEMORY, "userAddress": "alice"})
            assert stored.status_code == 200, stored.text
            found = client.post("/items/search", json={"query": QUESTION, "limit": 3, "userAddress": "alice"})
            assert found.status_code == 200, found.text
    finally:
        stop(proc)
    result = found.json()
    assert MEMORY in [m["text"] for m in result["memories"]], (result, errlog.read_text()[-2000:])
    assert NO_EMBEDDER not in result["degradations"]
