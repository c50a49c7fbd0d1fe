"""Maintenance jobs on the embedded store and on a real mongod (every test runs on both):
each job, each fixed reference quirk, dry runs, job records, pattern → skill promotion,
skills, and the tool registry."""

from __future__ import annotations

import base64
import gzip
import json

import pytest

from manowar_memory import ToolCallError
from manowar_memory._util import DAY_MS, now_ms
from manowar_memory.errors import InvalidInputError
from manowar_memory.jobs import (
    ArchiveRestoreParams,
    archive_restore,
    decode_archive,
    job_store,
    promote_pattern,
    run_job,
    validate_pattern,
)
from manowar_memory.jobs.core import pattern_id_for
from manowar_memory.records import MemoryRecord, Message, Pattern, PatternStep, PatternTrigger, Session, Transcript
from manowar_memory.stores.sqlite import SQLiteStore

AGENT = "0xagent0001"


def make_store(request, kind):
    """A fresh, empty store of ``kind`` ("sqlite" or "mongo", a unique database dropped after the test)."""
    if kind == "sqlite":
        return SQLiteStore(":memory:")
    from manowar_memory.stores.mongo import MongoStore

    db = request.getfixturevalue("mongo_db")
    return MongoStore(client=db.client, database=db.name, vector_search="local")


STORES = ["sqlite", pytest.param("mongo", marks=pytest.mark.mongo)]


@pytest.fixture(params=STORES)
def store(request):
    s = make_store(request, request.param)
    yield s
    s.close()


def _row(content, *, user="u1", agent=AGENT, age_days=0.0, source="knowledge", metadata=None, decay=1.0, now=None):
    now = now or now_ms()
    created = now - int(age_days * DAY_MS)
    return MemoryRecord(
        id=MemoryRecord.make_id(agent, content + (user or ""), created), agent_wallet=agent, user_address=user,
        content=content, source=source, decay_score=decay, created_at=created, updated_at=created,
        last_accessed_at=created, metadata=metadata or {},
    )


def _add(store, *rows):
    return store.add_memories(list(rows))


def _transcript(sid, tools, *, agent=AGENT, age_days=0.0, failed=False):
    created = now_ms() - int(age_days * DAY_MS)
    calls = [{"name": t, "args": {}} for t in tools]
    if failed:
        calls[-1]["success"] = False
    return Transcript(session_id=sid, agent_wallet=agent, thread_id=sid, created_at=created,
                      messages=[Message(role="user", content="do it"),
                                Message(role="assistant", content="done", tool_calls=calls)])


# ------------------------------------------------------------------ consolidate
def test_consolidate_supersedes_older_duplicate_keeps_history(store):
    old, new = _row("  Likes TEA ", age_days=2), _row("likes tea", age_days=1)
    other = _row("likes coffee", age_days=3)
    _add(store, old, new, other)
    job = run_job(store, "consolidate", {"agentWallet": AGENT})
    assert job.status == "completed" and job.data["consolidated"] == 1
    sup = store.get_memory(old.id)
    assert sup is not None, "history is kept: the superseded row still exists"
    assert sup.metadata["status"] == "superseded"
    assert sup.metadata["supersededBy"] == new.id
    assert len(sup.metadata["duplicateFingerprint"]) == 20 and sup.metadata["supersededAt"] > 0
    assert sup.decay_score <= 0.05
    assert store.get_memory(new.id).status == "active"
    assert store.get_memory(other.id).status == "active"


def test_consolidate_does_not_merge_across_users(store):
    a, b = _row("prefers dark mode", user="alice", age_days=2), _row("prefers dark mode", user="bob", age_days=1)
    _add(store, a, b)
    job = run_job(store, "consolidate", {"agent_wallets": [AGENT]})
    assert job.data["consolidated"] == 0
    assert store.get_memory(a.id).status == "active" and store.get_memory(b.id).status == "active"


