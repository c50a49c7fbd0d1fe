"""Time in the query: "when" questions, time windows and order words, without an LLM.

:func:`parse_time_query` reads what a query says about time, against the moment it is asked:

* **asks when**: "When did ...", "what date / year / month", "how long ago", "how long has",
  "since when". Memories that state a time ("yesterday", "two weeks ago", "on 12 May",
  "since 2016", "last Fri") are the ones that can answer, so they are boosted. When the
  question names someone ("When did Nate win his third tourney?"), the memories that person
  said are boosted too (``TimeIntent.subjects``, :func:`speaker_of`): people tell their own
  events ("I won another tournament last week") while the others' replies ("Congrats on
  winning!") share the words but rarely the time.
* **a window**: "yesterday", "last week", "in June 2023", "in 2022", "on 12 May 2023",
  "two months ago", "last summer", "in June" (any year's June when no year is said), a span by
  its ends ("between August 11 and August 15 2023", "from December 2022 to February 2023") or a
  week of a month ("the second week of November": days 8 to 14; the latest past one when no
  year is said). ``TimeIntent.dates`` keeps the calendar phrases read, so the keyword lane can
  run without them too (:func:`without_dates`).
  Memories whose time falls inside it are boosted; with ``restrict`` the others are dropped,
  unless none falls inside (then nothing is dropped, and the search says so).
* **before / after**: "before 2023", "after June 2023" (a window open on one side), or an
  event ("before she moved to Berlin"): the candidate that best matches the event's words
  anchors the time, and memories on the asked side of it are boosted.
* **order**: "the first time", "earliest", "originally" prefer the oldest of the relevant
  candidates; "the last time", "most recently", "latest", "now", "currently" the newest.

A memory's time (:func:`candidate_span`) is its event date (``metadata.eventDate``, resolved
from the turn when the fact was extracted), else ``metadata.occurredAt``, else a relative time
its text states ("last month") resolved against when it was recorded, else that day. :func:`apply_time_intent` is the ranking stage's work; every factor it
applies is written to the candidate's ``trace`` (``time_when``, ``time_window``,
``time_order``, ``time_anchor``, ``time_speaker``).
"""

from __future__ import annotations

import calendar
import datetime as dt
import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import regex

from .._util import short_text_cache
from ..candidates import Candidate
from ..timeexpr import resolve_time

__all__ = ["TimeIntent", "apply_time_intent", "candidate_span", "candidate_time", "mentions_time", "parse_time_query",
           "speaker_of", "stated_span", "tells_time_inside", "without_dates",
           "year_earlier"]

_DAY = 86_400_000

_MONTHS = ["january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
           "november", "december"]
_MONTH_ABBR = {m[:3]: i + 1 for i, m in enumerate(_MONTHS)} | {"sept": 9}
_MONTH_RE = (r"(?:jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|sept?(?:ember)?|"
             r"oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)\.?")
_DAY_RE = (r"(?:mon|tues?|wed(?:nes)?|thu(?:rs?)?|fri|sat(?:ur)?|sun)(?:day)?")

