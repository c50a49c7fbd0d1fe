"""Context savings and latency of project notes (compact search cards, then one hydration) on this
repository's own Markdown: Turbo Quant Memory's published measurement, re-run on this engine.

    python benchmarks/notes.py [--embedder local|fake|voyage:...] [--store sqlite:///path.db] [--json out.json]

* **Corpus:** every Markdown file of the repository that ``index_paths(["."], mode="full")`` finds
  (the default ignored directories apply: .venv, build, benchmarks, node_modules, ...).
* **Queries:** six fixed queries about this repository (``--query`` replaces them). Each runs as
  ``semantic_search(scope="project", limit=5)``; the time includes the freshness check of the
  Markdown, the query embedding (the first run of each query, uncached) and the engine's search.
  Then ``hydrate(top Markdown hit, mode="default")`` is timed.
* **Lanes:** ``vector`` when the vector-first gate held (top cosine >= 0.82, keyword lane skipped),
  ``vector+keyword`` when the candidates came from the weighted RRF of both lanes.
* **Savings,** in UTF-8 bytes and whitespace-separated words, of JSON serialised with indent 2 and
  sorted keys: the **baseline** is the full text of every unique file among the top 5 hits; the
  **compact** strategy is the search response alone; **guided** is the search response plus the
  hydrate response of the top hit. Savings = 1 − strategy / baseline.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from manowar_memory import MemoryEngine
from manowar_memory.notes import ProjectIdentity, ProjectNotes

sys.path.insert(0, str(Path(__file__).resolve().parent))
from record import write_record  # type: ignore[import-not-found]

ROOT = Path(__file__).resolve().parents[1]
QUERIES = [
    "scoped surface ownership trust reserved metadata",
    "hybrid retrieval keyword vector lanes fusion ranking",
    "consolidation decay archive maintenance jobs Temporal schedules",
    "MongoDB store vector search replica set",
    "LangChain LlamaIndex integrations tool catalog",
    "remember note decision lesson handoff pattern",
]


def _dump(obj: object) -> str:
    return json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False)


def _size(text: str) -> tuple[int, int]:
    return len(text.encode("utf-8")), len(text.split())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--embedder", default="local", help="local (all-MiniLM-L6-v2, offline), fake, voyage[:model]")
    parser.add_argument("--store", default=None, help="Store URL (default: a scratch SQLite file)")
    parser.add_argument("--query", action="append", default=None, help="A query (repeatable; default: six fixed)")
    parser.add_argument("--json", type=Path, default=None, help="Also write the figures here")
    args = parser.parse_args()

    scratch = tempfile.TemporaryDirectory()
    store = args.store or f"sqlite:///{Path(scratch.name) / 'notes.db'}"
    engine = MemoryEngine(store=store, embedder=args.embedder)
    ident = ProjectIdentity("bench", ROOT.name, str(ROOT), "override", "bench")
    notes = ProjectNotes(engine, project=ident)
    engine.embedder.embed(["warm up the model"], input_type="query")  # model load is not a query's cost

    t0 = time.perf_counter()
    full = notes.index_paths(["."], mode="full")
    full_ms = (time.perf_counter() - t0) * 1000
    t0 = time.perf_counter()
    again = notes.index_paths()
    incr_ms = (time.perf_counter() - t0) * 1000
    print(f"corpus: {full['files_indexed']} files, {full['blocks_total']} blocks; full index {full_ms:.0f} ms, "
          f"incremental with nothing changed ({again['files_skipped']} skipped) {incr_ms:.0f} ms")

    rows = []
    for query in args.query or QUERIES:
        t0 = time.perf_counter()
        found = notes.semantic_search(query, scope="project", limit=5)
        search_ms = (time.perf_counter() - t0) * 1000
        t0 = time.perf_counter()
        notes.semantic_search(query, scope="project", limit=5)
        warm_ms = (time.perf_counter() - t0) * 1000
        paths = list(dict.fromkeys(i["source_path"] for i in found["items"] if i["source_kind"] == "markdown"))
        baseline = "".join((ROOT / p).read_text(encoding="utf-8", errors="replace") for p in paths)
        top = next((i for i in found["items"] if i["source_kind"] == "markdown"), None)
        hydrate_ms, hydrated = 0.0, ""
        if top is not None:
            t0 = time.perf_counter()
            hydrated = _dump(notes.hydrate(top["item_id"], scope=top["scope"], mode="default"))
            hydrate_ms = (time.perf_counter() - t0) * 1000
        compact = _dump(found)
        (bb, bw), (cb, cw), (gb, gw) = _size(baseline), _size(compact), _size(compact + hydrated)
        rows.append({
            "query": query, "files": len(paths), "baseline_bytes": bb, "search_bytes": cb, "guided_bytes": gb,
            "search_savings": 1 - cb / bb if bb else 0.0, "guided_savings": 1 - gb / bb if bb else 0.0,
            "search_word_savings": 1 - cw / bw if bw else 0.0, "guided_word_savings": 1 - gw / bw if bw else 0.0,
            "search_ms": search_ms, "search_warm_ms": warm_ms, "hydrate_ms": hydrate_ms,
            "lanes": found.get("lanes", {}).get("project"),
            "top": {"state": found["confidence_state"], "score": top["score"] if top else None,
                    "title": top["title"] if top else None, "path": top["source_path"] if top else None},
        })

    print(f"\n{'query':<58} {'files':>5} {'base B':>8} {'search B':>8} {'save':>6} {'guided':>6} "
          f"{'search':>8} {'hydrate':>8} {'lanes':>14}  top hit")
    for r in rows:
        print(f"{r['query'][:58]:<58} {r['files']:>5} {r['baseline_bytes']:>8} {r['search_bytes']:>8} "
              f"{r['search_savings']:>6.1%} {r['guided_savings']:>6.1%} {r['search_ms']:>6.1f}ms "
              f"{r['hydrate_ms']:>6.1f}ms {r['lanes']:>14}  {r['top']['state']} {r['top']['score']} {r['top']['path']}#{r['top']['title']}")

    def avg(key: str) -> float:
        return statistics.fmean(r[key] for r in rows)

    def med(key: str) -> float:
        return statistics.median(r[key] for r in rows)

    summary = {
        "embedder": engine.model_id, "store": store.split("?")[0].split("://")[0], "files": full["files_indexed"],
        "blocks": full["blocks_total"], "full_index_ms": full_ms, "incremental_index_ms": incr_ms,
        "search_savings_avg": avg("search_savings"), "search_savings_median": med("search_savings"),
        "guided_savings_avg": avg("guided_savings"), "guided_savings_median": med("guided_savings"),
        "search_word_savings_avg": avg("search_word_savings"), "guided_word_savings_avg": avg("guided_word_savings"),
        "search_ms_avg": avg("search_ms"), "search_ms_median": med("search_ms"),
        "search_warm_ms_avg": avg("search_warm_ms"), "hydrate_ms_avg": avg("hydrate_ms"),
        "hydrate_ms_median": med("hydrate_ms"),
    }
    print(f"\nsearch only:      {summary['search_savings_avg']:.2%} average byte savings "
          f"({summary['search_savings_median']:.2%} median, {summary['search_word_savings_avg']:.2%} words)")
    print(f"search + hydrate: {summary['guided_savings_avg']:.2%} average byte savings "
          f"({summary['guided_savings_median']:.2%} median, {summary['guided_word_savings_avg']:.2%} words)")
    print(f"semantic_search:  {summary['search_ms_avg']:.1f} ms average ({summary['search_ms_median']:.1f} median; "
          f"{summary['search_warm_ms_avg']:.1f} ms with the query embedding cached)")
    print(f"hydrate:          {summary['hydrate_ms_avg']:.1f} ms average ({summary['hydrate_ms_median']:.1f} median)")
    print("reference (Turbo Quant Memory v0.7.1, MiniLM-L6 on a Mac, 18 files / 384 blocks): search only 83.79 %, "
          "search + hydrate 74.5 %, search ~401 ms, hydrate ~368 ms")
    if args.json:
        write_record(args.json, "notes", {"summary": summary, "queries": len(rows)})
    engine.close()
    scratch.cleanup()


if __name__ == "__main__":
    main()
