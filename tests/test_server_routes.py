"""The REST API's session, archive, schedule and Temporal routes on a real `manowar serve` process
over real HTTP, on SQLite and MongoDB, with cross-tenant attempts (a local Pinata-shaped server
stands in for IPFS pinning; a real Temporal dev server and `manowar worker` run temporal jobs)."""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("fastapi")

from manowar_memory.testing.provider_servers import PinataServer

from test_server import KEY_A, KEY_ALICE, KEY_B, KEY_DANA, KEYS, MANOWAR, client, free_port, serve_on_store, start, stop

# one worker runs this module under pytest-xdist: its module-scoped fixtures are built once
pytestmark = pytest.mark.xdist_group("server-routes")

JWT = "routes-test-jwt"


@pytest.fixture(scope="module")
def pinata() -> Iterator[PinataServer]:
    with PinataServer(jwt=JWT) as server:
        yield server


@pytest.fixture(scope="module", params=["sqlite", pytest.param("mongo", marks=pytest.mark.mongo)])
def base_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
             pinata: PinataServer) -> Iterator[str]:
    env = {"PINATA_JWT": JWT, "PINATA_API_URL": pinata.url, "PINATA_MAX_ATTEMPTS": "1"}
    # the application's choices: agent keys run agent-wide maintenance and schedules, archives may be pinned
    yield from serve_on_store(request, tmp_path_factory.mktemp("routes"), env=env, args=("--agent-jobs", "--allow-pin"))


