"""The six layers, search_layers, and the ranking stages (decay, MMR, RRF)."""

from __future__ import annotations

import math

import pytest

from manowar_memory import LAYERS, Archive, Candidate, InvalidInputError, MemoryEngine, Pattern, Scope
from manowar_memory._util import DAY_MS, now_ms
from manowar_memory.layers import normalize_layers
from manowar_memory.ranking import apply_decay, decay_multiplier, mmr_order
from manowar_memory.records import PatternStep, PatternTrigger
from manowar_memory.retrieval import rrf

SCOPE = Scope(agent_wallet="agent", user_address="u", thread_id="t1")


@pytest.fixture
def engine() -> MemoryEngine:
    eng = MemoryEngine(store="sqlite:///:memory:", embedder="fake")
    yield eng
    eng.close()


def _turn(engine: MemoryEngine, scope: Scope, *messages: tuple[str, str], **kw):
    return engine.post_turn(scope, [{"role": r, "content": c} for r, c in messages], extract_facts=False, **kw)


# ---------------------------------------------------------------- working


def test_working_buffer_keeps_the_last_twelve_user_and_assistant_lines(engine: MemoryEngine) -> None:
    for i in range(10):
        _turn(engine, SCOPE, ("user", f"question number {i}"), ("assistant", f"answer number {i}"),
              ("system", f"system note {i}"), ("tool", f"tool output {i}"))
    session = engine.store.get_session(SCOPE.thread_session_id(), "agent")
    context = session.working_memory.context
    assert len(context) == 12
    assert context[0] == "user: question number 4" and context[-1] == "assistant: answer number 9"
    assert not any(line.startswith(("system:", "tool:")) for line in context)
    assert session.working_memory.state["lastSessionId"] == SCOPE.thread_session_id()


def test_working_layer_matches_buffer_lines_by_query_terms(engine: MemoryEngine) -> None:
    _turn(engine, SCOPE, ("user", "The staging database password rotates weekly."), ("assistant", "Noted."))
    result = engine.search_layers("staging database", SCOPE, ["working"])
    assert [c.text for c in result.layers["working"]] == ["user: The staging database password rotates weekly."]
    line = result.layers["working"][0]
    assert line.lanes == {"keyword": 1.0}  # the overlap, then the ranking stages' factors
    assert line.score == pytest.approx(1.0 * line.trace["decay_applied"] * line.trace["boost"])
    assert engine.search_layers("unrelated banjo", SCOPE, ["working"]).totals == {"working": 0}


def test_working_layer_is_thread_scoped(engine: MemoryEngine) -> None:
    _turn(engine, SCOPE, ("user", "The staging database password rotates weekly."))
    assert engine.search_layers("staging database", SCOPE.with_thread("t2"), ["working"]).totals == {"working": 0}


def test_working_buffer_limit_follows_config() -> None:
    from manowar_memory import MemoryConfig

    engine = MemoryEngine(store="sqlite:///:memory:", embedder=None, config=MemoryConfig(session_context_limit=3))
    _turn(engine, SCOPE, *[("user", f"line {i}") for i in range(5)])
    context = engine.store.get_session(SCOPE.thread_session_id(), "agent").working_memory.context
    assert context == ["user: line 2", "user: line 3", "user: line 4"]
    engine.close()


# ---------------------------------------------------------------- scene


def test_scene_transcript_is_upserted_by_session_id_and_appends_messages(engine: MemoryEngine) -> None:
    first = _turn(engine, SCOPE, ("user", "Let's plan the Porto trip."), ("assistant", "Sure."))
    second = _turn(engine, SCOPE, ("user", "Book the train to Porto."), ("assistant", "Booked."))
    assert first.session_id == second.session_id == SCOPE.thread_session_id()
    transcript = engine.store.get_transcript(first.session_id, "agent")
    assert [m.content for m in transcript.messages] == [
        "Let's plan the Porto trip.", "Sure.", "Book the train to Porto.", "Booked.",
    ]
    assert engine.stats()["totalTranscripts"] == 1
    assert transcript.thread_id == "t1" and transcript.user_address == "u"


