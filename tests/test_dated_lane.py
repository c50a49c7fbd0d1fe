"""The dated lane (manowar_memory.retrieval.hybrid.DateLane): a query naming a day or a short
span reads the scope's rows recorded in it, so a turn that shares no word with the question
still reaches the ranking stages."""

from __future__ import annotations

import datetime as dt

from manowar_memory import MemoryConfig, MemoryEngine, Scope, SQLiteStore
from manowar_memory.config import RetrievalConfig

QUERY = "What did Melanie do on 15 May 2023?"


def ms(day: str) -> int:
    return int(dt.datetime.fromisoformat(day).replace(tzinfo=dt.UTC).timestamp() * 1000)


def engine_with(weight: float = 0.3, store: object = "sqlite:///:memory:", embedder: str | None = None,
                pad_days: int = 7) -> tuple[MemoryEngine, Scope, dict[str, str]]:
    """Without an embedder the keyword lane is the only other lane: a row it misses is found
    only through the dated lane."""
    engine = MemoryEngine(store=store, embedder=embedder,  # type: ignore[arg-type]
                          config=MemoryConfig(retrieval=RetrievalConfig(date_lane_weight=weight,
                                                                        date_lane_pad_days=pad_days)))
    scope = Scope(agent_wallet="agent", user_address="ana")
    items: list[dict[str, object]] = [
        {"content": f"Melanie talked about painting number {i}.", "created_at": ms(f"2023-06-{i + 1:02d}")}
        for i in range(8)
    ]
    items += [
        {"content": "Went kayaking at dawn with the kids.", "created_at": ms("2023-05-15") + 3_600_000},
        {"content": "Bought a blue bicycle helmet.", "created_at": ms("2023-05-16") + 3_600_000},
    ]
    ids = engine.ingest(scope, items)
    other = Scope(agent_wallet="agent", user_address="bob")
    (bob,) = engine.ingest(other, [{"content": "Fixed the garden fence.", "created_at": ms("2023-05-15")}])
    return engine, scope, {"kayak": ids[8], "helmet": ids[9], "bob": bob}


def test_a_dated_turn_without_shared_words_is_found_through_its_day() -> None:
    engine, scope, ids = engine_with()
    result = engine.search_layers(QUERY, scope, ["vectors"], limit=10)
    hits = result.lanes["vectors"]["hits"]
    assert [i for i, _ in hits["dated"]] == [ids["kayak"]]  # the day only: not the 16th, not another user's row
    assert ids["kayak"] not in [i for i, _ in hits["keyword"]]
    found = {c.id: c for c in result.layers["vectors"]}
    assert ids["kayak"] in found
    assert found[ids["kayak"]].trace.get("time_window") == 1.5  # the time stage places it
    assert ids["helmet"] not in found and ids["bob"] not in found


def test_with_an_embedder_the_lane_ranks_its_rows_by_cosine() -> None:
    engine, scope, ids = engine_with(embedder="fake")
    for query, first in (("Who went kayaking at dawn between May 15 and May 16 2023?", "kayak"),
                         ("Who bought a helmet between May 15 and May 16 2023?", "helmet")):
        dated = engine.search_layers(query, scope, ["vectors"], limit=10).lanes["vectors"]["hits"]["dated"]
        assert dated[0][0] == ids[first] and len(dated) == 2
        assert dated[0][1] > dated[1][1]


def test_the_lane_is_off_at_weight_zero_and_for_wide_or_missing_windows() -> None:
    engine, scope, ids = engine_with(weight=0.0)
    result = engine.search_layers(QUERY, scope, ["vectors"], limit=10)
    assert "dated" not in result.lanes["vectors"]["hits"]
    assert ids["kayak"] not in [c.id for c in result.layers["vectors"]]
    engine, scope, _ = engine_with()
    for query in ("What did Melanie do in 2023?", "What did Melanie paint?"):
        assert "dated" not in engine.search_layers(query, scope, ["vectors"], limit=10).lanes["vectors"]["hits"]
    span = engine.search_layers("What did Melanie do between May 14 and May 16 2023?", scope, ["vectors"], limit=10)
    assert {i for i, _ in span.lanes["vectors"]["hits"]["dated"]} == {ids["kayak"], ids["helmet"]}


