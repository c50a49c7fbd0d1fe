"""LangChain and LangGraph adapters for manowar-memory.

Every adapter is built from an engine and a scope (``engine=``, ``scope=``, plus ``trust=`` where it
writes) and goes through ``engine.scoped(scope)``, the engine's one scoped surface:

* :class:`ManowarMemory`: classic-chain memory (``langchain_classic`` ``BaseMemory``).
* :class:`ManowarChatMessageHistory`: a thread's chat history over the working and scene layers.
* :class:`ManowarMemoryMiddleware`: ``create_agent`` middleware (recall before the model, record after it).
* :class:`ManowarStore`: a LangGraph ``BaseStore`` (``create_agent(store=...)``, LangGraph memory tools);
  :class:`ManowarKVStore`: a LangChain key-value store on top of it.
* :class:`ManowarRetriever`: a retriever over chosen layers (``k``, ``search_kwargs``).
* :class:`ManowarVectorStore`: a LangChain ``VectorStore`` (documents with ids and metadata, similarity
  and MMR search, metadata filters, ``as_retriever``).
* Compressors for any retrieval pipeline: :class:`TemporalDecayCompressor`,
  :class:`RerankCompressor`, :class:`MMRCompressor`, :class:`PackerCompressor`.
* Tools generated from the engine's tool catalog: :func:`create_manowar_tools`, :class:`ManowarToolkit`.
* Embeddings both ways: :class:`LangChainEmbedder` (LangChain -> engine),
  :class:`ManowarEmbeddings` (engine -> LangChain); :func:`create_llm_extractor` (facts with any chat model),
  :func:`create_llm_resolver` (which stored fact a new one updates, with any chat model).

>>> from manowar_memory import MemoryEngine, Scope
>>> from langchain_manowar import ManowarRetriever
>>> engine = MemoryEngine(store="sqlite:///:memory:", embedder="fake")
>>> retriever = ManowarRetriever(engine=engine, scope=Scope(agent_wallet="a1"), k=3)
"""

from .chat_history import ManowarChatMessageHistory
from .compressors import (
    MMRCompressor,
    PackerCompressor,
    RerankCompressor,
    TemporalDecayCompressor,
    pack_documents,
    render_memory_context,
)
from .embeddings import LangChainEmbedder, ManowarEmbeddings
from .extraction import ChatModelFunction, create_llm_extractor, create_llm_resolver
from .memory import ManowarMemory
from .middleware import ManowarMemoryMiddleware
from .retrievers import ManowarRetriever
from .store import ManowarKVStore, ManowarStore
from .tools import TOOL_NAMES, ManowarToolkit, create_manowar_tools
from .vectorstores import ManowarVectorStore

__version__ = "0.1.0"

__all__ = [
    "TOOL_NAMES",
    "ChatModelFunction",
    "LangChainEmbedder",
    "MMRCompressor",
    "ManowarChatMessageHistory",
    "ManowarEmbeddings",
    "ManowarKVStore",
    "ManowarMemory",
    "ManowarMemoryMiddleware",
    "ManowarRetriever",
    "ManowarStore",
    "ManowarToolkit",
    "ManowarVectorStore",
    "PackerCompressor",
    "RerankCompressor",
    "TemporalDecayCompressor",
    "__version__",
    "create_llm_extractor",
    "create_llm_resolver",
    "create_manowar_tools",
    "pack_documents",
    "render_memory_context",
]