def test_consolidate_does_not_recount_superseded_rows(store):
    _add(store, _row("x", age_days=3), _row("x", age_days=2), _row("x", age_days=1))
    assert run_job(store, "consolidate", {"agent_wallet": AGENT}).data["consolidated"] == 2
    again = run_job(store, "consolidate", {"agent_wallet": AGENT})
    assert again.data["consolidated"] == 0 and again.data["duplicateGroups"] == 0


def test_consolidate_keeps_lower_decay_and_other_agents(store):
    low = _row("y", age_days=2, decay=0.01)
    theirs = _row("y", agent="0xother", age_days=1)
    _add(store, low, _row("y", age_days=1), theirs)
    run_job(store, "consolidate", {"agent_wallet": AGENT})
    assert store.get_memory(low.id).decay_score == pytest.approx(0.01)
    assert store.get_memory(theirs.id).status == "active"


def test_consolidate_many_agents_one_pass_stays_per_agent(store):
    mine, theirs, third = _row("z", age_days=2), _row("z", agent="0xother", age_days=1), _row("z", agent="0xthird", age_days=3)
    newer_mine, newer_theirs = _row("z", age_days=1), _row("z", agent="0xother", age_days=0.5)
    _add(store, mine, theirs, third, newer_mine, newer_theirs, _row("z", agent="0xthird", age_days=1))
    job = run_job(store, "consolidate", {"agent_wallets": [AGENT, "0xother"]})
    assert job.data["byAgent"] == {AGENT: 1, "0xother": 1} and job.data["scanned"] == 4
    assert store.get_memory(mine.id).status == "superseded" and store.get_memory(theirs.id).status == "superseded"
    assert store.get_memory(third.id).status == "active", "agents not asked for are untouched"


def test_consolidate_without_agent_fails_job_record(store):
    job = run_job(store, "consolidate", {})
    assert job.status == "failed" and "agent_wallets" in job.error
    assert store.get_job(job.job_id).status == "failed"


# ------------------------------------------------------------------ patterns
def test_patterns_extract_upserts_qualifying_pattern(store):
    for i in range(5):
        store.upsert_transcript(_transcript(f"s{i}", ["search", "fetch", "summarise"]))
    store.upsert_transcript(_transcript("lonely", ["search"]))
    store.upsert_transcript(_transcript("old", ["search", "fetch", "summarise"], age_days=3))  # outside 1-day window
    job = run_job(store, "patterns_extract", {"agent_wallet": AGENT})
    assert job.status == "completed", job.error
    assert job.data["patterns"] == 1 and job.data["extracted"] == 6
    pid = pattern_id_for(AGENT, ["search", "fetch", "summarise"])
    pat = store.get_pattern(pid)
    assert pat is not None and pat.execution_count == 5
    assert pat.summary == "search -> fetch -> summarise" and [s.action for s in pat.steps] == ["search", "fetch", "summarise"]
    assert pat.success_rate == pytest.approx(0.75)
    first_created = pat.created_at
    # a second run updates, createdAt only set on insert
    store.upsert_transcript(_transcript("s9", ["search", "fetch", "summarise"]))
    job2 = run_job(store, "patterns_extract", {"agent_wallet": AGENT})
    pat2 = store.get_pattern(pid)
    assert job2.status == "completed" and pat2.execution_count == 6 and pat2.created_at == first_created


def test_patterns_below_threshold_or_failing_are_skipped(store):
    for i in range(3):  # count 3: confidence 0.3*0.65 = 0.195 < 0.2
        store.upsert_transcript(_transcript(f"a{i}", ["a", "b"]))
    for i in range(6):  # 6 runs, all with a failed call: success rate 0
        store.upsert_transcript(_transcript(f"f{i}", ["x", "y"], failed=True))
    job = run_job(store, "patterns_extract", {"agent_wallet": AGENT})
    assert job.data["patterns"] == 0 and job.data["skippedGroups"] == 2
    assert store.get_pattern(pattern_id_for(AGENT, ["a", "b"])) is None


