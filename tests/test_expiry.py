"""Forgetting on purpose (#30): per-item and per-kind time to live, expired rows leaving every
read at query time on both stores, and the ``expire`` job (archive or delete what expired,
forget what nobody recalls), inline and on the scoped surface's tenancy rules.

Time is injected, never waited for: rows are written with a past ``created_at`` (a TTL counts
from it) and store reads are given ``MemoryQuery(now=...)``."""

from __future__ import annotations

import datetime as dt
import math

import pytest

from manowar_memory import MemoryConfig, Scope
from manowar_memory._util import DAY_MS, now_ms
from manowar_memory.errors import InvalidConfigError, InvalidInputError, NotFoundError
from manowar_memory.expiry import (
    EXPIRED,
    FORGOTTEN,
    check_expires_at_value,
    default_ttl_seconds,
    is_expired,
    is_protected,
    resolve_expiry,
    ttl_to_ms,
)
from manowar_memory.jobs import run_job
from manowar_memory.stores.base import MemoryQuery

AGENT = "0xagent-ttl"
ALICE = Scope(agent_wallet=AGENT, user_address="alice")
BOB = Scope(agent_wallet=AGENT, user_address="bob")
HOUR_MS = 3_600_000


@pytest.fixture
def engine_config():
    """Events live one minute unless told otherwise (the per-kind default under test)."""
    return MemoryConfig(query_cache=True, ttl_by_kind={"event": 60})


# ----------------------------------------------------------------------------- units


@pytest.mark.parametrize(("ttl", "ms"), [
    (1, 1000), (2.5, 2500), (0.0001, 1), (dt.timedelta(minutes=1), 60_000), (dt.timedelta(microseconds=1), 1),
])
def test_ttl_to_ms_accepts_seconds_and_timedeltas(ttl, ms) -> None:
    assert ttl_to_ms(ttl) == ms


@pytest.mark.parametrize("ttl", [0, -1, 0.0, -0.5, math.nan, math.inf, dt.timedelta(0), dt.timedelta(seconds=-1),
                                 "60", True, [60], None])
def test_ttl_to_ms_refuses_what_is_not_a_positive_duration(ttl) -> None:
    with pytest.raises(InvalidInputError, match="ttl"):
        ttl_to_ms(ttl)


@pytest.mark.parametrize(("value", "ms"), [
    (1_800_000_000_000, 1_800_000_000_000),
    (dt.datetime(2027, 1, 1, tzinfo=dt.UTC), 1_798_761_600_000),
    (dt.datetime(2027, 1, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=1))), 1_798_761_600_000),
])
def test_absolute_expiry_as_epoch_ms_or_aware_datetime(value, ms) -> None:
    assert check_expires_at_value(value) == ms


@pytest.mark.parametrize("value", [dt.datetime(2027, 1, 1), True, "2027-01-01", math.nan, 0, -5, 10**20])
def test_absolute_expiry_refuses_naive_datetimes_and_non_times(value) -> None:
    with pytest.raises(InvalidInputError, match="expires_at"):
        check_expires_at_value(value)


def test_resolve_expiry_counts_a_ttl_from_the_base_and_refuses_both_at_once() -> None:
    assert resolve_expiry(None, None, base=5) is None
    assert resolve_expiry(10, None, base=5) == 10_005
    assert resolve_expiry(None, 7_000, base=5) == 7_000
    with pytest.raises(InvalidInputError, match="not both"):
        resolve_expiry(10, 7_000, base=5)


@pytest.mark.parametrize(("metadata", "now", "expired"), [
    ({}, 10, False), ({"expiresAt": None}, 10, False), ({"expiresAt": 11}, 10, False), ({"expiresAt": 10}, 10, True),
    ({"expiresAt": 9.5}, 10, True), ({"expiresAt": True}, 10, False), ({"expiresAt": "9"}, 10, False),
])
def test_is_expired_matches_the_stores_rule(metadata, now, expired) -> None:
    assert is_expired(metadata, now) is expired


