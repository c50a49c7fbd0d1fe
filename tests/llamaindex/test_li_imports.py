"""Import hygiene: the core engine never imports LlamaIndex, and importing the adapters
neither reaches the network nor sets LlamaIndex's global Settings."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import llama_index_manowar

# Any attempt to open a network connection fails the child process loudly.
_NO_NETWORK = textwrap.dedent(
    """
    import socket

    def _refuse(*args, **kwargs):
        raise AssertionError(f"network access during import: {args!r}")

    socket.socket.connect = _refuse
    socket.socket.connect_ex = _refuse
    socket.create_connection = _refuse
    socket.getaddrinfo = _refuse
    """
)


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _NO_NETWORK + textwrap.dedent(code)],
        capture_output=True, text=True, timeout=120,
    )


def test_importing_the_core_engine_does_not_import_llama_index() -> None:
    """`import manowar_memory` (and the engine module) loads no llama_index module."""
    proc = _run(
        """
        import sys
        import manowar_memory, manowar_memory.engine, manowar_memory.packing, manowar_memory.ranking
        loaded = [m for m in sys.modules if m.startswith("llama_index")]
        assert not loaded, loaded
        print("ok")
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


def test_importing_the_package_is_lazy_offline_and_leaves_settings_unset() -> None:
    """`import llama_index_manowar` loads nothing of LlamaIndex; resolving every public name
    works without the network and leaves Settings._llm / _embed_model unset."""
    proc = _run(
        """
        import sys
        import llama_index_manowar
        assert not any(m.startswith("llama_index.core") for m in sys.modules), "eager llama_index import"
        for name in llama_index_manowar.__all__:
            getattr(llama_index_manowar, name)
        import llama_index_manowar.embeddings, llama_index_manowar.filters, llama_index_manowar.memory
        import llama_index_manowar.postprocessors, llama_index_manowar.retriever, llama_index_manowar.tools
        import llama_index_manowar.vector_store
        from llama_index.core import Settings
        assert Settings._llm is None, Settings._llm
        assert Settings._embed_model is None, Settings._embed_model
        assert "llama_index.core" in sys.modules
        print("ok")
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


def test_public_names_are_exported_and_sorted() -> None:
    """`__all__` is sorted, and every name in it resolves to an object defined by the package."""
    names = llama_index_manowar.__all__
    assert names == sorted(names)
    assert set(dir(llama_index_manowar)) == set(names)
    for name in names:
        value = getattr(llama_index_manowar, name)
        if name != "__version__":
            assert value.__module__.startswith("llama_index_manowar."), name


def test_unknown_attribute_raises_attribute_error() -> None:
    """A misspelt name fails like any module attribute, naming the module."""
    try:
        llama_index_manowar.ManowarRetreiver  # noqa: B018 - the access is the test
    except AttributeError as exc:
        assert "llama_index_manowar" in str(exc)
    else:  # pragma: no cover - the assertion documents the failure
        raise AssertionError("expected AttributeError")


LLAMAHUB_PATHS = {
    "llama_index.memory.manowar": ["ManowarBlockMemory", "ManowarMemory", "ManowarMemoryBlock"],
    "llama_index.retrievers.manowar": ["ManowarRetriever"],
    "llama_index.postprocessor.manowar": [
        "ManowarDecayPostprocessor", "ManowarMMRPostprocessor", "ManowarPackerPostprocessor",
        "ManowarRerankPostprocessor",
    ],
    "llama_index.vector_stores.manowar": ["ManowarVectorStore"],
    "llama_index.tools.manowar": ["ManowarFunctionTool", "ManowarToolSpec", "make_job_tools", "make_tools"],
    "llama_index.embeddings.manowar": ["LlamaIndexEmbedder", "ManowarEmbedding", "to_engine_embedder"],
}


def test_llamahub_import_paths_reexport_the_classes() -> None:
    """Each kind imports from the path LlamaHub integrations use, offline, as the same objects."""
    import importlib

    for path, names in LLAMAHUB_PATHS.items():
        module = importlib.import_module(path)
        assert sorted(module.__all__) == sorted(names), path
        for name in names:
            assert getattr(module, name) is getattr(llama_index_manowar, name), (path, name)
    proc = _run(
        """
        from llama_index.memory.manowar import ManowarMemoryBlock
        from llama_index.retrievers.manowar import ManowarRetriever
        from llama_index.postprocessor.manowar import ManowarPackerPostprocessor
        from llama_index.vector_stores.manowar import ManowarVectorStore
        from llama_index.tools.manowar import ManowarToolSpec
        from llama_index.embeddings.manowar import ManowarEmbedding
        import llama_index.core
        print("ok")
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


def test_llamahub_paths_are_namespace_packages() -> None:
    """No __init__.py in llama_index/ or llama_index/<kind>/ (it would shadow llama-index-core
    and every other llama-index-* distribution); one in each manowar package."""
    from pathlib import Path

    root = Path(llama_index_manowar.__file__).resolve().parent.parent / "llama_index"
    assert root.is_dir() and not (root / "__init__.py").exists()
    for path in LLAMAHUB_PATHS:
        kind = root / path.split(".")[1]
        assert not (kind / "__init__.py").exists(), kind
        assert (kind / "manowar" / "__init__.py").is_file(), kind
