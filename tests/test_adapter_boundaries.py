"""The adapters are thin translations: they reach the engine only through ``engine.scoped(...)``.

Read as source (ast), so a new adapter module is checked the day it is added: no
``engine.store``, no other engine method, no private member of a core object and no private
core module.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "integrations"
# the adapters' own source: not their tests, nor the copies a non-editable pip install leaves in build/
MODULES = sorted(p for p in ROOT.glob("*/**/*.py") if not {"tests", "build"} & set(p.relative_to(ROOT).parts))
ENGINE_NAMES = {"engine", "_engine"}
ALLOWED_ENGINE_ATTRIBUTES = {"scoped"}


def _engine_expr(node: ast.expr) -> bool:
    """``engine``, ``self.engine``, ``x.engine`` (any spelling that names the engine)."""
    if isinstance(node, ast.Name):
        return node.id in ENGINE_NAMES
    return isinstance(node, ast.Attribute) and node.attr in ENGINE_NAMES


def violations(source: str, label: str) -> list[str]:
    """Every place in ``source`` that reaches past the scoped surface."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        where = f"{label}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Attribute):
            if _engine_expr(node.value) and node.attr not in ALLOWED_ENGINE_ATTRIBUTES:
                found.append(f"{where}: engine.{node.attr} (use engine.scoped(scope))")
            if node.attr == "store" and not (isinstance(node.value, ast.Name) and node.value.id == "self"):
                found.append(f"{where}: .store")
            private = node.attr.startswith("_") and not node.attr.startswith("__")
            if private and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                found.append(f"{where}: private member .{node.attr}")
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("manowar_memory"):
            if any(part.startswith("_") for part in node.module.split(".")):
                found.append(f"{where}: private module {node.module}")
            found += [f"{where}: private name {a.name}" for a in node.names if a.name.startswith("_")]
    return found


def test_the_adapters_exist() -> None:
    assert len(MODULES) > 10


@pytest.mark.parametrize("path", MODULES, ids=[str(p.relative_to(ROOT)) for p in MODULES])
def test_adapter_module_goes_through_the_scoped_surface(path: Path) -> None:
    assert violations(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT))) == []


def test_the_checker_catches_what_it_looks_for() -> None:
    source = (
        "from manowar_memory._util import now_ms\n"
        "def f(engine, other):\n"
        "    engine.store.get_transcript('x')\n"
        "    engine.pre_turn('q', None)\n"
        "    other.engine.remember(None, 'x')\n"
        "    engine.scoped(None)._engine\n"
    )
    found = violations(source, "probe.py")
    for expected in ("engine.store", "engine.pre_turn", "engine.remember", "private member ._engine",
                     "private module manowar_memory._util"):
        assert any(expected in v for v in found), (expected, found)
    assert violations("def f(engine, scope):\n    return engine.scoped(scope).search('q')\n", "ok.py") == []
