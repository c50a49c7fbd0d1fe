"""LlamaIndex MetadataFilters → the engine's filter language, and what is refused."""

from __future__ import annotations

import pytest
from llama_index.core.vector_stores.types import (
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
)

from llama_index_manowar.errors import UnsupportedFilterError
from llama_index_manowar.filters import MATCH_NOTHING, merge_filters, translate_filters
from manowar_memory.errors import FilterError
from manowar_memory.filters import Group, Ops


def _f(*filters: MetadataFilter | MetadataFilters, condition: FilterCondition = FilterCondition.AND) -> MetadataFilters:
    return MetadataFilters(filters=list(filters), condition=condition)


def test_none_translates_to_no_filters() -> None:
    """No LlamaIndex filters means no engine filters."""
    assert translate_filters(None) == {}


def test_eq_and_in_become_metadata_paths() -> None:
    """EQ becomes an equality and IN a 'one of' tuple, both on the metadata key."""
    got = translate_filters(_f(
        MetadataFilter(key="topic", value="billing"),
        MetadataFilter(key="year", value=[2023, 2024], operator=FilterOperator.IN),
    ))
    assert got == {"metadata.topic": "billing", "metadata.year": (2023, 2024)}


def test_every_comparison_operator_translates() -> None:
    """NE, NIN, GT, GTE, LT, LTE become the engine's operators of the same meaning."""
    got = translate_filters(_f(
        MetadataFilter(key="a", value="x", operator=FilterOperator.NE),
        MetadataFilter(key="b", value=["x", "y"], operator=FilterOperator.NIN),
        MetadataFilter(key="n", value=1, operator=FilterOperator.GT),
        MetadataFilter(key="n", value=9, operator=FilterOperator.LTE),
        MetadataFilter(key="m", value=2.5, operator=FilterOperator.GTE),
        MetadataFilter(key="metadata.m", value=7, operator=FilterOperator.LT),
    ))
    assert got == {
        "metadata.a": Ops((("$ne", "x"),)), "metadata.b": Ops((("$nin", ("x", "y")),)),
        "metadata.n": Ops((("$gt", 1),)), "metadata.m": Ops((("$gte", 2.5), ("$lt", 7))),
        "$and": Group("$and", ({"metadata.n": Ops((("$lte", 9),))},)),
    }


def test_and_or_groups_nest() -> None:
    """OR over several filters and nested groups become $or / $and."""
    got = translate_filters(_f(
        MetadataFilter(key="a", value="1"),
        _f(MetadataFilter(key="b", value="2"), MetadataFilter(key="c.d", value=3), condition=FilterCondition.OR),
    ))
    assert got == {"metadata.a": "1", "$or": Group("$or", ({"metadata.b": "2"}, {"metadata.c.d": 3}))}


def test_empty_in_matches_nothing_and_empty_nin_everything() -> None:
    """An empty IN list can match no row; an empty NIN list excludes nothing; OR keeps the other branch."""
    empty_in = MetadataFilter(key="k", value=[], operator=FilterOperator.IN)
    assert translate_filters(_f(empty_in)) is MATCH_NOTHING
    assert translate_filters(_f(MetadataFilter(key="k", value=[], operator=FilterOperator.NIN))) == {}
    assert translate_filters(_f(empty_in, MetadataFilter(key="k", value="v"), condition=FilterCondition.OR)) == {
        "metadata.k": "v"}


def test_or_with_a_single_filter_is_that_filter() -> None:
    """OR over one filter is that filter."""
    assert translate_filters(_f(MetadataFilter(key="k", value="v"), condition=FilterCondition.OR)) == {"metadata.k": "v"}


@pytest.mark.parametrize(
    "operator", [FilterOperator.TEXT_MATCH, FilterOperator.CONTAINS, FilterOperator.IS_EMPTY],
)
def test_inexpressible_operators_are_rejected_with_what_is_supported(operator: FilterOperator) -> None:
    """Operators outside the engine's language raise, naming the operator and what is supported."""
    with pytest.raises(UnsupportedFilterError) as info:
        translate_filters(_f(MetadataFilter(key="k", value="x", operator=operator)))
    assert operator.name in str(info.value)
    assert "GTE" in str(info.value) and "NIN" in str(info.value)
    assert isinstance(info.value, FilterError)  # callers catching the engine's FilterError still catch it


def test_not_is_rejected() -> None:
    """FilterCondition.NOT is not in the language."""
    with pytest.raises(UnsupportedFilterError, match="NOT"):
        translate_filters(_f(MetadataFilter(key="a", value="1"), condition=FilterCondition.NOT))


def test_eq_with_a_list_and_bad_keys_are_rejected() -> None:
    """EQ with a list is ambiguous, and keys outside [A-Za-z0-9_-.] cannot be paths."""
    with pytest.raises(UnsupportedFilterError, match=r"use FilterOperator\.IN"):
        translate_filters(_f(MetadataFilter(key="k", value=["a", "b"])))
    with pytest.raises(FilterError, match="invalid segment"):
        translate_filters(_f(MetadataFilter(key="has space", value="a")))
    with pytest.raises(FilterError, match="operator"):
        translate_filters(_f(MetadataFilter(key="$where", value="a")))


def test_merge_filters_ands_parts_and_propagates_match_nothing() -> None:
    """Merging ANDs parts (a key constrained twice keeps both constraints); None stays 'nothing'."""
    assert merge_filters({"metadata.a": ("1", "2")}, {"metadata.a": "2", "metadata.b": 1}) == {
        "metadata.a": ("1", "2"), "metadata.b": 1, "$and": Group("$and", ({"metadata.a": "2"},)),
    }
    assert merge_filters({"metadata.a": "1"}, None) is MATCH_NOTHING
    assert merge_filters({"metadata.a": "1"}, {"metadata.a": "1"}) == {"metadata.a": "1"}