def test_explicit_session_id_keeps_separate_transcripts(engine: MemoryEngine) -> None:
    _turn(engine, SCOPE, ("user", "first session about gardening"), session_id="s-a")
    _turn(engine, SCOPE, ("user", "second session about gardening"), session_id="s-b")
    assert engine.stats()["totalTranscripts"] == 2
    assert len(engine.store.get_transcript("s-a", "agent").messages) == 1


def test_scene_layer_finds_transcripts_by_full_text(engine: MemoryEngine) -> None:
    _turn(engine, SCOPE, ("user", "I need help with my sourdough starter."), ("assistant", "Feed it daily."))
    _turn(engine, SCOPE, ("user", "Also, the oven runs hot."), session_id="other-session")
    result = engine.search_layers("sourdough starter", SCOPE, ["scene"])
    assert [c.id for c in result.layers["scene"]] == [SCOPE.thread_session_id()]
    cand = result.layers["scene"][0]
    assert cand.source == "transcript"
    assert cand.score == pytest.approx(1.0 * cand.trace["decay_applied"] * cand.trace["boost"])  # best BM25 = 1
    assert "sourdough" in cand.text
    assert engine.search_layers("quantum chromodynamics", SCOPE, ["scene"]).totals == {"scene": 0}


# ---------------------------------------------------------------- graph


def test_graph_layer_returns_remembered_facts(engine: MemoryEngine) -> None:
    engine.remember(SCOPE, "The user is allergic to shellfish.", fact_type="preference", confidence=0.8)
    engine.ingest(SCOPE, ["A general note about shellfish recipes."])
    result = engine.search_layers("shellfish allergy", SCOPE, ["graph"])
    graph = result.layers["graph"]
    assert [c.text for c in graph] == ["The user is allergic to shellfish."]
    assert graph[0].source == "fact" and graph[0].confidence == 0.8
    assert graph[0].metadata["factType"] == "preference"


@pytest.mark.parametrize("fact_type", ["hobby", "evil", "Preference ", "PREFERENCE", " context", ""])
def test_unknown_explicit_fact_type_is_refused_and_stores_nothing(engine: MemoryEngine, fact_type: str) -> None:
    before = len(engine.list_items(SCOPE, limit=1000))
    with pytest.raises(InvalidInputError, match=r"fact_type must be one of \['preference', .*'event'\]") as err:
        engine.remember(SCOPE, "The user collects vinyl records.", fact_type=fact_type)
    assert repr(fact_type) in str(err.value) or fact_type == ""
    assert len(engine.list_items(SCOPE, limit=1000)) == before


def test_known_fact_types_are_stored_as_given(engine: MemoryEngine) -> None:
    assert engine.remember(SCOPE, "The user is called Ana.", fact_type="identity").fact_type == "identity"
    assert engine.remember(SCOPE, "The user likes jazz.").fact_type == "context"


def test_remember_keeps_confidence_and_importance(engine: MemoryEngine) -> None:
    rid = engine.remember(SCOPE, "The user bikes to work.", confidence=0.42, importance=0.9).id
    meta = engine.get_item(SCOPE, rid).metadata
    assert meta["confidence"] == 0.42 and meta["importance"] == 0.9
    default = engine.get_item(SCOPE, engine.remember(SCOPE, "The user walks the dog.").id).metadata
    assert default["confidence"] == 1.0 and "importance" not in default


def test_repeated_remember_dedupes_and_reinforces(engine: MemoryEngine) -> None:
    first = engine.remember(SCOPE, "The user prefers dark mode.")
    second = engine.remember(SCOPE.with_thread("t9"), "  the USER prefers dark mode.  ")
    assert second.deduplicated and second.id == first.id and second.fact_hash == first.fact_hash
    assert engine.stats()["totalVectors"] == 1
    assert engine.get_item(SCOPE, first.id).access_count == 1
    # another user saying the same thing is a separate fact
    other = engine.remember(Scope(agent_wallet="agent", user_address="v"), "The user prefers dark mode.")
    assert not other.deduplicated and engine.stats()["totalVectors"] == 2


