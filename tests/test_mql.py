"""The MongoDB store's pure builders: filters, pipelines, index definitions. No server needed;
the same documents run against a real mongod in the conformance and congruence tests."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from manowar_memory import Scope
from manowar_memory.filters import normalize_filters
from manowar_memory.stores import _mql, _mql_schema
from manowar_memory.stores.base import MemoryQuery

A = "agent-1"
ACTIVE = {"$nin": ["deleted", "superseded", "expired", "forgotten"]}
NOW = 1_800_000_000_000
UNEXPIRED = {"$not": {"$lte": NOW}}


def q(**kw) -> MemoryQuery:
    scope_kw = {k: kw.pop(k) for k in ("agent_wallet", "user_address", "thread_id", "mode", "hai_id") if k in kw}
    scope = Scope(**{"agent_wallet": A, **scope_kw})
    if "filters" in kw:
        kw["filters"] = normalize_filters(kw["filters"])
    kw.setdefault("now", NOW)
    return MemoryQuery(scope=scope, **kw)


# ----------------------------------------------------------------------------- scope_filter


def test_agent_without_user_sees_only_user_less_rows() -> None:
    assert _mql.scope_filter(q()) == {"agentWallet": A, "userAddress": None, "metadata.status": ACTIVE,
                                      "metadata.expiresAt": UNEXPIRED}


def test_user_sees_own_and_user_less_rows() -> None:
    assert _mql.scope_filter(q(user_address="u1")) == {
        "agentWallet": A, "userAddress": {"$in": ["u1", None]}, "metadata.status": ACTIVE,
        "metadata.expiresAt": UNEXPIRED,
    }


def test_thread_only_for_non_durable_reads() -> None:
    durable = _mql.scope_filter(q(user_address="u1", thread_id="t1"))
    assert "threadId" not in durable
    hot = _mql.scope_filter(q(user_address="u1", thread_id="t1", durable=False))
    assert hot["threadId"] == "t1"
    assert "threadId" not in _mql.scope_filter(q(durable=False))


def test_mode_and_hai_when_set() -> None:
    f = _mql.scope_filter(q(mode="local", hai_id="h1"))
    assert (f["mode"], f["haiId"]) == ("local", "h1")
    f = _mql.scope_filter(q(hai_id="h2"))
    assert "mode" not in f and f["haiId"] == "h2"
    assert "mode" not in _mql.scope_filter(q()) and "haiId" not in _mql.scope_filter(q())


def test_active_only_off() -> None:
    assert "metadata.status" not in _mql.scope_filter(q(active_only=False))


def test_sources_apply_to_memory_rows_only() -> None:
    f = _mql.scope_filter(q(sources=("fact",), exclude_sources=("session",)))
    assert f["source"] == {"$in": ["fact"]}
    assert f["$and"] == [{"source": {"$nin": ["session"]}}]
    assert "source" not in _mql.scope_filter(q(sources=("fact",)), collection=_mql_schema.SESSIONS)


def test_filters_equality_list_null_and_nested_paths() -> None:
    f = _mql.scope_filter(q(filters={"appId": "x", "metadata.tags.lang": ["py", "rs"], "metadata.k": None,
                                     "metadata.n": 3, "scopeKind": "local"}))
    assert f["metadata.app_id"] == "x"
    assert f["metadata.tags.lang"] == {"$in": ["py", "rs"]}
    assert f["metadata.k"] is None and "metadata.k" in f
    assert f["metadata.n"] == 3
    assert f["scopeKind"] == "local"


def test_filters_never_replace_scope_keys() -> None:
    f = _mql.scope_filter(q(user_address="u1", filters={"userAddress": "u1", "metadata.status": "archived",
                                                        "agentWallet": "someone-else"}))
    assert f["agentWallet"] == A and f["userAddress"] == {"$in": ["u1", None]} and f["metadata.status"] == ACTIVE
    assert {"userAddress": "u1"} in f["$and"]
    assert {"metadata.status": "archived"} in f["$and"]
    assert {"agentWallet": "someone-else"} in f["$and"]


def test_filter_equal_to_the_scope_is_not_repeated() -> None:
    f = _mql.scope_filter(q(filters={"agentWallet": A}))
    assert "$and" not in f and f["agentWallet"] == A


def test_live_session_filter_adds_expiry() -> None:
    now = 1_700_000_000_123
    f = _mql.live_session_filter(q(user_address="u1", thread_id="t", durable=False), now)
    assert f["threadId"] == "t"
    assert f["expiresAt"] == {"$gt": dt.datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=dt.UTC)}


def test_dates_round_trip_at_millisecond_precision() -> None:
    for ms in (0, 1, 999, 1_700_000_000_999, 1_999_999_999_999):
        assert _mql.date_to_ms(_mql.ms_to_date(ms)) == ms
    naive = dt.datetime(2023, 11, 14, 22, 13, 20, 123000)
    assert _mql.date_to_ms(naive) == 1_700_000_000_123  # pymongo returns naive UTC by default
    assert _mql.date_to_ms(5) == 5


# ----------------------------------------------------------------------------- pipelines


def test_keyword_pipelines_one_per_user_range() -> None:
    query = q(user_address="u1")
    pipelines = _mql.keyword_pipelines(query, ["alpine", "hiking"], 7)
    assert len(pipelines) == 2  # the user's rows, then the agent's user-less rows
    for p, user in zip(pipelines, ["u1", None], strict=True):
        assert p[0] == {"$match": {"$text": {"$search": "alpine hiking"},
                                   **_mql.scope_filter(query), "userAddress": user}}
        assert p[1] == {"$set": {"_score": {"$meta": "textScore"}}}
        assert p[2]["$sort"] == {"_score": -1, "createdAt": -1, "_id": -1}
        assert p[3] == {"$limit": 7}
        assert p[4] == {"$project": {"embedding": 0}}
    (only,) = _mql.keyword_pipelines(q(), ["alpine"], 7)  # no user: the user-less rows alone
    assert only[0]["$match"]["userAddress"] is None


def test_keyword_pipelines_keep_a_caller_filter_on_the_user_field() -> None:
    query = q(user_address="u1", filters={"userAddress": "u2"})
    for p in _mql.keyword_pipelines(query, ["x"], 3):
        match = p[0]["$match"]
        assert match["userAddress"] in ("u1", None)  # the equality the index needs
        assert {"userAddress": "u2"} in match["$and"]  # ANDed, never replacing the scope


def test_union_by_score_sends_the_branches_as_one_pipeline() -> None:
    first, second = _mql.keyword_pipelines(q(user_address="u1"), ["x"], 4)
    union = _mql.union_by_score("memory", [first, second], 4)
    assert union[: len(first)] == first
    assert union[len(first)] == {"$unionWith": {"coll": "memory", "pipeline": second}}
    assert union[-2:] == [{"$sort": {"_score": -1, "createdAt": -1, "_id": -1}}, {"$limit": 4}]
    assert _mql.union_by_score("memory", [first], 4) == first  # one branch: sent as it is
    tail = _mql.union_by_score("c", [first, second], 9, {"_score": -1})[-2:]
    assert tail == [{"$sort": {"_score": -1}}, {"$limit": 9}]


def test_transcript_pipeline_uses_the_transcript_filter() -> None:
    query = q(user_address="u1", thread_id="t", durable=False, sources=("fact",))
    pipelines = _mql.transcript_search_pipelines(query, ["lisbon"], 3)
    assert [p[0]["$match"]["userAddress"] for p in pipelines] == ["u1", None]
    for p in pipelines:
        match = p[0]["$match"]
        assert match["$text"] == {"$search": "lisbon"} and match["threadId"] == "t" and "source" not in match
        assert p[-1] == {"$limit": 3}


def test_local_scan_query_streams_only_rows_of_the_query_model() -> None:
    flt, projection, sort = _mql.local_scan_query(q(user_address="u1"), "fake:64")
    assert flt == {**_mql.scope_filter(q(user_address="u1")), "embeddingModel": "fake:64"}
    assert projection == {"_id": 1, "embedding": 1} and sort == [("createdAt", -1)]
    other = _mql.other_model_filter(q(user_address="u1"), "fake:64")
    assert other["embeddingModel"] == {"$nin": ["fake:64", None]} and other["agentWallet"] == A


@pytest.mark.parametrize(
    ("limit", "expected"),
    [(1, (10, 200)), (10, (100, 2000)), (40, (400, 8000)), (50, (500, 10_000)), (100, (500, 10_000)),
     (800, (800, 10_000)), (20_000, (10_000, 10_000)), (0, (10, 200))],
)
def test_ann_sizes(limit: int, expected: tuple[int, int]) -> None:
    assert _mql.ann_sizes(limit) == expected
    ann_limit, candidates = _mql.ann_sizes(limit)
    assert ann_limit <= candidates <= _mql.ATLAS_MAX_CANDIDATES


def test_atlas_pipeline_prefilters_safe_fields_and_post_filters_everything() -> None:
    query = q(user_address="u1", mode="global", filters={"appId": "x", "source": ["fact", "knowledge"]})
    p = _mql.atlas_vector_pipeline(
        query, [0.1, 0.2], "voyage-4-large", 12,
        prefilter_fields=("agentWallet", "userAddress", "mode", "metadata.status", "metadata.app_id", "source"),
        min_score=0.55,
    )
    vs = p[0]["$vectorSearch"]
    assert vs["index"] == "vector_index" and vs["path"] == "embedding" and vs["queryVector"] == [0.1, 0.2]
    assert (vs["limit"], vs["numCandidates"]) == _mql.ann_sizes(12)
    # the whole scope is prefiltered (the user and the agent's shared rows, stored as null); caller
    # filters only when safe: metadata.status ($nin would match missing fields) stays after the ANN
    assert vs["filter"] == {"embeddingModel": "voyage-4-large", "agentWallet": A, "userAddress": {"$in": ["u1", None]},
                            "mode": "global", "metadata.app_id": "x", "source": {"$in": ["fact", "knowledge"]}}
    assert p[1] == {"$set": {"_score": {"$meta": "vectorSearchScore"}}}
    assert p[2] == {"$match": {**_mql.scope_filter(query), "embeddingModel": "voyage-4-large"}}
    assert p[3] == {"$match": {"_score": {"$gte": 0.55}}}
    assert p[4] == {"$limit": 12} and p[5] == {"$project": {"embedding": 0}}


def test_atlas_pipeline_defaults() -> None:
    p = _mql.atlas_vector_pipeline(q(), [1.0], "m", 5)
    # no user: only the agent's shared rows, before the ANN limit as after it
    assert p[0]["$vectorSearch"]["filter"] == {"embeddingModel": "m", "agentWallet": A, "userAddress": None}
    assert [next(iter(stage)) for stage in p] == ["$vectorSearch", "$set", "$match", "$limit", "$project"]


def test_prefilter_fields_from_the_environment_format() -> None:
    assert _mql.parse_prefilter_fields(None) == ()
    assert _mql.parse_prefilter_fields("") == ()
    assert _mql.parse_prefilter_fields(" agentWallet, userAddress,,agentWallet ,metadata.app_id") == (
        "agentWallet", "userAddress", "metadata.app_id")


def test_vector_index_definition() -> None:
    d = _mql.vector_index_definition(1024, ("agentWallet", "metadata.custom"))
    assert d["fields"][0] == {"type": "vector", "path": "embedding", "numDimensions": 1024, "similarity": "cosine"}
    paths = [f["path"] for f in d["fields"][1:]]
    assert all(f["type"] == "filter" for f in d["fields"][1:])
    assert paths[: len(_mql.REFERENCE_FILTER_FIELDS)] == list(_mql.REFERENCE_FILTER_FIELDS)
    assert "metadata.custom" in paths and paths[-1] == "embeddingModel" and len(paths) == len(set(paths))


def test_stats_pipeline() -> None:
    assert _mql.stats_pipeline("a")[0] == {"$match": {"agentWallet": "a"}}
    assert list(_mql.stats_pipeline(None)[0]) == ["$facet"]


# ----------------------------------------------------------------------------- indexes


def test_reference_collections_and_indexes() -> None:
    # the reference's seven collections, plus the maintenance schedules of the inline scheduler and
    # the sealed message chunks of transcripts past one document's size, and the turn ledger
    assert set(_mql_schema.INDEXES) == {"memory", "session_transcripts", "sessions", "patterns", "archives", "skills",
                                 "memory_jobs", "memory_schedules", "session_transcript_chunks", "session_turns"}
    names = {c: {i.name for i in specs} for c, specs in _mql_schema.INDEXES.items()}
    for name in ("idx_vector_wallet", "idx_vector_agent_id", "idx_vector_wallet_created", "idx_vector_wallet_thread",
                 "idx_vector_wallet_scope_thread", "idx_vector_user", "idx_vector_source", "idx_vector_app_id",
                 "idx_vector_decay", "idx_vector_last_accessed"):
        assert name in names["memory"]
    for name in ("idx_session_id", "idx_session_wallet", "idx_session_wallet_scope_thread", "idx_session_app_id",
                 "idx_session_ttl", "idx_session_last_accessed"):
        assert name in names["sessions"]
    ttl = next(i for i in _mql_schema.INDEXES["sessions"] if i.name == "idx_session_ttl")
    assert ttl.keys == [("expiresAt", 1)] and ttl.options == {"expireAfterSeconds": 0}
    unique = {i.name for specs in _mql_schema.INDEXES.values() for i in specs if i.options.get("unique")}
    assert {"idx_vector_agent_id", "idx_transcript_wallet_session", "idx_session_wallet_id", "idx_pattern_id",
            "idx_archive_id", "idx_skill_id", "idx_memory_job_id"} <= unique
    text = [i for specs in _mql_schema.INDEXES.values() for i in specs if any(v == "text" for _, v in i.keys)]
    assert {i.name for i in text} == {"idx_vector_text", "idx_transcript_text", "idx_transcript_chunk_text"}
    memory_text = next(i for i in text if i.name == "idx_vector_text")
    assert memory_text.keys == [("agentWallet", 1), ("userAddress", 1), ("content", "text"), ("context", "text")]
    assert memory_text.options["weights"] == {"content": 2, "context": 1}  # context counts half, as on SQLite
    assert all(i.keys[0] == ("agentWallet", 1) for i in text)  # equality prefix: per-agent postings
    for name in ("idx_vector_text", "idx_transcript_text"):  # and per user: other users' postings are never read
        assert next(i for i in text if i.name == name).keys[1] == ("userAddress", 1)
    for specs in _mql_schema.INDEXES.values():
        assert len({i.name for i in specs}) == len(specs)


def test_memory_update_pipeline_sets_values_literally_then_derives_the_store_fields() -> None:
    pipeline = _mql.memory_update_pipeline({"content": "$price is 5", "metadata": {"status": "deleted"}}, 7)
    assert pipeline[0] == {"$set": {"content": {"$literal": "$price is 5"},
                                    "metadata": {"$literal": {"status": "deleted"}}}}
    assert pipeline[1] == {"$set": {_mql_schema.ACTIVE_FACT_FIELD: _mql.active_fact_expr(), _mql_schema.SYNC_FIELD: 7}}
    assert _mql.memory_update_pipeline({}, 7) == [pipeline[1]]
    cond = _mql.active_fact_expr()["$cond"]
    assert cond[1:] == ["$metadata.factHash", "$$REMOVE"]
    assert {"$eq": ["$source", "fact"]} in cond[0]["$and"]


def test_active_fact_index_is_partial_and_unique() -> None:
    spec = {s.name: s for s in _mql_schema.INDEXES["memory"]}["idx_vector_active_fact"]
    assert spec.keys == [("agentWallet", 1), (_mql_schema.ACTIVE_FACT_FIELD, 1)]
    assert spec.options == {"unique": True, "partialFilterExpression": {_mql_schema.ACTIVE_FACT_FIELD: {"$exists": True}}}


# ----------------------------------------------------------------------------- maintenance


def test_memory_page_query_after_an_id_with_and_without_an_agent() -> None:
    assert _mql.memory_page_query(None, None) == {}
    assert _mql.memory_page_query("a1", None) == {"agentWallet": "a1"}
    assert _mql.memory_page_query("a1", "oid") == {"agentWallet": "a1", "_id": {"$gt": "oid"}}
    assert _mql.memory_page_query("a1", "oid", ["u1", None]) == {
        "agentWallet": "a1", "userAddress": {"$in": ["u1", None]}, "_id": {"$gt": "oid"}}
    assert _mql.memory_page_query("a1", None, created_from=5, created_to=9) == {
        "agentWallet": "a1", "createdAt": {"$gte": 5, "$lte": 9}}
    assert _mql.memory_page_query(None, "oid", created_to=9) == {"createdAt": {"$lte": 9}, "_id": {"$gt": "oid"}}


def test_transcripts_created_between_filter_of_an_agent_and_some_users() -> None:
    window = {"$gte": 1, "$lte": 2}
    assert _mql.transcripts_created_between_filter("a1", 1, 2) == {"agentWallet": "a1", "createdAt": window}
    assert _mql.transcripts_created_between_filter("a1", 1, 2, ["u1", None]) == {
        "agentWallet": "a1", "createdAt": window, "userAddress": {"$in": ["u1", None]}}


def test_memory_user_counts_pipeline_groups_every_status() -> None:
    assert _mql.memory_user_counts_pipeline("a1") == [
        {"$match": {"agentWallet": "a1"}}, {"$group": {"_id": "$userAddress", "n": {"$sum": 1}}}]


def test_embedding_model_counts_pipeline_counts_each_users_embedded_rows_by_model() -> None:
    def branch(user: str | None) -> list[dict[str, Any]]:
        return [{"$match": {"agentWallet": "a1", "userAddress": user, "embeddingModel": {"$ne": None}}},
                {"$group": {"_id": "$embeddingModel", "n": {"$sum": 1}}},
                {"$project": {"_id": 0, "user": {"$literal": user}, "model": "$_id", "n": 1}}]

    assert _mql.embedding_model_counts_pipeline("a1", ["u1"]) == branch("u1")
    assert _mql.embedding_model_counts_pipeline("a1", ["u1", None]) == [
        *branch("u1"), {"$unionWith": {"coll": _mql_schema.MEMORY, "pipeline": branch(None)}}]


def test_users_condition_matches_null_for_the_user_less_rows() -> None:
    assert _mql.users_condition(("u1", None)) == {"$in": ["u1", None]}
    assert _mql.users_condition([]) == {"$in": []}


def test_memory_rows_of_users_filter_matches_null_for_the_user_less_rows() -> None:
    assert _mql.memory_rows_of_users_filter("a1", ["u1", None]) == {
        "agentWallet": "a1", "userAddress": {"$in": ["u1", None]}}


def test_stale_session_filter_and_scopes_pipeline() -> None:
    flt = _mql.stale_session_filter(86_400_000, 5)
    assert flt == {"$or": [{"expiresAt": {"$lte": dt.datetime(1970, 1, 2, tzinfo=dt.UTC)}},
                           {"lastAccessedAt": {"$lt": 5}}]}
    assert _mql.scopes_pipeline({"createdAt": {"$lt": 5}}) == [
        {"$match": {"createdAt": {"$lt": 5}}},
        {"$group": {"_id": {"a": "$agentWallet", "u": "$userAddress", "m": "$mode", "h": "$haiId"}}}]


# ----------------------------------------------------------------------------- expiry (#30)


@pytest.mark.parametrize(("query", "expected"), [
    (q(), UNEXPIRED),
    (q(now=5), {"$not": {"$lte": 5}}),
    (q(active_only=False), None),  # every row, expired ones too (what the jobs and history read)
])
def test_memory_rows_hide_expired_rows_at_the_querys_now(query: MemoryQuery, expected) -> None:
    assert _mql.scope_filter(query).get("metadata.expiresAt") == expected


@pytest.mark.parametrize("collection", [_mql_schema.SESSIONS, _mql_schema.TRANSCRIPTS, _mql_schema.PATTERNS, _mql_schema.ARCHIVES])
def test_expiry_is_a_memory_row_rule_only(collection: str) -> None:
    assert "metadata.expiresAt" not in _mql.scope_filter(q(), collection=collection)


def test_not_expired_is_applied_after_atlas_ann_not_pushed_down() -> None:
    assert _mql.not_expired(7) == {"metadata.expiresAt": {"$not": {"$lte": 7}}}
    pipeline = _mql.atlas_vector_pipeline(q(user_address="u1"), [0.1, 0.2], "m", 5,
                                          prefilter_fields=("agentWallet", "metadata.expiresAt"))
    assert "metadata.expiresAt" not in pipeline[0]["$vectorSearch"]["filter"]
    assert pipeline[2]["$match"]["metadata.expiresAt"] == UNEXPIRED
    flt, _, _ = _mql.local_scan_query(q(), "m")
    assert flt["metadata.expiresAt"] == UNEXPIRED


def test_caller_filter_operators_and_groups_compile_to_mql() -> None:
    scope = Scope(agent_wallet="a")
    flt = normalize_filters({"topic": "x", "year": {"$gte": 2020, "$lt": 2024}, "tags": {"$nin": ["a", "b"]},
                             "$or": [{"lang": ["en", "pt"]}, {"$and": [{"n": {"$ne": 1}}, {"source": "doc"}]}]})
    doc = _mql.scope_filter(MemoryQuery(scope=scope, filters=flt, active_only=False))
    assert doc == {
        "agentWallet": "a", "userAddress": None, "metadata.topic": "x",
        "metadata.year": {"$gte": 2020, "$lt": 2024}, "metadata.tags": {"$nin": ["a", "b"]},
        "$or": [{"metadata.lang": {"$in": ["en", "pt"]}},
                {"$and": [{"metadata.n": {"$ne": 1}}, {"source": "doc"}]}],
    }


def test_merging_merged_filters_keeps_every_and_clause() -> None:
    first = _mql.merge([("a", 1), ("a", 2)])
    assert first == {"a": 1, "$and": [{"a": 2}]}
    assert _mql.merge([*first.items(), ("b", 3), ("b", 4)]) == {"a": 1, "b": 3, "$and": [{"a": 2}, {"b": 4}]}


# ----------------------------------------------------------------------------- scope all the way down


@pytest.mark.parametrize(("scope", "expected"), [
    ({}, {"agentWallet": A, "userAddress": None}),
    ({"user_address": "u1"}, {"agentWallet": A, "userAddress": {"$in": ["u1", None]}}),
    ({"user_address": "u1", "mode": "local", "hai_id": "h1"},
     {"agentWallet": A, "userAddress": {"$in": ["u1", None]}, "mode": "local", "haiId": "h1"}),
    ({"hai_id": "h2", "thread_id": "t1"}, {"agentWallet": A, "userAddress": None, "haiId": "h2"}),  # durable: no thread
])
def test_vector_search_is_prefiltered_on_the_whole_scope(scope: dict, expected: dict) -> None:
    query = q(**scope)
    assert _mql.scope_prefilter(query) == expected
    stage = _mql.atlas_vector_pipeline(query, [0.1], "m", 3, prefilter_fields=())[0]["$vectorSearch"]
    assert stage["filter"] == {"embeddingModel": "m", **expected}  # whatever MEMORY_VECTOR_PREFILTER_FIELDS says
    # every scope clause of the prefilter is one of scope_filter's (the post-ANN $match keeps them all)
    full = _mql.scope_filter(query)
    assert all(full[k] == v for k, v in expected.items())


def test_a_non_durable_read_prefilters_its_thread_too() -> None:
    query = q(user_address="u1", thread_id="t1", durable=False)
    assert _mql.scope_prefilter(query)["threadId"] == "t1"
    assert _mql.atlas_vector_pipeline(query, [0.1], "m", 3)[0]["$vectorSearch"]["filter"]["threadId"] == "t1"


def test_a_caller_filter_never_replaces_a_scope_prefilter() -> None:
    # a filter on userAddress goes to $and in the post-ANN $match; the prefilter keeps the scope's own clause
    query = q(user_address="u1", filters={"userAddress": "u2"})
    p = _mql.atlas_vector_pipeline(query, [0.1], "m", 3, prefilter_fields=("userAddress", "agentWallet"))
    assert p[0]["$vectorSearch"]["filter"]["userAddress"] == {"$in": ["u1", None]}
    assert p[0]["$vectorSearch"]["filter"]["agentWallet"] == A


def test_vector_index_has_every_scope_prefilter_field() -> None:
    paths = {f["path"] for f in _mql.vector_index_definition(8)["fields"][1:]}
    assert set(_mql.SCOPE_PREFILTER_FIELDS) <= paths


def test_by_id_filters_name_the_agent() -> None:
    assert _mql.memory_id_filter("v1", A) == {"agentWallet": A, "vectorId": "v1"}
    assert _mql.memory_id_filter(["v1", "v2", "v1"], A) == {"agentWallet": A, "vectorId": {"$in": ["v1", "v2"]}}
    assert _mql.memory_id_filter("v1", None) == {"vectorId": "v1"}  # maintenance across agents


def test_row_ids_are_unique_per_agent_and_listing_has_a_scope_index() -> None:
    memory = {s.name: s for s in _mql_schema.INDEXES["memory"]}
    assert _mql_schema.LEGACY_VECTOR_ID_INDEX.name not in memory
    by_id = memory[_mql_schema.VECTOR_AGENT_ID_INDEX]
    assert by_id.keys == [("agentWallet", 1), ("vectorId", 1)] and by_id.options == {"unique": True}
    # a unique index of a collection sharded on {agentWallet: 1} must start with the shard key
    unique_memory = [s for s in memory.values() if s.options.get("unique")]
    assert all(s.keys[0] == ("agentWallet", 1) for s in unique_memory)
    listing = memory[_mql_schema.SCOPE_LIST_INDEX]
    assert listing.keys == [("agentWallet", 1), ("userAddress", 1), ("createdAt", -1), ("_id", -1)]


def test_scope_nulls_migration_fills_only_missing_fields() -> None:
    assert _mql.missing_scope_fields_filter() == {"$or": [{"userAddress": {"$exists": False}},
                                                          {"mode": {"$exists": False}},
                                                          {"haiId": {"$exists": False}}]}
    (stage,) = _mql.scope_nulls_pipeline()
    assert stage == {"$set": {"userAddress": {"$ifNull": ["$userAddress", None]}, "mode": {"$ifNull": ["$mode", None]},
                              "haiId": {"$ifNull": ["$haiId", None]}}}


def test_a_paged_read_of_users_rows_names_the_user_rows_index() -> None:
    rows = {s.name: s for s in _mql_schema.INDEXES[_mql_schema.MEMORY]}[_mql_schema.USER_ROWS_INDEX]
    assert rows.keys == [("agentWallet", 1), ("userAddress", 1), ("_id", 1)]  # the page's equality, then its order
    assert _mql.user_rows_hint("a", ["u1"]) == _mql_schema.USER_ROWS_INDEX
    assert _mql.user_rows_hint("a", ["u1", None]) == _mql_schema.USER_ROWS_INDEX
    assert _mql.user_rows_hint("a", None) is None  # every user of the agent: the planner picks
    assert _mql.user_rows_hint(None, ["u1"]) is None  # no agent: no index prefix to use


def test_list_and_count_name_the_scope_index_unless_a_thread_or_filter_narrows_them() -> None:
    assert _mql.scope_list_hint(q(user_address="u1")) == _mql_schema.SCOPE_LIST_INDEX
    assert _mql.scope_list_hint(q(user_address="u1", thread_id="t1")) == _mql_schema.SCOPE_LIST_INDEX  # durable: no thread
    assert _mql.scope_list_hint(q(user_address="u1", thread_id="t1", durable=False)) is None
    assert _mql.scope_list_hint(q(filters={"appId": "x"})) is None
