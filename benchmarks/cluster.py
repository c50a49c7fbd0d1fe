"""Engines past one process: pre_turn and post_turn throughput and latency with 1, 2 and 4
engine processes on one MongoDB replica set, with and without a shared Redis, next to one
process on the embedded SQLite store; and how long reads pause when the primary is killed.

    python benchmarks/cluster.py [--turns 100] [--procs 1 2 4] [--redis [URL]] [--uri mongodb://...]
        [--failover] [--election-timeout-ms 2000]

Without ``--uri`` a three-member replica set of local ``mongod`` processes is started on free
ports (the binary ``scripts/services.sh`` installs; 0.25 GB WiredTiger cache each) and stopped
afterwards. The store runs with its defaults: majority write concern, retryable writes and
reads, the in-process vector cache on. Each engine process writes ``--turns`` post_turns and
then runs as many pre_turns (each query new, so the query cache never hits) in its own user
and thread of one agent; all processes start together. Throughput is the calls of all
processes over the phase's wall time. With ``--redis`` the engines share one RedisCache
(embedding cache and layer query cache, under a scratch key prefix removed afterwards).

``--failover``: two engine processes write and read in a loop (as ``tests/cluster``) while the
primary is SIGKILLed; prints how long the election took and the longest pause between two
successful pre_turns of each engine, with the replica set's ``electionTimeoutMillis``.

The embedder is the deterministic FakeEmbedder: the figures are the engine's and the store's
cost, not a model's.
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from manowar_memory import MemoryConfig, MemoryEngine
from manowar_memory.testing.cluster import EngineProcess, ReplicaSet, bench_turns

sys.path.insert(0, str(Path(__file__).resolve().parent))
from record import write_record  # type: ignore[import-not-found]


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def summarize(label: str, results: list[dict[str, Any]]) -> dict[str, Any]:
    row: dict[str, Any] = {"config": label}
    for phase in ("post", "pre"):
        lat = [ms for r in results for ms in r[f"{phase}_ms"]]
        start = min(r[f"{phase}_window"][0] for r in results)
        end = max(r[f"{phase}_window"][1] for r in results)
        row[phase] = {"per_s": len(lat) / (end - start), "p50": statistics.median(lat), "p95": pct(lat, 0.95)}
    stages: dict[str, list[float]] = {}
    for r in results:
        for stage, values in r["pre_stage_ms"].items():
            stages.setdefault(stage, []).extend(values)
    row["stages"] = {k: statistics.median(v) for k, v in stages.items()}
    return row


def print_row(row: dict[str, Any]) -> None:
    post, pre = row["post"], row["pre"]
    print(f"| {row['config']:<34} | {post['per_s']:7.1f} | {post['p50']:6.1f} | {post['p95']:6.1f} "
          f"| {pre['per_s']:7.1f} | {pre['p50']:6.1f} | {pre['p95']:6.1f} |", flush=True)


def print_stages(rows: list[dict[str, Any]]) -> None:
    """The median of each pre_turn stage (``PreTurnResult.timings_ms``) per configuration."""
    print("\npre_turn stages, median ms (embed, lane work inside layers, layers in all, pack):")
    for row in rows:
        st = row["stages"]
        lanes = ", ".join(f"{k.split('.', 1)[1]} {v:.1f}" for k, v in st.items() if k.startswith("graph+vectors."))
        print(f"  {row['config']:<34} embed {st.get('embed', 0):.1f}, {lanes}, layers {st.get('layers', 0):.1f}, "
              f"pack {st.get('pack', 0):.1f}")


def embedded(turns: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        engine = MemoryEngine(store=f"sqlite:///{Path(tmp) / 'memory.db'}", embedder="fake", config=MemoryConfig())
        try:
            return summarize("embedded SQLite, 1 process", [bench_turns(engine, agent="bench", tag="solo", n=turns)])
        finally:
            engine.close()


def on_replica_set(uri: str, procs: int, turns: int, redis_url: str | None) -> dict[str, Any]:
    database = f"manowar_bench_{uuid.uuid4().hex[:8]}"
    prefix = f"manowar-bench:{uuid.uuid4().hex[:8]}:"
    engines = [EngineProcess(uri, database, redis_url=redis_url, redis_prefix=prefix) for _ in range(procs)]
    try:
        start_at = time.time() + 1.0
        for n, engine in enumerate(engines):
            engine.send("bench", agent="bench", tag=f"p{n}", n=turns, start_at=start_at)
        results = [engine.receive() for engine in engines]
    finally:
        for engine in engines:
            engine.close()
        import pymongo

        pymongo.MongoClient(uri).drop_database(database)
        if redis_url:
            import redis

            client = redis.Redis.from_url(redis_url)
            keys = list(client.scan_iter(match=f"{prefix}*", count=500))
            if keys:
                client.delete(*keys)
    return summarize(f"replica set, {procs} process{'es' if procs > 1 else ''}" + (" + Redis" if redis_url else ""),
                     results)


def failover(election_timeout_ms: int) -> dict[str, Any]:
    settings = {"electionTimeoutMillis": election_timeout_ms, "heartbeatIntervalMillis": min(2000, election_timeout_ms // 4)}
    with ReplicaSet(3, settings=settings) as rs:
        database = f"manowar_failover_{uuid.uuid4().hex[:8]}"
        engines = [EngineProcess(rs.uri, database) for _ in range(2)]
        seconds = 8 + 2 * election_timeout_ms / 1000
        try:
            for n, engine in enumerate(engines):
                engine.send("churn", tag=f"w{n}", agent="failover", seconds=seconds, delay=0.02)
            time.sleep(3)
            old = rs.primary()
            killed = time.time()
            rs.kill(old)
            rs.wait_primary(120)
            elected = time.time() - killed
            results = [engine.receive() for engine in engines]
        finally:
            for engine in engines:
                engine.close()
    print(f"\nfailover (electionTimeoutMillis={election_timeout_ms}): new primary {elected:.1f} s after SIGKILL")
    out: dict[str, Any] = {"election_timeout_ms": election_timeout_ms, "new_primary_s": elected, "engines": []}
    for n, result in enumerate(results):
        reads = result["reads"]
        gap = max(b - a for a, b in itertools.pairwise(reads))
        resumed = min(t for t in reads if t > killed) - killed
        errors = sorted({e["type"] for e in result["errors"]})
        writes = sum(len(v) for v in result["acked"].values())
        print(f"  engine {n}: {writes} writes acknowledged, first read {resumed:.1f} s after the kill, "
              f"longest pause between reads {gap:.1f} s, errors raised: {errors or 'none'}")
        out["engines"].append({"writes_acknowledged": writes, "reads_resumed_s": resumed, "longest_pause_s": gap,
                               "errors": errors})
    out["reads_resumed_min_s"] = min(e["reads_resumed_s"] for e in out["engines"])
    out["reads_resumed_max_s"] = max(e["reads_resumed_s"] for e in out["engines"])
    out["errors_raised"] = sorted({t for e in out["engines"] for t in e["errors"]})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=100, help="post_turns (and pre_turns) per process")
    parser.add_argument("--procs", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--uri", help="an existing replica set (default: start a local 3-member one)")
    parser.add_argument("--redis", nargs="?", const=os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"))
    parser.add_argument("--failover", action="store_true")
    parser.add_argument("--election-timeout-ms", type=int, nargs="+", default=[2000],
                        help="with --failover: one failover per value (MongoDB's default is 10000)")
    parser.add_argument("--failover-only", action="store_true", help="skip the throughput runs")
    parser.add_argument("--json", type=Path, help="also write the figures here (the docs' data file)")
    args = parser.parse_args()
    results: dict[str, Any] = {"turns": args.turns, "load_average_start": round(os.getloadavg()[0], 2)}
    if args.failover_only:
        args.procs = []

    print(f"{args.turns} post_turns then {args.turns} pre_turns per process; os.cpu_count()={os.cpu_count()}, "
          f"load average before: {os.getloadavg()[0]:.1f}")
    print("| configuration                      | post/s  | p50 ms | p95 ms | pre/s   | p50 ms | p95 ms |")
    print("|------------------------------------|---------|--------|--------|---------|--------|--------|")
    rows = [] if args.failover_only else [embedded(args.turns)]
    for row in rows:
        print_row(row)
    rs = None if args.uri or args.failover_only else ReplicaSet(3).start()
    try:
        uri = args.uri or (rs.uri if rs is not None else "")
        for redis_url in [None] + ([args.redis] if args.redis else []):
            for procs in args.procs:
                rows.append(on_replica_set(uri, procs, args.turns, redis_url))
                print_row(rows[-1])
    finally:
        if rs is not None:
            rs.stop()
    print_stages(rows)
    results["configs"] = {row["config"]: row for row in rows}
    if args.failover:
        results["failover"] = {str(ms): failover(ms) for ms in args.election_timeout_ms}
    if args.json:
        write_record(args.json, "cluster", results)


if __name__ == "__main__":
    sys.exit(main())