@pytest.mark.parametrize(("config", "source", "metadata", "seconds"), [
    ({}, "fact", {"factType": "event"}, None),
    ({"event": 60, "fact": 600, "graph": 6000, "*": 1}, "fact", {"factType": "event"}, 60),  # fact type first
    ({"fact": 600, "graph": 6000, "*": 1}, "fact", {"factType": "event"}, 600),  # then source
    ({"graph": 6000, "*": 1}, "fact", {"factType": "event"}, 6000),  # then layer
    ({"vectors": 5, "*": 1}, "knowledge", {}, 5),
    ({"*": 1}, "session", {}, 1),
    ({"event": 60}, "knowledge", {"factType": "event"}, None),  # a fact type names facts only
    ({"*": 1}, "fact", {"retention": "pinned"}, None),  # protected rows get no default
    ({"*": 1}, "knowledge", {"trust": "system"}, None),
])
def test_default_ttl_takes_the_most_specific_kind(config, source, metadata, seconds) -> None:
    assert default_ttl_seconds(config, source, metadata) == seconds


@pytest.mark.parametrize(("metadata", "protected"), [
    ({}, False), ({"retention": "pinned"}, True), ({"pinned": True}, True), ({"pinned": "yes"}, False),
    ({"trust": "system"}, True), ({"trustLevel": "system"}, True), ({"trust": "learned"}, False),
])
def test_protected_rows(metadata, protected) -> None:
    assert is_protected(metadata) is protected


@pytest.mark.parametrize("ttl_by_kind", [{"episodes": 60}, {"event": 0}, {"event": -1}, {"event": math.nan},
                                         {"event": math.inf}])
def test_config_refuses_unknown_kinds_and_non_positive_ttls(ttl_by_kind) -> None:
    with pytest.raises(InvalidConfigError):
        MemoryConfig(ttl_by_kind=ttl_by_kind)


# ----------------------------------------------------------------------------- writes


def _row(engine, memory_id: str, now: int | None = None):
    return engine.store.get_memory(memory_id, MemoryQuery(scope=ALICE, active_only=False, now=now))


def test_explicit_ttl_and_expiry_are_stored_on_the_row(engine_on_each_store) -> None:
    engine = engine_on_each_store
    t0 = now_ms() - HOUR_MS
    fact = engine.remember(ALICE, "Alice parks on level 3", ttl=dt.timedelta(days=1), created_at=t0)
    assert _row(engine, fact.id).metadata["expiresAt"] == t0 + DAY_MS
    at = dt.datetime.now(dt.UTC) + dt.timedelta(days=2)
    ids = engine.ingest(ALICE, [
        {"content": "gate code 4412", "created_at": t0},
        {"content": "visitor badge 7", "created_at": t0, "ttl": 30},  # the item's own ttl wins
    ], ttl=120)
    assert _row(engine, ids[0]).metadata["expiresAt"] == t0 + 120_000
    assert _row(engine, ids[1]).metadata["expiresAt"] == t0 + 30_000
    [later] = engine.ingest(ALICE, ["lobby wifi guest"], expires_at=at)
    assert _row(engine, later).metadata["expiresAt"] == math.floor(at.timestamp() * 1000)
    [never] = engine.ingest(ALICE, ["the building has a rooftop garden"])
    assert "expiresAt" not in _row(engine, never).metadata


@pytest.mark.parametrize("bad", [{"ttl": 0}, {"ttl": -3}, {"ttl": math.nan}, {"ttl": "1h"}, {"ttl": True},
                                 {"expires_at": dt.datetime(2030, 1, 1)}, {"ttl": 5, "expires_at": 1_900_000_000_000}])
def test_bad_ttls_are_refused_before_anything_is_written(engine_on_each_store, bad) -> None:
    engine = engine_on_each_store
    with pytest.raises(InvalidInputError):
        engine.remember(ALICE, "Alice has a dentist appointment", **bad)
    with pytest.raises(InvalidInputError):
        engine.ingest(ALICE, ["fine row", "another fine row"], **bad)
    with pytest.raises(InvalidInputError):
        engine.ingest(ALICE, [{"content": "one row", **bad}])
    with pytest.raises(InvalidInputError):
        engine.ingest(ALICE, [{"content": "one row", "metadata": {"expiresAt": "tomorrow"}}])
    assert engine.list_items(ALICE) == []


def test_per_kind_default_applies_only_without_an_explicit_one(engine_on_each_store) -> None:
    engine = engine_on_each_store  # events live 60 s (engine_config)
    t0 = now_ms() - HOUR_MS
    event = engine.remember(ALICE, "Alice flew to Lisbon", fact_type="event", created_at=t0)
    kept = engine.remember(ALICE, "Alice went to the Lisbon book fair", fact_type="event", created_at=t0, ttl=7200)
    pinned = engine.remember(ALICE, "Alice was born in Lisbon", fact_type="event", created_at=t0, retention="pinned")
    pref = engine.remember(ALICE, "Alice prefers window seats", fact_type="preference", created_at=t0)
    assert _row(engine, event.id).metadata["expiresAt"] == t0 + 60_000
    assert _row(engine, kept.id).metadata["expiresAt"] == t0 + 7_200_000
    assert "expiresAt" not in _row(engine, pinned.id).metadata
    assert "expiresAt" not in _row(engine, pref.id).metadata
    visible = {r.id for r in engine.list_items(ALICE)}
    assert visible == {kept.id, pinned.id, pref.id}


