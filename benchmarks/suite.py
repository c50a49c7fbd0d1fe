"""Every benchmark the docs quote, with the exact command that writes its data file.

    python benchmarks/suite.py --locomo PATH/locomo-dev.json [--cache-dir DIR] [NAME ...]
    python benchmarks/suite.py --list

Runs the commands of :data:`COMMANDS` (all of them, or the NAMEs given) one after another, each
writing ``docs/data/<name>.json`` through its ``--json`` option (``benchmarks/record.py``: the
figures, the commit, the core count, the date and the command line), then redraws the plots
(``benchmarks/plots.py``) from those files. ``scripts/bench_all.sh`` calls this with the shared
virtual environment. The docs read every figure from these files (``docs/hooks/figures.py``).

``{locomo}`` is the LoCoMo JSON (licensed CC BY-NC, never copied into the repository) and
``{cache}`` a folder for document embeddings kept between runs. Some benchmarks need more than
the embedded store: ``needs`` says which (the servers of ``scripts/services.sh``, the ``[bench]``
extra's peer libraries, a free ``mongod`` for a local replica set).
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "docs" / "data"

__all__ = ["COMMANDS", "DATA", "Benchmark", "command"]


@dataclass(frozen=True)
class Benchmark:
    """One data file and the command that writes it."""

    args: tuple[str, ...]
    needs: str = ""


COMMANDS: dict[str, Benchmark] = {
    "locomo": Benchmark(("benchmarks/locomo.py", "--data", "{locomo}", "--embedder", "local", "--cache-dir", "{cache}")),
    "latency": Benchmark(("benchmarks/latency.py", "--sizes", "1000", "10000", "100000")),
    "latency-mongo": Benchmark(("benchmarks/latency.py", "--store", "mongo", "--redis", "--sizes", "10000"),
                               needs="MongoDB and Redis (scripts/services.sh start)"),
    "scale-index": Benchmark(("benchmarks/scale.py", "index", "--sizes", "100000", "1000000")),
    "scale-pre-turn": Benchmark(("benchmarks/scale.py", "pre-turn", "--sizes", "100000", "1000000", "--queries", "100",
                                 "--configs", "ann", "ann, FTS5 scoring", "ann, pruned", "exact")),
    "scale-recall": Benchmark(("benchmarks/scale.py", "recall", "--locomo", "{locomo}", "--embedder", "onnx",
                               "--cache-dir", "{cache}", "--scan-fractions", "0.3", "0.4", "0.5")),
    "overhead": Benchmark(("benchmarks/overhead.py", "--data", "{locomo}", "--embedder", "fake:384")),
    "tenants-sqlite": Benchmark(("benchmarks/tenants.py", "{locomo}", "--store", "sqlite", "--others", "1", "50")),
    "tenants-mongodb": Benchmark(("benchmarks/tenants.py", "{locomo}", "--store", "mongodb", "--others", "1", "50"),
                                 needs="MongoDB (scripts/services.sh start)"),
    "server": Benchmark(("benchmarks/server.py", "--clients", "1,4", "--requests", "200", "--rounds", "7")),
    "server-search": Benchmark(("benchmarks/server.py", "--route", "search", "--clients", "1", "--requests", "200",
                                "--rounds", "7")),
    "lifecycle": Benchmark(("benchmarks/lifecycle.py", "--users", "100", "--embedder", "local", "--locomo", "{locomo}"),
                           needs="the [bench] extra for the peer systems (missing ones are reported as skipped)"),
    "lifecycle-coverage": Benchmark(("benchmarks/lifecycle.py", "--coverage")),
    "peers": Benchmark(("benchmarks/peers.py", "--data", "{locomo}", "--mode", "both", "--embedder", "onnx",
                        "--compare-embedders", "local", "onnx", "onnx-int8"),
                       needs="the [bench] extra (LangChain, LlamaIndex, Chroma, mem0; a venv of its own)"),
    "peers-onnx1": Benchmark(("benchmarks/peers.py", "--data", "{locomo}", "--embedder", "onnx", "--onnx-threads", "1",
                              "--peers", "chroma", "numpy-scan", "manowar-search", "manowar-pre_turn"),
                             needs="the [bench] extra (Chroma; a venv of its own)"),
    "notes": Benchmark(("benchmarks/notes.py", "--embedder", "local")),
    "cluster": Benchmark(("benchmarks/cluster.py", "--redis", "--failover", "--election-timeout-ms", "2000", "10000"),
                         needs="mongod (scripts/services.sh installs it) for a local 3-member replica set, and Redis"),
}


def command(name: str, locomo: str = "PATH/locomo-dev.json", cache: str = "DIR") -> list[str]:
    """The command line that writes ``docs/data/<name>.json``."""
    bench = COMMANDS[name]
    args = [a.format(locomo=locomo, cache=cache) for a in bench.args]
    return ["python", *args, "--json", f"docs/data/{name}.json"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("names", nargs="*", choices=[[], *COMMANDS], metavar="NAME", help=f"some of {list(COMMANDS)}")
    parser.add_argument("--locomo", help="LoCoMo JSON (locomo-dev.json or locomo10.json)")
    parser.add_argument("--cache-dir", default=str(Path.home() / ".cache" / "manowar-memory" / "bench-embeddings"),
                        help="document embeddings kept between runs (default: ~/.cache/manowar-memory/bench-embeddings)")
    parser.add_argument("--list", action="store_true", help="print the commands and exit")
    args = parser.parse_args(argv)
    names = args.names or list(COMMANDS)
    if args.list:
        for name in names:
            needs = f"   # needs {COMMANDS[name].needs}" if COMMANDS[name].needs else ""
            print(shlex.join(command(name)) + needs)
        return 0
    if args.locomo is None and any("{locomo}" in COMMANDS[n].args for n in names):
        parser.error("--locomo PATH is required for " + ", ".join(n for n in names if "{locomo}" in COMMANDS[n].args))
    failed = []
    Path(args.cache_dir).mkdir(parents=True, exist_ok=True)
    for name in names:
        argv_ = command(name, args.locomo or "", args.cache_dir)
        argv_[0] = sys.executable
        print(f"== {name}: {' '.join(argv_[1:])}", flush=True)
        t0 = time.perf_counter()
        if subprocess.run(argv_, cwd=ROOT, check=False).returncode != 0:
            failed.append(name)
        print(f"== {name}: {time.perf_counter() - t0:.0f} s", flush=True)
    if {"locomo", "latency"} & set(names):
        missing = [f"docs/data/{n}.json" for n in ("locomo", "latency") if not (DATA / f"{n}.json").is_file()]
        if missing:
            print(f"plots not drawn: {', '.join(missing)} missing", file=sys.stderr)
        elif subprocess.run([sys.executable, "benchmarks/plots.py"], cwd=ROOT, check=False).returncode != 0:
            failed.append("plots")
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