def test_patterns_extract_requires_agent(store):
    with pytest.raises(InvalidInputError):
        run_job(store, "patterns_extract", {})


# ------------------------------------------------------------------ archives
def test_archive_round_trip_with_restore(store):
    rows = [_row(f"fact {i}", age_days=1) for i in range(4)]
    rows[0].embedding = [0.1, 0.2, 0.3]
    rows[0].embedding_model = "fake"
    _add(store, *rows, _row("too old", age_days=30))
    job = run_job(store, "archive_create", {"agent_wallet": AGENT, "window_days": 7})
    assert job.status == "completed" and job.data["memoriesArchived"] == 4
    archive = store.get_archive(job.data["archiveId"])
    assert archive.compressed and archive.metadata["entryCount"] == 4
    assert archive.metadata["compressedSize"] == len(archive.content)
    raw = gzip.decompress(base64.b64decode(archive.content))
    assert archive.metadata["originalSize"] == len(raw)
    assert {v["content"] for v in json.loads(raw)["vectors"]} == {f"fact {i}" for i in range(4)}
    assert store.get_memory(rows[1].id) is not None, "archiving does not delete rows"

    s = job_store(store)
    # restoring while the rows exist duplicates nothing
    assert archive_restore(s, ArchiveRestoreParams(archive_id=archive.archive_id))["restored"] == 0
    store.delete_memories([r.id for r in rows[:2]])
    # rows deleted since the archive was made stay gone unless the application asks for them
    report = archive_restore(s, ArchiveRestoreParams(archive_id=archive.archive_id))
    assert report == {"archiveId": archive.archive_id, "restored": 0, "skippedExisting": 2, "skippedDeleted": 2,
                      "entryCount": 4}
    assert store.get_memory(rows[0].id) is None
    report = archive_restore(s, ArchiveRestoreParams(archive_id=archive.archive_id, restore_deleted=True))
    assert report == {"archiveId": archive.archive_id, "restored": 2, "skippedExisting": 2, "skippedDeleted": 0,
                      "entryCount": 4}
    back = store.get_memory(rows[0].id)
    assert back.content == "fact 0" and back.user_address == "u1"
    assert back.embedding == pytest.approx([0.1, 0.2, 0.3])
    assert sum(1 for _ in store.iter_memories(AGENT)) == 5


def test_archive_uncompressed_is_raw_json(store):
    _add(store, _row("one", age_days=1))
    job = run_job(store, "archive_create", {"agent_wallet": AGENT, "compress": False})
    archive = store.get_archive(job.data["archiveId"])
    assert not archive.compressed and json.loads(archive.content)["vectors"][0]["content"] == "one"
    assert decode_archive(archive)["agentWallet"] == AGENT


# ------------------------------------------------------------------ decay
def test_decay_update_keeps_superseded_and_deleted_floors(store):
    now = now_ms()
    active = _row("active", age_days=30, now=now)
    sup = _row("sup", age_days=0, decay=0.04, metadata={"status": "superseded"}, now=now)
    gone = _row("gone", age_days=0, decay=0.0, metadata={"status": "deleted"}, now=now)
    _add(store, active, sup, gone)
    job = run_job(store, "decay_update", {"half_life_days": 30})
    assert job.data["updated"] == 1 and job.data["skippedInactive"] == 2
    assert store.get_memory(active.id).decay_score == pytest.approx(0.5, abs=1e-3)
    assert store.get_memory(sup.id).decay_score == pytest.approx(0.04)
    assert store.get_memory(gone.id).decay_score == 0.0


@pytest.mark.parametrize("half_life", [0, -5])
def test_decay_update_rejects_non_positive_half_life(store, half_life):
    _add(store, _row("a", age_days=10))
    job = run_job(store, "decay_update", {"half_life_days": half_life})
    assert job.status == "failed" and "half_life_days must be" in job.error


