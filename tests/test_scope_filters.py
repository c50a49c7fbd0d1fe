"""Scopes, the filter allowlist, and scope isolation between users, agents, modes and threads."""

from __future__ import annotations

import math

import pytest

from manowar_memory import FilterError, InvalidInputError, MemoryEngine, Scope, ScopeError
from manowar_memory.filters import ALLOWED_FIELDS, Group, Ops, matches_filters, normalize_filters
from manowar_memory.stores.base import MemoryQuery

# ---------------------------------------------------------------- Scope.from_dict aliases


@pytest.mark.parametrize("key", ["agentWallet", "agent_id", "agent_wallet"])
def test_agent_aliases_normalise_to_agent_wallet(key: str) -> None:
    assert Scope.from_dict({key: "  agent-1  "}).agent_wallet == "agent-1"


@pytest.mark.parametrize("key", ["userAddress", "user_id", "user_address"])
def test_user_aliases_normalise_to_user_address(key: str) -> None:
    assert Scope.from_dict({"agentWallet": "a", key: "u-1"}).user_address == "u-1"


@pytest.mark.parametrize("key", ["threadId", "thread_id", "runId", "run_id"])
def test_thread_aliases_normalise_to_thread_id(key: str) -> None:
    assert Scope.from_dict({"agentWallet": "a", key: "t-9"}).thread_id == "t-9"


@pytest.mark.parametrize("key", ["hai_id", "haiId"])
def test_hai_aliases_normalise_to_hai_id(key: str) -> None:
    scope = Scope.from_dict({"agentWallet": "a", "mode": "local", key: "hai-7"})
    assert (scope.mode, scope.hai_id) == ("local", "hai-7")


def test_from_dict_first_present_alias_wins_and_blank_values_are_refused() -> None:
    scope = Scope.from_dict({"agentWallet": None, "agent_id": "fallback", "userAddress": None, "threadId": " t "})
    assert scope.agent_wallet == "fallback"
    assert scope.user_address is None
    assert scope.thread_id == "t"
    with pytest.raises(ScopeError, match="agentWallet is blank"):
        Scope.from_dict({"agentWallet": "   ", "agent_id": "fallback"})
    with pytest.raises(ScopeError, match="userAddress is blank"):
        Scope.from_dict({"agentWallet": "a", "userAddress": ""})


def test_agent_is_not_lower_cased() -> None:
    assert Scope.from_dict({"agentWallet": "0xAbC"}).agent_wallet == "0xAbC"


def test_missing_agent_is_a_scope_error() -> None:
    with pytest.raises(ScopeError, match="agentWallet is required"):
        Scope.from_dict({"userAddress": "u"})
    with pytest.raises(ScopeError, match="agent_wallet is blank"):
        Scope(agent_wallet="  ")


def test_local_mode_needs_hai_id() -> None:
    with pytest.raises(ScopeError, match="hai_id is required"):
        Scope.from_dict({"agentWallet": "a", "mode": "local"})
    with pytest.raises(ScopeError, match="hai_id is required"):
        Scope(agent_wallet="a", mode="local")
    assert Scope(agent_wallet="a", mode="global").hai_id is None


@pytest.mark.parametrize("mode", ["Global", "private", "", 3])
def test_bad_mode_is_rejected(mode: object) -> None:
    data = {"agentWallet": "a", "mode": mode}
    if mode == "":
        # a blank mode is "absent", like any blank string
        assert Scope.from_dict(data).mode is None
        return
    with pytest.raises(ScopeError, match="mode must be"):
        Scope.from_dict(data)


def test_unknown_scope_keys_are_rejected_and_listed() -> None:
    with pytest.raises(ScopeError) as info:
        Scope.from_dict({"agentWallet": "a", "user": "u", "tenant": "x"})
    message = str(info.value)
    assert "['tenant', 'user']" in message
    assert "agentWallet" in message and "userAddress" in message


def test_non_mapping_scope_is_rejected() -> None:
    with pytest.raises(ScopeError, match="mapping"):
        Scope.from_dict(["agentWallet", "a"])  # type: ignore[arg-type]