_WHEN = regex.compile(
    r"^\s*(?:and |so |but )?when\b|\bwhen (?:did|does|do|was|were|is|will|has|had)\b|"
    r"\bwhat (?:date|day|year|month|week|time of year|season)\b|\bwhich (?:date|day|year|month|week|season)\b|"
    r"\bhow long (?:ago|has|have|had|did|was|were|since|before|after)\b|\bsince when\b|\bin what year\b|"
    r"\bhow (?:many|much) (?:days|weeks|months|years) (?:ago|since|before|after)\b",
    regex.I,
)
# a time a memory states: relative phrases, dates, years, weekdays, durations
_MENTION = regex.compile(
    r"\b(?:yesterday|today|tonight|tomorrow|this (?:morning|afternoon|evening|weekend|week|month|year|summer|"
    r"spring|fall|autumn|winter)|last (?:night|week(?:end)?|month|year|time|summer|spring|fall|autumn|winter|"
    rf"{_DAY_RE}|{_MONTH_RE})|next (?:week(?:end)?|month|year|{_DAY_RE}|{_MONTH_RE})|"
    r"the other day|a while (?:ago|back)|recently|earlier (?:this|today)|"
    r"(?:\d{1,3}|a|an|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|a couple(?: of)?|a few|"
    r"several|many) (?:days?|weeks?|months?|years?|decades?)(?: ago| now| back| later| before| after)|"
    r"(?:since|in|by|until|from|during) (?:19|20)\d\d|"
    rf"(?:on|last|this|next|every) {_DAY_RE}|"
    rf"(?:in|since|until|during|early|late|mid|end of|beginning of) {_MONTH_RE}|"
    rf"\d{{1,2}}(?:st|nd|rd|th)? (?:of )?{_MONTH_RE}|{_MONTH_RE} \d{{1,2}}(?:st|nd|rd|th)?\b|"
    r"(?:19|20)\d\d-\d\d(?:-\d\d)?|\d{1,2}/\d{1,2}(?:/\d{2,4})?|"
    r"(?:summer|winter|spring|fall|autumn|christmas|easter|new year)(?:'s)? (?:of )?(?:19|20)\d\d|"
    r"when (?:i|we|he|she|they) (?:was|were) (?:a )?(?:kid|child|young|little|\d+)|"
    r"(?:first|second|last) time|for (?:the )?(?:past |last )?(?:\d+|a|two|three|four|five|six|seven|eight|nine|ten|"
    r"a few|several|many) (?:days|weeks|months|years))\b",
    regex.I,
)
# a date stamp that opens a transcript line: "(8 May 2023) Ana: ...", "[2023-05-08 14:00] ..."
_STAMP = regex.compile(r"^\s*[\(\[][^\)\]]{4,40}[\)\]]\s*")
_YEAR = regex.compile(r"\b(?:in|during|of|for) (?P<year>(?:19|20)\d\d)\b|^(?P<year2>(?:19|20)\d\d)$", regex.I)
_MONTH_YEAR = regex.compile(rf"\b(?:in |during |of )?(?P<month>{_MONTH_RE}),? (?P<year>(?:19|20)\d\d)\b", regex.I)
_DAY_MONTH_YEAR = regex.compile(
    rf"\b(?:on )?(?:(?P<d1>\d{{1,2}})(?:st|nd|rd|th)? (?:of )?(?P<m1>{_MONTH_RE}),? (?P<y1>(?:19|20)\d\d)|"
    rf"(?P<m2>{_MONTH_RE}) (?P<d2>\d{{1,2}})(?:st|nd|rd|th)?,? (?P<y2>(?:19|20)\d\d)|"
    r"(?P<iso>(?:19|20)\d\d-\d\d-\d\d))\b", regex.I)
_DATE_FRAG = (rf"(?:\d{{1,2}}(?:st|nd|rd|th)? (?:of )?{_MONTH_RE}|{_MONTH_RE} \d{{1,2}}(?:st|nd|rd|th)?\b|{_MONTH_RE})"
              r"(?:,? (?:19|20)\d\d)?")
# "between August 11 and August 15 2023", "from 3 to 9 May 2024" is not read (a bare day number is no date)
_RANGE = regex.compile(rf"\b(?:between|from) (?P<a>{_DATE_FRAG}) (?:and|to|until|till|through) (?P<b>{_DATE_FRAG})",
                       regex.I)
_NTH_WEEK = regex.compile(rf"\b(?:in |during )?(?:the )?(?P<nth>first|second|third|fourth|last) week of "
                          rf"(?P<month>{_MONTH_RE})(?:,? (?P<year>(?:19|20)\d\d))?\b", regex.I)