def test_scoped_surface_takes_ttls_and_reserves_the_expiry_key(engine_on_each_store) -> None:
    engine = engine_on_each_store
    mem = engine.scoped(ALICE)
    fact = mem.remember("Alice's locker is 12", ttl=3600)
    [row_id] = mem.add(["the spare key is under the mat"], ttl=dt.timedelta(hours=2))
    mem.upsert([{"key": "k1", "content": "temporary pin 5521", "ttl": 60}, {"key": "k2", "content": "long note"}],
               ttl=600)
    rows = {r.content: r.metadata.get("expiresAt") for r in mem.list()}
    assert rows["Alice's locker is 12"] - _row(engine, fact.id).created_at == 3_600_000
    assert rows["the spare key is under the mat"] - _row(engine, row_id).created_at == 7_200_000
    created = {r.content: r.created_at for r in mem.list()}
    assert rows["temporary pin 5521"] - created["temporary pin 5521"] == 60_000
    assert rows["long note"] - created["long note"] == 600_000
    with pytest.raises(InvalidInputError, match="expiresAt"):
        mem.add(["sneaky"], metadatas=[{"expiresAt": 1}])
    with pytest.raises(InvalidInputError):
        mem.remember("bad ttl", ttl=-1)


# ----------------------------------------------------------------------------- reads


def test_expired_rows_leave_every_read_at_query_time(engine_on_each_store) -> None:
    engine = engine_on_each_store
    t0 = now_ms() - 2 * HOUR_MS
    gone = engine.remember(ALICE, "Alice's hotel room is 808", created_at=t0, ttl=3600)  # expired an hour ago
    [gone_row] = engine.ingest(ALICE, [{"content": "hotel breakfast until 10", "created_at": t0, "ttl": 60}])
    live = engine.remember(ALICE, "Alice's hotel is near the river", created_at=t0, ttl=dt.timedelta(days=1))
    expired = {gone.id, gone_row}
    hits, _ = engine.search("hotel room breakfast river", ALICE)
    assert live.id in {c.id for c in hits} and not expired & {c.id for c in hits}
    packed = engine.pre_turn("hotel room breakfast", ALICE)
    assert not expired & {i.id for i in packed.items}
    assert {r.id for r in engine.list_items(ALICE)} == {live.id}
    with pytest.raises(NotFoundError):
        engine.get_item(ALICE, gone.id)
    mem = engine.scoped(ALICE)
    assert not expired & {r.id for r, _ in mem.similar("hotel room 808", k=10)}
    assert not expired & {r.id for r, _ in mem.keyword("hotel breakfast room", k=10)}
    # still stored: history reads (active_only=False) and the jobs see them
    assert _row(engine, gone.id) is not None and _row(engine, gone_row) is not None


def test_store_lanes_judge_expiry_at_the_querys_now(engine_on_each_store) -> None:
    engine = engine_on_each_store
    t0 = now_ms()
    fact = engine.remember(ALICE, "Alice's parking permit is valid", created_at=t0, ttl=3600)
    vector = engine.embedder.embed(["parking permit"], input_type="query")[0]
    model = engine.model_id
    for now, seen in ((t0, True), (t0 + HOUR_MS - 1, True), (t0 + HOUR_MS, False), (t0 + 5 * HOUR_MS, False)):
        q = MemoryQuery(scope=ALICE, now=now)
        assert (fact.id in {h.record.id for h in engine.store.keyword_search(q, "parking permit", 10)}) is seen
        hits, _ = engine.store.vector_search(q, vector, model, 10)
        assert (fact.id in {h.record.id for h in hits}) is seen
        assert (fact.id in {r.id for r in engine.store.list_memories(q)}) is seen
        assert (engine.store.count_memories(q) == 1) is seen
        assert (engine.store.get_memory(fact.id, q) is not None) is seen
        assert engine.store.get_memory(fact.id, MemoryQuery(scope=ALICE, now=now, active_only=False)) is not None


