"""An MkDocs hook: the docs' benchmark figures come from the data files in ``docs/data``.

A page writes a figure as a macro, never by hand::

    R@10 {{ fig("locomo", "recall.manowar.ALL.R@10", ".1f") }}
    {{ run("locomo") }}      -> how, when and where the figures of that file were measured
    {{ table("latency", "sizes", "memories", "p50=p50_ms:.2f", "p95=p95_ms:.2f") }}

``fig(name, path, spec)`` reads ``docs/data/<name>.json``, follows ``path`` into its ``results``
(keys joined by dots; a key that holds dots itself, such as ``vectors.keyword``, is matched whole)
and formats the value with the format spec ``spec`` (``".1f"``, ``",.0f"``, ``".1%"``, ...).
``run(name)`` renders the file's date, core count and exact command line. ``table(name, path,
first, "Header=key:spec", ...)`` renders a Markdown table with one row per key of the object at
``path`` (in the file's order; the first column, headed ``first``, is the key, digits grouped when
it is a number), and one column per ``Header=key:spec`` (``key`` a dotted path inside the row). A key the file does not
hold, a value that is not a number, a bad format spec or a name that is not a benchmark of
``benchmarks/suite.py`` fails the build: a page never shows a figure the data does not hold. A
benchmark of the suite whose data file is not written yet shows "(not measured yet)" for its
figures and tables, and its ``run()`` line gives the command that writes it: never a number.

The same functions (:func:`render`, :func:`figure`) are what ``tests/test_docs_figures.py``
checks pages with, and ``benchmarks/plots.py`` draws its plots from the same files.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from functools import cache
from pathlib import Path
from typing import Any

__all__ = ["DATA", "MACRO", "FigureError", "figure", "load", "lookup", "render", "run_line", "table"]

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "docs" / "data"
_ARG = r'\s*"([^"]+)"\s*'
#: ``{{ fig("name", "path", "spec") }}`` or ``{{ run("name") }}``; anything else between ``{{ }}``
#: that names ``fig``/``run`` is an error (see :func:`render`).
MACRO = re.compile(r"\{\{\s*(fig|run|table)\((" + _ARG + r"(?:," + _ARG + r")*)\)\s*\}\}")
_LOOSE = re.compile(r"\{\{[^}]*\b(?:fig|run|table)\b[^}]*\}\}")


class FigureError(ValueError):
    """A macro that names a data file, key or format the data does not hold."""


class NotMeasured(FigureError):
    """A benchmark of ``benchmarks/suite.py`` whose data file has not been written yet."""


@cache
def suite() -> Any:
    """``benchmarks/suite.py``: the benchmarks and the commands that write their data files."""
    spec = importlib.util.spec_from_file_location("manowar_bench_suite", ROOT / "benchmarks" / "suite.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up
    spec.loader.exec_module(module)
    return module


def regenerate(name: str) -> str:
    """The command that writes the data file ``name``."""
    return " ".join(suite().command(name))


@cache
def _read(path: Path, mtime: float) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def load(name: str, data_dir: Path = DATA) -> dict[str, Any]:
    """The data file ``<data_dir>/<name>.json`` (command, commit, cores, date, results)."""
    if name not in suite().COMMANDS:
        raise FigureError(f"{name!r} is not a benchmark of benchmarks/suite.py ({sorted(suite().COMMANDS)})")
    path = data_dir / f"{name}.json"
    if not path.is_file():
        raise NotMeasured(f"no data file {path}: `{regenerate(name)}` writes it")
    record = _read(path, path.stat().st_mtime)
    for key in ("command", "commit", "cores", "date", "results"):
        if key not in record:
            raise FigureError(f"{path} has no {key!r}: write it with the benchmark's --json (benchmarks/record.py)")
    return record


def lookup(results: Any, path: str) -> Any:
    """Follow the dotted ``path`` into ``results``; at each level the longest run of parts that is
    a key wins, so keys holding dots (``vectors.keyword``, ``0.5``) need no escaping."""
    parts = path.split(".")
    node = results
    i = 0
    while i < len(parts):
        if not isinstance(node, dict):
            raise FigureError(f"{'.'.join(parts[:i])} is not an object, so it has no {'.'.join(parts[i:])!r}")
        for j in range(len(parts), i, -1):
            key = ".".join(parts[i:j])
            if key in node:
                node, i = node[key], j
                break
        else:
            raise FigureError(f"no key {parts[i]!r} at {'.'.join(parts[:i]) or 'the top'}; there are {sorted(node)}")
    return node


def figure(name: str, path: str, spec: str, data_dir: Path = DATA) -> str:
    """One figure: ``results[path]`` of the data file ``name``, formatted with ``spec``."""
    value = _number(lookup(load(name, data_dir)["results"], path), f"{name}: {path}")
    try:
        return format(value, spec)
    except ValueError as exc:
        raise FigureError(f"{name}: {path}: bad format spec {spec!r}: {exc}") from exc


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise FigureError(f"{where} is {value!r}, not a number")
    return value


def table(name: str, path: str, first: str, *columns: str, data_dir: Path = DATA) -> str:
    """A Markdown table of the object at ``path``: a row per key, a column per ``Header=key:spec``."""
    rows = lookup(load(name, data_dir)["results"], path)
    if not isinstance(rows, dict) or not rows:
        raise FigureError(f"{name}: {path} is not a non-empty object")
    specs = []
    for column in columns:
        header, sep, rest = column.partition("=")
        key, colon, spec = rest.rpartition(":")
        if not (sep and colon and key):
            raise FigureError(f"{name}: column {column!r} is not 'Header=key:spec'")
        specs.append((header, key, spec))
    lines = ["| " + " | ".join([first] + [h for h, _, _ in specs]) + " |", "|---" * (len(specs) + 1) + "|"]
    for label, row in rows.items():
        shown = f"{int(label):,}" if label.isdigit() else label
        cells = []
        for _, key, spec in specs:
            value = _number(lookup(row, key), f"{name}: {path}.{label}.{key}")
            try:
                cells.append(format(value, spec))
            except ValueError as exc:
                raise FigureError(f"{name}: bad format spec {spec!r}: {exc}") from exc
        lines.append("| " + " | ".join([shown, *cells]) + " |")
    return "\n".join(lines)


def run_line(name: str, data_dir: Path = DATA) -> str:
    """How the figures of ``name`` were measured: date, cores and the exact command."""
    record = load(name, data_dir)
    dirty = " with uncommitted changes" if record.get("dirty") else ""
    busy = f" (load average {record['load_average']:g})" if "load_average" in record else ""
    return (f"Measured on {record['date'][:10]} on a {record['cores']}-core machine{busy}{dirty}: "
            f"`{record['command']}`.")


def render(markdown: str, data_dir: Path = DATA) -> str:
    """Replace every macro of a page; a malformed macro is an error, not text."""

    def one(match: re.Match[str]) -> str:
        args = re.findall(r'"([^"]+)"', match.group(2))
        try:
            return macro(match.group(0), match.group(1), args)
        except NotMeasured:
            if match.group(1) == "run":
                return (f"Not measured yet: `{regenerate(args[0])}` writes this benchmark's data file, and its "
                        "figures appear here then.")
            return "(not measured yet)"

    def macro(text: str, kind: str, args: list[str]) -> str:
        match_text = text
        if kind == "run":
            if len(args) != 1:
                raise FigureError(f"{match_text}: run() takes the data file's name")
            return run_line(args[0], data_dir)
        if kind == "table":
            if len(args) < 4:
                raise FigureError(f"{match_text}: table() takes a data file, a path, a first header and columns")
            return table(*args, data_dir=data_dir)
        if len(args) != 3:
            raise FigureError(f"{match_text}: fig() takes a data file, a key path and a format spec")
        return figure(args[0], args[1], args[2], data_dir=data_dir)

    out = MACRO.sub(one, markdown)
    left = _LOOSE.search(out)
    if left:
        raise FigureError(f"malformed figure macro {left.group(0)!r}")
    return out


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:
    """MkDocs hook: the page's figures, from the data files."""
    from mkdocs.exceptions import PluginError

    try:
        return render(markdown)
    except FigureError as exc:
        raise PluginError(f"{page.file.src_path}: {exc}") from exc