_FRAG_YEAR = regex.compile(r"\b(?:19|20)\d\d\b")
_FRAG_PARTS = regex.compile(rf"(?P<month>{_MONTH_RE})|(?P<year>(?:19|20)\d\d)|(?P<day>\d{{1,2}})", regex.I)
_MONTH_ONLY = regex.compile(rf"\b(?:in|during) (?P<month>{_MONTH_RE})\b(?!,? (?:19|20)\d\d|\.? \d)", regex.I)
_SIDE = regex.compile(r"\b(?P<side>before|after|since|prior to|until)\s+(?P<rest>[^?.!,;]+)", regex.I)
_FIRST = regex.compile(r"\b(?:the first time|first time|for the first time|earliest|originally|at first|"
                       r"initially|first (?:did|meet|met|go|went|see|saw|start|started|get|got|move|moved|visit|visited|try|tried|"
                       r"learn|learned|hear|heard|join|joined|become|became|come|came|take|took|do|fell|fall))\b", regex.I)
# "now" and "currently" count: on the lifecycle benchmark (30 users) lifting the newest of the
# relevant rows packs the current value first for 29.8 % of changed attributes, against 26.6 %
_LAST = regex.compile(r"\b(?:the last time|last time|most recent(?:ly)?|latest|lately|these days|nowadays|"
                      r"currently|now)\b", regex.I)
_STOP = frozenset(
    "a an the and or of to in on at for with from by is are was were be been being do does did has have had "
    "she he they i we you it her his their our my your them him me us that this these those what which who "
    "when where why how there here then than as so if not no yes just also very really".split())
_WORD = regex.compile(r"\p{L}[\p{L}'-]+")
# a name in a question: a capitalised word that does not open it ("When did Nate ...", "Melanie's")
_NAME = regex.compile(r"(?<=\S\s+)\p{Lu}\p{Ll}[\p{L}-]*")
_POSSESSIVE = regex.compile(r"['\u2019]s?$")
_NOT_NAMES = frozenset("i i'm i've i'd i'll when what which where who whom whose why how did does do was were is are has "
                       "have had will can could would should the a an in on at of for and or but".split())
# who said a transcript line: "(8 May 2023) Nate: ...", "[2023-05-08 14:00] Nate: ...", "Nate: ..."
_SPEAKER = regex.compile(r"^\s*(?:[\(\[][^\)\]]{4,40}[\)\]]\s*)?(?P<name>\p{Lu}[\p{L}'. -]{0,40}?):\s")


@dataclass(frozen=True)
class TimeIntent:
    """What a query says about time (see the module doc); ``window`` is ``(start, end)`` in
    epoch ms (end exclusive), ``month`` a month of any year (1-12) when no year was said,
    ``anchor`` the words of an event the query places memories ``side`` ("before"/"after") of."""

    asks_when: bool = False
    window: tuple[int, int] | None = None
    month: int | None = None
    side: str | None = None
    anchor: tuple[str, ...] = ()
    order: str | None = None  # "first" or "last"
    phrases: tuple[str, ...] = field(default=())
    dates: tuple[str, ...] = field(default=())  # the calendar phrases read ("March 2023", "in June")
    subjects: tuple[str, ...] = field(default=())  # the people a "when" question names, lower-cased
    yearless: bool = False  # the window is a span said without its year, placed in the latest past one

    @property
    def empty(self) -> bool:
        """True when the query says nothing about time."""
        return not (self.asks_when or self.window or self.month or self.side or self.order)


def _ms(day: dt.date) -> int:
    return calendar.timegm(day.timetuple()) * 1000


def _month_number(word: str) -> int:
    w = word.lower().rstrip(".")
    return _MONTHS.index(w) + 1 if w in _MONTHS else _MONTH_ABBR[w[:4] if w.startswith("sept") else w[:3]]


def _span(date: str, precision: str) -> tuple[int, int]:
    """The epoch-ms span of an ISO date of the given precision (``week``: its Monday)."""
    if precision == "year":
        y = int(date[:4])
        return _ms(dt.date(y, 1, 1)), _ms(dt.date(y + 1, 1, 1))
    if precision == "month":
        y, m = int(date[:4]), int(date[5:7])
        return _ms(dt.date(y, m, 1)), _ms(dt.date(y + (m == 12), m % 12 + 1, 1))
    start = dt.date.fromisoformat(date[:10])
    return _ms(start), _ms(start + dt.timedelta(days=7 if precision == "week" else 1))


