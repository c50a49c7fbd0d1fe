"""What a route needs from the app and the request: the server's settings (on ``app.state``),
the caller's API key and the scoped surface the request acts through.

A route takes ``caller: CallerDep`` and acts through ``caller.memory(scope_fields)`` (or
``caller.tool(...)``): the scope is the request's scope fields with the key's agent (and user)
filled in, so a key can never name another agent."""

import dataclasses
from collections.abc import Mapping
from typing import Annotated, Any

from fastapi import Depends, Path, Query, Request
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer

from .. import errors
from ..engine import MemoryEngine
from ..scoped import ScopedMemory
from ..tools import BoundTool, definition
from .auth import ApiKeys, KeyBinding, presented_key, scope_for
from .models import ScopeQuery
from .rest import ToolAnswer, camel_keys, rest_model

__all__ = ["Caller", "CallerDep", "Id", "Q", "ScheduleId", "ServerSettings", "caller", "request_caller", "settings_of"]


@dataclasses.dataclass(frozen=True)
class ServerSettings:
    """How one app serves its engine (``create_app``'s options), kept on ``app.state.settings``."""

    engine: MemoryEngine
    keys: ApiKeys
    trust: str | None = None
    agent_jobs: bool = False
    allow_pin: bool = False
    temporal_address: str | None = None
    temporal_namespace: str = "default"
    temporal_task_queue: str | None = None
    #: the Temporal client, connected on first use in the server's event loop
    temporal: dict[str, Any] = dataclasses.field(default_factory=dict)

    def memory(self, binding: KeyBinding | None, data: Mapping[str, Any]) -> ScopedMemory:
        """The engine's surface for the scope ``data`` names, as ``binding``'s key may act in it."""
        return self.engine.scoped(scope_for(data, binding), trust=self.trust, agent_jobs=self.agent_jobs,
                                  allow_pin=self.allow_pin)

    async def temporal_client(self) -> Any:
        """The Temporal client (connected once); a configuration error when the server has none."""
        if not self.temporal_address:
            raise errors.ConfigurationError(
                "this server runs jobs inline only: send execution 'inline', or start it with "
                "`manowar serve --temporal HOST:PORT` (and run `manowar worker` on the same store) to run jobs "
                "on Temporal")
        if "client" not in self.temporal:
            try:
                from ..jobs.temporal import connect_temporal
            except ImportError as exc:
                raise errors.MissingDependencyError("temporalio", "temporal", "Temporal jobs") from exc
            self.temporal["client"] = await connect_temporal(self.temporal_address, self.temporal_namespace)
        return self.temporal["client"]


@dataclasses.dataclass(frozen=True)
class Caller:
    """The caller of one request: the app's settings and the request's API key (None without keys)."""

    settings: ServerSettings
    binding: KeyBinding | None

    @property
    def engine(self) -> MemoryEngine:
        """The engine the app serves."""
        return self.settings.engine

    def memory(self, data: Mapping[str, Any]) -> ScopedMemory:
        """The surface of the scope ``data`` names (scope fields with the reference's names)."""
        return self.settings.memory(self.binding, data)

    def tool(self, data: Mapping[str, Any], name: str, **arguments: Any) -> ToolAnswer:
        """The tool ``name``'s result in the scope ``data`` names, with camelCase keys (arguments
        given as None are left out, so the tool's defaults apply)."""
        tool = BoundTool(definition(name), self.memory(data))
        result = tool.call(**{k: v for k, v in arguments.items() if v is not None})
        return ToolAnswer(camel_keys(result), rest_model(tool.definition.result_model))


def settings_of(request: Request) -> ServerSettings:
    """The settings of the app serving ``request``."""
    return request.app.state.settings  # type: ignore[no-any-return]


_bearer = HTTPBearer(auto_error=False, description="An API key as a bearer token.")
_header = APIKeyHeader(name="X-API-Key", auto_error=False, description="An API key.")


async def caller(request: Request, creds: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
                 api_key: Annotated[str | None, Depends(_header)]) -> Caller:
    """The request's caller: its API key checked against the app's keys (an :class:`AuthError`
    when keys are configured and the request has none of them). A dependency; async: a hash and a
    compare, run on the event loop rather than a worker thread."""
    settings = settings_of(request)
    if not settings.keys:
        return Caller(settings, None)
    return Caller(settings, settings.keys.authenticate(api_key or (creds.credentials if creds is not None else None)))


def request_caller(request: Request) -> Caller:
    """:func:`caller` for a route serving its own requests (no dependency solving): the key read
    from the request's headers as the security schemes read it."""
    settings = settings_of(request)
    return Caller(settings, settings.keys.authenticate(presented_key(request.headers)) if settings.keys else None)


CallerDep = Annotated[Caller, Depends(caller)]
#: the scope fields of a GET or DELETE, from the query string
Q = Annotated[ScopeQuery, Query()]
#: an id in a path
Id = Annotated[str, Path(min_length=1, max_length=512)]
#: a schedule id in a path
ScheduleId = Annotated[str, Path(min_length=1, max_length=400)]
