"""Local HTTP servers that speak the embedding, rerank and pinning providers' REST shapes.

Point the real SDK clients at them to test without network or credentials::

    from manowar_memory.testing.provider_servers import VoyageServer

    with VoyageServer() as server:
        embedder = VoyageEmbedder(api_key="test-key", base_url=server.base_url, dimensions=8)
        embedder.embed(["hello"])
        assert server.last_request.json["input_type"] == "document"

Each server runs :class:`http.server.ThreadingHTTPServer` in a daemon thread on
``127.0.0.1`` with an ephemeral port, records every request (:attr:`ProviderServer.requests`)
and can be told to misbehave:

* :meth:`ProviderServer.fail` answers with an error status and the provider's error body;
* :meth:`ProviderServer.malformed` answers with a body the client cannot use;
* :meth:`ProviderServer.respond_with` answers with any status and body;
* :meth:`ProviderServer.echo_headers` answers with an error body that echoes the request's
  headers, credentials included (as some gateways do), to test that they are redacted;
* :meth:`ProviderServer.delay` waits before answering (to exercise client timeouts);
* :meth:`ProviderServer.reset` goes back to normal answers.

Scores are deterministic: the share of the query's words found in each document, unless
``scores`` is set. Voyage vectors come from :meth:`VoyageServer.vector_for`.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import struct
import threading
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

__all__ = [
    "CloudflareServer",
    "CohereServer",
    "PinataServer",
    "ProviderServer",
    "RecordedRequest",
    "VoyageServer",
    "overlap_score",
]

_WORD = re.compile(r"\w+")


def overlap_score(query: str, document: str) -> float:
    """Share of the query's distinct words that appear in the document (0..1)."""
    q = set(_WORD.findall(query.lower()))
    if not q:
        return 0.0
    d = set(_WORD.findall(document.lower()))
    return round(len(q & d) / len(q), 6)


@dataclass
class RecordedRequest:
    """One request the server received. Header names are lower-cased."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        """The body parsed as JSON (None when it is not JSON)."""
        try:
            return json.loads(self.body.decode("utf-8"))
        except (ValueError, UnicodeDecodeError):
            return None


@dataclass
class _Reply:
    status: int
    body: bytes
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class _Script:
    reply: _Reply | Callable[[RecordedRequest], _Reply]  # a callable builds the answer from the request
    remaining: int | None  # None: every request until reset()


class _Handler(BaseHTTPRequestHandler):
    server: _HTTPServer
    protocol_version = "HTTP/1.0"  # one request per connection: nothing lingers after stop()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        """Stay quiet."""

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        request = RecordedRequest(
            method=self.command,
            path=self.path,
            headers={k.lower(): v for k, v in self.headers.items()},
            body=body,
        )
        reply = self.server.dispatch(request)
        try:
            self.send_response(reply.status)
            self.send_header("Content-Type", reply.content_type)
            self.send_header("Content-Length", str(len(reply.body)))
            self.send_header("Connection", "close")
            for name, value in reply.headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(reply.body)
        except OSError:  # the client gave up (timeout) and closed the socket
            pass

    do_POST = _serve  # noqa: N815 - the names http.server dispatches to
    do_GET = _serve  # noqa: N815
    do_DELETE = _serve  # noqa: N815


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    dispatch: Callable[[RecordedRequest], _Reply]  # the owning ProviderServer's answer to one request

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Ignore clients that hang up mid-request."""


