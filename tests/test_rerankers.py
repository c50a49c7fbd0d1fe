"""Rerankers: the real Cohere / Voyage SDKs and httpx against local provider-shaped servers,
the local cross-encoder's configuration errors, the fake, and resolve_reranker."""

from __future__ import annotations

import importlib.util
import json
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from manowar_memory.errors import ConfigurationError, InvalidInputError, MissingDependencyError, RerankError
from manowar_memory.rerankers import (
    CloudflareReranker,
    CrossEncoderReranker,
    FakeReranker,
    Reranker,
    RerankResult,
    resolve_reranker,
)
from manowar_memory.rerankers.cohere import CohereReranker
from manowar_memory.rerankers.voyage import VoyageReranker
from manowar_memory.testing.provider_servers import (
    CloudflareServer,
    CohereServer,
    ProviderServer,
    VoyageServer,
)

KEY = "test-rerank-key"


def needs(module: str) -> None:
    """Skip when ``module`` is not installed (without importing it: torch is slow to import)."""
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        pytest.skip(f"{module} is not installed")
ACCOUNT = "acc-123"
QUERY = "where does alice live"
DOCS = [
    "Bob likes green tea",  # 0 shared words
    "Alice lives in Berlin, where she works",  # where, alice (live != lives)
    "where does alice live? in Berlin",  # all four words
    "Alice",  # alice
]
# word-overlap scores from the servers: doc2 1.0, doc1 0.5, doc3 0.25, doc0 0.0
EXPECTED_ORDER = [2, 1, 3, 0]

CREDENTIAL_ENV = [
    "CO_API_KEY", "COHERE_API_KEY", "VOYAGE_API_KEY",
    "CF_API_TOKEN", "CLOUDFLARE_API_KEY", "CF_ACCOUNT_ID", "CLOUDFLARE_ACCOUNT_ID",
]


@pytest.fixture(autouse=True)
def _no_real_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in CREDENTIAL_ENV:
        monkeypatch.delenv(name, raising=False)


# One entry per hosted provider: (server class, reranker factory, expected request path prefix).
Factory = Callable[[ProviderServer, float], Reranker]


def _cohere(server: ProviderServer, timeout: float = 0.8) -> Reranker:
    return CohereReranker(api_key=KEY, base_url=server.base_url, timeout=timeout)


def _voyage(server: ProviderServer, timeout: float = 0.8) -> Reranker:
    return VoyageReranker(api_key=KEY, base_url=server.base_url, timeout=timeout)


def _cloudflare(server: ProviderServer, timeout: float = 0.8) -> Reranker:
    return CloudflareReranker(api_token=KEY, account_id=ACCOUNT, base_url=server.base_url, timeout=timeout)


PROVIDERS = {
    "cohere": (CohereServer, _cohere),
    "voyage": (VoyageServer, _voyage),
    "cloudflare": (CloudflareServer, _cloudflare),
}
SDKS = {"cohere": "cohere", "voyage": "voyageai", "cloudflare": "httpx"}


@pytest.fixture(params=list(PROVIDERS))
def provider(request: pytest.FixtureRequest) -> Iterator[tuple[str, ProviderServer, Factory]]:
    needs(SDKS[request.param])
    server_cls, factory = PROVIDERS[request.param]
    with server_cls(api_key=KEY) as server:
        yield request.param, server, factory


def documents_sent(name: str, body: dict[str, Any]) -> list[str]:
    if name == "cloudflare":
        return [c["text"] for c in body["contexts"]]
    return body["documents"]


# -- hosted providers: success ----------------------------------------------------------------


