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

import hashlib
import hmac
import secrets
from collections.abc import Mapping
from typing import Any

import regex

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

_SECRET = secrets.token_bytes(32)  # never leaves the process

# Look-alikes folded to ASCII for detection only (one character to one, so positions map back).
_FOLD = {0x2039: "<", 0x203A: ">", 0x3008: "<", 0x3009: ">", 0x27E8: "<", 0x27E9: ">", 0xFE64: "<", 0xFE65: ">",
         0x00AB: "<", 0x00BB: ">", 0x226A: "<", 0x226B: ">", 0x02C2: "<", 0x02C3: ">"}
_BRACKETS = regex.compile("[<\uff1c" + "".join(chr(c) for c, v in _FOLD.items() if v == "<") + "]")
_MARKER = regex.compile(
    r"<{2,3}\s*(END[\s_-]*)?(?:EXTERNAL[\s_-]*UNTRUSTED[\s_-]*CONTENT|UNTRUSTED(?:[\s_-]*[0-9A-Za-z]*)?)\s*>{2,3}",
    regex.IGNORECASE,
)


def trust_level(metadata: Mapping[str, Any] | None, default: str = "learned") -> str:
    """The row's trust level from its metadata, or ``default`` when it has none (or an unknown one)."""
    if metadata:
        for key in _TRUST_KEYS:
            value = metadata.get(key)
            if isinstance(value, str) and value.strip().lower() in TRUST_LEVELS:
                return value.strip().lower()
    return default


def _fold(text: str) -> str:
    out = []
    for ch in text:
        code = ord(ch)
        if 0xFF01 <= code <= 0xFF5E:  # fullwidth ASCII
            out.append(chr(code - 0xFEE0))
        else:
            out.append(_FOLD.get(code, ch))
    return "".join(out)


def neutralize_markers(text: str) -> str:
    """Replace forged untrusted-content markers (start and end forms, any case, fullwidth or
    look-alike brackets) with ``[[MARKER_SANITIZED]]`` / ``[[END_MARKER_SANITIZED]]``."""
    if not text or not _BRACKETS.search(text):  # fast path: nothing that could open a marker
        return text
    folded = _fold(text)
    if "<<" not in folded:
        return text
    pieces: list[str] = []
    last = 0
    for match in _MARKER.finditer(folded):
        pieces.append(text[last : match.start()])  # positions are the same in both strings
        pieces.append("[[END_MARKER_SANITIZED]]" if match.group(1) else "[[MARKER_SANITIZED]]")
        last = match.end()
    if not pieces:
        return text
    pieces.append(text[last:])
    return "".join(pieces)


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
