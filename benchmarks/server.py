"""`context/assemble` over HTTP against the same call in process.

Fills one LoCoMo-sized scope (default 2,000 memories of 20 threads), serves the REST API with
uvicorn on a free local port (a real socket, an API key), then drives
``POST /api/memory/context/assemble`` with concurrent clients and reports p50/p95 latency and
requests per second, next to ``engine.scoped(scope).context(query)`` run in process with the same
concurrency. The difference at p50 is what the HTTP layer adds.

    python benchmarks/server.py [--memories 2000] [--clients 1,8] [--requests 400] [--embedder fake]
"""

from __future__ import annotations

import argparse
import random
import socket
import statistics
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import httpx
import uvicorn

from manowar_memory import MemoryEngine, Scope
from manowar_memory.server import ApiKeys, create_app, hash_key

WORDS = ("trip lisbon tea garden python concert sister budget marathon piano recipe flight hotel museum "
         "project deadline review bicycle coffee novel painting hiking camera birthday").split()


def fill(engine: MemoryEngine, scope: Scope, n: int) -> list[str]:
    rng = random.Random(7)
    rows = [{"content": f"In session {i // 100} the user talked about {' '.join(rng.sample(WORDS, 5))} ({i})",
             "source": "session" if i % 3 else "knowledge", "thread_id": f"s{i // 100}"} for i in range(n)]
    engine.ingest(scope, rows)
    for i in range(min(n // 20, 200)):
        engine.remember(scope, f"The user likes {rng.choice(WORDS)} and {rng.choice(WORDS)} #{i}")
    return [f"what did we say about {rng.choice(WORDS)} and {rng.choice(WORDS)}?" for _ in range(50)]


def measure(call: Callable[[str], None], queries: list[str], clients: int, requests: int) -> dict[str, float]:
    for q in queries[:10]:
        call(q)  # warm up (caches, connections)
    latencies: list[float] = []
    lock = threading.Lock()

    def one(i: int) -> None:
        t = time.perf_counter()
        call(queries[i % len(queries)])
        with lock:
            latencies.append((time.perf_counter() - t) * 1000)

    start = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(one, range(requests)))
    wall = time.perf_counter() - start
    latencies.sort()
    return {"p50": statistics.median(latencies), "p95": latencies[int(0.95 * (len(latencies) - 1))],
            "rps": requests / wall}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--memories", type=int, default=2000)
    ap.add_argument("--clients", default="1,8")
    ap.add_argument("--requests", type=int, default=400)
    ap.add_argument("--embedder", default="fake")
    ap.add_argument("--store", default="sqlite:///:memory:")
    args = ap.parse_args()

    engine = MemoryEngine(store=args.store, embedder=None if args.embedder == "none" else args.embedder)
    scope = Scope(agent_wallet="bench-agent", user_address="bench-user")
    queries = fill(engine, scope, args.memories)
    app = create_app(engine, keys=ApiKeys([{"sha256": hash_key("bench"), "agentWallet": "bench-agent",
                                            "userAddress": "bench-user"}]))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)

    local = threading.local()

    def http_call(query: str) -> None:
        if not hasattr(local, "client"):
            local.client = httpx.Client(base_url=f"http://127.0.0.1:{port}", headers={"X-API-Key": "bench"})
        r = local.client.post("/api/memory/context/assemble", json={"query": query})
        r.raise_for_status()

    memory = engine.scoped(scope)

    def inproc_call(query: str) -> None:
        memory.context(query)

    print(f"context/assemble, {args.memories} memories + facts in one scope, store={args.store}, "
          f"embedder={args.embedder}, {args.requests} requests")
    print(f"{'clients':>7} {'path':<11} {'p50 ms':>8} {'p95 ms':>8} {'req/s':>8}")
    for clients in (int(c) for c in args.clients.split(",")):
        inproc = measure(inproc_call, queries, clients, args.requests)
        http = measure(http_call, queries, clients, args.requests)
        for name, r in (("in-process", inproc), ("http", http)):
            print(f"{clients:>7} {name:<11} {r['p50']:>8.2f} {r['p95']:>8.2f} {r['rps']:>8.0f}")
        print(f"{clients:>7} {'http adds':<11} {http['p50'] - inproc['p50']:>8.2f} {'':>8} {'':>8}")
    server.should_exit = True
    thread.join(10)
    engine.close()


if __name__ == "__main__":
    main()
