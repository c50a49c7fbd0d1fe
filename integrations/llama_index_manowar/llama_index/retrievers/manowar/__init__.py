"""Retriever of manowar-memory for LlamaIndex (``llama-index-manowar``):
the LlamaHub import path of :mod:`llama_index_manowar.retriever`."""

from llama_index_manowar.retriever import ManowarRetriever

__all__ = ["ManowarRetriever"]
