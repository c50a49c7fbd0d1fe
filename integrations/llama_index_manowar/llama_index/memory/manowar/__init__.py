"""Memory of manowar-memory for LlamaIndex (``llama-index-manowar``):
the LlamaHub import path of :mod:`llama_index_manowar.memory`."""

from llama_index_manowar.memory import ManowarBlockMemory, ManowarMemory, ManowarMemoryBlock

__all__ = ["ManowarBlockMemory", "ManowarMemory", "ManowarMemoryBlock"]
