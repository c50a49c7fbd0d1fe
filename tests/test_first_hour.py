"""A new user's first commands, with no flags: the best local model installed is used, so recall
finds a memory by meaning; rows written keyword-only are found after `manowar reembed`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from manowar_memory.cli import cli
from manowar_memory.embeddings import EMBEDDER_ENV, installed_local_embedder

pytestmark = [pytest.mark.local_model, pytest.mark.xdist_group("onnx-export")]

QUESTION = "what time is the daily meeting?"


@pytest.fixture(scope="module")
def model_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One ONNX export for the module, outside the user's cache."""
    return tmp_path_factory.mktemp("first-hour-cache")


@pytest.fixture
def new_user(tmp_path: Path, model_cache: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[CliRunner]:
    """No MANOWAR_EMBEDDER, a fresh $MANOWAR_HOME (the default store), a local model installed."""
    monkeypatch.delenv(EMBEDDER_ENV, raising=False)
    monkeypatch.setenv("MANOWAR_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("MANOWAR_CACHE_DIR", str(model_cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    (tmp_path / "home").mkdir()
    if installed_local_embedder() is None:
        pytest.skip("no local embedder is installed (pip install 'manowar-memory[onnx]')")
    yield CliRunner()


def _ok(runner: CliRunner, *args: str) -> str:
    result = runner.invoke(cli, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def test_remember_then_recall_by_meaning_with_no_flags(new_user: CliRunner) -> None:
    assert "stored vec_" in _ok(new_user, "remember", "Standup is at 9:30", "--agent", "me")
    recalled = _ok(new_user, "recall", QUESTION, "--agent", "me")
    assert "Standup is at 9:30" in recalled
    assert "vector lane disabled" not in recalled
    # the words alone do not find it: it was found by meaning
    assert "Standup is at 9:30" not in _ok(new_user, "recall", QUESTION, "--agent", "me", "--embedder", "none")


def test_a_row_written_keyword_only_is_found_after_reembed(new_user: CliRunner) -> None:
    _ok(new_user, "remember", "Standup is at 9:30", "--agent", "me", "--embedder", "none")
    assert "Standup is at 9:30" not in _ok(new_user, "recall", QUESTION, "--agent", "me")
    assert "embedded 1 rows with local:all-MiniLM-L6-v2" in _ok(new_user, "reembed")
    assert "Standup is at 9:30" in _ok(new_user, "recall", QUESTION, "--agent", "me")
    assert "embedded 0 rows" in _ok(new_user, "reembed")  # resumable: nothing left to do