def test_hosted_rerank_orders_best_first_and_sends_the_request(provider: tuple[str, ProviderServer, Factory]) -> None:
    name, server, factory = provider
    reranker = factory(server, 0.8)
    results = reranker.rerank(QUERY, DOCS)

    assert [r.index for r in results] == EXPECTED_ORDER
    assert [r.score for r in results] == [1.0, 0.5, 0.25, 0.0]
    assert all(isinstance(r, RerankResult) for r in results)
    assert isinstance(reranker, Reranker)

    request = server.last_request
    body = request.json
    assert request.headers["authorization"] == f"Bearer {KEY}"
    assert body["query"] == QUERY
    assert documents_sent(name, body) == DOCS
    if name == "cohere":
        assert request.path == "/v2/rerank"
        assert body["model"] == "rerank-v3.5" and body["top_n"] == 4
        assert reranker.model_id == "cohere:rerank-v3.5"
    elif name == "voyage":
        assert request.path == "/v1/rerank"
        assert body["model"] == "rerank-2.5" and body["top_k"] == 4
        assert reranker.model_id == "voyage:rerank-2.5"
    else:
        assert request.path == f"/client/v4/accounts/{ACCOUNT}/ai/run/@cf/baai/bge-reranker-base"
        assert body["top_k"] == 4
        assert reranker.model_id == "cloudflare:@cf/baai/bge-reranker-base"


def test_hosted_rerank_top_k(provider: tuple[str, ProviderServer, Factory]) -> None:
    name, server, factory = provider
    results = factory(server, 0.8).rerank(QUERY, DOCS, top_k=2)
    assert [r.index for r in results] == EXPECTED_ORDER[:2]
    body = server.last_request.json
    assert body["top_n" if name == "cohere" else "top_k"] == 2


def test_hosted_rerank_empty_documents_makes_no_request(provider: tuple[str, ProviderServer, Factory]) -> None:
    _, server, factory = provider
    assert factory(server, 0.8).rerank(QUERY, []) == []
    assert server.requests == []


def test_hosted_rerank_uses_provider_scores(provider: tuple[str, ProviderServer, Factory]) -> None:
    _, server, factory = provider
    server.scores = [0.1, 0.9, 0.3]
    results = factory(server, 0.8).rerank("anything", ["a", "b", "c"])
    assert [(r.index, r.score) for r in results] == [(1, 0.9), (2, 0.3), (0, 0.1)]


# -- hosted providers: failures ---------------------------------------------------------------


@pytest.mark.parametrize("status", [401, 429, 500])
def test_hosted_http_errors_raise_rerank_error(provider: tuple[str, ProviderServer, Factory], status: int) -> None:
    _, server, factory = provider
    server.fail(status)
    reranker = factory(server, 0.8)
    with pytest.raises(RerankError) as info:
        reranker.rerank(QUERY, DOCS)
    assert f"HTTP {status}" in str(info.value)
    assert reranker.model_id in str(info.value)
    assert len(server.requests) == 1  # no retries


def test_hosted_timeout_raises_within_the_timeout(provider: tuple[str, ProviderServer, Factory]) -> None:
    _, server, factory = provider
    server.delay(60.0)  # cut short when the fixture stops the server
    reranker = factory(server, 0.8)
    with pytest.raises(RerankError, match=r"timed out after 0\.3 s"):
        reranker.rerank(QUERY, DOCS, timeout=0.3)  # the call's timeout overrides the default
    assert len(server.requests) == 1 and server.delays_finished == 0  # gave up while the server still waited


def test_hosted_default_timeout_is_enforced(provider: tuple[str, ProviderServer, Factory]) -> None:
    _, server, factory = provider
    server.delay(60.0)
    reranker = factory(server, 0.8)
    assert reranker.timeout == 0.8  # type: ignore[attr-defined]
    with pytest.raises(RerankError, match=r"timed out after 0\.8 s"):
        reranker.rerank(QUERY, DOCS)
    assert len(server.requests) == 1 and server.delays_finished == 0


def test_hosted_not_json_raises(provider: tuple[str, ProviderServer, Factory]) -> None:
    _, server, factory = provider
    server.malformed(b"<html>upstream proxy error</html>")
    with pytest.raises(RerankError):
        factory(server, 0.8).rerank(QUERY, DOCS)