class _NoRangeStore(SQLiteStore):
    """A store without the optional TimeRangeRows capability."""

    memories_created_between = None  # type: ignore[assignment]


def test_a_store_without_the_range_read_leaves_the_lane_out_and_says_so() -> None:
    engine, scope, _ = engine_with(store=_NoRangeStore(":memory:"))
    result = engine.search_layers(QUERY, scope, ["vectors"], limit=10)
    assert "dated" not in result.lanes["vectors"]["hits"]
    assert any("dated lane left out" in d for d in result.degradations)
    assert len(result.layers["vectors"]) == 8  # the other lanes carry on


def test_a_turn_recorded_after_the_day_that_says_it_is_about_it_is_read_too() -> None:
    """'Yesterday ...' recorded on the 16th answers a question about the 15th; a turn of the
    17th without such words, and one recorded past the padding, are not read; with no padding
    only the day's own rows are."""
    later_turns = [
        {"content": "Yesterday Melanie's sculpture won a prize.", "created_at": ms("2023-05-16") + 7_200_000},
        {"content": "Yesterday the roof got fixed.", "created_at": ms("2023-05-30")},
        {"content": "The sculpture class starts soon.", "created_at": ms("2023-05-17")},
    ]
    for pad_days in (7, 0):
        engine, scope, ids = engine_with(pad_days=pad_days)
        later = engine.ingest(scope, later_turns)
        hits = engine.search_layers(QUERY, scope, ["vectors"], limit=10).lanes["vectors"]["hits"]
        expected = [ids["kayak"], later[0]] if pad_days else [ids["kayak"]]
        assert sorted(i for i, _ in hits["dated"]) == sorted(expected), pad_days


def test_a_span_said_without_its_year_is_the_latest_one_that_holds_memories() -> None:
    # "the third week of May" is first placed in the latest past May; this scope's rows are of 2023
    engine, scope, ids = engine_with()
    result = engine.search_layers("What did Melanie do in the third week of May?", scope, ["vectors"], limit=10)
    hits = result.lanes["vectors"]["hits"]
    assert {i for i, _ in hits["dated"]} == {ids["kayak"], ids["helmet"]}  # 15 to 21 May 2023
    found = {c.id: c for c in result.layers["vectors"]}
    assert found[ids["kayak"]].trace.get("time_window") == 1.5
    # a year said is kept: May 2024 holds nothing, so the lane finds nothing
    result = engine.search_layers("What did Melanie do in the third week of May 2024?", scope, ["vectors"], limit=10)
    assert "dated" not in result.lanes["vectors"]["hits"]


def test_a_fact_told_long_after_its_day_is_found_through_its_event_date() -> None:
    """A fact recorded in 2026 about 12 June 2023 (``metadata.eventDate``, as extraction sets it
    from "last Friday") is read by the dated lane for a question about that day (the store's
    ``memories_dated_between``; the conformance suite runs it on both stores)."""
    engine, scope, _ = engine_with()
    (fact,) = engine.ingest(scope, [{"content": "The user adopted a grey kitten.", "created_at": ms("2026-01-05"),
                                     "metadata": {"eventDate": "2023-06-12"}}])
    (other,) = engine.ingest(scope, [{"content": "The user sold the old piano.", "created_at": ms("2026-01-05"),
                                      "metadata": {"eventDate": "2023-06-20"}}])
    result = engine.search_layers("What did the user do on 12 June 2023?", scope, ["vectors"], limit=10)
    dated = [i for i, _ in result.lanes["vectors"]["hits"]["dated"]]
    assert fact in dated and other not in dated
    found = {c.id: c for c in result.layers["vectors"]}
    assert found[fact].trace.get("time_window") == 1.5  # its event date is inside the window
