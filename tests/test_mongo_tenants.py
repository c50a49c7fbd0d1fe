"""On MongoDB, one user's reads do not touch other users' rows of the same agent (issue #14).

Checked with the server's own counts (explain's totalKeysExamined / totalDocsExamined), never
with timings: each read of one user's turn examines exactly as many index keys and documents
with 40 other users' rows in the store as with one (with none, a range scan can examine one
key fewer: the neighbour key that ends it).
"""

from __future__ import annotations

from typing import Any

import pytest
from pymongo import monitoring

from manowar_memory import MemoryRecord, Scope
from manowar_memory.records import Archive, Pattern, Session, Transcript
from manowar_memory.stores import _mql, _mql_schema
from manowar_memory.stores.base import MemoryQuery
from manowar_memory.stores.mongo import MongoStore

pytestmark = pytest.mark.mongo

AGENT = "agent-tenants"
ME = "user-me"
OTHERS = 40
ROWS = 25
DIMS = 8
MODEL = "fake:8"
WORDS = ["alpine", "hiking", "lisbon", "tram", "coffee", "piano", "garden", "marathon"]


def _vector(i: int) -> list[float]:
    return [float((i * (k + 3)) % 7) + 0.5 for k in range(DIMS)]


def _rows(user: str | None, n: int, start: int) -> list[MemoryRecord]:
    return [
        MemoryRecord(
            id=f"m{start + i}",
            agent_wallet=AGENT,
            user_address=user,
            thread_id="t",
            source="session",
            content=f"{WORDS[i % 8]} {WORDS[(i + 3) % 8]} note {i} of {user}",
            created_at=1_000 + start + i,
            embedding=_vector(start + i),
            embedding_model=MODEL,
        )
        for i in range(n)
    ]


def _scoped(kind: type, user: str | None, i: int, **kw: Any) -> Any:
    return kind(agent_wallet=AGENT, user_address=user, thread_id="t", created_at=1_000 + i, **kw)


def _fill_user(store: MongoStore, user: str | None, start: int) -> None:
    store.add_memories(_rows(user, ROWS, start))
    for i in range(3):
        tag = f"{i}-{user}"
        store.upsert_pattern(
            _scoped(
                Pattern,
                user,
                i,
                pattern_id=f"p{tag}",
                trigger={"value": "v"},
                summary=f"habit {i}",
                success_rate=0.1 * i,
            )
        )
        store.add_archive(
            _scoped(
                Archive,
                user,
                i,
                archive_id=f"a{tag}",
                summary=f"week {i}",
                content="c",
                date_range={"start": 0, "end": 1},
            )
        )
        store.upsert_session(
            _scoped(Session, user, i, session_id=f"s{tag}", last_accessed_at=2_000 + i, expires_at=2**42)
        )
        store.upsert_transcript(
            _scoped(
                Transcript,
                user,
                i,
                session_id=f"tr{tag}",
                summary=f"talked about {WORDS[i]} and {WORDS[i + 1]}",
                messages=[{"role": "user", "content": f"{WORDS[i + 2]} plans"}]
                + [{"role": "user", "content": " ".join(WORDS[(i + j) % 8] for j in range(400))} for _ in range(3)],
            )
        )


def _counts(explained: Any) -> tuple[int, int]:
    """totalKeysExamined and totalDocsExamined summed over every executionStats in an explain."""
    keys = docs = 0

    def walk(node: Any) -> None:
        nonlocal keys, docs
        if isinstance(node, dict):
            stats = node.get("executionStats")
            if isinstance(stats, dict) and "totalKeysExamined" in stats:
                keys += int(stats["totalKeysExamined"])
                docs += int(stats["totalDocsExamined"])
                return
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(explained)
    return keys, docs


def _aggregate(store: MongoStore, coll: str, pipeline: list[dict[str, Any]]) -> tuple[int, int]:
    return _counts(
        store.db.command("explain", {"aggregate": coll, "pipeline": pipeline, "cursor": {}}, verbosity="executionStats")
    )


