"""The REST API as a real process: `manowar serve` on a free local port, called over real HTTP,
on SQLite and MongoDB, with cross-tenant attempts and a schemathesis run over the whole spec."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from manowar_memory.server.auth import hash_key, presented_key

# one worker runs this module under pytest-xdist: its module-scoped fixtures are built once
pytestmark = pytest.mark.xdist_group("server-processes")

KEY_A, KEY_ALICE, KEY_B = "key-agent-a", "key-agent-a-alice", "key-agent-b"
KEY_DANA = "key-agent-a-dana"
KEYS = [{"sha256": hash_key(KEY_A), "agentWallet": "agent-a"},
        {"sha256": hash_key(KEY_ALICE), "agentWallet": "agent-a", "userAddress": "alice"},
        {"sha256": hash_key(KEY_DANA), "agentWallet": "agent-a", "userAddress": "dana"},
        {"sha256": hash_key(KEY_B), "agentWallet": "agent-b"}]
MANOWAR = [sys.executable, "-m", "manowar_memory.cli"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(args: list[str], port: int, env: dict[str, str] | None = None, path: str = "/healthz") -> subprocess.Popen:
    proc = subprocess.Popen([*MANOWAR, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, **(env or {})})
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"server exited: {proc.stderr.read().decode()[-2000:]}")
        try:
            httpx.get(f"http://127.0.0.1:{port}{path}", timeout=1)
            return proc
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise AssertionError("server did not start")


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def mongo_url(uri: str, db: str) -> str:
    parts = urlsplit(uri)
    return urlunsplit((parts.scheme, parts.netloc, "/" + db, parts.query, parts.fragment))


def serve_on_store(request: pytest.FixtureRequest, tmp: Path, env: dict[str, str] | None = None,
                   kind: str | None = None, args: tuple[str, ...] = ()) -> Iterator[str]:
    """``manowar serve`` on ``kind`` (default the request's param: ``sqlite`` or ``mongo``) with the test keys
    and ``args``; yields its URL."""
    kind = kind or request.param
    keys = tmp / "keys.json"
    keys.write_text(json.dumps(KEYS))
    db = f"manowar_test_{uuid.uuid4().hex[:12]}"
    if kind == "sqlite":
        store = f"sqlite:///{tmp / 'memory.db'}"
    else:
        store = mongo_url(request.getfixturevalue("mongo_uri"), db)
        mongo = request.getfixturevalue("mongo_client")
    port = free_port()
    proc = start(["serve", "--port", str(port), "--store", store, "--embedder", "fake", "--keys", str(keys), *args],
                 port, env=env)
    yield f"http://127.0.0.1:{port}"
    stop(proc)
    if kind == "mongo":
        mongo.drop_database(db)


@pytest.fixture(scope="module", params=["sqlite", pytest.param("mongo", marks=pytest.mark.mongo)])
def base_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    yield from serve_on_store(request, tmp_path_factory.mktemp("server"))


def client(base: str, key: str | None) -> httpx.Client:
    return httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"} if key else {}, timeout=30)


def test_loop_items_and_jobs_over_http(base_url: str) -> None:
    a = client(base_url, KEY_A)
    r = a.post("/api/memory/remember", json={"content": "The user prefers green tea", "factType": "preference"})
    assert r.status_code == 200, r.text
    fact_id = r.json()["id"]
    r = a.post("/api/memory/turns/record", json={"threadId": "t1", "userAddress": "ana", "messages": [
        {"role": "user", "content": "I am planning a trip to Lisbon in May"},
        {"role": "assistant", "content": "Lisbon in May is lovely."}], "extractFacts": False})
    assert r.status_code == 200 and r.json()["threadId"] == "t1"
    r = a.post("/api/memory/context/assemble", json={"query": "what tea does the user like?", "threadId": "t1",
                                                     "userAddress": "ana"})
    assert r.status_code == 200 and "green tea" in r.json()["prompt"]
    assert "UNTRUSTED" in r.json()["prompt"]
    r = a.post("/api/memory/loop", json={"threadId": "t1", "userAddress": "ana",
                                         "messages": [{"role": "user", "content": "and tea?"}],
                                         "query": "Lisbon trip", "extractFacts": False})
    assert r.status_code == 200 and r.json()["recorded"]["threadId"] == "t1" and "Lisbon" in r.json()["context"]["prompt"]
    hits = a.post("/api/memory/items/search", json={"query": "green tea", "limit": 3}).json()["memories"]
    assert hits[0]["id"] == fact_id
    assert a.get(f"/api/memory/items/{fact_id}").json()["memory"]["text"] == "The user prefers green tea"
    r = a.patch(f"/api/memory/items/{fact_id}", json={"content": "The user prefers jasmine tea"})
    assert r.status_code == 200 and r.json()["memory"]["text"] == "The user prefers jasmine tea"
    r = a.patch(f"/api/memory/items/{fact_id}", json={"metadata": {"trust": "system"}})
    assert r.status_code == 400 and "reserved" in r.json()["detail"]
    assert r.headers["content-type"].startswith("application/problem+json")
    r = a.post(f"/api/memory/conflicts/{fact_id}/resolve", json={"resolution": "keep", "reason": "checked"})
    assert r.status_code == 200 and r.json()["resolved"] is True
    job = a.post("/api/memory/jobs", json={"type": "decay_update", "params": {"halfLifeDays": 10}}).json()
    assert job["status"] == "completed" and job["agentWallet"] == "agent-a"
    assert a.get(f"/api/memory/jobs/{job['jobId']}").json()["jobId"] == job["jobId"]
    assert a.post("/api/memory/jobs", json={"type": "decay_update", "execution": "temporal"}).status_code == 400
    assert a.get("/api/memory/patterns").json() == {"patterns": []}
    assert a.get("/api/memory/patterns/nope").status_code == 404
    assert a.get("/api/memory/skills").json() == {"skills": []}
    assert a.get("/api/memory/skills/nope").status_code == 404
    assert len(a.get("/api/memory/workflows").json()["workflows"]) == 4
    assert a.get("/api/memory/workflows/agent_memory_loop").json()["steps"][0]["path"].endswith("context/assemble")
    vid = a.post("/api/memory/vector-index", json={"content": "Docs live in the wiki", "source": "knowledge"}).json()
    assert vid["success"] is True
    assert a.post("/api/memory/vector-search", json={"query": "wiki docs"}).json()["results"][0]["id"] == vid["vectorId"]
    assert a.post("/api/memory/search", json={"query": "jasmine tea"}).json()["memories"][0]["id"] == fact_id
    assert a.post("/api/memory/layers/search", json={"query": "wiki", "layers": ["vectors"]}).json()["memories"]
    assert a.get("/api/memory/agent-a").json()["memories"][0]["source"] == "fact"
    assert a.post("/api/memory/transcript-store", json={"threadId": "t2", "userAddress": "ana", "messages": [
        {"role": "user", "content": "hello there"}]}).status_code == 200
    ana = {"userAddress": "ana"}
    assert a.get("/api/memory/transcript-get/t2", params=ana).json()["messages"][0]["content"] == "hello there"
    assert a.post("/api/memory/rerank", json={"query": "q", "documents": ["d"]}).status_code == 400  # none configured
    assert a.get("/api/memory/sessions/t2/working", params=ana).json()["messages"][0]["content"] == "hello there"
    assert a.get("/api/memory/sessions/none/working").status_code == 404
    ev = a.post("/api/memory/evals/runs", json={"k": 3, "testCases": [
        {"query": "jasmine tea", "expectedIds": [fact_id]}, {"query": "wiki docs", "expectedContents": ["the wiki"]},
        {"query": "zebra", "expectedContents": ["no such memory"]}]}).json()
    assert ev["cases"] == 3 and ev["hitRate"] == pytest.approx(2 / 3) and ev["results"][0]["rank"] == 1
    r = a.delete(f"/api/memory/items/{fact_id}", params={"hardDelete": "true"})
    assert r.status_code == 200 and r.json()["deleted"] is True
    assert a.get(f"/api/memory/items/{fact_id}").status_code == 404
    assert httpx.get(f"{base_url}/readyz").json()["checks"] == {"store": "ok", "cache": "ok", "embedder": "ok"}
    assert httpx.get(f"{base_url}/openapi.json").json()["paths"]["/api/memory/context/assemble"]
    assert httpx.get(f"{base_url}/docs").status_code == 200


def test_keys_bad_requests_and_limits(base_url: str) -> None:
    r = httpx.post(f"{base_url}/api/memory/remember", json={"content": "x"})
    assert r.status_code == 401 and r.json()["status"] == 401
    assert client(base_url, "wrong").post("/api/memory/remember", json={"content": "x"}).status_code == 401
    a = client(base_url, KEY_A)
    r = a.post("/api/memory/turns/record", json={"messages": [{"role": "user", "content": "no thread"}]})
    assert r.status_code == 400 and "thread" in r.json()["detail"]
    r = a.post("/api/memory/remember", json={"content": "x", "filters": {"$where": "1"}})
    assert r.status_code == 400
    r = a.post("/api/memory/remember", json={"content": "x", "unknown": 1})
    assert r.status_code == 400 and r.json()["title"] == "Bad Request"
    r = a.post("/api/memory/remember", content=b'{"content": "' + b"x" * 1_100_000 + b'"}',
               headers={"content-type": "application/json"})
    assert r.status_code == 413
    r = a.post("/api/memory/remember", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 400 and "Traceback" not in r.text


def _is_problem(r: httpx.Response, status: int) -> bool:
    return (r.status_code == status and r.headers["content-type"].startswith("application/problem+json")
            and r.json()["status"] == status and "Traceback" not in r.text)


@pytest.mark.parametrize("path", ["/api/memory/context/assemble", "/api/memory/items/search",
                                  "/api/memory/remember", "/api/memory/turns/record"])
def test_every_malformed_body_gets_a_4xx_problem_document(base_url: str, path: str) -> None:
    """The lean hot route (context/assemble) and routes FastAPI parses answer alike: nesting past
    the limit and a body that is not UTF-8 get 400, a chunked body past the size limit 413."""
    a = client(base_url, KEY_A)
    json_type = {"content-type": "application/json"}
    for depth in (300, 5_000, 100_000):  # past the limit; past Python's recursion limit; far past it
        deep = b'{"query": "tea", "threadId": "t1", "layers": ' + b"[" * depth + b"]" * depth + b"}"
        r = a.post(path, content=deep, headers=json_type)
        assert _is_problem(r, 400), (depth, r.status_code, r.text[:300])
    brackets_in_a_string = b'{"query": "' + b"[" * 2_000 + b'", "threadId": "t1"}'
    assert a.post(path, content=brackets_in_a_string, headers=json_type).status_code in (200, 400)
    r = a.post(path, content='{"query": "caf\u00e9 cr\u00e8me", "threadId": "t1"}'.encode("latin-1"), headers=json_type)
    assert _is_problem(r, 400), r.text[:300]

    def chunks(total: int, size: int = 64 * 1024) -> Iterator[bytes]:
        yield b'{"query": "'
        for _ in range(total // size):
            yield b"x" * size
        yield b'"}'

    r = a.post(path, content=chunks(10_000_000), headers=json_type)  # no content-length: streamed
    assert "content-length" not in r.request.headers
    assert _is_problem(r, 413), r.text[:300]
    assert "larger than" in r.json()["detail"]


def test_a_small_chunked_body_is_still_read(base_url: str) -> None:
    a = client(base_url, KEY_A)
    r = a.post("/api/memory/context/assemble", content=iter([b'{"query": ', b'"green tea"}']),
               headers={"content-type": "application/json"})
    assert r.status_code == 200, r.text


def test_updating_a_fact_to_another_active_facts_text_is_a_409_conflict(base_url: str) -> None:
    a = client(base_url, KEY_A)
    tag = uuid.uuid4().hex[:8]
    first = a.post("/api/memory/remember", json={"content": f"The user's locker is {tag}-A"}).json()["id"]
    second = a.post("/api/memory/remember", json={"content": f"The user's locker is {tag}-B"}).json()["id"]
    r = a.patch(f"/api/memory/items/{second}", json={"content": f"The user's locker is {tag}-A"})
    assert _is_problem(r, 409), r.text
    assert r.json()["type"] == "urn:manowar:error:ConflictError" and "supersede or delete" in r.json()["detail"]
    assert a.get(f"/api/memory/items/{second}").json()["memory"]["text"] == f"The user's locker is {tag}-B"
    assert a.get(f"/api/memory/items/{first}").status_code == 200
    spec = httpx.get(f"{base_url}/openapi.json").json()
    assert "409" in spec["paths"]["/api/memory/items/{memoryId}"]["patch"]["responses"]


def test_patch_reads_the_scope_from_the_query_string_as_get_and_delete_do(base_url: str) -> None:
    a = client(base_url, KEY_A)
    mid = a.post("/api/memory/remember", json={"content": "alice's badge is 7731", "userAddress": "alice"}).json()["id"]
    assert a.get(f"/api/memory/items/{mid}", params={"userAddress": "alice"}).status_code == 200
    r = a.patch(f"/api/memory/items/{mid}", params={"userAddress": "alice"}, json={"content": "alice's badge is 7732"})
    assert r.status_code == 200, r.text
    assert r.json()["memory"]["text"] == "alice's badge is 7732"
    clash = a.patch(f"/api/memory/items/{mid}", params={"userAddress": "alice"},
                    json={"content": "x", "userAddress": "bob"})
    assert _is_problem(clash, 400) and "give it once" in clash.json()["detail"]
    assert a.get(f"/api/memory/items/{mid}", params={"userAddress": "alice"}).json()["memory"]["text"] == (
        "alice's badge is 7732")


def test_a_route_asked_with_another_method_is_405_not_an_agent_name(base_url: str) -> None:
    """GET on a POST-only route of the API is 405 with Allow; a path that only prefixes deeper
    routes is 404; an agent's own name still lists its facts."""
    a = client(base_url, KEY_A)
    for path, allowed in (("remember", "POST"), ("jobs", "POST"), ("forget", "POST"), ("loop", "POST")):
        r = a.get(f"/api/memory/{path}")
        assert _is_problem(r, 405), (path, r.text)
        assert r.headers["allow"] == allowed and "not GET" in r.json()["detail"]
    assert _is_problem(a.get("/api/memory/items"), 404)
    assert a.get("/api/memory/agent-a").status_code == 200


def test_assemble_answers_as_a_route_served_the_usual_way(base_url: str) -> None:
    """context/assemble skips FastAPI's per-request dependency solving (the hot path): its key
    reading, the order of its checks and its problem bodies must be those of items/search, a
    route with the same scope fields served the usual way."""
    headers = [{}, {"X-API-Key": KEY_A}, {"X-API-Key": ""}, {"X-API-Key": "wrong"}, {"Authorization": f"Bearer {KEY_A}"},
               {"Authorization": f"bearer  {KEY_A}"}, {"Authorization": f"Basic {KEY_A}"}, {"Authorization": "Bearer"},
               {"X-API-Key": "", "Authorization": f"Bearer {KEY_A}"}, {"X-API-Key": "wrong", "Authorization": f"Bearer {KEY_A}"},
               {"X-API-Key": KEY_ALICE}]
    bodies = [b'{"query": "tea"}', b"", b"{not json", b"[]", b'"tea"', b'{"query": 5}', b'{"query": "tea", "unknown": 1}',
              b'{"query": "tea", "agentWallet": "agent-b"}', b'{"query": "tea", "userAddress": "bob"}',
              b'{"query": "tea", "agent_id": "agent-a"}', b'{"query": "tea", "filters": {"$where": "1"}}',
              b'{"query": "tea", "mode": "local"}', b'{"query": "tea", "layers": ["nope"]}']
    types = ["application/json", "application/json; charset=utf-8", "application/merge-patch+json", "text/plain", None]
    too_large = b'{"query": "' + b"x" * 1_100_000 + b'"}'
    cases = [*((h, b, t) for h in headers for b in bodies for t in types), *((h, too_large, None) for h in headers[:4])]
    compared = 0
    with httpx.Client(base_url=base_url, timeout=30) as c:
        for h, body, ctype in cases:
            sent = {**h, **({"content-type": ctype} if ctype else {})}
            got = c.post("/api/memory/context/assemble", content=body, headers=sent)
            usual = c.post("/api/memory/items/search", content=body, headers=sent)
            assert got.status_code == usual.status_code, (sent, body[:60], got.text, usual.text)
            if got.status_code == 200:
                continue
            compared += 1
            assert got.headers["content-type"] == usual.headers["content-type"] == "application/problem+json"
            assert got.headers.get("www-authenticate") == usual.headers.get("www-authenticate")
            mine, theirs = got.json(), usual.json()
            assert mine["instance"] == "/api/memory/context/assemble"
            assert {**mine, "instance": None} == {**theirs, "instance": None}, (sent, body[:60])
    assert compared > 400
    doc = httpx.get(f"{base_url}/openapi.json").json()
    op, usual_op = doc["paths"]["/api/memory/context/assemble"]["post"], doc["paths"]["/api/memory/items/search"]["post"]
    assert op["operationId"] == "assemble_api_memory_context_assemble_post"
    assert op["security"] == usual_op["security"] and len(op["security"]) == 2
    assert op["requestBody"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/AssembleBody"}
    assert sorted(op["responses"]) == sorted(usual_op["responses"]) == ["200", "400", "401", "403", "404", "413"]
    assert op["responses"]["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/PreTurnResult"}
    assert op["responses"]["400"] == usual_op["responses"]["400"]


def test_presented_key_reads_the_documented_schemes() -> None:
    assert presented_key({"x-api-key": "k1", "authorization": "Bearer k2"}) == "k1"
    assert presented_key({"x-api-key": "", "authorization": "bEaReR  k2 "}) == "k2"
    for headers in ({}, {"authorization": "Basic k2"}, {"authorization": "Bearer"}, {"authorization": "Bearer   "},
                    {"x-api-key": ""}):
        assert presented_key(headers) is None


def test_a_key_never_reaches_another_agent(base_url: str) -> None:
    a, b, alice = client(base_url, KEY_A), client(base_url, KEY_B), client(base_url, KEY_ALICE)
    secret = f"agent a secret {uuid.uuid4().hex}"
    own = a.post("/api/memory/remember", json={"content": secret}).json()["id"]
    alice_row = alice.post("/api/memory/remember", json={"content": f"alice private {secret}"}).json()["id"]
    a.post("/api/memory/transcript-store", json={"threadId": "t-secret", "messages": [{"role": "user", "content": secret}]})
    leaks = 0
    # naming agent A (or another user) in the body is refused
    for path, body in [("/api/memory/remember", {"content": "x", "agentWallet": "agent-a"}),
                       ("/api/memory/context/assemble", {"query": secret, "agent_id": "agent-a"}),
                       ("/api/memory/items/search", {"query": secret, "agentWallet": "agent-a"})]:
        assert b.post(path, json=body).status_code == 403
    assert alice.post("/api/memory/items/search", json={"query": secret, "userAddress": "bob"}).status_code == 403
    assert b.get("/api/memory/agent-a").status_code == 403
    assert b.get(f"/api/memory/items/{own}", params={"agentWallet": "agent-a"}).status_code == 403
    # A's row ids in B's paths are not found, and nothing changed
    for rid in (own, alice_row):
        assert b.get(f"/api/memory/items/{rid}").status_code == 404
        assert b.patch(f"/api/memory/items/{rid}", json={"content": "pwned"}).status_code == 404
        assert b.post(f"/api/memory/conflicts/{rid}/resolve", json={"resolution": "supersede"}).status_code == 404
        assert b.delete(f"/api/memory/items/{rid}", params={"hardDelete": "true"}).status_code == 404
    # an agent-level key of A cannot change alice's row (a user row it does not own)
    assert a.patch(f"/api/memory/items/{alice_row}", json={"content": "pwned"}).status_code == 404
    assert b.get("/api/memory/sessions/t-secret/working").status_code == 404
    assert b.post("/api/memory/evals/runs", json={"testCases": [{"query": secret, "expectedIds": [own]}]}
                  ).json()["hitRate"] == 0
    job = a.post("/api/memory/jobs", json={"type": "consolidate", "dryRun": True}).json()["jobId"]
    assert b.get(f"/api/memory/jobs/{job}").status_code == 404
    # B's reads never show A's rows
    for path, body in [("/api/memory/items/search", {"query": secret}), ("/api/memory/search", {"query": secret}),
                       ("/api/memory/context/assemble", {"query": secret}),
                       ("/api/memory/vector-search", {"query": secret}),
                       ("/api/memory/loop", {"query": secret})]:
        leaks += secret in b.post(path, json=body).text
    leaks += secret in b.get("/api/memory/agent-b").text
    # alice's row stays hers: the agent key sees the shared row only, alice both
    leaks += f"alice private {secret}" in a.post("/api/memory/items/search", json={"query": secret}).text
    assert f"alice private {secret}" in alice.post("/api/memory/items/search", json={"query": secret}).text
    assert leaks == 0
    assert a.get(f"/api/memory/items/{own}").json()["memory"]["text"] == secret


def test_no_keys_refuses_a_public_address(tmp_path: Path) -> None:
    env = {**os.environ, "MANOWAR_API_KEYS": ""}
    out = subprocess.run([*MANOWAR, "serve", "--host", "0.0.0.0", "--port", str(free_port()), "--store",
                          f"sqlite:///{tmp_path / 'm.db'}"], capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 2 and "refusing to listen on 0.0.0.0 without API keys" in out.stderr


def test_no_keys_on_loopback_names_the_agent_in_the_body(tmp_path: Path) -> None:
    port = free_port()
    proc = start(["serve", "--port", str(port), "--store", f"sqlite:///{tmp_path / 'm.db'}", "--embedder", "fake"],
                 port, env={"MANOWAR_API_KEYS": ""})
    try:
        c = client(f"http://127.0.0.1:{port}", None)
        assert c.post("/api/memory/remember", json={"content": "x"}).status_code == 400  # agentWallet required
        assert c.post("/api/memory/remember", json={"content": "hi", "agentWallet": "a1"}).status_code == 200
    finally:
        stop(proc)


@pytest.fixture(scope="module")
def sqlite_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    yield from serve_on_store(request, tmp_path_factory.mktemp("spec"), kind="sqlite")


@pytest.mark.slow
def test_schemathesis_finds_no_server_error(sqlite_url: str) -> None:
    """The spec is the same on every store, so it is fuzzed once, on SQLite."""
    base_url = sqlite_url
    st = shutil.which("schemathesis", path=str(Path(sys.executable).parent)) or shutil.which("schemathesis")
    assert st is not None, "schemathesis is installed by the dev extra (scripts/test.sh)"
    out = subprocess.run(
        [st, "run", f"{base_url}/openapi.json", "-H", f"Authorization: Bearer {KEY_A}", "--max-examples", "4",
         "-c", ("not_a_server_error,response_schema_conformance,status_code_conformance,"
                "content_type_conformance"), "--phases", "examples,coverage,fuzzing", "--no-color", "--seed", "1",
         "--request-timeout", "20"],
        capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-2000:]
