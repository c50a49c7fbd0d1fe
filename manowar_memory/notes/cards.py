"""Compact result cards: the summary, key points, lexical bonus and confidence states."""

from __future__ import annotations

import re
from collections.abc import Sequence

__all__ = [
    "AMBIGUOUS_DELTA",
    "HIGH_CONFIDENCE",
    "MEDIUM_CONFIDENCE",
    "SUMMARY_CHARS",
    "compressed_summary",
    "confidence_state",
    "key_points",
    "lexical_bonus",
    "overall_confidence",
    "preview",
    "query_terms",
]

SUMMARY_CHARS = 220
HIGH_CONFIDENCE = 0.82
MEDIUM_CONFIDENCE = 0.62
AMBIGUOUS_DELTA = 0.03
NO_RESULTS = "No relevant memory results found."
AMBIGUOUS = "Top results are close; hydrate before acting."
LOW = "Low-confidence retrieval; refine the query or hydrate before acting."

_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
_WORD = re.compile(r"\w+", re.UNICODE)
_LIST = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+")
_SENTENCE = re.compile(r"(?<=[.!?])\s+")


def _clean(text: str) -> str:
    return " ".join(_LINK.sub(r"\1", text).replace("`", "").split())


def query_terms(query: str) -> list[str]:
    """Unique ``\\w+`` tokens of the query, case-folded (any script)."""
    return list(dict.fromkeys(t.casefold() for t in _WORD.findall(query)))


def compressed_summary(title: str, text: str, limit: int = SUMMARY_CHARS) -> str:
    """At most ``limit`` characters: links as their anchor text, no backticks, whitespace collapsed,
    prefixed with ``title: `` unless the text starts with the title."""
    stripped = _clean(text).lstrip("# ").strip()
    head = _clean(title)
    out = f"{head}: {stripped}" if head and not stripped.casefold().startswith(head.casefold()) else stripped
    return out if len(out) <= limit else out[: limit - 1].rstrip() + "…"


def preview(text: str, limit: int = 160) -> str:
    """Whitespace-collapsed text cut to ``limit`` characters with ``…``."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


def key_points(text: str, query: str, limit: int = 3) -> list[str]:
    """Up to ``limit`` sentences of ``text``, the ones holding the most query terms first (then in
    document order); code-fence lines, heading marks and list markers left out."""
    terms = query_terms(query)
    sentences: list[str] = []
    fence = False
    for line in text.splitlines():
        if line.strip().startswith(("```", "~~~")):
            fence = not fence
            continue
        if fence:
            continue
        line = _LIST.sub("", line.strip().lstrip("#").strip())
        line = _clean(line)
        if len(line) < 6:
            continue
        sentences.extend(s.strip() for s in _SENTENCE.split(line) if len(s.strip()) >= 6)
    seen: set[str] = set()
    unique: list[str] = []
    for s in sentences:
        if s.casefold() not in seen:
            seen.add(s.casefold())
            unique.append(s)
    ranked = sorted(enumerate(unique), key=lambda p: (-sum(t in p[1].casefold() for t in terms), p[0]))
    return [s if len(s) <= SUMMARY_CHARS else s[: SUMMARY_CHARS - 1] + "…" for _, s in ranked[:limit]]


def lexical_bonus(query: str, title: str, tags: Sequence[str], content: str) -> float:
    """The reference's lexical bonus, at most 0.24: 0.16 × share of the query terms anywhere, 0.08 ×
    share in the title, 0.04 × share in the tags, 0.08 when the whole query occurs as written."""
    terms = query_terms(query)
    if not terms:
        return 0.0
    t, g, c = title.casefold(), " ".join(tags).casefold(), content.casefold()
    words_all = set(_WORD.findall(f"{t} {g} {c}"))
    n = len(terms)
    anywhere = sum(term in words_all for term in terms)
    in_title = sum(term in set(_WORD.findall(t)) for term in terms)
    in_tags = sum(term in set(_WORD.findall(g)) for term in terms)
    bonus = 0.16 * anywhere / n + 0.08 * in_title / n + 0.04 * in_tags / n
    if query.casefold().strip() and query.casefold().strip() in f"{t}\n{g}\n{c}":
        bonus += 0.08
    return min(bonus, 0.24)


def confidence_state(confidence: float) -> str:
    """high (≥ 0.82), medium (≥ 0.62) or low."""
    if confidence >= HIGH_CONFIDENCE:
        return "high"
    return "medium" if confidence >= MEDIUM_CONFIDENCE else "low"


def overall_confidence(effective: Sequence[float], top_confidence: float | None) -> tuple[str, str | None]:
    """The state of a whole result list and its warning: low with no results; ambiguous when the top
    two effective scores are within 0.03 (or equal to 2 decimals); else the top item's state."""
    if not effective or top_confidence is None:
        return "low", NO_RESULTS
    if len(effective) > 1 and (effective[0] - effective[1] <= AMBIGUOUS_DELTA + 1e-9
                               or round(effective[0], 2) == round(effective[1], 2)):
        return "ambiguous", AMBIGUOUS
    state = confidence_state(top_confidence)
    return state, LOW if state == "low" else None
