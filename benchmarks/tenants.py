"""One user's ``pre_turn`` while other users of the same agent grow (issue #14).

    python benchmarks/tenants.py /path/to/locomo-dev.json --store sqlite
    python benchmarks/tenants.py /path/to/locomo-dev.json --store mongodb [--mongo-url mongodb://...]

One agent; user ``user-0`` holds the first LoCoMo conversation (its turns as ingest items:
time, session thread, dialogue id). One store is filled per step of ``--others`` (default 1
and 50): user-0's conversation plus that many other users of the same agent, each holding one
of the conversations (in turn). After a warm pass in each store (query embeddings cached,
vector caches loaded), user-0's questions (the first ``--queries``, ``--rounds`` times) are
asked of every store in turn, the store that answers first rotating, so a busy moment of the
machine slows every store alike. The script prints, per store, the p50/p95 of
``MemoryEngine.pre_turn``, the p50 of the process's CPU time per call, the ratio of the p50
to the first store's, and the p50 of each entry of ``timings_ms``. Only the engine's public
API runs in the timed part.

The embedder defaults to ``fake:384`` (hashed vectors, no model): the figures measure the
store's reads, not embedding or ranking quality; pass ``--embedder local`` for the real model.
MongoDB runs in a scratch database (dropped at the end) on ``--mongo-url``, else
``MANOWAR_MONGO_URL``, else ``MONGODB_URI``; the vector lane is the self-hosted path.

The machine's other load moves absolute figures: compare the rows of one run (the ratio).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from manowar_memory import MemoryEngine, Scope

from locomo import Conversation, ingest_items, load_conversations, memory_texts  # type: ignore[import-not-found]
from record import write_record  # type: ignore[import-not-found]

AGENT = "tenants-agent"


def _pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@contextmanager
def _engine(args: argparse.Namespace) -> Iterator[MemoryEngine]:
    if args.store == "sqlite":
        with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
            engine = MemoryEngine(store=f"sqlite:///{tmp}/tenants.db", embedder=args.embedder, extractor=None)
            try:
                yield engine
            finally:
                engine.close()
        return
    import pymongo

    from manowar_memory.stores.mongo import MongoStore

    url = args.mongo_url or os.environ.get("MANOWAR_MONGO_URL") or os.environ.get("MONGODB_URI")
    if not url:
        raise SystemExit("--store mongodb needs --mongo-url, MANOWAR_MONGO_URL or MONGODB_URI")
    client: Any = pymongo.MongoClient(url)
    db = f"manowar_tenants_{uuid.uuid4().hex[:10]}"
    try:
        store = MongoStore(client=client, database=db, vector_search="local")
        engine = MemoryEngine(store=store, embedder=args.embedder, extractor=None)
        try:
            yield engine
        finally:
            engine.close()
    finally:
        client.drop_database(db)
        client.close()


def _ingest(engine: MemoryEngine, user: str, conv: Conversation) -> int:
    items = ingest_items(conv, memory_texts(conv))
    engine.ingest(Scope(agent_wallet=AGENT, user_address=user), items, batch_size=2000)
    return len(items)


def _call(engine: MemoryEngine, scope: Scope, question: str) -> tuple[float, float, dict[str, float]]:
    """One ``pre_turn``: wall ms, process CPU ms and its ``timings_ms``."""
    t0, c0 = time.perf_counter(), time.process_time()
    result = engine.pre_turn(question, scope)
    return (time.perf_counter() - t0) * 1000, (time.process_time() - c0) * 1000, result.timings_ms


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    convs, _, _ = load_conversations(args.locomo, None)
    mine = convs[0]
    questions = [q.text for q in mine.questions][: args.queries]
    last_thread = ingest_items(mine, memory_texts(mine))[-1]["thread_id"]
    scope = Scope(agent_wallet=AGENT, user_address="user-0", thread_id=last_thread)
    steps = sorted(set(args.others))
    with ExitStack() as stack:
        engines: list[MemoryEngine] = []
        rows: list[int] = []
        for target in steps:  # one store per step, each filled before any timing
            engine = stack.enter_context(_engine(args))
            count = _ingest(engine, "user-0", mine)
            for user in range(1, target + 1):
                count += _ingest(engine, f"user-{user}", convs[user % len(convs)])
            engines.append(engine)
            rows.append(count)
            print(f"  filled: {target} other users, {count} rows", flush=True)
        for engine in engines:  # warm: query embeddings cached, vector caches loaded
            for q in questions:
                engine.pre_turn(q, scope)
        walls: list[list[float]] = [[] for _ in engines]
        cpus: list[list[float]] = [[] for _ in engines]
        lanes: list[dict[str, list[float]]] = [{} for _ in engines]
        for i, q in enumerate(questions * args.rounds):  # interleaved: a busy moment slows every store alike
            for j in range(len(engines)):
                k = (i + j) % len(engines)  # which store answers first rotates
                wall, cpu, timings = _call(engines[k], scope, q)
                walls[k].append(wall)
                cpus[k].append(cpu)
                for name, ms in timings.items():
                    lanes[k].setdefault(name, []).append(ms)
    out: list[dict[str, Any]] = []
    base = statistics.median(walls[0])
    for target, count, wall, cpu, lane in zip(steps, rows, walls, cpus, lanes):
        row = {
            "others": target, "rows": count, "p50": statistics.median(wall), "p95": _pct(wall, 0.95),
            "cpu_p50": statistics.median(cpu),
            "lanes": {k: statistics.median(v) for k, v in lane.items() if k != "total"},
        }
        row["ratio"] = row["p50"] / base
        out.append(row)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("locomo", type=Path, help="locomo-dev.json")
    parser.add_argument("--store", choices=("sqlite", "mongodb"), default="sqlite")
    parser.add_argument("--mongo-url", help="MongoDB URL (default MANOWAR_MONGO_URL, else MONGODB_URI)")
    parser.add_argument("--embedder", default="fake:384", help="default fake:384 (no model; store reads only)")
    parser.add_argument("--others", type=int, nargs="+", default=[1, 50], help="other users at each step")
    parser.add_argument("--queries", type=int, default=100, help="user-0's questions timed in each store")
    parser.add_argument("--rounds", type=int, default=2, help="timed passes over the questions")
    parser.add_argument("--workdir", type=Path, default=None, help="where the SQLite file goes")
    parser.add_argument("--json", type=Path, help="also write the figures here (the docs' data file)")
    args = parser.parse_args(argv)
    rows = run(args)
    print(f"{'store':<8} {'others':>6} {'rows':>7} {'p50 ms':>8} {'p95 ms':>8} {'cpu p50':>8} {'ratio':>6}")
    for row in rows:
        lane_text = ", ".join(f"{k} {v:.2f}" for k, v in sorted(row["lanes"].items(), key=lambda kv: -kv[1]))
        print(f"{args.store:<8} {row['others']:>6} {row['rows']:>7} {row['p50']:>8.2f} {row['p95']:>8.2f} "
              f"{row['cpu_p50']:>8.2f} {row['ratio']:>6.2f}   lanes p50 ms: {lane_text}")
    if args.json:
        write_record(args.json, f"tenants-{args.store}", {"store": args.store, "embedder": args.embedder,
                                                          "queries": args.queries, "rounds": args.rounds,
                                                          "others": {str(r["others"]): r for r in rows}}, argv)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
