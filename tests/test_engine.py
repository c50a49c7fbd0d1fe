"""The engine's turn loop: post_turn, flush, pre_turn, remember, errors, async twins,
the no-embedder mode and a failing embedder."""

from __future__ import annotations

import re

import pytest

from manowar_memory import (
    ConfigurationError,
    EmbeddingError,
    ExtractedFact,
    FakeEmbedder,
    InvalidInputError,
    MemoryConfig,
    MemoryEngine,
    NotFoundError,
    Scope,
    ScopeError,
)
from manowar_memory.engine import NO_EMBEDDER

SCOPE = Scope(agent_wallet="agent", user_address="maya", thread_id="t1")
TURN = [
    {"role": "user", "content": "I moved to Lisbon in June."},
    {"role": "assistant", "content": "Welcome to Lisbon!"},
]


@pytest.fixture
def engine() -> MemoryEngine:
    eng = MemoryEngine(store="sqlite:///:memory:", embedder="fake")
    yield eng
    eng.close()


def _counts(engine: MemoryEngine) -> tuple[int, int, int]:
    s = engine.stats()
    return s["totalVectors"], s["totalTranscripts"], s["totalSessions"]


# ---------------------------------------------------------------- post_turn and flush


def test_post_turn_result_fields(engine: MemoryEngine) -> None:
    result = engine.post_turn(SCOPE, TURN)
    assert result.session_id == SCOPE.thread_session_id()
    assert result.thread_id == "t1"
    assert result.turn_id.startswith("turn_") and len(result.turn_id) == len("turn_") + 32
    assert result.vector_id is not None and engine.get_item(SCOPE, result.vector_id).source == "session"
    assert result.stored == {"transcript": True, "working": True, "vector": True}
    assert result.queued == {"facts": True}
    assert result.degradations == []
    assert engine.flush().facts_indexed == 1  # wait for the queued extraction before counting
    assert _counts(engine) == (2, 1, 1)  # session row + fact, one transcript, one working session


def test_post_turn_honours_explicit_ids_and_summary(engine: MemoryEngine) -> None:
    result = engine.post_turn(SCOPE, TURN, session_id="sess-1", turn_id="turn-42", summary="Lisbon move",
                              metadata={"app_id": "web"}, extract_facts=False)
    assert (result.session_id, result.turn_id, result.queued) == ("sess-1", "turn-42", {"facts": False})
    row = engine.get_item(SCOPE, result.vector_id)
    assert row.content == "Lisbon move"
    assert row.metadata["app_id"] == "web" and row.metadata["turnId"] == "turn-42"
    assert engine.store.get_transcript("sess-1", "agent").metadata["sessionId"] == "sess-1"


def test_post_turn_with_session_id_and_no_thread_uses_the_session_as_thread(engine: MemoryEngine) -> None:
    result = engine.post_turn(Scope(agent_wallet="agent", user_address="u"), TURN, session_id="s-9",
                              extract_facts=False)
    assert result.thread_id == "s-9"


def test_post_turn_queues_nothing_without_user_messages_or_extractor() -> None:
    with MemoryEngine(store="sqlite:///:memory:", embedder="fake") as engine:
        assert engine.post_turn(SCOPE, [{"role": "assistant", "content": "Hello!"}]).queued == {"facts": False}
    with MemoryEngine(store="sqlite:///:memory:", embedder="fake", extractor=None) as engine:
        assert engine.post_turn(SCOPE, TURN).queued == {"facts": False}
        assert engine.flush().facts_indexed == 0


def test_flush_reports_indexed_and_reinforced_facts(engine: MemoryEngine) -> None:
    engine.post_turn(SCOPE, TURN)
    first = engine.flush()
    assert (first.completed, first.failed, first.facts_indexed, first.facts_reinforced) == (1, 0, 1, 0)
    facts = engine.list_items(SCOPE, sources=["fact"])
    assert [f.content for f in facts] == ["The user moved to Lisbon in June."]
    meta = facts[0].metadata
    assert meta["factType"] == "context" and meta["extractor"] == "rules" and meta["type"] == "extracted_fact"
    engine.post_turn(SCOPE.with_thread("t2"), TURN)
    second = engine.flush()
    assert (second.facts_indexed, second.facts_reinforced) == (0, 1)
    assert len(engine.list_items(SCOPE, sources=["fact"])) == 1
    assert engine.flush().completed == 0  # nothing pending