def test_remembering_an_expired_fact_again_brings_it_back(engine_on_each_store) -> None:
    engine = engine_on_each_store
    t0 = now_ms() - 2 * HOUR_MS
    first = engine.remember(ALICE, "Alice is on call this week", created_at=t0, ttl=60)
    assert engine.list_items(ALICE) == []
    again = engine.remember(ALICE, "alice is on call this week", ttl=3600)
    assert again.deduplicated and again.id == first.id
    [row] = engine.list_items(ALICE)
    assert row.id == first.id and row.metadata["expiresAt"] > now_ms()
    forever = engine.remember(ALICE, "Alice is on call this week", expires_at=now_ms() + 10 * DAY_MS)
    assert _row(engine, forever.id).metadata["expiresAt"] > now_ms() + 9 * DAY_MS


# ----------------------------------------------------------------------------- the expire job


def _seed_expired(engine, scope: Scope, t0: int) -> dict[str, str]:
    ids = {
        "fact": engine.remember(scope, f"{scope.user_address} booked table 4", fact_type="event", created_at=t0).id,
        "row": engine.ingest(scope, [{"content": f"{scope.user_address} door code 1234", "created_at": t0,
                                      "ttl": 60}])[0],
        "live": engine.remember(scope, f"{scope.user_address} likes jazz", fact_type="preference").id,
    }
    return ids


def test_expire_archives_expired_rows_with_provenance_and_is_idempotent(engine_on_each_store) -> None:
    engine = engine_on_each_store
    t0 = now_ms() - DAY_MS
    ids = _seed_expired(engine, ALICE, t0)
    dry = run_job(engine, "expire", {"agent_wallet": AGENT}, dry_run=True)
    assert dry.status == "completed" and dry.data["expired"] == 2 and dry.data["archived"] == 2
    assert _row(engine, ids["fact"]).status == "active"  # a dry run writes nothing
    job = run_job(engine, "expire", {"agent_wallet": AGENT})
    assert job.status == "completed", job.error
    data = job.data
    assert (data["examined"], data["expired"], data["archived"], data["deleted"], data["decayed"]) == (3, 2, 2, 0, 0)
    assert data["byType"] == {"event": {"expired": 1, "decayed": 0}, "knowledge": {"expired": 1, "decayed": 0}}
    for key in ("fact", "row"):
        row = _row(engine, ids[key])
        assert row.status == EXPIRED and row.metadata["forgottenReason"] == "time to live ran out"
        assert row.metadata["forgottenAt"] == data["now"]
    assert _row(engine, ids["live"]).status == "active"
    assert [r.id for r in engine.list_items(ALICE)] == [ids["live"]]
    again = run_job(engine, "expire", {"agent_wallet": AGENT}).data
    assert (again["expired"], again["archived"], again["alreadyInactive"]) == (0, 0, 2)
    # the archived fact freed its dedupe slot: remembering it stores a fresh row
    new = engine.remember(ALICE, "alice booked table 4", fact_type="event")
    assert not new.deduplicated and new.id != ids["fact"]


def test_expire_delete_removes_rows_and_their_index_entries(engine_on_each_store) -> None:
    engine = engine_on_each_store
    ids = _seed_expired(engine, ALICE, now_ms() - DAY_MS)
    job = run_job(engine, "expire", {"agent_wallet": AGENT, "action": "delete"})
    assert (job.data["deleted"], job.data["archived"]) == (2, 0)
    assert _row(engine, ids["fact"]) is None and _row(engine, ids["row"]) is None
    every = MemoryQuery(scope=ALICE, active_only=False)
    assert {h.record.id for h in engine.store.keyword_search(every, "booked table door code", 10)} == set()
    hits, _ = engine.store.vector_search(every, engine.embedder.embed(["door code 1234"], input_type="query")[0], engine.model_id, 10)
    assert ids["row"] not in {h.record.id for h in hits}
    assert engine.store.count_memories(every) == 1


