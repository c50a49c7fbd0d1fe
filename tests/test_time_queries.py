"""Time in the query (manowar_memory.ranking.temporal): "when", windows, before/after, first/last."""

from __future__ import annotations

import datetime as dt

import pytest

from manowar_memory import MemoryConfig, MemoryEngine, Scope
from manowar_memory.candidates import Candidate
from manowar_memory.config import RetrievalConfig
from manowar_memory.ranking.temporal import (
    apply_time_intent,
    candidate_time,
    mentions_time,
    parse_time_query,
    speaker_of,
    tells_time_inside,
    without_dates,
)
from manowar_memory.retrieval.pipeline import RankOptions, ranking_stages

NOW = 1_780_488_000_000  # 2026-06-03 12:00 UTC, a Wednesday
DAY = 86_400_000


def ms(day: str) -> int:
    return int(dt.datetime.fromisoformat(day).replace(tzinfo=dt.UTC).timestamp() * 1000)


def cand(text: str, created: str, score: float = 1.0, **meta: object) -> Candidate:
    return Candidate(id=text[:20], text=text, score=score, layer="vectors", created_at=ms(created), metadata=dict(meta))


@pytest.mark.parametrize(
    ("query", "asks_when"),
    [
        ("When did Melanie sign up for a pottery class?", True),
        ("when is the daily standup?", True),
        ("What year did she graduate?", True),
        ("How long ago was Caroline's 18th birthday?", True),
        ("How long has Melanie been practicing art?", True),
        ("Since when does he live in Berlin?", True),
        ("Where does the user live?", False),
        ("What does Ana do when she is stressed?", False),
    ],
)
def test_when_questions_are_recognised(query: str, asks_when: bool) -> None:
    assert parse_time_query(query, NOW).asks_when is asks_when


@pytest.mark.parametrize(
    ("query", "start", "end"),
    [
        ("What did I do yesterday?", "2026-06-02", "2026-06-03"),
        ("What did we talk about last week?", "2026-05-25", "2026-06-01"),
        ("Which books did I read in June 2023?", "2023-06-01", "2023-07-01"),
        ("What happened on 12 May 2023?", "2023-05-12", "2023-05-13"),
        ("What did I cook on May 12, 2023?", "2023-05-12", "2023-05-13"),
        ("Where did she travel in 2022?", "2022-01-01", "2023-01-01"),
        ("What did I buy two months ago?", "2026-04-01", "2026-05-01"),
    ],
)
def test_time_windows_are_read_against_the_time_asked(query: str, start: str, end: str) -> None:
    intent = parse_time_query(query, NOW)
    assert intent.window == (ms(start), ms(end)), intent


def test_a_month_without_a_year_is_that_month_of_any_year() -> None:
    intent = parse_time_query("When did Melanie go camping in June?", NOW)
    assert intent.asks_when and intent.month == 6 and intent.window is None


@pytest.mark.parametrize(
    ("query", "window"),
    [
        ("What did I eat before 2023?", (0, "2023-01-01")),
        ("Where did she work after June 2023?", ("2023-07-01", None)),
        ("Which trips since 1 March 2024?", ("2024-03-01", None)),
    ],
)
def test_before_and_after_a_date_are_half_open_windows(query: str, window: tuple[object, object]) -> None:
    intent = parse_time_query(query, NOW)
    assert intent.window is not None
    lo, hi = window
    assert intent.window[0] == (0 if lo == 0 else ms(str(lo)))
    assert (intent.window[1] >= 2**61) if hi is None else intent.window[1] == ms(str(hi))


def test_before_an_event_names_the_anchor_words() -> None:
    intent = parse_time_query("Where did she live before she moved to Berlin?", NOW)
    assert intent.side == "before" and intent.anchor == ("moved", "berlin") and intent.window is None


@pytest.mark.parametrize(
    ("query", "order"),
    [("When did I first meet Jonas?", "first"), ("What was the first time she went hiking?", "first"),
     ("Where does the user live now?", "last"), ("Who is my most recent client?", "last"),
     ("Where does the user live?", None)],
)
def test_order_words(query: str, order: str | None) -> None:
    assert parse_time_query(query, NOW).order == order


