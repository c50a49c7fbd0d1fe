"""The engine keeps numpy's BLAS to one thread inside its vector lane (issue 14: OpenBLAS
threads spinning after a scan slowed the next query's embedding), on both stores, and gives
the caller's setting back afterwards. Checked by reading the BLAS thread count from inside
the lane, not by timing."""

from __future__ import annotations

from typing import Any

import pytest
from threadpoolctl import threadpool_info, threadpool_limits

from manowar_memory import MemoryConfig, MemoryEngine, Scope
from manowar_memory.threads import EngineThreads, blas_limit, blas_threads

SCOPE = Scope(agent_wallet="agent-1", user_address="user-1")


@pytest.fixture
def engine_config() -> MemoryConfig:
    return MemoryConfig()  # no query cache: every search runs its vector lane


def _blas_counts() -> list[int]:
    return [lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"]


def test_numpy_has_a_blas_library_to_limit() -> None:
    assert _blas_counts(), "numpy loaded no BLAS library that threadpoolctl can see"


@pytest.mark.parametrize("layers", [["vectors"], None], ids=["on the caller's thread", "on the layer threads"])
def test_the_vector_lane_runs_with_one_blas_thread(engine_on_each_store: MemoryEngine,
                                                   monkeypatch: pytest.MonkeyPatch, layers: list[str] | None) -> None:
    engine = engine_on_each_store
    engine.ingest(SCOPE, [f"note {i} about the Lisbon trip and hotel {i}" for i in range(40)])
    seen: list[list[int]] = []
    original = engine.store.vector_search

    def recording(*args: Any, **kwargs: Any) -> Any:
        seen.append(_blas_counts())
        return original(*args, **kwargs)

    monkeypatch.setattr(engine.store, "vector_search", recording)
    with threadpool_limits(limits=2, user_api="blas"):  # what numpy would use on two cores
        result = engine.pre_turn("Lisbon hotel", SCOPE, layers)
        after = _blas_counts()
    assert result.items and seen, "the vector lane did not run"
    assert all(counts and set(counts) == {1} for counts in seen), seen
    assert set(after) == {2}, "the caller's BLAS setting was not restored"


def test_the_limit_nests_and_restores_once() -> None:
    with threadpool_limits(limits=2, user_api="blas"):
        with blas_limit():
            with blas_limit():
                assert set(blas_threads()) == {1}
            assert set(blas_threads()) == {1}  # the outer search still runs
        assert set(blas_threads()) == {2}


def test_a_blas_library_loaded_later_is_limited_too(engine_on_each_store: MemoryEngine,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    engine = engine_on_each_store
    engine.ingest(SCOPE, [f"note {i} about the Lisbon trip and hotel {i}" for i in range(10)])
    engine.pre_turn("Lisbon hotel", SCOPE, ["vectors"])  # the limiter has seen the libraries of that time
    pytest.importorskip("scipy.linalg")  # brings an OpenBLAS of its own (with the local embedder's extra)
    seen: list[list[int]] = []
    original = engine.store.vector_search

    def recording(*args: Any, **kwargs: Any) -> Any:
        seen.append(_blas_counts())
        return original(*args, **kwargs)

    monkeypatch.setattr(engine.store, "vector_search", recording)
    with threadpool_limits(limits=2, user_api="blas"):
        engine.pre_turn("Lisbon trip", SCOPE, ["vectors"])
    assert seen and all(set(counts) == {1} for counts in seen), seen


def test_restart_after_fork_gives_fresh_pools_and_keeps_a_shut_down_instance_down() -> None:
    live, closed = EngineThreads(layers=1, lanes=1, rerank=1), EngineThreads(layers=1, lanes=1, rerank=1)
    closed.shutdown()
    before, closed_before = live.background, closed.background
    try:
        live.restart_after_fork()
        closed.restart_after_fork()
        assert live.background is not before and live.background.submit(lambda: 7).result() == 7
        assert closed.background is closed_before and closed.beside(lambda: 1) is None
    finally:
        before.shutdown()
        live.shutdown()
