"""The REST API's routes, one module (and one ``APIRouter``, one OpenAPI tag) per resource.

:func:`include_routes` includes them in an app: under ``/api/memory`` the resources' routers in
the order the API documents them, then ``GET /api/memory/{agentWallet}``, which must come last (it
would match any other one-segment path); the probes at the root."""

from fastapi import FastAPI

from ..lean import route_hot_first
from ..problems import PROBLEM_RESPONSES
from . import compat, evals, health, items, jobs, loop, patterns, schedules, sessions, workflows

__all__ = ["API_PREFIX", "include_routes"]

#: where the memory API lives
API_PREFIX = "/api/memory"

_RESOURCES = (loop.router, items.router, jobs.router, schedules.router, sessions.router, evals.router,
              workflows.router, patterns.router, compat.router)
_AGENT_FACTS = compat.agent_facts_router(_RESOURCES)


def include_routes(app: FastAPI) -> None:
    """Include every route of the API in ``app`` (each router once, directly: one level of routing),
    the lean (hot) routes routed first."""
    route_hot_first(app, _RESOURCES, API_PREFIX)
    for router in (*_RESOURCES, _AGENT_FACTS):
        app.include_router(router, prefix=API_PREFIX, responses=PROBLEM_RESPONSES)
    app.include_router(health.router)
