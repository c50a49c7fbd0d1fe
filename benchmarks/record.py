"""The data file a benchmark writes with ``--json PATH``: the figures the docs quote, and how
they were measured.

Every benchmark that the docs quote writes one small JSON file (``docs/data/<name>.json`` by the
commands of ``scripts/bench_all.sh``)::

    {"benchmark": "latency", "command": "python benchmarks/latency.py --sizes 1000 10000 ...",
     "commit": "5f28f55...", "dirty": false, "cores": 2, "date": "2026-11-26T02:50:00+00:00",
     "python": "3.12.3", "platform": "Linux-...", "results": {...}}

``results`` holds summaries only (percentiles, recall per category, ...): no per-question rows and
no text of the data sets (LoCoMo is licensed CC BY-NC). The docs read figures from ``results``
through ``docs/hooks/figures.py`` and ``benchmarks/plots.py`` draws from the same files, so a
figure is written down in one place.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

__all__ = ["ROOT", "machine", "write_record"]

ROOT = Path(__file__).resolve().parent.parent


def _git(*args: str) -> str:
    try:
        run = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10, check=False)
    except OSError:
        return ""
    return run.stdout.strip() if run.returncode == 0 else ""


def _arg(arg: str) -> str:
    """An argument as the command line shows it: a path inside the checkout relative to it, an
    absolute path elsewhere (a data set, a cache) as ``PATH/<its name>``, which says what to pass
    without recording one machine's folders."""
    if not arg.startswith("/"):
        return arg
    path = Path(arg)
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return f"PATH/{path.name}"


def _command(argv: list[str] | None) -> str:
    args = sys.argv[1:] if argv is None else list(argv)
    return shlex.join(["python", _arg(str(Path(sys.argv[0]).resolve())), *map(_arg, args)])


def machine() -> dict[str, Any]:
    """The commit (with a dirty flag: uncommitted changes outside the docs and the tests, which
    cannot change a measurement), core count, date, Python and platform of this run."""
    status = _git("status", "--porcelain", "--", ".", ":(exclude)docs", ":(exclude)tests", ":(exclude)README.md")
    return {
        "commit": _git("rev-parse", "HEAD") or "unknown",
        "dirty": bool(status),
        "cores": os.cpu_count() or 0,
        "load_average": round(os.getloadavg()[0], 1),  # other jobs on the machine when the run ended
        "date": _dt.datetime.now(_dt.UTC).replace(microsecond=0).isoformat(),
        "python": platform.python_version(),
        "platform": platform.platform(terse=True),
    }


def write_record(path: Path, benchmark: str, results: dict[str, Any], argv: list[str] | None = None) -> None:
    """Write ``results`` of ``benchmark`` to ``path`` with the exact command line and the
    machine (see :func:`machine`). ``argv``: the arguments parsed (default ``sys.argv[1:]``)."""
    record = {"benchmark": benchmark, "command": _command(argv), **machine(), "results": results}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2, sort_keys=False) + "\n")
    print(f"wrote {path}", file=sys.stderr)
