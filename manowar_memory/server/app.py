"""The REST API: a FastAPI app over one engine, every request acting through ``engine.scoped``.

Each request's scope is its scope fields (``agentWallet``, ``userAddress``, ``threadId``,
``mode``, ``haiId``, ``filters``, with the reference's aliases) normalised by
:meth:`Scope.from_dict`, with the API key's agent (and user) filled in: a key can never name
another agent. Errors are RFC 9457 problem details (``application/problem+json``) carrying
the engine error's message, never a stack trace.

One convention: request and response bodies are camelCase (``factType``, ``contextUsage``,
``jobId``; requests also take the snake_case names); keys inside user data (``metadata``) and
maps keyed by data (layer names, lanes, reasons) are left as they are. Every malformed request
is a 400 problem: malformed JSON, a body of the wrong shape or type, a missing field and a value
the engine refuses (empty content, a bad filter) alike. 400 rather than 422 because malformed
JSON is not "well-formed content" (RFC 9110, 15.5.21) and a client has nothing to do differently
between a field of the wrong type and an empty one: the problem's ``detail`` says what was wrong.
``/docs`` (Swagger UI) and ``/redoc`` load their scripts from the app itself, so they work offline.

This module builds the app; the routes are in :mod:`.routes` (one module per resource), what they
take from the app and the request in :mod:`.deps`, the bodies in :mod:`.models`, errors in
:mod:`.problems`, the body limits in :mod:`.body_limit`, the conventions in :mod:`.rest` and the
lean request path of the hot routes in :mod:`.lean`.
"""

import asyncio
import contextlib
import ipaddress
from collections.abc import AsyncIterator

from fastapi import FastAPI

from .. import errors
from .._version import __version__
from ..engine import MemoryEngine
from .auth import ApiKeys
from .body_limit import DEFAULT_MAX_BODY_BYTES, BodyLimit
from .deps import ServerSettings
from .docs import DOCS_ASSETS_PATH, serve_docs
from .lean import HotRoutes
from .problems import Problem, install_problem_handlers
from .rest import camel_keys, document_one_validation_status
from .routes import include_routes

__all__ = ["DEFAULT_MAX_BODY_BYTES", "DOCS_ASSETS_PATH", "Problem", "camel_keys", "check_bind", "create_app", "is_loopback",
           "uvicorn_options"]

_DESCRIPTION = ("Layered long-term memory for LLM agents. Every request acts in one scope; an API key acts for one "
                "agent (and optionally one user). Bodies are camelCase. Errors are RFC 9457 problem details; every "
                "malformed request is a 400.")


def create_app(engine: MemoryEngine, *, keys: ApiKeys | None = None, trust: str | None = None,
               max_body_bytes: int = DEFAULT_MAX_BODY_BYTES, title: str = "manowar-memory",
               temporal_address: str | None = None, temporal_namespace: str = "default",
               temporal_task_queue: str | None = None, agent_jobs: bool = False,
               allow_pin: bool = False) -> FastAPI:
    """The REST API over ``engine``. ``keys``: the API keys (none: every request names its own
    agent; serve that on loopback only, see :func:`check_bind`). ``trust``: the trust level of
    rows written through the API (None: the engine's default). ``temporal_address``: a Temporal
    server, which turns on ``execution: "temporal"`` for ``POST /api/memory/jobs`` (a
    ``manowar worker`` on the same store and task queue runs the workflows). ``agent_jobs``:
    agent-level keys run maintenance over every user's rows of their agent (otherwise every job
    acts on the caller's own rows); ``allow_pin``: callers may publish archives to IPFS. The
    engine's embedder loads at startup (:meth:`MemoryEngine.warm_up` in the app's lifespan)."""
    settings = ServerSettings(engine, keys if keys is not None else ApiKeys(), trust=trust, agent_jobs=agent_jobs,
                              allow_pin=allow_pin, temporal_address=temporal_address,
                              temporal_namespace=temporal_namespace, temporal_task_queue=temporal_task_queue)
    app = FastAPI(title=title, version=__version__, docs_url=None, redoc_url=None, lifespan=_lifespan,
                  description=_DESCRIPTION)
    serve_docs(app)
    document_one_validation_status(app)
    app.state.settings = settings
    app.state.engine = engine
    app.state.keys = settings.keys
    app.add_middleware(HotRoutes, routes_of=app)  # added first: inside the body limits
    app.add_middleware(BodyLimit, max_bytes=max_body_bytes)
    install_problem_handlers(app)
    include_routes(app)
    return app


@contextlib.asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    await asyncio.to_thread(app.state.settings.engine.warm_up)  # the model loads at startup, not in the first request
    yield


def is_loopback(host: str) -> bool:
    """Whether ``host`` only listens on this machine."""
    if host in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, keys: ApiKeys) -> None:
    """Refuse to serve without API keys on an address other machines can reach."""
    if not keys and not is_loopback(host):
        raise errors.ConfigurationError(
            f"refusing to listen on {host} without API keys: configure keys (--keys FILE or $MANOWAR_API_KEYS) "
            "or listen on 127.0.0.1"
        )


def uvicorn_options() -> dict[str, str]:
    """uvicorn's event loop and HTTP parser for a server: uvloop and httptools (the ``server``
    extra installs both, as ``uvicorn[standard]``), else asyncio and h11, named explicitly so
    the server can say what it runs on."""
    import importlib.util

    return {"loop": "uvloop" if importlib.util.find_spec("uvloop") else "asyncio",
            "http": "httptools" if importlib.util.find_spec("httptools") else "h11"}

