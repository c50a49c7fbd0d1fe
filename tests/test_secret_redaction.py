"""Provider credentials never reach an exception, a degradation, a log line or a stored job
document, even when the upstream echoes the request's headers in its error answer.

Every provider runs against its local fake server told to answer with an error body that
echoes the request headers (``ProviderServer.echo_headers``): the Voyage embedder, the
Cohere, Voyage and Cloudflare rerankers, and Pinata pinning from ``archive_create`` /
``archive_pin`` on SQLite and MongoDB (the raw stored job document is read back)."""

from __future__ import annotations

import json
import logging
import traceback
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from manowar_memory import MemoryEngine, Scope
from manowar_memory.config import MemoryConfig
from manowar_memory.errors import EmbeddingError, ManowarError, PinningError, RerankError, ToolCallError
from manowar_memory.jobs import ArchivePinParams, archive_pin, job_store, run_job
from manowar_memory.redaction import REDACTED, RedactingFilter, redact, redact_value, register_secret
from manowar_memory.testing.provider_servers import (
    CloudflareServer,
    CohereServer,
    PinataServer,
    ProviderServer,
    VoyageServer,
)

from test_jobs import AGENT, STORES, _add, _job_tools, _row, make_store

# keys shaped like no known credential pattern: only the configured value can find them
VOYAGE_KEY = "voyage-key-Quiet-Heron-Lantern"
COHERE_KEY = "cohere-key-Amber-Falcon-Meadow"
CF_TOKEN = "cloudflare-token-Silver-Otter-Canyon"
PINATA_JWT = ("eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJ1c2VySW5mb3JtYXRpb24iOnsiaWQiOiJ0ZXN0In19"
              ".c2lnbmF0dXJlLW9mLXRoZS1waW5hdGEtand0")
PINATA_KEY, PINATA_SECRET = "pinata-key-Brass-Willow-Harbor", "pinata-secret-Copper-Lynx-Summit"
SECRETS = (VOYAGE_KEY, COHERE_KEY, CF_TOKEN, PINATA_JWT, PINATA_KEY, PINATA_SECRET)
CREDENTIAL_ENV = ("VOYAGE_API_KEY", "CO_API_KEY", "COHERE_API_KEY", "CO_API_URL", "CF_API_TOKEN",
                  "CLOUDFLARE_API_KEY", "CF_ACCOUNT_ID", "CLOUDFLARE_ACCOUNT_ID", "PINATA_JWT", "PINATA_API_KEY",
                  "PINATA_API_Key", "PINATA_API_SECRET", "PINATA_API_URL")
SCOPE = Scope(agent_wallet="agent-redact", user_address="alice")


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in CREDENTIAL_ENV:
        monkeypatch.delenv(name, raising=False)


def assert_clean(*texts: Any) -> None:
    """No secret in any of ``texts`` (strings, or anything JSON-able)."""
    for text in texts:
        blob = text if isinstance(text, str) else json.dumps(text, default=str)
        for secret in SECRETS:
            assert secret not in blob, f"a credential leaked: {blob[:500]}"
            assert secret[:12] not in blob, f"part of a credential leaked: {blob[:500]}"