class ProviderServer:
    """Base class: a recording HTTP server in a background thread; use as a context manager.

    Subclasses implement :meth:`handle` (the normal answer) and :meth:`error_body`.
    """

    #: Path prefix the provider's SDK expects in its base URL.
    base_path: str = ""

    def __init__(self, *, api_key: str | None = None, scores: Sequence[float] | None = None) -> None:
        """``api_key``: when set, other Bearer tokens get 401. ``scores``: fixed relevance
        scores by document index (else word overlap)."""
        self.api_key = api_key
        self.scores: list[float] | None = list(scores) if scores is not None else None
        self.requests: list[RecordedRequest] = []
        self.delay_seconds = 0.0
        self.delays_finished = 0  # answers that waited out the whole delay (a timed-out client never sees one)
        self._script: list[_Script] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> ProviderServer:
        """Bind an ephemeral port on 127.0.0.1 and serve in a daemon thread."""
        if self._httpd is not None:
            return self
        self._stopping.clear()
        httpd = _HTTPServer(("127.0.0.1", 0), _Handler)
        httpd.dispatch = self._dispatch
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, name=type(self).__name__, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the port (requests still sleeping in a delay are cut short)."""
        self._stopping.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._httpd = None
        self._thread = None

    def __enter__(self) -> ProviderServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        """The bound port (after :meth:`start`)."""
        if self._httpd is None:
            raise RuntimeError("server is not running; call start() or use it as a context manager")
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        """``http://127.0.0.1:{port}``."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        """The base URL to give the provider's client."""
        return self.url + self.base_path

    # -- behaviour ---------------------------------------------------------------------------

    def respond_with(
        self,
        status: int,
        body: bytes | str | dict[str, Any] | list[Any],
        *,
        content_type: str = "application/json",
        headers: dict[str, str] | None = None,
        times: int | None = None,
    ) -> ProviderServer:
        """Answer the next ``times`` requests (all, when None) with this status and body."""
        if isinstance(body, (dict, list)):
            raw = json.dumps(body).encode("utf-8")
        elif isinstance(body, str):
            raw = body.encode("utf-8")
        else:
            raw = body
        with self._lock:
            self._script.append(_Script(_Reply(status, raw, content_type, dict(headers or {})), times))
        return self

    def fail(self, status: int = 500, message: str | None = None, *, times: int | None = None) -> ProviderServer:
        """Answer with ``status`` and the provider's error body."""
        text = message or f"simulated error {status}"
        headers = {"Retry-After": "0"} if status == 429 else None
        return self.respond_with(status, self.error_body(status, text), headers=headers, times=times)

    def echo_headers(self, status: int = 401, *, times: int | None = None) -> ProviderServer:
        """Answer with ``status`` and the provider's error body whose message echoes the
        request: its method, path and every header as JSON (an ``Authorization`` header or an
        API key header included), as a misconfigured upstream or gateway might."""

        def reply(request: RecordedRequest) -> _Reply:
            echoed = json.dumps({"headers": request.headers, "method": request.method, "path": request.path},
                                sort_keys=True)  # headers sorted: "authorization" comes early
            message = f"request rejected: {echoed}"
            headers = {"Retry-After": "0"} if status == 429 else {}
            return _Reply(status, json.dumps(self.error_body(status, message)).encode("utf-8"), headers=headers)

        with self._lock:
            self._script.append(_Script(reply, times))
        return self

    def malformed(
        self, body: bytes | str = b"<html>not json", *, status: int = 200, times: int | None = None
    ) -> ProviderServer:
        """Answer with a body the client cannot parse (or pass a JSON of the wrong shape)."""
        return self.respond_with(status, body, times=times)

    def delay(self, seconds: float) -> ProviderServer:
        """Wait ``seconds`` before every answer (0 to stop delaying)."""
        self.delay_seconds = float(seconds)
        return self

    def reset(self) -> ProviderServer:
        """Normal answers, no delay; the request log is kept."""
        with self._lock:
            self._script.clear()
        self.delay_seconds = 0.0
        return self

    @property
    def last_request(self) -> RecordedRequest:
        """The most recent request (raises if none arrived)."""
        with self._lock:
            if not self.requests:
                raise AssertionError(f"{type(self).__name__} received no request")
            return self.requests[-1]

    # -- provider specifics ------------------------------------------------------------------

    def handle(self, request: RecordedRequest) -> _Reply:
        """The provider's normal answer to ``request``."""
        raise NotImplementedError

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        """The provider's error body."""
        return {"message": message}

    def check_auth(self, request: RecordedRequest) -> _Reply | None:
        """None when the request may proceed, else the provider's refusal (default: Bearer ``api_key``)."""
        if self.api_key is not None and request.headers.get("authorization", "") != f"Bearer {self.api_key}":
            return self._error(401, "invalid API key")
        return None

    def handle_get(self, request: RecordedRequest) -> _Reply:
        """The answer to a GET (default: 405, the providers' APIs used here are POST only)."""
        return self._error(405, f"{request.method} is not allowed")

    def handle_delete(self, request: RecordedRequest) -> _Reply:
        """The answer to a DELETE (default: 405)."""
        return self._error(405, f"{request.method} is not allowed")

    def _score(self, query: str, documents: Sequence[str]) -> list[tuple[int, float]]:
        """(index, score) best first, ties by index."""
        if self.scores is not None:
            scored = [(i, float(self.scores[i])) for i in range(min(len(documents), len(self.scores)))]
        else:
            scored = [(i, overlap_score(query, str(d))) for i, d in enumerate(documents)]
        return sorted(scored, key=lambda p: (-p[1], p[0]))

    def _json(self, status: int, payload: Any) -> _Reply:
        return _Reply(status, json.dumps(payload).encode("utf-8"))

    def _error(self, status: int, message: str) -> _Reply:
        return self._json(status, self.error_body(status, message))

    def _dispatch(self, request: RecordedRequest) -> _Reply:
        with self._lock:
            self.requests.append(request)
            scripted: _Reply | Callable[[RecordedRequest], _Reply] | None = None
            if self._script:
                entry = self._script[0]
                scripted = entry.reply
                if entry.remaining is not None:
                    entry.remaining -= 1
                    if entry.remaining <= 0:
                        self._script.pop(0)
        if self.delay_seconds > 0:
            if self._stopping.wait(self.delay_seconds):
                return _Reply(503, b"", "text/plain")
            with self._lock:
                self.delays_finished += 1
        if callable(scripted):
            return scripted(request)
        if scripted is not None:
            return scripted
        denied = self.check_auth(request)
        if denied is not None:
            return denied
        if request.method == "GET":
            return self.handle_get(request)
        if request.method == "DELETE":
            return self.handle_delete(request)
        if request.method != "POST":
            return self._error(405, f"{request.method} is not allowed")
        if not isinstance(request.json, dict):
            return self._error(400, "body must be a JSON object")
        try:
            return self.handle(request)
        except (KeyError, TypeError, ValueError) as exc:
            return self._error(400, f"bad request: {type(exc).__name__}: {exc}")