# ---------------------------------------------------------------- patterns and archives


def _pattern(pid: str, summary: str, trigger: str, success: float, scope: Scope = SCOPE) -> Pattern:
    return Pattern(pattern_id=pid, **Pattern.scope_fields(scope), trigger=PatternTrigger(type="keyword", value=trigger),
                   steps=[PatternStep(action="search", order=1)], summary=summary, success_rate=success,
                   execution_count=7)


def test_patterns_layer_matches_summary_or_trigger(engine: MemoryEngine) -> None:
    engine.store.upsert_pattern(_pattern("p1", "Search flights then compare fares", "travel booking", 0.9))
    engine.store.upsert_pattern(_pattern("p2", "Draft an invoice and email it", "billing", 0.7))
    by_summary = engine.search_layers("compare fares", SCOPE, ["patterns"]).layers["patterns"]
    assert [c.id for c in by_summary] == ["p1"]
    assert by_summary[0].access_count == 7  # the success rate, then the ranking stages' factors
    assert by_summary[0].score == pytest.approx(0.9 * by_summary[0].trace["decay_applied"] * by_summary[0].trace["boost"])
    assert [c.id for c in engine.search_layers("billing", SCOPE, ["patterns"]).layers["patterns"]] == ["p2"]
    assert engine.search_layers("gardening", SCOPE, ["patterns"]).totals == {"patterns": 0}


def test_patterns_of_another_agent_are_invisible(engine: MemoryEngine) -> None:
    engine.store.upsert_pattern(_pattern("p1", "Search flights then compare fares", "travel", 0.9,
                                         scope=Scope(agent_wallet="other")))
    assert engine.search_layers("compare fares", SCOPE, ["patterns"]).totals == {"patterns": 0}


def test_archives_layer_matches_summary_and_topics(engine: MemoryEngine) -> None:
    engine.store.add_archive(Archive(archive_id="a1", **Archive.scope_fields(SCOPE), summary="Spring tax filing",
                                     content="...", date_range={"start": 0, "end": 1}, metadata={"topics": ["receipts"]}))
    assert [c.id for c in engine.search_layers("tax filing", SCOPE, ["archives"]).layers["archives"]] == ["a1"]
    hits = engine.search_layers("receipts", SCOPE, ["archives"]).layers["archives"]
    assert [c.id for c in hits] == ["a1"] and hits[0].source == "archive"
    assert engine.search_layers("holiday", SCOPE, ["archives"]).totals == {"archives": 0}


def test_durable_hot_layers_patterns_archives_ignore_the_thread(engine: MemoryEngine) -> None:
    engine.store.upsert_pattern(_pattern("p1", "Search flights then compare fares", "travel", 0.9))
    result = engine.search_layers("compare fares", SCOPE.with_thread("another"), ["patterns"])
    assert result.totals == {"patterns": 1}


# ---------------------------------------------------------------- vectors


def test_vectors_layer_holds_non_fact_rows(engine: MemoryEngine) -> None:
    ids = engine.ingest(SCOPE, [
        "The release train leaves every second Thursday.",
        {"content": "Release notes live in the wiki.", "source": "knowledge", "metadata": {"kind": "doc"}},
    ])
    engine.remember(SCOPE, "The user owns the release process.")
    result = engine.search_layers("release", SCOPE, ["vectors"])
    texts = [c.text for c in result.layers["vectors"]]
    assert set(texts) == {"The release train leaves every second Thursday.", "Release notes live in the wiki."}
    assert {c.id for c in result.layers["vectors"]} == set(ids)
    assert all(c.source != "fact" for c in result.layers["vectors"])


def test_post_turn_summary_row_lands_in_vectors(engine: MemoryEngine) -> None:
    result = _turn(engine, SCOPE, ("user", "Our CI uses a self-hosted runner."), ("assistant", "Got it."))
    row = engine.get_item(SCOPE, result.vector_id)
    assert row.source == "session" and "self-hosted runner" in row.content
    hits = engine.search_layers("self-hosted runner", SCOPE, ["vectors"]).layers["vectors"]
    assert result.vector_id in [c.id for c in hits]