def _absolute(text: str) -> tuple[tuple[int, int], str] | None:
    m = _DAY_MONTH_YEAR.search(text)
    if m:
        if m.group("iso"):
            day = dt.date.fromisoformat(m.group("iso"))
        else:
            d, mon, y = (m.group("d1"), m.group("m1"), m.group("y1")) if m.group("d1") else (
                m.group("d2"), m.group("m2"), m.group("y2"))
            try:
                day = dt.date(int(y), _month_number(mon), int(d))
            except ValueError:
                return None
        return _span(day.isoformat(), "day"), m.group(0)
    m = _MONTH_YEAR.search(text)
    if m:
        return _span(f"{m.group('year')}-{_month_number(m.group('month')):02d}", "month"), m.group(0)
    m = _YEAR.search(text)
    if m:
        return _span(m.group("year") or m.group("year2"), "year"), m.group(0)
    return None


def _fragment(text: str) -> tuple[int | None, int, int | None]:
    """Day (or None), month and year (or None) of a date fragment ("August 11", "15 Aug 2023")."""
    day = year = None
    month = 1
    for m in _FRAG_PARTS.finditer(text):
        if m.group("month"):
            month = _month_number(m.group("month"))
        elif m.group("year"):
            year = int(m.group("year"))
        else:
            day = int(m.group("day"))
    return day, month, year


def _past_year(month: int, day: int, now: int) -> int:
    """The year of the latest ``month``/``day`` not after ``now`` (a date said without its year)."""
    today = dt.datetime.fromtimestamp(now / 1000, tz=dt.UTC).date()
    return today.year if (month, day) <= (today.month, today.day) else today.year - 1


def _range(text: str, now: int) -> tuple[tuple[int, int], str, bool] | None:
    """A span the query names by its two ends or as a week of a month: "between August 11 and
    August 15 2023" (both days included), "the second week of November 2023" (days 8 to 14,
    "the last week of": the month's last seven days). A missing year is the end's, else the
    latest one not after ``now`` (the third value is then True: no year was said)."""
    m = _RANGE.search(text)
    if m:
        (d1, m1, y1), (d2, m2, y2) = _fragment(m.group("a")), _fragment(m.group("b"))
        y2 = y2 if y2 is not None else y1 if y1 is not None else _past_year(m2, d2 or 1, now)
        y1 = y1 if y1 is not None else (y2 if (m1, d1 or 1) <= (m2, d2 or 1) else y2 - 1)
        try:
            start = dt.date(y1, m1, d1 or 1)
            last = dt.date(y2, m2, d2) if d2 else dt.date(y2 + (m2 == 12), m2 % 12 + 1, 1) - dt.timedelta(days=1)
        except ValueError:
            return None
        if last < start:
            return None
        return (_ms(start), _ms(last + dt.timedelta(days=1))), m.group(0), _FRAG_YEAR.search(m.group(0)) is None
    m = _NTH_WEEK.search(text)
    if m:
        month = _month_number(m.group("month"))
        year = int(m.group("year")) if m.group("year") else _past_year(month, 1, now)
        days = calendar.monthrange(year, month)[1]
        nth = m.group("nth").lower()
        first = days - 6 if nth == "last" else 1 + 7 * ["first", "second", "third", "fourth"].index(nth)
        start = dt.date(year, month, first)
        return (_ms(start), _ms(start + dt.timedelta(days=7))), m.group(0), not m.group("year")
    return None


def year_earlier(window: tuple[int, int]) -> tuple[int, int]:
    """``window`` one calendar year earlier (29 February becomes the 28th)."""
    def back(ms: int) -> int:
        day = dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC)
        try:
            earlier = day.replace(year=day.year - 1)
        except ValueError:  # 29 February
            earlier = day.replace(year=day.year - 1, day=28)
        return int(earlier.timestamp() * 1000)

    return back(window[0]), back(window[1])


