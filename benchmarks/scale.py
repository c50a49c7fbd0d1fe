"""Vector search at scale: the approximate index (faiss IVF, 4-bit fast-scan codes) against the exact scan.

    python benchmarks/scale.py index [--sizes 10000 100000 1000000] [--queries 200]
    python benchmarks/scale.py lane [--sizes 10000 100000] [--queries 200]
    python benchmarks/scale.py pre-turn [--sizes 100000 1000000] [--queries 100] [--exact-queries 20] [--keep DIR]
    python benchmarks/scale.py recall --locomo /path/to/locomo-dev.json [--embedder local] [--cache-dir DIR]
        [--scan-fractions 0.3 0.2 0.1] [--eight-bit]

``index``: the in-process :class:`VectorIndex` alone (mask + top 48), approximate and exact in
the same run, recall@10 of the approximate top 10 against the exact one; no SQLite, so a
million rows load in minutes.

``lane``: ``SQLiteStore.vector_search`` (48 results, as the engine asks) over N rows in one
agent/user scope of a SQLite file, with the approximate path (default threshold) and with the
exact scan in the same run, plus the first query's build time, the recall@10 of the approximate
top 10 against the exact one, the time to save the index and to reopen the store with it, and
memory per vector. Vectors are synthetic (384 dimensions, topic centres plus low-rank and
isotropic noise, so neighbourhoods exist as with text embeddings); queries are perturbed rows.

``pre-turn``: ``MemoryEngine.pre_turn`` over all six layers on the same kind of scope, query
embeddings cached (FakeEmbedder model id; the rows carry the synthetic vectors and
Zipf-distributed text from benchmarks/latency.py). Engines on the same file answer each
query in turn (interleaved, so a busy machine slows all alike; which one reads a query first,
cold, rotates): the approximate path (the library's defaults: the keyword lane scores a scope
in process once a query's words are held by ``keyword_index_min_matches`` of its rows), the same
with FTS5's ``bm25()`` scoring every match (``keyword_index_min_matches=0``, the store before the
in-process index), the same pruning the keyword lane's commonest terms (``keyword_postings_budget``
``--keyword-budget``, default 4000, FTS5 scoring; the library's default, 0, never prunes), the same
with the store's keyword pool off (the keyword lane's statement over every match, what the store
did before it), the approximate path with 8-bit scalar codes (``AnnGroup.fast_scan`` off, the
layout before 4-bit fast-scan codes, with the candidates per query and the scan share of then;
its index is built anew on each run), and the exact scan (on the first ``--exact-queries`` only: at a million rows it
takes seconds; it shares the approximate path's engine). ``--configs`` picks some of them. Reports p50/p95 wall time, p50 CPU time of the process, and the p50 of the
keyword and vector lanes (``timings_ms``), the queries whose keyword lane left common terms out, and the
share of the default (unpruned) run's pre_turn items each run also gave; then the keyword lane's recall@10
(``keyword_search``, 48 hits) with the pruning budget against the unpruned search. The store is filled through ``add_memories`` in
batches of 20,000 (one transaction each); the fill time and the files' size on disk are
printed. ``--keep DIR`` keeps the filled file there and reuses it on the next run.

``recall``: LoCoMo evidence recall@10 of the exact scan and of the approximate path, turns and
questions embedded by the real embedder; the approximate path is forced on these small groups
(threshold 100) with the share of the group it scans at scale (``AnnGroup.scan_fraction``, no
minimum row count), so the figure is the one the default settings give at scale, not an exact
scan in disguise.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from manowar_memory import MemoryEngine, MemoryRecord, Scope, SQLiteStore
from manowar_memory.stores._ann import AnnGroup
from manowar_memory.stores._vectors import VectorIndex
from manowar_memory.stores.base import MemoryQuery

from latency import _sentence  # type: ignore[import-not-found]
from record import write_record  # type: ignore[import-not-found]

AGENT, USER = "scale-agent", "scale-user"
MODEL = "fake:384"


def p50_p95(samples: list[float]) -> tuple[float, float]:
    samples = sorted(samples)
    return statistics.median(samples), samples[int(0.95 * (len(samples) - 1))]


def timed(fn: Callable[[Any], Any], items: list[Any]) -> tuple[float, float]:
    out = []
    for item in items:
        t0 = time.perf_counter()
        fn(item)
        out.append((time.perf_counter() - t0) * 1000)
    return p50_p95(out)


class Synthetic:
    """Embedding-like unit vectors: a topic centre, low-rank noise and a little isotropic noise."""

    def __init__(self, dims: int = 384, topics: int = 2000, rank: int = 48, seed: int = 5) -> None:
        rng = np.random.default_rng(seed)
        self.dims = dims
        self.centres = rng.standard_normal((topics, dims)).astype(np.float32) / np.sqrt(dims)
        self.basis = rng.standard_normal((rank, dims)).astype(np.float32) / np.sqrt(dims)
        self.rng = rng

    def batch(self, n: int) -> np.ndarray:
        rng = self.rng
        x = self.centres[rng.integers(0, len(self.centres), n)]
        x = x + 0.6 * rng.standard_normal((n, self.basis.shape[0])).astype(np.float32) @ self.basis
        x = x + 0.25 * rng.standard_normal((n, self.dims)).astype(np.float32) / np.sqrt(self.dims)
        out: np.ndarray = x / np.linalg.norm(x, axis=1, keepdims=True)
        return out

    def near(self, rows: np.ndarray) -> np.ndarray:
        q = rows + 0.5 * self.rng.standard_normal(rows.shape).astype(np.float32) / np.sqrt(self.dims)
        out: np.ndarray = q / np.linalg.norm(q, axis=1, keepdims=True)
        return out


def fill(store: SQLiteStore, size: int, gen: Synthetic, *, text: bool, batch: int = 5000) -> np.ndarray:
    """``size`` rows in one scope; returns a sample of their vectors (for queries)."""
    import random

    words = random.Random(3)
    now = int(time.time() * 1000)
    sample: list[np.ndarray] = []
    t0 = time.perf_counter()
    for start in range(0, size, batch):
        vecs = gen.batch(min(batch, size - start))
        sample.append(vecs[:: max(1, size // 2000)][:50])
        records = [
            MemoryRecord(
                id=f"m{start + i}", agent_wallet=AGENT, user_address=USER,
                content=_sentence(words, words.randint(8, 24)) if text else f"row {start + i}",
                source="knowledge", embedding=v.tolist(), embedding_model=MODEL,
                created_at=now - i, updated_at=now - i,
            )
            for i, v in enumerate(vecs)
        ]
        store.add_memories(records)
    print(f"  filled {size} rows in {time.perf_counter() - t0:.0f}s", file=sys.stderr, flush=True)
    return np.concatenate(sample)


def _exact(on: bool) -> None:
    VectorIndex.ann_threshold = 0 if on else DEFAULT_THRESHOLD


DEFAULT_THRESHOLD = VectorIndex.ann_threshold


def lane(args: argparse.Namespace) -> None:
    print(f"{'rows':>9} {'path':<7} {'p50 ms':>8} {'p95 ms':>8}  notes")
    for size in args.sizes:
        with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
            path = Path(tmp) / "scale.db"
            gen = Synthetic()
            store = SQLiteStore(path)
            rows = fill(store, size, gen, text=False)
            queries = gen.near(rows[np.random.default_rng(1).choice(len(rows), args.queries)])
            query = MemoryQuery(scope=Scope(agent_wallet=AGENT, user_address=USER))

            def search(q: np.ndarray, s: SQLiteStore = store, query: MemoryQuery = query) -> list[str]:
                return [h.record.id for h in s.vector_search(query, q.tolist(), MODEL, 48)[0]]

            _exact(True)
            t0 = time.perf_counter()
            search(queries[0])
            load_s = time.perf_counter() - t0
            exact_top = [search(q)[:10] for q in queries]
            e50, e95 = timed(search, list(queries))
            _exact(False)
            t0 = time.perf_counter()
            search(queries[0])
            build_s = time.perf_counter() - t0
            ann_top = [search(q)[:10] for q in queries]
            a50, a95 = timed(search, list(queries))
            recall = statistics.fmean(len(set(a) & set(e)) / 10 for a, e in zip(ann_top, exact_top))
            index = store._indexes[MODEL]
            groups = list(index.ann.values())
            ann_bytes = sum(g.nbytes for g in groups)
            print(f"{size:>9} {'exact':<7} {e50:>8.2f} {e95:>8.2f}  first query (rows loaded) {load_s:.1f}s")
            note = (f"build {build_s:.1f}s, recall@10 vs exact {recall:.3f}, "
                    f"{'no ANN index (below threshold)' if not groups else f'{groups[0].nlist} lists'}")
            print(f"{size:>9} {'ann':<7} {a50:>8.2f} {a95:>8.2f}  {note}", flush=True)
            args.results[str(size)] = {"exact_p50_ms": e50, "exact_p95_ms": e95, "ann_p50_ms": a50, "ann_p95_ms": a95,
                                       "recall_at_10": recall, "build_s": build_s,
                                       "ann_bytes_per_row": ann_bytes / size if groups else None,
                                       "row_bytes": VectorIndex.row_bytes(gen.dims)}
            if groups:
                t0 = time.perf_counter()
                store.close()
                save_s = time.perf_counter() - t0
                t0 = time.perf_counter()
                store = SQLiteStore(path)
                search(queries[0], store)
                reopen_s = time.perf_counter() - t0
                print(f"{'':>9} {'':<7} {'':>8} {'':>8}  saved in {save_s:.1f}s, reopened and first query "
                      f"{reopen_s:.1f}s ({'restored' if store._indexes[MODEL].ann else 'REBUILT'}); "
                      f"per vector: {4 * gen.dims} B float32 matrix + {ann_bytes / size:.0f} B ANN "
                      f"+ {VectorIndex.row_bytes(gen.dims) - 4 * gen.dims} B columns", flush=True)
            store.close()


def index_only(args: argparse.Namespace) -> None:
    """The in-process index alone (what both stores call), without SQLite: fits a million rows in minutes."""
    print(f"{'rows':>9} {'path':<7} {'p50 ms':>8} {'p95 ms':>8}  notes")
    for size in args.sizes:
        gen = Synthetic()
        t0 = time.perf_counter()
        index = VectorIndex(gen.dims, size)
        sample = []
        for rows in _chunks(size, 50_000):
            vecs = gen.batch(len(rows))
            sample.append(vecs[:50])
            for key, v in zip(rows, vecs):
                index.upsert(key, v, agent=AGENT, user=USER, mode=None, hai=None, source="knowledge", active=True)
        fill_s = time.perf_counter() - t0
        pool = np.concatenate(sample)
        queries = gen.near(pool[np.random.default_rng(1).choice(len(pool), args.queries)])
        query = MemoryQuery(scope=Scope(agent_wallet=AGENT, user_address=USER))

        def run(q: np.ndarray, i: VectorIndex = index, qq: MemoryQuery = query) -> list[Any]:
            return [k for k, _ in i.top(q, i.mask(qq), 48)][:10]

        index.ann_threshold = 0
        exact_top = [run(q) for q in queries[:20]]
        e50, e95 = timed(run, list(queries[:20]))
        print(f"{size:>9} {'exact':<7} {e50:>8.2f} {e95:>8.2f}  filled in {fill_s:.0f}s; 20 queries", flush=True)
        index.ann_threshold = DEFAULT_THRESHOLD
        t0 = time.perf_counter()
        run(queries[0])
        build_s = time.perf_counter() - t0
        ann_top = [run(q) for q in queries[:20]]
        a50, a95 = timed(run, list(queries))
        rec = statistics.fmean(len(set(a) & set(e)) / 10 for a, e in zip(ann_top, exact_top))
        groups = list(index.ann.values())
        note = (f"build {build_s:.1f}s, recall@10 vs exact {rec:.3f}, "
                + (f"{groups[0].nlist} lists, {groups[0].nbytes / size:.0f} B/vector" if groups else "no ANN index"))
        print(f"{size:>9} {'ann':<7} {a50:>8.2f} {a95:>8.2f}  {note}; ratio exact/ann p50 {e50 / a50:.1f}x", flush=True)
        ann_bytes = groups[0].nbytes / size if groups else 0.0
        args.results[str(size)] = {"exact_p50_ms": e50, "exact_p95_ms": e95, "ann_p50_ms": a50, "ann_p95_ms": a95,
                                   "recall_at_10": rec, "build_s": build_s, "fill_s": fill_s,
                                   "float32_bytes_per_row": 4 * gen.dims, "ann_bytes_per_row": ann_bytes,
                                   "row_bytes": VectorIndex.row_bytes(gen.dims)}
        del index


def _former_candidates(index: VectorIndex) -> None:
    """Candidates per query as asked of 8-bit codes before fast-scan codes (4 per result, >= 64),
    and the share of the group they scanned then (30 %), on the groups built so far."""
    index.ann_oversample, index.ann_min_candidates = 4, 64
    for group in index.ann.values():
        group.scan_fraction = 0.3


def _disk_mb(path: Path) -> float:
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*")) / 1e6


def pre_turn(args: argparse.Namespace) -> None:
    import random

    rng = random.Random(11)
    texts = [_sentence(rng, rng.randint(4, 10)).rstrip(".") + "?" for _ in range(args.queries)]
    print(f"{'rows':>9} {'configuration':<26} {'p50 ms':>8} {'p95 ms':>8} {'cpu p50':>8} {'keyword':>8} {'vector':>8}")
    for size in args.sizes:
        with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
            path = Path(args.keep or tmp) / f"scale-{size}.db"
            if not path.exists():
                store = SQLiteStore(path)
                fill(store, size, Synthetic(), text=True, batch=20_000)
                store.close()
            print(f"  {size} rows on disk: {_disk_mb(path):.0f} MB", file=sys.stderr, flush=True)
            scope = Scope(agent_wallet=AGENT, user_address=USER, thread_id="t")
            defaults = SQLiteStore.mmap_size, SQLiteStore.keyword_pool_factor
            engines: dict[str, tuple[MemoryEngine, bool]] = {}
            # the exact scan shares the approximate path's engine; the 8-bit one opens first so that
            # its index (built anew: a saved index of other codes is not restored) is saved first
            by_setup: dict[tuple[bool, bool, bool, bool], MemoryEngine] = {}
            stores: list[SQLiteStore] = []
            # name, exact scan, keyword pool on, 4-bit codes, pruned, keyword scoring in process
            for name, exact, fast, fast_scan, prune, in_process in (
                    ("ann, 8-bit codes", False, True, False, False, True), ("ann", False, True, True, False, True),
                    ("ann, FTS5 scoring", False, True, True, False, False),
                    ("ann, pruned", False, True, True, True, False),
                    ("ann, keyword pool off", False, False, True, False, False),
                    ("exact", True, True, True, False, True)):
                if name not in args.configs:
                    continue
                setup = (fast, fast_scan, prune, in_process)
                if setup not in by_setup:
                    SQLiteStore.mmap_size, SQLiteStore.keyword_pool_factor = defaults if fast else (defaults[0], 0)
                    AnnGroup.fast_scan = fast_scan
                    _exact(False)
                    store = SQLiteStore(path, keyword_postings_budget=args.keyword_budget if prune else None,
                                        keyword_index_min_matches=None if in_process else 0)
                    engine = MemoryEngine(store=store, embedder=MODEL, extractor=None)
                    stores.append(store)
                    by_setup[setup] = engine
                    t0 = time.perf_counter()
                    engine.pre_turn(texts[0], scope)  # loads the rows, restores or builds the ANN index
                    if not fast_scan:
                        _former_candidates(engine.store._indexes[MODEL])  # type: ignore[attr-defined]
                    print(f"  {name}: first pre_turn (rows loaded, ANN index ready) {time.perf_counter() - t0:.1f}s",
                          file=sys.stderr, flush=True)
                engines[name] = (by_setup[setup], exact)
            SQLiteStore.mmap_size, SQLiteStore.keyword_pool_factor = defaults
            AnnGroup.fast_scan = True
            wall: dict[str, list[float]] = {name: [] for name in engines}
            cpu: dict[str, list[float]] = {name: [] for name in engines}
            lanes: dict[str, dict[str, list[float]]] = {name: {} for name in engines}
            pruned: dict[str, int] = dict.fromkeys(engines, 0)  # queries whose keyword lane left terms out
            items: dict[str, dict[int, list[str]]] = {name: {} for name in engines}  # pre_turn items per text
            order = list(engines.items())
            for i, text in enumerate(texts + texts):  # first pass warms the query-embedding cache
                if i == len(texts):  # and starts the keyword indexes' builds: measured once they are ready
                    t0 = time.perf_counter()
                    for store in stores:
                        store.wait_for_keyword_indexes()
                    print(f"  keyword indexes ready {time.perf_counter() - t0:.1f}s after the first pass",
                          file=sys.stderr, flush=True)
                # the configuration that runs a text first reads it cold: the first one rotates
                for name, (engine, exact) in order[i % len(order):] + order[: i % len(order)]:
                    if exact and i % len(texts) >= args.exact_queries:
                        continue
                    _exact(exact)
                    t0, c0 = time.perf_counter(), time.process_time()
                    result = engine.pre_turn(text, scope)
                    w, c = (time.perf_counter() - t0) * 1000, (time.process_time() - c0) * 1000
                    if i >= len(texts):
                        wall[name].append(w)
                        cpu[name].append(c)
                        for lane in ("keyword", "vector"):
                            lanes[name].setdefault(lane, []).append(result.timings_ms.get(f"graph+vectors.{lane}", 0.0))
                        pruned[name] += any(r.get("keyword_pruned_terms") for r in result.lanes.values())
                        items[name][i - len(texts)] = [item.text for item in result.items]
            for name in engines:
                p50, p95 = p50_p95(wall[name])
                overlap = _overlap(items[name], items.get("ann", {}))
                print(f"{size:>9} {name:<26} {p50:>8.2f} {p95:>8.2f} {statistics.median(cpu[name]):>8.2f} "
                      f"{statistics.median(lanes[name]['keyword']):>8.2f} {statistics.median(lanes[name]['vector']):>8.2f}"
                      f"   ({len(wall[name])} queries, keyword terms pruned in {pruned[name]}"
                      + (f", pre_turn items shared with 'ann' {overlap:.3f}" if overlap is not None else "")
                      + ")", flush=True)
                args.results.setdefault(str(size), {})[name] = {
                    "p50_ms": p50, "p95_ms": p95, "cpu_p50_ms": statistics.median(cpu[name]), "queries": len(wall[name]),
                    "keyword_p50_ms": statistics.median(lanes[name]["keyword"]),
                    "vector_p50_ms": statistics.median(lanes[name]["vector"]), "keyword_pruned_queries": pruned[name],
                    "items_shared_with_unpruned": overlap}
            store = next(iter(by_setup.values())).store
            recall, was_pruned, in_process = _keyword_recall(store, scope, texts, args.keyword_budget)
            print(f"{size:>9} keyword lane recall@10 against FTS5 scoring every match: pruned {recall:.3f} "
                  f"({was_pruned} of {len(texts)} queries pruned; store.keyword_search, budget "
                  f"{args.keyword_budget}), scored in process {in_process:.3f}", flush=True)
            args.results.setdefault(str(size), {})["keyword_recall_at_10"] = {
                "recall": recall, "pruned_queries": was_pruned, "budget": args.keyword_budget,
                "in_process_recall": in_process}
            for engine in by_setup.values():
                engine.close()
    _exact(False)


def _overlap(got: dict[int, list[str]], reference: dict[int, list[str]]) -> float | None:
    """Mean share of the reference run's pre_turn items a run also gave, per query (None: no
    reference, or the run is the reference)."""
    if not reference or got is reference:
        return None
    shares = [len(set(got[i]) & set(ref)) / len(ref) for i, ref in reference.items() if ref and i in got]
    return statistics.fmean(shares) if shares else None


def _keyword_recall(store: Any, scope: Scope, texts: list[str], budget: int, k: int = 10,
                    depth: int = 48) -> tuple[float, int, float]:
    """Mean recall@k of the keyword lane (``store.keyword_search``, ``depth`` hits as the engine
    asks) with ``keyword_postings_budget`` ``budget`` against FTS5 scoring every match (budget 0,
    no in-process scoring), over the queries with any exact hit; how many queries were pruned;
    and the same recall of the default lane (scored in process above ``keyword_index_min_matches``)."""
    query = MemoryQuery(scope=scope)
    kept = store.keyword_postings_budget, store.keyword_index_min_matches
    recalls: list[float] = []
    in_process: list[float] = []
    was_pruned = 0
    try:
        for text in texts:
            store.keyword_postings_budget, store.keyword_index_min_matches = 0, kept[1]
            default = store.keyword_search(query, text, depth)
            store.keyword_postings_budget, store.keyword_index_min_matches = budget, 0
            hits = store.keyword_search(query, text, depth)
            was_pruned += bool(getattr(hits, "pruned_terms", 0))
            store.keyword_postings_budget = 0
            exact = [h.record.id for h in store.keyword_search(query, text, depth)][:k]
            if exact:
                recalls.append(len({h.record.id for h in hits[:k]} & set(exact)) / len(exact))
                in_process.append(len({h.record.id for h in default[:k]} & set(exact)) / len(exact))
    finally:
        store.keyword_postings_budget, store.keyword_index_min_matches = kept
    return ((statistics.fmean(recalls) if recalls else 1.0), was_pruned,
            (statistics.fmean(in_process) if in_process else 1.0))


def _conversations(path: Path) -> list[Any]:
    from locomo import load_conversations  # type: ignore[import-not-found]

    convs, _, _ = load_conversations(path, None)
    return list(convs)


def _embed(engine: MemoryEngine, texts: list[str], kind: str) -> np.ndarray:
    out: list[list[float]] = []
    for i in range(0, len(texts), 256):
        out += engine.embedder.embed(texts[i : i + 256], input_type=kind)  # type: ignore[union-attr,arg-type]
    arr = np.asarray(out, dtype=np.float32)
    normed: np.ndarray = arr / np.linalg.norm(arr, axis=1, keepdims=True)
    return normed


def _chunks(n: int, size: int) -> Iterator[range]:
    for i in range(0, n, size):
        yield range(i, min(n, i + size))


def recall(args: argparse.Namespace) -> None:
    from locomo import DiskDocumentCache, memory_texts

    convs = _conversations(args.locomo)
    cache = DiskDocumentCache(args.cache_dir, queries=True) if args.cache_dir else None
    engine = MemoryEngine(store="sqlite:///:memory:", embedder=args.embedder, extractor=None, cache=cache)
    AnnGroup.min_scan = 1  # only the default share of the group is scanned, as at scale
    AnnGroup.fast_scan = not args.eight_bit
    t0 = time.perf_counter()
    dims = len(engine.embedder.embed(["dimension probe"], input_type="query")[0])  # type: ignore[union-attr]
    exact, ann, pooled_exact, pooled_ann = (VectorIndex(dims, ann_threshold=t) for t in (0, 100, 0, 100))
    if args.eight_bit:
        for index in (ann, pooled_ann):
            index.ann_oversample, index.ann_min_candidates = 4, 64
    everything: list[tuple[Any, np.ndarray, np.ndarray]] = []
    for ci, conv in enumerate(convs):
        turns = _embed(engine, memory_texts(conv), "document")
        qs = _embed(engine, [q.text for q in conv.questions], "query")
        everything.append((conv, turns, qs))
        for index_set, user in (((exact, ann), f"u{ci}"), ((pooled_exact, pooled_ann), "all")):
            for index in index_set:
                for t, v in zip(conv.turns, turns):
                    index.upsert(f"{ci}|{t.dia_id}", v, agent=AGENT, user=user, mode=None, hai=None, source="k", active=True)
    print(f"embedded {sum(len(c.turns) + len(c.questions) for c in convs)} texts in {time.perf_counter() - t0:.0f}s",
          file=sys.stderr)
    n_pooled = sum(len(c.turns) for c in convs)
    codes = "8-bit scalar codes, former candidates" if args.eight_bit else "4-bit fast-scan codes"
    print(f"LoCoMo, {sum(len(c.questions) for c in convs)} questions, {args.embedder}, {codes}; evidence recall@10")
    for fraction in args.scan_fractions:
        AnnGroup.scan_fraction = fraction
        found: dict[str, list[float]] = {"exact": [], "ann": []}
        pooled: dict[str, list[float]] = {"exact": [], "ann": []}
        overlap: list[float] = []
        for ci, (conv, _, qs) in enumerate(everything):
            for scope_user, pair, sink in ((f"u{ci}", (exact, ann), found), ("all", (pooled_exact, pooled_ann), pooled)):
                query = MemoryQuery(scope=Scope(agent_wallet=AGENT, user_address=scope_user))
                for question, q in zip(conv.questions, qs):
                    tops = []
                    for name, index in zip(("exact", "ann"), pair):
                        top = [key for key, _ in index.top(q, index.mask(query), 10)]
                        hit = {str(key).split("|", 1)[1] for key in top if str(key).startswith(f"{ci}|")}
                        sink[name].append(len(hit & set(question.evidence)) / len(question.evidence))
                        tops.append(set(top))
                    if sink is found:
                        overlap.append(len(tops[0] & tops[1]) / 10)
        assert ann.ann and pooled_ann.ann, "the approximate path was not used"
        print(f"  scan {100 * fraction:.0f} % of the group:")
        print(f"    per conversation (~{statistics.fmean(len(c.turns) for c in convs):.0f} turns):  "
              f"exact {100 * statistics.fmean(found['exact']):.2f}  ann {100 * statistics.fmean(found['ann']):.2f}  "
              f"(top-10 overlap {statistics.fmean(overlap):.3f})")
        print(f"    all conversations in one group ({n_pooled} turns):  "
              f"exact {100 * statistics.fmean(pooled['exact']):.2f}  ann {100 * statistics.fmean(pooled['ann']):.2f}",
              flush=True)
        args.results[f"{fraction:g}"] = {
            "per_conversation_exact": 100 * statistics.fmean(found["exact"]),
            "per_conversation_ann": 100 * statistics.fmean(found["ann"]),
            "one_group_exact": 100 * statistics.fmean(pooled["exact"]),
            "one_group_ann": 100 * statistics.fmean(pooled["ann"]),
            "turns_per_conversation": statistics.fmean(len(c.turns) for c in convs), "turns_one_group": n_pooled}
    engine.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=("index", "lane", "pre-turn", "recall"))
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--exact-queries", type=int, default=20, help="pre-turn: queries also run on the exact scan")
    parser.add_argument("--keep", default=None, help="pre-turn: keep the filled SQLite files in this directory")
    parser.add_argument("--configs", nargs="+",
                        default=["ann", "ann, FTS5 scoring", "ann, pruned", "ann, 8-bit codes", "ann, keyword pool off",
                                 "exact"],
                        help="pre-turn: which of the five configurations to run")
    parser.add_argument("--keyword-budget", type=int, default=4000,
                        help="pre-turn: SQLiteStore.keyword_postings_budget of the 'ann, pruned' configuration "
                             "(the library's default, 0, never prunes)")
    parser.add_argument("--locomo", type=Path, help="locomo-dev.json (recall)")
    parser.add_argument("--embedder", default="local", help="recall: the embedder provider string")
    parser.add_argument("--cache-dir", type=Path, help="recall: keep the embeddings here between runs")
    parser.add_argument("--scan-fractions", type=float, nargs="+", default=[AnnGroup.scan_fraction],
                        help="recall: shares of the group the approximate path scans (default: the library's)")
    parser.add_argument("--eight-bit", action="store_true",
                        help="recall: the former approximate path (8-bit scalar codes, 4 candidates per result)")
    parser.add_argument("--workdir", default=None, help="where the scratch SQLite files go (default: the temp dir)")
    parser.add_argument("--json", type=Path, help="also write the figures here (the docs' data file)")
    args = parser.parse_args(argv)
    args.results = {}
    if args.what == "recall" and args.locomo is None:
        parser.error(f"{args.what} needs --locomo PATH")
    default_fraction = AnnGroup.scan_fraction
    {"index": index_only, "lane": lane, "pre-turn": pre_turn, "recall": recall}[args.what](args)
    if args.json:
        key = "sizes" if args.what != "recall" else "scan_fractions"
        write_record(args.json, f"scale-{args.what}", {"what": args.what, key: args.results,
                                                        "default_scan_fraction": default_fraction,
                                                        "ann_threshold": DEFAULT_THRESHOLD}, argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