def test_hosted_unusable_scores_raise(provider: tuple[str, ProviderServer, Factory]) -> None:
    name, server, factory = provider
    if name == "cloudflare":
        response = [{"id": "x", "score": 0.5}, {"id": 99, "score": 1}]
        body: dict[str, Any] = {"success": True, "result": {"response": response}}
    elif name == "voyage":
        body = {"data": [], "usage": {"total_tokens": 1}}
    else:
        body = {"id": "r", "results": [], "meta": {}}
    server.malformed(json.dumps(body))
    with pytest.raises(RerankError, match="no usable scores"):
        factory(server, 0.8).rerank(QUERY, DOCS)


def test_hosted_connection_refused_raises() -> None:
    needs("cohere")
    needs("voyageai")
    for server_cls, factory in PROVIDERS.values():
        server = server_cls().start()
        reranker = factory(server, 0.8)
        server.stop()
        with pytest.raises(RerankError):
            reranker.rerank(QUERY, DOCS)


def test_cloudflare_success_false_raises() -> None:
    with CloudflareServer() as server:
        error = {"code": 5006, "message": "model overloaded"}
        server.malformed(json.dumps({"success": False, "errors": [error], "result": None}))
        with pytest.raises(RerankError, match="model overloaded"):
            _cloudflare(server).rerank(QUERY, DOCS)


def test_cloudflare_keeps_only_integer_ids_with_finite_scores() -> None:
    with CloudflareServer() as server:
        server.malformed(
            '{"success": true, "result": {"response": ['
            '{"id": 1, "score": 0.2}, {"id": "0", "score": 0.9}, {"id": 2, "score": "NaN"}, {"id": 0, "score": 0.7}]}}'
        )
        results = _cloudflare(server).rerank(QUERY, ["a", "b", "c"])
    assert results == [RerankResult(0, 0.7), RerankResult(1, 0.2)]


def test_cloudflare_credentials_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLOUDFLARE_API_KEY", "fallback-token")
    monkeypatch.setenv("CLOUDFLARE_ACCOUNT_ID", "fallback-account")
    monkeypatch.setenv("CF_API_TOKEN", "primary-token")
    with CloudflareServer() as server:
        reranker = CloudflareReranker(model="@cf/baai/bge-reranker-v2-m3", base_url=server.base_url)
        reranker.rerank(QUERY, DOCS)
        request = server.last_request
    assert request.headers["authorization"] == "Bearer primary-token"
    assert request.path == "/client/v4/accounts/fallback-account/ai/run/@cf/baai/bge-reranker-v2-m3"


def test_cohere_and_voyage_keys_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    needs("cohere")
    needs("voyageai")
    monkeypatch.setenv("COHERE_API_KEY", "cohere-env")
    monkeypatch.setenv("VOYAGE_API_KEY", "voyage-env")
    with CohereServer() as cohere_server, VoyageServer() as voyage_server:
        CohereReranker(base_url=cohere_server.base_url).rerank(QUERY, DOCS)
        VoyageReranker(base_url=voyage_server.base_url).rerank(QUERY, DOCS)
        assert cohere_server.last_request.headers["authorization"] == "Bearer cohere-env"
        assert voyage_server.last_request.headers["authorization"] == "Bearer voyage-env"


@pytest.mark.parametrize(
    ("build", "needle"),
    [
        (lambda: CohereReranker(base_url="http://127.0.0.1:9"), "CO_API_KEY"),
        (lambda: VoyageReranker(base_url="http://127.0.0.1:9/v1"), "VOYAGE_API_KEY"),
        (lambda: CloudflareReranker(base_url="http://127.0.0.1:9"), "CF_API_TOKEN or CLOUDFLARE_API_KEY"),
        (lambda: CloudflareReranker(api_token="t", base_url="http://127.0.0.1:9"), "CF_ACCOUNT_ID"),
    ],
    ids=["cohere", "voyage", "cloudflare-token", "cloudflare-account"],
)
def test_missing_credentials_raise_rerank_error(build: Callable[[], Reranker], needle: str) -> None:
    needs("cohere")
    needs("voyageai")
    reranker = build()  # construction works without credentials: the ranking stage fails soft later
    with pytest.raises(RerankError, match=needle):
        reranker.rerank(QUERY, DOCS)


