"""The public surface: exported names, the error hierarchy, and docstrings."""

from __future__ import annotations

import inspect

import pytest

import manowar_memory
from manowar_memory import errors
from manowar_memory.cache.base import Cache
from manowar_memory.stores.base import Store

PUBLIC = sorted(set(manowar_memory.__all__) - {"__version__"})


def test_all_has_no_duplicates_and_every_name_exists() -> None:
    assert len(manowar_memory.__all__) == len(set(manowar_memory.__all__))
    missing = [name for name in manowar_memory.__all__ if not hasattr(manowar_memory, name)]
    assert missing == []


def test_version_is_a_string() -> None:
    assert isinstance(manowar_memory.__version__, str) and manowar_memory.__version__.count(".") == 2


def test_star_import_exposes_every_name_in_all() -> None:
    namespace: dict[str, object] = {}
    exec("from manowar_memory import *", namespace)
    assert set(manowar_memory.__all__) <= set(namespace)


def test_core_entry_points_are_exported() -> None:
    for name in ("MemoryEngine", "Scope", "FakeEmbedder", "SQLiteStore", "MemoryConfig", "Candidate",
                 "RuleBasedExtractor", "LLMExtractor", "ManowarError"):
        assert name in manowar_memory.__all__


ERROR_NAMES = sorted(errors.__all__)


@pytest.mark.parametrize("name", ERROR_NAMES)
def test_every_error_derives_from_manowar_error_and_is_exported(name: str) -> None:
    cls = getattr(errors, name)
    assert issubclass(cls, errors.ManowarError)
    assert getattr(manowar_memory, name) is cls


def test_error_hierarchy_matches_the_documented_tree() -> None:
    e = errors
    assert issubclass(e.InvalidInputError, ValueError)
    assert issubclass(e.ScopeError, e.InvalidInputError) and issubclass(e.FilterError, e.InvalidInputError)
    assert issubclass(e.MissingDependencyError, e.ConfigurationError)
    assert issubclass(e.MissingDependencyError, ImportError)
    assert issubclass(e.NotFoundError, e.StoreError) and issubclass(e.NotFoundError, KeyError)
    for cls in (e.EmbeddingError, e.RerankError, e.StoreError, e.ExtractionError, e.ConfigurationError):
        assert cls.__bases__ == (e.ManowarError,)


def test_missing_dependency_error_names_the_pip_command() -> None:
    exc = errors.MissingDependencyError("voyageai", "voyage", "The Voyage embedder")
    assert (exc.package, exc.extra) == ("voyageai", "voyage")
    assert 'pip install "manowar-memory[voyage]"' in str(exc)


def test_not_found_error_message_is_not_quoted() -> None:
    assert str(errors.NotFoundError("memory 'x' does not exist")) == "memory 'x' does not exist"
    assert str(errors.NotFoundError()) == "not found"


def _public_objects() -> list[tuple[str, object]]:
    return [(name, getattr(manowar_memory, name)) for name in PUBLIC
            if inspect.isclass(getattr(manowar_memory, name)) or inspect.isfunction(getattr(manowar_memory, name))]


@pytest.mark.parametrize("name, obj", _public_objects(), ids=[n for n, _ in _public_objects()])
def test_public_classes_and_functions_have_docstrings(name: str, obj: object) -> None:
    doc = inspect.getdoc(obj)
    assert doc and doc.strip(), f"{name} has no docstring"


IMPLEMENTS = {manowar_memory.SQLiteStore: Store, manowar_memory.InMemoryCache: Cache}


def test_protocol_implementations_satisfy_their_protocols() -> None:
    assert isinstance(manowar_memory.SQLiteStore(":memory:"), Store)
    assert isinstance(manowar_memory.InMemoryCache(), Cache)


def _protocol_doc(cls: type, attr: str) -> str | None:
    """The docstring a method takes from the protocol its class implements (Store, Cache)."""
    proto = IMPLEMENTS.get(cls)
    if proto is not None and any(attr in vars(k) for k in proto.__mro__ if k is not object):  # Store: its roles
        return inspect.getdoc(getattr(proto, attr))
    return None


def _public_methods() -> list[tuple[str, object]]:
    out = []
    for name, obj in _public_objects():
        if not inspect.isclass(obj) or obj.__module__.split(".")[0] != "manowar_memory":
            continue
        for attr, value in vars(obj).items():
            if attr.startswith("_"):
                continue
            if inspect.isfunction(value) or isinstance(value, (staticmethod, classmethod, property)):
                out.append((f"{name}.{attr}", (obj, attr, value)))
    return out


@pytest.mark.parametrize("qualname, target", _public_methods(), ids=[q for q, _ in _public_methods()])
def test_public_methods_are_documented(qualname: str, target: tuple) -> None:
    cls, attr, value = target
    func = value.fget if isinstance(value, property) else getattr(value, "__func__", value)
    doc = inspect.getdoc(func) or inspect.getdoc(getattr(cls, attr, None)) or _protocol_doc(cls, attr)
    assert doc and doc.strip(), f"{qualname} has no docstring (nor one from the protocol it implements)"


def test_engine_async_twins_exist_for_every_public_call() -> None:
    engine_cls = manowar_memory.MemoryEngine
    for name in ("remember", "post_turn", "pre_turn", "search_layers", "search", "ingest", "flush",
                 "get_item", "update_item", "delete_item", "delete_items"):
        twin = getattr(engine_cls, "a" + name)
        assert inspect.iscoroutinefunction(twin), name


def test_the_package_docstring_example_runs() -> None:
    engine = manowar_memory.MemoryEngine(store="sqlite:///:memory:", embedder="fake")
    try:
        assert isinstance(engine.store, manowar_memory.SQLiteStore)
        assert isinstance(engine.store, manowar_memory.Store)
        assert engine.model_id == "fake:64"
    finally:
        engine.close()


def test_layers_constant() -> None:
    assert manowar_memory.LAYERS == ("working", "scene", "graph", "patterns", "archives", "vectors")