def test_transcripts_working_sessions_and_compress(base_url: str) -> None:
    # a conversation needs a user: dana's key of agent-a records it
    a, b, alice = client(base_url, KEY_DANA), client(base_url, KEY_B), client(base_url, KEY_ALICE)
    thread = f"s-{uuid.uuid4().hex[:8]}"
    r = a.post("/api/memory/transcripts/index", json={"sessionId": thread, "modelUsed": "m1", "tokenCount": 42,
                                                     "messages": [
        {"role": "user", "content": "I am learning to play the cello. My name is Dana."},
        {"role": "assistant", "content": "Practising scales daily helps with the cello."},
        {"role": "tool", "content": "ignored tool output"}]})
    assert r.status_code == 200, r.text
    assert r.json() == {"indexed": True, "messageCount": 3, "vectorCount": 2}
    hits = a.post("/api/memory/items/search", json={"query": "cello scales", "layers": ["vectors"], "limit": 5}).json()
    session_rows = [h for h in hits["memories"] if h["source"] == "session"]
    assert {h["text"] for h in session_rows} >= {"Practising scales daily helps with the cello."}
    r = a.post("/api/memory/transcripts/index", json={"threadId": "blank", "messages": [{"role": "user", "content": " "}]})
    assert r.json() == {"indexed": False, "messageCount": 1, "vectorCount": 0}
    assert a.get("/api/memory/sessions/blank/working").status_code == 404  # nothing was written
    r = a.post("/api/memory/transcripts/index", json={"sessionId": "x", "threadId": "y",
                                                     "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 400 and "differs" in r.json()["detail"]
    assert a.post("/api/memory/transcripts/index", json={"messages": [{"role": "user", "content": "hi"}]}
                  ).status_code == 400

    # PATCH working: append and merge, then replace
    r = a.patch(f"/api/memory/sessions/{thread}/working", json={"context": ["note: tune the A string"],
                                                                "entities": {"instrument": "cello"},
                                                                "state": {"step": 1}, "metadata": {"lesson": 3}})
    assert r.status_code == 200, r.text
    wm = r.json()["workingMemory"]
    assert wm["context"][-1] == "note: tune the A string" and len(wm["context"]) == 3
    assert wm["entities"] == {"instrument": "cello"} and wm["state"]["step"] == 1
    assert r.json()["sessionId"] == thread and r.json()["metadata"]["lesson"] == 3
    r = a.patch(f"/api/memory/sessions/{thread}/working", json={"context": ["only line"], "replace": True})
    assert r.json()["workingMemory"] == {"context": ["only line"], "entities": {}, "state": {}}
    r = a.patch(f"/api/memory/sessions/{thread}/working", json={"metadata": {"trust": "system"}})
    assert r.status_code == 400 and "reserved" in r.json()["detail"]
    r = a.patch(f"/api/memory/sessions/{thread}/working", json={"threadId": "other", "context": ["x"]})
    assert r.status_code == 400
    assert a.patch(f"/api/memory/sessions/{thread}/working", json={"context": "not a list"}).status_code == 400

    # compress: an archive row of the scope, found by the scope's search
    r = a.post(f"/api/memory/sessions/{thread}/compress", json={})
    assert r.status_code == 200, r.text
    out = r.json()
    assert "cello" in out["summary"] and out["sessionId"] == thread
    assert any("Dana" in f for f in out["keyFacts"]) and out["entitiesExtracted"] == len(out["keyFacts"])
    assert a.get(f"/api/memory/items/{out['archiveRowId']}").json()["memory"]["source"] == "archive"
    assert a.post("/api/memory/sessions/no-such-thread/compress", json={}).status_code == 404

    # another agent, or a user key of the same agent, never reaches this thread
    assert b.post(f"/api/memory/sessions/{thread}/compress", json={}).status_code == 404
    assert b.patch(f"/api/memory/sessions/{thread}/working", json={"context": ["x"], "agentWallet": "agent-a"}
                   ).status_code == 403
    assert b.post("/api/memory/transcripts/index", json={"sessionId": thread, "agentWallet": "agent-a",
                                                        "messages": [{"role": "user", "content": "x"}]}).status_code == 403
    r = b.patch(f"/api/memory/sessions/{thread}/working", json={"context": ["b's own line"], "userAddress": "dana"})
    assert r.status_code == 200 and r.json()["workingMemory"]["context"] == ["b's own line"]  # B's own session
    assert alice.post(f"/api/memory/sessions/{thread}/compress", json={}).status_code == 404
    r = a.patch(f"/api/memory/sessions/{thread}/working", json={})
    assert r.json()["workingMemory"]["context"] == ["only line"]  # A's session untouched by B
    assert "b's own line" not in a.get(f"/api/memory/sessions/{thread}/working").text


def test_archive_sync_pins_once_and_only_for_its_agent(base_url: str, pinata: PinataServer) -> None:
    a, b = client(base_url, KEY_A), client(base_url, KEY_B)
    a.post("/api/memory/remember", json={"content": f"archived fact {uuid.uuid4().hex}"})
    job = a.post("/api/memory/jobs", json={"type": "archive_create", "params": {"windowDays": 1}}).json()
    assert job["status"] == "completed", job
    archive_id = job["data"]["archiveId"]
    assert b.post(f"/api/memory/archives/{archive_id}/sync", json={}).status_code == 404
    assert b.post(f"/api/memory/archives/{archive_id}/sync", json={"agentWallet": "agent-a"}).status_code == 403
    assert a.post(f"/api/memory/archives/{archive_id}/sync", json={"dryRun": True}).json()["dryRun"] is True
    r = a.post(f"/api/memory/archives/{archive_id}/sync", json={})
    assert r.status_code == 200, r.text
    first = r.json()
    assert first["pinned"] is True and first["ipfsHash"]
    again = a.post(f"/api/memory/archives/{archive_id}/sync", json={}).json()
    assert again["ipfsHash"] == first["ipfsHash"] and again["alreadyPinned"] is True
    assert a.post("/api/memory/archives/arc_missing/sync", json={}).status_code == 404


def test_schedules_are_the_keys_agents_only(base_url: str) -> None:
    a, b = client(base_url, KEY_A), client(base_url, KEY_B)
    r = a.post("/api/memory/schedules", json={})
    assert r.status_code == 200, r.text
    ids = sorted(s["schedule"]["scheduleId"] for s in r.json()["schedules"])
    assert ids == ["memory-daily-consolidation:agent-a", "memory-daily-patterns:agent-a",
                   "memory-hourly-decay:agent-a", "memory-weekly-archive:agent-a"]
    assert all(s["nextFireAt"] and not s["paused"] for s in r.json()["schedules"])
    r = b.post("/api/memory/schedules", json={"jobTypes": ["decay_update"]})
    assert [s["schedule"]["scheduleId"] for s in r.json()["schedules"]] == ["memory-hourly-decay:agent-b"]
    assert sorted(s["schedule"]["scheduleId"] for s in a.get("/api/memory/schedules").json()["schedules"]) == ids
    assert [s["schedule"]["scheduleId"] for s in b.get("/api/memory/schedules").json()["schedules"]] == [
        "memory-hourly-decay:agent-b"]
    assert a.post("/api/memory/schedules", json={"jobTypes": ["cleanup"]}).status_code == 400

    sid = "memory-hourly-decay:agent-a"
    r = a.post(f"/api/memory/schedules/{sid}/pause", json={"note": "maintenance window"})
    assert r.status_code == 200 and r.json()["paused"] is True and r.json()["note"] == "maintenance window"
    assert a.post("/api/memory/schedules", json={"jobTypes": ["decay_update"]}).json()["schedules"][0]["paused"]
    r = a.post(f"/api/memory/schedules/{sid}/resume", json={})
    assert r.status_code == 200 and r.json()["paused"] is False
    r = a.post(f"/api/memory/schedules/{sid}/trigger", json={})
    assert r.status_code == 200, r.text
    job = r.json()["job"]
    assert r.json()["started"] is True and job["status"] == "completed" and job["agentWallet"] == "agent-a"
    assert a.get(f"/api/memory/jobs/{job['jobId']}").json()["data"]["scheduleId"] == sid

    # B cannot pause, resume, trigger or delete A's schedules, nor name agent A
    for action in ("pause", "resume", "trigger"):
        assert b.post(f"/api/memory/schedules/{sid}/{action}", json={}).status_code == 404
        assert b.post(f"/api/memory/schedules/{sid}/{action}", json={"agentWallet": "agent-a"}).status_code == 403
    assert b.get("/api/memory/schedules", params={"agentWallet": "agent-a"}).status_code == 403
    assert a.post("/api/memory/schedules/memory-daily-cleanup/pause", json={}).status_code == 404
    assert b.delete("/api/memory/schedules").json() == {"deleted": ["memory-hourly-decay:agent-b"]}
    assert sorted(s["schedule"]["scheduleId"] for s in a.get("/api/memory/schedules").json()["schedules"]) == ids
    assert sorted(a.delete("/api/memory/schedules").json()["deleted"]) == ids
    assert a.get("/api/memory/schedules").json() == {"schedules": []}
    assert a.post(f"/api/memory/schedules/{sid}/trigger", json={}).status_code == 404


@pytest.mark.temporal
def test_temporal_jobs_run_on_a_worker(temporal_address: str, tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'memory.db'}"
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps(KEYS))
    queue = f"routes-{uuid.uuid4().hex[:8]}"
    worker = subprocess.Popen([*MANOWAR, "worker", "--address", temporal_address, "--task-queue", queue, "--store",
                               store], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(os.environ))
    port = free_port()
    proc = start(["serve", "--port", str(port), "--store", store, "--embedder", "fake", "--keys", str(keys),
                  "--temporal", temporal_address, "--temporal-task-queue", queue], port)
    try:
        a, b = client(f"http://127.0.0.1:{port}", KEY_A), client(f"http://127.0.0.1:{port}", KEY_B)
        a.post("/api/memory/remember", json={"content": "a fact to decay"})
        r = a.post("/api/memory/jobs", json={"type": "decay_update", "execution": "temporal",
                                             "params": {"halfLifeDays": 7}})
        assert r.status_code == 200, r.text
        job = r.json()
        assert job["execution"] == "temporal" and job["agentWallet"] == "agent-a"
        assert job["temporalWorkflowId"] == f"memory-job:{job['jobId']}"
        assert b.get(f"/api/memory/jobs/{job['jobId']}").status_code == 404
        deadline = time.monotonic() + 60
        while job["status"] == "running" and time.monotonic() < deadline:
            time.sleep(0.3)
            job = a.get(f"/api/memory/jobs/{job['jobId']}").json()
        assert job["status"] == "completed", job
        assert job["data"]["input"]["agentWallet"] == "agent-a" and job["data"]["updated"] >= 1
        r = a.post("/api/memory/jobs", json={"type": "decay_update", "execution": "temporal",
                                             "params": {"agentWallet": "agent-b"}})
        assert r.status_code == 400
    finally:
        stop(proc)
        stop(worker)
