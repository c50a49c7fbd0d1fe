"""The store packages and the conformance suite are split the same way: one module per role.

For every role of :data:`manowar_memory.stores.ROLES`, each store package
(``stores/sqlite/``, ``stores/mongo/``) has the role's module and every method of the role's
protocol is defined there (by the class of the store's MRO that defines it), and the
conformance package has the module of the same name holding the role's suite. Also checks the
size limits of the whole package: no module over 800 lines, no function over 80 lines except
the schema migrations.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

from manowar_memory.stores import ROLES
from manowar_memory.stores.base import role_methods
from manowar_memory.testing.conformance import StoreConformance

PACKAGE = Path(__file__).resolve().parents[1] / "manowar_memory"

#: role name (a key of ROLES) -> (module name in each package, conformance class)
LAYOUT = {
    "memory rows": ("rows", "MemoryRowsConformance"),
    "threads": ("threads", "ThreadsConformance"),
    "artifacts": ("artifacts", "ArtifactsConformance"),
    "cache fences": ("fences", "CacheFencesConformance"),
    "maintenance": ("maintenance", "MaintenanceConformance"),
    "schedules": ("schedules", "SchedulesConformance"),
}
STORES = {"sqlite": "SQLiteStore", "mongo": "MongoStore"}
MAX_MODULE_LINES = 800
MAX_FUNCTION_LINES = 80


def _store_class(package: str) -> type:
    # pymongo is part of the test install ([all] extra): a missing one fails here, never skips
    store_cls: type = getattr(importlib.import_module(f"manowar_memory.stores.{package}"), STORES[package])
    return store_cls


def misplaced(store_cls: type, package: str) -> list[str]:
    """``Role.method: where`` for each role method of ``store_cls`` not defined in its role's
    module of ``manowar_memory.stores.<package>``."""
    wrong = []
    for role_name, role in ROLES.items():
        expected = f"manowar_memory.stores.{package}.{LAYOUT[role_name][0]}"
        for name in role_methods(role):
            owner = next((k for k in store_cls.__mro__ if name in vars(k)), None)
            where = owner.__module__ if owner is not None else "nowhere"
            if where != expected:
                wrong.append(f"{role.__name__}.{name}: {where}")
    return wrong


def test_the_layout_covers_every_role() -> None:
    assert set(LAYOUT) == set(ROLES)


@pytest.mark.parametrize("package", sorted(STORES))
def test_each_store_package_has_one_module_per_role(package: str) -> None:
    store_cls = _store_class(package)
    for module, _ in LAYOUT.values():
        importlib.import_module(f"manowar_memory.stores.{package}.{module}")
    assert misplaced(store_cls, package) == []


@pytest.mark.parametrize("package", sorted(STORES))
def test_a_method_outside_its_role_module_is_reported(package: str) -> None:
    store_cls = _store_class(package)

    class Moved(store_cls):  # type: ignore[valid-type,misc]
        def cache_fences(self, keys: object) -> object:  # defined here, not in the fences module
            return super().cache_fences(keys)

    assert misplaced(Moved, package) == [f"CacheFenceStore.cache_fences: {__name__}"]


def test_the_conformance_package_has_the_same_modules() -> None:
    for module, class_name in LAYOUT.values():
        suite = getattr(importlib.import_module(f"manowar_memory.testing.conformance.{module}"), class_name)
        assert suite.__module__ == f"manowar_memory.testing.conformance.{module}"
        assert suite in StoreConformance.__mro__


def _too_long(path: Path, root: Path = PACKAGE) -> list[str]:
    text = path.read_text()
    found = []
    if len(text.splitlines()) > MAX_MODULE_LINES:
        found.append(f"{path.relative_to(root)}: {len(text.splitlines())} lines")
    if path.stem == "migrations":  # a schema migration is one statement list, kept whole
        return found
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            assert node.end_lineno is not None
            if node.end_lineno - start + 1 > MAX_FUNCTION_LINES:
                found.append(f"{path.relative_to(root)}:{node.lineno} {node.name}: {node.end_lineno - start + 1} lines")
    return found


def test_modules_and_functions_stay_small() -> None:
    """Over the whole package, not only the stores: rooms a newcomer can read (issue #33)."""
    assert [f for p in sorted(PACKAGE.rglob("*.py")) for f in _too_long(p)] == []


def test_the_size_check_catches_a_long_function(tmp_path: Path) -> None:
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    (tmp_path / "long.py").write_text(f"def long() -> None:\n{body}")
    assert _too_long(tmp_path / "long.py", tmp_path) == [f"long.py:1 long: {MAX_FUNCTION_LINES + 1} lines"]