def _find(
    store: MongoStore, coll: str, flt: dict[str, Any], sort: list[tuple[str, int]], limit: int, hint: str | None = None
) -> tuple[int, int]:
    return _counts(store.db[coll].find(flt, hint=hint).sort(sort).limit(limit).explain())


def _reads(store: MongoStore) -> dict[str, tuple[int, int]]:
    """Keys and documents examined by each read of one user's turn."""
    query = MemoryQuery(scope=Scope(agent_wallet=AGENT, user_address=ME, thread_id="t"))
    turn = MemoryQuery(scope=Scope(agent_wallet=AGENT, user_address=ME, thread_id="t"), durable=False)
    out: dict[str, tuple[int, int]] = {}
    for name, coll, pipelines, sort in (
        ("keyword", _mql_schema.MEMORY, _mql.keyword_pipelines(query, ["alpine", "lisbon"], 12), None),
        ("transcripts", _mql_schema.TRANSCRIPTS, _mql.transcript_search_pipelines(turn, ["hiking", "plans"], 12), None),
        (
            "transcript chunks",
            _mql_schema.TRANSCRIPT_CHUNKS,
            _mql.transcript_chunk_pipelines(turn, ["piano"], 12),
            {"_score": -1},
        ),
    ):
        # the store sends the branches as one pipeline; explain reports each branch's counts
        branches = [_aggregate(store, coll, p) for p in pipelines]
        union = _aggregate(store, coll, _mql.union_by_score(coll, pipelines, 12, sort))
        assert union == (sum(k for k, _ in branches), sum(d for _, d in branches))
        out[name] = union
    scope = _mql.scope_filter(query)
    out["list"] = _find(store, _mql_schema.MEMORY, scope, [("createdAt", -1), ("_id", -1)], 12,
                        hint=_mql.scope_list_hint(query))  # as the store's list_memories
    out["count"] = _counts(store.db.command(
        "explain", {"count": _mql_schema.MEMORY, "query": scope, "hint": _mql.scope_list_hint(query)}, verbosity="executionStats"))
    flt, _, sort = _mql.local_scan_query(query, MODEL)
    out["vector scan"] = _find(store, _mql_schema.MEMORY, flt, sort, 10_000, hint=_mql_schema.USER_SCAN_INDEX)  # as the store
    out["patterns"] = _find(
        store,
        _mql_schema.PATTERNS,
        _mql.scope_filter(query, collection=_mql_schema.PATTERNS),
        [("successRate", -1), ("createdAt", -1), ("_id", -1)],
        12,
    )
    out["archives"] = _find(
        store, _mql_schema.ARCHIVES, _mql.scope_filter(query, collection=_mql_schema.ARCHIVES), [("createdAt", -1), ("_id", -1)], 12
    )
    out["sessions"] = _find(
        store, _mql_schema.SESSIONS, _mql.live_session_filter(turn, 1_000_000), [("lastAccessedAt", -1), ("_id", -1)], 12
    )
    return out


@pytest.fixture
def store(mongo_client: Any, mongo_db: Any) -> Any:
    s = MongoStore(
        client=mongo_client,
        database=mongo_db.name,
        vector_search="local",
        vector_cache_lag_ms=0,
        transcript_chunk_bytes=4096,  # the long transcripts of _fill_user get sealed chunks
    )
    yield s
    s.close()


def test_one_users_reads_examine_nothing_of_other_users(store: MongoStore) -> None:
    _fill_user(store, ME, 0)
    _fill_user(store, None, 10_000)  # the agent's shared rows: part of every user's scope
    _fill_user(store, "user-0", 20_000)  # one other user (same words, same thread, same agent)
    one_other = _reads(store)
    query = MemoryQuery(scope=Scope(agent_wallet=AGENT, user_address=ME))
    hits = [(h.record.id, h.score) for h in store.keyword_search(query, "alpine lisbon", 12)]
    for n in range(1, OTHERS):
        _fill_user(store, f"user-{n}", 20_000 + 100 * n)
    crowded = _reads(store)
    assert all(keys > 0 for keys, _ in one_other.values())  # every read does use an index
    assert crowded == one_other
    # textScore depends on the document alone: the same rows, scores and order with the others
    assert [(h.record.id, h.score) for h in store.keyword_search(query, "alpine lisbon", 12)] == hits


