"""Outside the core (``engine.py``, ``scoped.py`` and their parts, the modules of the ``_engine`` and
``_scoped`` packages), no module of the package reaches past the
engine's or the scoped surface's public methods.

Read as source (ast), like ``test_adapter_boundaries`` does for ``integrations/``, so a new
module is checked the day it is added. Every module of ``manowar_memory`` except the two core
modules fails on:

* ``.store`` of an engine or surface expression: a name or attribute called ``engine`` or
  ``_engine``, a name annotated or assigned as a ``MemoryEngine``/``ScopedMemory``, a call of
  either class, of ``.scoped(...)`` or of a function declared to return one. The store
  packages (``stores/``, ``jobs/``) receive a store object by design; an engine hands its
  store over only through ``MemoryEngine.maintenance_store()``. ``getattr(x, "store")`` on
  anything but ``self`` is the same reach spelled dynamically and fails too.
* a private member (``x._y``, not a dunder) of anything but the object itself: allowed are
  ``self``/``cls``, ``super()``, the enclosing class by name, a parameter annotated with the
  enclosing class (another instance of the same class) and the module itself
  (``sys.modules[__name__]``). A module's own ``_helper`` names are plain names and pass, and
  so does ``os._exit``, a documented function of the standard library.
  ``getattr``/``setattr``/``hasattr``/``delattr`` with a constant private name count as access.
* importing a private name from the core modules (``from .engine import _x``,
  ``from ._engine.core import _x``).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "manowar_memory"
# the engine and the surface are split into mixin modules: the modules directly in these packages
# are the core too (a subpackage of them would not be)
CORE_PACKAGES = ("_engine", "_scoped")
CORE = {PACKAGE / "engine.py", PACKAGE / "scoped.py", *(p for pkg in CORE_PACKAGES for p in (PACKAGE / pkg).glob("*.py"))}
MODULES = sorted(p for p in PACKAGE.rglob("*.py") if p not in CORE)
CORE_TYPES = re.compile(r"\b(MemoryEngine|ScopedMemory)\b")
ENGINE_NAMES = {"engine", "_engine"}
CORE_MODULES = {"engine", "scoped"}
ATTR_FUNCS = {"getattr", "setattr", "hasattr", "delattr"}
#: the standard library's documented functions whose names start with an underscore (not a reach
#: past anyone's public surface): ``os._exit`` ends the CLI's process without finalizing
DOCUMENTED_UNDERSCORED = {"os._exit"}


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _names_core_type(annotation: ast.expr | None) -> bool:
    return annotation is not None and bool(CORE_TYPES.search(ast.unparse(annotation)))


class _Checker(ast.NodeVisitor):
    def __init__(self, label: str, tree: ast.Module) -> None:
        self.label = label
        self.found: list[str] = []
        # functions of the module declared to return an engine or a surface
        self.core_factories = {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                               and _names_core_type(n.returns)}
        self.core_names: list[set[str]] = [set()]  # names bound to an engine/surface, per function scope
        self.annotations: list[dict[str, str]] = [{}]  # parameter -> annotation text, per function scope
        self.classes: list[str] = []

    # -- what is an engine or a surface
    def core_expr(self, node: ast.expr) -> bool:
        if isinstance(node, ast.Name):
            return node.id in ENGINE_NAMES or node.id in self.core_names[-1]
        if isinstance(node, ast.Attribute):
            return node.attr in ENGINE_NAMES
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            return bool(CORE_TYPES.fullmatch(name)) or name == "scoped" or name in self.core_factories
        return False

    def _bound(self, body: list[ast.stmt] | ast.expr, params: ast.arguments | None) -> tuple[set[str], dict[str, str]]:
        names = set(self.core_names[-1])
        annotations = dict(self.annotations[-1])
        if params is not None:
            for arg in (*params.posonlyargs, *params.args, *params.kwonlyargs, params.vararg, params.kwarg):
                if arg is None:
                    continue
                annotations[arg.arg] = ast.unparse(arg.annotation) if arg.annotation is not None else ""
                if _names_core_type(arg.annotation):
                    names.add(arg.arg)
        for stmt in body if isinstance(body, list) else [body]:
            for node in ast.walk(stmt):
                if isinstance(node, ast.Assign) and self.core_expr(node.value):
                    names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
                elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and (
                        _names_core_type(node.annotation) or (node.value is not None and self.core_expr(node.value))):
                    names.add(node.target.id)
                elif isinstance(node, (ast.With, ast.AsyncWith)):
                    names |= {i.optional_vars.id for i in node.items
                              if isinstance(i.optional_vars, ast.Name) and self.core_expr(i.context_expr)}
        return names, annotations

    def _scope(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> None:
        names, annotations = self._bound(node.body, node.args)
        self.core_names.append(names)
        self.annotations.append(annotations)
        self.generic_visit(node)
        self.core_names.pop()
        self.annotations.pop()

    def visit_Module(self, node: ast.Module) -> None:
        module_level = [s for s in node.body if not isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
        self.core_names[0], _ = self._bound(module_level, None)
        self.generic_visit(node)

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _scope  # noqa: N815

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.classes.append(node.name)
        self.generic_visit(node)
        self.classes.pop()

    # -- the rules
    def _own(self, obj: ast.expr) -> bool:
        """``obj`` is the object itself, its class, or another instance of the enclosing class."""
        if isinstance(obj, ast.Call) and isinstance(obj.func, ast.Name) and obj.func.id == "super":
            return True
        if ast.unparse(obj) == "sys.modules[__name__]":
            return True
        if not isinstance(obj, ast.Name):
            return False
        if obj.id in ("self", "cls"):
            return True
        cls = self.classes[-1] if self.classes else None
        return cls is not None and (obj.id == cls or bool(re.search(rf"\b{re.escape(cls)}\b",
                                                                   self.annotations[-1].get(obj.id, ""))))

    def _member(self, obj: ast.expr, attr: str, node: ast.AST, dynamic: bool = False) -> None:
        where = f"{self.label}:{getattr(node, 'lineno', 0)}"
        shown = f"{ast.unparse(obj)}.{attr}"
        if attr == "store" and (self.core_expr(obj) or (dynamic and not self._own(obj))):
            self.found.append(f"{where}: {shown} (ask the engine or the scoped surface)")
        if _private(attr) and not self._own(obj) and shown not in DOCUMENTED_UNDERSCORED:
            self.found.append(f"{where}: private member {shown}")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        self._member(node.value, node.attr, node)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if (isinstance(func, ast.Name) and func.id in ATTR_FUNCS and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)):
            self._member(node.args[0], node.args[1].value, node, dynamic=True)
        self.generic_visit(node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = (node.module or "").split(".")
        core = module[-1] in CORE_MODULES or any(part in CORE_PACKAGES for part in module)
        if module and core and (node.level or module[0] == "manowar_memory"):
            self.found += [f"{self.label}:{node.lineno}: private name {a.name} of the core module {node.module}"
                           for a in node.names if _private(a.name)]


def violations(source: str, label: str) -> list[str]:
    """Every place in ``source`` that reaches past the engine's or the surface's public methods."""
    tree = ast.parse(source)
    checker = _Checker(label, tree)
    checker.visit(tree)
    return checker.found


def _ids() -> Iterator[str]:
    return (str(p.relative_to(PACKAGE)) for p in MODULES)


def test_the_modules_exist() -> None:
    assert len(MODULES) > 50
    # the exemption covers exactly the engine's and the surface's own modules
    assert {p.parent.name for p in CORE} == {"manowar_memory", *CORE_PACKAGES}
    assert all((PACKAGE / pkg / "core.py") in CORE for pkg in CORE_PACKAGES)
    assert PACKAGE / "tools.py" in MODULES and PACKAGE / "server" / "app.py" in MODULES


@pytest.mark.parametrize("path", MODULES, ids=list(_ids()))
def test_module_stays_outside_the_core(path: Path) -> None:
    assert violations(path.read_text(encoding="utf-8"), str(path.relative_to(PACKAGE))) == []


# the reaches past the surface that issue #33 found, in their own spelling
_FOUND = '''
from .scoped import ScopedMemory
from .engine import MemoryEngine, _plain
from ._engine.core import _active

def _promote_pattern(m: ScopedMemory, a):
    try:
        return core.promote_pattern(job_store(m._engine), a.pattern_id, a.skill_name)
    finally:
        invalidate_changes(query_cache_of(m._engine), changes)

def _engine(store, embedder) -> MemoryEngine:
    return MemoryEngine(store=store, embedder=embedder)

def demo(store, embedder):
    eng = _engine(store, embedder)
    facts = eng.store.list_memories(MemoryQuery(scope=scope, sources=("fact",)))
    backend = TemporalSchedules(client, store=engine.store)

def create_app(engine):
    def readyz():
        return {"store": _check(lambda: engine.store.get_memory("readyz-probe"))}

class Surface:
    def similar(self, filters):
        engine = self._engine
        q = MemoryQuery(scope=self._scope, filters=engine._merge_filters(self._scope, filters))
        return engine.store.vector_search(q)

    def update_working(self, session):
        self._engine.store.upsert_session(session)
        self._engine._invalidate(self._scope)

def job_store(obj):
    return getattr(obj, "store", obj)

def _after_fork():
    for threads in list(_LIVE):
        if not threads._closed:
            threads._start()

def serve(handler):
    return handler.server.owner._dispatch(request)

flt = _mql._merge([])
with MemoryEngine() as e:
    e.scoped(scope).store
'''


def test_the_checker_catches_the_reaches_the_issue_found() -> None:
    found = "\n".join(violations(_FOUND, "probe.py"))
    for expected in ("private member m._engine", "eng.store", "engine.store", "private member engine._merge_filters",
                     "self._engine.store", "private member self._engine._invalidate", "obj.store",
                     "private member threads._closed", "private member threads._start",
                     "private member handler.server.owner._dispatch", "private member _mql._merge", "e.scoped(scope).store",
                     "private name _plain of the core module engine",
                     "private name _active of the core module _engine.core"):
        assert expected in found, (expected, found)
    assert found.count("engine.store") >= 4  # cli, cli_schedules, the server's readyz, the surface's read


def test_the_checker_lets_legitimate_code_pass() -> None:
    source = '''
from .core import _owned_by
from . import _mql

def _helper(x):
    return _owned_by(None, x)

class VectorIndex:
    def adopt(self, old: VectorIndex | None) -> None:
        if old is not None and old._ann_ready(1):
            self._start()

    @classmethod
    def make(cls):
        return cls._build(VectorIndex._path_expr(1))

class Child(VectorIndex):
    def embed(self):
        return super()._embed_batch([])

def search_working(req):
    return req.store.find_sessions(req.query())

def put(cache, key):
    cache.store(key, {})
    return getattr(self, "_lock", None), sys.modules[__name__]._cache

def tool(m: ScopedMemory):
    return m.skills(limit=3), m.scope.agent_wallet

def serve(engine):
    return engine.store_name, engine.maintenance_store(), engine.scoped(None).search("q"), _helper(1)

def leave(code):
    os._exit(code)
'''
    assert violations(source, "ok.py") == []
    assert violations("import posix\nposix._exit(0)\n", "probe.py") == ["probe.py:2: private member posix._exit"]


def test_another_class_is_not_the_same_class() -> None:
    source = '''
class A:
    def f(self, other: B, peer: A):
        return other._x, peer._x
'''
    assert violations(source, "probe.py") == ["probe.py:4: private member other._x"]


SURFACE = [PACKAGE / "scoped.py", *sorted((PACKAGE / "_scoped").glob("*.py"))]


@pytest.mark.parametrize("path", SURFACE, ids=[str(p.relative_to(PACKAGE)) for p in SURFACE])
def test_the_surface_uses_only_the_engines_public_methods(path: Path) -> None:
    """``scoped.py`` and its parts keep to the same rule: they ask the engine, never its store or
    private members; only the surface's own helpers (``_scoped.*``) may be imported privately."""
    label = str(path.relative_to(PACKAGE))
    own = re.compile(r": private name \w+ of the core module _scoped\.\w+$")
    assert [f for f in violations(path.read_text(encoding="utf-8"), label) if not own.search(f)] == []
