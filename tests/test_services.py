"""The real servers answer through the shared fixtures (see conftest.py)."""

from __future__ import annotations

import datetime as dt
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.mongo
def test_mongo_insert_find(mongo_db):
    mongo_db.memories.insert_many(
        [{"_id": "m1", "text": "likes tea", "layer": "graph"}, {"_id": "m2", "text": "lives in Lisbon", "layer": "scene"}]
    )
    assert mongo_db.memories.find_one({"layer": "scene"})["text"] == "lives in Lisbon"
    assert sorted(d["_id"] for d in mongo_db.memories.find({}, {"_id": 1})) == ["m1", "m2"]


@pytest.mark.mongo
def test_mongo_is_rs0_primary_with_transactions(mongo_client, mongo_db):
    hello = mongo_client.admin.command("hello")
    assert hello.get("setName") == "rs0"
    assert hello.get("isWritablePrimary") is True
    mongo_db.create_collection("tx")
    with mongo_client.start_session() as session, session.start_transaction():
        mongo_db.tx.insert_one({"_id": 1}, session=session)
    assert mongo_db.tx.count_documents({}) == 1


@pytest.mark.mongo
def test_mongo_ttl_index_expires_documents(mongo_db):
    coll = mongo_db.working
    coll.create_index("expires_at", expireAfterSeconds=0, name="ttl_expires_at")
    info = coll.index_information()
    assert info["ttl_expires_at"]["expireAfterSeconds"] == 0
    past = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
    coll.insert_one({"_id": "old", "expires_at": past})
    # services.sh runs mongod with ttlMonitorSleepSecs=1, so expiry takes about a second.
    deadline = time.monotonic() + 15
    while coll.count_documents({"_id": "old"}) and time.monotonic() < deadline:
        time.sleep(0.25)
    assert coll.count_documents({"_id": "old"}) == 0, "TTL monitor did not delete the expired document"


@pytest.mark.redis
def test_redis_set_get(redis_client, redis_key_prefix):
    key = f"{redis_key_prefix}greeting"
    assert redis_client.set(key, "hello", ex=60)
    assert redis_client.get(key) == b"hello"
    assert 0 < redis_client.ttl(key) <= 60


@pytest.mark.temporal
async def test_temporal_describe_default_namespace(temporal_address):
    from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
    from temporalio.client import Client

    client = await Client.connect(temporal_address, namespace="default")
    resp = await client.workflow_service.describe_namespace(DescribeNamespaceRequest(namespace="default"))
    assert resp.namespace_info.name == "default"


@pytest.mark.mongo
@pytest.mark.redis
@pytest.mark.temporal
def test_services_script_status_reports_all_up():
    proc = subprocess.run(
        ["bash", str(REPO / "scripts" / "services.sh"), "status"],
        capture_output=True,
        text=True,
        timeout=60,
        env=os.environ.copy(),
    )
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    for name in ("mongo", "redis", "temporal"):
        assert f"{name} UP" in out, out


# ---------------------------------------------------------------- services.sh and test.sh clean up after themselves
# Every server these tests start is on a free port of its own, with its pid files, logs and data in
# a temporary folder: the shared servers on the default ports are never touched.


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def _moved_env(tmp_path: Path, redis_port: int) -> dict[str, str]:
    moved = {"MANOWAR_SERVICES_STARTED", "MANOWAR_TEST_SERVICES", "MANOWAR_MONGO_PORT", "MANOWAR_TEMPORAL_PORT",
             "MANOWAR_TEMPORAL_UI_PORT", "REDIS_URL"}
    env = {k: v for k, v in os.environ.items() if k not in moved}
    env.update(MANOWAR_SERVICES_ROOT=str(tmp_path / "services"), MANOWAR_SERVICES_DATA=str(tmp_path / "data"),
               MANOWAR_REDIS_PORT=str(redis_port))
    return env


def _services(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(REPO / "scripts" / "services.sh"), *args], capture_output=True, text=True,
                          timeout=60, env=env)


