"""The lean request path of the hot routes (``context/assemble``, ``turns/record``, the searches).

A :class:`LeanRoute` is documented by FastAPI from its endpoint like any route (OpenAPI, security
schemes, the 400 response), and FastAPI's own response field serialises its answer, but a request
skips FastAPI's per-request dependency solving and takes one hop to a worker thread instead of
two (FastAPI runs a sync endpoint, then its response validation, each in the thread pool), on
the event loop's own executor path (:func:`in_worker`) rather than anyio's, whose capacity
limiter and cancellation checkpoints cost a request two more turns of the event loop. Its
endpoint takes exactly ``body: <a body model>`` and ``caller: CallerDep``. A tool's answer
(:class:`~.rest.ToolAnswer`, already checked against the tool's result model) is sent as it
stands rather than validated and serialised a second time, and :func:`route_hot_first` routes
the lean routes from the head of the app's routing table; :class:`HotRoutes` serves their requests
before FastAPI's routing and route wrappers, with the app's own exception handlers."""

import asyncio
import concurrent.futures
import contextvars
import functools
import os
import threading
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, TypeVar, get_type_hints

from fastapi import APIRouter, FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import ResponseValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from pydantic import BaseModel
from pydantic_core import to_json
from starlette.middleware.exceptions import ExceptionMiddleware
from starlette.routing import Match
from starlette.types import ASGIApp, Receive, Send
from starlette.types import Scope as AsgiScope

from .deps import Caller, request_caller
from .rest import ToolAnswer, json_body, validate_body

__all__ = ["WORKER_THREADS", "HotRoutes", "LeanRoute", "in_worker", "lean_post", "route_hot_first"]

_F = TypeVar("_F", bound=Callable[..., Any])
_R = TypeVar("_R")

#: most lean requests served at once (their worker threads), as many as anyio lets FastAPI's sync routes run
WORKER_THREADS = 40
_pool: tuple[int, concurrent.futures.ThreadPoolExecutor] | None = None  # (the process id that made it, the pool)
_pool_lock = threading.Lock()


def _workers() -> concurrent.futures.ThreadPoolExecutor:
    """The lean routes' worker threads (started on first use; a forked process makes its own)."""
    global _pool
    pool = _pool
    if pool is None or pool[0] != os.getpid():
        with _pool_lock:
            pool = _pool
            if pool is None or pool[0] != os.getpid():
                _pool = pool = (os.getpid(), concurrent.futures.ThreadPoolExecutor(
                    WORKER_THREADS, thread_name_prefix="manowar-rest"))
    return pool[1]


async def in_worker(call: Callable[..., _R], *args: Any) -> _R:
    """``call(*args)`` in a worker thread, in a copy of the caller's context (as
    :func:`asyncio.to_thread` runs it), awaited on the running loop."""
    run = functools.partial(contextvars.copy_context().run, call, *args)
    return await asyncio.get_running_loop().run_in_executor(_workers(), run)


