"""`context/assemble` (or `search`) over HTTP against the same call in process.

Fills one LoCoMo-sized scope (default 2,000 memories of 20 threads plus 100 facts) in a SQLite
file, starts ``manowar serve`` on it as its own process (a real socket, an API key, uvicorn with
the loop and HTTP parser ``manowar serve`` picks), and drives
``POST /api/memory/context/assemble`` with concurrent clients (keep-alive connections, one per
client). The same call runs in this process, ``engine.scoped(scope).context(query)``, on an
engine opened on the same file.

Each round has two phases, so that a change of machine load hits both paths alike:

* **paired latency:** every client alternates the two paths query by query (in-process then
  HTTP, then HTTP then in-process, ...); the round's "HTTP adds" is the median of the per-query
  differences, and its p50/p95 per path are over the same queries;
* **throughput:** each path alone for ``--requests`` requests (the order alternating by round),
  giving requests per second.

The report gives the median over the rounds, and each round's "HTTP adds" to show the spread.
Where the added time goes: both paths report the engine's own time (``timings_ms["total"]`` of
the result, read after the clock stops), so "outside the engine" is the paired difference with
the engine's time taken out of both sides (the HTTP layer alone: client, sockets, server,
validation, the hop to a worker thread and serialisation). The machine's load average is
printed with the figures: on a shared machine, every process wake-up an HTTP call needs waits
for a CPU. ``--client httptools`` (a socket and httptools' response parser) shows how much of the
cost is the benchmark's own client. ``--route search`` measures ``POST /api/memory/search``
against the ``memory_search`` tool called in process (a search answer carries no engine time, so
"outside the engine" is the paired difference itself).

    python benchmarks/server.py [--memories 2000] [--clients 1,4] [--requests 300] [--rounds 7]
                                [--client http.client|httpx|httptools] [--embedder fake]
                                [--route context/assemble|search]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from manowar_memory import MemoryEngine, PreTurnResult, Scope
from manowar_memory.server import hash_key
from manowar_memory.tools import memory_tools

sys.path.insert(0, str(Path(__file__).resolve().parent))
from record import write_record  # type: ignore[import-not-found]

WORDS = ("trip lisbon tea garden python concert sister budget marathon piano recipe flight hotel museum "
         "project deadline review bicycle coffee novel painting hiking camera birthday").split()
KEY = "bench-key"
ROUTES = ("context/assemble", "search")


def fill(engine: MemoryEngine, scope: Scope, n: int) -> list[str]:
    rng = random.Random(7)
    rows = [{"content": f"In session {i // 100} the user talked about {' '.join(rng.sample(WORDS, 5))} ({i})",
             "source": "session" if i % 3 else "knowledge", "thread_id": f"s{i // 100}"} for i in range(n)]
    engine.ingest(scope, rows)
    for i in range(min(n // 20, 200)):
        engine.remember(scope, f"The user likes {rng.choice(WORDS)} and {rng.choice(WORDS)} #{i}")
    return [f"what did we say about {rng.choice(WORDS)} and {rng.choice(WORDS)}?" for _ in range(50)]


Call = Callable[[str], object]  # runs one query: the in-process result, or the HTTP response body


def engine_ms(result: object) -> float:
    """The engine's own time of a call (``timings_ms["total"]``), read after the clock stopped."""
    if isinstance(result, PreTurnResult):
        return result.timings_ms["total"]
    if isinstance(result, dict):
        return 0.0  # a search answer (in process) carries no engine time
    timings = json.loads(result).get("timingsMs")  # type: ignore[arg-type]
    return float(timings["total"]) if timings else 0.0


def measure(call: Call, queries: list[str], clients: int, requests: int) -> dict[str, float]:
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


