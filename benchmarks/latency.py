"""pre_turn latency at several corpus sizes, on the embedded store or on MongoDB.

    python benchmarks/latency.py [--sizes 1000 10000 100000] [--queries 200] [--dims 384]
    python benchmarks/latency.py --store mongo [--redis [URL]] [--sizes 10000] [--queries 100]
        [--mongo mongodb://127.0.0.1:27017/?replicaSet=rs0]

On MongoDB (a scratch database, dropped afterwards; the self-hosted vector path) each size is
timed in these configurations:

* ``mongo``: the in-process vector cache (the default) and an in-process embedding cache;
* ``mongo, streaming scan``: the same with the vector cache off (``vector_cache_bytes=0``);
* ``vector lane only``: ``MongoStore.vector_search`` alone, cached and streamed;
* with ``--redis``: ``mongo + redis`` (the embedding cache in Redis, read by every pre_turn,
  layer query cache off), then the layer query cache in Redis, each query asked for the first
  time (``miss``: the full search plus the cache's reads and write) and again (``hit``).
  The Redis keys are removed afterwards.

Builds one agent/user scope per size with N memory rows (vectors and graph facts mixed),
plus
transcripts, working sessions, patterns and archives, then times ``pre_turn`` over all six
layers. Query embeddings are cached (each query is run once before timing), so the figure
is the engine's own cost, not the embedding model's. The embedder is the deterministic
FakeEmbedder at the dimension of all-MiniLM-L6-v2 (384), so vector search does the same
work as with the real model.

The text is synthetic but shaped like natural language: words drawn from a 20k-word
vocabulary with Zipf-distributed frequencies whose most frequent words are real English
stop words (which the keyword lane drops from queries, as it does for real text). Posting
list lengths, and so the FTS5 cost, then behave as they do on real memories. A corpus built
from a tiny vocabulary where every query word is in most rows is far slower (every FTS
query touches most of the table) and is not what agents store.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from manowar_memory import InMemoryCache, MemoryConfig, MemoryEngine, Pattern, Scope
from manowar_memory._util import STOPWORDS
from manowar_memory.records import Archive, PatternStep, PatternTrigger
from manowar_memory.stores.base import MemoryQuery

from record import write_record  # type: ignore[import-not-found]

TOPICAL = (
    "project deadline meeting python rust database cache redis mongo lisbon hiking dog sister coffee tea "
    "typescript example preference travel flight hotel budget invoice customer support release deploy "
    "kubernetes docker latency memory vector search index query agent tool workflow schedule report "
    "marathon guitar piano painting garden recipe pasta allergy doctor appointment birthday gift movie "
    "book novel podcast conference talk slides demo team manager promotion salary apartment rent move"
).split()
_SYLLABLES = [c + v for c in "bcdfghjklmnprstvz" for v in "aeiou"]


def vocabulary(size: int = 20_000, seed: int = 3) -> list[str]:
    """Function words first (most frequent, dropped from queries like real stop words), then
    topical words, then synthetic content words, ranked for a Zipf distribution."""
    rng = random.Random(seed)
    synthetic: dict[str, None] = {}
    while len(synthetic) < size:
        synthetic["".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 4)))] = None
    return sorted(STOPWORDS) + TOPICAL + list(synthetic)


VOCAB = vocabulary()


def _sentence(rng: random.Random, n: int) -> str:
    # Zipf (P(rank r) ∝ 1/r, sampled log-uniformly), like word frequencies in natural text
    words = [VOCAB[int(len(VOCAB) ** rng.random()) - 1] for _ in range(n)]
    return " ".join(words).capitalize() + "."


def build(size: int, dims: int, workdir: Path, seed: int = 7) -> tuple[MemoryEngine, Scope]:
    """An embedded engine in ``workdir`` filled by :func:`populate`."""
    engine = MemoryEngine(store=f"sqlite:///{workdir}/bench-{size}.db", embedder=f"fake:{dims}", extractor=None)
    return engine, populate(engine, size, seed)


def populate(engine: MemoryEngine, size: int, seed: int = 7) -> Scope:
    """Fill one agent/user scope with ``size`` memory rows plus transcripts, working
    sessions, patterns and archives (the same corpus on every store); returns the scope."""
    rng = random.Random(seed)
    scope = Scope(agent_wallet="bench-agent", user_address="bench-user", thread_id="bench-thread")
    day = 86_400_000
    now = int(time.time() * 1000)
    items = [
        {
            "content": _sentence(rng, rng.randint(8, 24)),
            "source": "fact" if i % 4 == 0 else "knowledge",
            "created_at": now - rng.randint(0, 365) * day,
            "metadata": {"factType": "context", "confidence": 0.8} if i % 4 == 0 else {},
        }
        for i in range(size)
    ]
    engine.ingest(scope, items, batch_size=2000, progress=True)
    for t in range(20):
        engine.post_turn(
            scope.with_thread(f"thread-{t % 4}"),
            [{"role": "user", "content": _sentence(rng, 12)}, {"role": "assistant", "content": _sentence(rng, 12)}],
            extract_facts=False,
        )
    for p in range(30):
        tools = rng.sample(TOPICAL, 3)
        engine.store.upsert_pattern(Pattern(
            pattern_id=f"pat_{p}", agent_wallet=scope.agent_wallet, trigger=PatternTrigger(value=tools[0]),
            steps=[PatternStep(action=a, order=i) for i, a in enumerate(tools)], summary=" -> ".join(tools),
            success_rate=rng.random(), execution_count=rng.randint(2, 20),
        ))
    for a in range(10):
        engine.store.add_archive(Archive(
            archive_id=f"arc_{a}", agent_wallet=scope.agent_wallet, summary=_sentence(rng, 10), content="",
            date_range={"start": now - 30 * day, "end": now},
        ))
    return scope


Stats = tuple[float, float, float]


def timed(fn: Callable[[str], Any], queries: list[str]) -> Stats:
    """(p50, p95, mean) milliseconds of ``fn(q)`` over the queries."""
    samples = []
    for q in queries:
        t0 = time.perf_counter()
        fn(q)
        samples.append((time.perf_counter() - t0) * 1000)
    samples.sort()
    return statistics.median(samples), samples[int(0.95 * (len(samples) - 1))], statistics.fmean(samples)


def measure(engine: MemoryEngine, scope: Scope, queries: list[str]) -> Stats:
    for q in queries:  # warm: caches the query embeddings, builds the vector index
        engine.pre_turn(q, scope)
    return timed(lambda q: engine.pre_turn(q, scope), queries)


def run_mongo(mongo_uri: str, redis_url: str | None, size: int, queries: list[str], dims: int) -> list[tuple[str, Stats]]:
    """The MongoDB configurations (module doc) at one corpus size, in a scratch database."""
    import pymongo

    from manowar_memory.stores.mongo import MongoStore

    client = pymongo.MongoClient(mongo_uri)
    db = f"manowar_bench_{uuid.uuid4().hex[:10]}"
    prefix = f"manowar-bench:{uuid.uuid4().hex[:8]}:"
    redis_cache = None

    def engine(cache: Any, *, vector_cache: bool = True, **kwargs: Any) -> MemoryEngine:
        store = MongoStore(client=client, database=db, vector_search="auto",
                           **({} if vector_cache else {"vector_cache_bytes": 0}))
        return MemoryEngine(store=store, embedder=f"fake:{dims}", extractor=None, cache=cache, **kwargs)

    rows: list[tuple[str, Stats]] = []
    try:
        t0 = time.perf_counter()
        loader = engine(InMemoryCache())
        scope = populate(loader, size)
        loader.close()
        print(f"loaded {size} memories into {db} in {time.perf_counter() - t0:.1f}s", file=sys.stderr)
        for vector_cache, label in ((True, "mongo"), (False, "mongo, streaming scan")):
            plain = engine(InMemoryCache(), vector_cache=vector_cache)
            rows.append((label, measure(plain, scope, queries)))
            vq = MemoryQuery(scope=scope)
            vectors = {q: plain.embedder.embed([q], input_type="query")[0] for q in queries}  # type: ignore[union-attr]
            _, info = plain.store.vector_search(vq, vectors[queries[0]], plain.model_id, 48)
            rows.append((f"  vector lane only ({info.method})",
                         timed(lambda q, e=plain, vq=vq, vectors=vectors: e.store.vector_search(vq, vectors[q], e.model_id, 48),
                               queries)))
            plain.close()
        if redis_url:
            from manowar_memory.cache.redis import RedisCache
            from manowar_memory.testing import QueryCachedEngine

            redis_cache = RedisCache(redis_url, prefix=prefix)
            # embedding cache only: with Redis the engine would also cache layer queries by default
            with_redis = engine(redis_cache, config=MemoryConfig(query_cache=False))
            rows.append(("mongo + redis (embedding cache)", measure(with_redis, scope, queries)))
            with_redis.store.close()
            cached = QueryCachedEngine(store=MongoStore(client=client, database=db), embedder=f"fake:{dims}",
                                       extractor=None, cache=redis_cache, query_cache_ttl_s=600)
            rows.append(("mongo + redis + layer query cache, miss", timed(lambda q: cached.pre_turn(q, scope), queries)))
            rows.append(("mongo + redis + layer query cache, hit", timed(lambda q: cached.pre_turn(q, scope), queries)))
            assert cached.query_cache_hits == len(queries), cached.query_cache_hits
            cached.store.close()
    finally:
        client.drop_database(db)
        if redis_cache is not None:
            keys = list(redis_cache.client.scan_iter(match=prefix + "*", count=1000))
            for i in range(0, len(keys), 1000):
                redis_cache.client.delete(*keys[i:i + 1000])
            redis_cache.close()
        client.close()
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", choices=("sqlite", "mongo"), default="sqlite")
    parser.add_argument("--sizes", type=int, nargs="+", help="default 1000 10000 100000 (sqlite), 10000 (mongo)")
    parser.add_argument("--queries", type=int, help="default 200 (sqlite), 100 (mongo)")
    parser.add_argument("--dims", type=int, default=384)
    parser.add_argument("--sequential-layers", action="store_true", help="Run layers one after another (sqlite).")
    parser.add_argument("--mongo", default=os.environ.get("MONGODB_URI", "mongodb://127.0.0.1:27017/?replicaSet=rs0"))
    parser.add_argument("--redis", nargs="?", const=os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"),
                        help="with --store mongo: also time the Redis caches (optional URL)")
    parser.add_argument("--json", type=Path, help="also write the figures here (the docs' data file)")
    args = parser.parse_args(argv)
    mongo = args.store == "mongo"
    sizes = args.sizes or ([10_000] if mongo else [1_000, 10_000, 100_000])
    rng = random.Random(11)
    n_queries = args.queries or (100 if mongo else 200)
    queries = [_sentence(rng, rng.randint(4, 10)).rstrip(".") + "?" for _ in range(n_queries)]
    results: dict[str, Any] = {"store": args.store, "queries": n_queries, "dims": args.dims, "sizes": {}}
    if mongo:
        for size in sizes:
            rows = run_mongo(args.mongo, args.redis, size, queries, args.dims)
            print(f"{size} memories, {n_queries} queries, {args.dims} dims")
            print(f"{'configuration':<44}  {'p50 ms':>8}  {'p95 ms':>8}  {'mean ms':>8}")
            for name, (p50, p95, mean) in rows:
                print(f"{name:<44}  {p50:>8.2f}  {p95:>8.2f}  {mean:>8.2f}", flush=True)
            results["sizes"][str(size)] = {name.strip(): {"p50_ms": p50, "p95_ms": p95, "mean_ms": mean}
                                           for name, (p50, p95, mean) in rows}
        if args.json:
            write_record(args.json, "latency", results, argv)
        return 0
    print(f"{'memories':>9}  {'p50 ms':>8}  {'p95 ms':>8}  {'mean ms':>8}")
    with tempfile.TemporaryDirectory() as tmp:
        for size in sizes:
            engine, scope = build(size, args.dims, Path(tmp))
            engine.config.concurrent_layers = not args.sequential_layers
            p50, p95, mean = measure(engine, scope, queries)
            print(f"{size:>9}  {p50:>8.2f}  {p95:>8.2f}  {mean:>8.2f}", flush=True)
            results["sizes"][str(size)] = {"p50_ms": p50, "p95_ms": p95, "mean_ms": mean}
            engine.close()
    if args.json:
        write_record(args.json, "latency", results, argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