@pytest.mark.parametrize(
    ("text", "states_time"),
    [
        ("(8 May 2023) Melanie: I just signed up for a pottery class yesterday.", True),
        ("(8 May 2023) Melanie: Last Fri I took my kids to a pottery workshop.", True),
        ("(8 May 2023) Caroline: A friend made it for my 18th birthday ten years ago.", True),
        ("(8 May 2023) Melanie: Seven years now, and I've found my muses.", True),
        ("(8 May 2023) Gina: Got the tattoo a few years ago.", True),
        ("The user moved to Berlin on 12 June 2024.", True),
        ("(8 May 2023) Melanie: I love pottery, it is like therapy.", False),
        ("[2023-05-08 14:00] user: the standup is short", False),
        ("The user lives in Lisbon.", False),
    ],
)
def test_a_memory_states_a_time_unless_only_its_stamp_does(text: str, states_time: bool) -> None:
    assert mentions_time(text) is states_time


def test_candidate_time_prefers_the_event_date() -> None:
    assert candidate_time(cand("x", "2026-06-03", eventDate="2026-05")) == ms("2026-05-01")
    assert candidate_time(cand("x", "2026-06-03", occurredAt=ms("2026-01-02"))) == ms("2026-01-02")
    assert candidate_time(cand("x", "2026-06-03")) == ms("2026-06-03")


def test_a_when_question_lifts_the_memory_that_states_a_time() -> None:
    plain = cand("(8 May 2023) Melanie: pottery is like therapy for me", "2023-05-08", score=1.0)
    dated = cand("(8 May 2023) Melanie: I signed up for a pottery class yesterday", "2023-05-08", score=0.9)
    out, note = apply_time_intent([plain, dated], parse_time_query("When did Melanie sign up for pottery?", NOW),
                                  when_boost=0.3, window_boost=0.5, order_boost=0.3)
    assert [c.text for c in out] == [dated.text, plain.text] and note is None
    assert dated.trace["time_when"] == pytest.approx(1.3) and "time_when" not in plain.trace


def test_a_window_boosts_inside_or_restricts_and_reports_when_nothing_fits() -> None:
    def pool() -> list[Candidate]:
        return [cand("a dinner at Rosa's", "2026-05-10", 1.0), cand("a dinner with friends", "2026-05-27", 0.8)]

    intent = parse_time_query("what did we eat last week?", NOW)
    boosted, _ = apply_time_intent(pool(), intent, when_boost=0.3, window_boost=0.5, order_boost=0.3)
    assert [c.text for c in boosted] == ["a dinner with friends", "a dinner at Rosa's"]
    kept, _ = apply_time_intent(pool(), intent, when_boost=0.3, window_boost=0.5, order_boost=0.3, restrict=True)
    assert [c.text for c in kept] == ["a dinner with friends"]
    nothing, note = apply_time_intent(pool(), parse_time_query("what did we eat in 2019?", NOW), when_boost=0.3,
                                      window_boost=0.5, order_boost=0.3, restrict=True)
    assert len(nothing) == 2 and note and "matched no candidate" in note


def test_before_an_event_lifts_what_came_before_it() -> None:
    cands = [cand("The user lives in Berlin now", "2026-05-01", 1.0),
             cand("The user moved to Berlin", "2026-04-01", 0.95),
             cand("The user lived in Lisbon", "2025-01-01", 0.9)]
    out, note = apply_time_intent(cands, parse_time_query("Where did the user live before moving to Berlin?", NOW),
                                  when_boost=0.3, window_boost=0.5, order_boost=0.3)
    assert note is None and out[0].text == "The user lived in Lisbon"


def test_first_time_prefers_the_oldest() -> None:
    cands = [cand("hiking in the Alps", "2026-05-01", 1.0), cand("hiking in Sintra", "2024-05-01", 0.9)]
    out, _ = apply_time_intent(cands, parse_time_query("When was the first time I went hiking?", NOW),
                               when_boost=0.0, window_boost=0.5, order_boost=0.3)
    assert out[0].text == "hiking in Sintra"


