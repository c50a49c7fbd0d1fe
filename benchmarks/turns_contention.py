"""``post_turn`` under contention: turns per second and p95 latency (issue #28).

    python benchmarks/turns_contention.py [--stores sqlite mongodb] [--writers 1 4 8] [--turns 20] [--out run.json]

For each store and each writer count, the writers (Python threads, each with its own engine on
the same store, as the workers of a web app) post ``--turns`` turns each (a user and an
assistant message, an explicit turn id, no fact extraction), first all on ONE thread, then each
on a thread of its own. The script prints, per run, the turns per second (acknowledged turns
over the wall time), the p50/p95 of one ``post_turn`` call, and ``lost``: acknowledged
messages missing from the transcripts afterwards (a version that read, appended and wrote the
transcript back lost them under contention; it should be 0). ``--out`` writes the rows as JSON.

SQLite runs on a file in a scratch directory; MongoDB in a scratch database (dropped at the
end) on ``--mongo-url``, else ``MONGODB_URI``. The embedder is ``fake`` (hashed vectors, no
model): the figures measure the writes. The machine's other load moves absolute figures:
compare the rows of one run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from manowar_memory import MemoryEngine, Scope
from manowar_memory.errors import ManowarError

AGENT = "contention-agent"
USER = "contention-user"


def _pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@contextmanager
def _store(kind: str, mongo_url: str | None) -> Iterator[Callable[[], MemoryEngine]]:
    """Yields a factory of engines on one scratch store of ``kind``."""
    if kind == "sqlite":
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "turns.db"
            yield lambda: MemoryEngine(store=f"sqlite:///{path}", embedder="fake", extractor=None)
        return
    import pymongo

    from manowar_memory.stores.mongo import MongoStore

    url = mongo_url or os.environ.get("MONGODB_URI")
    if not url:
        raise SystemExit("MongoDB: pass --mongo-url or set MONGODB_URI")
    name = f"manowar_bench_{uuid.uuid4().hex[:10]}"
    client: Any = pymongo.MongoClient(url)
    try:
        MongoStore(client=client, database=name)  # indexes once, before the writers start
        yield lambda: MemoryEngine(store=MongoStore(client=client, database=name, create_indexes=False),
                                   embedder="fake", extractor=None)
    finally:
        client.drop_database(name)
        client.close()


def run_one(factory: Callable[[], MemoryEngine], writers: int, turns: int, shared: bool) -> dict[str, Any]:
    run = uuid.uuid4().hex[:8]
    engines = [factory() for _ in range(writers)]
    scopes = [Scope(agent_wallet=AGENT, user_address=USER, thread_id=f"{run}-{'one' if shared else w}")
              for w in range(writers)]
    latencies: list[list[float]] = [[] for _ in range(writers)]
    errors: list[BaseException] = []
    start = threading.Barrier(writers + 1)

    def write(w: int) -> None:
        start.wait()
        try:
            for n in range(turns):
                t0 = time.perf_counter()
                engines[w].post_turn(scopes[w], [{"role": "user", "content": f"w{w} asks {n}"},
                                                 {"role": "assistant", "content": f"w{w} answers {n}"}],
                                     turn_id=f"{run}-w{w}-{n}", extract_facts=False)
                latencies[w].append((time.perf_counter() - t0) * 1000)
        except ManowarError as exc:  # reported in the row
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    acked = sum(len(x) for x in latencies)
    stored: set[str] = set()
    for scope in dict.fromkeys(scopes):
        stored |= {m.content for m in engines[0].thread_messages(scope)}
    expected = {f"w{w} {verb} {n}" for w in range(writers) for n in range(len(latencies[w]))
                for verb in ("asks", "answers")}
    for engine in engines:
        engine.close()
    flat = [x for xs in latencies for x in xs]
    return {
        "writers": writers, "thread": "one" if shared else "separate", "turns": acked,
        "turns_per_s": round(acked / wall, 1) if wall else 0.0,
        "p50_ms": round(statistics.median(flat), 2) if flat else None,
        "p95_ms": round(_pct(flat, 0.95), 2) if flat else None,
        "lost": len(expected - stored), "errors": [f"{type(e).__name__}: {e}"[:200] for e in errors],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stores", nargs="+", choices=("sqlite", "mongodb"), default=["sqlite", "mongodb"])
    parser.add_argument("--writers", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--turns", type=int, default=20, help="turns per writer in each run")
    parser.add_argument("--mongo-url", help="MongoDB URL (default MONGODB_URI)")
    parser.add_argument("--out", type=Path, help="write the rows as JSON here")
    args = parser.parse_args(argv)
    rows: list[dict[str, Any]] = []
    print(f"{'store':8} {'thread':9} {'writers':>7} {'turns':>6} {'turns/s':>8} {'p50 ms':>8} {'p95 ms':>8} {'lost':>5}")
    for kind in args.stores:
        with _store(kind, args.mongo_url) as factory:
            for shared in (True, False):
                for writers in args.writers:
                    row = {"store": kind, **run_one(factory, writers, args.turns, shared)}
                    rows.append(row)
                    print(f"{kind:8} {row['thread']:9} {writers:>7} {row['turns']:>6} {row['turns_per_s']:>8} "
                          f"{row['p50_ms']:>8} {row['p95_ms']:>8} {row['lost']:>5}"
                          + (f"  errors: {len(row['errors'])} ({row['errors'][0]})" if row["errors"] else ""),
                          flush=True)
    if args.out:
        args.out.write_text(json.dumps({"turns_per_writer": args.turns, "rows": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
