"""The engine's threads, in one place, and the BLAS thread limit around its numeric work.

:class:`EngineThreads` owns every thread pool an engine uses: the layer pool (one search's
layers side by side), the lane pool (a search's keyword lane beside its vector lane), the
rerank pool (a reranker call under a timeout) and the background pool (fact extraction,
access bumps). The engine creates one and shuts it down in :meth:`MemoryEngine.close`.

:func:`blas_limit` keeps every loaded BLAS library (numpy's, and the ones faiss or scipy bring) to
one thread while the engine's own numeric kernels run (the vector lane's scan, MMR). At the sizes a scope holds, a matrix-vector product is memory
bound and gains little from more threads, while OpenBLAS worker threads keep spinning after it
returns and slow the next query's embedding (torch, on the same cores) by half. The limit is
process-wide (so is the BLAS setting) and reference-counted: concurrent searches share it and
the last one out restores the caller's setting.
"""

from __future__ import annotations

import concurrent.futures
import contextvars
import ctypes
import os
import sys
import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

__all__ = ["EngineThreads", "blas_limit", "blas_threads"]

T = TypeVar("T")


class EngineThreads:
    """Every thread pool of one engine; :meth:`shutdown` stops them all.

    ``layers``: concurrent layer searches; ``lanes``: keyword lanes run beside vector lanes
    (at most that many at once: a search that finds none free runs its lane itself rather
    than queue); ``rerank``: reranker calls under their timeout; one ``background`` thread.
    Threads start on first use. After ``os.fork`` the child starts with fresh pools.
    """

    def __init__(self, *, layers: int = 6, lanes: int = 4, rerank: int = 4) -> None:
        self._sizes = (layers, lanes, rerank)
        self._closed = False
        self._start()
        _LIVE.add(self)

    def _start(self) -> None:
        layers, lanes, rerank = self._sizes
        self.layers = concurrent.futures.ThreadPoolExecutor(layers, thread_name_prefix="manowar-layer")
        self.lanes = concurrent.futures.ThreadPoolExecutor(lanes, thread_name_prefix="manowar-lane")
        self.rerank = concurrent.futures.ThreadPoolExecutor(rerank, thread_name_prefix="manowar-rerank")
        self.background = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="manowar-bg")
        self._lane_slots = threading.BoundedSemaphore(lanes)

    def beside(self, call: Callable[[], T]) -> concurrent.futures.Future[T] | None:
        """Run ``call`` on a free lane thread (in a copy of the caller's context), or return None
        when every lane thread is busy: the caller then runs it itself."""
        slots = self._lane_slots
        if self._closed or not slots.acquire(blocking=False):
            return None
        try:
            future = self.lanes.submit(contextvars.copy_context().run, call)
        except BaseException:
            slots.release()
            raise
        future.add_done_callback(lambda _: slots.release())
        return future

    def restart_after_fork(self) -> None:
        """In a forked child: fresh pools, since the parent's threads do not exist there (a shut
        down instance stays shut down). The fork hook calls this for every live instance."""
        if not self._closed:
            self._start()

    def shutdown(self, wait: bool = True) -> None:
        """Stop every pool (running work finishes when ``wait``)."""
        self._closed = True
        for pool in (self.layers, self.lanes, self.rerank, self.background):
            pool.shutdown(wait=wait)


_LIVE: weakref.WeakSet[EngineThreads] = weakref.WeakSet()


# ---------------------------------------------------------------- BLAS threads


class _Knob:
    """Get and set one BLAS library's thread count, called with the GIL held (the calls take
    microseconds; releasing the GIL for them costs a thread switch when other threads run).

    OpenBLAS is driven through its own symbols: threadpoolctl's setter ignores calls from any
    thread but the first that used it, and the engine searches from its layer threads. An
    OpenBLAS built on OpenMP takes a per-thread limit (``per_thread``)."""

    def __init__(self, controller: Any) -> None:
        self.controller = controller
        self.per_thread = getattr(controller, "threading_layer", None) == "openmp"
        self._get: Callable[[], int] | None = None
        self._set: Callable[[int], object] | None = None
        if getattr(controller, "internal_api", None) != "openblas":
            return
        try:
            dll = ctypes.PyDLL(controller.filepath)
        except OSError:
            return
        if self.per_thread:
            names = [("omp_get_max_threads", "omp_set_num_threads")]
        else:
            names = [(f"{p}openblas_get_num_threads{x}", f"{p}openblas_set_num_threads{x}")
                     for p in ("", "scipy_") for x in ("", "64_", "_64")]
        for get_name, set_name in names:
            if hasattr(dll, get_name) and hasattr(dll, set_name):
                getter, setter = getattr(dll, get_name), getattr(dll, set_name)
                getter.restype, setter.argtypes, setter.restype = ctypes.c_int, [ctypes.c_int], None
                self._get, self._set = getter, setter
                return

    def get(self) -> int:
        return int(self._get()) if self._get is not None else int(self.controller.get_num_threads())

    def set(self, n: int) -> None:
        if self._set is not None:
            self._set(n)
        else:
            self.controller.set_num_threads(n)


class _BlasLimit:
    """Reference-counted limit on the BLAS libraries' threads: process-wide for libraries with
    one shared pool, per calling thread for the OpenMP-built ones."""

    def __init__(self, threads: int = 1) -> None:
        self.threads = threads
        self._lock = threading.Lock()
        self._depth = 0
        self._local = threading.local()
        self._knobs: list[_Knob] | None = None
        self._modules = 0
        self._saved: list[tuple[_Knob, int]] = []

    def knobs(self) -> list[_Knob]:
        """The loaded BLAS libraries (numpy's, and those other packages bring, such as faiss's).
        The scan takes tens of ms, so it runs again only after new modules were imported
        (which is when a new library can appear)."""
        if self._knobs is None or len(sys.modules) != self._modules:
            from threadpoolctl import ThreadpoolController

            self._modules = len(sys.modules)
            self._knobs = [_Knob(c) for c in ThreadpoolController().select(user_api="blas").lib_controllers]
        return self._knobs

    @contextmanager
    def __call__(self) -> Iterator[None]:
        with self._lock:
            knobs = self.knobs()
            if self._depth == 0:
                self._saved = [(k, k.get()) for k in knobs if not k.per_thread]
                for k, _ in self._saved:
                    k.set(self.threads)
            self._depth += 1
        depth = getattr(self._local, "depth", 0)
        if depth == 0:
            self._local.saved = [(k, k.get()) for k in knobs if k.per_thread]
            for k, _ in self._local.saved:
                k.set(self.threads)
        self._local.depth = depth + 1
        try:
            yield
        finally:
            self._local.depth -= 1
            if self._local.depth == 0:
                for k, n in self._local.saved:
                    k.set(n)
            with self._lock:
                self._depth -= 1
                if self._depth == 0:
                    for k, n in self._saved:
                        k.set(n)

    def reset(self) -> None:
        self._lock = threading.Lock()
        self._depth = 0


_BLAS = _BlasLimit(1)


def blas_limit() -> Any:
    """A context manager: numpy's BLAS runs on one thread inside it (see the module doc)."""
    return _BLAS()


def blas_threads() -> list[int]:
    """The thread count of each loaded BLAS library right now, as this thread sees it."""
    return [k.get() for k in _BLAS.knobs()]


def _after_fork() -> None:
    _BLAS.reset()
    for threads in list(_LIVE):
        threads.restart_after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)