def test_non_string_user_is_rejected() -> None:
    with pytest.raises(ScopeError, match="user_address must be a string"):
        Scope(agent_wallet="a", user_address=42)  # type: ignore[arg-type]


def test_scope_errors_are_invalid_input() -> None:
    assert issubclass(ScopeError, InvalidInputError)
    assert issubclass(ScopeError, ValueError)


def test_scope_filters_are_validated_at_construction() -> None:
    with pytest.raises(FilterError):
        Scope.from_dict({"agentWallet": "a", "filters": {"$where": "1"}})
    scope = Scope.from_dict({"agentWallet": "a", "filters": {"appId": "app"}})
    assert scope.filters == {"metadata.app_id": "app"}


def test_coerce_passes_a_scope_through_and_normalises_a_dict() -> None:
    scope = Scope(agent_wallet="a")
    assert Scope.coerce(scope) is scope
    assert Scope.coerce({"agent_id": "b", "run_id": "r"}) == Scope(agent_wallet="b", thread_id="r")


def test_as_dict_uses_reference_names_and_omits_absent_values() -> None:
    scope = Scope(agent_wallet="a", user_address="u", mode="local", hai_id="h")
    assert scope.as_dict() == {"agentWallet": "a", "userAddress": "u", "mode": "local", "haiId": "h"}
    assert Scope.from_dict(scope.as_dict()) == scope


# ---------------------------------------------------------------- session id and cache key formats


def test_thread_session_id_format() -> None:
    assert Scope(agent_wallet="a").thread_session_id() == "session:any:a:main"
    assert Scope(agent_wallet="a", thread_id="t").thread_session_id() == "session:any:a:t"
    assert Scope(agent_wallet="a", mode="global", thread_id="t").thread_session_id() == "session:global:a:t"
    local = Scope(agent_wallet="a", mode="local", hai_id="h", thread_id="t", user_address="u")
    assert local.thread_session_id() == "session:local:a:h:h:t:u:u"


def test_thread_session_ids_never_collide_across_scopes() -> None:
    scopes = [
        Scope(agent_wallet="a", thread_id="t", user_address="victim"),
        Scope(agent_wallet="a", thread_id="t:u:victim"),
        Scope(agent_wallet="a", thread_id="t", mode="global", user_address="victim"),
        Scope(agent_wallet="a", thread_id="t", mode="local", hai_id="h", user_address="victim"),
        Scope(agent_wallet="b", thread_id="t", mode="local", hai_id="h", user_address="victim"),
        Scope(agent_wallet="a", thread_id="t", mode="local", hai_id="h:t", user_address="victim"),
        Scope(agent_wallet="a:h:h", thread_id="t", mode="local", hai_id="x", user_address="victim"),
        Scope(agent_wallet="a", thread_id="t", user_address="Victim"),
        Scope(agent_wallet="a", thread_id="main"),
        Scope(agent_wallet="a"),
    ]
    ids = [s.thread_session_id() for s in scopes]
    assert len(set(ids[:-2])) == len(ids) - 2
    assert ids[-2] == ids[-1]  # no thread is the thread "main"


def test_cache_key_encodes_and_marks_missing_parts_and_keeps_case() -> None:
    assert Scope(agent_wallet="a").cache_key() == "a:a:m:_:h:_:u:_:t:_"
    scope = Scope(agent_wallet="Agent One", user_address="U@X.io", thread_id="T/1", mode="local", hai_id="H")
    assert scope.cache_key() == "a:Agent%20One:m:local:h:H:u:U%40X.io:t:T%2F1"
    # scopes are case-sensitive, so cache keys are too: Alice's cached results are never alice's
    assert Scope(agent_wallet="a", user_address="Alice").cache_key() != Scope(agent_wallet="a", user_address="alice").cache_key()


def test_scope_id_prefers_hai_id() -> None:
    assert Scope(agent_wallet="a").scope_id == "a"
    assert Scope(agent_wallet="a", mode="local", hai_id="h").scope_id == "h"


# ---------------------------------------------------------------- filters: rejected shapes