def test_missing_sdks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "cohere", None)
    monkeypatch.setitem(sys.modules, "voyageai", None)
    with pytest.raises(MissingDependencyError, match=r"manowar-memory\[cohere\]"):
        CohereReranker(api_key=KEY)
    with pytest.raises(MissingDependencyError, match=r"manowar-memory\[voyage\]"):
        VoyageReranker(api_key=KEY)


def test_bad_arguments() -> None:
    reranker = FakeReranker()
    with pytest.raises(InvalidInputError):
        reranker.rerank(QUERY, "a single string")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError):
        reranker.rerank(QUERY, DOCS, top_k=0)
    with pytest.raises(InvalidInputError):
        reranker.rerank(QUERY, DOCS, timeout=0)


# -- local cross-encoder ----------------------------------------------------------------------


def test_cross_encoder_missing_path_is_a_clear_error(tmp_path: Path) -> None:
    missing = tmp_path / "no-cross-encoder"
    with pytest.raises(ConfigurationError, match="does not exist") as info:
        CrossEncoderReranker(missing)
    assert str(missing) in str(info.value)
    assert "never downloaded" in str(info.value)
    with pytest.raises(ConfigurationError, match="needs model_path"):
        CrossEncoderReranker(None)
    with pytest.raises(ConfigurationError, match="does not exist"):
        resolve_reranker(f"local:{missing}")


def test_cross_encoder_unloadable_directory_raises_rerank_error(tmp_path: Path) -> None:
    needs("sentence_transformers")
    reranker = CrossEncoderReranker(tmp_path)  # exists, but holds no model
    assert reranker.model_id == f"local:{tmp_path}"
    with pytest.raises(RerankError, match="could not load a cross-encoder"):
        reranker.rerank(QUERY, DOCS)


def test_cross_encoder_scores_with_a_stub_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    needs("sentence_transformers")
    from manowar_memory.rerankers import cross_encoder

    class Stub:
        def predict(self, pairs: list[tuple[str, str]], **kwargs: Any) -> list[float]:
            return [float(len(doc)) for _, doc in pairs]

    seen: list[str] = []
    monkeypatch.setattr(cross_encoder, "_load_cross_encoder", lambda path, *a: seen.append(path) or Stub())
    results = CrossEncoderReranker(tmp_path).rerank("q", ["aa", "a", "aaa"], top_k=2)
    assert results == [RerankResult(2, 3.0), RerankResult(0, 2.0)]
    assert seen == [str(tmp_path)]


# -- fake -------------------------------------------------------------------------------------


def test_fake_reranker_is_deterministic_term_overlap() -> None:
    reranker = FakeReranker()
    first = reranker.rerank("alice berlin", ["bob in paris", "alice in berlin", "alice"])
    assert first == reranker.rerank("alice berlin", ["bob in paris", "alice in berlin", "alice"])
    assert [r.index for r in first] == [1, 2, 0]
    assert first[0].score == 1.0 and first[1].score == 0.5
    assert reranker.calls == 2
    assert reranker.last_query == "alice berlin"


def test_fake_reranker_fail_options() -> None:
    with pytest.raises(RerankError, match="configured to fail"):
        FakeReranker(fail=True).rerank(QUERY, DOCS)
    with pytest.raises(RerankError, match="quota exceeded"):
        FakeReranker(fail="quota exceeded").rerank(QUERY, DOCS)
    with pytest.raises(KeyError):
        FakeReranker(fail=KeyError("contract breaker")).rerank(QUERY, DOCS)


