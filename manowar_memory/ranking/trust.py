"""Trust levels (Comis): who may be believed, and how untrusted memory is shown to a model.

* Three levels: ``system`` (written by the agent's own machinery; fully trusted),
  ``learned`` (learned from conversations; the default for rows that do not say) and
  ``external`` (web or tool content; excluded from searches unless asked for).
* A row's level is ``metadata["trust"]`` (``trustLevel`` and ``trust_level`` are accepted too).
* Content below ``system`` is wrapped in untrusted-content markers before it reaches a
  prompt (:func:`wrap_untrusted`). Markers forged inside stored content, in any spelling a
  reader would take for one, and chat-template control sequences are neutralised first
  (:func:`neutralize_markers`), so a memory cannot close the wrapper early, open a fake one
  or start a turn of its own.
  The delimiter is session-stable (an HMAC of the session key under a per-process secret),
  so the prompt prefix stays cacheable across turns but cannot be guessed by stored text.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import secrets
from collections.abc import Mapping
from typing import Any

import regex

from .markers import neutralize

__all__ = [
    "TRUST_LEVELS",
    "TRUST_WEIGHT",
    "capped_trust_level",
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
#: What a content delimiter must be: 8 to 64 lowercase hex characters.
DELIMITER = regex.compile(r"[0-9a-f]{8,64}")


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


def capped_trust_level(metadata: Mapping[str, Any] | None, ceiling: str = "learned") -> str:
    """The trust level of a row that came from outside the engine (another retriever's
    document or node): what its metadata says when that is no higher than ``ceiling``, else
    ``ceiling``. A document may say it is ``external`` (believed: it only lowers its standing),
    never that it is ``system``."""
    level = trust_level(metadata, ceiling)
    return level if TRUST_WEIGHT[level] <= TRUST_WEIGHT[ceiling] else ceiling


def neutralize_markers(text: str) -> str:
    """Replace forged untrusted-content markers with ``[[MARKER_SANITIZED]]`` /
    ``[[END_MARKER_SANITIZED]]`` and chat-template control sequences (``<|im_start|>``,
    ``[INST]``, ``<<SYS>>``, ``<system>``...) with ``[[CONTROL_SANITIZED]]``.

    They are found on a reader's view of the text, not by spelling: look-alike letters per
    Unicode's confusables data, look-alike brackets, invisible and blank characters dropped,
    HTML entities, percent- and backslash-escapes decoded, any case, separators and
    delimiter length, and markers left unterminated (:mod:`manowar_memory.ranking.markers`)."""
    return neutralize(text)


def content_delimiter(session_key: str | None = None) -> str:
    """24 hex characters: stable for one session key within this process, random without one."""
    if session_key:
        return _keyed_delimiter(session_key)
    return secrets.token_hex(12)


@functools.lru_cache(maxsize=4096)  # every pre_turn of a scope asks again for the same one
def _keyed_delimiter(session_key: str) -> str:
    return hmac.new(_SECRET, session_key.encode("utf-8"), hashlib.sha256).hexdigest()[:24]


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
    if not DELIMITER.fullmatch(delim):
        raise ValueError("delimiter must be 8 to 64 lowercase hex characters")
    return "\n".join([
        f"<<<UNTRUSTED_{delim}>>>",
        f"Source: {source} (trust: {trust})",
        "---",
        neutralize_markers(content),
        f"<<<END_UNTRUSTED_{delim}>>>",
    ])