@pytest.mark.parametrize(
    "filters, fragment",
    [
        ({"content": "red"}, "is not allowed"),
        ({"embeddingModel": "m"}, "is not allowed"),
        ({"workingMemory.context": "x"}, "is not allowed"),
        ({"$where": "this.a == 1"}, "operator"),
        ({"$or": ["a"]}, "operator"),
        ({"metadata.$gt": 1}, "operator"),
        ({"metadata.app_id": {"$regex": "x"}}, "'$regex', which is not an operator"),
        ({"metadata.n": {"$gt": True}}, "compares with a number or a string"),
        ({"metadata.n": {"$gt": None}}, "compares with a number or a string"),
        ({"metadata.n": {"$in": "a"}}, "takes a list"),
        ({"metadata.n": {"$eq": [1]}}, "use $in/$nin"),
        ({"metadata.n": {}}, "empty operator map"),
        ({"$and": []}, "non-empty list"),
        ({"$or": [{}]}, "empty filter"),
        ({"metadata.app_id": {"nested": 1}}, "nested objects"),
        ({"metadata.app_id": ["a", {"b": 1}]}, "non-primitive"),
        ({"metadata.app_id": ["a", ["b"]]}, "non-primitive"),
        ({"metadata.app_id": []}, "empty list"),
        ({"metadata.score": float("nan")}, "NaN"),
        ({1: "x"}, "non-empty string"),
        ({"  ": "x"}, "non-empty string"),
        ({"metadata.": "x"}, "empty or invalid segment"),
        ({"metadata..app_id": "x"}, "empty or invalid segment"),
        ({"metadata.app_id.": "x"}, "empty or invalid segment"),
        ({"workingMemory.state.": "x"}, "empty or invalid segment"),
        ({"metadata.a b": "x"}, "empty or invalid segment"),
        ({"metadata.app_id": {1, 2}}, "set value"),
    ],
)
def test_rejected_filter_shapes(filters: dict, fragment: str) -> None:
    with pytest.raises(FilterError) as info:
        normalize_filters(filters)
    assert fragment in str(info.value)


def test_filters_must_be_a_mapping() -> None:
    with pytest.raises(FilterError, match="mapping"):
        normalize_filters([("metadata.a", 1)])  # type: ignore[arg-type]


def test_alias_and_canonical_path_with_different_values_conflict() -> None:
    with pytest.raises(FilterError, match="given twice"):
        normalize_filters({"appId": "a", "metadata.app_id": "b"})
    assert normalize_filters({"appId": "a", "app_id": "a"}) == {"metadata.app_id": "a"}


def test_filter_error_message_names_the_allowed_paths() -> None:
    with pytest.raises(FilterError) as info:
        normalize_filters({"workingMemory.tenant": "x"})
    message = str(info.value)
    for name in sorted(ALLOWED_FIELDS):
        assert name in message
    for prefix in ("metadata.", "workingMemory.state.", "workingMemory.entities."):
        assert prefix in message
    for alias in ("appId", "app_id", "hai_id", "user_id", "thread_id"):
        assert alias in message


def test_filter_errors_are_invalid_input() -> None:
    assert issubclass(FilterError, InvalidInputError)


# ---------------------------------------------------------------- filters: accepted values and aliases


@pytest.mark.parametrize(
    "alias, path",
    [
        ("appId", "metadata.app_id"),
        ("app_id", "metadata.app_id"),
        ("hai_id", "haiId"),
        ("user_id", "userAddress"),
        ("thread_id", "threadId"),
    ],
)
def test_filter_aliases(alias: str, path: str) -> None:
    assert normalize_filters({alias: "v"}) == {path: "v"}


def test_accepted_primitive_and_list_values() -> None:
    given = {
        "source": "fact",
        "agentWallet": "a",
        "scopeKind": "global",
        "scopeId": "a",
        "metadata.app_id": "app",
        "metadata.count": 3,
        "metadata.ratio": 0.5,
        "metadata.flag": False,
        "metadata.gone": None,
        "metadata.nested.deep-key_1": "x",
        "workingMemory.state.step": "plan",
        "workingMemory.entities.city": ["Lisbon", "Porto", None, 1, True],
    }
    out = normalize_filters(given)
    assert out["workingMemory.entities.city"] == ("Lisbon", "Porto", None, 1, True)
    assert {k: v for k, v in out.items() if k != "workingMemory.entities.city"} == {
        k: v for k, v in given.items() if k != "workingMemory.entities.city"
    }
    assert normalize_filters(None) == {}