class VoyageServer(ProviderServer):
    """Voyage AI: ``POST /v1/embeddings`` and ``POST /v1/rerank``; give ``base_url`` (with
    ``/v1``) to ``voyageai.Client``. Honours ``output_dimension`` and ``encoding_format``
    (``"base64"``: little-endian float32, which the SDK requests by default)."""

    base_path = "/v1"

    def __init__(
        self, *, api_key: str | None = None, scores: Sequence[float] | None = None, default_dimension: int = 1024
    ) -> None:
        super().__init__(api_key=api_key, scores=scores)
        self.default_dimension = default_dimension

    @staticmethod
    def vector_for(text: str, dimension: int, input_type: str | None = None) -> list[float]:
        """The deterministic unit vector the server returns (float32-exact values)."""
        seed = f"{input_type or 'none'}\x00{text}".encode()
        raw = b""
        counter = 0
        while len(raw) < dimension * 2:
            raw += hashlib.blake2b(seed + counter.to_bytes(4, "little"), digest_size=64).digest()
            counter += 1
        values = [(int.from_bytes(raw[2 * i : 2 * i + 2], "little") / 32767.5) - 1.0 for i in range(dimension)]
        norm = sum(v * v for v in values) ** 0.5 or 1.0
        packed = struct.pack(f"<{dimension}f", *(v / norm for v in values))
        return list(struct.unpack(f"<{dimension}f", packed))

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        return {"detail": message}

    def handle(self, request: RecordedRequest) -> _Reply:
        body = request.json
        path = request.path.split("?", 1)[0]
        if path == "/v1/embeddings":
            texts = body["input"]
            if isinstance(texts, str):
                texts = [texts]
            if not isinstance(texts, list) or not texts:
                return self._error(400, "input must be a non-empty string or list of strings")
            if not body.get("model"):
                return self._error(400, "model is required")
            dim = int(body.get("output_dimension") or self.default_dimension)
            data = []
            for i, text in enumerate(texts):
                vec = self.vector_for(str(text), dim, body.get("input_type"))
                embedding: Any = vec
                if body.get("encoding_format") == "base64":
                    embedding = base64.b64encode(struct.pack(f"<{dim}f", *vec)).decode("ascii")
                data.append({"object": "embedding", "embedding": embedding, "index": i})
            tokens = sum(len(str(t).split()) for t in texts)
            return self._json(
                200, {"object": "list", "data": data, "model": body["model"], "usage": {"total_tokens": tokens}}
            )
        if path == "/v1/rerank":
            documents = body["documents"]
            scored = self._score(str(body["query"]), documents)
            if body.get("top_k"):
                scored = scored[: int(body["top_k"])]
            data = [{"index": i, "relevance_score": s} for i, s in scored]
            tokens = sum(len(str(d).split()) for d in documents) + len(str(body["query"]).split())
            return self._json(
                200, {"object": "list", "data": data, "model": body.get("model"), "usage": {"total_tokens": tokens}}
            )
        return self._error(404, f"no route {path}")


