"""The request body limits, enforced as ASGI middleware before the app reads a body: a body
over the size limit is a 413, one nested deeper than :data:`MAX_JSON_DEPTH` a 400."""

from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Send
from starlette.types import Scope as AsgiScope

from .problems import TITLES, Problem

__all__ = ["DEFAULT_MAX_BODY_BYTES", "MAX_JSON_DEPTH", "BodyLimit"]

#: Largest request body accepted (bytes); larger ones get 413.
DEFAULT_MAX_BODY_BYTES = 1_000_000

#: deepest JSON nesting (objects and arrays) a request body may have; deeper ones get 400 before parsing
MAX_JSON_DEPTH = 256
_JSON_OPEN, _JSON_CLOSE, _JSON_QUOTE, _JSON_ESCAPE = frozenset(b"[{"), frozenset(b"]}"), ord('"'), ord("\\")


class _DepthScanner:
    """The nesting depth of a JSON body fed in chunks, outside strings. A body whose opening
    brackets, counted at C speed, do not exceed the limit cannot be too deep, so the byte-by-byte
    scan runs only on the rare body with more of them than that."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.brackets = 0
        self.held: list[bytes] = []  # chunks not scanned yet
        self.depth = 0
        self.in_string = self.escaped = False

    def too_deep(self, chunk: bytes) -> bool:
        self.held.append(chunk)
        self.brackets += chunk.count(b"[") + chunk.count(b"{")
        if self.brackets <= self.limit:
            return False
        held, self.held = self.held, []
        for part in held:
            for byte in part:
                if self.in_string:
                    if self.escaped:
                        self.escaped = False
                    elif byte == _JSON_ESCAPE:
                        self.escaped = True
                    elif byte == _JSON_QUOTE:
                        self.in_string = False
                elif byte == _JSON_QUOTE:
                    self.in_string = True
                elif byte in _JSON_OPEN:
                    self.depth += 1
                    if self.depth > self.limit:
                        return True
                elif byte in _JSON_CLOSE:
                    self.depth -= 1
        return False


class _TooDeep(StarletteHTTPException):
    """A JSON body nested deeper than :data:`MAX_JSON_DEPTH` (refused before any parser recurses)."""

    def __init__(self) -> None:
        super().__init__(400, f"the JSON body is nested deeper than {MAX_JSON_DEPTH} levels: send flatter data")


class _TooLarge(StarletteHTTPException):
    """A streamed body went over the limit. An HTTP exception, so FastAPI's body reader lets it
    through (it turns any other error while reading into 400) and the app answers 413."""

    def __init__(self, max_bytes: int) -> None:
        super().__init__(413, f"the request body is larger than {max_bytes} bytes")


class BodyLimit:
    """ASGI middleware: a request body over ``max_bytes`` gets 413 (declared, or counted while it
    streams in, with or without a content length), and one nested deeper than
    :data:`MAX_JSON_DEPTH` gets 400, both before the app parses it."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: AsgiScope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = 0
                if declared > self.max_bytes:
                    await self._reject(scope, send)
                    return
        seen = 0
        started = False
        scanner = _DepthScanner(MAX_JSON_DEPTH)

        async def counting_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                chunk = message.get("body", b"")
                seen += len(chunk)
                if seen > self.max_bytes:
                    raise _TooLarge(self.max_bytes)
                if chunk and scanner.too_deep(chunk):
                    raise _TooDeep
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counting_receive, tracking_send)
        except (_TooLarge, _TooDeep) as exc:  # raised where the app did not answer for it
            if not started:
                await self._reject(scope, send, exc.status_code, exc.detail)

    async def _reject(self, scope: AsgiScope, send: Send, status: int = 413, detail: str | None = None) -> None:
        body = Problem(type="about:blank", title=TITLES[status], status=status,
                       detail=detail or f"the request body is larger than {self.max_bytes} bytes",
                       instance=scope.get("path")).model_dump_json().encode()
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/problem+json"),
                                (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})

