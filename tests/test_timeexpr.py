"""Relative time phrases resolved against the time they were said (manowar_memory.timeexpr)."""

from __future__ import annotations

import pytest

from manowar_memory.timeexpr import resolve_time

SAID_AT = 1_780_488_000_000  # 2026-06-03 12:00 UTC, a Wednesday


@pytest.mark.parametrize(
    ("text", "phrase", "date", "precision"),
    [
        ("I visited my parents yesterday.", "yesterday", "2026-06-02", "day"),
        ("I start the course today.", "today", "2026-06-03", "day"),
        ("The parcel arrives tomorrow.", "tomorrow", "2026-06-04", "day"),
        ("I moved to Berlin last month.", "last month", "2026-05", "month"),
        ("I'm moving to Paris next month.", "next month", "2026-07", "month"),
        ("I adopted a puppy last week.", "last week", "2026-05-25", "week"),
        ("We meet next Friday.", "next Friday", "2026-06-05", "day"),
        ("I saw her last Friday.", "last Friday", "2026-05-29", "day"),
        ("I finished the marathon on Sunday.", "on Sunday", "2026-05-31", "day"),
        ("The party is on Saturday.", "on Saturday", "2026-06-06", "day"),
        ("I started a new job two weeks ago.", "two weeks ago", "2026-05-18", "week"),
        ("I quit smoking 3 days ago.", "3 days ago", "2026-05-31", "day"),
        ("We married a year ago.", "a year ago", "2025", "year"),
        ("I graduate in two months.", "in two months", "2026-08", "month"),
        ("I joined a climbing gym this year.", "this year", "2026", "year"),
        ("I went to Rome last summer.", "last summer", "2025-06", "month"),
        ("I moved to Lisbon in June.", "in June", "2026-06", "month"),
        ("I visited Japan in November.", "in November", "2025-11", "month"),
        ("I'm flying to Japan in November.", "in November", "2026-11", "month"),
        ("My son starts school in September.", "in September", "2026-09", "month"),
        ("Last Fri I took my kids to a pottery workshop.", "Last Fri", "2026-05-29", "day"),
        ("I joined a new activist group last Tues.", "last Tues", "2026-06-02", "day"),
        ("We meet on Sat for brunch.", "on Sat", "2026-06-06", "day"),
        ("I met my teammates again on the 15th.", "on the 15th", "2026-05-15", "day"),
        ("I moved out on the 2nd.", "on the 2nd", "2026-06-02", "day"),
        ("We fly out on the 20th.", "on the 20th", "2026-06-20", "day"),
        ("The lease starts on the 1st.", "on the 1st", "2026-07-01", "day"),
        ("We went out on the 31st.", "on the 31st", "2026-05-31", "day"),
    ],
)
def test_relative_phrases_resolve_against_the_time_said(text: str, phrase: str, date: str, precision: str) -> None:
    got = resolve_time(text, SAID_AT)
    assert got is not None and (got.phrase, got.date, got.precision) == (phrase, date, precision)


@pytest.mark.parametrize("text", ["I live in Lisbon.", "I moved on 12 June 2024.", "I was born in June 1990.",
                                  "I might move to Porto.", "I moved on the 15th of June.",
                                  "The party is on the 31st."])  # June has 30 days
def test_absolute_or_missing_times_are_left_alone(text: str) -> None:
    assert resolve_time(text, SAID_AT) is None
