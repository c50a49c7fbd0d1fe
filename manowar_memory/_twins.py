"""Async twins of synchronous methods, written once.

``asearch = async_twin(search)`` in a class body gives ``await obj.asearch(...)`` with the same
parameters and return type as ``obj.search(...)`` (mypy checks them), run in a worker thread so
the event loop is never blocked by the store, the embedder or the ranking.

A method whose work waits on something that has an async form (the fact resolver's chat model)
is written once as a generator of :class:`Step`: it yields each such wait and gets its answer
back. :func:`run_steps` runs it synchronously; :func:`steps_twin` gives its coroutine twin, which
runs the code between the steps in worker threads and awaits each step on the event loop, so no
thread is held while the model answers.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine, Generator
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar, overload

__all__ = ["Step", "Steps", "arun_steps", "async_twin", "run_steps", "steps_twin"]

P = ParamSpec("P")
R = TypeVar("R")
S = TypeVar("S")
T = TypeVar("T")
A_co = TypeVar("A_co", covariant=True)


def async_twin(method: Callable[Concatenate[S, P], R]) -> Callable[Concatenate[S, P], Coroutine[Any, Any, R]]:
    """The coroutine-function twin of ``method``: same arguments, same result, run with
    :func:`asyncio.to_thread`."""

    @functools.wraps(method)
    async def twin(self: S, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return await asyncio.to_thread(method, self, *args, **kwargs)

    _name_twin(twin, method, method.__name__)
    twin.__doc__ = f"Async twin of :meth:`{method.__name__}` (run in a worker thread)."
    return twin


class Step(Protocol[A_co]):
    """Something a step generator waits on: answered by :meth:`run` (blocking) or :meth:`arun`."""

    def run(self) -> A_co:
        """The answer, computed in the calling thread."""
        ...

    async def arun(self) -> A_co:
        """The answer, awaited on the event loop."""
        ...


Steps = Generator[Step[Any], Any, R]
"""A generator that yields :class:`Step` objects, is sent their answers and returns ``R``."""


def run_steps(steps: Steps[R]) -> R:
    """Run ``steps`` to its result in this thread, answering each step with :meth:`Step.run`."""
    try:
        step = next(steps)
        while True:
            step = steps.send(step.run())
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]  # the generator's return value is R


def _advance(steps: Steps[R], answer: Any, first: bool) -> tuple[bool, Any]:
    """One move of ``steps`` (StopIteration cannot cross a thread's future): (done, step or result)."""
    try:
        return False, next(steps) if first else steps.send(answer)
    except StopIteration as stop:
        return True, stop.value


async def arun_steps(steps: Steps[R]) -> R:
    """Run ``steps`` to its result: the code between steps in worker threads, each step awaited
    with :meth:`Step.arun` on the event loop."""
    done, value = await asyncio.to_thread(_advance, steps, None, True)
    while not done:
        try:
            answer = await value.arun()
        except BaseException:  # cancelled (or failed) while waiting: the generator's finally blocks run now
            steps.close()
            raise
        done, value = await asyncio.to_thread(_advance, steps, answer, False)
    return value  # type: ignore[no-any-return]  # the generator's return value is R


@overload
def steps_twin(method: Callable[Concatenate[S, P], Steps[R]], *,
               name: str) -> Callable[Concatenate[S, P], Coroutine[Any, Any, R]]: ...


@overload
def steps_twin(method: Callable[Concatenate[S, P], Steps[R]], *, name: str,
               then: Callable[[R], T]) -> Callable[Concatenate[S, P], Coroutine[Any, Any, T]]: ...


def steps_twin(method: Callable[Concatenate[S, P], Steps[Any]], *, name: str,
               then: Callable[[Any], Any] | None = None) -> Callable[Concatenate[S, P], Coroutine[Any, Any, Any]]:
    """The coroutine-function twin of the synchronous method ``name``, written as the step
    generator ``method`` (same arguments): run with :func:`arun_steps`, its result passed
    through ``then`` when given."""

    @functools.wraps(method)
    async def twin(self: S, /, *args: P.args, **kwargs: P.kwargs) -> Any:
        result = await arun_steps(method(self, *args, **kwargs))
        return then(result) if then is not None else result

    _name_twin(twin, method, name)
    twin.__doc__ = (f"Async twin of :meth:`{name}`: the store work runs in worker threads and an async "
                    "fact resolver's model is awaited on the event loop.")
    return twin


def _name_twin(twin: Callable[..., Any], method: Callable[..., Any], name: str) -> None:
    owner = method.__qualname__.rpartition(".")[0]
    twin.__name__ = "a" + name
    twin.__qualname__ = f"{owner}.a{name}" if owner else twin.__name__
