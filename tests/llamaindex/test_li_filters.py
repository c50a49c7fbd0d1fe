"""LlamaIndex MetadataFilters → the engine's allowlisted filters, and what is refused."""

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


def _f(*filters: MetadataFilter | MetadataFilters, condition: FilterCondition = FilterCondition.AND) -> MetadataFilters:
    return MetadataFilters(filters=list(filters), condition=condition)


def test_none_translates_to_no_filters() -> None:
    """No LlamaIndex filters means no engine filters."""
    assert translate_filters(None) == {}


def test_eq_and_in_become_metadata_paths() -> None:
    """EQ becomes an equality and IN a 'one of' tuple, both under metadata.*."""
    got = translate_filters(_f(
        MetadataFilter(key="topic", value="billing"),
        MetadataFilter(key="year", value=[2023, 2024], operator=FilterOperator.IN),
    ))
    assert got == {"metadata.topic": "billing", "metadata.year": (2023, 2024)}


def test_nested_and_groups_are_flattened() -> None:
    """AND inside AND is still a conjunction of equalities."""
    got = translate_filters(_f(
        MetadataFilter(key="a", value="1"),
        _f(MetadataFilter(key="b", value="2"), MetadataFilter(key="c.d", value=3)),
    ))
    assert got == {"metadata.a": "1", "metadata.b": "2", "metadata.c.d": 3}


def test_repeated_keys_are_intersected() -> None:
    """author IN [a, b] AND author == a keeps only a."""
    got = translate_filters(_f(
        MetadataFilter(key="author", value=["a", "b"], operator=FilterOperator.IN),
        MetadataFilter(key="author", value="a"),
    ))
    assert got == {"metadata.author": "a"}


def test_disjoint_or_empty_constraints_match_nothing() -> None:
    """An empty intersection or an empty IN list can match no row."""
    disjoint = _f(MetadataFilter(key="k", value="x"), MetadataFilter(key="k", value="y"))
    empty_in = _f(MetadataFilter(key="k", value=[], operator=FilterOperator.IN))
    assert translate_filters(disjoint) is MATCH_NOTHING
    assert translate_filters(empty_in) is MATCH_NOTHING


def test_or_with_a_single_filter_is_that_filter() -> None:
    """OR over one filter is expressible."""
    assert translate_filters(_f(MetadataFilter(key="k", value="v"), condition=FilterCondition.OR)) == {"metadata.k": "v"}


@pytest.mark.parametrize(
    "operator", [FilterOperator.NE, FilterOperator.GT, FilterOperator.NIN, FilterOperator.TEXT_MATCH,
                 FilterOperator.CONTAINS, FilterOperator.IS_EMPTY],
)
def test_inexpressible_operators_are_rejected_with_what_is_supported(operator: FilterOperator) -> None:
    """Operators other than EQ and IN raise, naming the operator and what is supported."""
    value = ["x"] if operator in (FilterOperator.NIN,) else "x"
    with pytest.raises(UnsupportedFilterError) as info:
        translate_filters(_f(MetadataFilter(key="k", value=value, operator=operator)))
    assert operator.name in str(info.value)
    assert "EQ and IN" in str(info.value)
    assert isinstance(info.value, FilterError)  # callers catching the engine's FilterError still catch it


def test_or_over_several_filters_and_not_are_rejected() -> None:
    """OR over two filters and NOT cannot be expressed with AND-ed equalities."""
    with pytest.raises(UnsupportedFilterError, match="OR over 2 filters"):
        translate_filters(_f(MetadataFilter(key="a", value="1"), MetadataFilter(key="b", value="2"),
                             condition=FilterCondition.OR))
    with pytest.raises(UnsupportedFilterError, match="NOT"):
        translate_filters(_f(MetadataFilter(key="a", value="1"), condition=FilterCondition.NOT))


def test_eq_with_a_list_and_bad_keys_are_rejected() -> None:
    """EQ with a list is ambiguous, and keys outside [A-Za-z0-9_-.] cannot be paths."""
    with pytest.raises(UnsupportedFilterError, match=r"use FilterOperator\.IN"):
        translate_filters(_f(MetadataFilter(key="k", value=["a", "b"])))
    with pytest.raises(UnsupportedFilterError, match="cannot be expressed"):
        translate_filters(_f(MetadataFilter(key="has space", value="a")))
    with pytest.raises(UnsupportedFilterError, match="cannot be expressed"):
        translate_filters(_f(MetadataFilter(key="$where", value="a")))


def test_merge_filters_intersects_and_propagates_match_nothing() -> None:
    """Merging ANDs parts; None (match nothing) and empty intersections stay 'nothing'."""
    assert merge_filters({"metadata.a": ("1", "2")}, {"metadata.a": "2", "metadata.b": 1}) == {
        "metadata.a": "2", "metadata.b": 1,
    }
    assert merge_filters({"metadata.a": "1"}, None) is MATCH_NOTHING
    assert merge_filters({"metadata.a": "1"}, {"metadata.a": "2"}) is MATCH_NOTHING
    # strict equality, as the engine applies it: True is not 1
    assert merge_filters({"metadata.a": (True, 1)}, {"metadata.a": 1}) == {"metadata.a": 1}