def test_ingest_rejects_bad_items(engine: MemoryEngine) -> None:
    with pytest.raises(InvalidInputError, match="empty content"):
        engine.ingest(SCOPE, ["   "])
    with pytest.raises(InvalidInputError, match="unknown source"):
        engine.ingest(SCOPE, [{"content": "x", "source": "gossip"}])
    with pytest.raises(InvalidInputError, match=r"item 0 has unknown key\(s\) \['text'\]"):
        engine.ingest(SCOPE, [{"text": "x"}])
    with pytest.raises(InvalidInputError, match="item 0 is invalid"):
        engine.ingest(SCOPE, [{"metadata": {}}])


def test_graph_and_vectors_split_hybrid_results_by_source(engine: MemoryEngine) -> None:
    engine.remember(SCOPE, "The user's laptop is a ThinkPad.")
    engine.ingest(SCOPE, ["ThinkPad keyboards have a trackpoint."])
    result = engine.search_layers("ThinkPad", SCOPE, ["graph", "vectors"])
    assert [c.layer for c in result.layers["graph"]] == ["graph"]
    assert [c.layer for c in result.layers["vectors"]] == ["vectors"]
    assert result.layers["graph"][0].source == "fact"
    assert result.lanes["graph"]["keyword"] >= 2


def test_weak_vector_only_hits_are_dropped_below_the_cosine_threshold() -> None:
    from manowar_memory import MemoryConfig, RetrievalConfig

    strict = MemoryConfig(retrieval=RetrievalConfig(min_vector_cosine=0.99))
    with MemoryEngine(store="sqlite:///:memory:", embedder="fake", config=strict) as engine:
        engine.ingest(SCOPE, ["Pelicans nest near the estuary."])
        result = engine.search_layers("estuary birds nesting habits", SCOPE, ["vectors"])
        # the keyword lane still finds "estuary"; an unrelated query finds nothing at all
        assert result.totals == {"vectors": 1}
        none = engine.search_layers("quarterly tax filing", SCOPE, ["vectors"])
        assert none.totals == {"vectors": 0}
        assert none.lanes["vectors"]["below_threshold"] == 1
    with MemoryEngine(store="sqlite:///:memory:", embedder="fake") as engine:
        engine.ingest(SCOPE, ["Pelicans nest near the estuary."])
        assert engine.search_layers("pelicans nest", SCOPE, ["vectors"]).lanes["vectors"]["vector"] == 1


# ---------------------------------------------------------------- search_layers


def test_search_layers_runs_only_the_selected_layers_with_totals(engine: MemoryEngine) -> None:
    _turn(engine, SCOPE, ("user", "Kite surfing needs steady wind."))
    engine.remember(SCOPE, "The user kite surfs in Tarifa.")
    result = engine.search_layers("kite surfing wind", SCOPE, ["working", "graph"])
    assert list(result.layers) == ["working", "graph"]
    assert result.totals == {layer: len(hits) for layer, hits in result.layers.items()}
    assert result.totals["working"] == 1 and result.totals["graph"] == 1
    everything = engine.search_layers("kite surfing wind", SCOPE)
    assert list(everything.layers) == list(LAYERS)
    assert set(everything.totals) == set(LAYERS)


def test_search_layers_limit_caps_each_layer(engine: MemoryEngine) -> None:
    engine.ingest(SCOPE, [f"Lantern festival note number {i}" for i in range(8)])
    result = engine.search_layers("lantern festival", SCOPE, ["vectors"], limit=3)
    assert result.totals == {"vectors": 3}
    with pytest.raises(InvalidInputError, match="limit"):
        engine.search_layers("lantern", SCOPE, ["vectors"], limit=0)