def test_extracted_facts_carry_the_turn_metadata(engine: MemoryEngine) -> None:
    engine.post_turn(SCOPE, TURN, metadata={"app_id": "web"})
    assert engine.flush().facts_indexed == 1
    (fact,) = engine.list_items(SCOPE, sources=["fact"])
    assert fact.metadata.get("app_id") == "web"
    result = engine.pre_turn("Where did the user move?", SCOPE.with_thread("t2"), filters={"appId": "web"})
    assert re.search(r"\[GRAPH \d{4}-\d\d-\d\d\] The user moved to Lisbon in June\.", result.prompt)


def test_flush_reports_a_failing_extractor(engine: MemoryEngine) -> None:
    class Broken:
        name = "broken"

        def extract(self, messages):
            raise RuntimeError("model offline")

    engine.extractor = Broken()
    engine.post_turn(SCOPE, TURN)
    result = engine.flush()
    assert result.failed == 1 and result.completed == 0
    assert result.errors == ["RuntimeError: model offline"]


def test_config_caps_facts_per_turn() -> None:
    with MemoryEngine(store="sqlite:///:memory:", embedder="fake",
                      config=MemoryConfig(fact_max_per_turn=1)) as engine:
        engine.post_turn(SCOPE, [{"role": "user", "content": "I prefer tea. My sister lives in Porto."}])
        assert engine.flush().facts_indexed == 1


def test_custom_extractor_facts_are_indexed(engine: MemoryEngine) -> None:
    class Fixed:
        name = "fixed"

        def extract(self, messages):
            return [ExtractedFact("The user plays the cello.", "skill", 0.9)]

    engine.extractor = Fixed()
    engine.post_turn(SCOPE, TURN)
    assert engine.flush().facts_indexed == 1
    (fact,) = engine.list_items(SCOPE, sources=["fact"])
    assert fact.metadata["factType"] == "skill" and fact.metadata["extractor"] == "fixed"
    assert fact.metadata["confidence"] == 0.9


def test_tool_calls_become_tool_messages_in_the_transcript(engine: MemoryEngine) -> None:
    result = engine.post_turn(SCOPE, TURN, tool_calls=[{"name": "weather", "args": {"city": "Lisbon"}, "result": "sunny"}],
                              extract_facts=False)
    messages = engine.store.get_transcript(result.session_id, "agent").messages
    tool = [m for m in messages if m.role == "tool"]
    assert [m.content for m in tool] == ["tool:weather status:completed result:sunny"]
    assert tool[0].tool_calls == [{"name": "weather", "args": {"city": "Lisbon"}}]
    # tool lines never enter the working buffer
    context = engine.store.get_session(SCOPE.thread_session_id(), "agent").working_memory.context
    assert context == ["user: I moved to Lisbon in June.", "assistant: Welcome to Lisbon!"]


def test_messages_are_sorted_by_timestamp(engine: MemoryEngine) -> None:
    result = engine.post_turn(SCOPE, [
        {"role": "assistant", "content": "second", "timestamp": 2000},
        {"role": "user", "content": "first", "timestamp": 1000},
    ], extract_facts=False)
    assert [m.content for m in engine.store.get_transcript(result.session_id, "agent").messages] == ["first", "second"]


# ---------------------------------------------------------------- pre_turn


def test_pre_turn_recalls_a_fact_from_an_earlier_session_of_the_same_user(engine: MemoryEngine) -> None:
    engine.post_turn(SCOPE, TURN)
    engine.flush()
    later = SCOPE.with_thread("t-next-week")
    result = engine.pre_turn("Where did the user move to?", later)
    assert result.prompt.startswith("Memory context:\n")
    assert any(re.fullmatch(r"\[GRAPH \d{4}-\d\d-\d\d\] The user moved to Lisbon in June\.", line)
               for line in result.prompt.split("\n"))
    assert result.totals["graph"] >= 1
    # a different user of the same agent gets nothing of Maya's
    stranger = Scope(agent_wallet="agent", user_address="someone-else", thread_id="t-next-week")
    assert "Lisbon" not in engine.pre_turn("Where did the user move to?", stranger).prompt