class CohereServer(ProviderServer):
    """Cohere: ``POST /v2/rerank``; give ``base_url`` (no ``/v2``) to ``cohere.ClientV2``."""

    def handle(self, request: RecordedRequest) -> _Reply:
        body = request.json
        path = request.path.split("?", 1)[0]
        if path != "/v2/rerank":
            return self._error(404, f"no route {path}")
        documents = body["documents"]
        scored = self._score(str(body["query"]), documents)
        if body.get("top_n"):
            scored = scored[: int(body["top_n"])]
        return self._json(
            200,
            {
                "id": str(uuid.uuid4()),
                "results": [{"index": i, "relevance_score": s} for i, s in scored],
                "meta": {"api_version": {"version": "2"}, "billed_units": {"search_units": 1}},
            },
        )


class CloudflareServer(ProviderServer):
    """Cloudflare Workers AI: ``POST /client/v4/accounts/{account}/ai/run/{model}`` with
    ``{query, contexts: [{text}], top_k}``, answering ``{success, result: {response: [{id, score}]}}``.
    ``base_url`` ends in ``/client/v4``."""

    base_path = "/client/v4"
    _ROUTE = re.compile(r"^/client/v4/accounts/(?P<account>[^/]+)/ai/run/(?P<model>.+)$")

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        error = {"code": 10000 + status, "message": message}
        return {"success": False, "errors": [error], "messages": [], "result": None}

    def handle(self, request: RecordedRequest) -> _Reply:
        body = request.json
        path = request.path.split("?", 1)[0]
        if not self._ROUTE.match(path):
            return self._error(404, f"no route {path}")
        documents = [c["text"] for c in body["contexts"]]
        scored = self._score(str(body["query"]), documents)
        if body.get("top_k"):
            scored = scored[: int(body["top_k"])]
        return self._json(
            200,
            {
                "success": True,
                "errors": [],
                "messages": [],
                "result": {"response": [{"id": i, "score": s} for i, s in scored]},
            },
        )


_B32 = "abcdefghijklmnopqrstuvwxyz234567"
_B58 = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"


def _base32_lower(data: bytes) -> str:
    bits = "".join(f"{b:08b}" for b in data)
    bits += "0" * (-len(bits) % 5)
    return "".join(_B32[int(bits[i : i + 5], 2)] for i in range(0, len(bits), 5))


def _base58(data: bytes) -> str:
    n = int.from_bytes(data, "big")
    out = ""
    while n:
        n, r = divmod(n, 58)
        out = _B58[r] + out
    return "1" * (len(data) - len(data.lstrip(b"\0"))) + out