def test_nan_inside_a_list_filter_is_rejected() -> None:
    with pytest.raises(FilterError):
        normalize_filters({"metadata.score": [1.0, math.nan]})


# ---------------------------------------------------------------- matches_filters


def test_matches_filters_is_strict_about_bool_versus_number() -> None:
    record = {"metadata": {"flag": 1, "on": True, "n": 2}}
    assert matches_filters(record, {"metadata.flag": 1})
    assert not matches_filters(record, {"metadata.flag": True})
    assert matches_filters(record, {"metadata.on": True})
    assert not matches_filters(record, {"metadata.on": 1})
    assert matches_filters(record, {"metadata.n": 2.0})  # numbers compare by value, like ===
    assert not matches_filters(record, {"metadata.n": "2"})


def test_matches_filters_lists_missing_paths_and_empty_filters() -> None:
    record = {"source": "fact", "metadata": {"app_id": "a"}}
    assert matches_filters(record, {})
    assert matches_filters(record, {"metadata.app_id": ("b", "a")})
    assert not matches_filters(record, {"metadata.app_id": ("b", "c")})
    assert matches_filters(record, {"metadata.missing": None})
    assert matches_filters(record, {"metadata.missing": ("x", None)})
    assert not matches_filters(record, {"metadata.missing": "x"})
    assert not matches_filters(record, {"source": "fact", "metadata.app_id": "z"})


# ---------------------------------------------------------------- filters inside store queries


@pytest.fixture
def engine() -> MemoryEngine:
    eng = MemoryEngine(store="sqlite:///:memory:", embedder="fake")
    yield eng
    eng.close()


def test_keyword_and_vector_lanes_both_apply_metadata_filter(engine: MemoryEngine) -> None:
    scope = Scope(agent_wallet="agent", user_address="u")
    engine.ingest(scope, [
        {"content": "Deploy the billing service with blue green rollout", "metadata": {"app_id": "billing"}},
        {"content": "Deploy the search service with blue green rollout", "metadata": {"app_id": "search"}},
    ])
    query = MemoryQuery(scope=scope, filters=normalize_filters({"appId": "billing"}))
    keyword = engine.store.keyword_search(query, "deploy blue green rollout", 10)
    vector = engine.embedder.embed(["deploy blue green rollout"], input_type="query")[0]
    hits, _ = engine.store.vector_search(query, vector, engine.model_id, 10)
    assert [h.record.metadata["app_id"] for h in keyword] == ["billing"]
    assert [h.record.metadata["app_id"] for h in hits] == ["billing"]
    # without the filter both rows come back on both lanes
    unfiltered = MemoryQuery(scope=scope)
    assert len(engine.store.keyword_search(unfiltered, "deploy blue green rollout", 10)) == 2
    assert len(engine.store.vector_search(unfiltered, vector, engine.model_id, 10)[0]) == 2


def test_engine_search_applies_alias_filter(engine: MemoryEngine) -> None:
    scope = Scope(agent_wallet="agent")
    engine.ingest(scope, [
        {"content": "Quarterly revenue report for app one", "metadata": {"app_id": "one"}},
        {"content": "Quarterly revenue report for app two", "metadata": {"app_id": "two"}},
    ])
    hits, _ = engine.search("quarterly revenue report", scope, filters={"app_id": "two"})
    assert [c.metadata["app_id"] for c in hits] == ["two"]


def test_scope_filters_apply_to_every_read(engine: MemoryEngine) -> None:
    engine.ingest(Scope(agent_wallet="agent"), [
        {"content": "Invoice numbering rules for app one", "metadata": {"app_id": "one"}},
        {"content": "Invoice numbering rules for app two", "metadata": {"app_id": "two"}},
    ])
    scoped = Scope(agent_wallet="agent", filters={"appId": "one"})
    assert [r.metadata["app_id"] for r in engine.list_items(scoped)] == ["one"]
    hits, _ = engine.search("invoice numbering rules", scoped)
    assert [c.metadata["app_id"] for c in hits] == ["one"]