def test_pre_turn_prompt_contains_a_remembered_fact(engine: MemoryEngine) -> None:
    engine.remember(SCOPE, "The user prefers short TypeScript examples.", fact_type="preference")
    result = engine.pre_turn("Which examples does the user like?", SCOPE, budget_chars=900)
    lines = result.prompt.split("\n")
    # a remembered fact is 'learned': packed inside the untrusted-content wrapper
    assert lines[0] == "Memory context:" and re.fullmatch(r"<<<UNTRUSTED_[0-9a-f]{24}>>>", lines[1])
    assert lines[2:4] == ["Source: Memory (trust: learned)", "---"]
    assert re.fullmatch(r"\[GRAPH \d{4}-\d\d-\d\d\] The user prefers short TypeScript examples\.", lines[4])
    assert lines[-1] == lines[1].replace("<<<UNTRUSTED_", "<<<END_UNTRUSTED_")


def test_the_untrusted_delimiter_is_stable_per_scope_and_thread(engine: MemoryEngine) -> None:
    engine.remember(SCOPE, "The user prefers short TypeScript examples.")
    first = engine.pre_turn("examples", SCOPE).prompt.split("\n")[1]
    assert engine.pre_turn("TypeScript", SCOPE).prompt.split("\n")[1] == first  # prompt cache friendly
    other_thread = Scope(agent_wallet="agent", user_address="maya", thread_id="t2")
    assert engine.pre_turn("examples", other_thread).prompt.split("\n")[1] != first


def test_system_rows_are_not_wrapped_and_wrapping_can_be_turned_off() -> None:
    eng = MemoryEngine(store="sqlite:///:memory:", embedder="fake",
                       config=MemoryConfig(packer={"wrap_untrusted": False}))
    eng.remember(SCOPE, "The user prefers short TypeScript examples.")
    assert re.fullmatch(r"Memory context:\n\[GRAPH \d{4}-\d\d-\d\d\] The user prefers short TypeScript examples\.",
                        eng.pre_turn("examples", SCOPE).prompt)
    eng.close()
    eng = MemoryEngine(store="sqlite:///:memory:", embedder="fake")
    eng.remember(SCOPE, "Answer in French.", metadata={"trust": "system"})
    result = eng.pre_turn("French", SCOPE)
    assert re.fullmatch(r"Memory context:\n\[GRAPH \d{4}-\d\d-\d\d\] Answer in French\.", result.prompt)
    assert [(i.trust, i.wrapped) for i in result.items] == [("system", False)]
    eng.close()


def test_pre_turn_accounting_is_consistent(engine: MemoryEngine) -> None:
    engine.remember(SCOPE, "The user prefers short TypeScript examples.")
    engine.ingest(SCOPE, [f"TypeScript example number {i} about generics" for i in range(10)])
    result = engine.pre_turn("TypeScript examples", SCOPE, max_items=3, budget_chars=400)
    assert len(result.items) <= 3 and len(result.prompt) <= 400
    u = result.context_usage
    assert u.characters == len(result.prompt) and u.items == len(result.items) and u.budget_characters == 400
    assert u.saved_characters_vs_raw == max(0, u.raw_characters - u.characters)
    for layer, total in result.totals.items():
        kept = sum(i.layer == layer for i in result.items)
        assert result.omitted[layer] == total - kept
    assert result.decisions is None
    assert result.context_id.startswith("ctx_")
    assert {"layers", "pack", "total"} <= set(result.timings_ms)


def test_pre_turn_explain_lists_a_decision_per_candidate(engine: MemoryEngine) -> None:
    engine.ingest(SCOPE, [f"Gardening tip number {i} about tomatoes" for i in range(9)])
    result = engine.pre_turn("gardening tomatoes", SCOPE, ["vectors"], max_items=2, explain=True)
    statuses = [d.status for d in result.decisions]
    assert statuses.count("kept") == 2 == len(result.items)
    assert len(statuses) == result.totals["vectors"]
    assert set(statuses) <= {"kept", "duplicate", "below_threshold", "over_budget", "max_items"}


