"""The engine's own cost of ``pre_turn`` (everything but the query embedding) on a LoCoMo-sized scope.

    python benchmarks/overhead.py --data PATH/locomo10.json [--conversation conv-43] [--embedder local]
        [--layers vectors] [--rounds 3] [--other-scopes 0] [--store URL] [--config JSON] [--profile]

One conversation's turns (about 700) are ingested into one scope of an in-memory SQLite store (or ``--store``),
as ``benchmarks/locomo.py`` does; ``--other-scopes N`` also ingests the next N conversations
into scopes of their own (the same store), to show that other users' rows do not slow this
scope down. Every question of the conversation is asked once to warm the query-embedding
cache, then ``--rounds`` more times, timed. The figures, p50 and p95 over those calls:

* ``wall``: ``pre_turn`` end to end (the query embedding is a cache hit here);
* ``overhead``: ``timings_ms["total"] - timings_ms["embed"]``, the engine's own work;
* ``cpu``: the process's CPU time per call (all its threads), which other programs on a
  busy machine do not inflate;
* each entry of ``timings_ms`` (lanes, fusion, ranking stages, packing);
* with ``--embed-queries``, the query embedding timed right before each ``pre_turn``, by the
  embedder itself (no cache): the time it loses to threads the previous search left spinning
  (BLAS threads fighting the embedder's) shows here. Use a real embedder and ``--other-scopes``.
* with ``--cold-queries``, the embedding cache never answers, so every ``pre_turn`` embeds its
  query: ``wall`` is then the end-to-end latency, with the embedding overlapping the keyword
  lane (``embed`` is the embedding's own time, ``vectors.embed_wait`` the vector lane's wait for
  it and ``vectors.lanes_wait`` what the lanes beside it took longer, so ``overhead`` leaves out
  the engine work done in the embedding's shadow).

The data is not part of this project: pass the path of LoCoMo's ``locomo10.json`` (or a
subset of it). ``--embedder fake:384`` gives vectors of the real model's dimension without
loading it. ``--profile`` prints a pyinstrument profile of the timed calls (``pip install
pyinstrument``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from manowar_memory import MemoryConfig, MemoryEngine, Scope
from manowar_memory.cache.base import InMemoryCache

from locomo import Conversation, ingest_items, load_conversations, memory_texts  # type: ignore[import-not-found]
from record import write_record  # type: ignore[import-not-found]


def _ingest(engine: MemoryEngine, conv: Conversation) -> Scope:
    scope = Scope(agent_wallet="locomo", user_address=conv.sample_id)
    items = ingest_items(conv, memory_texts(conv))
    engine.ingest(scope, items)
    return scope


class _NoEmbeddingCache(InMemoryCache):
    """An in-process cache that never answers for an embedding (every query is embedded)."""

    def get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        return [None if k.startswith("embedding:") else self.get(k) for k in keys]


def _pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run(args: argparse.Namespace) -> dict[str, Any]:
    convs, _, _ = load_conversations(args.data, None)
    names = [c.sample_id for c in convs]
    if args.conversation not in names:
        raise SystemExit(f"conversation {args.conversation!r} not in the data; choose from {names}")
    start = names.index(args.conversation)
    target = convs[start]
    others = (convs[start + 1:] + convs[:start])[: args.other_scopes]
    cache = _NoEmbeddingCache() if args.cold_queries else None
    config = MemoryConfig.model_validate(json.loads(args.config or "{}"))  # --config: a candidate default
    store = args.store
    if store is None:
        store = "sqlite:///:memory:"
    elif store.startswith("sqlite:///") and store != "sqlite:///:memory:":
        Path(store.removeprefix("sqlite:///")).unlink(missing_ok=True)  # a fresh file each run
    engine = MemoryEngine(store=store, embedder=args.embedder, extractor=None, cache=cache, config=config)
    t0 = time.perf_counter()
    scope = _ingest(engine, target)
    for conv in others:
        _ingest(engine, conv)
    print(f"{target.sample_id}: {len(target.turns)} turns, {len(target.questions)} questions; "
          f"{len(others)} other scopes; ingested in {time.perf_counter() - t0:.1f} s ({engine.model_id})", flush=True)
    layers = tuple(args.layers)
    questions = [q.text for q in target.questions][: args.questions]
    for q in questions:  # warm the query-embedding cache (and the model): without --cold-queries the figures leave it out
        engine.pre_turn(q, scope, layers)
    wall: list[float] = []
    cpu: list[float] = []
    embed: list[float] = []
    assert engine.embedder is not None
    overhead: list[float] = []
    parts: dict[str, list[float]] = {}
    profiler: Any = None
    if args.profile:
        from pyinstrument import Profiler

        profiler = Profiler(interval=0.0002)
        profiler.start()
    for _ in range(args.rounds):
        for q in questions:
            if args.embed_queries:
                t = time.perf_counter()
                engine.embedder.inner.embed([q], input_type="query")
                embed.append((time.perf_counter() - t) * 1000)
            t, c = time.perf_counter(), time.process_time()
            result = engine.pre_turn(q, scope, layers)
            wall.append((time.perf_counter() - t) * 1000)
            cpu.append((time.process_time() - c) * 1000)
            timings = result.timings_ms
            overhead.append(timings["total"] - timings.get("embed", 0.0))
            for name, value in timings.items():
                parts.setdefault(name, []).append(value)
    if profiler is not None:
        profiler.stop()
        print(profiler.output_text(unicode=True, color=False, show_all=False))
    engine.close()
    out: dict[str, Any] = {
        "conversation": target.sample_id, "turns": len(target.turns), "other_scopes": len(others),
        "embedder": engine.model_id, "layers": list(layers), "cold_queries": bool(args.cold_queries),
        "calls": len(wall),
        "wall_p50": statistics.median(wall), "wall_p95": _pct(wall, 0.95),
        "overhead_p50": statistics.median(overhead), "overhead_p95": _pct(overhead, 0.95),
        "cpu_p50": statistics.median(cpu), "cpu_mean": statistics.fmean(cpu),
        "timings_p50": {k: round(statistics.median(v), 3) for k, v in parts.items()},
        **({"embed_p50": statistics.median(embed)} if embed else {}),
    }
    print(f"pre_turn over {', '.join(layers)}: {out['calls']} calls")
    print(f"  wall (query embedding {'embedded per call' if args.cold_queries else 'cached'}): p50 {out['wall_p50']:.2f} ms, p95 {out['wall_p95']:.2f} ms")
    print(f"  engine overhead (total - embed): p50 {out['overhead_p50']:.2f} ms, p95 {out['overhead_p95']:.2f} ms")
    print(f"  process CPU per call: p50 {out['cpu_p50']:.2f} ms, mean {out['cpu_mean']:.2f} ms")
    if embed:
        print(f"  query embedding just before: p50 {statistics.median(embed):.2f} ms, p95 {_pct(embed, 0.95):.2f} ms")
    print("  timings_ms p50: " + ", ".join(f"{k} {v:.3f}" for k, v in out["timings_p50"].items()))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, required=True, help="LoCoMo JSON (locomo10.json or a subset)")
    parser.add_argument("--conversation", default="conv-43", help="sample_id of the conversation to query")
    parser.add_argument("--embedder", default="local", help="engine embedder spec (default: local MiniLM)")
    parser.add_argument("--layers", nargs="+", default=["vectors"], help="layers searched (default: vectors)")
    parser.add_argument("--rounds", type=int, default=3, help="timed passes over the questions")
    parser.add_argument("--questions", type=int, default=200, help="most questions asked per pass")
    parser.add_argument("--other-scopes", type=int, default=0, help="other conversations ingested beside it")
    parser.add_argument("--embed-queries", action="store_true", help="time an uncached query embedding before each call")
    parser.add_argument("--cold-queries", action="store_true", help="no embedding cache: each call embeds its query")
    parser.add_argument("--store", help="store URL (default sqlite:///:memory:; a sqlite:/// file is "
                        "recreated each run: its reader and writer connections are separate, as in production)")
    parser.add_argument("--config", help='MemoryConfig overrides as JSON, e.g. \'{"thread_context_messages": 1}\'')
    parser.add_argument("--profile", action="store_true", help="print a pyinstrument profile of the timed calls")
    parser.add_argument("--json", type=Path, help="also write the figures here (the docs' data file)")
    args = parser.parse_args(argv)
    out = run(args)
    if args.json:
        write_record(args.json, "overhead", out, None if argv is None else list(argv))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