@pytest.mark.parametrize(
    "scope_kwargs, filters",
    [
        ({"user_address": "alice"}, {"user_id": "bob"}),
        ({"user_address": "alice"}, {"userAddress": "bob"}),
        ({}, {"agentWallet": "other-agent"}),
        ({"thread_id": "t1"}, {"thread_id": "t2"}),
        ({"mode": "local", "hai_id": "h1"}, {"hai_id": "h2"}),
        ({"mode": "global"}, {"mode": "local"}),
    ],
)
def test_filter_conflicting_with_scope_raises(engine: MemoryEngine, scope_kwargs: dict, filters: dict) -> None:
    scope = Scope(agent_wallet="agent", **scope_kwargs)
    with pytest.raises(InvalidInputError, match="conflicts with the scope"):
        engine.pre_turn("anything at all", scope, filters=filters)


def test_filter_equal_to_scope_is_allowed(engine: MemoryEngine) -> None:
    scope = Scope(agent_wallet="agent", user_address="alice")
    engine.remember(scope, "Alice drinks oolong tea every morning.")
    result = engine.pre_turn("oolong tea", scope, filters={"user_id": "alice"})
    assert "oolong" in result.prompt


def test_call_filter_conflicting_with_scope_filter_raises(engine: MemoryEngine) -> None:
    scope = Scope(agent_wallet="agent", filters={"appId": "one"})
    with pytest.raises(InvalidInputError, match="both in the scope and in the call"):
        engine.search("anything", scope, filters={"app_id": "two"})


def test_bad_filter_in_a_call_raises_filter_error(engine: MemoryEngine) -> None:
    with pytest.raises(FilterError):
        engine.pre_turn("anything", Scope(agent_wallet="agent"), filters={"$where": "1"})
    with pytest.raises(FilterError):
        engine.list_items(Scope(agent_wallet="agent"), filters={"metadata.x": {"$regex": "a"}})


# ---------------------------------------------------------------- scope isolation


def _texts(result) -> list[str]:
    return [c.text for layer in result.layers.values() for c in layer]


def test_user_memories_never_reach_another_user_or_a_userless_read(engine: MemoryEngine) -> None:
    alice = Scope(agent_wallet="agent", user_address="alice")
    engine.remember(alice, "Alice keeps her spare key under the blue flowerpot.")
    engine.ingest(alice, ["Alice's locker code is walrus seven."])
    for reader in (Scope(agent_wallet="agent", user_address="bob"), Scope(agent_wallet="agent")):
        result = engine.search_layers("spare key flowerpot locker walrus", reader, ["graph", "vectors"])
        assert _texts(result) == []
        assert engine.pre_turn("spare key flowerpot locker walrus", reader).prompt == ""
        assert engine.list_items(reader) == []
    assert len(_texts(engine.search_layers("spare key flowerpot locker walrus", alice, ["graph", "vectors"]))) == 2


def test_agent_never_sees_another_agents_memories(engine: MemoryEngine) -> None:
    engine.remember(Scope(agent_wallet="agent-x"), "Deployment window is Tuesday night.")
    engine.remember(Scope(agent_wallet="agent-x", user_address="u"), "User u wants deployment alerts.")
    for reader in (Scope(agent_wallet="agent-y"), Scope(agent_wallet="agent-y", user_address="u")):
        assert _texts(engine.search_layers("deployment window alerts", reader)) == []
    assert engine.list_items(Scope(agent_wallet="agent-y", user_address="u")) == []


def test_agent_wide_rows_are_visible_to_users_of_that_agent(engine: MemoryEngine) -> None:
    engine.remember(Scope(agent_wallet="agent"), "The office closes at six on Fridays.")
    result = engine.search_layers("office closes fridays", Scope(agent_wallet="agent", user_address="carol"))
    assert "The office closes at six on Fridays." in _texts(result)


def test_get_item_of_another_user_is_not_found(engine: MemoryEngine) -> None:
    from manowar_memory import NotFoundError

    stored = engine.remember(Scope(agent_wallet="agent", user_address="alice"), "Alice's badge number is 4411.")
    with pytest.raises(NotFoundError):
        engine.get_item(Scope(agent_wallet="agent", user_address="bob"), stored.id)
    with pytest.raises(NotFoundError):
        engine.get_item(Scope(agent_wallet="other"), stored.id)