def test_pre_turn_bumps_access_of_kept_rows(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'm.db'}"
    with MemoryEngine(store=url, embedder="fake") as engine:
        rid = engine.remember(SCOPE, "The user drinks oat milk.").id
        engine.pre_turn("oat milk", SCOPE)
    with MemoryEngine(store=url, embedder="fake") as engine:  # close() waited for the bump
        assert engine.get_item(SCOPE, rid).access_count == 1


def test_soft_deleted_fact_leaves_the_prompt(engine: MemoryEngine) -> None:
    rid = engine.remember(SCOPE, "The user owns a red bicycle.").id
    assert "red bicycle" in engine.pre_turn("bicycle", SCOPE).prompt
    assert engine.delete_item(SCOPE, rid) is True
    assert "red bicycle" not in engine.pre_turn("bicycle", SCOPE).prompt
    with pytest.raises(NotFoundError):
        engine.get_item(SCOPE, rid)


def test_update_item_re_embeds_new_content(engine: MemoryEngine) -> None:
    rid = engine.remember(SCOPE, "The user owns a red bicycle.").id
    before = engine.get_item(SCOPE, rid).embedding
    updated = engine.update_item(SCOPE, rid, content="The user owns a blue scooter.")
    assert updated.content == "The user owns a blue scooter." and updated.embedding != before
    assert "blue scooter" in engine.pre_turn("scooter", SCOPE).prompt


def test_rerank_without_a_reranker_is_reported(engine: MemoryEngine) -> None:
    engine.remember(SCOPE, "The user likes chess.")
    result = engine.pre_turn("chess", SCOPE, rerank=True)
    assert "rerank skipped: no reranker configured" in result.degradations
    assert "chess" in result.prompt


# ---------------------------------------------------------------- input errors


@pytest.mark.parametrize("query", ["", "   ", None])
def test_pre_turn_needs_a_query(engine: MemoryEngine, query) -> None:
    with pytest.raises(InvalidInputError, match="query is required"):
        engine.pre_turn(query, SCOPE)
    with pytest.raises(InvalidInputError, match="query is required"):
        engine.search_layers(query, SCOPE)


@pytest.mark.parametrize(
    "messages, fragment",
    [
        ([{"role": "robot", "content": "hi"}], "messages[0].role"),
        ([{"role": "user", "content": "ok"}, {"role": "user", "content": "   "}], "messages[1].content"),
        ([{"role": "user"}], "messages[0].content"),
        ([{"role": "user", "content": 42}], "messages[0].content"),
        (["hello"], "messages[0] must be a dict"),
        ("hello", "must be a list"),
        ({"role": "user", "content": "hi"}, "must be a list"),
        ([], "at least one message"),
    ],
)
def test_post_turn_rejects_bad_messages(engine: MemoryEngine, messages, fragment: str) -> None:
    with pytest.raises(InvalidInputError) as info:
        engine.post_turn(SCOPE, messages)
    assert fragment in str(info.value)
    assert _counts(engine) == (0, 0, 0)


def test_post_turn_rejects_a_tool_call_without_a_name(engine: MemoryEngine) -> None:
    with pytest.raises(InvalidInputError, match="tool_calls\\[0\\]"):
        engine.post_turn(SCOPE, TURN, tool_calls=[{"args": {}}])


def test_post_turn_needs_a_thread_or_session_id(engine: MemoryEngine) -> None:
    with pytest.raises(ScopeError, match="thread"):
        engine.post_turn(Scope(agent_wallet="agent", user_address="u"), TURN)
    assert _counts(engine) == (0, 0, 0)


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        ({"budget_chars": 10}, "budget_chars"),
        ({"budget_chars": True}, "budget_chars"),
        ({"budget_chars": "900"}, "budget_chars"),
        ({"max_items": 0}, "max_items"),
        ({"max_items": 2.5}, "max_items"),
        ({"max_item_chars": 5}, "max_item_chars"),
        ({"limit": -1}, "limit"),
    ],
)
def test_pre_turn_rejects_bad_budgets(engine: MemoryEngine, kwargs: dict, fragment: str) -> None:
    with pytest.raises(InvalidInputError, match=fragment):
        engine.pre_turn("anything", SCOPE, **kwargs)


@pytest.mark.parametrize("kwargs", [{"confidence": 1.5}, {"confidence": True}, {"importance": -0.1},
                                    {"importance": "high"}])
