"""The plots of the docs' Benchmarks page, from the figures the benchmarks print.

    python benchmarks/plots.py --budget-recall 900:64.7 1800:77.3 4000:84.3 \\
        --size-latency 1000:5.3 10000:6.2 100000:12.9 --out docs/assets

``--budget-recall BUDGET:PERCENT``: evidence turns surviving into the packed context, from the
``ALL`` column of ``benchmarks/locomo.py``'s survival table. ``--size-latency ROWS:P50_MS``:
``pre_turn`` p50 per corpus size from ``benchmarks/latency.py``. Writes
``recall_vs_budget.png`` and ``latency_vs_size.png`` (small: 72 dpi).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def pairs(values: list[str]) -> list[tuple[float, float]]:
    out = []
    for value in values:
        x, _, y = value.partition(":")
        out.append((float(x), float(y)))
    return sorted(out)


def plot(points: list[tuple[float, float]], *, xlabel: str, ylabel: str, title: str, path: Path,
         ylim: tuple[float, float] | None = None) -> None:
    fig, ax = plt.subplots(figsize=(6, 3), dpi=72)
    xs, ys = zip(*points)
    ax.plot(xs, ys, "o-")
    for x, y in points:
        ax.annotate(f"{y:g}", (x, y), textcoords="offset points", xytext=(0, 6), ha="center", fontsize=8)
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
    fig.savefig(path)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--budget-recall", nargs="+", required=True, metavar="BUDGET:PERCENT")
    parser.add_argument("--size-latency", nargs="+", required=True, metavar="ROWS:P50_MS")
    parser.add_argument("--out", type=Path, default=Path("docs/assets"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    plot(pairs(args.budget_recall), xlabel="packed budget (characters)", ylabel="evidence packed (%)",
         title="LoCoMo: evidence in the packed context", path=args.out / "recall_vs_budget.png", ylim=(0, 100))
    plot(pairs(args.size_latency), xlabel="memories in the scope", ylabel="pre_turn p50 (ms)",
         title="pre_turn latency against corpus size", path=args.out / "latency_vs_size.png")
    print(f"wrote {args.out / 'recall_vs_budget.png'} and {args.out / 'latency_vs_size.png'}")


if __name__ == "__main__":
    main()