def exception_chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and every exception reachable from it through ``__cause__`` and ``__context__``
    (suppressed or not: error trackers read both)."""
    seen: list[BaseException] = []
    todo: list[BaseException | None] = [exc]
    while todo:
        item = todo.pop()
        if item is None or any(item is s for s in seen):
            continue
        seen.append(item)
        todo += [item.__cause__, item.__context__]
    return seen


def exception_texts(exc: BaseException) -> list[str]:
    """Everything an exception shows or holds: the traceback with causes, and for every
    exception in its whole chain its message, repr, args, attributes and the headers of an
    HTTP request it carries."""
    texts = ["".join(traceback.format_exception(type(exc), exc, exc.__traceback__))]
    for item in exception_chain(exc):
        texts += [str(item), repr(item), repr(item.args), repr(getattr(item, "__dict__", {}))]
        for name in ("request", "response", "headers", "body"):
            try:
                value = getattr(item, name, None)
            except Exception:  # noqa: BLE001 - httpx raises when an error has no request set
                continue
            headers = getattr(value, "headers", None)
            texts += [repr(value), repr(dict(headers)) if headers is not None else ""]
    return texts


def library_logs(caplog: pytest.LogCaptureFixture) -> str:
    return "\n".join(f"{r.getMessage()} {r.exc_text or ''}" for r in caplog.records) + caplog.text


# ------------------------------------------------------------------ the helper
def test_redact_removes_registered_values_and_credential_shapes() -> None:
    register_secret("plain-configured-value")
    text = ('said: {"authorization": "Bearer abcDEF123456ghi", "x-api-key": "k3y-0123456789", '
            '"pinata_secret_api_key": "s3cr3t-value-99"} url=https://h.test/v1?api_key=zz9988776655&q=1 '
            'mongodb://bob:hunter22@db:27017 token eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.sig_nature '
            'raw plain-configured-value and sk-proj-abcdefghijklmnop1234 Authorization: Basic dXNlcjpwYXNz')
    out = redact(text)
    for leaked in ("abcDEF123456ghi", "k3y-0123456789", "s3cr3t-value-99", "zz9988776655", "hunter22",
                   "eyJhbGciOiJIUzI1NiJ9", "plain-configured-value", "sk-proj-abcdefghijklmnop1234", "dXNlcjpwYXNz"):
        assert leaked not in out, leaked
    assert out.count(REDACTED) >= 9 and "https://h.test/v1?api_key=" in out and "mongodb://bob:" in out
    assert redact(out) == out, "redacting twice changes nothing"
    assert redact("secret-only-here", ["secret-only-here"]) == REDACTED
    register_secret("expired")  # a word is never taken for a secret (it would blank out plain text)
    # ordinary messages keep their words
    for plain in ("check CO_API_KEY or api_key", "the bearer token has expired", "metadata.token: expected a string",
                  '{"usage": {"total_tokens": 123456789}}', "HTTP 401 AuthenticationError"):
        assert redact(plain) == plain
    assert redact_value({"a": ["Bearer zz-0123456789"], "b": 3}) == {"a": [f"Bearer {REDACTED}"], "b": 3}


def test_every_library_error_redacts_its_message() -> None:
    err = ManowarError('upstream: {"authorization": "Bearer Zq0123456789abcdef"}')
    assert "Zq0123456789abcdef" not in str(err) and REDACTED in str(err)


def test_library_log_lines_are_redacted(caplog: pytest.LogCaptureFixture) -> None:
    import manowar_memory.jobs.schedules
    import manowar_memory.stores.mongo  # noqa: F401

    register_secret(COHERE_KEY)
    caplog.set_level(logging.DEBUG)
    for name in ("manowar_memory", "manowar_memory.mongo", "manowar_memory.schedules"):
        log = logging.getLogger(name)
        assert any(isinstance(f, RedactingFilter) for f in log.filters), name
        log.warning("call failed: %s", f"Bearer {COHERE_KEY}")
        try:
            raise RuntimeError(f"upstream echoed x-api-key: {COHERE_KEY}")
        except RuntimeError:
            log.exception("background task failed with %s", COHERE_KEY)
    # only the library's own records: a pymongo client another test left open in this worker
    # may log its heartbeats at DEBUG meanwhile
    assert len([r for r in caplog.records if r.name.startswith("manowar_memory")]) == 6
    assert_clean(library_logs(caplog))
    assert REDACTED in caplog.text and "RuntimeError" in caplog.text


# ------------------------------------------------------------------ embedder
@pytest.fixture
def voyage() -> Iterator[VoyageServer]:
    pytest.importorskip("voyageai")
    with VoyageServer(api_key=VOYAGE_KEY, default_dimension=8) as server:
        yield server


@pytest.mark.parametrize("status", [401, 500])
def test_voyage_embedder_error_echoing_headers_is_redacted(voyage: VoyageServer, status: int,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    from manowar_memory.embeddings.voyage import VoyageEmbedder

    caplog.set_level(logging.DEBUG)
    embedder = VoyageEmbedder(api_key=VOYAGE_KEY, base_url=voyage.base_url, dimensions=8)
    voyage.echo_headers(status)
    with pytest.raises(EmbeddingError) as info:
        embedder.embed(["hello"])
    assert voyage.last_request.headers["authorization"] == f"Bearer {VOYAGE_KEY}"
    assert REDACTED in str(info.value), str(info.value)
    assert_clean(*exception_texts(info.value), library_logs(caplog))
    # through the engine: the error the caller sees is clean too
    with MemoryEngine(store="sqlite:///:memory:", embedder=embedder) as engine:
        with pytest.raises(EmbeddingError) as info:
            engine.remember(SCOPE, "The user likes tea.")
        assert_clean(*exception_texts(info.value))
        with pytest.raises(EmbeddingError) as info:
            engine.pre_turn("tea", SCOPE)
        assert_clean(*exception_texts(info.value), library_logs(caplog))


async def test_voyage_async_embed_error_is_redacted(voyage: VoyageServer) -> None:
    from manowar_memory.embeddings.voyage import VoyageEmbedder

    embedder = VoyageEmbedder(api_key=VOYAGE_KEY, base_url=voyage.base_url, dimensions=8)
    voyage.echo_headers(401)
    with pytest.raises(EmbeddingError) as info:
        await embedder.aembed(["hello"])
    assert REDACTED in str(info.value)
    assert_clean(*exception_texts(info.value))


# ------------------------------------------------------------------ rerankers
def _cohere(server: ProviderServer) -> Any:
    pytest.importorskip("cohere")
    from manowar_memory.rerankers.cohere import CohereReranker

    return CohereReranker(api_key=COHERE_KEY, base_url=server.base_url, timeout=5)


def _voyage_rr(server: ProviderServer) -> Any:
    pytest.importorskip("voyageai")
    from manowar_memory.rerankers.voyage import VoyageReranker

    return VoyageReranker(api_key=VOYAGE_KEY, base_url=server.base_url, timeout=5)


def _cloudflare(server: ProviderServer) -> Any:
    from manowar_memory.rerankers.cloudflare import CloudflareReranker

    return CloudflareReranker(api_token=CF_TOKEN, account_id="acct-1", base_url=server.base_url, timeout=5)


RERANKERS: dict[str, tuple[type[ProviderServer], Callable[[ProviderServer], Any], str]] = {
    "cohere": (CohereServer, _cohere, COHERE_KEY),
    "voyage": (VoyageServer, _voyage_rr, VOYAGE_KEY),
    "cloudflare": (CloudflareServer, _cloudflare, CF_TOKEN),
}


@pytest.mark.parametrize("status", [401, 500])
@pytest.mark.parametrize("name", list(RERANKERS))
def test_reranker_error_echoing_headers_is_redacted_in_errors_degradations_and_logs(
        name: str, status: int, caplog: pytest.LogCaptureFixture) -> None:
    server_cls, factory, key = RERANKERS[name]
    caplog.set_level(logging.DEBUG)
    with server_cls(api_key=key) as server:
        reranker = factory(server)
        server.echo_headers(status)
        with pytest.raises(RerankError) as info:
            reranker.rerank("green tea", ["green tea", "black coffee", "tea time"])
        assert server.last_request.headers["authorization"] == f"Bearer {key}"
        assert REDACTED in str(info.value), str(info.value)
        assert_clean(*exception_texts(info.value))
        config = MemoryConfig(retrieval={"rerank_dominance_delta": 10.0})
        with MemoryEngine(store="sqlite:///:memory:", embedder="fake", reranker=reranker, config=config) as engine:
            for fact in ("The user likes green tea.", "The user drinks tea at noon.", "Tea is the user's habit.",
                         "The user buys tea leaves."):
                engine.remember(SCOPE, fact)
            result = engine.pre_turn("tea", SCOPE, rerank=True)
            _, notes = engine.search("tea", SCOPE, rerank=True)
        failed = [n for n in result.degradations if n.startswith("rerank skipped") and "failed" in n]
        assert failed and REDACTED in failed[0], result.degradations
        assert_clean(result.degradations, notes, result.model_dump(mode="json"), library_logs(caplog))


# ------------------------------------------------------------------ Pinata and the job document
@pytest.fixture(params=STORES)
def store(request: pytest.FixtureRequest) -> Iterator[Any]:
    s = make_store(request, request.param)
    yield s
    s.close()


def raw_job_document(store: Any, job_id: str) -> str:
    """The job document exactly as the store holds it."""
    if getattr(store, "name", None) == "mongo":
        doc = store.jobs.find_one({"jobId": job_id})
        return json.dumps(doc, default=str)
    with store._conn() as conn:
        return str(conn.execute("SELECT doc FROM jobs WHERE job_id = ?", (job_id,)).fetchone()[0])


@pytest.fixture(params=["jwt", "key+secret"])
def pinata_env(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[PinataServer]:
    with PinataServer(jwt=PINATA_JWT, api_key=PINATA_KEY, api_secret=PINATA_SECRET) as server:
        if request.param == "jwt":
            monkeypatch.setenv("PINATA_JWT", PINATA_JWT)
        else:
            monkeypatch.setenv("PINATA_API_KEY", PINATA_KEY)
            monkeypatch.setenv("PINATA_API_SECRET", PINATA_SECRET)
        monkeypatch.setenv("PINATA_API_URL", server.url)
        monkeypatch.setenv("PINATA_MAX_ATTEMPTS", "2")
        monkeypatch.setenv("PINATA_TIMEOUT_SECONDS", "5")
        yield server


@pytest.mark.parametrize("status", [401, 500])
def test_pinata_echo_never_reaches_the_stored_job_document(store: Any, pinata_env: PinataServer, status: int,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    _add(store, *[_row(f"pinned fact {i}", age_days=1) for i in range(3)])
    pinata_env.echo_headers(status)
    job = run_job(store, "archive_create", {"agent_wallet": AGENT, "pin": True})
    sent = pinata_env.last_request.headers
    assert sent.get("authorization") == f"Bearer {PINATA_JWT}" or sent.get("pinata_secret_api_key") == PINATA_SECRET
    assert job.status == "completed" and job.data["pinned"] is False
    assert REDACTED in job.data["pin"]["reason"], job.data["pin"]["reason"]
    assert_clean(job.model_dump(mode="json"), raw_job_document(store, job.job_id))
    assert_clean(store.get_job(job.job_id).model_dump(mode="json"))

    # archive_pin fails: the error (and the tool's structured error) is redacted
    with pytest.raises(PinningError) as info:
        archive_pin(job_store(store), ArchivePinParams(archive_id=job.data["archiveId"]))
    assert REDACTED in str(info.value), str(info.value)
    with pytest.raises(ToolCallError) as tool_info:
        _job_tools(store)["memory_archive_pin"].call(archive_id=job.data["archiveId"])
    assert REDACTED in tool_info.value.to_json()
    assert_clean(*exception_texts(info.value), *exception_texts(tool_info.value), tool_info.value.payload,
                 library_logs(caplog))


def test_pinata_client_error_is_redacted(pinata_env: PinataServer) -> None:
    from manowar_memory.jobs import PinataClient

    pinata_env.echo_headers(403)
    with PinataClient.from_env() as client, pytest.raises(PinningError) as info:
        client.pin_json({"a": 1})
    assert REDACTED in str(info.value)
    assert_clean(*exception_texts(info.value))


def test_a_job_document_never_holds_a_credential_whatever_wrote_it(store: Any) -> None:
    from manowar_memory.records import Job

    register_secret(PINATA_SECRET)
    job = Job(job_id="memjob_secret", type="archive_create", status="failed",
              error=f"upstream said pinata_secret_api_key: {PINATA_SECRET}",
              data={"pin": {"reason": f"echo Authorization: Bearer {PINATA_JWT}"}, "ids": [PINATA_SECRET]})
    store.put_job(job)
    assert_clean(raw_job_document(store, "memjob_secret"), store.get_job("memjob_secret").model_dump(mode="json"))


def test_a_failed_background_extraction_reports_and_logs_no_credential(caplog: pytest.LogCaptureFixture) -> None:
    """A custom extractor whose model client raises with the request echoed (not a library
    error): FlushResult.errors and the warning the engine logs are redacted."""

    class EchoingExtractor:
        name = "echoing"

        def extract(self, messages: Any) -> list[Any]:
            raise RuntimeError(f"upstream 401: {{'authorization': 'Bearer {COHERE_KEY}', 'x-api-key': '{CF_TOKEN}'}}")

    register_secret(COHERE_KEY)
    caplog.set_level(logging.DEBUG)
    with MemoryEngine(store="sqlite:///:memory:", embedder="fake", extractor=EchoingExtractor()) as engine:
        engine.post_turn(SCOPE.with_thread("t1"), [{"role": "user", "content": "I moved to Lisbon in June."}])
        result = engine.flush()
    assert result.failed == 1 and REDACTED in result.errors[0], result.errors
    assert_clean(result.errors, library_logs(caplog))


# ------------------------------------------------------------------ nothing of the request in an exception chain
def _closed_url() -> str:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"  # nothing listens there now: every request is refused


@pytest.mark.parametrize("name", list(RERANKERS))
def test_a_reranker_error_carries_no_exception_chain(name: str) -> None:
    """The SDK's or httpx's exception (its request holds ``Authorization: Bearer <key>``, its
    body may echo it) is reachable neither as __cause__ nor as __context__."""
    server_cls, factory, key = RERANKERS[name]
    with server_cls(api_key=key) as server:
        reranker = factory(server)
        server.echo_headers(401)
        with pytest.raises(RerankError) as info:
            reranker.rerank("green tea", ["green tea", "black coffee"])
    assert exception_chain(info.value) == [info.value]
    assert_clean(*exception_texts(info.value))


def test_a_transport_error_leaves_no_request_in_the_chain(monkeypatch: pytest.MonkeyPatch) -> None:
    from manowar_memory.jobs import PinataClient
    from manowar_memory.jobs.pinning import PinataCredentials
    from manowar_memory.rerankers.cloudflare import CloudflareReranker

    reranker = CloudflareReranker(api_token=CF_TOKEN, account_id="acct-1", base_url=_closed_url(), timeout=5)
    with pytest.raises(RerankError) as info:
        reranker.rerank("green tea", ["green tea", "black coffee"])
    assert exception_chain(info.value) == [info.value]
    assert_clean(*exception_texts(info.value))
    client = PinataClient(PinataCredentials(jwt=PINATA_JWT), base_url=_closed_url(), max_attempts=1, timeout=5)
    with client, pytest.raises(PinningError) as pin_info:
        client.pin_json({"a": 1})
    assert exception_chain(pin_info.value) == [pin_info.value]
    assert_clean(*exception_texts(pin_info.value))


def test_a_custom_embedders_error_is_wrapped_without_its_chain() -> None:
    """A custom embedder whose HTTP client raises with the request attached."""
    import httpx

    from manowar_memory.embeddings.base import BaseEmbedder

    class Leaky(BaseEmbedder):
        model_id = "leaky"

        def _embed_batch(self, texts: list[str], input_type: str) -> list[list[float]]:
            request = httpx.Request("POST", "http://upstream.invalid/embed",
                                    headers={"Authorization": f"Bearer {VOYAGE_KEY}"})
            raise httpx.ConnectError("connection refused", request=request)

    with MemoryEngine(store="sqlite:///:memory:", embedder=Leaky()) as engine, \
            pytest.raises(EmbeddingError) as info:
        engine.remember(SCOPE, "The user likes tea.")
    assert exception_chain(info.value) == [info.value]
    assert_clean(*exception_texts(info.value))