@pytest.fixture
def own_redis(tmp_path: Path):
    """A Redis server this test starts itself (not through services.sh): a server that was up before."""
    port = _free_port()
    proc = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly",
                             "no", "--dir", str(tmp_path)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            if _answers(port):
                break
            time.sleep(0.1)
        assert _answers(port), "redis-server did not come up"
        yield port, proc
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.mark.redis
def test_services_start_lists_what_it_started_and_stop_stops_it(tmp_path: Path) -> None:
    port = _free_port()
    env = _moved_env(tmp_path, port)
    first, second = tmp_path / "first", tmp_path / "second"
    try:
        run = _services({**env, "MANOWAR_SERVICES_STARTED": str(first)}, "start", "redis")
        assert run.returncode == 0, run.stderr
        assert _answers(port)
        assert first.read_text().split() == ["redis"]
        assert f"REDIS_URL=redis://127.0.0.1:{port}/0" in (tmp_path / "services" / "services.env").read_text()
        # a second start reuses the server: it started nothing, so it lists nothing
        run = _services({**env, "MANOWAR_SERVICES_STARTED": str(second)}, "start", "redis")
        assert run.returncode == 0, run.stderr
        assert not second.exists() or second.read_text().split() == []
        run = _services(env, "stop", *first.read_text().split())
        assert run.returncode == 0, run.stderr
        assert not _answers(port)
    finally:
        if _answers(port):
            _services(env, "stop", "redis")


@pytest.mark.redis
def test_services_leaves_a_server_it_did_not_start(tmp_path: Path, own_redis: tuple[int, subprocess.Popen[bytes]]) -> None:
    port, proc = own_redis
    env = _moved_env(tmp_path, port)
    started = tmp_path / "started"
    run = _services({**env, "MANOWAR_SERVICES_STARTED": str(started)}, "start", "redis")
    assert run.returncode == 0, run.stderr
    assert "already up" in run.stderr
    assert not started.exists() or started.read_text().split() == []
    run = _services(env, "stop", "redis")
    assert run.returncode == 1 and "not started by this script" in run.stderr
    assert proc.poll() is None and _answers(port)


_PROBE = '''
import os, pathlib, time

import redis


def test_probe():
    url = os.environ["REDIS_URL"]
    assert redis.Redis.from_url(url).ping()
    folder = pathlib.Path(os.environ["PROBE_DIR"])
    (folder / "ready").write_text(f"{os.getpid()} {url}")
    deadline = time.monotonic() + 120  # a bound, should the parent never answer
    while not (folder / "go").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
'''


def _test_sh(tmp_path: Path, port: int) -> subprocess.Popen[str]:
    probe = tmp_path / "probe"
    probe.mkdir(exist_ok=True)
    (probe / "test_probe.py").write_text(_PROBE)
    # no third-party pytest plugins: the probe needs none, and loading them all is most of a run's time
    env = {**_moved_env(tmp_path, port), "MANOWAR_TEST_SERVICES": "redis", "PROBE_DIR": str(probe),
           "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    return subprocess.Popen(["bash", str(REPO / "scripts" / "test.sh"), str(probe / "test_probe.py"), "-q"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def _wait_ready(tmp_path: Path, proc: subprocess.Popen[str]) -> tuple[int, str]:
    ready = tmp_path / "probe" / "ready"
    for _ in range(2400):  # test.sh checks the environment, starts redis, then pytest starts the probe
        if ready.exists() and ready.read_text():
            pid, url = ready.read_text().split()
            return int(pid), url
        assert proc.poll() is None, proc.communicate()[0]
        time.sleep(0.05)
    raise AssertionError("the probe test never started")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/status")
    return not (status.exists() and "\nState:\tZ" in status.read_text())


@pytest.mark.slow
@pytest.mark.redis
def test_test_sh_stops_the_servers_it_started_when_terminated(tmp_path: Path) -> None:
    port = _free_port()
    proc = _test_sh(tmp_path, port)
    try:
        pytest_pid, url = _wait_ready(tmp_path, proc)
        assert url == f"redis://127.0.0.1:{port}/0" and _answers(port)  # test.sh started it, on the moved port
        os.kill(proc.pid, signal.SIGTERM)  # while pytest runs
        out = proc.communicate(timeout=60)[0]
        assert proc.returncode == 143, out
        assert not _answers(port), out
        assert not _alive(pytest_pid), out
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        if _answers(port):
            _services(_moved_env(tmp_path, port), "stop", "redis")


@pytest.mark.slow
@pytest.mark.redis
def test_test_sh_leaves_a_server_that_was_up_before(tmp_path: Path,
                                                    own_redis: tuple[int, subprocess.Popen[bytes]]) -> None:
    port, server = own_redis
    (tmp_path / "probe").mkdir()
    (tmp_path / "probe" / "go").write_text("")  # the probe returns at once: test.sh ends on its own
    proc = _test_sh(tmp_path, port)
    try:
        out = proc.communicate(timeout=120)[0]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, out
    assert "1 passed" in out, out
    assert server.poll() is None and _answers(port), out
