"""The filter allowlist: which fields a caller may filter on, and with which values.

A filter is ``{path: value}``. The value is a primitive (str, int, float, bool, None),
which means equality, or a list of primitives, which means "one of". Paths are the
reference's names after aliasing (``appId``/``app_id`` → ``metadata.app_id``,
``hai_id`` → ``haiId``, ``user_id`` → ``userAddress``, ``thread_id`` → ``threadId``).
Anything else — an unknown path, an operator such as ``$where``, a nested object — is
rejected with a :class:`FilterError` that lists what is allowed. Nothing is dropped silently.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .errors import FilterError

__all__ = [
    "ALLOWED_FIELDS",
    "ALLOWED_PREFIXES",
    "FilterValue",
    "Primitive",
    "get_path",
    "matches_filters",
    "normalize_filters",
]

Primitive = str | int | float | bool | None
FilterValue = Primitive | tuple[Primitive, ...]

ALIASES = {
    "appId": "metadata.app_id",
    "app_id": "metadata.app_id",
    "hai_id": "haiId",
    "user_id": "userAddress",
    "thread_id": "threadId",
}
ALLOWED_FIELDS = frozenset(
    {"agentWallet", "userAddress", "threadId", "mode", "haiId", "scopeKind", "scopeId", "source"}
)
ALLOWED_PREFIXES = ("metadata.", "workingMemory.state.", "workingMemory.entities.")

_HELP = (
    f"allowed paths are {sorted(ALLOWED_FIELDS)}, any path starting with "
    f"{list(ALLOWED_PREFIXES)}, and the aliases {sorted(ALIASES)}; values must be a string, "
    "number, boolean, null, or a list of those"
)


def _is_primitive(value: Any) -> bool:
    return value is None or isinstance(value, (str, int, float, bool))


def _normalize_path(path: Any) -> str:
    if not isinstance(path, str) or not path.strip():
        raise FilterError(f"filter key {path!r} is not a non-empty string; {_HELP}")
    key: str = ALIASES.get(path.strip(), path.strip())
    if "$" in key:
        raise FilterError(f"filter key {key!r} contains an operator; operators are not allowed; {_HELP}")
    if key in ALLOWED_FIELDS:
        return key
    for prefix in ALLOWED_PREFIXES:
        if key.startswith(prefix):
            rest = key[len(prefix) :]
            parts = rest.split(".")
            if not rest or any(not p or not all(ch.isalnum() or ch in "_-" for ch in p) for p in parts):
                raise FilterError(
                    f"filter key {key!r} has an empty or invalid segment after {prefix!r}; "
                    "use letters, digits, '_' or '-' between dots"
                )
            return key
    raise FilterError(f"filter key {key!r} is not allowed; {_HELP}")


def normalize_filters(filters: Mapping[str, Any] | None) -> dict[str, FilterValue]:
    """Validate and alias ``filters``; raise :class:`FilterError` on anything outside the allowlist."""
    if filters is None:
        return {}
    if not isinstance(filters, Mapping):
        raise FilterError(f"filters must be a mapping of path to value, got {type(filters).__name__}")
    out: dict[str, FilterValue] = {}
    for raw_path, value in filters.items():
        path = _normalize_path(raw_path)
        if isinstance(value, (list, tuple)):
            if not value:
                raise FilterError(f"filter {path!r} has an empty list, which would match nothing; remove it")
            if not all(_is_primitive(v) for v in value):
                raise FilterError(f"filter {path!r} has a list with a non-primitive element; {_HELP}")
            if any(isinstance(v, float) and v != v for v in value):
                raise FilterError(f"filter {path!r} has NaN in its list, which equals nothing")
            normalized: FilterValue = tuple(value)
        elif _is_primitive(value):
            if isinstance(value, float) and value != value:
                raise FilterError(f"filter {path!r} is NaN, which equals nothing")
            normalized = value
        else:
            raise FilterError(
                f"filter {path!r} has a {type(value).__name__} value; nested objects and operators "
                f"are not allowed; {_HELP}"
            )
        if path in out and out[path] != normalized:
            raise FilterError(f"filter {path!r} is given twice (through an alias) with different values")
        out[path] = normalized
    return out


_MISSING = object()


def get_path(record: Mapping[str, Any], path: str) -> Any:
    """Walk a dotted path through nested mappings; a missing step gives a private sentinel."""
    current: Any = record
    for part in path.split("."):
        if not isinstance(current, Mapping) or part not in current:
            return _MISSING
        current = current[part]
    return current


def _strict_equal(a: Any, b: Any) -> bool:
    # JS === semantics: no coercion between bool and number, but 1 == 1.0.
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    return type(a) is type(b) and a == b


def matches_filters(record: Mapping[str, Any], filters: Mapping[str, FilterValue]) -> bool:
    """In-process check of normalised filters against a record shaped with reference field names."""
    for path, expected in filters.items():
        actual = get_path(record, path)
        if actual is _MISSING:
            actual = None if expected is None or (isinstance(expected, tuple) and None in expected) else _MISSING
            if actual is _MISSING:
                return False
        if isinstance(expected, tuple):
            if not any(_strict_equal(actual, e) for e in expected):
                return False
        elif not _strict_equal(actual, expected):
            return False
    return True
