"""Fixtures shared by the LlamaIndex adapter tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from llama_index.core import Settings

from manowar_memory import MemoryEngine, Scope


@pytest.fixture(autouse=True)
def _settings_untouched() -> Iterator[None]:
    """No adapter may set LlamaIndex's global LLM or embedding model."""
    before = (Settings._llm, Settings._embed_model)
    yield
    assert (Settings._llm, Settings._embed_model) == before


@pytest.fixture
def engine() -> Iterator[MemoryEngine]:
    eng = MemoryEngine(store="sqlite:///:memory:", embedder="fake")
    yield eng
    eng.close()


@pytest.fixture
def scope() -> Scope:
    return Scope(agent_wallet="agent-li", user_address="user-1")
