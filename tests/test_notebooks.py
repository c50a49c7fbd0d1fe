# mypy: disable-error-code="no-untyped-call"
# (nbformat ships no type hints)
"""The notebooks under notebooks/ run top to bottom (so they cannot rot), show their plots
inline, and are committed executed, with outputs that match their code (the docs site renders
the committed outputs; ``python scripts/execute_notebooks.py`` refreshes them)."""

from __future__ import annotations

import base64
import importlib.util
import re
import shutil
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def _code(path: Path) -> str:
    return "\n".join(c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code")


# executing a notebook that embeds with the local model loads MiniLM
EXECUTIONS = [pytest.param(p, id=p.stem, marks=[pytest.mark.local_model] if 'embedder="local"' in _code(p) else [])
              for p in NOTEBOOKS]
MAX_PNG_BYTES = 60_000
MAX_NOTEBOOK_BYTES = 300_000

_spec = importlib.util.spec_from_file_location("execute_notebooks", ROOT / "scripts" / "execute_notebooks.py")
assert _spec is not None and _spec.loader is not None
runner = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(runner)


def _outputs(nb: nbformat.NotebookNode) -> list[nbformat.NotebookNode]:
    return [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]


# an untrusted-content marker, whole (the packer wraps recalled memory in a pair of them)
_MARKER = re.compile(r"<<<(END_)?UNTRUSTED_[0-9a-f]+>>>")
_CUT_MARKER = re.compile(r"<<<[EU]|UNTRUSTED_")   # what is left of a marker cut short


def _wrapper_defects(nb: nbformat.NotebookNode) -> list[str]:
    """Where a reader sees the untrusted-content wrapper instead of a memory's own text: any
    marker in a table (an output with an HTML form, e.g. a DataFrame), and anywhere else a
    marker cut short or a wrapper left open."""
    defects = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            text = out.get("text", "") if out.output_type == "stream" else data.get("text/plain", "")
            where = f"cell {cell.execution_count}"
            markers = list(_MARKER.finditer(text))
            if "text/html" in data and ("UNTRUSTED_" in data["text/html"] or "UNTRUSTED_" in text):
                defects.append(f"{where}: a table shows the untrusted-content wrapper, not the memory's text")
            elif _CUT_MARKER.search(_MARKER.sub("", text)):
                defects.append(f"{where}: an untrusted-content marker cut short: {text[:120]!r}")
            elif [m.group(0) for m in markers if not m.group(1)] != [
                    m.group(0).replace("END_", "") for m in markers if m.group(1)]:
                defects.append(f"{where}: an untrusted-content wrapper left open: {text[:120]!r}")
    return defects


def test_the_wrapper_check_finds_the_wrapper_in_a_table_and_cut_markers() -> None:
    cut = "<<<UNTRUSTED_3353e5e65d6c44514c7b79ec>>>\\nSour..."      # as a DataFrame cell shows it
    whole = "<<<UNTRUSTED_ab12>>>\nSource: Memory\n---\n[GRAPH] x\n<<<END_UNTRUSTED_ab12>>>\n"
    cell = nbformat.v4.new_code_cell("x", execution_count=1)
    nb = nbformat.v4.new_notebook(cells=[cell])
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=whole)]
    assert _wrapper_defects(nb) == []                      # a printed prompt shows the whole wrapper
    cell.outputs = [nbformat.v4.new_output("execute_result", {
        "text/plain": f"  text\n0  {cut}", "text/html": f"<td>{cut.replace('<', '&lt;')}</td>"})]
    assert "a table shows" in _wrapper_defects(nb)[0]
    cell.outputs = [nbformat.v4.new_output("execute_result", {"text/plain": f"0    {cut}"})]   # a Series
    assert "left open" in _wrapper_defects(nb)[0]
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=whole[:-12])]
    assert "cut short" in _wrapper_defects(nb)[0]


def _pngs(nb: nbformat.NotebookNode) -> list[bytes]:
    return [base64.b64decode(o["data"]["image/png"]) for o in _outputs(nb) if "image/png" in o.get("data", {})]


@pytest.mark.slow
@pytest.mark.parametrize("path", EXECUTIONS)
def test_notebook_executes(path: Path, tmp_path: Path) -> None:
    work = tmp_path / path.name
    shutil.copy(path, work)
    nb = nbformat.read(work, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = []
    runner.execute(nb, tmp_path)
    errors = [o for o in _outputs(nb) if o.output_type == "error"]
    assert not errors
    assert not _wrapper_defects(nb)
    assert _pngs(nb), "the notebook should show its plots inline"
    assert not list(tmp_path.glob("*.png")), "plots are shown inline, not written to the working directory"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_is_committed_executed(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    stale = "run `python scripts/execute_notebooks.py` and commit the notebook"
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.execution_count is not None for c in code), f"{path.name} has cells never executed: {stale}"
    assert nb.metadata.get("manowar", {}).get("sources_sha256") == runner.sources_digest(nb), (
        f"{path.name}'s code changed since its outputs were made: {stale}")
    assert not [o for o in _outputs(nb) if o.output_type == "error"]
    assert not _wrapper_defects(nb), f"{path.name}: tables should show the memories' own text"
    pngs = _pngs(nb)
    assert pngs, f"{path.name} shows no plot"
    assert all(png.startswith(b"\x89PNG") and len(png) <= MAX_PNG_BYTES for png in pngs), "keep the plots small"
    assert path.stat().st_size <= MAX_NOTEBOOK_BYTES


def test_the_quickstart_notebook_plots_what_the_docs_promise() -> None:
    nb = nbformat.read(ROOT / "notebooks" / "quickstart.ipynb", as_version=4)
    source = "\n".join(c.source for c in nb.cells)
    for what in ("Recall against the packed budget", "Latency against corpus size", "Decay, half-life 30 days",
                 "The packer's ledger"):
        assert what in source
    assert len(_pngs(nb)) >= 4


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebooks_that_plot_scores_embed_with_the_real_model(path: Path) -> None:
    """The fake embedder's similarities are hash noise: a plotted score comes from real embeddings."""
    source = _code(path)
    if re.search(r'set_[xy]label\("(relevance |retrieval )?score"', source):
        assert 'embedder="local"' in source and 'embedder="fake"' not in source, (
            f"{path.name} plots scores: build its engine with embedder=\"local\"")
