"""One REST server for many users, as a multi-user app runs it: one engine, one app object, a key
per user, the user chosen by the key of each request.

Every generated user writes a secret fact and a secret turn, writes and hard-deletes a third
secret, runs every maintenance job a user key is offered (archives pinned to a fake IPFS
service, which this app allows; consolidation, decay, patterns), and asks for other users' rows
by id. Each pinned archive must hold only its user's rows. Then every user reads through every read route:
no user may see another's secret (0 leaks), every user finds its own (0 lost writes), and no
deleted secret comes back (0 resurrected rows), on SQLite and MongoDB. The LangChain and
LlamaIndex side of the same app (one store, one agent, one retriever) is
``tests/langchain/test_lc_multiuser.py``."""

from __future__ import annotations

import random
import re
from typing import Any

import pytest

from manowar_memory import MemoryEngine

pytest.importorskip("fastapi")

from fastapi.testclient import TestClient

from manowar_memory.server.app import create_app
from manowar_memory.server.auth import ApiKeys, hash_key
from manowar_memory.testing.provider_servers import PinataServer

USERS = 150  # per store (with the MCP servers below and the LangChain app, 500 users a run)
AGENT = "app"
JOBS = ("archive_create", "consolidate", "decay_update", "patterns_extract")
SECRET = re.compile(r"zq[0-9a-f]{12}")


def _users(n: int, seed: int = 2027) -> list[str]:
    """``n`` distinct user ids with case, accent and look-alike variants that must not collide."""
    base = ["ana", "Ana", "ANA", "zoë", "zoe\u0308", "ﬁle", "file", "Straße", "STRASSE", "用户", "0xAbC9", "0xabc9"]
    rng = random.Random(seed)
    out = list(dict.fromkeys(base))
    while len(out) < n:
        candidate = "".join(rng.choice("abcXYZ019-_ñλЖ中") for _ in range(rng.randint(3, 9)))
        if candidate not in out:
            out.append(candidate)
    return out[:n]


@pytest.fixture
def pinata(monkeypatch: pytest.MonkeyPatch) -> Any:
    with PinataServer(jwt="jwt-app") as server:
        monkeypatch.setenv("PINATA_JWT", "jwt-app")
        monkeypatch.setenv("PINATA_API_URL", server.url)
        monkeypatch.setenv("PINATA_MAX_ATTEMPTS", "1")
        yield server


def _pinned(requests: list[Any]) -> str:
    """The text of pinned archives (decompressed where the archive was compressed)."""
    import base64
    import gzip

    out = []
    for req in requests:
        content = ((req.json or {}).get("pinataContent") or {})
        text = content.get("content", "")
        if content.get("compressed"):
            text = gzip.decompress(base64.b64decode(text)).decode("utf-8")
        out.append(req.body.decode("utf-8", "replace") + text)
    return "\n".join(out)