def test_mode_and_hai_id_separate_memories(engine: MemoryEngine) -> None:
    h1 = Scope(agent_wallet="agent", mode="local", hai_id="h1")
    h2 = Scope(agent_wallet="agent", mode="local", hai_id="h2")
    glob = Scope(agent_wallet="agent", mode="global")
    engine.remember(h1, "Local note about the greenhouse sensors.")
    engine.remember(glob, "Global note about the greenhouse budget.")
    assert _texts(engine.search_layers("greenhouse", h1, ["graph"])) == ["Local note about the greenhouse sensors."]
    assert _texts(engine.search_layers("greenhouse", h2, ["graph"])) == []
    assert _texts(engine.search_layers("greenhouse", glob, ["graph"])) == ["Global note about the greenhouse budget."]
    # an absent mode applies no mode filter
    assert len(_texts(engine.search_layers("greenhouse", Scope(agent_wallet="agent"), ["graph"]))) == 2


def test_working_and_scene_layers_are_thread_scoped(engine: MemoryEngine) -> None:
    t1 = Scope(agent_wallet="agent", user_address="u", thread_id="t1")
    t2 = Scope(agent_wallet="agent", user_address="u", thread_id="t2")
    engine.post_turn(t1, [
        {"role": "user", "content": "The project codename is marigold."},
        {"role": "assistant", "content": "Marigold it is."},
    ], extract_facts=False)
    other = engine.search_layers("marigold codename", t2, ["working", "scene"])
    assert other.totals == {"working": 0, "scene": 0}
    same = engine.search_layers("marigold codename", t1, ["working", "scene"])
    assert same.totals["working"] >= 1 and same.totals["scene"] == 1
    # without a thread the hot layers see every thread of the user
    anywhere = engine.search_layers("marigold codename", Scope(agent_wallet="agent", user_address="u"),
                                    ["working", "scene"])
    assert anywhere.totals["working"] >= 1 and anywhere.totals["scene"] == 1


def test_durable_layers_ignore_the_thread(engine: MemoryEngine) -> None:
    t1 = Scope(agent_wallet="agent", user_address="u", thread_id="t1")
    engine.remember(t1, "The user's cat is called Miso.")
    engine.ingest(t1, ["Miso the cat likes tuna."])
    result = engine.search_layers("Miso cat", t1.with_thread("t2"), ["graph", "vectors"])
    assert result.totals == {"graph": 1, "vectors": 1}


def test_two_users_on_the_same_thread_id_do_not_share_hot_layers(engine: MemoryEngine) -> None:
    alice = Scope(agent_wallet="agent", user_address="alice", thread_id="t-1")
    bob = Scope(agent_wallet="agent", user_address="bob", thread_id="t-1")
    engine.post_turn(alice, [{"role": "user", "content": "My secret hint is walrus banana."}], extract_facts=False)
    engine.post_turn(bob, [{"role": "user", "content": "Hello there, how are you?"}], extract_facts=False)
    leaked = engine.search_layers("walrus banana", bob, ["working", "scene"])
    assert _texts(leaked) == []
    own = engine.search_layers("walrus banana", alice, ["working", "scene"])
    assert own.totals == {"working": 1, "scene": 1}


def test_another_agent_reusing_a_session_id_does_not_erase_a_transcript(engine: MemoryEngine) -> None:
    x = Scope(agent_wallet="agent-x", user_address="u", thread_id="t")
    y = Scope(agent_wallet="agent-y", user_address="u", thread_id="t")
    engine.post_turn(x, [{"role": "user", "content": "walrus banana zebra"}], session_id="s1", extract_facts=False)
    engine.post_turn(y, [{"role": "user", "content": "hello there friend"}], session_id="s1", extract_facts=False)
    assert engine.search_layers("walrus banana", x, ["scene"]).totals == {"scene": 1}