def test_decay_forgets_what_nobody_recalls_but_never_protected_rows(engine_on_each_store) -> None:
    engine = engine_on_each_store
    now = now_ms()
    old = now - 100 * DAY_MS
    forgotten = engine.ingest(ALICE, [{"content": "Alice once asked about ferry times", "created_at": old}])[0]
    important = engine.remember(ALICE, "Alice is allergic to peanuts", importance=0.9, created_at=old).id
    pinned = engine.remember(ALICE, "Alice's passport number is on file", retention="pinned", created_at=old).id
    system = engine.scoped(ALICE, trust="system").add(["House rule: never share door codes"])[0]
    engine.store.update_memory(system, {"created_at": old, "last_accessed_at": old})
    recalled = engine.ingest(ALICE, [{"content": "Alice asked about the museum pass", "created_at": old}])[0]
    engine.store.bump_access([recalled], now - DAY_MS)  # recalled yesterday
    fresh = engine.ingest(ALICE, ["Alice asked about the weather"])[0]
    params = {"agent_wallet": AGENT, "unused_days": 30}
    job = run_job(engine, "expire", params)
    data = job.data
    assert job.status == "completed", job.error
    assert (data["decayed"], data["archived"], data["protected"], data["expired"]) == (1, 1, 2, 0)
    assert data["byType"] == {"knowledge": {"expired": 0, "decayed": 1}} and data["decayAction"] == "archive"
    row = _row(engine, forgotten)
    assert row.status == FORGOTTEN and row.metadata["forgottenReason"] == "not recalled for 30 days"
    for kept in (important, pinned, system, recalled, fresh):
        assert _row(engine, kept).status == "active"
    # stricter knobs: only facts, deleted
    engine.store.update_memory(recalled, {"last_accessed_at": old})
    kinds = run_job(engine, "expire", {**params, "kinds": ["preference"], "decay_action": "delete"}).data
    assert kinds["decayed"] == 0
    counted = run_job(engine, "expire", {**params, "max_access_count": 0, "decay_action": "delete"}).data
    assert counted["decayed"] == 0  # recalled once: kept by max_access_count=0
    dropped = run_job(engine, "expire", {**params, "decay_action": "delete"}).data
    assert (dropped["decayed"], dropped["deleted"]) == (1, 1) and _row(engine, recalled) is None


@pytest.mark.parametrize("params", [
    {"agent_wallet": AGENT, "unused_days": 0}, {"agent_wallet": AGENT, "unused_days": -1},
    {"agent_wallet": AGENT, "unused_days": math.nan}, {"agent_wallet": AGENT, "action": "drop"},
    {"agent_wallet": AGENT, "keep_importance": 2}, {"agent_wallet": AGENT, "max_access_count": -1},
])
def test_expire_refuses_bad_parameters(engine_on_each_store, params) -> None:
    with pytest.raises(InvalidInputError):
        run_job(engine_on_each_store, "expire", params)


def test_a_users_expire_job_touches_only_that_users_rows(engine_on_each_store) -> None:
    engine = engine_on_each_store
    t0 = now_ms() - DAY_MS
    alice = _seed_expired(engine, ALICE, t0)
    bob = _seed_expired(engine, BOB, t0)
    shared = engine.ingest(Scope(agent_wallet=AGENT), [{"content": "office closes at 6", "created_at": t0,
                                                       "ttl": 60}])[0]
    job = engine.scoped(ALICE).run_job("expire", {"action": "delete"})
    assert job.status == "completed" and job.agent_wallet == AGENT
    assert (job.data["examined"], job.data["deleted"]) == (3, 2)
    assert _row(engine, alice["fact"]) is None
    for kept in (bob["fact"], bob["row"], shared):
        assert engine.store.get_memory(kept) is not None
    with pytest.raises(InvalidInputError):
        engine.scoped(ALICE).run_job("expire", {"owner": None})
    with pytest.raises(InvalidInputError):
        engine.scoped(ALICE).run_job("expire", {"agent_wallet": "0xsomeone-else"})


# ----------------------------------------------------------------------------- Temporal


@pytest.mark.temporal
async def test_expire_on_temporal_matches_inline(temporal_address) -> None:
    import uuid

    from temporalio.client import Client

    from manowar_memory import MemoryEngine
    from manowar_memory.jobs.temporal import create_worker, start_temporal_job

    client = await Client.connect(temporal_address)
    queue = f"manowar-test-{uuid.uuid4().hex[:12]}"
    t0 = now_ms() - DAY_MS
    config = MemoryConfig(ttl_by_kind={"event": 60})
    with MemoryEngine(store="sqlite:///:memory:", embedder="fake", config=config) as inline, \
            MemoryEngine(store="sqlite:///:memory:", embedder="fake", config=config) as remote:
        for engine in (inline, remote):
            _seed_expired(engine, ALICE, t0)
            _seed_expired(engine, BOB, t0)
        expected = run_job(inline, "expire", {"agent_wallet": AGENT}).data
        async with create_worker(client, remote.store, task_queue=queue, heartbeat_every=1.0):
            job = await start_temporal_job(client, remote.store, "expire", {"agent_wallet": AGENT}, task_queue=queue)
            result = await client.get_workflow_handle(job.temporal_workflow_id).result()
        assert (result["expired"], result["archived"]) == (expected["expired"], expected["archived"]) == (4, 4)
        assert result["byType"] == expected["byType"]
        assert remote.store.get_job(job.job_id).status == "completed"
        assert len(remote.list_items(ALICE)) == len(inline.list_items(ALICE)) == 1