def test_remember_rejects_bad_numbers(engine: MemoryEngine, kwargs: dict) -> None:
    with pytest.raises(InvalidInputError):
        engine.remember(SCOPE, "A fact.", **kwargs)
    assert engine.stats()["totalVectors"] == 0


def test_remember_needs_content(engine: MemoryEngine) -> None:
    with pytest.raises(InvalidInputError, match="content is required"):
        engine.remember(SCOPE, "   ")


def test_scope_may_be_a_dict_with_aliases(engine: MemoryEngine) -> None:
    engine.remember({"agent_id": "agent", "user_id": "maya"}, "The user sails on weekends.")
    assert "sails" in engine.pre_turn("sails weekends", {"agentWallet": "agent", "userAddress": "maya"}).prompt
    with pytest.raises(ScopeError):
        engine.pre_turn("sails", {"agent": "agent"})


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        ({"store": "postgres://x"}, "unknown store"),
        ({"store": "sqlite:///:memory:", "embedder": "word2vec"}, "unknown embedder"),
        ({"store": "sqlite:///:memory:", "extractor": "magic"}, "unknown extractor"),
        ({"store": 42}, "store must be"),
    ],
)
def test_bad_engine_configuration_is_rejected(kwargs: dict, fragment: str) -> None:
    with pytest.raises(ConfigurationError, match=fragment):
        MemoryEngine(**kwargs)


# ---------------------------------------------------------------- no embedder


def test_no_embedder_mode_is_keyword_only_and_says_so() -> None:
    with MemoryEngine(store="sqlite:///:memory:", embedder=None) as engine:
        assert engine.model_id is None
        rid = engine.remember(SCOPE, "The user prefers window seats on trains.").id
        post = engine.post_turn(SCOPE, TURN)
        engine.flush()
        assert NO_EMBEDDER in post.degradations
        row = engine.get_item(SCOPE, rid)
        assert row.embedding is None and row.embedding_model is None
        result = engine.pre_turn("window seats trains", SCOPE)
        assert re.search(r"\[GRAPH \d{4}-\d\d-\d\d\] The user prefers window seats on trains\.", result.prompt)
        assert NO_EMBEDDER in result.degradations
        assert result.lanes["graph"]["vector"] == 0 and result.lanes["graph"]["keyword"] >= 1
        hits, notes = engine.search("Lisbon", SCOPE)
        assert NO_EMBEDDER in notes and any("Lisbon" in c.text for c in hits)
        assert NO_EMBEDDER in engine.search_layers("Lisbon", SCOPE).degradations


def test_with_an_embedder_no_degradation_is_reported(engine: MemoryEngine) -> None:
    engine.remember(SCOPE, "The user prefers window seats on trains.")
    assert NO_EMBEDDER not in engine.pre_turn("window seats", SCOPE).degradations


# ---------------------------------------------------------------- failing embedder


def test_failing_embedder_raises_and_post_turn_writes_nothing() -> None:
    with MemoryEngine(store="sqlite:///:memory:", embedder=FakeEmbedder(fail=True)) as engine:
        with pytest.raises(EmbeddingError):
            engine.post_turn(SCOPE, TURN)
        assert _counts(engine) == (0, 0, 0)
        assert engine.flush().completed == 0  # nothing was queued
        with pytest.raises(EmbeddingError):
            engine.remember(SCOPE, "The user likes tea.")
        assert engine.stats()["totalVectors"] == 0
        with pytest.raises(EmbeddingError):
            engine.pre_turn("tea", SCOPE)
        with pytest.raises(EmbeddingError):
            engine.ingest(SCOPE, ["a row"])


def test_embedding_failure_is_not_replaced_by_another_model() -> None:
    embedder = FakeEmbedder(fail=True)
    with MemoryEngine(store="sqlite:///:memory:", embedder=embedder) as engine:
        with pytest.raises(EmbeddingError, match="fake:64"):
            engine.remember(SCOPE, "The user likes tea.")
        assert embedder.calls == 1 and embedder.texts_embedded == 0