def parse_time_query(text: str, now: int) -> TimeIntent:
    """What ``text`` (a query asked at ``now``, epoch ms) says about time."""
    asks_when = bool(_WHEN.search(text))
    phrases: list[str] = []
    window: tuple[int, int] | None = None
    month: int | None = None
    side: str | None = None
    anchor: tuple[str, ...] = ()
    dates: list[str] = []
    rest = text
    spanned = _range(text, now)
    sided = None if spanned is not None else _SIDE.search(text)
    yearless = False
    if spanned is not None:
        window, phrase, yearless = spanned
        phrases.append(phrase)
        dates.append(phrase)
    elif sided:
        word = sided.group("side").lower()
        side = "before" if word in ("before", "prior to", "until") else "after"
        bound = _absolute(sided.group("rest"))
        if bound is not None:
            (start, end), phrase = bound
            window = (0, start) if side == "before" else (end if word == "after" else start, 2**62)
            phrases.append(sided.group(0))
            dates.append(phrase)
            side = None
        else:
            words = tuple(w.lower() for w in _WORD.findall(sided.group("rest")) if w.lower() not in _STOP)
            if words:
                anchor = words[:6]
                phrases.append(sided.group(0))
            else:
                side = None
        rest = text[: sided.start()] + text[sided.end():]
    if window is None:
        found = _absolute(rest)
        if found is not None:
            window, phrase = found
            phrases.append(phrase)
            dates.append(phrase)
        else:
            only = _MONTH_ONLY.search(rest)
            if only:
                month = _month_number(only.group("month"))
                phrases.append(only.group(0))
                dates.append(only.group(0))
            else:
                ref = resolve_time(rest, now)
                if ref is not None:
                    window = _span(ref.date, ref.precision)
                    phrases.append(ref.phrase)
    order = None
    if _FIRST.search(text):
        order = "first"
    elif window is None and month is None and _LAST.search(text) and not asks_when:
        order = "last"
    return TimeIntent(asks_when=asks_when, window=window, month=month, side=side if anchor else None,
                      anchor=anchor, order=order, phrases=tuple(phrases), dates=tuple(dates),
                      subjects=_subjects(text) if asks_when else (), yearless=yearless)


def _subjects(text: str) -> tuple[str, ...]:
    """The names a question mentions (capitalised words past its first, possessives cut), lower-cased."""
    names: dict[str, None] = {}
    for m in _NAME.finditer(text):
        name = _POSSESSIVE.sub("", m.group(0)).lower()
        if name and name not in _NOT_NAMES:
            names.setdefault(name, None)
    return tuple(names)


def speaker_of(cand: Candidate) -> str | None:
    """Who said a candidate's memory: ``metadata.speaker``, else the name that opens its text as a
    transcript line ("(8 May 2023) Nate: ..."); None when neither says."""
    speaker = (cand.metadata or {}).get("speaker")
    if isinstance(speaker, str) and speaker.strip():
        return speaker.strip()
    m = _SPEAKER.match(cand.text)
    return m.group("name").strip() if m else None


def _said_by(cand: Candidate, subjects: tuple[str, ...]) -> bool:
    """Whether one of ``subjects`` said the candidate's memory (a speaker "Nate Smith" is "nate" too)."""
    speaker = speaker_of(cand)
    if speaker is None:
        return False
    said = speaker.lower()
    return said in subjects or any(w in subjects for w in said.split())


def without_dates(text: str, intent: TimeIntent) -> str:
    """``text`` without the calendar phrases ``intent`` read from it ("in March 2023", "in June").
    Returned unchanged when nothing else would be left."""
    out = text
    for phrase in intent.dates:
        out = out.replace(phrase, " ")
    return out if out != text and _WORD.search(out) else text


