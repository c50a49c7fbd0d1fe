"""The REST API's conventions: camelCase answers (:func:`camel_keys`, :func:`rest_model`), one
validation status in the OpenAPI document (400, not FastAPI's 422), and request bodies read and
validated as FastAPI reads them (:func:`json_body`, :func:`validate_body`, for the lean routes)."""

import copy
import email.message
import functools
import json
import operator
import re
import types
from typing import Any, TypeVar, Union, get_args, get_origin

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ConfigDict, ValidationError, create_model
from pydantic.alias_generators import to_camel

from .. import errors
from ..tools import definition

__all__ = ["MISSING", "ToolAnswer", "camel_keys", "document_one_validation_status", "json_body", "rest_model", "tool_response",
           "validate_body"]

_M = TypeVar("_M", bound=BaseModel)
#: an empty request body (``json_body``'s answer, which ``validate_body`` refuses as a missing body)
MISSING = object()

_SNAKE = re.compile(r"^[a-z][a-z0-9]*(?:_[a-z0-9]+)+$")
_CAMEL_PART = re.compile(r"_([a-z0-9])")
#: keys whose value is user data (kept as the user wrote it)
_USER_DATA = frozenset({"metadata", "userMetadata", "user_metadata"})


@functools.lru_cache(maxsize=4096)
def _camel(key: str) -> str:
    """``key`` camelCased when it is snake_case (the few keys an API answers, converted once each)."""
    return _CAMEL_PART.sub(lambda m: m.group(1).upper(), key) if _SNAKE.match(key) else key


def camel_keys(value: Any) -> Any:
    """``value`` (JSON data) with every snake_case key camelCased, except inside user metadata."""
    if isinstance(value, dict):  # scalars are kept without a call each: a search answer is mostly scalars
        return {(_camel(k) if isinstance(k, str) else k):
                (camel_keys(v) if isinstance(v, (dict, list)) and k not in _USER_DATA else v)
                for k, v in value.items()}
    if isinstance(value, list):
        return [camel_keys(v) if isinstance(v, (dict, list)) else v for v in value]
    return value


class ToolAnswer(dict[str, Any]):
    """A tool's result as a REST route answers it: checked against the tool's result model
    (:meth:`~manowar_memory.tools.ToolDefinition.result`), JSON-ready, keys camelCased; ``model``
    is that model's :func:`rest_model` twin, which the answer already satisfies as it stands."""

    def __init__(self, data: dict[str, Any], model: type[BaseModel]) -> None:
        super().__init__(data)
        self.model = model


_REST_MODELS: dict[type[BaseModel], type[BaseModel]] = {}


def _rest_annotation(annotation: Any) -> Any:
    """``annotation`` with every tool result model in it replaced by its camelCase REST twin."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return rest_model(annotation)
    args = get_args(annotation)
    if not args:
        return annotation
    new = tuple(_rest_annotation(a) for a in args)
    if new == args:
        return annotation
    origin = get_origin(annotation)
    if origin is Union or origin is types.UnionType:
        return functools.reduce(operator.or_, new)
    return origin[new if len(new) > 1 else new[0]]


def rest_model(model: type[BaseModel]) -> type[BaseModel]:
    """The REST twin of a tool result ``model``: the same fields, descriptions and ``extra``
    policy, named in camelCase (``rank_score`` -> ``rankScore``) as the REST API answers them."""
    if model not in _REST_MODELS:
        fields: dict[str, Any] = {}
        for name, info in model.model_fields.items():
            twin = copy.copy(info)
            twin.annotation = _rest_annotation(info.annotation)
            fields[name] = (twin.annotation, twin)
        config = ConfigDict(alias_generator=to_camel, populate_by_name=True,
                            extra=model.model_config.get("extra"))
        _REST_MODELS[model] = create_model(model.__name__, __config__=config, __doc__=model.__doc__,
                                           __module__=model.__module__, **fields)
    return _REST_MODELS[model]


def tool_response(name: str) -> dict[str, Any]:
    """The route options of a route answering the tool ``name``'s result: its typed REST model,
    and fields the tool left out left out of the answer too."""
    return {"response_model": rest_model(definition(name).result_model), "response_model_exclude_unset": True}


def document_one_validation_status(app: FastAPI) -> None:
    """Serve ``app``'s OpenAPI document as FastAPI builds it (built once) without its 422 responses."""
    default_openapi = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = _one_validation_status(default_openapi())
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def _one_validation_status(schema: dict[str, Any]) -> dict[str, Any]:
    """The OpenAPI document without FastAPI's 422 responses: a malformed request is a 400 problem."""
    for path in schema.get("paths", {}).values():
        for operation in path.values():
            if isinstance(operation, dict):
                operation.get("responses", {}).pop("422", None)
    components = schema.get("components", {}).get("schemas", {})
    text = json.dumps(schema.get("paths", {}))
    for name in ("HTTPValidationError", "ValidationError"):
        if f"#/components/schemas/{name}" not in text:
            components.pop(name, None)
    return schema

def json_body(raw: bytes, content_type: str | None) -> Any:
    """A JSON body as FastAPI reads one for a body model: parsed when the content type is
    ``application/json`` or ``application/*+json``, the raw bytes under another type (which then
    fail validation), ``MISSING`` when empty; malformed JSON is a 400 (as every malformed request)."""
    if not raw:
        return MISSING
    if content_type != "application/json":
        if not content_type:
            return raw
        message = email.message.Message()
        message["content-type"] = content_type
        subtype = message.get_content_subtype()
        if message.get_content_maintype() != "application" or not (subtype == "json" or subtype.endswith("+json")):
            return raw
    try:
        return json.loads(raw)
    except UnicodeDecodeError:
        raise errors.InvalidInputError("the request body is not UTF-8: send JSON encoded as UTF-8") from None
    except json.JSONDecodeError as exc:
        raise RequestValidationError([{"type": "json_invalid", "loc": ("body", exc.pos), "msg": "JSON decode error",
                                       "input": {}, "ctx": {"error": exc.msg}}], body=exc.doc) from exc


def validate_body(model: type[_M], data: Any) -> _M:
    """``data`` validated as ``model``; errors are located under ``body`` as FastAPI locates them."""
    if data is MISSING:
        raise RequestValidationError([{"type": "missing", "loc": ("body",), "msg": "Field required", "input": None}])
    try:
        return model.model_validate(data, from_attributes=True)  # as FastAPI validates a body field
    except ValidationError as exc:
        raise RequestValidationError([{**e, "loc": ("body", *e["loc"])} for e in exc.errors(include_url=False)],
                                     body=data) from exc
