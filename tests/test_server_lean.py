"""The hot routes' lean request path answers exactly as FastAPI's own handler of the same route.

Every :class:`LeanRoute` of the app is asked the same requests (a good one, malformed JSON, a
field of the wrong type, an unknown field, no body, no key, a wrong key, a bad body without a key) through its lean handler
and through FastAPI's handler of the same route object (``APIRoute.get_route_handler``): the same
status, headers and bytes, or the same error with the same message."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
import threading
from typing import Any

import pytest

pytest.importorskip("fastapi")

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient
from starlette.requests import Request

from manowar_memory import MemoryConfig, MemoryEngine, Scope
from manowar_memory.server.app import create_app
from manowar_memory.server.auth import ApiKeys, hash_key
from manowar_memory.server.deps import Caller
from manowar_memory.server.lean import HotRoutes, LeanRoute, in_worker
from manowar_memory.server.rest import ToolAnswer, rest_model
from manowar_memory.tool_results import SearchResult

KEY = "lean-key"
#: access bumps land in the background after a delay and change the next search's ranking: held off
STILL = MemoryConfig(access_write_delay_s=60.0)
GOOD = {"/api/memory/context/assemble": {"query": "tea"}, "/api/memory/search": {"query": "tea"},
        "/api/memory/items/search": {"query": "tea", "limit": 3}, "/api/memory/layers/search": {"query": "tea"},
        "/api/memory/turns/record": {"threadId": "t1", "turnId": "turn-1", "extractFacts": False,
                                     "messages": [{"role": "user", "content": "I drink green tea", "timestamp": 1}]}}


def _lean_routes(app: FastAPI) -> list[LeanRoute]:
    found: list[LeanRoute] = []

    def walk(routes: Any) -> None:
        for route in routes:
            if isinstance(route, LeanRoute):
                found.append(route)
            walk(getattr(getattr(route, "original_router", None), "routes", ()))

    walk(app.router.routes)
    return found


async def _answer(app: FastAPI, handler: Any, path: str, body: bytes, headers: dict[str, str]) -> tuple[Any, ...]:
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    async with contextlib.AsyncExitStack() as stack:
        scope = {"type": "http", "method": "POST", "path": path, "raw_path": path.encode(), "query_string": b"",
                 "root_path": "", "app": app, "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
                 "fastapi_middleware_astack": stack, "fastapi_inner_astack": stack,
                 "fastapi_function_astack": stack}
        try:
            response = await handler(Request(scope, receive))
        except RequestValidationError as exc:
            return ("invalid", json.dumps(exc.errors(), default=str, sort_keys=True))
        except Exception as exc:  # noqa: BLE001 - compared, not hidden
            return ("error", type(exc).__name__, str(exc))
    return ("ok", response.status_code, response.media_type, response.body)


def test_every_lean_route_answers_as_fastapis_handler_of_the_same_route() -> None:
    with MemoryEngine(store=":memory:", embedder="fake", config=STILL) as engine:
        app = create_app(engine, keys=ApiKeys([{"sha256": hash_key(KEY), "agentWallet": "a1", "userAddress": "u1"}]))
        routes = _lean_routes(app)
        assert {r.path.removeprefix("/api/memory") for r in routes} >= {"/context/assemble", "/search"}
        engine.scoped(Scope(agent_wallet="a1", user_address="u1")).remember("The user likes green tea")
        key = {"X-API-Key": KEY, "Content-Type": "application/json"}
        for route in routes:
            path = route.path if route.path.startswith("/api/memory/") else f"/api/memory{route.path}"  # a hot copy
            good = json.dumps(GOOD[path]).encode()
            asyncio.run(_answer(app, route.get_route_handler(), path, good, key))  # a recorded turn: both retry it
            cases = [(good, key), (b"{bad", key), (b'{"query": 3}', key), (b'{"query": "x", "bogus": 1}', key),
                     (b"", key), (good, {"Content-Type": "application/json"}),
                     (good, {"X-API-Key": "wrong", "Content-Type": "application/json"}),
                     (good, {"X-API-Key": KEY, "Content-Type": "text/plain"}),
                     (b'{"query": 3}', {"Content-Type": "application/json"}), (b"{bad", {"X-API-Key": "wrong"})]
            for body, headers in cases:
                lean = asyncio.run(_answer(app, route.get_route_handler(), path, body, headers))
                plain = asyncio.run(_answer(app, APIRoute.get_route_handler(route), path, body, headers))
                if path.endswith("/context/assemble") and lean[0] == "ok":  # a fresh context id and timings each call
                    assert plain[:3] == lean[:3] and json.loads(plain[3]).keys() == json.loads(lean[3]).keys()
                    continue
                if path.endswith("/search") and lean[0] == "ok":  # decay reads the clock: rankScore moves by 1e-6
                    assert plain[:3] == lean[:3]
                    assert _without_rank_scores(lean[3]) == _without_rank_scores(plain[3]), (path, body, headers)
                    continue
                assert lean == plain, (path, body, headers)


def _without_rank_scores(body: bytes) -> tuple[object, list[float]]:
    """A search answer without its memories' rankScore, and those scores rounded to 4 places
    (the decay stage reads the clock, so two calls a millisecond apart differ in the 6th)."""
    answer = json.loads(body)
    scores = [round(m.pop("rankScore"), 4) for m in answer["memories"]]
    return answer, scores



def _search_routes(app: FastAPI) -> list[LeanRoute]:
    return [r for r in _lean_routes(app) if r.path.endswith("/search")]


def test_a_lean_search_answer_is_the_answer_validated_through_its_result_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """The lean path sends a tool's checked, camelCased result as it stands: the same bytes as
    that result validated against the route's REST model and serialised as FastAPI does."""
    sent: list[ToolAnswer] = []
    tool = Caller.tool

    def recorded(self: Caller, *args: Any, **kwargs: Any) -> ToolAnswer:
        sent.append(tool(self, *args, **kwargs))
        return sent[-1]

    monkeypatch.setattr(Caller, "tool", recorded)
    with MemoryEngine(store=":memory:", embedder="fake", config=STILL) as engine:
        app = create_app(engine, keys=ApiKeys([{"sha256": hash_key(KEY), "agentWallet": "a1", "userAddress": "u1"}]))
        memory = engine.scoped(Scope(agent_wallet="a1", user_address="u1"))
        for text in ("The user likes green tea", "The user's sister drinks tea in Kraków",
                     "Green tea at 7 a.m., never after 6 p.m.", "The user ran a marathon with tea breaks"):
            memory.remember(text)
        memory.add(["tea notes: matcha, sencha, gyokuro"], source="knowledge")
        key = {"X-API-Key": KEY, "Content-Type": "application/json"}
        routes = _search_routes(app)
        assert {r.path.removeprefix("/api/memory") for r in routes} == {"/search", "/items/search", "/layers/search"}
        for route in routes:
            path = route.path if route.path.startswith("/api/memory/") else f"/api/memory{route.path}"
            request = {"query": "tea", "limit": 5, "layers": ["graph", "vectors"]}
            answer = asyncio.run(_answer(app, route.get_route_handler(), path, json.dumps(request).encode(), key))
            assert answer[:3] == ("ok", 200, "application/json"), (path, answer)
            result = sent[-1]
            assert result.model is route.response_model is rest_model(SearchResult)  # the shortcut was taken
            assert len(result["memories"]) >= 3 and all("rankScore" in m and m["lanes"] for m in result["memories"])
            field = route.response_field
            assert field is not None
            value, errors = field.validate(dict(result), {}, loc=("response",))
            assert not errors
            assert answer[3] == field.serialize_json(value, by_alias=True, exclude_unset=True), path
            assert "Kraków".encode() in answer[3] and b'"rank_score"' not in answer[3]


