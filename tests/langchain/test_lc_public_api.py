"""The public surface of langchain_manowar: a sorted, complete __all__, documented, typed."""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path

import langchain_manowar

MODULES = ["chat_history", "compressors", "embeddings", "extraction", "memory", "middleware", "retrievers",
           "store", "testing", "tools", "vectorstores"]


def test_all_is_complete() -> None:
    """__all__ lists exactly the public names of the package, each once (ruff's RUF022 keeps it sorted)."""
    public = {n for n in vars(langchain_manowar) if not n.startswith("_") and n not in [*MODULES, "annotations"]}
    assert len(langchain_manowar.__all__) == len(set(langchain_manowar.__all__))
    assert set(langchain_manowar.__all__) - {"__version__"} == public


def test_every_module_declares_all_and_documents_its_public_names() -> None:
    """Each module has __all__, and every exported class and function has a docstring."""
    for name in MODULES:
        module = importlib.import_module(f"langchain_manowar.{name}")
        assert module.__doc__, name
        for export in module.__all__:
            obj = getattr(module, export)
            if inspect.isclass(obj) or inspect.isfunction(obj):
                assert inspect.getdoc(obj), f"{name}.{export} has no docstring"


def test_package_is_typed() -> None:
    """The package ships py.typed."""
    assert (Path(langchain_manowar.__file__).parent / "py.typed").exists()


def test_every_adapter_takes_engine_and_scope() -> None:
    """Each adapter is built from engine= and scope= (plus its own options)."""
    for cls in (langchain_manowar.ManowarMemory, langchain_manowar.ManowarChatMessageHistory,
                langchain_manowar.ManowarMemoryMiddleware, langchain_manowar.ManowarStore,
                langchain_manowar.ManowarKVStore, langchain_manowar.ManowarRetriever, langchain_manowar.ManowarToolkit,
                langchain_manowar.ManowarVectorStore):
        fields = getattr(cls, "model_fields", None)
        params = set(fields) if fields else set(inspect.signature(cls.__init__).parameters)
        assert {"engine", "scope"} <= params, cls.__name__
