"""LlamaIndex adapters for manowar-memory.

Every adapter is built from an engine and a scope (``engine=``, ``scope=``) plus its own
options, and reads and writes only through the engine's scoped surface
(``engine.scoped(scope)``). The classes also import from the paths LlamaHub integrations
use: ``llama_index.retrievers.manowar``, ``llama_index.postprocessor.manowar``,
``llama_index.memory.manowar``, ``llama_index.vector_stores.manowar``,
``llama_index.embeddings.manowar`` and ``llama_index.tools.manowar``.

* :class:`ManowarRetriever`: layered hybrid search as a ``BaseRetriever`` (sync and async).
* :class:`ManowarDecayPostprocessor`, :class:`ManowarRerankPostprocessor`,
  :class:`ManowarMMRPostprocessor`, :class:`ManowarPackerPostprocessor`: the engine's
  ranking stages and packer as node postprocessors, for nodes of any retriever.
* :class:`ManowarMemoryBlock`: a block for ``llama_index.core.memory.Memory`` (with
  :class:`ManowarBlockMemory`, the ``Memory`` that hands it every reply);
  :class:`ManowarMemory`: a ``BaseMemory`` for anything that takes ``memory=``.
* :class:`ManowarVectorStore`: a ``stores_text`` vector store on the engine's rows, for
  ``VectorStoreIndex`` and ``VectorMemoryBlock``, with ``MetadataFilters`` translated to the
  engine's allowlisted filters.
* :class:`ManowarEmbedding` (engine embedder → LlamaIndex) and :class:`LlamaIndexEmbedder`
  (LlamaIndex embedding → engine).
* :class:`ManowarToolSpec` / :func:`make_tools` / :func:`make_job_tools`: the engine's
  memory tool catalog (memory, items and jobs groups) as ``FunctionTool`` objects bound to a scope.
* :class:`LlamaIndexChatFunction`, :func:`create_llm_extractor`, :func:`create_llm_resolver`:
  any LlamaIndex ``LLM`` driving the engine's fact extraction and fact resolution.

Importing this package is cheap and touches neither the network nor LlamaIndex's global
``Settings``: names load on first use (``llama_index.core`` with them), and nothing here
ever sets ``Settings.llm`` or ``Settings.embed_model``; pass ``llm=``/``embed_model=``
explicitly.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .embeddings import LlamaIndexEmbedder, ManowarEmbedding, to_engine_embedder
    from .errors import EmbeddingModelMismatchError, UnsupportedFilterError
    from .filters import translate_filters
    from .llm import LlamaIndexChatFunction, create_llm_extractor, create_llm_resolver
    from .memory import ManowarBlockMemory, ManowarMemory, ManowarMemoryBlock
    from .postprocessors import (
        ManowarDecayPostprocessor,
        ManowarMMRPostprocessor,
        ManowarPackerPostprocessor,
        ManowarRerankPostprocessor,
    )
    from .retriever import ManowarRetriever
    from .tools import ManowarFunctionTool, ManowarToolSpec, make_job_tools, make_tools
    from .vector_store import ManowarVectorStore

__version__ = "0.1.0"

_EXPORTS: dict[str, str] = {
    "EmbeddingModelMismatchError": ".errors",
    "LlamaIndexChatFunction": ".llm",
    "LlamaIndexEmbedder": ".embeddings",
    "ManowarBlockMemory": ".memory",
    "ManowarDecayPostprocessor": ".postprocessors",
    "ManowarEmbedding": ".embeddings",
    "ManowarFunctionTool": ".tools",
    "ManowarMMRPostprocessor": ".postprocessors",
    "ManowarMemory": ".memory",
    "ManowarMemoryBlock": ".memory",
    "ManowarPackerPostprocessor": ".postprocessors",
    "ManowarRerankPostprocessor": ".postprocessors",
    "ManowarRetriever": ".retriever",
    "ManowarToolSpec": ".tools",
    "ManowarVectorStore": ".vector_store",
    "UnsupportedFilterError": ".errors",
    "create_llm_extractor": ".llm",
    "create_llm_resolver": ".llm",
    "make_job_tools": ".tools",
    "make_tools": ".tools",
    "to_engine_embedder": ".embeddings",
    "translate_filters": ".filters",
}

__all__ = [
    "EmbeddingModelMismatchError",
    "LlamaIndexChatFunction",
    "LlamaIndexEmbedder",
    "ManowarBlockMemory",
    "ManowarDecayPostprocessor",
    "ManowarEmbedding",
    "ManowarFunctionTool",
    "ManowarMMRPostprocessor",
    "ManowarMemory",
    "ManowarMemoryBlock",
    "ManowarPackerPostprocessor",
    "ManowarRerankPostprocessor",
    "ManowarRetriever",
    "ManowarToolSpec",
    "ManowarVectorStore",
    "UnsupportedFilterError",
    "__version__",
    "create_llm_extractor",
    "create_llm_resolver",
    "make_job_tools",
    "make_tools",
    "to_engine_embedder",
    "translate_filters",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