# ------------------------------------------------------------------ cleanup
def _seed_cleanup(store):
    now = now_ms()
    stale = _row("stale", age_days=100, decay=0.1, now=now)
    pinned = _row("pinned", age_days=100, decay=0.1, metadata={"retention": "pinned"}, now=now)
    fresh_decay = _row("high decay", age_days=100, decay=0.5, now=now)
    recent = _row("recent", age_days=1, decay=0.1, now=now)
    _add(store, stale, pinned, fresh_decay, recent)
    store.upsert_transcript(_transcript("old-t", ["a"], age_days=100))
    store.upsert_transcript(_transcript("new-t", ["a"], age_days=1))
    # unused for 100 days but not expired: MongoDB's TTL monitor cannot remove it behind the job's back
    store.upsert_session(Session(session_id="idle", agent_wallet=AGENT, expires_at=now + DAY_MS,
                                 last_accessed_at=now - 100 * DAY_MS))
    store.upsert_session(Session(session_id="live", agent_wallet=AGENT, expires_at=now + DAY_MS))
    return stale, pinned, fresh_decay, recent


def test_cleanup_deletes_only_stale_rows(store):
    stale, pinned, fresh_decay, recent = _seed_cleanup(store)
    job = run_job(store, "cleanup", {"olderThanDays": 90})
    assert job.status == "completed", job.error
    assert job.data["vectorsDeleted"] == 1 and job.data["freedBytes"] == len("stale")
    assert job.data["transcriptsDeleted"] == 1 and job.data["sessionsDeleted"] == 1
    assert job.data["deleted"] == 3
    assert store.get_memory(stale.id) is None
    assert all(store.get_memory(r.id) is not None for r in (pinned, fresh_decay, recent))
    assert store.get_transcript("old-t", AGENT) is None and store.get_transcript("new-t", AGENT) is not None
    assert store.get_session("live", AGENT) is not None


def test_cleanup_purges_expired_sessions(store):
    now = now_ms()
    store.upsert_session(Session(session_id="expired", agent_wallet=AGENT, expires_at=now - 1000))
    store.upsert_session(Session(session_id="live", agent_wallet=AGENT, expires_at=now + DAY_MS))
    job = run_job(store, "cleanup", {"older_than_days": 90})
    # on MongoDB the TTL index may have removed the expired session already
    assert job.data["sessionsDeleted"] in ({1} if store.name == "sqlite" else {0, 1})
    assert store.get_session("expired", AGENT) is None and store.get_session("live", AGENT) is not None
    assert job_store(store).count_stale_sessions(now_ms(), now - 90 * DAY_MS) == 0


def test_cleanup_deletes_sessions_unused_since_the_cutoff(store):
    now = now_ms()
    store.upsert_session(Session(session_id="idle", agent_wallet=AGENT, expires_at=now + DAY_MS,
                                 last_accessed_at=now - 100 * DAY_MS))
    store.upsert_session(Session(session_id="used", agent_wallet=AGENT, expires_at=now + DAY_MS,
                                 last_accessed_at=now - DAY_MS))
    dry = run_job(store, "cleanup", {"older_than_days": 90}, dry_run=True)
    assert dry.data["sessionsDeleted"] == 1 and store.get_session("idle", AGENT) is not None
    job = run_job(store, "cleanup", {"older_than_days": 90})
    assert job.data["sessionsDeleted"] == 1
    assert store.get_session("idle", AGENT) is None and store.get_session("used", AGENT) is not None


@pytest.mark.parametrize("params", [{"older_than_days": 0}, {"older_than_days": -1}, {}])
def test_cleanup_rejects_zero_negative_or_missing_days(store, params):
    stale, *_ = _seed_cleanup(store)
    job = run_job(store, "cleanup", params)
    assert job.status == "failed" and "older_than_days > 0" in job.error
    assert store.get_memory(stale.id) is not None
    assert store.get_transcript("new-t", AGENT) is not None and store.get_transcript("old-t", AGENT) is not None
    assert store.get_session("live", AGENT) is not None


