"""The langchain-tests standard suites, unmodified, against the langchain_manowar classes.

* ``RetrieversIntegrationTests``: :class:`ManowarRetriever`.
* ``ToolsUnitTests`` and ``ToolsIntegrationTests``: the catalog's memory and item tools,
  plus a job tool (``memory_decay_update``), as :func:`create_manowar_tools` generates them.
* ``EmbeddingsUnitTests`` and ``EmbeddingsIntegrationTests``: :class:`ManowarEmbeddings`
  (the engine's embedder as LangChain Embeddings).
* ``BaseStoreSyncTests`` and ``BaseStoreAsyncTests``: :class:`ManowarKVStore` (the key-value
  store built on :class:`ManowarStore`; the installed suites target LangChain's key-value
  ``BaseStore``, LangGraph's store has its own tests in ``test_lc_store.py``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from langchain_core.tools import BaseTool
from langchain_tests.integration_tests import (
    BaseStoreAsyncTests,
    BaseStoreSyncTests,
    EmbeddingsIntegrationTests,
    RetrieversIntegrationTests,
    ToolsIntegrationTests,
)
from langchain_tests.unit_tests import EmbeddingsUnitTests, ToolsUnitTests

from langchain_manowar import (
    ManowarEmbeddings,
    ManowarKVStore,
    ManowarRetriever,
    create_manowar_tools,
)
from manowar_memory import MemoryEngine, Scope

# one worker runs this module under pytest-xdist: its module-scoped fixtures are built once
pytestmark = pytest.mark.xdist_group("lc-standard")

SCOPE = Scope(agent_wallet="agent-std", user_address="user-std", thread_id="thread-std")
FACT = "The user prefers short TypeScript examples."
FACT_CREATED_AT = 1_700_000_000_000
_ENGINES: list[MemoryEngine] = []


def _engine(**kwargs: Any) -> MemoryEngine:
    engine = MemoryEngine(store="sqlite:///:memory:", embedder=kwargs.pop("embedder", "fake"), **kwargs)
    _ENGINES.append(engine)
    return engine


def _seeded() -> tuple[MemoryEngine, str]:
    """An engine holding one known fact (fixed creation time, so a fixed id) and a few notes."""
    engine = _engine()
    fact_id = engine.remember(SCOPE, FACT, fact_type="preference", created_at=FACT_CREATED_AT).id
    engine.ingest(SCOPE, [
        "TypeScript examples should stay short and typed.",
        "The user asked for TypeScript examples about generics.",
        "The user reviews TypeScript examples on Fridays.",
        "Short examples in TypeScript help the user learn.",
    ])
    return engine, fact_id


FACT_ID = _seeded()[1]


@pytest.fixture(scope="module", autouse=True)
def _close_engines() -> Iterator[None]:
    yield
    while _ENGINES:
        _ENGINES.pop().close()


def _tool(name: str) -> BaseTool:
    engine, _ = _seeded()
    (tool,) = create_manowar_tools(engine, SCOPE, include=[f"memory_{name}"])
    return tool


# ---------------------------------------------------------------- retriever


class TestManowarRetrieverStandard(RetrieversIntegrationTests):
    """The retriever returns k Documents for a query, sync and async, k set at construction or per call."""

    @property
    def retriever_constructor(self) -> type[ManowarRetriever]:
        return ManowarRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        engine, _ = _seeded()
        return {"engine": engine, "scope": SCOPE, "k": 4, "layers": ["graph", "vectors"]}

    @property
    def retriever_query_example(self) -> str:
        return "Which TypeScript examples does the user like?"


# ---------------------------------------------------------------- tools


class TestRememberToolUnit(ToolsUnitTests):
    @property
    def tool_constructor(self) -> BaseTool:
        return _tool("remember")

    @property
    def tool_invoke_params_example(self) -> dict[str, Any]:
        return {"content": "The user lives in Lisbon.", "fact_type": "context"}


class TestRememberToolIntegration(ToolsIntegrationTests):
    @property
    def tool_constructor(self) -> BaseTool:
        return _tool("remember")

    @property
    def tool_invoke_params_example(self) -> dict[str, Any]:
        return {"content": "The user lives in Lisbon.", "fact_type": "context", "confidence": 0.9}


class TestRecallToolUnit(ToolsUnitTests):
    @property
    def tool_constructor(self) -> BaseTool:
        return _tool("search")

    @property
    def tool_invoke_params_example(self) -> dict[str, Any]:
        return {"query": "TypeScript examples", "k": 3}


class TestRecallToolIntegration(ToolsIntegrationTests):
    @property
    def tool_constructor(self) -> BaseTool:
        return _tool("search")

    @property
    def tool_invoke_params_example(self) -> dict[str, Any]:
        return {"query": "TypeScript examples", "k": 3, "layers": ["graph"]}


class TestGetMemoryToolUnit(ToolsUnitTests):
    @property
    def tool_constructor(self) -> BaseTool:
        return _tool("get")

    @property
    def tool_invoke_params_example(self) -> dict[str, Any]:
        return {"memory_id": FACT_ID}


class TestGetMemoryToolIntegration(ToolsIntegrationTests):
    @property
    def tool_constructor(self) -> BaseTool:
        return _tool("get")

    @property
    def tool_invoke_params_example(self) -> dict[str, Any]:
        return {"memory_id": FACT_ID}


class TestUpdateMemoryToolUnit(ToolsUnitTests):
    @property
    def tool_constructor(self) -> BaseTool:
        return _tool("update")

    @property
    def tool_invoke_params_example(self) -> dict[str, Any]:
        return {"memory_id": FACT_ID, "content": "The user prefers short, typed TypeScript examples."}


class TestUpdateMemoryToolIntegration(ToolsIntegrationTests):
    @property
    def tool_constructor(self) -> BaseTool:
        return _tool("update")

    @property
    def tool_invoke_params_example(self) -> dict[str, Any]:
        return {"memory_id": FACT_ID, "confidence": 0.7, "metadata": {"reviewed": True}}


class TestDeleteMemoryToolUnit(ToolsUnitTests):
    @property
    def tool_constructor(self) -> BaseTool:
        return _tool("delete")

    @property
    def tool_invoke_params_example(self) -> dict[str, Any]:
        return {"memory_id": FACT_ID}


class TestDeleteMemoryToolIntegration(ToolsIntegrationTests):
    @property
    def tool_constructor(self) -> BaseTool:
        return _tool("delete")

    @property
    def tool_invoke_params_example(self) -> dict[str, Any]:
        return {"memory_id": FACT_ID, "hard": False}


class TestListMemoriesToolUnit(ToolsUnitTests):
    @property
    def tool_constructor(self) -> BaseTool:
        return _tool("list")

    @property
    def tool_invoke_params_example(self) -> dict[str, Any]:
        return {"limit": 5}


class TestListMemoriesToolIntegration(ToolsIntegrationTests):
    @property
    def tool_constructor(self) -> BaseTool:
        return _tool("list")

    @property
    def tool_invoke_params_example(self) -> dict[str, Any]:
        return {"limit": 5, "source": "fact"}


class TestContextToolUnit(ToolsUnitTests):
    @property
    def tool_constructor(self) -> BaseTool:
        return _tool("context")

    @property
    def tool_invoke_params_example(self) -> dict[str, Any]:
        return {"query": "TypeScript examples", "budget_chars": 400}


class TestContextToolIntegration(ToolsIntegrationTests):
    @property
    def tool_constructor(self) -> BaseTool:
        return _tool("context")

    @property
    def tool_invoke_params_example(self) -> dict[str, Any]:
        return {"query": "TypeScript examples"}


class TestJobToolUnit(ToolsUnitTests):
    """A maintenance job from the catalog's jobs group, bound to the scope's agent."""

    @property
    def tool_constructor(self) -> BaseTool:
        return _tool("decay_update")

    @property
    def tool_invoke_params_example(self) -> dict[str, Any]:
        return {"half_life_days": 30, "dry_run": True}


class TestJobToolIntegration(ToolsIntegrationTests):
    @property
    def tool_constructor(self) -> BaseTool:
        return _tool("decay_update")

    @property
    def tool_invoke_params_example(self) -> dict[str, Any]:
        return {"half_life_days": 14, "dry_run": False}


# ---------------------------------------------------------------- embeddings


class TestManowarEmbeddingsUnit(EmbeddingsUnitTests):
    @property
    def embeddings_class(self) -> type[ManowarEmbeddings]:
        return ManowarEmbeddings

    @property
    def embedding_model_params(self) -> dict[str, Any]:
        return {"embedder": "fake:16"}


class TestManowarEmbeddingsIntegration(EmbeddingsIntegrationTests):
    @property
    def embeddings_class(self) -> type[ManowarEmbeddings]:
        return ManowarEmbeddings

    @property
    def embedding_model_params(self) -> dict[str, Any]:
        return {"embedder": "fake:16"}


# ---------------------------------------------------------------- key-value store


KV_SCOPE = Scope(agent_wallet="agent-std-kv")


class TestManowarKVStoreSync(BaseStoreSyncTests[Any]):
    @pytest.fixture
    def kv_store(self) -> ManowarKVStore:
        return ManowarKVStore(engine=_engine(), scope=KV_SCOPE)

    @pytest.fixture
    def three_values(self) -> tuple[Any, Any, Any]:
        return b"foo-bytes", {"bar": [1, 2.5, "three"], "nested": {"ok": True}}, "buzz"


class TestManowarKVStoreAsync(BaseStoreAsyncTests[Any]):
    @pytest.fixture
    async def kv_store(self) -> ManowarKVStore:
        return ManowarKVStore(engine=_engine(embedder=None), scope=KV_SCOPE, namespace=("cache", "v1"))

    @pytest.fixture
    def three_values(self) -> tuple[Any, Any, Any]:
        return {"foo": "one"}, b"\x00\x01bar", 3.5