def test_the_stage_runs_by_default_and_can_be_turned_off() -> None:
    assert [s.name for s in ranking_stages(RetrievalConfig(), RankOptions())] == ["decay", "boosts", "time"]
    assert "time" not in [s.name for s in ranking_stages(RetrievalConfig(time_queries=False), RankOptions())]


def test_search_reports_what_it_read_of_the_query_time() -> None:
    engine = MemoryEngine(store="sqlite:///:memory:", embedder="fake")
    scope = Scope(agent_wallet="agent", user_address="ana")
    engine.ingest(scope, ["We had sushi for dinner.", "Yesterday we had ramen for dinner."])
    result = engine.search_layers("When did we have ramen for dinner?", scope, ["vectors"])
    assert result.layers["vectors"][0].text == "Yesterday we had ramen for dinner."
    report = result.lanes["vectors"]
    time_report = report["extra"]["time"]
    assert time_report["asks_when"] is True
    off = MemoryEngine(store="sqlite:///:memory:", embedder="fake",
                       config=MemoryConfig(retrieval=RetrievalConfig(time_queries=False)))
    off.ingest(scope, ["x"])
    assert "time" not in str(off.search_layers("When did we have ramen?", scope, ["vectors"]).lanes)


def test_a_relative_time_in_the_text_places_the_memory() -> None:
    said = cand("(28 April 2023) John: My colleagues and I went to a convention last month.", "2023-04-28")
    other = cand("(2 March 2023) John: My colleagues are great.", "2023-04-02", score=1.2)
    out, _ = apply_time_intent([other, said], parse_time_query("What did John attend in March 2023?", NOW),
                               when_boost=0.3, window_boost=0.5, order_boost=0.3, restrict=True)
    assert [c.text for c in out] == [said.text]


@pytest.mark.parametrize(
    ("query", "start", "end", "phrase"),
    [
        ("Where was John between August 11 and August 15 2023?", "2023-08-11", "2023-08-16",
         "between August 11 and August 15 2023"),
        ("What did we do between 28 December 2022 and 2 January 2023?", "2022-12-28", "2023-01-03",
         "between 28 December 2022 and 2 January 2023"),
        ("What changed from December 2022 to February 2023?", "2022-12-01", "2023-03-01",
         "from December 2022 to February 2023"),
        ("Where was I between May 3 and May 9?", "2026-05-03", "2026-05-10", "between May 3 and May 9"),
        ("Which country was Tim visiting in the second week of November 2023?", "2023-11-08", "2023-11-15",
         "in the second week of November 2023"),
        ("What did I do in the last week of February 2024?", "2024-02-23", "2024-03-01",
         "in the last week of February 2024"),
        ("Who called in the first week of May?", "2026-05-01", "2026-05-08", "in the first week of May"),
        ("Who called in the first week of July?", "2025-07-01", "2025-07-08", "in the first week of July"),
    ],
)
def test_spans_named_by_their_ends_or_as_a_week_of_a_month(query: str, start: str, end: str, phrase: str) -> None:
    intent = parse_time_query(query, NOW)
    assert intent.window == (ms(start), ms(end)), intent
    assert intent.dates == (phrase,)


def test_between_two_people_is_no_span() -> None:
    intent = parse_time_query("What do Caroline and Melanie talk about between sessions?", NOW)
    assert intent.window is None and intent.dates == ()


@pytest.mark.parametrize(
    ("query", "undated"),
    [
        ("What did John attend with his colleagues in March 2023?", "What did John attend with his colleagues  ?"),
        ("When did Melanie go camping in June?", "When did Melanie go camping  ?"),
        ("Where did she travel before 12 June 2024?", "Where did she travel before  ?"),
        ("What did I do yesterday?", "What did I do yesterday?"),  # relative: no calendar words to drop
        ("in March 2023", "in March 2023"),  # nothing would be left
    ],
)
def test_without_dates_drops_the_calendar_words_the_time_stage_weighs(query: str, undated: str) -> None:
    assert without_dates(query, parse_time_query(query, NOW)) == undated


