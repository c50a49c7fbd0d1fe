"""Relative time expressions resolved against the moment they were said.

``resolve_time("I moved to Berlin last month", said_at)`` gives the phrase ("last month")
and the calendar span it names, as an ISO date of the precision the phrase has
(``2026-05`` for a month, ``2026-06-12`` for a day, ``2026`` for a year, the Monday of a
week). Only expressions whose meaning depends on when they were said are read: yesterday,
today, tomorrow, N days/weeks/months/years ago, last/next/this week/month/year/weekday,
``in June`` (the June nearest the time said, this year's or, for a past tense, the last
one), ``on Friday`` and ``on the 15th`` (a day of this month or, for a past tense that
would put it later than the time said, of the last one; of the next month for a future one). Dates written out ("12 June 2024") need no resolving and are left alone.
"""

from __future__ import annotations

import calendar
import datetime as dt
from dataclasses import dataclass

import regex

__all__ = ["TimeRef", "resolve_time"]


@dataclass(frozen=True)
class TimeRef:
    """A time phrase and the date it names (``YYYY``, ``YYYY-MM``, ``YYYY-MM-DD``; a week is its Monday)."""

    phrase: str
    date: str
    precision: str  # day, week, month or year


_MONTHS = ["january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
           "november", "december"]
_DAYS = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
_DAY_ABBR = {"mon": 0, "tue": 1, "tues": 1, "wed": 2, "thu": 3, "thur": 3, "thurs": 3, "fri": 4, "sat": 5, "sun": 6}
_NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
            "eight": 8, "nine": 9, "ten": 10, "a couple of": 2, "a few": 3}
_NUM = r"(?P<n>\d{1,3}|a couple of|a few|an|a|one|two|three|four|five|six|seven|eight|nine|ten)"
_PAST = regex.compile(r"\b(?:was|were|went|did|had|moved|got|started|finished|visited|met|bought|left|joined|"
                      r"adopted|quit|graduated|\w+ed)\b", regex.I)
_PATTERN = regex.compile(
    rf"\b(?P<simple>yesterday|today|tonight|tomorrow|the day before yesterday|the day after tomorrow)\b"
    rf"|\b{_NUM} (?P<unit>day|week|month|year)s? ago\b"
    rf"|\b(?:in|after) {_NUM} (?P<unit2>day|week|month|year)s?\b"
    rf"|\b(?P<rel>last|next|this|coming) (?P<what>week|weekend|month|year|{'|'.join(_DAYS)}|{'|'.join(_MONTHS)}|"
    rf"(?:{'|'.join(_DAY_ABBR)})\b\.?|"
    r"spring|summer|autumn|fall|winter)\b"
    rf"|\b(?:in|since|until|by) (?P<month>{'|'.join(m.capitalize() for m in _MONTHS)})\b(?! \d{{1,2}}\b|,? \d{{4}})"
    rf"|\b(?:on) (?P<day>{'|'.join(d.capitalize() for d in _DAYS)}|(?-i:{'|'.join(a.capitalize() for a in _DAY_ABBR)}))\b"
    r"|\bon the (?P<dom>[1-9]|[12]\d|3[01])(?:st|nd|rd|th)\b(?! (?:of|in) )",
    regex.I,
)
_SEASON_MONTH = {"spring": 3, "summer": 6, "autumn": 9, "fall": 9, "winter": 12}


def _add_months(d: dt.date, months: int) -> dt.date:
    total = d.year * 12 + d.month - 1 + months
    return dt.date(total // 12, total % 12 + 1, 1)


def _week(d: dt.date) -> str:
    return (d - dt.timedelta(days=d.weekday())).isoformat()


def resolve_time(text: str, said_at_ms: int) -> TimeRef | None:
    """The first relative time phrase of ``text`` with the date it names, said at ``said_at_ms`` (UTC)."""
    m = _PATTERN.search(text)
    if m is None:
        return None
    today = dt.datetime.fromtimestamp(said_at_ms / 1000, tz=dt.UTC).date()
    past = bool(_PAST.search(text))
    g = m.groupdict()
    phrase = m.group(0)
    if g["simple"]:
        offset = {"yesterday": -1, "today": 0, "tonight": 0, "tomorrow": 1, "the day before yesterday": -2,
                  "the day after tomorrow": 2}[g["simple"].lower()]
        return TimeRef(phrase, (today + dt.timedelta(days=offset)).isoformat(), "day")
    unit = g["unit"] or g["unit2"]
    if unit:
        n = int(g["n"]) if g["n"].isdigit() else _NUMBERS[g["n"].lower()]
        sign = -1 if g["unit"] else 1
        if unit == "day":
            return TimeRef(phrase, (today + dt.timedelta(days=sign * n)).isoformat(), "day")
        if unit == "week":
            return TimeRef(phrase, _week(today + dt.timedelta(weeks=sign * n)), "week")
        if unit == "month":
            return TimeRef(phrase, _add_months(today, sign * n).strftime("%Y-%m"), "month")
        return TimeRef(phrase, str(today.year + sign * n), "year")
    if g["rel"]:
        rel, what = g["rel"].lower(), g["what"].lower().rstrip(".")
        what = _DAYS[_DAY_ABBR[what]] if what in _DAY_ABBR else what
        step = {"last": -1, "next": 1, "this": 0, "coming": 1}[rel]
        if what in ("week", "weekend"):
            return TimeRef(phrase, _week(today + dt.timedelta(weeks=step)), "week")
        if what == "month":
            return TimeRef(phrase, _add_months(today, step).strftime("%Y-%m"), "month")
        if what == "year":
            return TimeRef(phrase, str(today.year + step), "year")
        if what in _DAYS:
            delta = _DAYS.index(what) - today.weekday()
            if rel == "last":
                delta = delta - 7 if delta >= 0 else delta
            elif rel in ("next", "coming"):
                delta = delta + 7 if delta <= 0 else delta
            return TimeRef(phrase, (today + dt.timedelta(days=delta)).isoformat(), "day")
        month = _MONTHS.index(what) + 1 if what in _MONTHS else _SEASON_MONTH[what]
        year = today.year + (-1 if rel == "last" and month >= today.month else 1 if step == 1 and month <= today.month
                             else 0)
        return TimeRef(phrase, f"{year}-{month:02d}", "month")
    if g["month"]:
        month = _MONTHS.index(g["month"].lower()) + 1
        year = today.year
        if past and month > today.month:
            year -= 1
        elif not past and month < today.month:
            year += 1
        return TimeRef(phrase, f"{year}-{month:02d}", "month")
    if g["dom"]:
        dom = int(g["dom"])
        first = today.replace(day=1)
        if past and dom > today.day:
            first = _add_months(first, -1)
        elif not past and dom < today.day:
            first = _add_months(first, 1)
        if dom > calendar.monthrange(first.year, first.month)[1]:
            return None
        return TimeRef(phrase, first.replace(day=dom).isoformat(), "day")
    name = g["day"].lower()
    day = _DAY_ABBR[name] if name in _DAY_ABBR else _DAYS.index(name)
    delta = day - today.weekday()
    if past and delta > 0:
        delta -= 7
    elif not past and delta < 0:
        delta += 7
    return TimeRef(phrase, (today + dt.timedelta(days=delta)).isoformat(), "day")
