"""One user's ``pre_turn`` while other users of the same agent grow (issue #14).

    python benchmarks/tenants.py /path/to/locomo-dev.json --store sqlite
    python benchmarks/tenants.py /path/to/locomo-dev.json --store mongodb [--mongo-url mongodb://...]

One agent; user ``user-0`` holds the first LoCoMo conversation (its turns as ingest items:
time, session thread, dialogue id). Other users of the same agent are added, each holding one
of the conversations (in turn), until there are ``--others`` of them (default 1, then 50). At
each step the script times ``MemoryEngine.pre_turn`` for user-0's questions (the first
``--queries``; one warm pass first, which also caches the query embeddings) and prints the
p50/p95 of the call and the p50 of each lane from the result's ``timings_ms``. Only the
engine's public API runs in the timed part.

The embedder defaults to ``fake:384`` (hashed vectors, no model): the figures measure the
store's reads, not embedding or ranking quality; pass ``--embedder local`` for the real model.
MongoDB runs in a scratch database (dropped at the end) on ``--mongo-url``, else
``MANOWAR_MONGO_URL``, else ``MONGODB_URI``; the vector lane is the self-hosted path.

The machine's other load moves absolute figures: compare the rows of one run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from manowar_memory import MemoryEngine, Scope

from locomo import Conversation, ingest_items, load_conversations, memory_texts  # type: ignore[import-not-found]

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


def _time(engine: MemoryEngine, scope: Scope, questions: list[str]) -> tuple[list[float], dict[str, list[float]]]:
    call: Callable[[str], Any] = lambda q: engine.pre_turn(q, scope)  # noqa: E731
    for q in questions:  # warm: query embeddings cached, vector cache loaded
        call(q)
    totals: list[float] = []
    lanes: dict[str, list[float]] = {}
    for q in questions:
        t0 = time.perf_counter()
        result = call(q)
        totals.append((time.perf_counter() - t0) * 1000)
        for name, ms in result.timings_ms.items():
            lanes.setdefault(name, []).append(ms)
    return totals, lanes


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    convs, _, _ = load_conversations(args.locomo, None)
    mine = convs[0]
    questions = [q.text for q in mine.questions][: args.queries]
    last_thread = ingest_items(mine, memory_texts(mine))[-1]["thread_id"]
    scope = Scope(agent_wallet=AGENT, user_address="user-0", thread_id=last_thread)
    rows_out: list[dict[str, Any]] = []
    with _engine(args) as engine:
        rows = _ingest(engine, "user-0", mine)
        present = 0
        for target in sorted(args.others):
            t0 = time.perf_counter()
            while present < target:
                present += 1
                rows += _ingest(engine, f"user-{present}", convs[present % len(convs)])
            load_s = time.perf_counter() - t0
            totals, lanes = _time(engine, scope, questions)
            row = {
                "others": target,
                "rows": rows,
                "load_s": round(load_s, 1),
                "p50": statistics.median(totals),
                "p95": _pct(totals, 0.95),
                "lanes": {k: statistics.median(v) for k, v in lanes.items() if k != "total"},
            }
            rows_out.append(row)
            lane_text = ", ".join(f"{k} {v:.2f}" for k, v in sorted(row["lanes"].items(), key=lambda kv: -kv[1]))
            print(
                f"{args.store:<8} {target:>6} {rows:>7} {row['p50']:>8.2f} {row['p95']:>8.2f}   "
                f"lanes p50 ms: {lane_text}",
                flush=True,
            )
    return rows_out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("locomo", type=Path, help="locomo-dev.json")
    parser.add_argument("--store", choices=("sqlite", "mongodb"), default="sqlite")
    parser.add_argument("--mongo-url", help="MongoDB URL (default MANOWAR_MONGO_URL, else MONGODB_URI)")
    parser.add_argument("--embedder", default="fake:384", help="default fake:384 (no model; store reads only)")
    parser.add_argument("--others", type=int, nargs="+", default=[1, 50], help="other users at each step")
    parser.add_argument("--queries", type=int, default=100, help="user-0's questions timed at each step")
    parser.add_argument("--workdir", type=Path, default=None, help="where the SQLite file goes")
    args = parser.parse_args(argv)
    print(f"{'store':<8} {'others':>6} {'rows':>7} {'p50 ms':>8} {'p95 ms':>8}", flush=True)
    run(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
