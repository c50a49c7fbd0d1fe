"""Checks every write path runs on caller input before anything is stored.

One place decides what text, ids, times and metadata the stores can hold, so a bad value
is refused with :class:`InvalidInputError` (saying what was wrong and what to pass) instead
of escaping as ``UnicodeEncodeError``, ``OverflowError``, ``RecursionError``,
``sqlite3.ProgrammingError`` or ``bson.errors.InvalidDocument`` halfway through a write.

* Text: a ``str`` that UTF-8 can encode (no unpaired surrogates), at most
  ``MemoryConfig.max_text_chars`` characters.
* Times: integer milliseconds since the epoch between year 1 and year 9999 (a finite
  ``float`` is accepted and truncated); NaN, infinities and ``2**70`` are refused.
* Metadata: JSON data only (``str``, ``int`` within 64 bits, finite ``float``, ``bool``,
  ``None``, lists and mappings with string keys), at most :data:`MAX_METADATA_DEPTH` levels
  deep and ``MemoryConfig.max_metadata_chars`` characters as JSON; keys are non-empty, hold no
  NUL and do not start with ``$`` (MongoDB reads those as operators).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from .errors import InvalidInputError

__all__ = [
    "DEFAULT_MAX_METADATA_CHARS",
    "DEFAULT_MAX_TEXT_CHARS",
    "MAX_METADATA_DEPTH",
    "MAX_TIMESTAMP_MS",
    "MIN_TIMESTAMP_MS",
    "check_id",
    "check_json_value",
    "check_metadata",
    "check_optional_text",
    "check_text",
    "check_timestamp",
]

#: Default longest stored text (characters) of one memory row, message or summary.
DEFAULT_MAX_TEXT_CHARS = 50_000
#: Default largest metadata, measured as compact JSON characters.
DEFAULT_MAX_METADATA_CHARS = 100_000
#: Deepest nesting of lists and mappings accepted in metadata.
MAX_METADATA_DEPTH = 32
#: 0001-01-01T00:00:00Z and 9999-12-31T23:59:59.999Z in milliseconds since the epoch.
MIN_TIMESTAMP_MS = -62_135_596_800_000
MAX_TIMESTAMP_MS = 253_402_300_799_999
_INT64 = (-(2**63), 2**63 - 1)


def _surrogate_at(text: str) -> int | None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return exc.start
    return None


def check_text(value: Any, what: str, *, max_chars: int | None = None, allow_blank: bool = False) -> str:
    """``value`` unchanged when it is storable text; else :class:`InvalidInputError`."""
    if not isinstance(value, str):
        raise InvalidInputError(f"{what} must be a string, got {type(value).__name__}")
    if not allow_blank and not value.strip():
        raise InvalidInputError(f"{what} must be a non-blank string")
    at = _surrogate_at(value)
    if at is not None:
        raise InvalidInputError(
            f"{what} holds an unpaired surrogate (U+{ord(value[at]):04X} at index {at}), which is not valid "
            "Unicode text: decode the input correctly, or with errors='replace'"
        )
    if max_chars is not None and len(value) > max_chars:
        raise InvalidInputError(
            f"{what} is {len(value):,} characters, over the limit of {max_chars:,} "
            "(MemoryConfig.max_text_chars): split it into smaller pieces, or raise the limit"
        )
    return value


def check_optional_text(value: Any, what: str, *, max_chars: int | None = None) -> str | None:
    """:func:`check_text` for an optional argument: None passes through."""
    return None if value is None else check_text(value, what, max_chars=max_chars, allow_blank=True)


def check_id(value: Any, what: str = "memory_id") -> str:
    """A row id argument: a non-blank string of valid Unicode."""
    if not isinstance(value, str):
        hint = "; call once per id" if isinstance(value, (list, tuple, set, frozenset)) else ""
        raise InvalidInputError(
            f"{what} must be a string id (as returned by remember, ingest or list_items), "
            f"got {type(value).__name__}{hint}"
        )
    return check_text(value, what)


def check_timestamp(value: Any, what: str) -> int:
    """Integer milliseconds since the epoch within years 1 to 9999 (a finite float is truncated)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidInputError(f"{what} must be integer milliseconds since the epoch, got {type(value).__name__}")
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidInputError(f"{what} must be a finite number of milliseconds since the epoch, got {value!r}")
    if not MIN_TIMESTAMP_MS <= value <= MAX_TIMESTAMP_MS:
        raise InvalidInputError(
            f"{what}={value!r} is outside years 1 to 9999; pass milliseconds since the epoch "
            "(for example int(time.time() * 1000))"
        )
    return int(value)


def check_json_value(value: Any, what: str, *, max_depth: int = MAX_METADATA_DEPTH) -> Any:
    """A copy of ``value`` as plain JSON data (tuples become lists, mappings dicts)."""
    return _json(value, what, max_depth, 0)


def _json(value: Any, where: str, max_depth: int, depth: int) -> Any:
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        if not _INT64[0] <= value <= _INT64[1]:
            raise InvalidInputError(f"{where} is an integer outside 64 bits ({value}); store it as a string")
        return int(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidInputError(f"{where} is {value!r}, which JSON cannot hold; use None or a string")
        return float(value)
    if isinstance(value, str):
        return check_text(value, where, allow_blank=True)
    if isinstance(value, (Mapping, list, tuple)):
        if depth >= max_depth:
            raise InvalidInputError(f"{where} nests deeper than {max_depth} levels; flatten it")
        if isinstance(value, Mapping):
            out: dict[str, Any] = {}
            for key, item in value.items():
                _check_key(key, where)
                out[key] = _json(item, f"{where}[{key!r}]", max_depth, depth + 1)
            return out
        return [_json(item, f"{where}[{i}]", max_depth, depth + 1) for i, item in enumerate(value)]
    raise InvalidInputError(
        f"{where} is a {type(value).__name__}; metadata holds JSON data only (str, int, float, bool, None, "
        "lists and dicts with string keys): convert it first, for example with list(...) or str(...)"
    )


def _check_key(key: Any, where: str) -> None:
    if not isinstance(key, str):
        raise InvalidInputError(f"{where} has a {type(key).__name__} key {key!r}; keys must be strings")
    if not key:
        raise InvalidInputError(f"{where} has an empty key; name it")
    if "\x00" in key:
        raise InvalidInputError(f"{where} has a key with a NUL character ({key!r}); remove it")
    if key.startswith("$"):
        raise InvalidInputError(f"{where} has a key starting with '$' ({key!r}), which stores read as an operator")
    check_text(key, f"key {key!r} of {where}")


def check_metadata(
    metadata: Any, what: str = "metadata", *, max_chars: int | None = DEFAULT_MAX_METADATA_CHARS,
    max_depth: int = MAX_METADATA_DEPTH,
) -> dict[str, Any]:
    """A plain-JSON copy of caller metadata (None gives ``{}``); :class:`InvalidInputError` when
    it is not a mapping of JSON data, nests too deep or is too large."""
    if metadata is None:
        return {}
    if not isinstance(metadata, Mapping):
        raise InvalidInputError(f"{what} must be a mapping of string keys, got {type(metadata).__name__}")
    out: dict[str, Any] = _json(metadata, what, max_depth, 0)
    if max_chars is not None:
        size = len(json.dumps(out, ensure_ascii=False, separators=(",", ":")))
        if size > max_chars:
            raise InvalidInputError(
                f"{what} is {size:,} characters as JSON, over the limit of {max_chars:,} "
                "(MemoryConfig.max_metadata_chars): keep large data elsewhere and store a reference"
            )
    return out
