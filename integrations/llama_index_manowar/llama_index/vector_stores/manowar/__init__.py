"""Vector store of manowar-memory for LlamaIndex (``llama-index-manowar``):
the LlamaHub import path of :mod:`llama_index_manowar.vector_store`."""

from llama_index_manowar.vector_store import ManowarVectorStore

__all__ = ["ManowarVectorStore"]