def test_the_keyword_lane_also_runs_without_the_query_calendar_words() -> None:
    """Rows carry date stamps, so "March 2023" in a query matches every March row; the undated
    lane matches the event alone and finds the April row that says "last month"."""
    def engine_with(share: float) -> tuple[MemoryEngine, Scope, str]:
        engine = MemoryEngine(store="sqlite:///:memory:", embedder="fake",
                              config=MemoryConfig(retrieval=RetrievalConfig(undated_keyword_share=share)))
        scope = Scope(agent_wallet="agent", user_address="ana")
        items: list[dict[str, object]] = [
            {"content": f"({d} March 2023) John: {t}", "created_at": ms(f"2023-03-{d:02d}")}
            for d, t in [(2, "Busy March 2023 at work."), (3, "We went hiking."), (6, "Rainy March 2023 so far."),
                         (9, "I cooked pasta."), (14, "My kid caught a cold in March 2023.")]
        ] + [{"content": f"({d} March 2023) Ana: {t}", "created_at": ms(f"2023-03-{d:02d}")}
             for d, t in [(4, "Painted the fence."), (11, "Read a novel.")]]
        items.append({"content": "(18 April 2023) John: My colleagues and I went to a convention last month.",
                      "created_at": ms("2023-04-18")})
        ids = engine.ingest(scope, items)
        return engine, scope, ids[-1]

    query = "What did John attend with his colleagues in March 2023?"
    engine, scope, convention = engine_with(0.5)
    result = engine.search_layers(query, scope, ["vectors"], limit=3)
    hits = result.lanes["vectors"]["hits"]
    assert hits["undated"][0][0] == convention  # the event's words alone
    assert convention in [c.id for c in result.layers["vectors"]]
    engine, scope, _ = engine_with(0.0)
    assert "undated" not in engine.search_layers(query, scope, ["vectors"], limit=3).lanes["vectors"]["hits"]
    engine, scope, _ = engine_with(0.5)
    assert "undated" not in engine.search_layers("What did John attend with his colleagues?", scope,
                                                 ["vectors"], limit=3).lanes["vectors"]["hits"]


def test_a_span_between_two_days_lifts_what_happened_inside_it() -> None:
    # recorded on the 17th, it happened on the 15th
    inside = cand("(17 August 2023) John: I met my teammates again on the 15th after my trip.", "2023-08-17")
    outside = cand("(20 August 2023) John: Back from a trip with my teammates.", "2023-08-20", score=1.2)
    out, note = apply_time_intent([outside, inside], parse_time_query("Where was John between August 11 and "
                                                                      "August 15 2023?", NOW),
                                  when_boost=0.5, window_boost=0.5, order_boost=0.3)
    assert note is None and [c.text for c in out] == [inside.text, outside.text]


def test_a_when_question_naming_someone_lifts_what_that_person_said() -> None:
    # the congratulation shares the question's words; the answer is the subject's own report
    def pool() -> list[Candidate]:
        return [cand("(3 June 2022) Joanna: Congrats on winning the tournament last week, Nate!", "2022-06-03", 1.0),
                cand("(3 June 2022) Nate: I just won another regional tournament last week!", "2022-06-03", 0.8)]

    intent = parse_time_query("When did Nate win his third tournament?", NOW)
    assert intent.subjects == ("nate",)
    out, _ = apply_time_intent(pool(), intent, when_boost=0.5, window_boost=0.5, order_boost=0.3, speaker_boost=0.5)
    assert [c.text.split(")")[1][:6] for c in out] == [" Nate:", " Joann"]
    assert out[0].trace["time_speaker"] == pytest.approx(1.5) and "time_speaker" not in out[1].trace
    # off by default in the function, and never for a question that does not ask when
    out, _ = apply_time_intent(pool(), intent, when_boost=0.5, window_boost=0.5, order_boost=0.3)
    assert out[0].text.startswith("(3 June 2022) Joanna:")
    assert parse_time_query("What did Nate win?", NOW).subjects == ()


