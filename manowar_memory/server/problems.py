"""Errors as RFC 9457 problem details (``application/problem+json``): the engine error's message
and a status chosen by the error's class, never a stack trace; every malformed request is a 400."""

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from .. import errors

__all__ = ["PROBLEM_RESPONSES", "PROBLEM_SCHEMA", "TITLES", "Problem", "install_problem_handlers", "problem",
           "status_of"]

log = logging.getLogger("manowar_memory.server")


class Problem(BaseModel):
    """An RFC 9457 problem details body."""

    type: str = Field(description="A URI naming the kind of problem.")
    title: str = Field(description="Short summary of the kind of problem.")
    status: int = Field(description="The HTTP status code.")
    detail: str = Field(description="What went wrong, as the engine said it.")
    instance: str | None = Field(None, description="The request path.")


PROBLEM_SCHEMA = Problem.model_json_schema()
TITLES = {400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found", 405: "Method Not Allowed",
          409: "Conflict", 413: "Content Too Large", 422: "Unprocessable Content", 500: "Internal Server Error",
          502: "Bad Gateway", 503: "Service Unavailable"}
_DOCUMENTED = (400, 401, 403, 404, 413)
PROBLEM_RESPONSES: dict[int | str, dict[str, Any]] = {
    code: {"description": TITLES[code], "content": {"application/problem+json": {"schema": PROBLEM_SCHEMA}}}
    for code in _DOCUMENTED
}

# error class name -> HTTP status (tool errors carry the class name)
_STATUS_BY_NAME = {
    "NotFoundError": 404, "InvalidInputError": 400, "ScopeError": 400, "FilterError": 400,
    "ConfigurationError": 400, "MissingDependencyError": 400, "ToolCallError": 400, "AuthError": 401,
    "ForbiddenScopeError": 403, "ConflictError": 409, "EmbeddingError": 503, "PartialIngestError": 503, "RerankError": 503,
    "StoreError": 503, "PinningError": 502, "ExtractionError": 502,
}


def problem(status: int, detail: str, request: Request | None, kind: str | None = None) -> JSONResponse:
    body = Problem(type=f"urn:manowar:error:{kind}" if kind else "about:blank", title=TITLES.get(status, "Error"),
                   status=status, detail=detail, instance=request.url.path if request is not None else None)
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return JSONResponse(body.model_dump(), status_code=status, media_type="application/problem+json",
                        headers=headers)


def status_of(exc: BaseException) -> tuple[int, str, str]:
    if isinstance(exc, errors.ToolCallError):
        err = (exc.payload or {}).get("error", {}) if isinstance(getattr(exc, "payload", None), dict) else {}
        kind = str(err.get("type") or "ToolCallError")
        return _STATUS_BY_NAME.get(kind, 400), str(err.get("message") or exc), kind
    for cls in type(exc).__mro__:
        if cls.__name__ in _STATUS_BY_NAME:
            return _STATUS_BY_NAME[cls.__name__], str(exc), type(exc).__name__
    return 500, "internal error", "InternalError"


async def _manowar_error(request: Request, exc: errors.ManowarError) -> JSONResponse:
    status, detail, kind = status_of(exc)
    if status >= 500:
        log.warning("%s %s failed: %s: %s", request.method, request.url.path, type(exc).__name__, exc)
    return problem(status, detail, request, kind)


async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
    problems = "; ".join(
        f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg')}" for e in exc.errors()[:10])
    return problem(400, f"invalid request: {problems}", request, "InvalidInputError")


async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    response = problem(exc.status_code, str(exc.detail), request)
    response.headers.update(exc.headers or {})  # Allow on a 405
    return response


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    log.error("%s %s failed", request.method, request.url.path, exc_info=exc)
    return problem(500, "internal error", request, "InternalError")


def install_problem_handlers(app: FastAPI) -> None:
    """Answer every error of ``app`` as a problem: engine errors with their status, malformed
    requests 400, HTTP errors (404, 405, 413) with theirs, anything else 500 (logged)."""
    app.exception_handler(errors.ManowarError)(_manowar_error)
    app.exception_handler(RequestValidationError)(_invalid)
    app.exception_handler(StarletteHTTPException)(_http)
    app.exception_handler(Exception)(_unexpected)
