"""Retrieval quality on LoCoMo (Maharana et al., ACL 2024), through the engine's public API.

    python benchmarks/locomo.py --data PATH/locomo10.json [--corrected-evidence PATH] [--json OUT]

The data is not part of this project (CC BY-NC 4.0): get ``data/locomo10.json`` from the
public repository ``snap-research/LoCoMo`` and pass its path.

What it does, per conversation:

* ingests one memory per dialog turn with :meth:`MemoryEngine.ingest`, in one scope per
  conversation (``agent_wallet="locomo"``, ``user_address=<sample_id>``), all in one
  store. A memory's text is ``(8 May 2023) Caroline: <text>``, plus ``[shares an image:
  <caption>]`` when the turn shared an image, and nothing else. ``created_at`` is the
  session's date plus one second per turn, so turns keep their order; ``thread_id`` is the
  session, so the engine's thread context (``MemoryConfig.thread_context``, on by default)
  indexes each turn with the one before it; ``--no-thread-context`` turns that off;
* asks every question with :meth:`MemoryEngine.search` (``layers=("vectors",)``, k = 25)
  and scores recall@5/@10/@25 against the evidence turns (the LoCoMo paper's Table 3
  metric: |evidence ∩ top-k| / |evidence|, averaged over questions);
* asks it again with :meth:`MemoryEngine.pre_turn` as a ranker (row ``pre_turn``: vectors
  layer, 25 hits and 25 items, a budget of 200 characters per item so it never binds; the
  packed items in prompt order are the ranking), the setting of ``benchmarks/peers.py``.
  Each call bumps the access counts of what it packed, as in use, and the bumps are written
  before the next question (``engine.flush()``, outside the timings), as a chat's next turn
  would find them: left to the engine's timer, which questions saw them would vary from run
  to run, and so would this row;
* runs, on the same memory texts, the baselines: BM25 from ``bm25s`` (English stop words
  removed), dense-only with the same embedder (cosine, exact), and equal-weight RRF
  (k = 60) of those two;
* packs the context with :meth:`MemoryEngine.pre_turn` (vectors layer, 40 hits) at budgets
  of 900, 1800 and 4000 characters, with the engine's default 120 characters per item and
  ``max_items = budget // 130`` (6, 13, 30: as many items as the budget can hold), and
  reports how many evidence turns survive into the prompt (same averaging as recall; an
  item cut to 120 characters counts as surviving);
* times each retriever end to end per question (query embedding included; the engine's
  query cache starts empty) and reports queries per second.

Evidence ids are normalised (``D:?(\\d+):0*(\\d+)`` after splitting on ``;``, ``,`` and
spaces); ids that do not exist are dropped and questions left without evidence are
skipped. ``--corrected-evidence`` takes the public audit file and replaces a question's
evidence by its ``correct_evidence`` (matched on the question id and its text).

The embedder is the local all-MiniLM-L6-v2 (``--embedder local``; no network). With
``--cache-dir`` document embeddings are kept on disk between runs (an engine ``Cache``);
query embeddings never are, so the timings stay honest.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import sqlite3
import statistics
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from manowar_memory import MemoryConfig, MemoryEngine, Scope

sys.path.insert(0, str(Path(__file__).resolve().parent))
from record import write_record  # type: ignore[import-not-found]

CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
CATEGORY_ORDER = ["ALL", "single-hop", "multi-hop", "temporal", "open-domain", "adversarial"]
RETRIEVERS = ["manowar", "pre_turn", "bm25", "dense", "rrf"]
KS = (5, 10, 25)
BUDGETS = (900, 1800, 4000)
ITEM_CHARS = 120  # the engine's default max_item_chars
ITEM_COST = 130  # a packed line: "[VECTORS] " + up to 120 characters + newline
RANKED_ITEMS = max(KS)  # pre_turn as a ranker: this many items, budget_chars = 200 per item (never binding)
_EVIDENCE = re.compile(r"D:?(\d+):0*(\d+)")
_SESSION = re.compile(r"session_(\d+)")


# ---------------------------------------------------------------- data


@dataclass
class Turn:
    dia_id: str
    speaker: str
    text: str
    caption: str | None
    session: int
    index: int
    at: dt.datetime


@dataclass
class Question:
    text: str
    evidence: list[str]
    category: str
    qa_index: int


@dataclass
class Conversation:
    sample_id: str
    turns: list[Turn]
    questions: list[Question]
    memory_texts: list[str] = field(default_factory=list)


def normalise_evidence(raw: Sequence[str], known: set[str]) -> list[str]:
    """Evidence ids as ``D<session>:<turn>``, malformed ones repaired, unknown ones dropped."""
    out: list[str] = []
    for item in raw or []:
        for part in re.split(r"[;,\s]+", str(item)):
            match = _EVIDENCE.search(part.strip())
            if match:
                dia = f"D{int(match.group(1))}:{int(match.group(2))}"
                if dia in known and dia not in out:
                    out.append(dia)
    return out


def load_conversations(path: Path, corrected: Path | None) -> tuple[list[Conversation], int, int]:
    """The conversations, plus how many audit rows were applied and how many questions were skipped."""
    data = json.loads(path.read_text())
    corrections: dict[tuple[int, int], dict[str, Any]] = {}
    by_text: dict[str, list[dict[str, Any]]] = {}
    if corrected is not None:
        for row in json.loads(corrected.read_text()):
            by_text.setdefault(row["question"].strip(), []).append(row)
            m = re.fullmatch(r"locomo_(\d+)_qa(\d+)", str(row.get("question_id", "")))
            if m:
                corrections[(int(m.group(1)), int(m.group(2)))] = row
    applied = skipped = 0
    convs: list[Conversation] = []
    for ci, sample in enumerate(data):
        conv = sample["conversation"]
        sessions = sorted(int(m.group(1)) for k in conv if (m := _SESSION.fullmatch(k)))
        turns: list[Turn] = []
        for s in sessions:
            when = dt.datetime.strptime(conv[f"session_{s}_date_time"], "%I:%M %p on %d %B, %Y")
            for i, t in enumerate(conv[f"session_{s}"]):
                turns.append(Turn(t["dia_id"], t["speaker"], t["text"], t.get("blip_caption"), s, i, when))
        known = {t.dia_id for t in turns}
        questions = []
        for qi, qa in enumerate(sample["qa"]):
            evidence = qa.get("evidence", [])
            row = corrections.get((ci, qi))
            if row is None or row["question"].strip() != qa["question"].strip():
                candidates = by_text.get(qa["question"].strip(), [])
                row = candidates[0] if len(candidates) == 1 else None
            if row is not None and row.get("correct_evidence"):
                evidence = row["correct_evidence"]
                applied += 1
            ev = normalise_evidence(evidence, known)
            if not ev:
                skipped += 1
                continue
            questions.append(Question(qa["question"], ev, CATEGORIES[int(qa["category"])], qi))
        convs.append(Conversation(sample["sample_id"], turns, questions))
    return convs, applied, skipped


def turn_text(turn: Turn) -> str:
    text = f"({turn.at.day} {turn.at:%B %Y}) {turn.speaker}: {turn.text.strip()}"
    if turn.caption:
        text += f" [shares an image: {turn.caption.strip()}]"
    return text


def memory_texts(conv: Conversation) -> list[str]:
    """One text per turn: date, speaker, what was said and the caption of a shared image."""
    return [turn_text(turn) for turn in conv.turns]


def ingest_items(conv: Conversation, texts: Sequence[str]) -> list[dict[str, Any]]:
    """The engine's ingest items for a conversation's turns: the turn's time (turns of one
    session one second apart), its session as the thread, and its dialogue id as metadata."""
    return [
        {
            "content": text,
            "created_at": int(turn.at.replace(tzinfo=dt.UTC).timestamp() * 1000) + 1000 * turn.index,
            "thread_id": f"{conv.sample_id}:session_{turn.session}",
            "metadata": {"dia_id": turn.dia_id, "speaker": turn.speaker, "session": turn.session},
        }
        for turn, text in zip(conv.turns, texts)
    ]


# ---------------------------------------------------------------- embedding cache on disk


class DiskDocumentCache:
    """An engine :class:`~manowar_memory.Cache` that keeps document embeddings in an SQLite
    file (query embeddings and counters stay in memory, so query timings are not cached)."""

    name = "disk-documents"

    def __init__(self, directory: Path, *, queries: bool = False) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self._queries = queries
        self._db = sqlite3.connect(str(directory / "embeddings.sqlite"), check_same_thread=False)
        self._db.execute("CREATE TABLE IF NOT EXISTS kv (k TEXT PRIMARY KEY, v BLOB NOT NULL)")
        self._mem: dict[str, bytes] = {}
        self._lock = threading.Lock()

    def _durable(self, key: str) -> bool:
        return key.startswith("embedding:") and (":d:" in key or (self._queries and ":q:" in key))

    def get(self, key: str) -> bytes | None:
        with self._lock:
            if not self._durable(key):
                return self._mem.get(key)
            row = self._db.execute("SELECT v FROM kv WHERE k = ?", (key,)).fetchone()
            return row[0] if row else None

    def get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        return [self.get(k) for k in keys]

    def set(self, key: str, value: bytes, ttl_seconds: float) -> None:
        with self._lock:
            if self._durable(key):
                self._db.execute("INSERT OR REPLACE INTO kv VALUES (?, ?)", (key, value))
                self._db.commit()
            else:
                self._mem[key] = value

    def incr(self, key: str, ttl_seconds: float) -> int:
        with self._lock:
            value = int(self._mem.get(key, b"0")) + 1
            self._mem[key] = str(value).encode()
            return value


# ---------------------------------------------------------------- scoring


class Table:
    """Recall@k per retriever and category, and packed-context survival per budget."""

    def __init__(self) -> None:
        self.recall: dict[str, dict[str, list[list[float]]]] = {}
        self.survival: dict[int, dict[str, list[float]]] = {}
        self.per_conversation: dict[str, dict[str, float]] = {}

    def add(self, retriever: str, category: str, ranked: Sequence[str], evidence: Sequence[str]) -> list[float]:
        gold = set(evidence)
        row = [len(gold & set(ranked[:k])) / len(gold) for k in KS]
        per = self.recall.setdefault(retriever, {})
        per.setdefault("ALL", []).append(row)
        per.setdefault(category, []).append(row)
        return row

    def add_survival(self, budget: int, category: str, packed: set[str], evidence: Sequence[str]) -> None:
        value = len(set(evidence) & packed) / len(evidence)
        per = self.survival.setdefault(budget, {})
        per.setdefault("ALL", []).append(value)
        per.setdefault(category, []).append(value)

    def as_json(self) -> dict[str, dict[str, dict[str, float]]]:
        out: dict[str, dict[str, dict[str, float]]] = {}
        for retriever in RETRIEVERS:
            cats = self.recall.get(retriever, {})
            out[retriever] = {
                cat: {f"R@{k}": round(100 * statistics.fmean(r[i] for r in cats[cat]), 2) for i, k in enumerate(KS)}
                for cat in CATEGORY_ORDER
                if cats.get(cat)
            }
        return out


def bm25_index(texts: list[str]) -> Any:
    import bm25s

    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize(texts, stopwords="en", show_progress=False), show_progress=False)
    return retriever


def bm25_rank(retriever: Any, query: str, k: int) -> list[int]:
    import bm25s

    k = min(k, int(retriever.scores["num_docs"]))
    docs, scores = retriever.retrieve(bm25s.tokenize([query], stopwords="en", show_progress=False), k=k,
                                      show_progress=False)
    return [int(d) for d, s in zip(docs[0], scores[0]) if s > 0]


def rrf_rank(lanes: Sequence[Sequence[int]], k: int = 60) -> list[int]:
    scores: dict[int, float] = {}
    for lane in lanes:
        for rank, doc in enumerate(lane, start=1):
            scores[doc] = scores.get(doc, 0.0) + 1.0 / (k + rank)
    return sorted(scores, key=lambda d: -scores[d])


# ---------------------------------------------------------------- main


def run(args: argparse.Namespace) -> dict[str, Any]:
    convs, applied, skipped = load_conversations(args.data, args.corrected_evidence)
    if args.conversations:
        convs = [c for c in convs if c.sample_id in set(args.conversations)]
    n_questions = sum(len(c.questions) for c in convs)
    print(f"LoCoMo: {len(convs)} conversations, {sum(len(c.turns) for c in convs)} turns, {n_questions} questions"
          f" ({skipped} skipped without evidence"
          + (f", corrected evidence applied to {applied}" if args.corrected_evidence else "") + ")", flush=True)

    cache = DiskDocumentCache(args.cache_dir, queries=args.cache_queries) if args.cache_dir else None
    overrides = json.loads(getattr(args, "config", None) or "{}")  # --config: candidate defaults to measure
    if args.no_thread_context:
        overrides["thread_context"] = False
    engine = MemoryEngine(store="sqlite:///:memory:", embedder=args.embedder, cache=cache,
                          config=MemoryConfig.model_validate(overrides))
    if engine.embedder is None:
        raise SystemExit("an embedder is required (--embedder local)")
    raw_embedder = engine.embedder if args.cache_queries else engine.embedder.inner
    table = Table()
    times: dict[str, list[float]] = {r: [] for r in RETRIEVERS}
    pre_turn_ms: list[float] = []
    t_ingest = time.perf_counter()
    ids_of: dict[str, dict[str, str]] = {}
    for conv in convs:
        conv.memory_texts = memory_texts(conv)
        scope = Scope(agent_wallet="locomo", user_address=conv.sample_id)
        items = ingest_items(conv, conv.memory_texts)
        ids = engine.ingest(scope, items)
        ids_of[conv.sample_id] = {mid: turn.dia_id for mid, turn in zip(ids, conv.turns)}
    ingest_s = time.perf_counter() - t_ingest
    print(f"ingested in {ingest_s:.1f} s ({engine.model_id}"
          + (", document embeddings from the disk cache where present" if cache else "") + ")", flush=True)
    engine.embedder.inner.embed(["warm-up"], input_type="query")  # load the model outside the timings

    for conv in convs:
        scope = Scope(agent_wallet="locomo", user_address=conv.sample_id)
        to_dia = ids_of[conv.sample_id]
        dia = [t.dia_id for t in conv.turns]
        bm25 = bm25_index(conv.memory_texts)
        doc_vecs = np.asarray(engine.embedder.embed(conv.memory_texts, input_type="document"), dtype=np.float32)
        doc_vecs /= np.linalg.norm(doc_vecs, axis=1, keepdims=True)
        conv_rows: dict[str, list[float]] = {r: [] for r in RETRIEVERS}
        ranked: dict[str, list[list[str]]] = {r: [] for r in RETRIEVERS}
        # one pass per retriever: interleaving torch, OpenBLAS and bm25s calls on a small machine
        # makes their thread pools fight and slows every one of them down
        for q in conv.questions:
            t0 = time.perf_counter()
            found, _ = engine.search(q.text, scope, layers=("vectors",), k=max(KS))
            times["manowar"].append(time.perf_counter() - t0)
            ranked["manowar"].append([to_dia.get(c.id, "?") for c in found])
        for q in conv.questions:
            t0 = time.perf_counter()
            packed = engine.pre_turn(q.text, scope, ["vectors"], limit=RANKED_ITEMS, max_items=RANKED_ITEMS,
                                     budget_chars=200 * RANKED_ITEMS)
            times["pre_turn"].append(time.perf_counter() - t0)
            engine.flush()  # this question's access bumps, written before the next one
            ranked["pre_turn"].append([to_dia.get(i.id, "?") for i in packed.items])
        bm_lists, dense_lists = [], []
        for q in conv.questions:
            t0 = time.perf_counter()
            bm_lists.append(bm25_rank(bm25, q.text, 100))
            times["bm25"].append(time.perf_counter() - t0)
        for q in conv.questions:
            t0 = time.perf_counter()
            qv = np.asarray(raw_embedder.embed([q.text], input_type="query")[0], dtype=np.float32)
            sims = doc_vecs @ (qv / (np.linalg.norm(qv) or 1.0))
            dense_lists.append([int(i) for i in np.argsort(-sims, kind="stable")[:100]])
            times["dense"].append(time.perf_counter() - t0)
        n = len(conv.questions)
        for i, (bm, dense) in enumerate(zip(bm_lists, dense_lists)):
            t0 = time.perf_counter()
            fused = rrf_rank([bm, dense])
            times["rrf"].append(time.perf_counter() - t0 + times["bm25"][-n + i] + times["dense"][-n + i])
            ranked["bm25"].append([dia[j] for j in bm])
            ranked["dense"].append([dia[j] for j in dense])
            ranked["rrf"].append([dia[j] for j in fused])
        for retriever in RETRIEVERS:
            for q, r in zip(conv.questions, ranked[retriever]):
                conv_rows[retriever].append(table.add(retriever, q.category, r, q.evidence)[1])

        table.per_conversation[conv.sample_id] = {r: 100 * statistics.fmean(v) for r, v in conv_rows.items()}
        print(f"  {conv.sample_id}: {len(conv.questions)} questions, R@10 "
              + ", ".join(f"{r} {v:.1f}" for r, v in table.per_conversation[conv.sample_id].items()), flush=True)
    # the engine's own cost: the same searches again, query embeddings now cached in-process
    engine_only: list[float] = []
    for conv in convs:
        scope = Scope(agent_wallet="locomo", user_address=conv.sample_id)
        for q in conv.questions:
            t0 = time.perf_counter()
            engine.search(q.text, scope, layers=("vectors",), k=max(KS))
            engine_only.append(time.perf_counter() - t0)
    # packed context, after the timed passes (pre_turn counts accesses in a background thread)
    for conv in [] if args.no_packing else convs:
        scope = Scope(agent_wallet="locomo", user_address=conv.sample_id)
        to_dia = ids_of[conv.sample_id]
        for q in conv.questions:
            for budget in BUDGETS:
                t0 = time.perf_counter()
                packed = engine.pre_turn(
                    q.text, scope, ["vectors"], limit=40, budget_chars=budget,
                    max_items=budget // ITEM_COST, max_item_chars=ITEM_CHARS,
                )
                pre_turn_ms.append((time.perf_counter() - t0) * 1000)
                engine.flush()
                table.add_survival(budget, q.category, {to_dia.get(i.id, "?") for i in packed.items}, q.evidence)
    engine.close()
    return {"table": table, "times": times, "pre_turn_ms": pre_turn_ms, "ingest_s": ingest_s,
            "questions": n_questions, "model": engine.model_id, "engine_only": engine_only,
            "conversations": len(convs), "turns": sum(len(c.turns) for c in convs)}


def summary(result: dict[str, Any]) -> dict[str, Any]:
    """The data file's ``results``: recall@k per retriever and category, R@10 per conversation,
    packed evidence per budget and category, and p50 timings. Summaries only: no question,
    turn or text of the data set."""
    table: Table = result["table"]
    def r2(value: float) -> float:
        return round(value, 2)

    return {
        "conversations": result["conversations"], "turns": result["turns"], "questions": result["questions"],
        "model": result["model"], "budgets": list(BUDGETS), "ks": list(KS),
        "recall": table.as_json(),
        "recall_at_10_per_conversation": {c: {r: r2(v) for r, v in row.items()}
                                          for c, row in table.per_conversation.items()},
        "packed": {str(budget): {c: r2(100 * statistics.fmean(per[c])) for c in CATEGORY_ORDER if per.get(c)}
                   for budget, per in table.survival.items()},
        "p50_ms": {
            **{r: r2(1000 * statistics.median(ts)) for r, ts in result["times"].items() if ts},
            "engine_search_cached": r2(1000 * statistics.median(result["engine_only"])) if result["engine_only"] else None,
            "pre_turn_cached": r2(statistics.median(result["pre_turn_ms"])) if result["pre_turn_ms"] else None,
        },
    }


def report(result: dict[str, Any]) -> str:
    table: Table = result["table"]
    data = table.as_json()
    lines = []
    header = f"{'retriever':<10}{'category':<13}{'n':>5}   {'R@5':>6} {'R@10':>6} {'R@25':>6}"
    lines += ["", "Recall@k (%), turn level", header, "-" * len(header)]
    for retriever in RETRIEVERS:
        for cat in CATEGORY_ORDER:
            if cat not in data[retriever]:
                continue
            row = data[retriever][cat]
            n = len(table.recall[retriever][cat])
            lines.append(f"{retriever if cat == 'ALL' else '':<10}{cat:<13}{n:>5}   "
                         f"{row['R@5']:>6.1f} {row['R@10']:>6.1f} {row['R@25']:>6.1f}")
        lines.append("")
    lines.append("Recall@10 (%) per conversation")
    convs = list(table.per_conversation)
    lines.append(f"{'retriever':<10}" + "".join(f"{c:>9}" for c in convs))
    for retriever in RETRIEVERS:
        lines.append(f"{retriever:<10}" + "".join(f"{table.per_conversation[c][retriever]:>9.1f}" for c in convs))
    if table.survival:
        lines += ["", (f"Evidence turns surviving into the packed context (%), pre_turn, vectors layer, "
                       f"{ITEM_CHARS} chars per item, max_items = budget // {ITEM_COST}"),
                  f"{'budget':<8}" + "".join(f"{c:>13}" for c in CATEGORY_ORDER)]
        for budget in BUDGETS:
            per = table.survival.get(budget, {})
            lines.append(f"{budget:<8}" + "".join(
                f"{100 * statistics.fmean(per[c]):>13.1f}" if per.get(c) else f"{'-':>13}" for c in CATEGORY_ORDER))
    lines += ["", "Queries per second (end to end per question, query embedding included)"]
    for retriever in RETRIEVERS:
        ts = result["times"][retriever]
        lines.append(f"  {retriever:<8} {len(ts) / sum(ts):8.1f} qps   p50 {1000 * statistics.median(ts):6.2f} ms")
    eo = result["engine_only"]
    lines.append(f"  manowar, query embedding cached (the engine's own cost): {len(eo) / sum(eo):.1f} qps   "
                 f"p50 {1000 * statistics.median(eo):.2f} ms")
    if result["pre_turn_ms"]:
        pt = result["pre_turn_ms"]
        lines.append(f"  pre_turn (search + pack) p50 {statistics.median(pt):.2f} ms over {len(pt)} calls")
    lines.append(f"  ingest: {result['ingest_s']:.1f} s for the corpus ({result['model']}; less with --cache-dir)")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, required=True, help="LoCoMo JSON (locomo10.json or a subset)")
    parser.add_argument("--corrected-evidence", type=Path, help="audit JSON with correct_evidence per question")
    parser.add_argument("--json", type=Path, help="also write the figures here (the docs' data file, e.g. docs/data/locomo.json)")
    parser.add_argument("--embedder", default="local", help="engine embedder spec (default: local MiniLM)")
    parser.add_argument("--no-thread-context", action="store_true",
                        help="turn the engine's thread context off (ablation: each turn indexed alone)")
    parser.add_argument("--cache-dir", type=Path, help="keep document embeddings here between runs")
    parser.add_argument("--cache-queries", action="store_true",
                        help="cache query embeddings on disk too (for tuning runs; timings then leave out the model)")
    parser.add_argument("--conversations", nargs="*", help="only these sample ids")
    parser.add_argument("--config", help='MemoryConfig overrides as JSON, e.g. \'{"retrieval": {"entity_seed_count": 8}}\' '
                        "(to measure a candidate default before changing it)")
    parser.add_argument("--no-packing", action="store_true", help="skip the packed-context survival pass")
    args = parser.parse_args(argv)
    if not args.data.is_file():
        parser.error(f"--data {args.data} does not exist")
    result = run(args)
    print(report(result), flush=True)
    if args.json:
        write_record(args.json, "locomo", summary(result), None if argv is None else list(argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
