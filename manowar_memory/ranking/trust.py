"""Trust levels (Comis): who may be believed, and how untrusted memory is shown to a model.

* Three levels: ``system`` (written by the agent's own machinery; fully trusted),
  ``learned`` (learned from conversations; the default for rows that do not say) and
  ``external`` (web or tool content; excluded from searches unless asked for).
* A row's level is ``metadata["trust"]`` (``trustLevel`` and ``trust_level`` are accepted too).
* Content below ``system`` is wrapped in untrusted-content markers before it reaches a
  prompt (:func:`wrap_untrusted`). Markers forged inside stored content — including
  fullwidth or look-alike angle brackets — are neutralised first
  (:func:`neutralize_markers`), so a memory cannot close the wrapper early or open a fake one.
  The delimiter is session-stable (an HMAC of the session key under a per-process secret),
  so the prompt prefix stays cacheable across turns but cannot be guessed by stored text.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import secrets
import unicodedata
from collections.abc import Mapping
from typing import Any

import regex
from anyascii import anyascii

__all__ = [
    "TRUST_LEVELS",
    "TRUST_WEIGHT",
    "content_delimiter",
    "neutralize_markers",
    "trust_level",
    "wrap_untrusted",
]

TRUST_LEVELS: tuple[str, ...] = ("system", "learned", "external")
TRUST_WEIGHT: dict[str, float] = {"system": 1.0, "learned": 0.5, "external": 0.0}
_TRUST_KEYS = ("trust", "trustLevel", "trust_level")
_LEVEL_SET = frozenset(TRUST_LEVELS)

_SECRET = secrets.token_bytes(32)  # never leaves the process

# Brackets that look like < or > (anyascii spells some of them as letters, e.g. U+1438 as "pa").
_BRACKET_FOLD = {
    0x2039: "<", 0x203A: ">", 0x3008: "<", 0x3009: ">", 0x2329: "<", 0x232A: ">", 0x27E8: "<", 0x27E9: ">",
    0x276C: "<", 0x276D: ">", 0x276E: "<", 0x276F: ">", 0x2770: "<", 0x2771: ">", 0x1438: "<", 0x1433: ">",
    0x02C2: "<", 0x02C3: ">", 0x02F1: "<", 0x02F2: ">", 0xFE64: "<", 0xFE65: ">", 0xFF1C: "<", 0xFF1E: ">",
    0x00AB: "<<", 0x00BB: ">>", 0x226A: "<<", 0x226B: ">>", 0x300A: "<<", 0x300B: ">>", 0x2AA1: "<<", 0x2AA2: ">>",
}
# Letters that look like Latin ones (Cyrillic, Greek, Armenian...): folded by shape, not by sound,
# so a Cyrillic "Н" reads as the "H" it looks like. Others go through anyascii.
_SHAPE_FOLD = dict(zip(
    map(ord, "АВЕЅІЈКМНОРСТУХаеіјорсухԁԀΑΒΕΖΗΙΚΜΝΟΡΤΥΧοντυϲՍՏՕԼ"),
    "ABESIJKMHOPCTYXaeijopcyxdDABEZHIKMNOPTYXovtucUSOL", strict=True))
_MARKER = regex.compile(
    r"<{1,3}[\s_.-]*(END[\s_.-]*)?(?:EXTERNAL[\s_.-]*UNTRUSTED[\s_.-]*CONTENT|UNTRUSTED[^<>\n]{0,80}?)[\s_.-]*>{1,3}",
    regex.IGNORECASE,
)
_MAYBE_MARKER = regex.compile(r"[^\x00-\x3b\x3d\x3f-\x7f]")  # any non-ASCII character, or < or >


def trust_level(metadata: Mapping[str, Any] | None, default: str = "learned") -> str:
    """The row's trust level from its metadata, or ``default`` when it has none (or an unknown one)."""
    if metadata:
        for key in _TRUST_KEYS:
            value = metadata.get(key)
            if isinstance(value, str):
                if value in _LEVEL_SET:  # the common, already clean spelling
                    return value
                value = value.strip().lower()
                if value in _LEVEL_SET:
                    return value
    return default


