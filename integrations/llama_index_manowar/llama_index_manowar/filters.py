"""LlamaIndex ``MetadataFilters`` → the engine's allowlisted ``metadata.*`` filters.

The engine's filters are equalities (``{path: value}``) and "one of" lists
(``{path: [v1, v2]}``), all combined with AND. So a LlamaIndex filter translates when it is:

* ``FilterOperator.EQ`` (a scalar or None) → ``{"metadata.<key>": value}``
* ``FilterOperator.IN`` (a list; a scalar counts as a one-element list) → ``{"metadata.<key>": [..]}``
* combined with ``FilterCondition.AND`` (or no condition), nested AND groups included,
  and an OR or AND group holding a single filter.

Anything else (NE, GT, NIN, TEXT_MATCH, CONTAINS, OR over several filters, NOT, ...)
raises :class:`~llama_index_manowar.errors.UnsupportedFilterError`, which names what is
supported, instead of being dropped or approximated. Repeated keys are intersected
(``author == "a"`` AND ``author IN ["a", "b"]`` → ``author == "a"``); an empty
intersection or an empty IN list matches nothing, which :func:`translate_filters`
reports as ``None``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from llama_index.core.vector_stores.types import (
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
)

from manowar_memory.filters import FilterValue, Primitive, normalize_filters

from .errors import UnsupportedFilterError

__all__ = ["MATCH_NOTHING", "merge_filters", "translate_filters"]

MATCH_NOTHING = None
"""What :func:`translate_filters` returns when the filters can match no row."""

_SUPPORTED = "supported: EQ and IN filters on metadata keys, combined with AND (nested AND groups too)"


def _segment_ok(segment: str) -> bool:
    return bool(segment) and all(ch.isalnum() or ch in "_-" for ch in segment)


def _path(key: Any) -> str:
    if not isinstance(key, str) or not key.strip():
        raise UnsupportedFilterError(f"filter key {key!r} must be a non-empty string; {_SUPPORTED}")
    key = key.strip()
    if not all(_segment_ok(part) for part in key.split(".")):
        raise UnsupportedFilterError(
            f"filter key {key!r} cannot be expressed: keys are metadata names made of letters, digits, "
            "'_' or '-' (dots for nested fields)"
        )
    return f"metadata.{key}"


def _tag(value: Primitive) -> tuple[str, Any]:
    # strict equality as the engine applies it: True is not 1, but 1 is 1.0
    if value is None:
        return ("none", None)
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, (int, float)):
        return ("num", float(value))
    return ("str", value)


def _dedupe(values: list[Primitive]) -> list[Primitive]:
    seen: set[tuple[str, Any]] = set()
    out: list[Primitive] = []
    for value in values:
        if _tag(value) not in seen:
            seen.add(_tag(value))
            out.append(value)
    return out


def _allowed(flt: MetadataFilter) -> list[Primitive]:
    op = flt.operator
    value = flt.value
    if op == FilterOperator.EQ:
        if isinstance(value, list):
            raise UnsupportedFilterError(
                f"filter {flt.key!r}: EQ takes a single value, got a list; use FilterOperator.IN for 'one of'"
            )
        return [value]
    if op == FilterOperator.IN:
        if value is None:
            raise UnsupportedFilterError(f"filter {flt.key!r}: IN needs a list of values, got None")
        return list(value) if isinstance(value, list) else [value]
    raise UnsupportedFilterError(
        f"filter {flt.key!r} uses operator {op.name} ({op.value!r}), which the engine's allowlisted "
        f"filters cannot express; {_SUPPORTED}"
    )


def _collect(filters: MetadataFilters, into: dict[str, list[Primitive]]) -> None:
    condition = filters.condition or FilterCondition.AND
    # Any: filters built with model_construct() skip validation and may hold legacy filter objects
    items: list[Any] = list(filters.filters)
    if condition == FilterCondition.NOT:
        raise UnsupportedFilterError(f"FilterCondition.NOT cannot be expressed; {_SUPPORTED}")
    if condition == FilterCondition.OR and len(items) > 1:
        raise UnsupportedFilterError(
            f"FilterCondition.OR over {len(items)} filters cannot be expressed (engine filters are "
            f"combined with AND; for 'one of' values on one key use FilterOperator.IN); {_SUPPORTED}"
        )
    for item in items:
        if isinstance(item, MetadataFilters):
            _collect(item, into)
            continue
        if not isinstance(item, MetadataFilter):  # a legacy ExactMatchFilter-like object
            item = MetadataFilter(key=item.key, value=item.value)
        path = _path(item.key)
        allowed = _allowed(item)
        if path in into:
            keep = {_tag(v) for v in allowed}
            into[path] = [v for v in into[path] if _tag(v) in keep]
        else:
            into[path] = _dedupe(allowed)


def _as_value(values: list[Primitive]) -> FilterValue:
    return values[0] if len(values) == 1 else tuple(values)


def translate_filters(filters: MetadataFilters | None) -> dict[str, FilterValue] | None:
    """Engine filters for ``filters`` (``{}`` when there are none), or :data:`MATCH_NOTHING`
    (None) when no row can match. Raises :class:`UnsupportedFilterError` for filters the
    engine cannot express."""
    if filters is None:
        return {}
    if not isinstance(filters, MetadataFilters):
        raise UnsupportedFilterError(f"expected llama_index MetadataFilters, got {type(filters).__name__}")
    collected: dict[str, list[Primitive]] = {}
    _collect(filters, collected)
    if any(not values for values in collected.values()):
        return MATCH_NOTHING
    return normalize_filters({path: _as_value(values) for path, values in collected.items()})


def merge_filters(*parts: Mapping[str, FilterValue] | None) -> dict[str, FilterValue] | None:
    """AND several engine filter dicts, intersecting repeated paths; None if any part is
    :data:`MATCH_NOTHING` or an intersection is empty."""
    merged: dict[str, list[Primitive]] = {}
    for part in parts:
        if part is None:
            return MATCH_NOTHING
        for path, value in normalize_filters(part).items():
            values = list(value) if isinstance(value, tuple) else [value]
            if path in merged:
                keep = {_tag(v) for v in values}
                merged[path] = [v for v in merged[path] if _tag(v) in keep]
            else:
                merged[path] = _dedupe(values)
    if any(not values for values in merged.values()):
        return MATCH_NOTHING
    return {path: _as_value(values) for path, values in merged.items()}