def measure_paired(paths: dict[str, Call], queries: list[str], clients: int, requests: int) -> dict[str, float]:
    """Each client alternates the two paths on the same query; p50/p95 per path, median differences
    (wall clock, and outside the engine: each side's wall time less the engine's own time)."""
    (a, call_a), (b, call_b) = paths.items()
    lat: dict[str, list[float]] = {a: [], b: []}
    diffs: list[float] = []
    outside: list[float] = []
    lock = threading.Lock()

    def timed(call: Call, q: str) -> tuple[float, float]:
        t = time.perf_counter()
        result = call(q)
        return (time.perf_counter() - t) * 1000, engine_ms(result)

    def one(i: int) -> None:
        q = queries[i % len(queries)]
        if i % 2:
            (tb, eb), (ta, ea) = timed(call_b, q), timed(call_a, q)
        else:
            (ta, ea), (tb, eb) = timed(call_a, q), timed(call_b, q)
        with lock:
            lat[a].append(ta)
            lat[b].append(tb)
            diffs.append(tb - ta)
            outside.append((tb - eb) - (ta - ea))

    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(one, range(requests)))
    out = {"diff": statistics.median(diffs), "outside": statistics.median(outside)}
    for name, values in lat.items():
        values.sort()
        out[f"{name} p50"] = statistics.median(values)
        out[f"{name} p95"] = values[int(0.95 * (len(values) - 1))]
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(store: str, embedder: str, port: int) -> subprocess.Popen[bytes]:
    keys = [{"sha256": hash_key(KEY), "agentWallet": "bench-agent", "userAddress": "bench-user"}]
    env = {**os.environ, "MANOWAR_API_KEYS": json.dumps(keys)}
    env.pop("MANOWAR_REDIS_URL", None)  # the in-process engine has no Redis cache: neither has the server
    proc = subprocess.Popen([sys.executable, "-m", "manowar_memory.cli", "serve", "--port", str(port), "--store", store,
                             "--embedder", embedder], env=env, stderr=subprocess.PIPE)
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
            conn.request("GET", "/healthz")
            if conn.getresponse().status == 200:
                return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit(f"manowar serve did not start: {proc.stderr.read().decode() if proc.stderr else ''}")


def http_caller(port: int, kind: str, route: str = "context/assemble") -> Callable[[str], bytes]:
    """One keep-alive connection per client thread; each call returns the response body."""
    local = threading.local()
    path = f"/api/memory/{route}"
    headers = {"X-API-Key": KEY, "Content-Type": "application/json"}
    if kind == "httpx":
        import httpx

        def httpx_call(query: str) -> bytes:
            if not hasattr(local, "client"):
                local.client = httpx.Client(base_url=f"http://127.0.0.1:{port}", headers=headers)
            r = local.client.post(path, json={"query": query})
            r.raise_for_status()
            return r.content

        return httpx_call
    if kind == "httptools":
        return httptools_caller(port, local, path)

    def stdlib_call(query: str) -> bytes:
        for attempt in (1, 2):  # the server closes a connection idle past its keep-alive timeout: reconnect once
            if not hasattr(local, "conn"):
                local.conn = http.client.HTTPConnection("127.0.0.1", port)
            try:
                local.conn.request("POST", path, body=json.dumps({"query": query}),
                                   headers=headers)
                r = local.conn.getresponse()
                body = r.read()
                break
            except (http.client.RemoteDisconnected, ConnectionError):
                local.conn.close()
                del local.conn
                if attempt == 2:
                    raise
        if r.status != 200:
            raise RuntimeError(f"HTTP {r.status}: {body[:300]!r}")
        return body

    return stdlib_call