def test_hot_copies_take_no_route_from_the_routes_before_their_documented_twins() -> None:
    """A lean route also routed from the head of the table (undocumented) is the route a request
    got before: no POST route ahead of its documented twin matches its path."""
    with MemoryEngine(store=":memory:", embedder="fake") as engine:
        app = create_app(engine)
        hot = [r for r in app.router.routes if isinstance(r, LeanRoute)]
        assert {r.path for r in hot} >= {"/api/memory/search", "/api/memory/context/assemble"}
        assert all(not r.include_in_schema for r in hot)
        documented = [(router_prefix + r.path, r) for router_prefix, r in _documented_routes(app)]
        for copy in hot:
            twin = next(i for i, (p, r) in enumerate(documented) if p == copy.path and r.endpoint is copy.endpoint)
            for full, route in documented[:twin]:
                if "POST" in (getattr(route, "methods", None) or ()):
                    assert not route.path_regex.match(copy.path.removeprefix("/api/memory")) or full == copy.path, (
                        copy.path, full)
        schema_paths = app.openapi()["paths"]
        assert all(list(schema_paths).count(r.path) == 1 for r in hot)


def _documented_routes(app: FastAPI) -> list[tuple[str, APIRoute]]:
    """The app's documented routes in routing order, each with the prefix it is included under."""
    found: list[tuple[str, APIRoute]] = []
    for route in app.router.routes:
        if isinstance(route, APIRoute) and route.include_in_schema:
            found.append(("", route))
        included = getattr(getattr(route, "original_router", None), "routes", ())
        prefix = getattr(getattr(route, "include_context", None), "prefix", "")
        found += [(prefix, r) for r in included if isinstance(r, APIRoute)]
    return found


