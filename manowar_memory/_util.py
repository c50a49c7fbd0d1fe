"""Small shared helpers: time, hashing, text normalisation."""

from __future__ import annotations

import functools
import hashlib
import time
from collections.abc import Callable, Sequence
from typing import Any, Concatenate, ParamSpec, TypeVar

import regex

DAY_MS = 86_400_000

P = ParamSpec("P")
R = TypeVar("R")

#: Texts up to this long are memoised by :func:`short_text_cache`; a cache of longer ones would
#: hold too much for too little.
SHORT_TEXT = 2000


def short_text_cache(maxsize: int = 4096) -> Callable[[Callable[Concatenate[str, P], R]], Callable[Concatenate[str, P], R]]:
    """Memoise a pure function of a text (and hashable arguments after it) for texts of at most
    :data:`SHORT_TEXT` characters, in an LRU cache of ``maxsize`` calls: the lanes, the ranking
    stages and the packer see the same stored rows query after query. A longer text is
    computed each time."""

    def wrap(fn: Callable[Concatenate[str, P], R]) -> Callable[Concatenate[str, P], R]:
        cached = functools.lru_cache(maxsize=maxsize)(fn)

        @functools.wraps(fn)
        def call(text: str, /, *args: P.args, **kwargs: P.kwargs) -> R:
            if len(text) <= SHORT_TEXT:
                return cached(text, *args, **kwargs)  # type: ignore[arg-type]
            return fn(text, *args, **kwargs)

        return call

    return wrap


def now_ms() -> int:
    """Milliseconds since the Unix epoch, as every stored time in this library."""
    return time.time_ns() // 1_000_000


def content_hash(text: str, length: int = 32) -> str:
    """SHA-256 of the UTF-8 text, lowercase hex, first ``length`` characters (reference H(s))."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:length]


def as_str(value: Any) -> str | None:
    """The value trimmed when it is a string that is non-empty after trimming, else None."""
    if isinstance(value, str):
        stripped = value.strip()
        return stripped or None
    return None


_WS = regex.compile(r"\s+")


def collapse_ws(text: str) -> str:
    """Collapse runs of whitespace to one space and trim."""
    return _WS.sub(" ", text).strip()


def truncate(text: str, limit: int) -> str:
    """Trim and cut to ``limit`` characters, ending with ``...`` when cut."""
    text = text.strip()
    if len(text) <= limit:
        return text
    return text[: max(0, limit - 3)].rstrip() + "..."


# A compact English stop-word list used by the keyword lane and term-overlap scores.
STOPWORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before being below
    between both but by can could did do does doing down during each few for from further had has have
    having he her here hers herself him himself his how i if in into is it its itself just me more most my
    myself no nor not now of off on once only or other our ours ourselves out over own same she should so
    some such than that the their theirs them themselves then there these they this those through to too
    under until up very was we were what when where which while who whom why will with would you your
    yours yourself yourselves also did does get got like one really would yeah yes oh okay ok hey hi""".split()
)

#: Words that name the two sides of a conversation. Every stored turn reads "user: ..." and every
#: extracted fact "The user ...", so in a query ("Where does the user work?") they match every row
#: and rank the shortest rows first: a query's content terms leave them out.
ROLE_WORDS = frozenset(("user", "users", "assistant"))

_TOKEN = regex.compile(r"[\p{L}\p{N}]+(?:['’][\p{L}]+)?")


def tokens(text: str) -> list[str]:
    """Lower-cased word tokens (letters and digits), apostrophe suffixes kept."""
    return [t.replace("’", "'") for t in _TOKEN.findall(text.lower())]


def query_terms(text: str) -> list[str]:
    """Unique content terms of a query: tokens longer than 2 characters that are neither stop
    words nor :data:`ROLE_WORDS`."""
    seen: dict[str, None] = {}
    for tok in tokens(text):
        if len(tok) > 2 and tok not in STOPWORDS and tok.split("'")[0] not in ROLE_WORDS:
            seen.setdefault(tok, None)
    return list(seen)


def term_overlap(terms: Sequence[str], text: str) -> float:
    """Share of ``terms`` found as substrings of the lower-cased text (0 when either is empty)."""
    if not terms or not text:
        return 0.0
    lowered = text.lower()
    return sum(1 for t in terms if t in lowered) / len(terms)