def test_unknown_layer_is_rejected(engine: MemoryEngine) -> None:
    with pytest.raises(InvalidInputError, match="unknown layer"):
        engine.search_layers("x", SCOPE, ["working", "dreams"])
    with pytest.raises(InvalidInputError):
        normalize_layers(42)
    assert normalize_layers("scene") == ["scene"]
    assert normalize_layers(["graph", "graph", "scene"]) == ["graph", "scene"]
    assert normalize_layers([]) == list(LAYERS)


def test_sequential_layer_mode_gives_the_same_results() -> None:
    from manowar_memory import MemoryConfig

    results = []
    for concurrent in (True, False):
        engine = MemoryEngine(store="sqlite:///:memory:", embedder="fake",
                              config=MemoryConfig(concurrent_layers=concurrent))
        _turn(engine, SCOPE, ("user", "Kite surfing needs steady wind."))
        engine.remember(SCOPE, "The user kite surfs in Tarifa.")
        r = engine.search_layers("kite surfing", SCOPE)
        results.append({layer: [c.text for c in hits] for layer, hits in r.layers.items()})
        engine.close()
    assert results[0] == results[1]
    assert results[0]["graph"] == ["The user kite surfs in Tarifa."]


def test_a_failing_layer_is_left_out_and_reported(engine: MemoryEngine, monkeypatch) -> None:
    def boom(*args, **kwargs):
        raise RuntimeError("archives offline")

    monkeypatch.setattr(engine.store, "find_archives", boom)
    engine.remember(SCOPE, "The user likes chess.")
    result = engine.search_layers("chess", SCOPE, ["graph", "archives"])
    assert "archives" not in result.layers and "archives" not in result.totals
    assert result.totals == {"graph": 1}
    assert any("archives" in note and "archives offline" in note for note in result.degradations)


# ---------------------------------------------------------------- decay


def test_decay_multiplier_values() -> None:
    assert decay_multiplier(0, 30) == 1.0
    assert decay_multiplier(30, 30) == pytest.approx(0.5)
    assert decay_multiplier(60, 30) == pytest.approx(0.25)
    assert decay_multiplier(-5, 30) == 1.0
    for bad in (0.0, -1.0, math.nan, math.inf):
        assert decay_multiplier(10, bad) == 1.0
    assert decay_multiplier(math.nan, 30) == 1.0
    assert decay_multiplier(math.inf, 30) == 1.0


def test_decay_floor_keeps_a_year_old_row_in_play() -> None:
    assert decay_multiplier(365, 30, floor=0.35) == 0.35
    assert decay_multiplier(365, 30) < 0.001
    now = now_ms()
    old = Candidate(layer="vectors", id="old", text="x", score=1.0, created_at=now - 365 * DAY_MS)
    (decayed,) = apply_decay([old], half_life_days=30, floor=0.35, now=now)
    assert decayed.score == pytest.approx(0.35) and decayed.trace["decay"] == pytest.approx(0.35)


def test_decay_reorders_by_age() -> None:
    now = now_ms()
    old = Candidate(layer="vectors", id="old", text="a", score=1.0, created_at=now - 60 * DAY_MS)
    fresh = Candidate(layer="vectors", id="fresh", text="b", score=0.6, created_at=now)
    undated = Candidate(layer="vectors", id="undated", text="c", score=0.5)
    ordered = apply_decay([old, fresh, undated], half_life_days=30, floor=0.0, now=now)
    assert [c.id for c in ordered] == ["fresh", "undated", "old"]
    assert ordered[1].trace["decay"] == 1.0
    assert ordered[2].score == pytest.approx(0.25)


# ---------------------------------------------------------------- MMR


def _near_duplicates() -> list[Candidate]:
    return [
        Candidate(layer="vectors", id="a", text="alpha bravo charlie delta echo", score=1.0),
        Candidate(layer="vectors", id="a2", text="alpha bravo charlie delta foxtrot", score=0.95),
        Candidate(layer="vectors", id="b", text="zulu yankee xray whiskey victor", score=0.7),
    ]