def test_fake_reranker_delay_and_timeout() -> None:
    with pytest.raises(RerankError, match=r"timed out after 0\.1 s"):
        FakeReranker(delay=1.0).rerank(QUERY, DOCS, timeout=0.1)
    # a hung reranker ignores its timeout: it answers once released, however long that takes
    release = threading.Event()
    hung = FakeReranker(hang_until=release)
    worker = threading.Thread(target=lambda: hung.rerank(QUERY, DOCS, timeout=0.05))
    worker.start()
    assert not release.wait(0.3) and hung.finished == 0  # still hanging well past its 50 ms timeout
    release.set()
    worker.join(10)
    assert hung.finished == 1
    assert len(FakeReranker(delay=0.05, honor_timeout=False).rerank(QUERY, DOCS, timeout=0.01)) == len(DOCS)


def test_fake_reranker_fixed_scores() -> None:
    results = FakeReranker(scores=[0.2, 0.8]).rerank("q", ["a", "b", "c"])
    assert results == [RerankResult(1, 0.8), RerankResult(0, 0.2)]


# -- resolve_reranker -------------------------------------------------------------------------


def test_resolve_reranker_specs() -> None:
    needs("cohere")
    needs("voyageai")
    assert resolve_reranker(None) is None
    fake = FakeReranker()
    assert resolve_reranker(fake) is fake
    assert isinstance(resolve_reranker("fake"), FakeReranker)

    cohere = resolve_reranker("cohere")
    assert isinstance(cohere, CohereReranker) and cohere.model_id == "cohere:rerank-v3.5"
    cohere3 = resolve_reranker("cohere:rerank-english-v3.0", timeout=0.5)
    assert cohere3 is not None and cohere3.model_id == "cohere:rerank-english-v3.0"
    assert cohere3.timeout == 0.5  # type: ignore[attr-defined]

    voyage = resolve_reranker("voyage:rerank-2.5-lite")
    assert isinstance(voyage, VoyageReranker) and voyage.model_id == "voyage:rerank-2.5-lite"
    assert resolve_reranker("voyage").model_id == "voyage:rerank-2.5"  # type: ignore[union-attr]

    cloudflare = resolve_reranker("cloudflare")
    assert isinstance(cloudflare, CloudflareReranker)
    assert cloudflare.model_id == "cloudflare:@cf/baai/bge-reranker-base"
    assert resolve_reranker("cloudflare:@cf/baai/bge-reranker-v2-m3").model_id == (  # type: ignore[union-attr]
        "cloudflare:@cf/baai/bge-reranker-v2-m3"
    )


def test_resolve_reranker_local_path(tmp_path: Path) -> None:
    needs("sentence_transformers")
    reranker = resolve_reranker(f"local:{tmp_path}")
    assert isinstance(reranker, CrossEncoderReranker)
    assert reranker.path == tmp_path


@pytest.mark.parametrize("spec", ["openai", "bm25:foo", "", "local"])
def test_resolve_reranker_rejects_unknown_specs(spec: str) -> None:
    with pytest.raises(ConfigurationError):
        resolve_reranker(spec)


def test_resolve_reranker_rejects_other_objects() -> None:
    with pytest.raises(ConfigurationError, match="Reranker"):
        resolve_reranker(42)  # type: ignore[arg-type]


# -- provider servers -------------------------------------------------------------------------


def test_server_scripted_failures_expire_and_requests_are_recorded() -> None:
    needs("cohere")
    needs("voyageai")
    with VoyageServer() as server:
        server.fail(503, times=1)
        reranker = _voyage(server)
        with pytest.raises(RerankError, match="HTTP 503"):
            reranker.rerank(QUERY, DOCS)
        assert [r.index for r in reranker.rerank(QUERY, DOCS)] == EXPECTED_ORDER
        assert len(server.requests) == 2
        assert server.requests[0].json == server.requests[1].json
    with pytest.raises(RuntimeError):
        _ = server.port  # stopped
