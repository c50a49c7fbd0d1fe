"""The hot routes' lean request path answers exactly as FastAPI's own handler of the same route.

Every :class:`LeanRoute` of the app is asked the same requests (a good one, malformed JSON, a
field of the wrong type, an unknown field, no body, no key, a wrong key, a bad body without a key) through its lean handler
and through FastAPI's handler of the same route object (``APIRoute.get_route_handler``): the same
status, headers and bytes, or the same error with the same message."""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

import pytest

pytest.importorskip("fastapi")

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from starlette.requests import Request

from manowar_memory import MemoryEngine, Scope
from manowar_memory.server.app import create_app
from manowar_memory.server.auth import ApiKeys, hash_key
from manowar_memory.server.lean import LeanRoute

KEY = "lean-key"
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
    with MemoryEngine(store=":memory:", embedder="fake") as engine:
        app = create_app(engine, keys=ApiKeys([{"sha256": hash_key(KEY), "agentWallet": "a1", "userAddress": "u1"}]))
        routes = _lean_routes(app)
        assert {r.path.removeprefix("/api/memory") for r in routes} >= {"/context/assemble", "/search"}
        engine.scoped(Scope(agent_wallet="a1", user_address="u1")).remember("The user likes green tea")
        key = {"X-API-Key": KEY, "Content-Type": "application/json"}
        for route in routes:
            path = f"/api/memory{route.path}"
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
                assert lean == plain, (path, body, headers)

