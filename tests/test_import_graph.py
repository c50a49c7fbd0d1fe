"""The package's modules form floors that only look down: no import cycle, not even a hidden one.

The graph is read from source (ast), so it sees every import: at the top of a module, inside a
function, and under ``if TYPE_CHECKING:``; relative and absolute. ``from . import x`` is an edge to
the submodule ``x`` when ``x`` is a module, else to the package's ``__init__``; importing a package
is an edge to its ``__init__``, and so is importing a module inside another package (Python runs
the package's ``__init__`` first), but not a module of the importer's own package. A cycle hidden from the interpreter (by ``TYPE_CHECKING`` or an
import moved into a function) is still a cycle of the design, so any cycle fails here.

In-function imports are kept for optional third-party dependencies only (an SDK loaded when its
provider is used). A first-party import inside a function is allowed only when the module it
imports is such a gate: its top-level imports (its own or those of the first-party modules it
imports at the top) need a package that is not a core dependency in pyproject.toml (FastAPI for
the server, temporalio for the Temporal jobs, pytest for the conformance suite). Any other
first-party import inside a function fails: that is how cycles used to hide.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from importlib.metadata import packages_distributions
from pathlib import Path

PACKAGE = "manowar_memory"
ROOT = Path(__file__).resolve().parents[1] / PACKAGE
PYPROJECT = ROOT.parent / "pyproject.toml"


@dataclass(frozen=True)
class Edge:
    """One import of a first-party module: who imports, what, where, whether inside a function, and
    whether it is the package ``__init__`` that importing a module inside it runs (``implicit``)."""

    source: str
    target: str
    line: int
    in_function: bool
    implicit: bool = False


def module_names(root: Path = ROOT, package: str = PACKAGE) -> dict[str, Path]:
    """Every module of the package by dotted name (a package's name stands for its ``__init__``)."""
    names: dict[str, Path] = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names[".".join([package, *parts])] = path
    return names


def _is_package(name: str, modules: Mapping[str, Path]) -> bool:
    return modules[name].name == "__init__.py"


def _canonical(distribution: str) -> str:
    return re.sub(r"[-_.]+", "-", distribution).lower()


def core_distributions(pyproject: Path = PYPROJECT) -> set[str]:
    """The distributions every install has: the project's ``dependencies`` (names only)."""
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    return {_canonical(re.split(r"[\s<>=!~;\[]", spec, maxsplit=1)[0]) for spec in project["dependencies"]}


def third_party_top_level(source: str, package: str = PACKAGE) -> set[str]:
    """The third-party top-level packages a module imports outside functions (stdlib excluded)."""
    found: set[str] = set()
    for node, in_function in _walk(ast.parse(source)):
        if in_function:
            continue
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        for name in names:
            top = name.partition(".")[0]
            if top != package and top not in sys.stdlib_module_names and top != "__future__":
                found.add(top)
    return found


def optional_gates(root: Path = ROOT, package: str = PACKAGE, core: set[str] | None = None) -> set[str]:
    """The first-party modules that cannot be imported without an optional dependency: those
    whose top-level imports (their own or, transitively, those of the first-party modules they
    import at the top) need a third-party package outside ``core`` (an unknown one counts as optional)."""
    core = core_distributions() if core is None else core
    modules = module_names(root, package)
    owners = packages_distributions()
    sources = {name: path.read_text(encoding="utf-8") for name, path in modules.items()}

    def optional(top: str) -> bool:
        return not any(_canonical(d) in core for d in owners.get(top, []))

    needs = {name for name, source in sources.items() if any(optional(t) for t in third_party_top_level(source, package))}
    top_level: dict[str, set[str]] = {}
    for name, source in sources.items():
        top_level[name] = {e.target for e in imports_of(name, source, modules, package) if not e.in_function}
    changed = True
    while changed:
        changed = False
        for name, targets in top_level.items():
            if name not in needs and targets & needs:
                needs.add(name)
                changed = True
    return needs


def _walk(node: ast.AST, in_function: bool = False) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Every import statement under ``node``, with whether it sits inside a function."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            yield child, in_function
        inside = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        yield from _walk(child, inside)


def imports_of(name: str, source: str, modules: Mapping[str, Path], package: str = PACKAGE) -> list[Edge]:
    """The first-party imports of module ``name`` (whose code is ``source``)."""
    is_package = name in modules and _is_package(name, modules)
    edges: list[Edge] = []

    def add(target: str, node: ast.AST, in_function: bool) -> None:
        # the longest first-party module the dotted name starts with (``a.b.C`` -> ``a.b``)
        while target and target not in modules:
            target = target.rpartition(".")[0]
        if not target or target == name:
            return
        edges.append(Edge(name, target, getattr(node, "lineno", 0), in_function))
        # importing ``a.b.c`` runs the packages ``a`` and ``a.b`` first: an edge to each one that
        # is not a package of the importer itself (those are already running)
        parts = target.split(".")
        for i in range(1, len(parts)):
            package_name = ".".join(parts[:i])
            if package_name in modules and not (name == package_name or name.startswith(package_name + ".")):
                edges.append(Edge(name, package_name, getattr(node, "lineno", 0), in_function, implicit=True))

    for node, in_function in _walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == package or alias.name.startswith(package + "."):
                    add(alias.name, node, in_function)
            continue
        if node.level:
            base = name.split(".") if is_package else name.split(".")[:-1]
            base = base[: len(base) - (node.level - 1)]
            module = ".".join(base + ([node.module] if node.module else []))
        else:
            module = node.module or ""
        if not (module == package or module.startswith(package + ".")):
            continue
        for alias in node.names:
            submodule = f"{module}.{alias.name}"
            add(submodule if submodule in modules else module, node, in_function)
    return edges


def import_graph(root: Path = ROOT, package: str = PACKAGE) -> list[Edge]:
    """Every first-party import edge of the package."""
    modules = module_names(root, package)
    edges: list[Edge] = []
    for name, path in modules.items():
        edges += imports_of(name, path.read_text(encoding="utf-8"), modules, package)
    return edges


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (or a self-import), each
    sorted, components in sorted order (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    nodes = sorted(set(graph) | {t for targets in graph.values() for t in targets})
    counter = 0
    for start in nodes:
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1 or node in graph.get(node, ()):
                    found.append(sorted(component))
    return sorted(found)


def _adjacency(edges: list[Edge]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for edge in edges:
        graph.setdefault(edge.source, set()).add(edge.target)
    return graph


def _describe(component: list[str], edges: list[Edge]) -> str:
    members = set(component)
    lines = [" <-> ".join(component)]
    lines += [f"    {e.source}:{e.line} -> {e.target}" + (" (in a function)" if e.in_function else "")
              for e in edges if e.source in members and e.target in members]
    return "\n".join(lines)


# -- the package ---------------------------------------------------------------------------------


def test_the_graph_sees_the_package() -> None:
    edges = import_graph()
    sources = {e.source for e in edges}
    assert len(module_names()) > 90
    assert f"{PACKAGE}.engine" in sources and f"{PACKAGE}" in sources
    assert any(e.target == f"{PACKAGE}.errors" for e in edges)


def test_the_package_has_no_import_cycle() -> None:
    edges = import_graph()
    found = cycles(_adjacency(edges))
    assert not found, "import cycles:\n" + "\n".join(_describe(c, edges) for c in found)


def misplaced_imports(edges: list[Edge], gates: set[str]) -> list[str]:
    """The in-function imports of first-party modules that need no optional dependency (each
    statement judged by the module it names, not by the packages that importing it runs)."""
    return sorted({f"{e.source}:{e.line} -> {e.target}" for e in edges
                   if e.in_function and not e.implicit and e.target not in gates})


def test_no_first_party_import_inside_a_function() -> None:
    gates = optional_gates()
    assert {f"{PACKAGE}.server.app", f"{PACKAGE}.jobs.temporal"} <= gates
    assert f"{PACKAGE}.engine" not in gates and f"{PACKAGE}.server.auth" not in gates
    inside = misplaced_imports(import_graph(), gates)
    assert inside == [], "first-party imports inside functions (import at the top instead):\n" + "\n".join(inside)


# -- the floors -----------------------------------------------------------------------------------

INTERNALS = ROOT.parent / "docs" / "reference" / "internals.md"


def floor_table(markdown: str) -> dict[str, int]:
    """The floors of ``docs/reference/internals.md``: each backticked name of a row's second cell
    (a module, or a package with everything in it) mapped to the row's floor number."""
    section = markdown.split("## Floors", 1)[1].split("\n## ", 1)[0]
    floors: dict[str, int] = {}
    for row in re.findall(r"^\| *(\d+) *\|([^|]*)\|", section, re.M):
        for name in re.findall(r"`([\w.]+)`", row[1]):
            floors[name] = int(row[0])
    return floors


def floor_of(module: str, floors: Mapping[str, int], package: str = PACKAGE) -> int | None:
    """The floor of the longest table name that is ``module`` or a package holding it."""
    name = module.removeprefix(package).lstrip(".") or "__init__"
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        if ".".join(parts[:cut]) in floors:
            return floors[".".join(parts[:cut])]
    return None


def floor_violations(edges: list[Edge], floors: Mapping[str, int], modules: Mapping[str, Path]) -> list[str]:
    """Modules no row names, and imports that look up a floor."""
    found = [f"{m}: in no floor of the table" for m in sorted(modules) if floor_of(m, floors) is None]
    for e in edges:
        low, high = floor_of(e.source, floors), floor_of(e.target, floors)
        if low is not None and high is not None and high > low:
            found.append(f"{e.source}:{e.line} (floor {low}) imports {e.target} (floor {high})")
    return sorted(set(found))


def test_modules_import_only_from_their_floor_or_below() -> None:
    floors = floor_table(INTERNALS.read_text(encoding="utf-8"))
    assert len(floors) > 30 and set(floors.values()) == {1, 2, 3, 4, 5}
    found = floor_violations(import_graph(), floors, module_names())
    assert found == [], "the floors of docs/reference/internals.md are not the code's:\n" + "\n".join(found)


def test_the_floor_check_finds_an_import_that_looks_up() -> None:
    floors = {"records": 1, "engine": 4, "stores": 2, "stores.mongo": 3}
    modules = {f"{PACKAGE}.{m}": Path(m) for m in ("records", "engine", "stores", "stores.mongo", "extra")}
    edges = [Edge(f"{PACKAGE}.engine", f"{PACKAGE}.records", 1, False),
             Edge(f"{PACKAGE}.records", f"{PACKAGE}.engine", 7, True),
             Edge(f"{PACKAGE}.stores", f"{PACKAGE}.stores.mongo", 3, False)]
    assert floor_violations(edges, floors, modules) == [
        f"{PACKAGE}.extra: in no floor of the table",
        f"{PACKAGE}.records:7 (floor 1) imports {PACKAGE}.engine (floor 4)",
        f"{PACKAGE}.stores:3 (floor 2) imports {PACKAGE}.stores.mongo (floor 3)",
    ]


# -- the checker itself --------------------------------------------------------------------------


def test_the_cycle_finder_finds_cycles() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e"}, "f": {"g"}, "g": {"f"}}
    assert cycles(graph) == [["a", "b", "c"], ["e"], ["f", "g"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def _probe_modules(tmp_path: Path) -> dict[str, Path]:
    files = {
        "__init__.py": "from .engine import Engine\n",
        "engine.py": (
            "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n    from .surface import Surface\n"
            "def f():\n    from pkg.sub import helper\n    import json\n    from pkg.gate import G\n"
        ),
        "surface.py": "from . import engine\nfrom .sub.tool import Tool\n",
        "sub/__init__.py": "from ..engine import Engine\n",
        "sub/tool.py": "from . import helper, NAME\nimport pkg.surface\nimport pkg\n",
        "sub/helper.py": "",
        "gate.py": "import fastapi_like_sdk\nfrom pkg.sub.helper import H\n",
        "above.py": "from pkg.gate import G\n",
    }
    for relative, source in files.items():
        path = tmp_path / "pkg" / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source, encoding="utf-8")
    return module_names(tmp_path / "pkg", "pkg")


def test_the_graph_reads_every_kind_of_import(tmp_path: Path) -> None:
    _probe_modules(tmp_path)
    edges = import_graph(tmp_path / "pkg", "pkg")
    found = {(e.source, e.target, e.in_function) for e in edges}
    assert found == {
        ("pkg", "pkg.engine", False),
        ("pkg.engine", "pkg.surface", False),  # under TYPE_CHECKING
        ("pkg.engine", "pkg.sub.helper", True),  # in a function
        ("pkg.engine", "pkg.sub", True),  # importing pkg.sub.helper runs pkg.sub's __init__ first
        ("pkg.surface", "pkg.sub", False),
        ("pkg.gate", "pkg.sub", False),
        ("pkg.engine", "pkg.gate", True),
        ("pkg.gate", "pkg.sub.helper", False),
        ("pkg.above", "pkg.gate", False),
        ("pkg.surface", "pkg.engine", False),  # ``from . import engine``: the submodule
        ("pkg.surface", "pkg.sub.tool", False),
        ("pkg.sub", "pkg.engine", False),
        ("pkg.sub.tool", "pkg.sub.helper", False),  # ``from . import helper``: the submodule
        ("pkg.sub.tool", "pkg.sub", False),  # ``from . import NAME``: the package's __init__
        ("pkg.sub.tool", "pkg.surface", False),
        ("pkg.sub.tool", "pkg", False),
    }
    assert cycles(_adjacency(edges)) == [["pkg", "pkg.engine", "pkg.gate", "pkg.sub", "pkg.sub.tool", "pkg.surface"]]


def test_a_cycle_through_a_package_init_is_found(tmp_path: Path) -> None:
    # q.a imports a module of q.p; Python runs q/p/__init__.py first, and that imports q.a back
    for relative, source in {"__init__.py": "", "a.py": "from q.p.b import B\n", "p/__init__.py": "from ..a import A\n",
                             "p/b.py": "B = 1\n"}.items():
        path = tmp_path / "q" / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source, encoding="utf-8")
    edges = import_graph(tmp_path / "q", "q")
    assert cycles(_adjacency(edges)) == [["q.a", "q.p"]]
    assert cycles(_adjacency([e for e in edges if not e.implicit])) == []


def test_only_imports_of_optional_dependency_gates_may_sit_in_functions(tmp_path: Path) -> None:
    _probe_modules(tmp_path)
    root = tmp_path / "pkg"
    gates = optional_gates(root, "pkg", core={"numpy"})
    assert gates == {"pkg.gate", "pkg.above"}  # ``above`` needs the SDK through ``gate``
    misplaced = misplaced_imports(import_graph(root, "pkg"), gates)
    assert [m.split(":")[0] + " -> " + m.split("-> ")[1] for m in misplaced] == ["pkg.engine -> pkg.sub.helper"]
    assert third_party_top_level("import numpy\nimport os\ndef f():\n    import torch\n", "pkg") == {"numpy"}
