# mypy: disable-error-code="no-untyped-call"
# (nbformat ships no type hints)
"""Execute the notebooks in place, so the docs site shows them with their outputs and plots.

    python scripts/execute_notebooks.py                 every notebook under notebooks/
    python scripts/execute_notebooks.py notebooks/x.ipynb

Each notebook runs top to bottom offline (``HF_HUB_OFFLINE``: the local model loads from disk,
without a progress bar; a scratch ``MANOWAR_HOME`` and working directory), keeps its outputs,
and records the sha256 of its code cells' sources in its metadata (``manowar.sources_sha256``): tests/test_notebooks.py fails when a notebook's code
changed after it was last executed here, so the committed outputs always match the code.
The site renders the committed outputs (mkdocs-jupyter, ``execute: false``), which keeps the
docs build fast and free of a kernel; CI re-runs every notebook in tests/test_notebooks.py.
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"


def sources_digest(nb: nbformat.NotebookNode) -> str:
    """The sha256 of the notebook's code, cell by cell."""
    digest = hashlib.sha256()
    for cell in nb.cells:
        if cell.cell_type == "code":
            digest.update(cell.source.encode() + b"\0")
    return digest.hexdigest()


def execute(nb: nbformat.NotebookNode, workdir: Path, timeout: int = 600) -> nbformat.NotebookNode:
    """Run ``nb`` in ``workdir`` with a scratch ``MANOWAR_HOME``, offline; raises on the first error."""
    env = {"MANOWAR_HOME": str(workdir / "home"), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "HF_HUB_DISABLE_PROGRESS_BARS": "1"}   # the local model loads from disk, without a progress bar
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        NotebookClient(nb, timeout=timeout, kernel_name="python3", record_timing=False,
                       resources={"metadata": {"path": str(workdir)}}).execute()
    finally:
        for key, value in old.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return nb


def main(paths: list[str]) -> None:
    targets = [Path(p) for p in paths] or sorted(NOTEBOOKS.glob("*.ipynb"))
    for path in targets:
        nb = nbformat.read(path, as_version=4)
        with tempfile.TemporaryDirectory() as tmp:
            execute(nb, Path(tmp))
        nb.metadata.setdefault("manowar", {})["sources_sha256"] = sources_digest(nb)
        nbformat.write(nb, path)
        print(f"executed {path} ({path.stat().st_size // 1024} KiB)")


if __name__ == "__main__":
    main(sys.argv[1:])