def test_one_rest_server_serves_many_users_without_leaks_lost_writes_or_resurrections(
        engine_on_each_store: MemoryEngine, pinata: Any) -> None:
    engine = engine_on_each_store
    users = _users(USERS)
    keys = {user: f"key-{i}" for i, user in enumerate(users)}
    http = TestClient(create_app(engine, allow_pin=True, keys=ApiKeys(
        [{"sha256": hash_key(key), "agentWallet": AGENT, "userAddress": user} for user, key in keys.items()])))
    rng = random.Random(27)
    kept: dict[str, tuple[str, str]] = {u: (f"zq{rng.getrandbits(48):012x}", f"zq{rng.getrandbits(48):012x}")
                                        for u in users}
    deleted: dict[str, str] = {u: f"zq{rng.getrandbits(48):012x}" for u in users}
    owner = {s: u for u, pair in kept.items() for s in pair} | {s: u for u, s in deleted.items()}
    ids: dict[str, str] = {}
    leaks: list[tuple[str, str, str]] = []
    pins = 0

    def call(user: str, method: str, path: str, **kw: Any) -> Any:
        return http.request(method, f"/api/memory{path}", headers={"X-API-Key": keys[user]}, **kw)

    def read(user: str, path: str, body: dict[str, Any]) -> str:
        r = call(user, "POST", path, json=body)
        assert r.status_code == 200, (path, r.text)
        return r.text

    for i, user in enumerate(users):
        fact, said = kept[user]
        r = call(user, "POST", "/remember", json={"content": f"My vault code is {fact}."})
        assert r.status_code == 200, r.text
        ids[user] = r.json()["id"]
        r = call(user, "POST", "/turns/record", json={
            "threadId": f"t{i}", "extract_facts": False,
            "messages": [{"role": "user", "content": f"My locker code is {said}."},
                         {"role": "assistant", "content": "Noted."}]})
        assert r.status_code == 200, r.text
        gone = call(user, "POST", "/remember", json={"content": f"My old alarm code was {deleted[user]}."}).json()["id"]
        assert call(user, "DELETE", f"/items/{gone}", params={"hardDelete": "true"}).status_code == 200
        for job in JOBS:
            r = call(user, "POST", "/jobs", json={"type": job, "params": {"pin": True} if job == "archive_create" else {}})
            assert r.status_code == 200 and r.json()["status"] == "completed", (job, r.text)
        pinned = _pinned(pinata.requests[pins:])
        pins = len(pinata.requests)
        assert fact in pinned  # the archive was pinned, with this user's fact
        leaks += [(user, "pinned archive", owner.get(s, "?")) for s in SECRET.findall(pinned)
                  if owner.get(s) != user or s == deleted[user]]

    lost: list[tuple[str, str]] = []
    resurrected: list[tuple[str, str]] = []
    others = list(ids.items())
    for i, user in enumerate(users):
        fact, said = kept[user]
        seen = {
            "items/search": read(user, "/items/search", {"query": "code", "limit": 50}),
            "context/assemble": read(user, "/context/assemble", {
                "query": "vault locker alarm code", "threadId": f"t{i}", "budget_chars": 20_000, "max_items": 50}),
            "layers/search": read(user, "/layers/search", {"query": "code", "limit": 50}),
        }
        # an attacker's probe: every other user's row by id, through this user's key
        probes = [(other, call(user, "GET", f"/items/{row}")) for other, row in rng.sample(others, 5) if other != user]
        seen["items/{id}"] = " ".join(r.text for _, r in probes if r.status_code == 200)
        assert all(r.status_code == 404 for _, r in probes), [r.text for _, r in probes if r.status_code != 404]
        for route, text in seen.items():
            for secret in SECRET.findall(text):
                if owner.get(secret) != user:
                    leaks.append((user, route, owner.get(secret, "?")))
                elif secret == deleted[user]:
                    resurrected.append((user, route))
        if fact not in seen["items/search"]:
            lost.append((user, "fact"))
        if said not in seen["context/assemble"]:
            lost.append((user, "turn"))
    assert leaks == []
    assert lost == []
    assert resurrected == []


MCP_USERS = 50  # per store: one MCP server each, as an app that hosts a server per user starts them


async def test_one_mcp_server_per_user_over_one_engine_without_leaks_or_lost_writes(
        engine_on_each_store: MemoryEngine) -> None:
    """Every user gets its own MCP server (``build_mcp_server`` with the user's scope, the job tools
    on, pinning off) over the app's one engine, driven in-process by the MCP SDK's client. Each
    writes a secret and runs every job tool it is offered; then each reads through its search and
    context tools: only its own secret, always found."""
    pytest.importorskip("mcp")
    from mcp.client import Client

    from manowar_memory import Scope
    from manowar_memory.server.mcp import build_mcp_server

    engine = engine_on_each_store
    users = _users(MCP_USERS, seed=31)
    rng = random.Random(31)
    secrets = {u: f"zq{rng.getrandbits(48):012x}" for u in users}
    owner = {s: u for u, s in secrets.items()}
    servers = {u: build_mcp_server(engine, scope=Scope(agent_wallet=AGENT, user_address=u, thread_id=f"t{i}"),
                                   groups=("memory", "items", "jobs"))
               for i, u in enumerate(users)}
    job_tools: set[str] = set()
    for user in users:
        async with Client(servers[user]) as client:
            offered = {t.name for t in (await client.list_tools()).tools}
            job_tools = offered & {"memory_archive_create", "memory_consolidate", "memory_decay_update",
                                   "memory_patterns_extract"}
            done = await client.call_tool("memory_remember", {"content": f"My vault code is {secrets[user]}."})
            assert not done.is_error, done
            for name in sorted(job_tools):
                ran = await client.call_tool(name, {})
                assert not ran.is_error, (name, ran)
            refused = await client.call_tool("memory_archive_create", {"pin": True})
            assert refused.is_error  # publishing is the application's choice, never the model's
    assert "memory_archive_create" in job_tools and len(job_tools) >= 3

    leaks: list[tuple[str, str]] = []
    lost: list[str] = []
    for user in users:
        async with Client(servers[user]) as client:
            texts = [str((await client.call_tool(name, args)).content)
                     for name, args in (("memory_search", {"query": "vault code", "k": 20}),
                                        ("memory_context", {"query": "vault code"}))]
        seen = " ".join(texts)
        leaks += [(user, owner.get(s, "?")) for s in SECRET.findall(seen) if owner.get(s) != user]
        if secrets[user] not in texts[0] or secrets[user] not in texts[1]:
            lost.append(user)
    assert leaks == []
    assert lost == []
