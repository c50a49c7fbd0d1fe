"""The servers load the embedder at startup, not in the first call: `manowar serve`'s app (its
lifespan) and `manowar mcp` (before it serves) call MemoryEngine.warm_up."""

from __future__ import annotations

from typing import Any

import pytest
from click.testing import CliRunner

from manowar_memory import FakeEmbedder, MemoryEngine
from manowar_memory.embeddings.base import InputType


class Loading(FakeEmbedder):
    """A fake embedder with a model to load, counting loads and calls."""

    def __init__(self) -> None:
        super().__init__(16)
        self.loads = 0

    @property
    def loaded(self) -> bool:
        return self.loads > 0

    def load(self) -> None:
        self.loads += 1

    def _embed_batch(self, texts: list[str], input_type: InputType) -> list[list[float]]:
        assert self.loaded, "embedded before the model was loaded"
        return super()._embed_batch(texts, input_type)


def test_warm_up_loads_the_model_and_embeds_once() -> None:
    embedder = Loading()
    with MemoryEngine(store=":memory:", embedder=embedder) as engine:
        assert engine.warm_up() is True
        assert (embedder.loads, embedder.calls) == (1, 1)
    with MemoryEngine(store=":memory:", embedder=None) as engine:
        assert engine.warm_up() is False


def test_the_rest_app_loads_the_embedder_at_startup() -> None:
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from manowar_memory.server.app import create_app

    embedder = Loading()
    with MemoryEngine(store=":memory:", embedder=embedder) as engine:
        app = create_app(engine)
        assert not embedder.loaded  # building the app loads nothing
        with TestClient(app) as http:  # the lifespan runs: startup
            assert (embedder.loads, embedder.calls) == (1, 1)
            assert http.get("/healthz").status_code == 200
        assert embedder.loads == 1


def test_mcp_loads_the_embedder_before_it_serves(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    pytest.importorskip("mcp")
    from manowar_memory import cli as cli_module
    from manowar_memory.server import mcp as mcp_module

    embedder = Loading()
    seen: dict[str, Any] = {}

    def engine_with_loading(store: str | None, name: str, redis_url: str | None) -> MemoryEngine:
        return MemoryEngine(store=store, embedder=embedder)

    async def serve(server: Any) -> None:
        seen["loads_when_serving"] = embedder.loads
        seen["calls_when_serving"] = embedder.calls

    monkeypatch.setattr(cli_module, "_server_engine", engine_with_loading)
    monkeypatch.setattr(mcp_module, "run_stdio", serve)
    result = CliRunner().invoke(cli_module.cli, ["mcp", "--agent", "a1", "--store", f"sqlite:///{tmp_path / 'm.db'}"])
    assert result.exit_code == 0, result.output
    assert seen == {"loads_when_serving": 1, "calls_when_serving": 1}
    assert "embedder: fake:16 (loading)" in result.output


def test_a_server_says_when_it_is_keyword_only(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    pytest.importorskip("mcp")
    from manowar_memory import cli as cli_module
    from manowar_memory.embeddings import EMBEDDER_ENV
    from manowar_memory.embeddings import local as local_module
    from manowar_memory.server import mcp as mcp_module

    async def serve(server: Any) -> None:
        return None

    monkeypatch.setattr(mcp_module, "run_stdio", serve)
    monkeypatch.delenv(EMBEDDER_ENV)
    monkeypatch.setattr(local_module, "has_module", lambda name: False)  # nothing installed
    result = CliRunner().invoke(cli_module.cli, ["mcp", "--agent", "a1", "--store", f"sqlite:///{tmp_path / 'm.db'}"])
    assert result.exit_code == 0, result.output
    assert "warning: vector lane disabled: no local embedder is installed" in result.output
