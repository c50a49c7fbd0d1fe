"""Tools of manowar-memory for LlamaIndex (``llama-index-manowar``):
the LlamaHub import path of :mod:`llama_index_manowar.tools`."""

from llama_index_manowar.tools import ManowarFunctionTool, ManowarToolSpec, make_job_tools, make_tools

__all__ = ["ManowarFunctionTool", "ManowarToolSpec", "make_job_tools", "make_tools"]
