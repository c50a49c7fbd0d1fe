"""Benchmark figures on the site come from the benchmarks' data files, never from a hand.

* every macro of every page resolves against ``docs/data`` (a key, a format or a benchmark the
  data does not hold fails), and renders the value this test reads from the file on its own;
* no page states a benchmark figure by hand (a number with a unit of time, a percentage, a
  speed-up, a recall or a percentile outside a macro), so two pages cannot disagree;
* each plot records the SHA-256 of the data file it was drawn from, and that is today's file;
* each data file is a record of ``benchmarks/record.py`` (command, commit, cores, date, results),
  written by the command ``benchmarks/suite.py`` gives for it, and small (no data set in it).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import re
import shlex
import struct
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "docs" / "data"


def _module(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


figures = _module("manowar_docs_figures", ROOT / "docs" / "hooks" / "figures.py")
suite = _module("manowar_bench_suite_test", ROOT / "benchmarks" / "suite.py")


def _pages() -> dict[str, str]:
    pages = {"README.md": (ROOT / "README.md").read_text()}
    for path in sorted((ROOT / "docs").rglob("*.md")):
        pages[str(path.relative_to(ROOT))] = path.read_text()
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        cells = json.loads(path.read_text())["cells"]
        pages[str(path.relative_to(ROOT))] = "\n\n".join("".join(c["source"]) for c in cells
                                                         if c["cell_type"] == "markdown")
    return pages


PAGES = _pages()
MACROS = [(page, m) for page, text in PAGES.items() for m in figures.MACRO.finditer(text)]


def _args(match: re.Match[str]) -> list[str]:
    return re.findall(r'"([^"]+)"', match.group(2))


def _walk(node: Any, path: str) -> Any:
    """The value at ``path``, read independently of the hook: each key is the longest run of
    dot-joined parts present at its level."""
    parts = path.split(".")
    while parts:
        for n in range(len(parts), 0, -1):
            if ".".join(parts[:n]) in node:
                node, parts = node[".".join(parts[:n])], parts[n:]
                break
        else:
            raise AssertionError(f"{path}: no key {parts[0]!r}")
    return node


# ---------------------------------------------------------------- the macros resolve


def test_the_site_renders_its_figures_with_the_hook() -> None:
    config = (ROOT / "mkdocs.yml").read_text()
    assert re.search(r"^hooks:\n\s+- docs/hooks/figures\.py$", config, re.M), "mkdocs.yml must load the figures hook"
    assert MACROS, "no page reads a figure from the data files"
    assert {"docs/benchmarks.md", "docs/production/server.md", "docs/production/index.md"} <= {p for p, _ in MACROS}


@pytest.mark.parametrize("page", sorted({p for p, _ in MACROS}))
def test_every_macro_of_a_page_resolves(page: str) -> None:
    rendered = figures.render(PAGES[page])
    assert "{{" not in rendered, f"{page}: a macro was left unrendered"


@pytest.mark.parametrize("page, macro", [(p, m.group(0)) for p, m in MACROS if m.group(1) == "fig"])
def test_each_figure_is_the_data_files_value(page: str, macro: str) -> None:
    name, path, spec = _args(figures.MACRO.fullmatch(macro))
    file = DATA / f"{name}.json"
    assert name in suite.COMMANDS, f"{page}: {name!r} is not a benchmark of benchmarks/suite.py"
    if not file.exists():
        assert figures.render(macro) == "(not measured yet)"
        return
    value = _walk(json.loads(file.read_text())["results"], path)
    assert isinstance(value, (int, float)) and not isinstance(value, bool), f"{page}: {name} {path} = {value!r}"
    assert figures.render(macro) == format(value, spec)


@pytest.mark.parametrize("page, macro", [(p, m.group(0)) for p, m in MACROS if m.group(1) == "table"])
def test_each_table_holds_the_data_files_values(page: str, macro: str) -> None:
    name, path, _first, *columns = _args(figures.MACRO.fullmatch(macro))
    file = DATA / f"{name}.json"
    rendered = figures.render(macro)
    if not file.exists():
        assert rendered == "(not measured yet)"
        return
    rows = _walk(json.loads(file.read_text())["results"], path)
    lines = rendered.splitlines()[2:]
    assert len(lines) == len(rows)
    for line, (label, row) in zip(lines, rows.items()):
        cells = [c.strip() for c in line.strip("|").split("|")]
        expected = []
        for column in columns:
            key, _, spec = column.partition("=")[2].rpartition(":")
            expected.append(format(_walk(row, key), spec))
        assert cells[1:] == expected, f"{page}: {name} {label}"


def test_a_run_line_gives_the_command_and_machine() -> None:
    for name in sorted(p.stem for p in DATA.glob("*.json")):
        record = json.loads((DATA / f"{name}.json").read_text())
        line = figures.render(f'{{{{ run("{name}") }}}}')
        assert record["command"] in line and f"{record['cores']}-core" in line and record["date"][:10] in line


def test_the_hook_refuses_what_the_data_does_not_hold(tmp_path: Path) -> None:
    record = {"benchmark": "latency", "command": "python benchmarks/latency.py --json docs/data/latency.json",
              "commit": "0" * 40, "dirty": False, "cores": 2, "date": "2026-01-02T00:00:00+00:00",
              "results": {"sizes": {"1000": {"p50_ms": 1.234}}, "label": "x"}}
    (tmp_path / "latency.json").write_text(json.dumps(record))
    assert figures.render('{{ fig("latency", "sizes.1000.p50_ms", ".1f") }} ms', tmp_path) == "1.2 ms"
    table = figures.render('{{ table("latency", "sizes", "rows", "p50=p50_ms:.2f") }}', tmp_path)
    assert table.splitlines() == ["| rows | p50 |", "|---|---|", "| 1,000 | 1.23 |"]
    bad = ['{{ fig("latency", "sizes.1000.p95_ms", ".1f") }}',        # no such key
           '{{ fig("latency", "label", ".1f") }}',                     # not a number
           '{{ fig("latency", "sizes.1000.p50_ms", ".1q") }}',         # bad format spec
           '{{ fig("no-such-benchmark", "x", ".1f") }}',                # not a benchmark of the suite
           "{{ fig('latency', 'sizes.1000.p50_ms', '.1f') }}",          # malformed: single quotes
           '{{ fig("latency", "sizes.1000.p50_ms") }}']                 # malformed: no spec
    for macro in bad:
        with pytest.raises(figures.FigureError):
            figures.render(macro, tmp_path)
    missing = figures.render('{{ fig("overhead", "wall_p50", ".2f") }}', tmp_path)
    assert missing == "(not measured yet)"
    assert figures.render('{{ table("overhead", "x", "y", "a=b:.1f") }}', tmp_path) == "(not measured yet)"
    note = figures.render('{{ run("overhead") }}', tmp_path)
    assert note.startswith("Not measured yet") and "python benchmarks/overhead.py" in note and "docs/data/overhead.json" in note


# ---------------------------------------------------------------- no figure by hand

#: A benchmark figure: a number with a unit of time, a percentage, a speed-up or a rate, a
#: decimal number of seconds or bytes, a recall or percentile followed by a number, or a
#: speed-up in words. Version numbers, ports, counts and settings without such a unit pass.
HAND_FIGURE = re.compile(
    r"(?<![\w.])\d[\d,]*(?:\.\d+)?\s?(?:ms|%|x|×|req/s|requests/s|qps|/s)(?![\w])"
    r"|(?<![\w.])\d[\d,]*\.\d+\s?(?:s|seconds|KB|MB|GB|KiB|MiB|GiB)(?![\w])"
    r"|\b(?:R@\d+|recall@\d+|p50|p95|p99)\b[^\n\d|]{0,12}(?<![pP@/])\d+\.\d"
    r"|\b(?:times|twice)\s+(?:as\s+)?(?:faster|slower|fast|slow)\b",
    re.I,
)
#: Settings and targets stated with such a unit: (page, text) and why it is not a measurement.
ALLOWED = {
    ("docs/benchmarks.md", "60 %"): "a parameter of the lifecycle data generator",
    ("docs/benchmarks.md", "90 %"): "the lifecycle target",
    ("docs/benchmarks.md", "5 %"): "the lifecycle target",
    ("docs/concepts/ranking.md", "0.8 s"): "the rerank timeout, a setting",
}


def _hand_figures(page: str, text: str) -> list[str]:
    text = figures.MACRO.sub("", text)
    found = []
    for match in HAND_FIGURE.finditer(text):
        if (page, match.group(0)) not in ALLOWED:
            line = text.count("\n", 0, match.start()) + 1
            found.append(f"{page}:{line}: {match.group(0)!r}")
    return found


def test_no_page_states_a_benchmark_figure_by_hand() -> None:
    found = [f for page, text in PAGES.items() for f in _hand_figures(page, text)]
    assert not found, ("figures written by hand (read them from docs/data with {{ fig(...) }}, "
                       "or add a setting to ALLOWED with its reason):\n" + "\n".join(found))


@pytest.mark.parametrize("text", ["p50 5.3 ms", "HTTP adds 1.52 ms", "R@10 79.9", "recall@10 of 46.50",
                                  "86.8 % smaller", "about 7 ms", "0.74 s", "about twice as fast",
                                  "several times faster", "2.0x Chroma's", "98 against 82 req/s", "1.7 KB"])
def test_the_hand_figure_check_catches_figures(text: str) -> None:
    assert _hand_figures("docs/x.md", f"Some text: {text}, more."), text


@pytest.mark.parametrize("text", ["port 27017", "Python 3.12", "torch==2.13.0", "MongoDB 6.0", "30 days",
                                  "2,760 turns", "`--sizes 1000 10000`", "budget_chars=900", "4 MiB", "RFC 9457",
                                  '{{ fig("locomo", "recall.manowar.ALL.R@10", ".1f") }} %'])
def test_the_hand_figure_check_passes_settings_and_macros(text: str) -> None:
    assert not _hand_figures("docs/x.md", f"Some text: {text}, more."), text


# ---------------------------------------------------------------- plots and data files


def _png_text(path: Path) -> dict[str, str]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    chunks, i = {}, 8
    while i < len(data):
        (length,) = struct.unpack(">I", data[i:i + 4])
        kind, body = data[i + 4:i + 8], data[i + 8:i + 8 + length]
        if kind == b"tEXt":
            key, _, value = body.partition(b"\0")
            chunks[key.decode("latin-1")] = value.decode("latin-1")
        i += 12 + length
    return chunks


plots = _module("manowar_bench_plots_test", ROOT / "benchmarks" / "plots.py") if importlib.util.find_spec(
    "matplotlib") else None


@pytest.mark.skipif(plots is None, reason="matplotlib is not installed")
@pytest.mark.parametrize("png", ["recall_vs_budget.png", "latency_vs_size.png"])
def test_each_plot_is_drawn_from_todays_data_file(png: str) -> None:
    assert plots is not None
    data = DATA / plots.PLOTS[png]
    assert data.is_file(), f"{png} is drawn from {data}, which is missing"
    recorded = _png_text(ROOT / "docs" / "assets" / png).get(plots.SOURCE_KEY)
    expected = f"{data.name} sha256={hashlib.sha256(data.read_bytes()).hexdigest()}"
    assert recorded == expected, f"docs/assets/{png} is older than {data.name}: run python benchmarks/plots.py"


def _strings(node: Any) -> list[str]:
    if isinstance(node, dict):
        return [s for k, v in node.items() for s in [k, *_strings(v)]]
    if isinstance(node, list):
        return [s for v in node for s in _strings(v)]
    return [node] if isinstance(node, str) else []


@pytest.mark.parametrize("name", sorted(p.stem for p in DATA.glob("*.json")))
def test_each_data_file_is_a_record_of_its_command(name: str) -> None:
    path = DATA / f"{name}.json"
    record = json.loads(path.read_text())
    assert name in suite.COMMANDS, f"{path}: not a benchmark of benchmarks/suite.py"
    assert record["benchmark"] in (name, name.split("-")[0])
    assert re.fullmatch(r"[0-9a-f]{40}", record["commit"]) and isinstance(record["dirty"], bool)
    assert isinstance(record["cores"], int) and record["cores"] > 0
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", record["date"])
    script = suite.COMMANDS[name].args[0]
    assert record["command"].startswith(f"python {script} ") and f"--json docs/data/{name}.json" in record["command"]
    assert isinstance(record["results"], dict) and record["results"]
    assert path.stat().st_size < 64_000, f"{path}: a summary, not a dump"
    long = [s for s in _strings(record["results"]) if len(s) > 400]
    assert not long, f"{path}: holds long text (no copies of a data set): {long[0][:80]!r}"


def test_the_benchmarks_page_is_not_a_commit_log() -> None:
    """Method, command and figures: the history (commits, issues) is the changelog's."""
    text = PAGES["docs/benchmarks.md"]
    assert not re.findall(r"`[0-9a-f]{7,40}`", text), "commit hashes belong in docs/changelog.md"
    assert not re.findall(r"\bissue #?\d+|#\d{1,4}\b", text, re.I), "issue numbers belong in docs/changelog.md"