def test_keyword_merge_equals_one_query_over_both_ranges(store: MongoStore) -> None:
    _fill_user(store, ME, 0)
    _fill_user(store, None, 10_000)
    _fill_user(store, "user-x", 20_000)
    query = MemoryQuery(scope=Scope(agent_wallet=AGENT, user_address=ME))
    merged = [(h.record.id, h.score) for h in store.keyword_search(query, "alpine tram", 15)]
    # one $text query over the agent (the user-less index prefix cannot serve it: read it all, then filter)
    store.memory.drop_index("idx_vector_text")
    store.memory.create_index(
        [("agentWallet", 1), ("content", "text"), ("context", "text")],
        name="agent_only_text",
        weights={"content": 2, "context": 1},
        default_language="english",
        language_override="_textLanguage",
    )
    single = list(
        store.memory.aggregate(
            [
                {"$match": {"$text": {"$search": "alpine tram"}, **_mql.scope_filter(query)}},
                {"$set": {"_score": {"$meta": "textScore"}}},
                {"$sort": {"_score": -1, "createdAt": -1, "_id": -1}},
                {"$limit": 15},
            ]
        )
    )
    assert merged == [(d["vectorId"], float(d["_score"])) for d in single]
    assert {ME, None} <= {d.get("userAddress") for d in single}  # both ranges took part


def _old_agent_wide_text_index(mongo_db: Any) -> None:
    """The text index a database made by an earlier version has: only the agent as its prefix."""
    mongo_db[_mql_schema.MEMORY].create_index(
        [("agentWallet", 1), ("content", "text"), ("context", "text")],
        name="idx_vector_text",
        weights={"content": 2, "context": 1},
        default_language="english",
        language_override="_textLanguage",
    )


def test_an_agent_wide_index_is_replaced_on_open(mongo_client: Any, mongo_db: Any) -> None:
    _old_agent_wide_text_index(mongo_db)
    mongo_db[_mql_schema.MEMORY].insert_one(
        {
            "agentWallet": AGENT,
            "userAddress": ME,
            "vectorId": "m1",
            "content": "alpine lake",
            "source": "session",
            "createdAt": 1,
        }
    )
    for _ in range(2):  # idempotent: a second open finds it done
        s = MongoStore(client=mongo_client, database=mongo_db.name, vector_search="local")
        info = s.memory.index_information()["idx_vector_text"]
        assert [k for k, _ in info["key"]][:2] == ["agentWallet", "userAddress"]
        hits = s.keyword_search(MemoryQuery(scope=Scope(agent_wallet=AGENT, user_address=ME)), "alpine", 5)
        assert [h.record.id for h in hits] == ["m1"]
        s.close()


def _profiled(store: MongoStore, run: Any) -> tuple[int, int, int]:
    """Operations on the memory collection while ``run()`` runs, with the keys and documents
    they examined (the server's profiler)."""
    profile = store.db["system.profile"]
    store.db.command("profile", 0)
    profile.drop()
    store.db.command("profile", 2)
    try:
        run()
    finally:
        store.db.command("profile", 0)
    ops = list(profile.find({"ns": f"{store.db.name}.{_mql_schema.MEMORY}"}))
    return len(ops), sum(int(d.get("keysExamined", 0)) for d in ops), sum(int(d.get("docsExamined", 0)) for d in ops)


