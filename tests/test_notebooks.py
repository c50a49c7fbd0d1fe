"""The notebooks under notebooks/ run top to bottom (so they cannot rot), show their plots
inline, and are committed executed, with outputs that match their code (the docs site renders
the committed outputs; ``python scripts/execute_notebooks.py`` refreshes them)."""

from __future__ import annotations

import base64
import importlib.util
import shutil
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
MAX_PNG_BYTES = 60_000
MAX_NOTEBOOK_BYTES = 300_000

_spec = importlib.util.spec_from_file_location("execute_notebooks", ROOT / "scripts" / "execute_notebooks.py")
assert _spec is not None and _spec.loader is not None
runner = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(runner)


def _outputs(nb: nbformat.NotebookNode) -> list[nbformat.NotebookNode]:
    return [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]


def _pngs(nb: nbformat.NotebookNode) -> list[bytes]:
    return [base64.b64decode(o["data"]["image/png"]) for o in _outputs(nb) if "image/png" in o.get("data", {})]


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
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
