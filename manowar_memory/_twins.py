"""Async twins of synchronous methods, written once.

``asearch = async_twin(search)`` in a class body gives ``await obj.asearch(...)`` with the same
parameters and return type as ``obj.search(...)`` (mypy checks them), run in a worker thread so
the event loop is never blocked by the store, the embedder or the ranking.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from typing import Any, Concatenate, ParamSpec, TypeVar

__all__ = ["async_twin"]

P = ParamSpec("P")
R = TypeVar("R")
S = TypeVar("S")


def async_twin(method: Callable[Concatenate[S, P], R]) -> Callable[Concatenate[S, P], Coroutine[Any, Any, R]]:
    """The coroutine-function twin of ``method``: same arguments, same result, run with
    :func:`asyncio.to_thread`."""

    @functools.wraps(method)
    async def twin(self: S, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return await asyncio.to_thread(method, self, *args, **kwargs)

    owner, _, name = method.__qualname__.rpartition(".")
    twin.__name__ = "a" + name
    twin.__qualname__ = f"{owner}.a{name}" if owner else twin.__name__
    twin.__doc__ = f"Async twin of :meth:`{method.__name__}` (run in a worker thread)."
    return twin