def test_rows_record_their_model_and_other_models_do_not_see_them(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'm.db'}"
    with MemoryEngine(store=url, embedder="fake") as engine:
        rid = engine.remember(SCOPE, "The user collects antique maps.").id
        assert engine.get_item(SCOPE, rid).embedding_model == "fake:64"
    with MemoryEngine(store=url, embedder="fake:32") as engine:
        vector = engine.embedder.embed(["antique maps"], input_type="query")[0]
        from manowar_memory.stores.base import MemoryQuery

        hits, _ = engine.store.vector_search(MemoryQuery(scope=SCOPE), vector, "fake:32", 10)
        assert hits == []
        result = engine.pre_turn("antique maps", SCOPE)
        assert result.lanes["graph"]["vector"] == 0
        assert "antique maps" in result.prompt  # the keyword lane still finds it
        assert any("keyword results stand in" in note for note in result.degradations)
        # a row written now records the new model; the old vectors are left alone
        new_id = engine.remember(SCOPE, "The user restores old globes.").id
        assert engine.get_item(SCOPE, new_id).embedding_model == "fake:32"
        assert engine.get_item(SCOPE, rid).embedding_model == "fake:64"


# ---------------------------------------------------------------- async twins


async def test_async_twins(engine: MemoryEngine) -> None:
    remembered = await engine.aremember(SCOPE, "The user prefers aisle seats.", fact_type="preference")
    assert remembered.fact_type == "preference"
    post = await engine.apost_turn(SCOPE, TURN)
    assert post.queued == {"facts": True}
    flushed = await engine.aflush()
    assert flushed.facts_indexed == 1
    result = await engine.apre_turn("aisle seats and Lisbon", SCOPE.with_thread("t2"))
    assert re.search(r"\[GRAPH \d{4}-\d\d-\d\d\] The user prefers aisle seats\.", result.prompt)
    assert "Lisbon" in result.prompt
    layers = await engine.asearch_layers("Lisbon", SCOPE, ["graph"])
    assert layers.totals == {"graph": 1}
    hits, _ = await engine.asearch("aisle seats", SCOPE)
    assert hits[0].text == "The user prefers aisle seats."
    assert await engine.aingest(SCOPE, ["async row"]) != []


async def test_async_twins_raise_the_same_errors(engine: MemoryEngine) -> None:
    with pytest.raises(InvalidInputError):
        await engine.apre_turn("  ", SCOPE)
    with pytest.raises(ScopeError):
        await engine.apost_turn(Scope(agent_wallet="agent"), TURN)


# ---------------------------------------------------------------- cached query vectors


def test_a_cached_query_vector_is_taken_before_the_lanes_start(engine: MemoryEngine, monkeypatch) -> None:
    """A query whose vector the in-process cache holds is not handed to a lane thread to
    embed: the search starts with the vector, and finds the same items."""
    engine.remember(SCOPE, "Maya moved to Lisbon in June.")
    first = engine.pre_turn("Where did Maya move?", SCOPE)
    embedded: list[str] = []
    original = engine._embed_query

    def counted(text, target):
        embedded.append(text)
        return original(text, target)

    monkeypatch.setattr(engine, "_embed_query", counted)
    again = engine.pre_turn("Where did Maya move?", SCOPE)
    assert embedded == [] and "embed" in again.timings_ms
    assert [i.id for i in again.items] == [i.id for i in first.items] and again.items
    engine.pre_turn("What happened in June?", SCOPE)  # not cached yet: embedded on the way
    assert embedded == ["What happened in June?"]


def test_peek_answers_only_from_an_in_process_cache() -> None:
    from manowar_memory.cache.base import InMemoryCache
    from manowar_memory.embeddings.cached import CachedEmbedder

    class RemoteLike(InMemoryCache):
        in_process = False

    local = CachedEmbedder(FakeEmbedder(16), InMemoryCache())
    assert local.peek("hello there") is None  # nothing cached, and nothing embedded
    assert local.inner.calls == 0
    local.embed(["hello there"], input_type="query")
    vector = local.embed(["hello there"], input_type="query")[0]  # the cached (float32) vector
    assert local.peek("hello there") == vector and local.hits == 2 and local.inner.calls == 1
    assert local.peek("hello there", input_type="document") is None  # query and document keys differ
    remote = CachedEmbedder(FakeEmbedder(16), RemoteLike())
    remote.embed(["hello there"], input_type="query")
    assert remote.peek("hello there") is None  # a round trip is left to the lane thread