# ------------------------------------------------------------------ dry run and job records
def _snapshot(store):
    rows = sorted((r.id, r.decay_score, json.dumps(r.metadata, sort_keys=True)) for r in store.iter_memories())
    return rows, store.stats()


@pytest.mark.parametrize("job_type,params", [
    ("consolidate", {"agent_wallet": AGENT}),
    ("patterns_extract", {"agent_wallet": AGENT}),
    ("archive_create", {"agent_wallet": AGENT, "window_days": 365}),
    ("decay_update", {"half_life_days": 7}),
    ("cleanup", {"older_than_days": 90}),
])
def test_dry_run_writes_nothing_but_reports(store, job_type, params):
    _seed_cleanup(store)
    _add(store, _row("dup", age_days=2), _row("dup", age_days=1))
    for i in range(5):
        store.upsert_transcript(_transcript(f"p{i}", ["s", "t"]))
    before = _snapshot(store)
    job = run_job(store, job_type, params, dry_run=True)
    assert job.status == "completed", job.error
    assert job.data["dryRun"] is True
    assert _snapshot(store) == before
    assert store.get_job(job.job_id).data["dryRun"] is True
    expected = {"consolidate": ("consolidated", 1), "patterns_extract": ("patterns", 1),
                "archive_create": ("memoriesArchived", 6), "decay_update": ("updated", 6),
                "cleanup": ("deleted", 3)}[job_type]
    assert job.data[expected[0]] == expected[1]


def test_job_record_lifecycle(store):
    _add(store, _row("a", age_days=10))
    job = run_job(store, "decay_update", {"half_life_days": 10}, progress=True)
    stored = store.get_job(job.job_id)
    assert stored.status == "completed" and stored.execution == "inline"
    assert stored.completed_at >= stored.created_at and stored.job_id.startswith("memjob_")
    assert stored.data["updated"] == 1 and stored.data["input"]["half_life_days"] == 10


def test_unknown_job_type_is_rejected_not_cleanup(store):
    stale, *_ = _seed_cleanup(store)
    with pytest.raises(InvalidInputError, match="unknown job type"):
        run_job(store, "vacuum", {"older_than_days": 90})
    assert store.get_memory(stale.id) is not None


# ------------------------------------------------------------------ patterns -> skills
def _pattern(store, count, rate, pid="pat_x"):
    store.upsert_pattern(Pattern(pattern_id=pid, agent_wallet=AGENT, trigger=PatternTrigger(value="a"),
                                 steps=[PatternStep(action="a", order=0), PatternStep(action="b", order=1)],
                                 summary="a -> b", success_rate=rate, execution_count=count))
    return pid


def test_validate_pattern_rule(store):
    assert validate_pattern(store, "missing")["valid"] is False
    v = validate_pattern(store, _pattern(store, 4, 0.7))
    assert v["valid"] and v["confidence"] == pytest.approx(0.28) and v["toolSequence"] == ["a", "b"]
    assert validate_pattern(store, _pattern(store, 3, 0.65, "pat_y"))["valid"] is False  # confidence 0.195
    assert validate_pattern(store, _pattern(store, 10, 0.5, "pat_z"))["valid"] is False  # success rate


def test_promote_revalidates_and_refuses_duplicates(store):
    weak = _pattern(store, 2, 0.6, "pat_weak")
    assert promote_pattern(store, weak, "Weak")["promoted"] is False
    pid = _pattern(store, 8, 0.9)
    first = promote_pattern(store, pid, "Research")
    assert first["promoted"] and first["skillId"].startswith(f"skill_{pid}_")
    skill = store.get_skill(first["skillId"])
    assert skill.trigger == {"type": "pattern", "patterns": [pid, "a", "b"]}
    assert skill.spawn_config["maxSteps"] == 3 and skill.agents == [AGENT]
    assert store.get_pattern(pid).metadata["taskType"] == "promoted"
    again = promote_pattern(store, pid, "Research")
    assert again["promoted"] is False and again["skillId"] == first["skillId"]
    assert len(store.list_skills(AGENT, None, 100)) == 1
    assert promote_pattern(store, pid, "Other name")["promoted"] is True