def test_the_vector_cache_loads_syncs_and_counts_only_the_users_rows(mongo_client: Any, mongo_db: Any) -> None:
    # every search reloads and recounts its partitions: loads, sync windows, counts and the final
    # fetch are all in the profile
    store = MongoStore(
        client=mongo_client,
        database=mongo_db.name,
        vector_search="local",
        vector_cache_lag_ms=0,
        vector_cache_recount_s=0,
        vector_cache_reload_s=1e-6,
    )
    query = MemoryQuery(scope=Scope(agent_wallet=AGENT, user_address=ME))
    try:
        store.add_memories(_rows(ME, ROWS, 0) + _rows(None, ROWS, 10_000) + _rows("user-0", ROWS, 20_000))

        def search() -> None:
            for i in range(3):
                hits, info = store.vector_search(query, _vector(i), MODEL, 10)
                assert info.method == "local-cache" and info.candidates == 2 * ROWS
                assert {h.record.user_address for h in hits} <= {ME, None}

        search()  # loaded once before the counts
        one_other = _profiled(store, search)
        store.add_memories([r for n in range(1, OTHERS) for r in _rows(f"user-{n}", ROWS, 20_000 + 100 * n)])
        crowded = _profiled(store, search)
        assert one_other[0] > 0 and one_other[2] >= 3 * 2 * ROWS  # each search loaded both partitions
        assert crowded == one_other
        assert {key[1] for key in store._partitions} == {ME, None}  # no other user's rows were cached
    finally:
        store.close()


def test_chunks_written_without_a_user_are_still_found_and_get_it_back(store: MongoStore) -> None:
    _fill_user(store, ME, 0)
    chunks = store.transcript_chunks
    assert len(chunks.distinct("sessionId", {"userAddress": ME})) == 3  # each transcript has sealed chunks
    chunks.update_many({}, {"$unset": {"userAddress": ""}})  # as written before chunks carried the user
    turn = MemoryQuery(scope=Scope(agent_wallet=AGENT, user_address=ME))
    # "marathon" is only in the long messages; the sealed chunks hold the older of them
    found = {t.session_id for t, _ in store.search_transcripts(turn, "marathon", 5)}
    assert found == {f"tr{i}-{ME}" for i in range(3)}
    transcript = store.get_transcript(f"tr0-{ME}", AGENT)
    assert transcript is not None
    store.upsert_transcript(transcript)  # the next write puts the user back on its chunks
    assert (
        chunks.count_documents({"userAddress": ME, "sessionId": f"tr0-{ME}"})
        == chunks.count_documents({"sessionId": f"tr0-{ME}"})
        > 0
    )
    assert {t.session_id for t, _ in store.search_transcripts(turn, "marathon", 5)} == found


def test_engines_opening_an_old_database_together_end_with_the_new_index(mongo_client: Any, mongo_db: Any) -> None:
    from concurrent.futures import ThreadPoolExecutor

    _old_agent_wide_text_index(mongo_db)

    def open_store(_: int) -> MongoStore:
        return MongoStore(client=mongo_client, database=mongo_db.name, vector_search="local")

    with ThreadPoolExecutor(4) as pool:
        stores = list(pool.map(open_store, range(4)))  # none raises
    text = [i for i in mongo_db[_mql_schema.MEMORY].list_indexes() if "_fts" in i["key"]]
    assert [(i["name"], list(i["key"])[:2]) for i in text] == [("idx_vector_text", ["agentWallet", "userAddress"])]
    for s in stores:
        s.close()


