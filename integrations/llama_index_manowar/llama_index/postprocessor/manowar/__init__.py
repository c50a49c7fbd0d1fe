"""Node postprocessors of manowar-memory for LlamaIndex (``llama-index-manowar``):
the LlamaHub import path of :mod:`llama_index_manowar.postprocessors`."""

from llama_index_manowar.postprocessors import (
    ManowarDecayPostprocessor,
    ManowarMMRPostprocessor,
    ManowarPackerPostprocessor,
    ManowarRerankPostprocessor,
)

__all__ = [
    "ManowarDecayPostprocessor",
    "ManowarMMRPostprocessor",
    "ManowarPackerPostprocessor",
    "ManowarRerankPostprocessor",
]