def test_list_and_get_skills(store):
    from manowar_memory.jobs import get_skill, list_skills

    strong, weak = _pattern(store, 10, 0.95, "pat_strong"), _pattern(store, 6, 0.8, "pat_weak2")
    store.upsert_pattern(Pattern(pattern_id="pat_other", agent_wallet="0xother", trigger=PatternTrigger(value="a"),
                                 steps=[PatternStep(action="a", order=0)], summary="a", success_rate=0.9,
                                 execution_count=9))
    ids = {pid: promote_pattern(store, pid, f"Skill {pid}")["skillId"] for pid in (weak, strong, "pat_other")}
    mine = list_skills(store, AGENT)
    assert [s.skill_id for s in mine] == [ids[strong], ids[weak]], "best success rate first, only this agent"
    assert [s.skill_id for s in list_skills(store, None, "learned", 100)][:1] == [ids[strong]]
    assert len(list_skills(store, None, None, -5)) == 1, "limit is clamped to 1..100"
    assert len(list_skills(store, None, None, 0)) == 3, "0 means the default (20), as in the reference"
    assert list_skills(store, AGENT, "custom") == []
    got = get_skill(store, ids["pat_other"])
    assert got.agents == ["0xother"] and got.description.startswith("Learned from pattern pat_other")
    assert get_skill(store, "skill_missing") is None
    tools = _job_tools(store)
    assert tools["memory_get_skill"].call(skill_id=ids[weak])["skill"]["name"] == "Skill pat_weak2"
    for not_ours in ("nope", ids["pat_other"]):  # missing, or another agent's: the same NotFoundError
        with pytest.raises(ToolCallError) as err:
            tools["memory_get_skill"].call(skill_id=not_ours)
        assert err.value.payload["error"]["type"] == "NotFoundError"


def test_failed_job_record_is_stored(store):
    job = run_job(store, "patterns_extract", {"agent_wallet": AGENT, "time_range": {"start": 10, "end": 5}})
    stored = store.get_job(job.job_id)
    assert stored.status == "failed" and "before its start" in stored.error
    assert stored.completed_at is not None and stored.agent_wallet == AGENT and stored.type == "patterns_extract"


# ------------------------------------------------------------------ tools
def _job_tools(store):
    from manowar_memory import MemoryEngine, Scope, memory_tools

    engine = MemoryEngine(store=store, embedder="fake")  # the fixture closes the store
    # the application's agent-wide tools (an agent scope it opted in): every user's rows of the agent
    scoped = engine.scoped(Scope(agent_wallet=AGENT), agent_jobs=True, allow_pin=True)
    return {t.name: t for t in memory_tools(scoped, groups=["jobs"])}


def test_job_tools_registry(store):
    tools = _job_tools(store)
    assert {"memory_consolidate", "memory_patterns_extract", "memory_archive_create", "memory_decay_update",
            "memory_validate_pattern", "memory_promote_pattern"} <= set(tools)
    assert "memory_cleanup" not in tools, "cleanup spans every agent: not a scoped tool"
    schema = tools["memory_decay_update"].json_schema()
    assert "half_life_days" in schema["properties"] and "dry_run" in schema["properties"]
    assert "agent_wallet" not in schema["properties"]
    assert tools["memory_promote_pattern"].json_schema()["required"] == ["pattern_id", "skill_name"]
    _add(store, _row("a", age_days=30))
    _add(store, _row("b", age_days=30, agent="0xother"))
    out = tools["memory_decay_update"].call(half_life_days=30)
    assert out["status"] == "completed" and out["report"]["updated"] == 1, "only the bound agent's row"
    pid = _pattern(store, 8, 0.9)
    res = tools["memory_promote_pattern"].call(pattern_id=pid, skill_name="S")
    assert res["promoted"] is True
    assert tools["memory_list_skills"].call()["skills"][0]["name"] == "S"


