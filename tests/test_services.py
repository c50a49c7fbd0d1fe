"""The real servers answer through the shared fixtures (see conftest.py)."""

from __future__ import annotations

import datetime as dt
import os
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