@short_text_cache()  # "when" questions test every candidate's text
def mentions_time(text: str) -> bool:
    """True when ``text`` states a time (a leading transcript date stamp does not count)."""
    return bool(_MENTION.search(_STAMP.sub("", text, count=1)))


def candidate_span(cand: Candidate, *, recorded_day: bool = True) -> tuple[int, int] | None:
    """When a candidate's memory happened, as an epoch-ms span: its event date
    (``metadata.eventDate``), else ``metadata.occurredAt``, else a relative time its text
    states ("last month", "yesterday", "last Fri") resolved against when it was recorded, else
    (with ``recorded_day``) the day it was recorded; None when it has no time at all."""
    meta: dict[str, Any] = cand.metadata or {}
    event = meta.get("eventDate")
    if isinstance(event, str) and len(event) >= 4:
        try:
            return _span(event, "day" if len(event) >= 10 else "month" if len(event) >= 7 else "year")
        except ValueError:
            pass
    occurred = meta.get("occurredAt", meta.get("occurred_at"))
    if isinstance(occurred, (int, float)) and not isinstance(occurred, bool) and math.isfinite(occurred) and occurred > 0:
        return int(occurred), int(occurred) + _DAY
    stamp = cand.created_at
    if not isinstance(stamp, (int, float)) or stamp <= 0:
        return None
    stated = _cached_stated_span(cand.text, int(stamp))
    return stated if stated is not None or not recorded_day else (int(stamp), int(stamp) + _DAY)


def stated_span(text: str, said_at: int) -> tuple[int, int] | None:
    """The epoch-ms span of the first relative time ``text`` states ("last Friday", "two days
    ago"; a leading transcript date stamp does not count), resolved against ``said_at``; None
    when it states none."""
    ref = resolve_time(_STAMP.sub("", text, count=1), said_at)
    return _span(ref.date, ref.precision) if ref is not None else None


_cached_stated_span = short_text_cache()(stated_span)  # the time rules place the same stored rows query after query



def candidate_time(cand: Candidate) -> int | None:
    """When a candidate's memory happened (epoch ms): the start of :func:`candidate_span`."""
    span = candidate_span(cand)
    return span[0] if span is not None else None


def tells_time_inside(cand: Candidate, window: tuple[int, int]) -> bool:
    """Whether the candidate itself says it happened inside ``window`` (epoch ms, end exclusive):
    its event date, ``occurredAt`` or a relative time its text states ("last Friday", "on the
    15th"), resolved against when it was recorded (:func:`candidate_span` without the recorded
    day), falls in it. A memory merely recorded in the window does not count: "this week has been
    busy", said that week, is near the time asked about; "I went to the UK last Friday", said days
    later, tells what happened in it."""
    span = candidate_span(cand, recorded_day=False)
    return span is not None and span[0] < window[1] and window[0] < span[1]


def _in_window(span: tuple[int, int] | None, intent: TimeIntent) -> bool:
    if span is None:
        return False
    if intent.window is not None:
        return span[0] < intent.window[1] and intent.window[0] < span[1]
    return dt.datetime.fromtimestamp(span[0] / 1000, tz=dt.UTC).month == intent.month


@functools.lru_cache(maxsize=16384)
def _stem(word: str) -> str:
    """A crude stem: common endings off, then the first five letters (moved, moving, move: mov)."""
    w = word.lower()
    for end in ("ing", "ed", "es", "s", "e"):
        if len(w) > len(end) + 2 and w.endswith(end):
            w = w[: -len(end)]
            break
    return w[:5]


@short_text_cache()  # the anchor stage stems every candidate's words
def _stems(text: str) -> frozenset[str]:
    """The crude stems of a text's words."""
    return frozenset(_stem(w) for w in _WORD.findall(text))


def _anchor_time(candidates: Sequence[Candidate], words: tuple[str, ...]) -> tuple[Candidate, int] | None:
    """The candidate that best matches the anchor event's words (at least half of them, on
    crude stems), with its time."""
    stems = {_stem(w) for w in words}
    best: tuple[float, Candidate] | None = None
    for cand in candidates:
        have = _stems(cand.text)
        share = len(stems & have) / len(stems)
        if share >= 0.5 and (best is None or share > best[0]):
            best = (share, cand)
    if best is None:
        return None
    when = candidate_time(best[1])
    return (best[1], when) if when is not None else None