def _fold_char(ch: str) -> str:
    code = ord(ch)
    if code < 0x80:
        return ch
    if code in _BRACKET_FOLD:
        return _BRACKET_FOLD[code]
    if code in _SHAPE_FOLD:
        return _SHAPE_FOLD[code]
    if unicodedata.category(ch) in ("Cf", "Mn", "Me", "Cc", "Zl", "Zp"):
        return ""  # zero-width, soft hyphen, joiners, combining marks, controls: invisible to a reader
    folded = unicodedata.normalize("NFKC", ch)
    if all(ord(c) < 0x80 for c in folded):
        return folded
    return str(anyascii(folded))


def _folded_view(text: str) -> tuple[str, list[int]]:
    """``text`` as a reader sees it, in ASCII, and for each folded character the index of the
    original character it came from."""
    out: list[str] = []
    origin: list[int] = []
    for i, ch in enumerate(text):
        piece = _fold_char(ch)
        out.append(piece)
        origin.extend([i] * len(piece))
    return "".join(out), origin


def neutralize_markers(text: str) -> str:
    """Replace forged untrusted-content markers with ``[[MARKER_SANITIZED]]`` /
    ``[[END_MARKER_SANITIZED]]``.

    Markers are found on a normalised view of the text, not on a list of spellings: NFKC;
    zero-width, format, combining and control characters removed; look-alike brackets and
    letters (fullwidth, Cyrillic, Greek, Canadian syllabics...) folded to ASCII; any case,
    separators and delimiter."""
    if not text or (text.isascii() and "<" not in text and ">" not in text):  # fast path: plain ASCII, no bracket
        return text
    if not _MAYBE_MARKER.search(text):
        return text
    return _neutralize_cached(text) if len(text) <= 2000 else _neutralize(text)


def _neutralize(text: str) -> str:
    folded, origin = _folded_view(text)
    if "<" not in folded:
        return text
    pieces: list[str] = []
    last = 0
    for match in _MARKER.finditer(folded):
        start, end = origin[match.start()], origin[match.end() - 1] + 1
        if start < last:
            continue
        pieces.append(text[last:start])
        pieces.append("[[END_MARKER_SANITIZED]]" if match.group(1) else "[[MARKER_SANITIZED]]")
        last = end
    if not pieces:
        return text
    pieces.append(text[last:])
    return "".join(pieces)


_neutralize_cached = functools.lru_cache(maxsize=4096)(_neutralize)  # stored rows come back query after query


def content_delimiter(session_key: str | None = None) -> str:
    """24 hex characters: stable for one session key within this process, random without one."""
    if session_key:
        return hmac.new(_SECRET, session_key.encode("utf-8"), hashlib.sha256).hexdigest()[:24]
    return secrets.token_hex(12)


def wrap_untrusted(
    content: str, *, source: str = "Memory", trust: str = "learned", delimiter: str | None = None,
    session_key: str | None = None, already_wrapped: bool = False,
) -> str:
    """The content between ``<<<UNTRUSTED_<delim>>>>`` and ``<<<END_UNTRUSTED_<delim>>>>``,
    with a ``Source:`` line, forged markers neutralised. ``system`` content is only
    neutralised. ``already_wrapped`` (the row's ``taintLevel`` is ``"wrapped"``, set by the
    writer, never guessed from the text) returns the content unchanged."""
    if already_wrapped:
        return content
    if trust == "system":
        return neutralize_markers(content)
    delim = delimiter or content_delimiter(session_key)
    if not regex.fullmatch(r"[0-9a-f]{8,64}", delim):
        raise ValueError("delimiter must be 8 to 64 lowercase hex characters")
    return "\n".join([
        f"<<<UNTRUSTED_{delim}>>>",
        f"Source: {source} (trust: {trust})",
        "---",
        neutralize_markers(content),
        f"<<<END_UNTRUSTED_{delim}>>>",
    ])
