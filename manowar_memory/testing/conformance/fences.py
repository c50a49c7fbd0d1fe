"""The cache fences role of the conformance suite (:class:`CacheFencesConformance`)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from ...stores.base import Store
from .common import _RoleConformance

__all__ = ["CacheFencesConformance"]


class CacheFencesConformance(_RoleConformance):
    """The :class:`~manowar_memory.stores.base.CacheFenceStore` role."""

    # ------------------------------------------------------------------ cache fences
    def test_cache_fences_start_at_zero_and_count_bumps(self, store: Store) -> None:
        assert store.cache_fences(["*", "a=x"]) == {"*": 0, "a=x": 0}
        assert store.cache_fences([]) == {}
        assert [store.bump_cache_fence("a=x") for _ in range(3)] == [1, 2, 3]
        assert store.cache_fences(["a=x", "a=X", "a=x"]) == {"a=x": 3, "a=X": 0}

    def test_concurrent_fence_bumps_are_all_counted(self, store: Store) -> None:
        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(lambda _: store.bump_cache_fence("a=racy"), range(40)))
        assert store.cache_fences(["a=racy"]) == {"a=racy": 40}
