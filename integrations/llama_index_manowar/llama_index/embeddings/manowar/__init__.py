"""Embeddings of manowar-memory for LlamaIndex (``llama-index-manowar``):
the LlamaHub import path of :mod:`llama_index_manowar.embeddings`."""

from llama_index_manowar.embeddings import LlamaIndexEmbedder, ManowarEmbedding, to_engine_embedder

__all__ = ["LlamaIndexEmbedder", "ManowarEmbedding", "to_engine_embedder"]