def test_a_rest_key_runs_expire_on_its_own_rows_only() -> None:
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from manowar_memory import MemoryEngine
    from manowar_memory.server.app import create_app
    from manowar_memory.server.auth import ApiKeys, hash_key

    with MemoryEngine(store="sqlite:///:memory:", embedder="fake") as engine:
        t0 = now_ms() - DAY_MS
        alice = engine.ingest(ALICE, [{"content": "alice's old code", "created_at": t0, "ttl": 60}])[0]
        bob = engine.ingest(BOB, [{"content": "bob's old code", "created_at": t0, "ttl": 60}])[0]
        keys = ApiKeys([{"sha256": hash_key("k-bob"), "agentWallet": AGENT, "userAddress": "bob"}])
        http = TestClient(create_app(engine, keys=keys))
        r = http.post("/api/memory/jobs", headers={"X-API-Key": "k-bob"},
                      json={"type": "expire", "params": {"action": "delete"}})
        assert r.status_code == 200, r.text
        assert r.json()["status"] == "completed" and r.json()["data"]["deleted"] == 1
        assert engine.store.get_memory(bob) is None and engine.store.get_memory(alice) is not None
        r = http.post("/api/memory/jobs", headers={"X-API-Key": "k-bob"},
                      json={"type": "expire", "params": {"unusedDays": 0}})
        assert r.status_code == 400


def test_expire_can_be_scheduled_inline() -> None:
    from manowar_memory import MemoryEngine
    from manowar_memory.jobs import InlineSchedules, MaintenanceSchedule

    with MemoryEngine(store="sqlite:///:memory:", embedder="fake") as engine:
        engine.ingest(ALICE, [{"content": "stale code", "created_at": now_ms() - DAY_MS, "ttl": 60}])
        backend = InlineSchedules(engine)
        backend.install([MaintenanceSchedule(schedule_id="memory-daily-expire", job_type="expire", cron="0 4 * * *",
                                             params={"agent_wallet": AGENT, "action": "delete"})])
        job = backend.trigger("memory-daily-expire")
        assert job is not None and job.type == "expire" and job.status == "completed", job
        assert job.data["deleted"] == 1


def test_cli_remember_takes_a_ttl(tmp_path, monkeypatch) -> None:
    from click.testing import CliRunner

    from manowar_memory import MemoryEngine
    from manowar_memory.cli import cli

    monkeypatch.setenv("MANOWAR_HOME", str(tmp_path / "home"))
    url = f"sqlite:///{tmp_path / 'm.db'}"
    runner = CliRunner()
    ok = runner.invoke(cli, ["remember", "User is in Oslo today", "--agent", AGENT, "--user", "alice", "--ttl", "90",
                             "--store", url])
    assert ok.exit_code == 0, ok.output
    bad = runner.invoke(cli, ["remember", "x", "--agent", AGENT, "--ttl", "0", "--store", url])
    assert bad.exit_code != 0 and "ttl" in bad.output.lower()
    with MemoryEngine(store=url, embedder=None) as engine:
        [row] = engine.list_items(ALICE)
        assert row.metadata["expiresAt"] - row.created_at == 90_000


def test_a_row_recalled_by_pre_turn_is_not_forgotten_by_decay(engine_on_each_store) -> None:
    engine = engine_on_each_store
    old = now_ms() - 200 * DAY_MS
    recalled, ignored = engine.ingest(ALICE, [
        {"content": "Alice's bike lock code is 9090", "created_at": old, "metadata": {"app_id": "bike"}},
        {"content": "Alice once mentioned a pottery class", "created_at": old},
    ])
    packed = engine.pre_turn("what is the bike lock code", ALICE, filters={"app_id": "bike"})
    assert recalled in {i.id for i in packed.items} and ignored not in {i.id for i in packed.items}
    engine.flush()  # the access bumps of packed rows are written
    job = run_job(engine, "expire", {"agent_wallet": AGENT, "unused_days": 30})
    assert job.data["decayed"] == 1
    assert _row(engine, recalled).status == "active" and _row(engine, ignored).status == FORGOTTEN
