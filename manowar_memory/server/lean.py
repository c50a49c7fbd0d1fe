"""The lean request path of the hot routes (``context/assemble``, ``turns/record``, the searches).

A :class:`LeanRoute` is documented by FastAPI from its endpoint like any route (OpenAPI, security
schemes, the 400 response), and FastAPI's own response field serialises its answer, but a request
skips FastAPI's per-request dependency solving and takes one hop to a worker thread instead of
two (FastAPI runs a sync endpoint, then its response validation, each in the thread pool). Its
endpoint takes exactly ``body: <a body model>`` and ``caller: CallerDep``."""

from collections.abc import Callable, Coroutine
from typing import Any, TypeVar, get_type_hints

from fastapi import APIRouter, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import ResponseValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool

from .deps import Caller, request_caller
from .rest import json_body, validate_body

__all__ = ["LeanRoute", "lean_post"]

_F = TypeVar("_F", bound=Callable[..., Any])


class LeanRoute(APIRoute):
    """A route whose requests go straight to its endpoint (FastAPI's custom-route hook): a
    malformed JSON body is refused first, then the API key, then the body's fields, as FastAPI
    refuses them; the endpoint and the answer's serialisation run in one worker thread."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        body_model: type[BaseModel] = get_type_hints(self.endpoint)["body"]
        endpoint, field, route = self.endpoint, self.response_field, self

        def respond(body: BaseModel, caller: Caller) -> Response:
            answer = endpoint(body=body, caller=caller)
            if isinstance(answer, Response):
                return answer
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
            return await run_in_threadpool(respond, validate_body(body_model, data), caller)

        return handle


def lean_post(router: APIRouter, path: str, **options: Any) -> Callable[[_F], _F]:
    """``@router.post(path, **options)`` for a :class:`LeanRoute`."""

    def register(endpoint: _F) -> _F:
        router.add_api_route(path, endpoint, methods=["POST"], route_class_override=LeanRoute, **options)
        return endpoint

    return register