def test_mmr_moves_a_near_duplicate_behind_a_distinct_item() -> None:
    assert [c.id for c in mmr_order(_near_duplicates(), lambda_=1.0)] == ["a", "a2", "b"]
    ordered = mmr_order(_near_duplicates(), lambda_=0.3)
    assert [c.id for c in ordered] == ["a", "b", "a2"]
    assert [c.trace["mmr_rank"] for c in ordered] == [0, 1, 2]
    assert [c.score for c in ordered] == [1.0, 0.7, 0.95]  # scores untouched


def test_mmr_with_lambda_one_is_a_pure_score_sort() -> None:
    shuffled = list(reversed(_near_duplicates()))
    assert [c.id for c in mmr_order(shuffled, lambda_=1.0)] == ["a", "a2", "b"]


def test_mmr_uses_embeddings_when_every_candidate_has_one() -> None:
    cands = _near_duplicates()
    # by embedding, "a" and "b" are identical and "a2" is different: the opposite of the words
    for c, vec in zip(cands, ([1.0, 0.0], [0.0, 1.0], [1.0, 0.0])):
        c.embedding = vec
    assert [c.id for c in mmr_order(cands, lambda_=0.3)] == ["a", "a2", "b"]


def test_mmr_limit_and_trivial_inputs() -> None:
    ordered = mmr_order(_near_duplicates(), lambda_=0.3, limit=1)
    assert [c.id for c in ordered] == ["a", "a2", "b"]  # the rest follow in input order
    assert mmr_order([], lambda_=0.5) == []


# ---------------------------------------------------------------- RRF


def test_rrf_single_lane_passes_scores_through() -> None:
    assert rrf({"keyword": [("a", 7.5), ("b", 3.0)], "vector": []}) == [("a", 7.5), ("b", 3.0)]
    assert rrf({"keyword": [], "vector": []}) == []


def test_rrf_two_lanes_are_normalised_to_at_most_one() -> None:
    fused = dict(rrf({"keyword": [("a", 9.0), ("b", 5.0)], "vector": [("a", 0.9), ("c", 0.8)]},
                     {"keyword": 1.0, "vector": 1.5}, k=60))
    assert fused["a"] == pytest.approx(1.0)
    assert all(0 < s <= 1.0 + 1e-12 for s in fused.values())
    # the heavier vector lane puts its rank-2 item above the keyword lane's rank-2 item
    assert fused["c"] > fused["b"]
    assert fused["c"] == pytest.approx((1.5 / 62) / (2.5 / 61))


def test_rrf_scores_never_exceed_one_exactly() -> None:
    fused = rrf({"keyword": [("a", 9.0)], "vector": [("a", 0.9)]}, {"keyword": 1.0, "vector": 1.5}, k=60)
    assert fused[0][1] <= 1.0


# ---------------------------------------------------------------- one ranking path

NON_HYBRID = ("working", "scene", "patterns", "archives")


def _every_layer(engine: MemoryEngine, *, archive_age_days: float = 0.0) -> None:
    """One hit for "harbour ferry" in each of the six layers."""
    now = now_ms()
    _turn(engine, SCOPE, ("user", "The harbour ferry leaves at nine."), ("assistant", "Noted, the harbour ferry."))
    engine.store.upsert_pattern(_pattern("p1", "Check the harbour ferry timetable", "harbour ferry", 0.8))
    engine.store.add_archive(Archive(
        archive_id="a1", **Archive.scope_fields(SCOPE), summary="Harbour ferry tickets of the spring",
        content="...", date_range={"start": 0, "end": 1}, created_at=int(now - archive_age_days * DAY_MS)))
    engine.remember(SCOPE, "The user takes the harbour ferry to work.")
    engine.ingest(SCOPE, [{"content": "Harbour ferry tickets cost four euros.",
                           "created_at": int(now - archive_age_days * DAY_MS)}])


