"""pre_turn latency on the embedded store at several corpus sizes.

    python benchmarks/latency.py [--sizes 1000 10000 100000] [--queries 200] [--dims 384]

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
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

from manowar_memory import MemoryEngine, Pattern, Scope
from manowar_memory.records import Archive, PatternStep, PatternTrigger

from manowar_memory._util import STOPWORDS

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


def measure(engine: MemoryEngine, scope: Scope, queries: list[str]) -> tuple[float, float, float]:
    for q in queries:  # warm: caches the query embeddings, builds the vector index
        engine.pre_turn(q, scope)
    samples = []
    for q in queries:
        t0 = time.perf_counter()
        engine.pre_turn(q, scope)
        samples.append((time.perf_counter() - t0) * 1000)
    samples.sort()
    p50 = statistics.median(samples)
    p95 = samples[int(0.95 * (len(samples) - 1))]
    return p50, p95, statistics.fmean(samples)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--dims", type=int, default=384)
    parser.add_argument("--sequential-layers", action="store_true", help="Run layers one after another.")
    args = parser.parse_args(argv)
    rng = random.Random(11)
    queries = [_sentence(rng, rng.randint(4, 10)).rstrip(".") + "?" for _ in range(args.queries)]
    print(f"{'memories':>9}  {'p50 ms':>8}  {'p95 ms':>8}  {'mean ms':>8}")
    with tempfile.TemporaryDirectory() as tmp:
        for size in args.sizes:
            engine, scope = build(size, args.dims, Path(tmp))
            engine.config.concurrent_layers = not args.sequential_layers
            p50, p95, mean = measure(engine, scope, queries)
            print(f"{size:>9}  {p50:>8.2f}  {p95:>8.2f}  {mean:>8.2f}", flush=True)
            engine.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
