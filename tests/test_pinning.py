"""Archive pinning to IPFS through Pinata's REST API, against the local Pinata-shaped server:
credentials (JWT and key/secret), rejected credentials, upstream 5xx with retries, timeouts,
and the archive_create ``pin`` option / archive_pin operation on both stores."""

from __future__ import annotations

import pytest

from manowar_memory.errors import ConfigurationError, ManowarError, NotFoundError, PinningError, StoreError
from manowar_memory.jobs import (
    ArchivePinParams,
    PinataClient,
    PinataCredentials,
    archive_pin,
    archive_pin_payload,
    job_store,
    run_job,
)
from manowar_memory.testing.provider_servers import PinataServer

from test_jobs import AGENT, STORES, _add, _job_tools, _row, make_store

JWT = "test-jwt-token"
KEY, SECRET = "test-key", "test-secret"
FAST = {"timeout": 2.0, "backoff_seconds": 0.01, "max_backoff_seconds": 0.05}


@pytest.fixture
def pinata():
    with PinataServer(jwt=JWT, api_key=KEY, api_secret=SECRET) as server:
        yield server


@pytest.fixture
def pinata_env(monkeypatch, pinata):
    """PINATA_* pointing at the local server with a valid JWT."""
    for name in ("PINATA_API_KEY", "PINATA_API_Key", "PINATA_API_SECRET"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PINATA_JWT", JWT)
    monkeypatch.setenv("PINATA_API_URL", pinata.url)
    return pinata


@pytest.fixture
def no_pinata_env(monkeypatch):
    for name in ("PINATA_JWT", "PINATA_API_KEY", "PINATA_API_Key", "PINATA_API_SECRET", "PINATA_API_URL"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(params=STORES)
def store(request):
    s = make_store(request, request.param)
    yield s
    s.close()


# ------------------------------------------------------------------ client
def test_pin_json_with_jwt_returns_the_cid(pinata):
    client = PinataClient(PinataCredentials(jwt=JWT), base_url=pinata.url, **FAST)
    result = client.pin_json({"hello": "world"}, name="n1", key_values={"archiveId": "a1"})
    assert result.cid == PinataServer.cid_for({"hello": "world"}) and result.cid.startswith("bafkrei")
    assert result.pin_size and result.timestamp and result.attempts == 1
    req = pinata.last_request
    assert req.path == "/pinning/pinJSONToIPFS" and req.headers["authorization"] == f"Bearer {JWT}"
    assert req.json["pinataOptions"] == {"cidVersion": 1}
    assert req.json["pinataMetadata"] == {"name": "n1", "keyvalues": {"archiveId": "a1"}}
    assert pinata.pins[result.cid]["content"] == {"hello": "world"}
    assert "Congratulations" in client.test_authentication()


def test_pin_json_with_api_key_and_secret_headers(pinata):
    client = PinataClient(PinataCredentials(api_key=KEY, api_secret=SECRET), base_url=pinata.url, **FAST)
    assert client.pin_json([1, 2, 3], cid_version=0).cid == PinataServer.cid_for([1, 2, 3], 0)
    headers = pinata.last_request.headers
    assert headers["pinata_api_key"] == KEY and headers["pinata_secret_api_key"] == SECRET
    assert "authorization" not in headers


@pytest.mark.parametrize("creds,reason", [
    (PinataCredentials(jwt="wrong"), "INVALID_CREDENTIALS"),
    (PinataCredentials(api_key=KEY, api_secret="wrong"), "INVALID_API_KEYS"),
])
def test_rejected_credentials_fail_at_once_without_retry(pinata, creds, reason):
    client = PinataClient(creds, base_url=pinata.url, max_attempts=4, **dict(FAST))
    with pytest.raises(PinningError) as info:
        client.pin_json({"x": 1})
    assert info.value.status == 401 and not info.value.retryable
    assert reason in str(info.value) and "PINATA_JWT" in str(info.value)
    assert len(pinata.requests) == 1, "a rejected credential is not retried"
    assert not pinata.pins


def test_upstream_5xx_is_retried_then_succeeds(pinata):
    pinata.fail(502, "bad gateway", times=2)
    client = PinataClient(PinataCredentials(jwt=JWT), base_url=pinata.url, max_attempts=3, **FAST)
    result = client.pin_json({"k": "v"})
    assert result.attempts == 3 and len(pinata.requests) == 3
    assert result.cid == PinataServer.cid_for({"k": "v"})


def test_upstream_5xx_gives_up_after_max_attempts(pinata):
    pinata.fail(503, "down for maintenance")
    client = PinataClient(PinataCredentials(jwt=JWT), base_url=pinata.url, max_attempts=3, **FAST)
    with pytest.raises(PinningError, match=r"HTTP 503.*gave up after 3 attempts") as info:
        client.pin_json({"k": "v"})
    assert info.value.retryable and info.value.status == 503
    assert len(pinata.requests) == 3


def test_429_honours_retry_after(pinata):
    pinata.fail(429, "slow down", times=1)  # the server sends Retry-After: 0
    client = PinataClient(PinataCredentials(jwt=JWT), base_url=pinata.url, max_attempts=2, **FAST)
    assert client.pin_json({"r": 1}).attempts == 2


def test_timeout_is_retried_and_reported(pinata):
    pinata.delay(5)
    client = PinataClient(PinataCredentials(jwt=JWT), base_url=pinata.url, timeout=0.2, max_attempts=2,
                          backoff_seconds=0.01, max_backoff_seconds=0.02)
    with pytest.raises(PinningError, match=r"did not answer within 0.2s.*gave up after 2 attempts") as info:
        client.pin_json({"slow": True})
    assert info.value.status is None and info.value.retryable
    assert len(pinata.requests) == 2


def test_unreachable_server_is_retried_and_reported():
    server = PinataServer(jwt=JWT).start()
    url = server.url
    server.stop()  # nothing listens on the port any more
    client = PinataClient(PinataCredentials(jwt=JWT), base_url=url, max_attempts=2, **FAST)
    with pytest.raises(PinningError, match=r"could not reach Pinata.*gave up after 2 attempts") as info:
        client.pin_json({"a": 1})
    assert info.value.retryable and info.value.status is None


def test_bad_request_is_not_retried(pinata):
    pinata.respond_with(400, {"error": {"reason": "INVALID_REQUEST", "details": "nope"}})
    client = PinataClient(PinataCredentials(jwt=JWT), base_url=pinata.url, **FAST)
    with pytest.raises(PinningError, match="HTTP 400 INVALID_REQUEST: nope"):
        client.pin_json({})
    assert len(pinata.requests) == 1


def test_answer_without_ipfs_hash_is_an_error(pinata):
    pinata.respond_with(200, {"PinSize": 1})
    client = PinataClient(PinataCredentials(jwt=JWT), base_url=pinata.url, **FAST)
    with pytest.raises(PinningError, match="without an IpfsHash"):
        client.pin_json({"a": 1})


def test_credentials_from_env_and_their_errors(monkeypatch, no_pinata_env):
    assert PinataCredentials.from_env() is None
    with pytest.raises(ConfigurationError, match="PINATA_JWT, or PINATA_API_KEY and PINATA_API_SECRET"):
        PinataClient.from_env()
    monkeypatch.setenv("PINATA_API_Key", KEY)  # the reference's misspelling is accepted
    with pytest.raises(ConfigurationError, match="PINATA_API_SECRET"):
        PinataCredentials.from_env()
    monkeypatch.setenv("PINATA_API_SECRET", SECRET)
    creds = PinataCredentials.from_env()
    assert creds.headers() == {"pinata_api_key": KEY, "pinata_secret_api_key": SECRET}
    assert SECRET not in repr(creds)
    monkeypatch.setenv("PINATA_JWT", JWT)
    assert PinataCredentials.from_env().headers() == {"Authorization": f"Bearer {JWT}"}
    assert issubclass(PinningError, ManowarError)


@pytest.mark.parametrize("value", ["inf", "nan", "many"])
def test_a_bad_attempt_count_in_the_environment_is_a_configuration_error(monkeypatch, pinata_env, value):
    monkeypatch.setenv("PINATA_MAX_ATTEMPTS", value)
    with pytest.raises(ConfigurationError, match="PINATA_MAX_ATTEMPTS"):
        PinataClient.from_env()


def test_a_cid_that_cannot_be_saved_is_reported_and_the_archive_kept(store, pinata_env, monkeypatch):
    _seed(store)

    def broken(*args, **kwargs):
        raise StoreError("archives collection is read-only")

    monkeypatch.setattr(type(store), "update_archive", broken)
    job = run_job(store, "archive_create", {"agent_wallet": AGENT, "pin": True})
    assert job.status == "completed", job.error
    assert job.data["pinned"] is False and "CID was not saved" in job.data["pin"]["reason"]
    assert store.get_archive(job.data["archiveId"]) is not None and len(pinata_env.requests) == 1


def test_base_url_comes_from_env(monkeypatch, pinata_env):
    client = PinataClient.from_env(**FAST)
    assert client.base_url == pinata_env.url
    client.pin_json({"e": 1})
    assert len(pinata_env.requests) == 1


# ------------------------------------------------------------------ archives
def _seed(store, n=3):
    _add(store, *[_row(f"pinned fact {i}", age_days=1) for i in range(n)])


def test_archive_create_with_pin_stores_the_cid(store, pinata_env):
    _seed(store)
    job = run_job(store, "archive_create", {"agent_wallet": AGENT, "pin": True})
    assert job.status == "completed", job.error
    assert job.data["pinned"] is True and job.data["pin"]["pinned"] is True
    archive = store.get_archive(job.data["archiveId"])
    expected = PinataServer.cid_for(archive_pin_payload(archive))
    assert archive.ipfs_cid == expected == job.data["ipfsHash"]
    assert archive.metadata["ipfs"]["provider"] == "pinata" and archive.metadata["ipfs"]["pinSize"] > 0
    pin = pinata_env.pins[expected]
    assert pin["content"]["archiveId"] == archive.archive_id and pin["content"]["content"] == archive.content
    assert pin["metadata"]["name"] == f"manowar-memory-archive-{archive.archive_id}"
    # pinning again is a no-op: no request, same CID
    before = len(pinata_env.requests)
    again = archive_pin(job_store(store), ArchivePinParams(archive_id=archive.archive_id))
    assert again == {"archiveId": archive.archive_id, "pinned": True, "ipfsHash": expected, "alreadyPinned": True}
    assert len(pinata_env.requests) == before


def test_archive_create_without_credentials_keeps_archive_and_says_why(store, no_pinata_env):
    _seed(store)
    job = run_job(store, "archive_create", {"agent_wallet": AGENT, "pin": True})
    assert job.status == "completed", job.error
    assert job.data["pinned"] is False
    assert job.data["pin"]["reason"].startswith("not pinned: no credentials")
    archive = store.get_archive(job.data["archiveId"])
    assert archive is not None and archive.ipfs_cid is None and archive.metadata["entryCount"] == 3
    assert store.get_job(job.job_id).data["pin"]["pinned"] is False


def test_archive_create_with_rejected_credentials_keeps_archive(store, pinata_env, monkeypatch):
    monkeypatch.setenv("PINATA_JWT", "expired")
    _seed(store)
    job = run_job(store, "archive_create", {"agent_wallet": AGENT, "pin": True})
    assert job.status == "completed" and job.data["pinned"] is False
    assert "rejected the credentials" in job.data["pin"]["reason"] and job.data["pin"]["status"] == 401
    assert store.get_archive(job.data["archiveId"]).ipfs_cid is None


def test_archive_pin_after_an_upstream_outage(store, pinata_env, monkeypatch):
    monkeypatch.setenv("PINATA_MAX_ATTEMPTS", "2")
    monkeypatch.setenv("PINATA_TIMEOUT_SECONDS", "2")
    _seed(store)
    pinata_env.fail(500, "boom")
    client = PinataClient.from_env(max_attempts=2, **FAST)
    job = run_job(store, "archive_create", {"agent_wallet": AGENT, "pin": True})
    assert job.data["pinned"] is False and job.data["pin"]["retryable"]
    assert "HTTP 500" in job.data["pin"]["reason"] and "gave up after 2 attempts" in job.data["pin"]["reason"]
    archive_id = job.data["archiveId"]
    with pytest.raises(PinningError, match="HTTP 500"):
        archive_pin(job_store(store), ArchivePinParams(archive_id=archive_id), client=client)
    assert store.get_archive(archive_id).ipfs_cid is None, "a failed pin changes nothing"
    pinata_env.reset()
    report = archive_pin(job_store(store), ArchivePinParams(archive_id=archive_id), client=client)
    assert report["pinned"] and not report["alreadyPinned"]
    assert store.get_archive(archive_id).ipfs_cid == report["ipfsHash"]


def test_archive_pin_errors(store, no_pinata_env):
    with pytest.raises(NotFoundError, match="arc_missing does not exist"):
        archive_pin(job_store(store), ArchivePinParams(archive_id="arc_missing"))
    _seed(store, 1)
    archive_id = run_job(store, "archive_create", {"agent_wallet": AGENT}).data["archiveId"]
    with pytest.raises(ConfigurationError, match="Pinata credentials not configured"):
        archive_pin(job_store(store), ArchivePinParams(archive_id=archive_id))


def test_archive_pin_tool_and_dry_run(store, pinata_env):
    _seed(store, 2)
    tools = _job_tools(store)
    dry = tools["memory_archive_create"].call(pin=True, dry_run=True)
    assert dry["report"]["pin"]["reason"] == "not pinned: dry run" and not pinata_env.requests
    archive_id = tools["memory_archive_create"].call()["report"]["archiveId"]
    assert tools["memory_archive_pin"].call(archive_id=archive_id, dry_run=True)["pinned"] is False
    out = tools["memory_archive_pin"].call(archive_id=archive_id)
    assert out["pinned"] and store.get_archive(archive_id).ipfs_cid == out["ipfsHash"]
    assert tools["memory_archive_pin"].json_schema()["required"] == ["archive_id"]