def test_the_same_fact_in_two_hai_scopes_is_stored_for_each(engine: MemoryEngine) -> None:
    h1 = Scope(agent_wallet="agent", mode="local", hai_id="h1")
    h2 = Scope(agent_wallet="agent", mode="local", hai_id="h2")
    engine.remember(h1, "The greenhouse door code is 1234.")
    second = engine.remember(h2, "The greenhouse door code is 1234.")
    assert not second.deduplicated
    assert engine.search_layers("greenhouse door code", h2, ["graph"]).totals == {"graph": 1}


def test_a_forged_thread_id_neither_reads_nor_joins_another_users_working_buffer() -> None:
    from manowar_memory import InvalidInputError, MemoryConfig, MemoryEngine

    # single-tenant, so that a user-less forger may record turns at all (a multi-user engine refuses it)
    engine = MemoryEngine(store="sqlite:///:memory:", embedder="fake", extractor=None,
                          config=MemoryConfig(single_tenant=True))
    victim = Scope(agent_wallet="a", user_address="victim", thread_id="t")
    engine.post_turn(victim, [{"role": "user", "content": "My bank PIN is 9921."}])
    forger = Scope(agent_wallet="a", thread_id="t:u:victim")
    engine.post_turn(forger, [{"role": "user", "content": "What is the PIN?"}])
    found = engine.search("bank PIN", forger, layers=("working", "scene"), k=20)[0]
    assert not any("9921" in c.text for c in found)
    assert engine.thread_messages(forger)[0].content == "What is the PIN?"
    # naming the victim's session outright is refused, for the transcript and the working buffer
    with pytest.raises(InvalidInputError, match="belongs to another"):
        engine.post_turn(Scope(agent_wallet="a", thread_id="x"), [{"role": "user", "content": "hi"}],
                         session_id=victim.thread_session_id())
    assert [m.content for m in engine.thread_messages(victim)] == ["My bank PIN is 9921."]
    engine.close()


def test_a_fact_of_alice_is_not_a_duplicate_of_the_same_fact_of_Alice() -> None:  # noqa: N802 - names are the point
    from manowar_memory import MemoryEngine

    engine = MemoryEngine(store="sqlite:///:memory:", embedder="fake")
    upper = engine.remember(Scope(agent_wallet="a", user_address="Alice"), "Likes oolong tea.")
    lower = engine.remember(Scope(agent_wallet="a", user_address="alice"), "Likes oolong tea.")
    assert not lower.deduplicated and lower.id != upper.id
    assert engine.get_item(Scope(agent_wallet="a", user_address="alice"), lower.id).user_address == "alice"
    again = engine.remember(Scope(agent_wallet="a", user_address="alice"), "  likes OOLONG tea. ")
    assert again.deduplicated and again.id == lower.id
    engine.close()


def test_scope_and_call_filters_share_one_language_and_both_hold(engine: MemoryEngine) -> None:
    """A scope's filters (what REST and MCP bodies carry) take flat keys and operators too, and a
    call's filters on the same key are ANDed with them, never replace them."""
    scope = Scope(agent_wallet="agent", filters={"year": {"$gte": 2020}})
    engine.ingest(scope, [{"content": f"Report of {year}.", "metadata": {"year": year}} for year in (2019, 2021, 2024)])
    assert sorted(r.metadata["year"] for r in engine.list_items(scope)) == [2021, 2024]
    assert [r.metadata["year"] for r in engine.list_items(scope, filters={"metadata.year": {"$lt": 2023}})] == [2021]
    assert [r.metadata["year"] for r in engine.list_items(scope, filters={"$or": [{"year": 2019}, {"year": 2024}]})] == [2024]


def test_two_constraints_on_one_key_both_hold_through_renormalisation() -> None:
    """'m' and 'metadata.m' are one key: their operators are kept together, the same operator
    twice included, and normalising the result again (as each layer does) drops none."""
    once = normalize_filters({"m": {"$gt": 1}, "metadata.m": {"$gt": 5, "$lt": 9}})
    assert once == {"metadata.m": Ops((("$gt", 1), ("$gt", 5), ("$lt", 9)))}
    assert normalize_filters(once) == once
    assert normalize_filters({"$or": [once, {"x": 1}]}) == {"$or": Group("$or", (once, {"metadata.x": 1}))}
    assert not matches_filters({"metadata": {"m": 3}}, once) and matches_filters({"metadata": {"m": 6}}, once)