class _Commands(monitoring.CommandListener):
    """The commands a store sends (pymongo command monitoring)."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if event.command_name in ("find", "aggregate", "count"):
            self.sent.append(dict(event.command))

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


def _winning_stages(explained: dict[str, Any]) -> list[tuple[str, str | None]]:
    """(stage, indexName) of every stage of the winning plan, wherever explain puts it."""
    out: list[tuple[str, str | None]] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if "winningPlan" in node:
                plan = node["winningPlan"]
                walk_plan(plan.get("queryPlan", plan))  # the SBE engine nests the plan one level down
                return
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    def walk_plan(node: Any) -> None:
        if isinstance(node, dict):
            if "stage" in node:
                out.append((node["stage"], node.get("indexName")))
            for key in ("inputStage", "inputStages"):
                if key in node:
                    walk_plan(node[key])
        elif isinstance(node, list):
            for value in node:
                walk_plan(value)

    walk(explained)
    return out


def test_list_count_and_get_run_on_their_scope_indexes(mongo_uri: str, mongo_db: Any) -> None:
    """The winning plans of the commands ``list_memories``, ``count_memories`` and
    ``get_memory`` really send (recorded, then explained): index scans of the (agent, user,
    createdAt) index for the first two and of the unique (agent, vectorId) index for the
    third; never a collection scan, with many other users' newer rows in the agent."""
    commands = _Commands()
    store = MongoStore(mongo_uri, database=mongo_db.name, vector_search="local", event_listeners=[commands])
    try:
        store.add_memories(_rows(ME, ROWS, 0) + _rows(None, ROWS, 1_000))
        for n in range(10):  # other users' rows, all newer: an agent-wide newest-first scan would read them first
            store.add_memories(_rows(f"user-{n}", ROWS, 10_000 + 100 * n))
        query = MemoryQuery(scope=Scope(agent_wallet=AGENT, user_address=ME))
        expected = {"list": _mql_schema.SCOPE_LIST_INDEX, "count": _mql_schema.SCOPE_LIST_INDEX,
                    "get": _mql_schema.VECTOR_AGENT_ID_INDEX, "get by id": _mql_schema.VECTOR_AGENT_ID_INDEX}
        reads = {"list": lambda: store.list_memories(query, limit=10), "count": lambda: store.count_memories(query),
                 "get": lambda: store.get_memory("m3", query),
                 "get by id": lambda: store.get_memory("m3", agent_wallet=AGENT)}
        for name, read in reads.items():
            commands.sent.clear()
            assert read()  # the read finds what it should
            (sent,) = [c for c in commands.sent if c.get(next(iter(c))) == _mql_schema.MEMORY]
            command = {k: v for k, v in sent.items() if not k.startswith("$") and k not in ("lsid", "txnNumber")}
            stages = _winning_stages(store.db.command("explain", command, verbosity="queryPlanner"))
            assert ("COLLSCAN", None) not in stages, (name, stages)
            assert {index for stage, index in stages if stage == "IXSCAN"} == {expected[name]}, (name, stages)
    finally:
        store.close()


def test_the_read_by_event_date_runs_on_its_scope_index(mongo_uri: str, mongo_db: Any) -> None:
    """``memories_dated_between`` sends a find whose winning plan scans the (agent, user,
    metadata.eventDate) index, with many other users' rows of the same dates in the agent."""
    commands = _Commands()
    store = MongoStore(mongo_uri, database=mongo_db.name, vector_search="local", event_listeners=[commands])

    def dated(rows: list[MemoryRecord]) -> list[MemoryRecord]:
        return [r.model_copy(update={"metadata": {"eventDate": f"2023-06-{1 + i % 28:02d}"}}) for i, r in enumerate(rows)]

    try:
        store.add_memories(dated(_rows(ME, ROWS, 0)) + dated(_rows(None, ROWS, 1_000)))
        for n in range(10):
            store.add_memories(dated(_rows(f"user-{n}", ROWS, 10_000 + 100 * n)))
        query = MemoryQuery(scope=Scope(agent_wallet=AGENT, user_address=ME))
        june_12 = 1_686_528_000_000
        commands.sent.clear()
        found = store.memories_dated_between(query, june_12, june_12 + 86_400_000, 50)
        assert found and {r.metadata["eventDate"] for r in found} == {"2023-06-12"}
        assert {r.user_address for r in found} <= {ME, None}
        (sent,) = [c for c in commands.sent if c.get(next(iter(c))) == _mql_schema.MEMORY]
        command = {k: v for k, v in sent.items() if not k.startswith("$") and k not in ("lsid", "txnNumber")}
        stages = _winning_stages(store.db.command("explain", command, verbosity="queryPlanner"))
        assert ("COLLSCAN", None) not in stages, stages
        assert {index for stage, index in stages if stage == "IXSCAN"} == {_mql_schema.EVENT_DATE_INDEX}, stages
    finally:
        store.close()