def test_the_benchmarks_readme_lists_every_command_of_the_suite() -> None:
    readme = (ROOT / "benchmarks" / "README.md").read_text()
    for name in suite.COMMANDS:
        assert shlex.join(suite.command(name)) in readme, f"benchmarks/README.md does not give the command for {name}"
    assert "bash scripts/bench_all.sh PATH/locomo-dev.json" in readme and (ROOT / "scripts" / "bench_all.sh").is_file()


record = _module("manowar_bench_record_test", ROOT / "benchmarks" / "record.py")


def test_a_record_holds_the_command_and_the_machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", [str(ROOT / "benchmarks" / "latency.py"), "--data", "/somewhere/else/locomo.json",
                                      "--json", str(ROOT / "docs" / "data" / "latency.json")])
    out = tmp_path / "latency.json"
    record.write_record(out, "latency", {"sizes": {"1000": {"p50_ms": 1.5}}})
    written = json.loads(out.read_text())
    assert written["command"] == ("python benchmarks/latency.py --data PATH/locomo.json "
                                  "--json docs/data/latency.json")     # no machine's folders
    assert re.fullmatch(r"[0-9a-f]{40}", written["commit"]) and isinstance(written["dirty"], bool)
    assert written["cores"] >= 1 and written["date"].endswith("+00:00") and written["results"]["sizes"]