class PinataServer(ProviderServer):
    """Pinata: ``POST /pinning/pinJSONToIPFS`` and ``GET /data/testAuthentication``; give
    ``url`` as the client's base URL (``PINATA_API_URL``).

    Authentication as Pinata checks it: ``Authorization: Bearer {jwt}`` or the headers
    ``pinata_api_key`` / ``pinata_secret_api_key``; anything else gets 401 with Pinata's
    ``{"error": {"reason", "details"}}`` body. A pin answers ``{IpfsHash, PinSize, Timestamp}``
    where ``IpfsHash`` is the real CID of the canonical JSON of ``pinataContent`` (CIDv1 raw
    sha2-256, ``bafkrei...``; CIDv0 ``Qm...`` with ``cidVersion: 0``). Pins are kept in :attr:`pins`.
    """

    _REASONS: ClassVar[dict[int, str]] = {400: "INVALID_REQUEST", 401: "INVALID_CREDENTIALS", 403: "FORBIDDEN", 404: "NOT_FOUND",
                429: "RATE_LIMITED", 500: "INTERNAL_SERVER_ERROR", 502: "BAD_GATEWAY", 503: "SERVICE_UNAVAILABLE"}

    def __init__(self, *, jwt: str | None = None, api_key: str | None = None, api_secret: str | None = None) -> None:
        super().__init__()
        self.jwt = jwt
        self.pinata_api_key = api_key
        self.pinata_api_secret = api_secret
        self.pins: dict[str, dict[str, Any]] = {}

    @staticmethod
    def cid_for(content: Any, cid_version: int = 1) -> str:
        """The CID the server gives ``content`` (sha2-256 of its canonical JSON)."""
        raw = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        multihash = b"\x12\x20" + hashlib.sha256(raw).digest()
        if cid_version == 0:
            return _base58(multihash)
        return "b" + _base32_lower(b"\x01\x55" + multihash)

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        return {"error": {"reason": self._REASONS.get(status, "ERROR"), "details": message}}

    def check_auth(self, request: RecordedRequest) -> _Reply | None:
        auth = request.headers.get("authorization")
        key, secret = request.headers.get("pinata_api_key"), request.headers.get("pinata_secret_api_key")
        if auth is not None:
            if self.jwt is not None and auth == f"Bearer {self.jwt}":
                return None
            return self._json(401, {"error": {"reason": "INVALID_CREDENTIALS",
                                              "details": "Invalid/expired credentials provided."}})
        if key is not None or secret is not None:
            if not key or not secret:
                return self._json(401, {"error": {"reason": "KEYS_MUST_BE_STRINGS",
                                                  "details": "pinata_api_key and pinata_secret_api_key must both be strings"}})
            if key == self.pinata_api_key and secret == self.pinata_api_secret and key is not None:
                return None
            return self._json(401, {"error": {"reason": "INVALID_API_KEYS", "details": "Invalid API key provided"}})
        return self._json(401, {"error": {"reason": "NO_CREDENTIALS", "details": "No authentication was provided"}})

    def handle_get(self, request: RecordedRequest) -> _Reply:
        if request.path.split("?", 1)[0] == "/data/testAuthentication":
            return self._json(200, {"message": "Congratulations! You are communicating with the Pinata API!"})
        return self._error(404, f"no route {request.path}")

    def handle_delete(self, request: RecordedRequest) -> _Reply:
        """``DELETE /pinning/unpin/{cid}``: Pinata answers a plain ``OK``, or 404 for a CID it does not pin."""
        path = request.path.split("?", 1)[0]
        prefix = "/pinning/unpin/"
        if not path.startswith(prefix):
            return self._error(404, f"no route {path}")
        with self._lock:
            found = self.pins.pop(path[len(prefix):], None)
        return _Reply(200, b"OK", "text/plain") if found is not None else self._error(404, "CURRENT_USER_HAS_NOT_PINNED_CID")

    def handle(self, request: RecordedRequest) -> _Reply:
        path = request.path.split("?", 1)[0]
        if path != "/pinning/pinJSONToIPFS":
            return self._error(404, f"no route {path}")
        body = request.json
        if "pinataContent" not in body:
            return self._error(400, "pinataContent is required")
        version = int((body.get("pinataOptions") or {}).get("cidVersion", 0))
        if version not in (0, 1):
            return self._error(400, "cidVersion must be 0 or 1")
        content = body["pinataContent"]
        cid = self.cid_for(content, version)
        duplicate = cid in self.pins
        size = len(json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8"))
        stamp = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        with self._lock:
            self.pins[cid] = {"content": content, "metadata": body.get("pinataMetadata") or {}, "timestamp": stamp}
        answer: dict[str, Any] = {"IpfsHash": cid, "PinSize": size, "Timestamp": stamp}
        if duplicate:
            answer["isDuplicate"] = True
        return self._json(200, answer)