def test_the_vector_cache_counts_in_one_round_trip_and_reads_no_empty_partition(mongo_uri: str, mongo_db: Any) -> None:
    """Loading a partition counts its rows of the model and of other models in one aggregate and
    reads the rows only when there are some: the agent's user-less partition, empty here, is
    counted and never read. A user-less row written afterwards is found by the next search (the
    empty partition's sync reads it, in one round trip), and a row of another model is counted
    as skipped."""
    commands = _Commands()
    store = MongoStore(mongo_uri, database=mongo_db.name, vector_search="local", event_listeners=[commands],
                       vector_cache_lag_ms=0, vector_cache_recount_s=0)
    query = MemoryQuery(scope=Scope(agent_wallet=AGENT, user_address=ME))
    try:
        store.add_memories(_rows(ME, ROWS, 0))
        commands.sent.clear()
        hits, info = store.vector_search(query, _vector(1), MODEL, 5)
        assert info.method == "local-cache" and info.candidates == ROWS and len(hits) == 5
        counts = [c for c in commands.sent if c.get("aggregate") == _mql_schema.MEMORY]
        assert [c["pipeline"] for c in counts] == [_mql.embedding_model_counts_pipeline(AGENT, [ME, None])]
        user_less_reads = [c for c in commands.sent if c.get("find") == _mql_schema.MEMORY
                           and "userAddress" in c.get("filter", {}) and c["filter"]["userAddress"] is None]
        assert user_less_reads == []  # counted empty: not read
        shared = _rows(None, 1, 5_000)[0].model_copy(update={"content": "a note every user of the agent sees"})
        other_model = _rows(ME, 1, 6_000)[0].model_copy(update={"embedding_model": "other:8"})
        store.add_memories([shared, other_model])
        commands.sent.clear()
        hits, info = store.vector_search(query, shared.embedding or [], MODEL, ROWS + 5)
        assert info.candidates == ROWS + 1 and shared.id in {h.record.id for h in hits}
        assert info.skipped_other_models == 1
        # both partitions' syncs read the rows written since, vectors and all, in the one find
        # that looks for them (no second round trip by _id), and count them in one aggregate
        finds = [c for c in commands.sent if c.get("find") == _mql_schema.MEMORY]
        syncs = [c for c in finds if _mql_schema.SYNC_FIELD in str(c["filter"])]
        assert len(syncs) == 1 and syncs[0]["projection"].get("embedding") == 1
        assert [w["userAddress"] for w in syncs[0]["filter"]["$or"]] == [ME, None]
        assert [c for c in finds if "_id" in c["filter"] and "userAddress" not in c["filter"]] == []
        assert len([c for c in commands.sent if c.get("aggregate") == _mql_schema.MEMORY and "$group" in str(c)]) == 1
    finally:
        store.close()