@pytest.mark.skipif(plots is None, reason="matplotlib is not installed")
def test_a_plot_records_the_data_file_it_was_drawn_from(tmp_path: Path) -> None:
    assert plots is not None
    data, out = tmp_path / "data", tmp_path / "assets"
    data.mkdir()
    for name in ("locomo", "latency"):
        (data / f"{name}.json").write_text((DATA / f"{name}.json").read_text())
    plots.main(["--data", str(data), "--out", str(out)])
    tag = _png_text(out / "latency_vs_size.png")[plots.SOURCE_KEY]
    assert tag == plots.source_tag(data / "latency.json")
    (data / "latency.json").write_text((data / "latency.json").read_text().replace('"p50_ms": ', '"p50_ms": 1'))
    assert tag != plots.source_tag(data / "latency.json"), "a changed data file must not match the old plot"


def _settings_models() -> list[type[Any]]:
    """MemoryConfig and every settings model nested in it (the API reference renders them all)."""
    from pydantic import BaseModel

    from manowar_memory import MemoryConfig

    found: list[type[Any]] = []
    todo: list[type[Any]] = [MemoryConfig]
    while todo:
        model = todo.pop()
        if model in found:
            continue
        found.append(model)
        for field in model.model_fields.values():
            kind = field.annotation
            if isinstance(kind, type) and issubclass(kind, BaseModel):
                todo.append(kind)
    return found


def test_no_setting_states_a_benchmark_figure_by_hand() -> None:
    """A setting's description says what it does; what it measured goes to the data files and the
    changelog, where a later run cannot leave it stale."""
    found = [f"{model.__name__}.{name}: {match.group(0)!r}"
             for model in _settings_models() for name, field in model.model_fields.items()
             for match in HAND_FIGURE.finditer(field.description or "")]
    assert len(_settings_models()) >= 3
    assert not found, "figures written by hand in setting descriptions:\n" + "\n".join(found)