def apply_time_intent(
    candidates: list[Candidate], intent: TimeIntent, *, when_boost: float, window_boost: float,
    order_boost: float, restrict: bool = False, pool: int | None = None, speaker_boost: float = 0.0,
    stated_boost: float = 0.0, stated_span_ms: int = 14 * _DAY,
) -> tuple[list[Candidate], str | None]:
    """Boost (or, with ``restrict``, keep only) the candidates that fit ``intent``, and re-sort.

    ``speaker_boost``: a "when" question that names someone multiplies the memories that person
    said (:func:`speaker_of`) by 1 + this.

    ``stated_boost``: in a window of at most ``stated_span_ms``, a memory inside it whose own
    words or event date put it there (:func:`tells_time_inside`) gets a further 1 + this.

    ``pool``: how many leading candidates the order and anchor rules weigh (the relevant
    ones); the rest keep their factors at 1 for those rules. Returns the candidates and a
    note when a window or anchor matched nothing (so the search can report it)."""
    if intent.empty or not candidates:
        return candidates, None
    note = None
    head = candidates[: pool or len(candidates)]
    factors: dict[int, float] = {id(c): 1.0 for c in candidates}
    if intent.asks_when and when_boost:
        for cand in candidates:
            if mentions_time(cand.text) or (cand.metadata or {}).get("eventDate"):
                factors[id(cand)] *= 1.0 + when_boost
                cand.trace["time_when"] = 1.0 + when_boost
    if intent.asks_when and intent.subjects and speaker_boost:
        for cand in candidates:
            if _said_by(cand, intent.subjects):
                factors[id(cand)] *= 1.0 + speaker_boost
                cand.trace["time_speaker"] = 1.0 + speaker_boost
    if intent.window is not None or intent.month is not None:
        inside = [c for c in candidates if _in_window(candidate_span(c), intent)]
        if not inside:
            note = f"time window ({', '.join(intent.phrases)}) matched no candidate; not applied"
        elif restrict:
            keep = {id(c) for c in inside}
            candidates = [c for c in candidates if id(c) in keep]
        else:
            window = intent.window
            told = stated_boost > 0 and window is not None and window[1] - window[0] <= stated_span_ms
            for cand in inside:
                factors[id(cand)] *= 1.0 + window_boost
                cand.trace["time_window"] = 1.0 + window_boost
                if told and window is not None and tells_time_inside(cand, window):
                    factors[id(cand)] *= 1.0 + stated_boost
                    cand.trace["time_stated"] = 1.0 + stated_boost
    if intent.anchor:
        found = _anchor_time(head, intent.anchor)
        if found is None:
            note = f"no memory matched the event '{' '.join(intent.anchor)}'; the before/after rule was not applied"
        else:
            anchor, at = found
            for cand in head:
                when = candidate_time(cand)
                if cand is anchor or when is None:
                    continue
                if (when < at) == (intent.side == "before") and when != at:
                    factors[id(cand)] *= 1.0 + window_boost
                    cand.trace["time_anchor"] = 1.0 + window_boost
    if intent.order is not None and order_boost:
        dated = sorted((t, i) for i, c in enumerate(head) if (t := candidate_time(c)) is not None)
        if len(dated) > 1:
            for rank, (_, i) in enumerate(dated):
                share = rank / (len(dated) - 1)  # 0 for the oldest, 1 for the newest
                signal = 1.0 - share if intent.order == "first" else share
                value = 1.0 + order_boost * (signal - 0.5)
                factors[id(head[i])] *= value
                head[i].trace["time_order"] = value
    for cand in candidates:
        cand.score *= factors[id(cand)]
    return sorted(candidates, key=lambda c: c.score, reverse=True), note
