"""The filter language: which fields a caller may filter on, how, and with which values.

One language for every surface (the engine, the scoped surface, retrievers, vector stores,
tools and REST). A filter is a mapping; its entries all hold (AND):

* ``{path: value}``: equality (a string, number, boolean or null; ``None`` matches null or missing);
* ``{path: [v1, v2]}``: one of the values (``$in``);
* ``{path: {"$op": operand, ...}}``: operators on one path, all of which hold:
  ``$eq $ne $in $nin $gt $gte $lt $lte`` (:data:`OPERATORS`). ``$ne``/``$nin`` also match a
  missing field (as in MongoDB); ranges compare numbers with numbers and strings with strings
  (a boolean or null operand is refused); equality is strict (``True`` is not ``1``);
* ``{"$and": [filter, ...]}`` / ``{"$or": [filter, ...]}``: groups, nested at will.

Paths: the row fields :data:`ALLOWED_FIELDS`, the paths under :data:`ALLOWED_PREFIXES`, the
aliases (``appId``/``app_id`` → ``metadata.app_id``, ``hai_id`` → ``haiId``, ``user_id`` →
``userAddress``, ``thread_id`` → ``threadId``), and **flat metadata keys**: any other plain key
``topic`` is the metadata key ``metadata.topic`` (the ``metadata.`` prefix is accepted too and
means the same key). Document surfaces (vector stores) filter their documents' metadata only:
with ``documents=True`` every key, ``source`` included, is a metadata key.

Anything else (an unknown operator such as ``$where``, a path under ``workingMemory`` other
than its state and entities, a nested object that is not an operator map) raises a
:class:`FilterError` naming what is allowed. Nothing is dropped silently. The normalised form
(:func:`normalize_filters`) is the one filter tree the SQL and MQL builders compile.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from .errors import FilterError

__all__ = [
    "ALLOWED_FIELDS",
    "ALLOWED_PREFIXES",
    "COMPARISONS",
    "GROUPS",
    "OPERATORS",
    "FilterValue",
    "Group",
    "Operand",
    "Ops",
    "Primitive",
    "conjoin",
    "get_path",
    "matches_filters",
    "normalize_filters",
]

Primitive = str | int | float | bool | None
Operand = Primitive | tuple[Primitive, ...]

#: Operators on one path.
COMPARISONS: tuple[str, ...] = ("$eq", "$ne", "$in", "$nin", "$gt", "$gte", "$lt", "$lte")
#: Operators combining filters.
GROUPS: tuple[str, ...] = ("$and", "$or")
#: Every operator of the language.
OPERATORS: tuple[str, ...] = COMPARISONS + GROUPS
_RANGES = frozenset({"$gt", "$gte", "$lt", "$lte"})
_LISTS = frozenset({"$in", "$nin"})


@dataclass(frozen=True)
class Ops:
    """Operators on one path (``(("$gte", 3), ("$lt", 5))``), all of which hold."""

    items: tuple[tuple[str, Operand], ...]


@dataclass(frozen=True)
class Group:
    """``$and`` / ``$or`` of normalised filters."""

    op: str
    clauses: tuple[dict[str, FilterValue], ...]


#: A normalised filter's value: an equality, a "one of" tuple, operators on a path, or (under
#: the keys ``$and`` / ``$or``) a group.
FilterValue = Primitive | tuple[Primitive, ...] | Ops | Group

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
#: Row fields that are not filterable: a key starting with one is refused, never read as metadata.
_ROW_ROOTS = frozenset({"metadata", "workingMemory", "content", "context", "embedding", "id", "vectorId",
                        "createdAt", "updatedAt", "decayScore", "accessCount", "lastAccessedAt", "embeddingModel"})

_HELP = (
    f"allowed paths are {sorted(ALLOWED_FIELDS)}, any path starting with "
    f"{list(ALLOWED_PREFIXES)}, the aliases {sorted(ALIASES)}, and plain metadata keys ('topic' means "
    f"'metadata.topic'); values are a string, number, boolean, null, a list of those, or an operator map; "
    f"allowed operators are {list(OPERATORS)}"
)


def _is_primitive(value: Any) -> bool:
    return value is None or isinstance(value, (str, int, float, bool))


def _segments_ok(rest: str) -> bool:
    return bool(rest) and all(p and all(ch.isalnum() or ch in "_-" for ch in p) for p in rest.split("."))


def _metadata_path(key: str, original: str) -> str:
    if not _segments_ok(key):
        raise FilterError(
            f"filter key {original!r} has an empty or invalid segment; use letters, digits, '_' or '-' between dots"
        )
    return f"metadata.{key}"


def _normalize_path(path: Any, *, documents: bool, hidden: Collection[str]) -> str:
    if not isinstance(path, str) or not path.strip():
        raise FilterError(f"filter key {path!r} is not a non-empty string; {_HELP}")
    raw = path.strip()
    if "$" in raw:
        raise FilterError(f"filter key {raw!r} is an unknown operator or holds one; {_HELP}")
    if documents:
        key = raw[len("metadata."):] if raw.startswith("metadata.") else raw
        if key.split(".")[0] in hidden:
            raise FilterError(f"cannot filter on {key!r}: the engine reserves that metadata key; use your own keys")
        return _metadata_path(key, raw)
    key = ALIASES.get(raw, raw)
    if key in ALLOWED_FIELDS:
        return key
    for prefix in ALLOWED_PREFIXES:
        if key.startswith(prefix):
            rest = key[len(prefix):]
            if not _segments_ok(rest):
                raise FilterError(
                    f"filter key {key!r} has an empty or invalid segment after {prefix!r}; "
                    "use letters, digits, '_' or '-' between dots"
                )
            if prefix == "metadata." and rest.split(".")[0] in hidden:
                raise FilterError(f"cannot filter on {key!r}: the engine reserves that metadata key")
            return key
    if key.split(".")[0] in _ROW_ROOTS:
        raise FilterError(f"filter key {key!r} is not allowed; {_HELP}")
    if key.split(".")[0] in hidden:
        raise FilterError(f"cannot filter on {key!r}: the engine reserves that metadata key")
    return _metadata_path(key, raw)


def _primitive(path: str, value: Any, op: str) -> Primitive:
    if not _is_primitive(value):
        raise FilterError(
            f"filter {path!r}: {op} takes a string, number, boolean or null, got {type(value).__name__} "
            f"(nested objects are not allowed; use a list with $in); {_HELP}"
        )
    if isinstance(value, float) and value != value:
        raise FilterError(f"filter {path!r} is NaN, which equals nothing")
    return value  # type: ignore[no-any-return]


def _list(path: str, value: Any, op: str) -> tuple[Primitive, ...]:
    if not isinstance(value, (list, tuple)):
        raise FilterError(f"filter {path!r}: {op} takes a list of values, got {type(value).__name__}")
    if not value:
        raise FilterError(f"filter {path!r} has an empty list, which would match nothing; remove it")
    if not all(_is_primitive(v) for v in value):
        raise FilterError(f"filter {path!r} has a list with a non-primitive element; {_HELP}")
    if any(isinstance(v, float) and v != v for v in value):
        raise FilterError(f"filter {path!r} has NaN in its list, which equals nothing")
    return tuple(value)


def _operand(path: str, op: str, value: Any) -> Operand:
    if op in _LISTS:
        return _list(path, value, op)
    if op in _RANGES:
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise FilterError(
                f"filter {path!r}: {op} compares with a number or a string, got {value!r}"
            )
        return _primitive(path, value, op)
    if isinstance(value, (list, tuple)):
        raise FilterError(f"filter {path!r}: {op} takes one value, got a list; use $in/$nin for lists")
    return _primitive(path, value, op)


def _comparison(path: str, op: Any) -> str:
    if op not in COMPARISONS:
        raise FilterError(
            f"filter {path!r} uses {op!r}, which is not an operator on a field (nested objects are not "
            f"allowed); allowed operators are {list(COMPARISONS)} on a field and {list(GROUPS)} "
            "around filters"
        )
    return str(op)


def _condition(path: str, value: Any) -> FilterValue:
    if isinstance(value, Ops):  # normalised already: every operator is checked again, repeats kept
        return Ops(tuple((op, _operand(path, _comparison(path, op), operand)) for op, operand in value.items))
    if isinstance(value, (list, tuple)):
        return _list(path, value, "a list")
    if isinstance(value, Mapping):
        if not value:
            raise FilterError(f"filter {path!r} has an empty operator map; use one of {list(COMPARISONS)}")
        items: list[tuple[str, Operand]] = []
        for op, operand in value.items():
            items.append((op, _operand(path, _comparison(path, op), operand)))
        if len(items) == 1 and items[0][0] in ("$eq", "$in"):
            return items[0][1]
        return Ops(tuple(items))
    if _is_primitive(value):
        return _primitive(path, value, "equality")
    raise FilterError(
        f"filter {path!r} has a {type(value).__name__} value; nested objects are not allowed; {_HELP}"
    )


def _as_ops(value: FilterValue) -> tuple[tuple[str, Operand], ...]:
    if isinstance(value, Ops):
        return value.items
    return (("$in", value),) if isinstance(value, tuple) else (("$eq", value),)  # type: ignore[return-value]


def normalize_filters(filters: Mapping[str, Any] | None, *, documents: bool = False,
                      hidden: Collection[str] = ()) -> dict[str, FilterValue]:
    """Validate, alias and normalise ``filters`` into the filter tree the stores compile;
    raise :class:`FilterError` on anything outside the language (see the module docs).

    ``documents``: every key is a metadata key (document surfaces). ``hidden``: metadata keys
    that may not be filtered on (an adapter's bookkeeping)."""
    if filters is None:
        return {}
    if not isinstance(filters, Mapping):
        raise FilterError(f"filters must be a mapping of path to value, got {type(filters).__name__}")
    out: dict[str, FilterValue] = {}
    for raw_path, value in filters.items():
        # an already normalised filter is checked again (its groups, operators and values)
        if isinstance(value, Group):
            value = list(value.clauses)
        if isinstance(raw_path, str) and raw_path.strip() in GROUPS:
            op = raw_path.strip()
            if not isinstance(value, (list, tuple)) or not value or not all(isinstance(c, Mapping) for c in value):
                raise FilterError(f"the operator {op} takes a non-empty list of filters (mappings), got {value!r}")
            clauses = tuple(normalize_filters(c, documents=documents, hidden=hidden) for c in value)
            if any(not c for c in clauses):
                raise FilterError(f"{op} holds an empty filter; remove it")
            if op in out:
                raise FilterError(f"{op} is given twice; put every clause in one list")
            out[op] = Group(op, clauses)
            continue
        path = _normalize_path(raw_path, documents=documents, hidden=hidden)
        normalized = _condition(path, value)
        if path in out and out[path] != normalized:
            if not isinstance(normalized, Ops) and not isinstance(out[path], Ops):
                raise FilterError(f"filter {path!r} is given twice (through an alias) with different values")
            normalized = Ops((*_as_ops(out[path]), *_as_ops(normalized)))  # both hold
        out[path] = normalized
    return out


def conjoin(*parts: Mapping[str, FilterValue]) -> dict[str, FilterValue]:
    """AND of normalised filters, as one normalised filter (a path constrained differently by
    two parts keeps both constraints, through ``$and``)."""
    out: dict[str, FilterValue] = {}
    extra: list[dict[str, FilterValue]] = []
    for part in parts:
        for key, value in part.items():
            if key not in out:
                out[key] = value
            elif key == "$and" and isinstance(value, Group) and isinstance(out[key], Group):
                out[key] = Group("$and", (*out[key].clauses, *value.clauses))  # type: ignore[union-attr]
            elif out[key] != value:
                extra.append({key: value})
    if extra:
        current = out.get("$and")
        out["$and"] = Group("$and", (*(current.clauses if isinstance(current, Group) else ()), *extra))
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


def _equals(actual: Any, expected: Primitive) -> bool:
    if expected is None:
        return actual is _MISSING or actual is None
    return actual is not _MISSING and _strict_equal(actual, expected)


def _compare(actual: Any, op: str, operand: Operand) -> bool:
    if op == "$eq":
        return _equals(actual, operand)  # type: ignore[arg-type]
    if op == "$ne":
        return not _equals(actual, operand)  # type: ignore[arg-type]
    if op == "$in":
        return any(_equals(actual, v) for v in operand)  # type: ignore[union-attr]
    if op == "$nin":
        return not any(_equals(actual, v) for v in operand)  # type: ignore[union-attr]
    number = (int, float)
    if isinstance(operand, str):
        if not isinstance(actual, str):
            return False
    elif isinstance(actual, bool) or not isinstance(actual, number):
        return False
    a, b = actual, operand
    return bool({"$gt": a > b, "$gte": a >= b, "$lt": a < b, "$lte": a <= b}[op])


def matches_filters(record: Mapping[str, Any], filters: Mapping[str, FilterValue]) -> bool:
    """In-process check of a normalised filter against a record shaped with reference field
    names (the semantics the SQL and MQL builders reproduce)."""
    for path, expected in filters.items():
        if isinstance(expected, Group):
            results = (matches_filters(record, clause) for clause in expected.clauses)
            if not (all(results) if expected.op == "$and" else any(results)):
                return False
            continue
        actual = get_path(record, path)
        if isinstance(expected, Ops):
            if not all(_compare(actual, op, operand) for op, operand in expected.items):
                return False
        elif isinstance(expected, tuple):
            if not any(_equals(actual, e) for e in expected):
                return False
        elif not _equals(actual, expected):
            return False
    return True