def httptools_caller(port: int, local: threading.local, path: str) -> Callable[[str], bytes]:
    """The leanest client: one socket per thread, the request written in one send, the response
    read with httptools' parser (what uvicorn parses requests with)."""
    import httptools

    head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nX-API-Key: {KEY}\r\n"
            "Content-Type: application/json\r\nContent-Length: ").encode()

    class Reply:
        def __init__(self) -> None:
            self.chunks: list[bytes] = []
            self.done = False

        def on_body(self, data: bytes) -> None:
            self.chunks.append(data)

        def on_message_complete(self) -> None:
            self.done = True

    def exchange(request: bytes) -> tuple[Reply, Any]:
        if not hasattr(local, "sock"):
            local.sock = socket.create_connection(("127.0.0.1", port))
            local.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        local.sock.sendall(request)
        reply = Reply()
        parser = httptools.HttpResponseParser(reply)
        while not reply.done:
            data = local.sock.recv(65536)
            if not data:
                raise ConnectionError("the server closed the connection")
            parser.feed_data(data)
        return reply, parser

    def call(query: str) -> bytes:
        body = json.dumps({"query": query}).encode()
        request = head + str(len(body)).encode() + b"\r\n\r\n" + body
        try:
            reply, parser = exchange(request)
        except ConnectionError:  # closed while idle past the server's keep-alive timeout: reconnect once
            local.sock.close()
            del local.sock
            reply, parser = exchange(request)
        if parser.get_status_code() != 200:
            raise RuntimeError(f"HTTP {parser.get_status_code()}: {b''.join(reply.chunks)[:300]!r}")
        return b"".join(reply.chunks)

    return call


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--memories", type=int, default=2000)
    ap.add_argument("--clients", default="1,4")
    ap.add_argument("--requests", type=int, default=300, help="requests per path and round")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--client", choices=("http.client", "httpx", "httptools"), default="http.client")
    ap.add_argument("--embedder", default="fake")
    ap.add_argument("--route", choices=ROUTES, default="context/assemble")
    ap.add_argument("--json", type=Path, help="also write the figures here (the docs' data file)")
    args = ap.parse_args()
    results: dict[str, Any] = {"memories": args.memories, "requests": args.requests, "rounds": args.rounds,
                               "client": args.client, "embedder": args.embedder, "route": args.route,
                               "load_average_start": round(os.getloadavg()[0], 2), "clients": {}}

    tmp = tempfile.TemporaryDirectory()
    store = f"sqlite:///{Path(tmp.name) / 'bench.db'}"
    scope = Scope(agent_wallet="bench-agent", user_address="bench-user")
    embedder = None if args.embedder == "none" else args.embedder
    with MemoryEngine(store=store, embedder=embedder) as filler:
        queries = fill(filler, scope, args.memories)
    port = free_port()
    server = start_server(store, args.embedder, port)
    engine = MemoryEngine(store=store, embedder=embedder)
    memory = engine.scoped(scope)
    in_process: Call = memory.context
    if args.route == "search":  # as the route calls it: the memory_search tool on the graph layer
        search = memory_tools(memory, include=["memory_search"])[0]

        def in_process(query: str) -> object:
            return search.call(query=query, k=5, layers=["graph"])

    paths: dict[str, Call] = {"in-process": in_process, "http": http_caller(port, args.client, args.route)}
    try:
        print(f"{args.route}, {args.memories} memories + facts in one scope (SQLite file), embedder={args.embedder}, "
              f"client={args.client}, {args.rounds} interleaved rounds of {args.requests} requests per path; "
              f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
        for clients in (int(c) for c in args.clients.split(",")):
            for call in paths.values():
                for q in queries[:20]:
                    call(q)  # warm up: caches, connections
            paired: list[dict[str, float]] = []
            rps: dict[str, list[float]] = {name: [] for name in paths}
            for r in range(args.rounds):
                paired.append(measure_paired(paths, queries, clients, args.requests))
                for name in (list(paths) if r % 2 == 0 else list(reversed(paths))):
                    rps[name].append(measure(paths[name], queries, clients, args.requests)["rps"])
            print(f"\nclients={clients}   {'p50 ms':>8} {'p95 ms':>8} {'req/s':>8}   (median of {args.rounds} rounds)")
            for name in paths:
                print(f"  {name:<11} {statistics.median(x[f'{name} p50'] for x in paired):>8.2f} "
                      f"{statistics.median(x[f'{name} p95'] for x in paired):>8.2f} {statistics.median(rps[name]):>8.0f}")
            diffs = [x["diff"] for x in paired]
            outside = [x["outside"] for x in paired]
            print(f"  http adds   {statistics.median(diffs):>8.2f} ms at p50 (median of the paired per-query "
                  f"differences; per round: {', '.join(f'{d:.2f}' for d in diffs)})")
            print(f"  outside the engine {statistics.median(outside):.2f} ms (the same, the engine's own time taken out "
                  f"of both sides; per round: {', '.join(f'{d:.2f}' for d in outside)}); "
                  f"load average now {os.getloadavg()[0]:.1f}")
            results["clients"][str(clients)] = {
                **{f"{name}_p50_ms": statistics.median(x[f"{name} p50"] for x in paired) for name in paths},
                **{f"{name}_p95_ms": statistics.median(x[f"{name} p95"] for x in paired) for name in paths},
                **{f"{name}_rps": statistics.median(rps[name]) for name in paths},
                "http_adds_ms": statistics.median(diffs), "http_adds_rounds_ms": diffs,
                "outside_engine_ms": statistics.median(outside),
            }
        if args.json:
            write_record(args.json, "server", results)
    finally:
        server.terminate()
        server.wait(10)
        engine.close()
        tmp.cleanup()


if __name__ == "__main__":
    main()