def test_users_searching_at_once_share_the_user_less_partition(mongo_uri: str, mongo_db: Any) -> None:
    """Threads searching as users of one agent each sync their user's partition together with the
    agent's user-less one, which they all share, both locked for the sync; each user searches
    from two threads at once (two workers, two tabs), which would deadlock on the two locks taken
    in opposite orders. None waits forever, each finds the row it has just written, counts its
    user's and the user-less rows, and finds no other user's rows."""
    import threading
    import time

    store = MongoStore(mongo_uri, database=mongo_db.name, vector_search="local", vector_cache_lag_ms=0,
                       vector_cache_recount_s=0)
    users = [f"user-{n}" for n in range(3)]
    turns = 8
    try:
        store.add_memories(_rows(None, 5, 50_000))
        for n, user in enumerate(users):
            store.add_memories(_rows(user, 5, 10_000 * (n + 1)))

        def searches(worker: int) -> list[str]:
            n, problems = worker // 2, []
            user = users[n]
            query = MemoryQuery(scope=Scope(agent_wallet=AGENT, user_address=user))
            for turn in range(turns):
                (new,) = _rows(user, 1, 10_000 * (n + 1) + 100 * (worker % 2 + 1) + turn)
                store.add_memories([new])
                hits, info = store.vector_search(query, new.embedding or [], MODEL, 50)
                found = {h.record.id: h.record.user_address for h in hits}
                if new.id not in found:
                    problems.append(f"{user} lost {new.id}")
                if set(found.values()) - {user, None}:
                    problems.append(f"{user} read {set(found.values()) - {user, None}}")
                if not 5 + 5 + turn + 1 <= info.candidates <= 5 + 5 + 2 * turns:  # the other worker writes too
                    problems.append(f"{user} counted {info.candidates} candidates at turn {turn}")
            return problems

        outcomes: dict[int, list[str]] = {}
        # daemon threads: a deadlock fails the test by the timeout and does not keep the process alive
        workers = [threading.Thread(target=lambda w=w: outcomes.__setitem__(w, searches(w)), daemon=True)
                   for w in range(2 * len(users))]
        for worker in workers:
            worker.start()
        deadline = time.monotonic() + 60
        for worker in workers:
            worker.join(timeout=max(0.0, deadline - time.monotonic()))
        assert sorted(outcomes) == list(range(len(workers))), "a search never returned (a deadlock?)"
        assert [p for problems in outcomes.values() for p in problems] == []
    finally:
        store.close()


def test_a_jobs_paged_read_of_its_users_rows_is_one_index_range(mongo_uri: str, mongo_db: Any) -> None:
    """The reads a job of one scope pages through (``page_memories``, ``iter_memories`` and
    ``iter_user_memories`` with ``users``) run on the (agent, user, _id) index, in ``_id`` order
    without a sort, and examine only the rows they return, with other users' rows written before,
    between and after the user's. Without the index a page walked the agent's ``_id`` order (every
    other user's rows in between) or sorted all of the user's rows again for every page."""
    commands = _Commands()
    store = MongoStore(mongo_uri, database=mongo_db.name, vector_search="local", event_listeners=[commands])
    try:
        for n in range(6):  # the user's rows and the user-less ones interleaved with ten other users'
            store.add_memories(_rows(f"user-{n}", ROWS, 10_000 + 100 * n))
            if n in (2, 4):
                store.add_memories(_rows(ME, ROWS // 2, 100 * n) + _rows(None, ROWS // 2, 1_000 + 100 * n))
        first, cursor = store.page_memories(AGENT, None, 5, users=[ME])
        reads = {
            "page": lambda: store.page_memories(AGENT, cursor, 5, users=[ME])[0],
            "page with the user-less rows": lambda: store.page_memories(AGENT, cursor, 5, users=[ME, None])[0],
            "iter": lambda: list(store.iter_memories(AGENT, users=[ME], batch_size=5))[:5],
            "iter of users": lambda: list(store.iter_user_memories(AGENT, [ME, None])),
        }
        for name, read in reads.items():
            commands.sent.clear()
            rows = read()
            assert rows and {r.user_address for r in rows} <= {ME, None}, name
            sent = commands.sent[0]
            command = {k: v for k, v in sent.items() if not k.startswith("$") and k not in ("lsid", "txnNumber")}
            explained = store.db.command("explain", command, verbosity="executionStats")
            stages = _winning_stages(explained)
            assert {index for stage, index in stages if stage == "IXSCAN"} == {_mql_schema.USER_ROWS_INDEX}, (name, stages)
            assert not {stage for stage, _ in stages} & {"SORT", "COLLSCAN"}, (name, stages)
            returned = int(explained["executionStats"]["nReturned"])
            assert _counts(explained)[1] == returned, (name, _counts(explained), returned)  # no other row read
        assert [r.id for r in first] == [r.id for r in list(store.iter_memories(AGENT, users=[ME]))[:5]]
    finally:
        store.close()