def test_every_layer_goes_through_decay_and_boosts_and_says_so(engine: MemoryEngine) -> None:
    _every_layer(engine)
    result = engine.search_layers("harbour ferry", SCOPE)
    assert all(result.totals[layer] >= 1 for layer in LAYERS), result.totals
    for layer in NON_HYBRID:
        assert {f"{layer}.decay", f"{layer}.boosts"} <= set(result.timings_ms), layer
        assert f"{layer}.mmr" not in result.timings_ms and f"{layer}.rerank" not in result.timings_ms
        assert all("decay" in c.trace and "boost" in c.trace for c in result.layers[layer]), layer
    undecayed = engine.search_layers("harbour ferry", SCOPE, decay=False)
    for layer in NON_HYBRID:
        assert f"{layer}.decay" not in undecayed.timings_ms and f"{layer}.boosts" in undecayed.timings_ms
        assert all("decay" not in c.trace for c in undecayed.layers[layer]), layer
    nothing = engine.search_layers("zebra crossing", SCOPE, list(NON_HYBRID))
    assert not any(key.startswith(NON_HYBRID) and "." in key for key in nothing.timings_ms)  # no match, no stage


def test_an_old_archive_is_decayed_like_an_old_vectors_row(engine: MemoryEngine) -> None:
    _every_layer(engine, archive_age_days=90)
    result = engine.search_layers("harbour ferry", SCOPE, ["archives", "vectors"])
    archive = result.layers["archives"][0]
    row = next(c for c in result.layers["vectors"] if "four euros" in c.text)
    expected = decay_multiplier(90, engine.config.retrieval.decay_half_life_days, engine.config.retrieval.decay_floor)
    assert expected < 1.0
    assert archive.trace["decay"] == pytest.approx(expected, rel=1e-3)
    assert row.trace["decay"] == pytest.approx(archive.trace["decay"], rel=1e-3)


def test_an_inserted_stage_runs_for_every_layer(engine: MemoryEngine) -> None:
    class Tag:
        name = "tag"

        def __call__(self, candidates: list[Candidate], ctx: object) -> list[Candidate]:
            for c in candidates:
                c.trace["tagged"] = True
            return candidates

    engine.insert_stage(Tag(), after="boosts")
    _every_layer(engine)
    result = engine.search_layers("harbour ferry", SCOPE)
    for layer in LAYERS:
        assert result.layers[layer] and all(c.trace.get("tagged") for c in result.layers[layer]), layer
    for key in ("working", "scene", "patterns", "archives", "graph+vectors"):
        assert f"{key}.tag" in result.timings_ms, key


def test_pre_turn_runs_mmr_as_a_stage_of_every_layer(engine: MemoryEngine) -> None:
    _every_layer(engine)
    plain = engine.pre_turn("harbour ferry", SCOPE)
    diverse = engine.pre_turn("harbour ferry", SCOPE, mmr=True)
    assert not any(key.endswith(".mmr") for key in plain.timings_ms)
    for key in ("working", "scene", "patterns", "archives", "graph+vectors"):
        assert f"{key}.mmr" in diverse.timings_ms, key
        assert f"{key}.decay" in diverse.timings_ms and f"{key}.boosts" in diverse.timings_ms, key


def test_the_query_is_read_once_for_every_layer(engine: MemoryEngine, monkeypatch) -> None:
    """One search over the six layers reads the query's time and splits its terms once, not
    once per layer (the layers share the request's reading)."""
    import manowar_memory.layers as layers_mod
    import manowar_memory.retrieval.hybrid as hybrid_mod
    import manowar_memory.retrieval.pipeline as pipeline_mod

    _every_layer(engine)
    calls = {"time": 0, "terms": 0}

    def counted(name: str, fn):
        def wrapper(*args, **kwargs):
            calls[name] += 1
            return fn(*args, **kwargs)
        return wrapper

    for mod in (layers_mod, hybrid_mod, pipeline_mod):
        monkeypatch.setattr(mod, "parse_time_query", counted("time", mod.parse_time_query))
    monkeypatch.setattr(layers_mod, "query_terms", counted("terms", layers_mod.query_terms))
    result = engine.search_layers("harbour ferry last week", SCOPE)
    assert all(result.totals[layer] >= 1 for layer in LAYERS), result.totals
    assert all(f"{layer}.time" in result.timings_ms for layer in NON_HYBRID)  # every layer ran its time stage
    assert calls == {"time": 1, "terms": 1}