def test_the_speaker_comes_from_metadata_or_the_transcript_line() -> None:
    assert speaker_of(cand("(8 May 2023) Nate: hi", "2023-05-08")) == "Nate"
    assert speaker_of(cand("[2023-05-08 14:00] Ana Lee: hi", "2023-05-08")) == "Ana Lee"
    assert speaker_of(cand("I won the tournament", "2023-05-08", speaker="Nate")) == "Nate"
    assert speaker_of(cand("I won the tournament", "2023-05-08")) is None
    assert parse_time_query("When did Melanie's friend adopt a child?", NOW).subjects == ("melanie",)


def test_the_time_stage_applies_the_configured_speaker_boost() -> None:
    engine = MemoryEngine(store="sqlite:///:memory:", config=MemoryConfig(retrieval=RetrievalConfig(
        when_speaker_boost=1.0, decay_half_life_days=1e6, recency_alpha=0.0, temporal_alpha=0.0)))
    scope = Scope(agent_wallet="a", user_address="u")
    engine.ingest(scope, [
        {"content": "(3 June 2022) Joanna: Congrats on the tournament win, Nate, the tournament win last week!",
         "created_at": ms("2022-06-03")},
        {"content": "(3 June 2022) Nate: I won another tournament last week!", "created_at": ms("2022-06-03") + 1000},
    ])
    found, _ = engine.search("When did Nate win the tournament?", scope, layers=("vectors",), k=2)
    assert found[0].text.startswith("(3 June 2022) Nate:") and found[0].trace["time_speaker"] == pytest.approx(2.0)
    off = MemoryEngine(store="sqlite:///:memory:", config=MemoryConfig(retrieval=RetrievalConfig(
        when_speaker_boost=0.0, decay_half_life_days=1e6, recency_alpha=0.0, temporal_alpha=0.0)))
    off.ingest(scope, [{"content": "(3 June 2022) Nate: I won another tournament last week!",
                        "created_at": ms("2022-06-03")}])
    found, _ = off.search("When did Nate win the tournament?", scope, layers=("vectors",), k=1)
    assert "time_speaker" not in found[0].trace


def test_a_memory_that_tells_its_time_inside_a_short_window_outranks_one_merely_recorded_there() -> None:
    # both inside "the second week of November 2023" (8 to 14); only the second says what happened then
    recorded = cand("(13 November 2023) Tim: This has been a busy stretch with exams.", "2023-11-13", score=1.0)
    told = cand("(16 November 2023) Tim: I visited a castle in the UK last Friday!", "2023-11-16", score=0.8)
    intent = parse_time_query("Which country was Tim visiting in the second week of November 2023?", NOW)
    kwargs = {"when_boost": 0.5, "window_boost": 0.5, "order_boost": 0.3}
    out, _ = apply_time_intent([recorded, told], intent, **kwargs)  # type: ignore[arg-type]
    assert out[0] is recorded and "time_stated" not in told.trace  # off by default in the function
    for c in (recorded, told):
        c.score = 1.0 if c is recorded else 0.8
    out, _ = apply_time_intent([recorded, told], intent, stated_boost=1.0, **kwargs)  # type: ignore[arg-type]
    assert out[0] is told and told.trace["time_stated"] == pytest.approx(2.0) and "time_stated" not in recorded.trace
    assert tells_time_inside(told, intent.window)  # type: ignore[arg-type]
    assert not tells_time_inside(recorded, intent.window)  # type: ignore[arg-type]
    # a window wider than stated_span_ms (a month) gives no such boost
    month = parse_time_query("What did Tim do in November 2023?", NOW)
    told.trace.clear()
    apply_time_intent([told], month, stated_boost=1.0, **kwargs)  # type: ignore[arg-type]
    assert "time_stated" not in told.trace


def test_the_event_date_tells_the_time_too() -> None:
    fact = cand("Tim visited a castle in the UK.", "2024-01-20", eventDate="2023-11-10")
    assert tells_time_inside(fact, (ms("2023-11-08"), ms("2023-11-15")))
    assert not tells_time_inside(fact, (ms("2023-11-11"), ms("2023-11-15")))