async def test_job_tool_async(store):
    tools = _job_tools(store)
    out = await tools["memory_decay_update"].acall(half_life_days=30, dry_run=True)
    assert out["status"] == "completed" and out["report"]["dryRun"] is True
    with pytest.raises(ToolCallError, match="half_life_days"):
        await tools["memory_decay_update"].acall(half_life_days=0)


def test_run_job_accepts_engine(store):
    from manowar_memory import MemoryEngine

    with MemoryEngine(store=store, embedder="fake") as engine:
        engine.store.add_memories([_row("e", age_days=30)])
        job = run_job(engine, "decay_update", {})
        assert job.status == "completed" and job.data["updated"] == 1
        assert engine.store.get_job(job.job_id) is not None


# ------------------------------------------------------------------ same jobs on MongoDB
@pytest.mark.mongo
def test_jobs_on_mongo_store(mongo_db):
    from manowar_memory.stores.mongo import MongoStore

    s = MongoStore(client=mongo_db.client, database=mongo_db.name)
    stale, pinned, _, _ = _seed_cleanup(s)
    alice_old = _row("dup", age_days=2)
    _add(s, alice_old, _row("dup", age_days=1), _row("dup", user="bob", age_days=1))
    for i in range(5):
        s.upsert_transcript(_transcript(f"p{i}", ["s", "t"]))
    assert run_job(s, "consolidate", {"agent_wallet": AGENT}).data["consolidated"] == 1
    assert s.get_memory(alice_old.id).status == "superseded"
    assert run_job(s, "patterns_extract", {"agent_wallet": AGENT}).data["patterns"] == 1
    arc = run_job(s, "archive_create", {"agent_wallet": AGENT, "window_days": 365})
    assert arc.data["memoriesArchived"] == 7
    decay = run_job(s, "decay_update", {})
    assert decay.data["updated"] == 6 and s.get_memory(alice_old.id).decay_score <= 0.05
    assert run_job(s, "cleanup", {"older_than_days": 0}).status == "failed"
    assert s.get_memory(stale.id) is not None
    clean = run_job(s, "cleanup", {"older_than_days": 90})
    assert clean.status == "completed" and s.get_memory(stale.id) is None and s.get_memory(pinned.id) is not None
    restored = archive_restore(job_store(s), ArchiveRestoreParams(archive_id=arc.data["archiveId"], restore_deleted=True))
    assert restored["restored"] == clean.data["vectorsDeleted"] and s.get_memory(stale.id) is not None
    assert s.get_job(clean.job_id).status == "completed"
    s.close()


class _WithoutPaging:
    """A store that lacks two maintenance methods (everything else is an in-memory SQLite store)."""

    def __init__(self) -> None:
        self._inner = SQLiteStore(":memory:")

    def __getattr__(self, name):
        if name in ("page_memories", "memory_user_counts"):
            raise AttributeError(name)
        return getattr(self._inner, name)


def test_a_store_without_the_maintenance_role_is_refused_by_name():
    from manowar_memory.errors import ConfigurationError
    from manowar_memory.jobs.batched import run_job_batch

    store = _WithoutPaging()
    with pytest.raises(ConfigurationError, match=r"MaintenanceStore\.memory_user_counts, MaintenanceStore\.page_memories"):
        job_store(store)
    with pytest.raises(ConfigurationError, match="cannot run maintenance jobs"):
        run_job(store, "decay_update", {"half_life_days": 7})
    with pytest.raises(ConfigurationError, match="page_memories"):
        run_job_batch(store, "decay_update", {"half_life_days": 7}, None, None, batch_size=10, now=now_ms())
    assert job_store(store._inner) is store._inner  # a complete store is used as it is
    store._inner.close()