class LeanRoute(APIRoute):
    """A route whose requests go straight to its endpoint (FastAPI's custom-route hook): a
    malformed JSON body is refused first, then the API key, then the body's fields, as FastAPI
    refuses them; the endpoint and the answer's serialisation run in one worker thread."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        body_model: type[BaseModel] = get_type_hints(self.endpoint)["body"]
        endpoint, field, route = self.endpoint, self.response_field, self
        as_tool_answers = self._answers_tool_results()

        def respond(body: BaseModel, caller: Caller) -> Response:
            answer = endpoint(body=body, caller=caller)
            if isinstance(answer, Response):
                return answer
            if as_tool_answers and isinstance(answer, ToolAnswer) and answer.model is route.response_model:
                # the tool checked it against its result model; camelCased, it is the REST twin's answer
                return Response(to_json(answer), media_type="application/json")
            if field is None:
                return JSONResponse(jsonable_encoder(answer))
            value, errors = field.validate(answer, {}, loc=("response",))
            if errors:
                raise ResponseValidationError(errors=errors, body=answer)
            content = field.serialize_json(  # as FastAPI serialises a route's answer
                value, include=route.response_model_include, exclude=route.response_model_exclude,
                by_alias=route.response_model_by_alias, exclude_unset=route.response_model_exclude_unset,
                exclude_defaults=route.response_model_exclude_defaults, exclude_none=route.response_model_exclude_none)
            return Response(content, media_type="application/json")

        async def handle(request: Request) -> Response:
            data = json_body(await request.body(), request.headers.get("content-type"))
            caller = request_caller(request)
            return await in_worker(respond, validate_body(body_model, data), caller)

        return handle

    def _answers_tool_results(self) -> bool:
        """Whether the route answers as :func:`~.rest.tool_response` declares (its REST model,
        fields the tool left out left out): a :class:`~.rest.ToolAnswer` of that model is then the
        answer as it stands, the bytes its validation and serialisation would give (the tests
        hold the two paths to it)."""
        return (self.response_model_exclude_unset and self.response_model_by_alias
                and not (self.response_model_exclude_none or self.response_model_exclude_defaults)
                and self.response_model_include is None and self.response_model_exclude is None)


#: the lean routes each router registered (path, endpoint, route options), by the router's id (an
#: ``APIRouter`` is not hashable), for :func:`route_hot_first`
_LEAN: dict[int, list[tuple[str, Callable[..., Any], dict[str, Any]]]] = {}


def lean_post(router: APIRouter, path: str, **options: Any) -> Callable[[_F], _F]:
    """``@router.post(path, **options)`` for a :class:`LeanRoute`."""

    def register(endpoint: _F) -> _F:
        router.add_api_route(path, endpoint, methods=["POST"], route_class_override=LeanRoute, **options)
        _LEAN.setdefault(id(router), []).append((path, endpoint, options))
        return endpoint

    return register


def route_hot_first(app: FastAPI, routers: Sequence[APIRouter], prefix: str) -> None:
    """Route the lean routes of ``routers`` (to be included under ``prefix``) from the head of
    ``app``'s routing table, undocumented: FastAPI tries an app's routes in turn, so a hot route
    behind thirty others (``POST /api/memory/search``) paid for matching each of them. Their
    documented twins stay where the routers put them; none of the routes before a twin takes its
    path and method (tests/test_server_lean.py checks it), so a request gets the same route.
    :class:`HotRoutes` takes these copies' requests before the router; the router still serves
    the ones it leaves (under a root path, followed by telemetry)."""
    for router in routers:
        for path, endpoint, options in _LEAN.get(id(router), ()):
            app.router.add_api_route(prefix + path, endpoint, methods=["POST"], route_class_override=LeanRoute,
                                     include_in_schema=False, **options)


class HotRoutes:
    """ASGI middleware (inside the body limits) sending a ``POST`` to a lean route of ``routes_of``
    straight to its handler, past FastAPI's router and route wrappers (an exception stack and a
    dependency exit stack per request, which a lean route has no use for), with the app's
    exception handlers around it as FastAPI's own :class:`ExceptionMiddleware` would have: the
    same answers, errors included. A request it does not take (another route or method, an app
    under a root path, a request FastAPI's telemetry follows, which names its route in the router)
    goes on through the app as before. The lean routes are read from the app's routing table on
    the first request."""

    def __init__(self, app: ASGIApp, routes_of: FastAPI) -> None:
        self.app = app
        self.routes_of = routes_of
        self._hot: dict[str, tuple[APIRoute, ASGIApp]] | None = None

    def _hot_routes(self) -> dict[str, tuple[APIRoute, ASGIApp]]:
        app = self.routes_of
        # as FastAPI splits them: 500 and Exception are the server error middleware's (outside this one)
        handlers = {k: v for k, v in app.exception_handlers.items() if k not in (500, Exception)}
        hot: dict[str, tuple[APIRoute, ASGIApp]] = {}
        for route in app.router.routes:  # the first route of a path is the one the router would take
            if (isinstance(route, LeanRoute) and route.path not in hot
                    and getattr(route, "max_body_size", None) is None):  # a route's own body limit wraps its app
                hot[route.path] = (route, ExceptionMiddleware(_serve(route.get_route_handler()), handlers=handlers,
                                                              debug=app.debug))
        return hot

    async def __call__(self, scope: AsgiScope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST" and not scope.get("root_path") \
                and "fastapi.telemetry" not in scope:
            if self._hot is None:
                self._hot = self._hot_routes()
            found = self._hot.get(scope["path"])
            if found is not None:
                route, app = found
                match, child_scope = route.matches(scope)
                if match is Match.FULL:
                    scope.setdefault("router", self.routes_of.router)
                    scope.update(child_scope)  # as the router sets it: the endpoint, the route, no path parameters
                    await app(scope, receive, send)
                    return
        await self.app(scope, receive, send)


def _serve(handler: Callable[[Request], Coroutine[Any, Any, Response]]) -> ASGIApp:
    """The ASGI app answering with ``handler``'s response."""

    async def app(scope: AsgiScope, receive: Receive, send: Send) -> None:
        response = await handler(Request(scope, receive, send))
        await response(scope, receive, send)

    return app
