"""The REST API's routes, one module (and one ``APIRouter``, one OpenAPI tag) per resource.

:data:`memory_router` is ``/api/memory``: the resources' routers in the order the API documents
them, then ``GET /api/memory/{agentWallet}``, which must come last (it would match any other
one-segment path). :data:`health_router` holds the probes at the root."""

from fastapi import APIRouter

from ..problems import PROBLEM_RESPONSES
from . import compat, evals, items, jobs, loop, patterns, schedules, sessions, workflows
from .health import router as health_router

__all__ = ["health_router", "memory_router"]

_RESOURCES = (loop.router, items.router, jobs.router, schedules.router, sessions.router, evals.router,
              workflows.router, patterns.router, compat.router)

memory_router = APIRouter(prefix="/api/memory", responses=PROBLEM_RESPONSES)
for _resource in _RESOURCES:
    memory_router.include_router(_resource)
memory_router.include_router(compat.agent_facts_router(_RESOURCES))
