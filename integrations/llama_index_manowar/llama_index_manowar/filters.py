"""LlamaIndex ``MetadataFilters`` → the engine's filter language (:mod:`manowar_memory.filters`).

A translation only; the rules (which keys, which values, what each operator means) are the
core's. Every key is a node metadata key (``topic`` and ``metadata.topic`` are the same key):

* ``FilterOperator`` EQ, NE, IN, NIN, GT, GTE, LT, LTE → ``$eq $ne $in $nin $gt $gte $lt $lte``
  (IN/NIN take a list; a scalar counts as a one-element list);
* ``FilterCondition`` AND / OR → ``$and`` / ``$or``, nested at will.

Anything else (TEXT_MATCH, CONTAINS, IS_EMPTY, ..., ``FilterCondition.NOT``) raises
:class:`~llama_index_manowar.errors.UnsupportedFilterError`, which names the operator and
the supported ones, instead of being dropped or approximated. An IN with an empty list
matches nothing, which :func:`translate_filters` reports as :data:`MATCH_NOTHING` (None).
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

from manowar_memory.filters import FilterValue, conjoin, normalize_filters

from .errors import UnsupportedFilterError

__all__ = ["MATCH_NOTHING", "OPERATORS", "merge_filters", "translate_filters"]

MATCH_NOTHING = None
"""What :func:`translate_filters` returns when the filters can match no row."""

#: LlamaIndex operators and the engine's operator each becomes.
OPERATORS: dict[FilterOperator, str] = {
    FilterOperator.EQ: "$eq", FilterOperator.NE: "$ne", FilterOperator.IN: "$in", FilterOperator.NIN: "$nin",
    FilterOperator.GT: "$gt", FilterOperator.GTE: "$gte", FilterOperator.LT: "$lt", FilterOperator.LTE: "$lte",
}
_SUPPORTED = (f"supported operators: {[op.name for op in OPERATORS]}, combined with FilterCondition.AND or OR "
              "(nested groups too)")
_Tree = dict[str, Any]


def _leaf(flt: MetadataFilter) -> _Tree | None:
    op = flt.operator
    if op not in OPERATORS:
        raise UnsupportedFilterError(
            f"filter {flt.key!r} uses operator {op.name} ({op.value!r}), which the engine's filters cannot "
            f"express; {_SUPPORTED}"
        )
    value = flt.value
    if op in (FilterOperator.IN, FilterOperator.NIN):
        if value is None:
            raise UnsupportedFilterError(f"filter {flt.key!r}: {op.name} needs a list of values, got None")
        values = list(value) if isinstance(value, list) else [value]
        if not values:
            return MATCH_NOTHING if op == FilterOperator.IN else {}
        return {flt.key: {OPERATORS[op]: values}}
    if isinstance(value, list):
        raise UnsupportedFilterError(
            f"filter {flt.key!r}: {op.name} takes a single value, got a list; use FilterOperator.IN for 'one of'"
        )
    return {flt.key: {OPERATORS[op]: value}}


def _tree(filters: MetadataFilters) -> _Tree | None:
    condition = filters.condition or FilterCondition.AND
    if condition == FilterCondition.NOT:
        raise UnsupportedFilterError(f"FilterCondition.NOT cannot be expressed; {_SUPPORTED}")
    parts: list[_Tree | None] = []
    # Any: filters built with model_construct() skip validation and may hold legacy filter objects
    items: list[Any] = list(filters.filters)
    for item in items:
        if isinstance(item, MetadataFilters):
            parts.append(_tree(item))
        else:
            if not isinstance(item, MetadataFilter):  # a legacy ExactMatchFilter-like object
                item = MetadataFilter(key=item.key, value=item.value)
            parts.append(_leaf(item))
    if condition == FilterCondition.OR:
        if any(p == {} for p in parts):
            return {}  # one branch matches everything
        kept = [p for p in parts if p is not MATCH_NOTHING]
        if parts and not kept:
            return MATCH_NOTHING
    else:
        if any(p is MATCH_NOTHING for p in parts):
            return MATCH_NOTHING
        kept = [p for p in parts if p]
    clauses: list[_Tree] = [p for p in kept if p is not None]
    if not clauses:
        return {}
    if len(clauses) == 1:
        return clauses[0]
    if condition == FilterCondition.OR:
        return {"$or": clauses}
    flat: _Tree = {}
    rest: list[_Tree] = []
    for clause in clauses:  # an AND of clauses on different keys is one mapping
        if set(clause).isdisjoint(flat):
            flat.update(clause)
        else:
            rest.append(clause)
    if rest:
        flat["$and"] = rest if "$and" not in flat else [*flat["$and"], *rest]
    return flat


def translate_filters(filters: MetadataFilters | None) -> dict[str, FilterValue] | None:
    """Engine filters for ``filters`` (``{}`` when there are none), or :data:`MATCH_NOTHING`
    (None) when no row can match. Raises :class:`UnsupportedFilterError` for filters the
    engine cannot express (and the engine's :class:`~manowar_memory.FilterError` for keys or
    values outside its filter language)."""
    if filters is None:
        return {}
    if not isinstance(filters, MetadataFilters):
        raise UnsupportedFilterError(f"expected llama_index MetadataFilters, got {type(filters).__name__}")
    tree = _tree(filters)
    if tree is MATCH_NOTHING:
        return MATCH_NOTHING
    return normalize_filters(tree, documents=True)


def merge_filters(*parts: Mapping[str, FilterValue] | None) -> dict[str, FilterValue] | None:
    """AND of several engine filters; None if any part is :data:`MATCH_NOTHING`."""
    if any(part is MATCH_NOTHING for part in parts):
        return MATCH_NOTHING
    return conjoin(*(normalize_filters(part) for part in parts if part is not None))
