"""pre_turn latency on MongoDB (self-hosted, local-scan vectors), with and without Redis.

    python benchmarks/latency_mongo.py [--size 10000] [--queries 100] [--dims 384]
        [--mongo mongodb://127.0.0.1:27017/?replicaSet=rs0] [--redis redis://127.0.0.1:6379/0]

Builds the same synthetic corpus as ``benchmarks/latency.py`` (N memory rows, a quarter of them
graph facts, plus transcripts, working sessions, patterns and archives) in a scratch MongoDB
database, then times ``pre_turn`` over all six layers in these configurations:

* ``mongo``: embedding cache in process (no Redis);
* ``mongo+redis``: embedding cache in Redis (every pre_turn reads it);
* ``mongo+redis+qcache miss``: the layer query cache in Redis, each query asked for the first
  time (a miss: the full search plus the cache's reads and write);
* ``mongo+redis+qcache hit``: the same queries again (served from Redis);
* ``vector lane only``: ``MongoStore.vector_search`` alone (the streamed exact scan).

As in latency.py, query embeddings are warmed first, so the figures are the engine's and the
servers' cost, not the embedding model's. The scratch database and Redis keys are removed.
"""

from __future__ import annotations

import argparse
import importlib.util
import random
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from manowar_memory import InMemoryCache, MemoryConfig, MemoryEngine, Scope
from manowar_memory.stores.base import MemoryQuery


def _latency_module() -> Any:
    path = Path(__file__).with_name("latency.py")
    spec = importlib.util.spec_from_file_location("manowar_bench_latency", path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def _store(client: Any, db: str) -> Any:
    from manowar_memory.stores.mongo import MongoStore

    return MongoStore(client=client, database=db, vector_search="auto")


def build(client: Any, db: str, size: int, dims: int, seed: int = 7) -> Scope:
    """Load the corpus into ``db``."""
    lat = _latency_module()
    engine = MemoryEngine(store=_store(client, db), embedder=f"fake:{dims}", extractor=None)
    scope = lat.populate(engine, size, seed)
    engine.close()
    return scope


def _stats(samples: list[float]) -> tuple[float, float, float]:
    samples = sorted(samples)
    return statistics.median(samples), samples[int(0.95 * (len(samples) - 1))], statistics.fmean(samples)


def _time(fn: Any, queries: list[str]) -> tuple[float, float, float]:
    samples = []
    for q in queries:
        t0 = time.perf_counter()
        fn(q)
        samples.append((time.perf_counter() - t0) * 1000)
    return _stats(samples)


def run(
    mongo_uri: str, redis_url: str, size: int, n_queries: int, dims: int
) -> list[tuple[str, tuple[float, float, float]]]:
    import pymongo

    from manowar_memory.cache.redis import RedisCache
    from manowar_memory.testing import QueryCachedEngine

    client = pymongo.MongoClient(mongo_uri)
    db = f"manowar_bench_{uuid.uuid4().hex[:10]}"
    prefix = f"manowar-bench:{uuid.uuid4().hex[:8]}:"
    rng = random.Random(11)
    lat = _latency_module()
    queries = [lat._sentence(rng, rng.randint(4, 10)).rstrip(".") + "?" for _ in range(n_queries)]
    rows: list[tuple[str, tuple[float, float, float]]] = []
    redis_cache = RedisCache(redis_url, prefix=prefix)
    try:
        t0 = time.perf_counter()
        scope = build(client, db, size, dims)
        print(f"loaded {size} memories into {db} in {time.perf_counter() - t0:.1f}s", file=sys.stderr)

        plain = MemoryEngine(store=_store(client, db), embedder=f"fake:{dims}", extractor=None, cache=InMemoryCache())
        for q in queries:
            plain.pre_turn(q, scope)  # warm the query embeddings
        rows.append(("mongo (in-process embedding cache)", _time(lambda q: plain.pre_turn(q, scope), queries)))
        vq = MemoryQuery(scope=scope)
        vectors = {q: plain.embedder.embed([q], input_type="query")[0] for q in queries}  # type: ignore[union-attr]
        rows.append(("vector lane only (local-scan)",
                     _time(lambda q: plain.store.vector_search(vq, vectors[q], plain.model_id, 48), queries)))
        print("vector search:", plain.store.vector_search_choice, file=sys.stderr)
        plain.close()

        # embedding cache only: with Redis the engine would also cache layer queries by default
        with_redis = MemoryEngine(store=_store(client, db), embedder=f"fake:{dims}", extractor=None, cache=redis_cache,
                                  config=MemoryConfig(query_cache=False))
        for q in queries:
            with_redis.pre_turn(q, scope)
        rows.append(("mongo + redis (embedding cache)", _time(lambda q: with_redis.pre_turn(q, scope), queries)))
        with_redis.store.close()

        cached = QueryCachedEngine(store=_store(client, db), embedder=f"fake:{dims}", extractor=None,
                                   cache=redis_cache, query_cache_ttl_s=600)
        rows.append(("mongo + redis + layer query cache, miss", _time(lambda q: cached.pre_turn(q, scope), queries)))
        rows.append(("mongo + redis + layer query cache, hit", _time(lambda q: cached.pre_turn(q, scope), queries)))
        assert cached.query_cache_hits == len(queries), cached.query_cache_hits
        cached.store.close()
    finally:
        client.drop_database(db)
        keys = list(redis_cache.client.scan_iter(match=prefix + "*", count=1000))
        for i in range(0, len(keys), 1000):
            redis_cache.client.delete(*keys[i:i + 1000])
        redis_cache.close()
        client.close()
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--dims", type=int, default=384)
    parser.add_argument("--mongo", default="mongodb://127.0.0.1:27017/?replicaSet=rs0")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    args = parser.parse_args(argv)
    rows = run(args.mongo, args.redis, args.size, args.queries, args.dims)
    print(f"{args.size} memories, {args.queries} queries, {args.dims} dims")
    print(f"{'configuration':<44}  {'p50 ms':>8}  {'p95 ms':>8}  {'mean ms':>8}")
    for name, (p50, p95, mean) in rows:
        print(f"{name:<44}  {p50:>8.2f}  {p95:>8.2f}  {mean:>8.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