def test_a_lean_request_runs_in_a_worker_thread_in_a_copy_of_its_context() -> None:
    var: contextvars.ContextVar[str] = contextvars.ContextVar("lean_test", default="unset")

    def seen() -> tuple[int, str]:
        value = var.get()
        var.set("changed in the worker")  # in a copy: the caller's value stays
        return threading.get_ident(), value

    async def request() -> tuple[int, str, str]:
        var.set("the request's")
        ident, value = await in_worker(seen)
        return ident, value, var.get()

    ident, value, after = asyncio.run(request())
    assert ident != threading.get_ident()
    assert (value, after) == ("the request's", "the request's")


def test_hot_routes_answer_as_the_app_routes_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """A request :class:`HotRoutes` takes gets the answer the app's router gives it (errors and
    body limits included), and never reaches the router; one it does not take goes on as before."""
    routed: list[str] = []
    route_handle = APIRoute.handle

    async def handle(self: APIRoute, scope: Any, receive: Any, send: Any) -> None:
        routed.append(scope["path"])
        await route_handle(self, scope, receive, send)

    monkeypatch.setattr(APIRoute, "handle", handle)
    with MemoryEngine(store=":memory:", embedder="fake", config=STILL) as engine:
        keys = ApiKeys([{"sha256": hash_key(KEY), "agentWallet": "a1", "userAddress": "u1"}])
        hot, plain = (create_app(engine, keys=keys, max_body_bytes=4000) for _ in range(2))
        plain.user_middleware = [m for m in plain.user_middleware if m.cls is not HotRoutes]
        engine.scoped(Scope(agent_wallet="a1", user_address="u1")).remember("The user likes green tea")
        key = {"X-API-Key": KEY, "Content-Type": "application/json"}
        with TestClient(hot) as hot_client, TestClient(plain) as plain_client:
            for path, fields in GOOD.items():
                good = json.dumps(fields).encode()
                hot_client.post(path, content=good, headers=key)  # a recorded turn: both retry it
                cases = [(good, key), (b"{bad", key), (b'{"query": 3}', key), (b"", key),
                         (good, {"Content-Type": "application/json"}), (good, {**key, "X-API-Key": "wrong"}),
                         (good, {**key, "Content-Type": "text/plain"}), (b'{"query": "' + b"x" * 5000 + b'"}', key),
                         (b"[" * 300 + b"]" * 300, key)]
                for body, headers in cases:
                    routed.clear()
                    answers = [hot_client.post(path, content=body, headers=headers)]
                    assert not routed, (path, body[:20], headers)
                    answers.append(plain_client.post(path, content=body, headers=headers))
                    a, b = ((r.status_code, r.headers["content-type"], r.content) for r in answers)
                    if path.endswith("/context/assemble") and a[0] == 200:  # a fresh context id and timings each call
                        assert a[:2] == b[:2] and json.loads(a[2]).keys() == json.loads(b[2]).keys()
                    elif path.endswith("/search") and a[0] == 200:  # decay reads the clock: rankScore moves by 1e-6
                        assert a[:2] == b[:2] and _without_rank_scores(a[2]) == _without_rank_scores(b[2])
                    else:
                        assert a == b, (path, body[:20], headers)
            routed.clear()
            assert hot_client.get("/api/memory/search", headers=key).status_code == 405
            assert hot_client.post("/api/memory/remember", json={"content": "x"}, headers=key).status_code == 200
            assert routed == ["/api/memory/search", "/api/memory/remember"]  # not taken: routed as before
