"""Maintenance throughput on a file-backed SQLite store: consolidation and decay (rows/s).

    python benchmarks/maintenance.py [--rows 100000] [--agents 10] [--users 20] [--dup 0.2] [--dims 0]

Builds ``--rows`` memory rows spread over agents and users (a ``--dup`` share of them
repeat an earlier row's content for the same agent and user, so consolidation has work),
optionally with ``--dims``-dimensional embeddings, then times ``run_job`` for
``consolidate`` (all agents), ``decay_update`` and a dry-run ``cleanup``. Throughput is rows
scanned per second of wall time, job record included.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from manowar_memory._util import DAY_MS, now_ms
from manowar_memory.jobs import run_job
from manowar_memory.records import MemoryRecord
from manowar_memory.stores.sqlite import SQLiteStore

WORDS = "alpha beta gamma delta user prefers likes works lives coffee tea remote office python rust go".split()


def build(store: SQLiteStore, rows: int, agents: int, users: int, dup: float, dims: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    now = now_ms()
    wallets = [f"0xagent{a:04d}" for a in range(agents)]
    seen: dict[tuple[str, str], list[str]] = {}
    batch: list[MemoryRecord] = []
    for i in range(rows):
        wallet, user = rng.choice(wallets), f"user{rng.randrange(users)}"
        prior = seen.get((wallet, user))
        if prior and rng.random() < dup:
            content = rng.choice(prior)
        else:
            content = " ".join(rng.choices(WORDS, k=8)) + f" #{i}"
            seen.setdefault((wallet, user), []).append(content)
        created = now - rng.randrange(0, 200 * DAY_MS)
        emb = [rng.random() for _ in range(dims)] if dims else None
        batch.append(MemoryRecord(id=f"m{i}", agent_wallet=wallet, user_address=user, content=content,
                                  created_at=created, updated_at=created, last_accessed_at=created, embedding=emb,
                                  embedding_model="bench" if emb else None))
        if len(batch) == 5000:
            store.add_memories(batch)
            batch = []
    if batch:
        store.add_memories(batch)
    return wallets


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--agents", type=int, default=10)
    ap.add_argument("--users", type=int, default=20)
    ap.add_argument("--dup", type=float, default=0.2)
    ap.add_argument("--dims", type=int, default=0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store = SQLiteStore(Path(tmp) / "bench.db")
        t0 = time.perf_counter()
        wallets = build(store, args.rows, args.agents, args.users, args.dup, args.dims)
        print(f"built {args.rows} rows in {time.perf_counter() - t0:.1f}s "
              f"({args.agents} agents, {args.users} users, dup {args.dup}, dims {args.dims})")
        for label, job_type, params, dry in [
            ("consolidate", "consolidate", {"agent_wallets": wallets}, False),
            ("consolidate (rerun, nothing new)", "consolidate", {"agent_wallets": wallets}, False),
            ("decay_update", "decay_update", {"half_life_days": 30}, False),
            ("cleanup (dry run)", "cleanup", {"older_than_days": 90}, True),
        ]:
            t = time.perf_counter()
            job = run_job(store, job_type, params, dry_run=dry)
            dt = time.perf_counter() - t
            assert job.status == "completed", job.error
            summary = {k: v for k, v in job.data.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
            print(f"{label:34s} {dt:7.2f}s  {args.rows / dt:10,.0f} rows/s  {summary}")
        store.close()


if __name__ == "__main__":
    main()
