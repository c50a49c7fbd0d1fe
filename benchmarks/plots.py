"""The plots of the docs' Benchmarks page, drawn from the benchmarks' data files.

    python benchmarks/plots.py [--data docs/data] [--out docs/assets]

``recall_vs_budget.png``: evidence turns surviving into the packed context against the budget,
from ``locomo.json`` (``benchmarks/locomo.py --json``, ``results.packed.<budget>.ALL``).
``latency_vs_size.png``: ``pre_turn`` p50 per corpus size, from ``latency.json``
(``benchmarks/latency.py --json``, ``results.sizes.<rows>.p50_ms``). Each PNG carries the
SHA-256 of the data file it was drawn from (a ``Source-Data`` text chunk), so
``tests/test_docs_figures.py`` can tell a plot older than its data. Small: 72 dpi.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

ROOT = Path(__file__).resolve().parent.parent
#: plot file -> the data file it is drawn from
PLOTS = {"recall_vs_budget.png": "locomo.json", "latency_vs_size.png": "latency.json"}
SOURCE_KEY = "Source-Data"


def source_tag(data_file: Path) -> str:
    """What a plot records of its data file: the file's name and SHA-256."""
    return f"{data_file.name} sha256={hashlib.sha256(data_file.read_bytes()).hexdigest()}"


def plot(points: list[tuple[float, float]], *, xlabel: str, ylabel: str, title: str, path: Path, source: str,
         ylim: tuple[float, float] | None = None) -> None:
    fig, ax = plt.subplots(figsize=(6, 3), dpi=72)
    xs, ys = zip(*points)
    ax.plot(xs, ys, "o-")
    for x, y in points:
        ax.annotate(f"{y:.1f}", (x, y), textcoords="offset points", xytext=(0, 6), ha="center", fontsize=8)
    ax.set_xscale("log")
    ax.set_xticks(xs, [f"{int(x):,}" for x in xs])
    ax.minorticks_off()
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if ylim:
        ax.set_ylim(*ylim)
    else:
        ax.set_ylim(bottom=0, top=max(ys) * 1.2)
    fig.tight_layout()
    fig.savefig(path, metadata={SOURCE_KEY: source, "Software": None})
    plt.close(fig)


def _results(data_file: Path) -> dict[str, Any]:
    if not data_file.is_file():
        raise SystemExit(f"{data_file} is missing: run scripts/bench_all.sh first")
    results: dict[str, Any] = json.loads(data_file.read_text())["results"]
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=ROOT / "docs" / "data", help="the data files' folder")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "assets")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    locomo = args.data / PLOTS["recall_vs_budget.png"]
    packed = _results(locomo)["packed"]
    plot(sorted((float(budget), row["ALL"]) for budget, row in packed.items()),
         xlabel="packed budget (characters)", ylabel="evidence packed (%)",
         title="LoCoMo: evidence in the packed context", path=args.out / "recall_vs_budget.png",
         source=source_tag(locomo), ylim=(0, 100))
    latency = args.data / PLOTS["latency_vs_size.png"]
    sizes = _results(latency)["sizes"]
    plot(sorted((float(rows), row["p50_ms"]) for rows, row in sizes.items()),
         xlabel="memories in the scope", ylabel="pre_turn p50 (ms)", title="pre_turn latency against corpus size",
         path=args.out / "latency_vs_size.png", source=source_tag(latency))
    print(f"wrote {args.out / 'recall_vs_budget.png'} and {args.out / 'latency_vs_size.png'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
