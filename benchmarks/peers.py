"""Side by side on LoCoMo: the vector stores and retrievers users would pick instead, and this engine.

    python benchmarks/peers.py --data PATH/locomo10.json [--embedder local|onnx|onnx-int8]
        [--conversations conv-26 ...] [--peers chroma mem0 ...] [--json OUT]

Every system gets the same LoCoMo turns (one memory per dialog turn, the text of
``benchmarks/locomo.py``), the same embedder and the same questions, and is kept per
conversation the way a user would keep per-user memory (one store, collection, index or
user id per conversation). Systems:

* ``langchain-inmemory``: LangChain ``InMemoryVectorStore.similarity_search``;
* ``langchain-ensemble``: LangChain ``EnsembleRetriever`` over ``BM25Retriever`` and that
  store (weights 0.5 / 0.5);
* ``llamaindex-vector``: LlamaIndex ``VectorStoreIndex`` retriever;
* ``llamaindex-fusion``: LlamaIndex ``QueryFusionRetriever`` (reciprocal rank, one query,
  no LLM) over the vector retriever and ``BM25Retriever``;
* ``chroma``: an in-process Chroma collection (cosine);
* ``mem0``: mem0 OSS ``Memory`` with ``infer=False`` (raw turns, no LLM), its default local
  Qdrant store, ``threshold=0``;
* ``manowar-search`` / ``manowar-pre_turn``: :meth:`MemoryEngine.search` and
  :meth:`MemoryEngine.pre_turn` (vectors layer, SQLite file store, 25 items, budget large
  enough for all of them).

Reported: recall@5/10/25 per LoCoMo category (as in ``benchmarks/locomo.py``), ingest time,
and per-question query latency p50/p95 with the query embedding included (embedded live,
never cached, for every system), plus our ``pre_turn`` against each: latency ratio and
recall@10 difference. Document embeddings are computed once and shared; a system that asks
for a text not in that table (the engine's thread context embeds a turn with the one before
it) has it embedded live, and ingest times leave all document embedding out, so they compare
the systems' own work. A peer whose package is missing is reported as skipped with the pip
command; a peer that fails is reported with its error.

Peers come from the ``bench`` extra: ``pip install "manowar-memory[bench,langchain,llamaindex,local,onnx]"``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
os.environ.setdefault("MEM0_TELEMETRY", "False")

sys.path.insert(0, str(Path(__file__).resolve().parent))

from manowar_memory import MemoryEngine, Scope
from manowar_memory.embeddings import BaseEmbedder, Embedder, InputType, resolve_embedder

from locomo import CATEGORY_ORDER, KS, Conversation, ingest_items, load_conversations, memory_texts

K = max(KS)
BENCH = 'pip install "manowar-memory[bench]"'
OURS = "manowar-pre_turn"


# ---------------------------------------------------------------- the shared embedder


class SharedEmbedder(BaseEmbedder):
    """The benchmark's one embedder: documents from a precomputed table, queries always live.

    Live document embeddings (texts not in the table) are timed, so ingest times can leave
    them out; query embeddings are never cached."""

    def __init__(self, inner: Embedder, table: dict[str, list[float]]) -> None:
        self.inner = inner
        self.model_id = inner.model_id
        self._dimensions = inner.dimensions
        self.table = table
        self.live_document_s = 0.0
        self.batch_size = 256

    def _embed_batch(self, texts: list[str], input_type: InputType) -> list[list[float]]:
        if input_type == "query":
            return self.inner.embed(texts, input_type="query")
        missing = [t for t in dict.fromkeys(texts) if t not in self.table]
        if missing:
            t0 = time.perf_counter()
            self.table.update(zip(missing, self.inner.embed(missing, input_type="document")))
            self.live_document_s += time.perf_counter() - t0
        return [self.table[t] for t in texts]

    def query(self, text: str) -> list[float]:
        return self.embed([text], input_type="query")[0]

    def documents(self, texts: Sequence[str]) -> list[list[float]]:
        return self.embed(list(texts), input_type="document")


class NothingCached:
    """An engine cache that keeps no embeddings, so every query is embedded live."""

    name = "none"

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}
        self._lock = threading.Lock()

    def get(self, key: str) -> bytes | None:
        return None

    def get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        return [None] * len(keys)

    def set(self, key: str, value: bytes, ttl_seconds: float) -> None:
        return None

    def incr(self, key: str, ttl_seconds: float) -> int:
        with self._lock:
            self._counts[key] = self._counts.get(key, 0) + 1
            return self._counts[key]


# ---------------------------------------------------------------- systems

Retrieve = Callable[[str], list[str]]  # question -> dia ids, best first


@dataclass
class Result:
    name: str
    status: str = "ok"
    ingest_s: float = 0.0
    latencies: list[float] = field(default_factory=list)
    recall: dict[str, list[list[float]]] = field(default_factory=dict)

    def add(self, category: str, ranked: Sequence[str], evidence: Sequence[str]) -> None:
        gold = set(evidence)
        row = [len(gold & set(ranked[:k])) / len(gold) for k in KS]
        self.recall.setdefault("ALL", []).append(row)
        self.recall.setdefault(category, []).append(row)

    def r(self, category: str = "ALL", k: int = 10) -> float:
        rows = self.recall.get(category, [])
        return 100 * statistics.fmean(r[KS.index(k)] for r in rows) if rows else float("nan")

    def p(self, q: float) -> float:
        xs = sorted(self.latencies)
        return 1000 * xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


class System:
    """One competitor: ``ingest`` a conversation, return a retrieve function for its questions."""

    name = "system"
    needs: tuple[str, ...] = ()

    def __init__(self, embedder: SharedEmbedder, workdir: Path) -> None:
        self.embedder = embedder
        self.workdir = workdir

    def ingest(self, conv: Conversation) -> Retrieve:
        raise NotImplementedError

    def close(self) -> None:
        return None


def _lc_embeddings(embedder: SharedEmbedder) -> Any:
    from langchain_core.embeddings import Embeddings

    class LCEmbeddings(Embeddings):
        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            return embedder.documents(texts)

        def embed_query(self, text: str) -> list[float]:
            return embedder.query(text)

    return LCEmbeddings()


def _li_embedding(embedder: SharedEmbedder) -> Any:
    from llama_index.core.embeddings import BaseEmbedding

    class LIEmbedding(BaseEmbedding):
        def _get_query_embedding(self, query: str) -> list[float]:
            return embedder.query(query)

        async def _aget_query_embedding(self, query: str) -> list[float]:
            return embedder.query(query)

        def _get_text_embedding(self, text: str) -> list[float]:
            return embedder.documents([text])[0]

        def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
            return embedder.documents(texts)

    return LIEmbedding(model_name=embedder.model_id, embed_batch_size=256)


def _lc_docs(conv: Conversation) -> tuple[list[str], list[dict[str, str]]]:
    return conv.memory_texts, [{"dia_id": t.dia_id} for t in conv.turns]


class LangChainInMemory(System):
    name = "langchain-inmemory"
    needs = ("langchain_core",)

    def ingest(self, conv: Conversation) -> Retrieve:
        from langchain_core.vectorstores import InMemoryVectorStore

        store = InMemoryVectorStore(_lc_embeddings(self.embedder))
        texts, metas = _lc_docs(conv)
        store.add_texts(texts, metadatas=metas)
        return lambda q: [d.metadata["dia_id"] for d in store.similarity_search(q, k=K)]


class LangChainEnsemble(System):
    name = "langchain-ensemble"
    needs = ("langchain_core", "langchain_classic", "langchain_community", "rank_bm25")

    def ingest(self, conv: Conversation) -> Retrieve:
        from langchain_classic.retrievers import EnsembleRetriever
        from langchain_community.retrievers import BM25Retriever
        from langchain_core.vectorstores import InMemoryVectorStore

        store = InMemoryVectorStore(_lc_embeddings(self.embedder))
        texts, metas = _lc_docs(conv)
        store.add_texts(texts, metadatas=metas)
        bm25 = BM25Retriever.from_texts(texts, metadatas=metas, k=K)
        ensemble = EnsembleRetriever(retrievers=[bm25, store.as_retriever(search_kwargs={"k": K})], weights=[0.5, 0.5])
        return lambda q: [d.metadata["dia_id"] for d in ensemble.invoke(q)][:K]


def _li_nodes(conv: Conversation) -> list[Any]:
    from llama_index.core.schema import TextNode

    return [TextNode(text=text, id_=t.dia_id, metadata={"dia_id": t.dia_id})
            for t, text in zip(conv.turns, conv.memory_texts)]


class LlamaIndexVector(System):
    name = "llamaindex-vector"
    needs = ("llama_index.core",)

    def ingest(self, conv: Conversation) -> Retrieve:
        from llama_index.core import VectorStoreIndex

        index = VectorStoreIndex(_li_nodes(conv), embed_model=_li_embedding(self.embedder))
        retriever = index.as_retriever(similarity_top_k=K)
        return lambda q: [n.node.metadata["dia_id"] for n in retriever.retrieve(q)]


class LlamaIndexFusion(System):
    name = "llamaindex-fusion"
    needs = ("llama_index.core", "llama_index.retrievers.bm25")

    def ingest(self, conv: Conversation) -> Retrieve:
        from llama_index.core import VectorStoreIndex
        from llama_index.core.llms import MockLLM
        from llama_index.core.retrievers import QueryFusionRetriever
        from llama_index.retrievers.bm25 import BM25Retriever

        nodes = _li_nodes(conv)
        index = VectorStoreIndex(nodes, embed_model=_li_embedding(self.embedder))
        bm25 = BM25Retriever.from_defaults(nodes=nodes, similarity_top_k=K)
        fusion = QueryFusionRetriever(
            [index.as_retriever(similarity_top_k=K), bm25], similarity_top_k=K, num_queries=1,
            mode="reciprocal_rerank", use_async=False, llm=MockLLM(),  # type: ignore[arg-type]
        )
        return lambda q: [n.node.metadata["dia_id"] for n in fusion.retrieve(q)]


class Chroma(System):
    name = "chroma"
    needs = ("chromadb",)

    def __init__(self, embedder: SharedEmbedder, workdir: Path) -> None:
        super().__init__(embedder, workdir)
        import chromadb

        self.client = chromadb.EphemeralClient(chromadb.Settings(anonymized_telemetry=False))

    def ingest(self, conv: Conversation) -> Retrieve:
        collection = self.client.create_collection(
            f"locomo-{conv.sample_id}", embedding_function=None, metadata={"hnsw:space": "cosine"}
        )
        ids = [t.dia_id for t in conv.turns]
        vectors = self.embedder.documents(conv.memory_texts)
        for start in range(0, len(ids), 1000):
            collection.add(ids=ids[start:start + 1000], embeddings=vectors[start:start + 1000],
                           documents=conv.memory_texts[start:start + 1000])

        def retrieve(q: str) -> list[str]:
            found = collection.query(query_embeddings=[self.embedder.query(q)], n_results=K)
            return list(found["ids"][0])

        return retrieve


class Mem0(System):
    name = "mem0"
    needs = ("mem0",)

    def __init__(self, embedder: SharedEmbedder, workdir: Path) -> None:
        super().__init__(embedder, workdir)
        from mem0 import Memory
        from mem0.embeddings.base import EmbeddingBase

        os.environ.setdefault("OPENAI_API_KEY", "unused-infer-false-makes-no-llm-call")
        dims = embedder.dimensions or len(embedder.query("dimensions"))
        self.memory = Memory.from_config({
            "vector_store": {"provider": "qdrant", "config": {
                "collection_name": "locomo", "embedding_model_dims": dims, "path": str(workdir / "mem0-qdrant"),
                "on_disk": False}},
            "embedder": {"provider": "openai", "config": {"api_key": "unused", "embedding_dims": dims}},
            "history_db_path": str(workdir / "mem0-history.db"),
        })
        shared = embedder

        class Mem0Embedding(EmbeddingBase):  # the benchmark's embedder, in mem0's interface
            def embed(self, text: Any, memory_action: Any = None) -> list[float]:
                if memory_action == "search":
                    return shared.query(text)
                return shared.documents([text])[0]

            def embed_batch(self, texts: Any, memory_action: Any = "add") -> list[list[float]]:
                return [self.embed(t, memory_action) for t in texts]

        self.memory.embedding_model = Mem0Embedding()

    def ingest(self, conv: Conversation) -> Retrieve:
        for turn, text in zip(conv.turns, conv.memory_texts):
            self.memory.add(text, user_id=conv.sample_id, metadata={"dia_id": turn.dia_id}, infer=False)

        def retrieve(q: str) -> list[str]:
            found = self.memory.search(q, filters={"user_id": conv.sample_id}, top_k=K, threshold=0.0)
            return [r.get("metadata", {}).get("dia_id", "?") for r in found["results"]]

        return retrieve


class Manowar(System):
    """This engine on an SQLite file; ``mode`` is ``search`` or ``pre_turn``."""

    needs = ("manowar_memory",)

    def __init__(self, embedder: SharedEmbedder, workdir: Path, mode: str) -> None:
        super().__init__(embedder, workdir)
        self.mode = mode
        self.name = f"manowar-{mode}"
        self.engine = MemoryEngine(store=f"sqlite:///{workdir / f'manowar-{mode}.sqlite'}", embedder=embedder,
                                   cache=NothingCached())

    def ingest(self, conv: Conversation) -> Retrieve:
        scope = Scope(agent_wallet="locomo", user_address=conv.sample_id)
        items = ingest_items(conv, conv.memory_texts)
        to_dia = dict(zip(self.engine.ingest(scope, items), (t.dia_id for t in conv.turns)))
        if self.mode == "search":
            return lambda q: [to_dia.get(c.id, "?") for c in self.engine.search(q, scope, layers=("vectors",), k=K)[0]]
        return lambda q: [to_dia.get(i.id, "?") for i in self.engine.pre_turn(
            q, scope, ["vectors"], limit=K, budget_chars=200 * K, max_items=K).items]

    def close(self) -> None:
        self.engine.close()


SYSTEMS: dict[str, Callable[[SharedEmbedder, Path], System]] = {
    "langchain-inmemory": LangChainInMemory,
    "langchain-ensemble": LangChainEnsemble,
    "llamaindex-vector": LlamaIndexVector,
    "llamaindex-fusion": LlamaIndexFusion,
    "chroma": Chroma,
    "mem0": Mem0,
    "manowar-search": lambda e, w: Manowar(e, w, "search"),
    OURS: lambda e, w: Manowar(e, w, "pre_turn"),
}
NEEDS = {name: getattr(cls, "needs", ("manowar_memory",)) for name, cls in SYSTEMS.items()}


def _missing(modules: Sequence[str]) -> str | None:
    import importlib.util

    for module in modules:
        try:
            if importlib.util.find_spec(module) is None:
                return module
        except (ImportError, ValueError):
            return module
    return None


def run_system(name: str, convs: list[Conversation], embedder: SharedEmbedder, workdir: Path) -> Result:
    result = Result(name)
    missing = _missing(NEEDS[name])
    if missing:
        result.status = f"skipped: {missing} is not installed ({BENCH})"
        return result
    try:
        import importlib

        for module in NEEDS[name]:  # import time is not ingest time
            importlib.import_module(module)
        before = embedder.live_document_s
        t0 = time.perf_counter()
        system = SYSTEMS[name](embedder, workdir)
        retrievers = [system.ingest(conv) for conv in convs]
        result.ingest_s = time.perf_counter() - t0 - (embedder.live_document_s - before)
        for conv, retrieve in zip(convs, retrievers):
            for q in conv.questions:
                t1 = time.perf_counter()
                ranked = retrieve(q.text)
                result.latencies.append(time.perf_counter() - t1)
                result.add(q.category, ranked, q.evidence)
        system.close()
    except Exception as exc:  # noqa: BLE001 -- a failing peer is reported, never dropped
        traceback.print_exc()
        result.status = f"failed: {type(exc).__name__}: {exc}"[:200]
    return result


# ---------------------------------------------------------------- report


def report(results: list[Result], header: str) -> str:
    lines = [header, "", "Recall@k (%), turn level"]
    head = f"{'system':<20}{'category':<13}{'n':>5}   {'R@5':>6} {'R@10':>6} {'R@25':>6}"
    lines += [head, "-" * len(head)]
    for res in results:
        if res.status != "ok":
            lines += [f"{res.name:<20}{res.status}", ""]
            continue
        for cat in CATEGORY_ORDER:
            if cat in res.recall:
                lines.append(f"{res.name if cat == 'ALL' else '':<20}{cat:<13}{len(res.recall[cat]):>5}   "
                             + " ".join(f"{res.r(cat, k):>6.1f}" for k in KS))
        lines.append("")
    ours = next((r for r in results if r.name == OURS and r.status == "ok"), None)
    lines += ["Ingest (document embedding excluded) and query latency (query embedding included)",
              f"{'system':<20}{'ingest s':>9}{'p50 ms':>9}{'p95 ms':>9}{'R@10':>7}"
              + (f"   {'ours p50 / theirs':>18}{'ours R@10 - theirs':>20}" if ours else "")]
    for res in results:
        if res.status != "ok":
            lines.append(f"{res.name:<20}{res.status}")
            continue
        row = f"{res.name:<20}{res.ingest_s:>9.2f}{res.p(0.5):>9.2f}{res.p(0.95):>9.2f}{res.r():>7.1f}"
        if ours and res is not ours:
            row += f"   {ours.p(0.5) / res.p(0.5):>18.2f}{ours.r() - res.r():>+20.1f}"
        lines.append(row)
    return "\n".join(lines)


def compare_embedders(specs: Sequence[str], questions: list[str]) -> str:
    """Single-query embedding latency per embedder, measured in turn on each question."""
    embedders = {spec: resolve_embedder(spec) for spec in specs}
    for e in embedders.values():
        assert e is not None
        e.embed(["warm-up"], input_type="query")
    times: dict[str, list[float]] = {spec: [] for spec in specs}
    for q in questions:
        for spec, e in embedders.items():
            t0 = time.perf_counter()
            e.embed([q], input_type="query")  # type: ignore[union-attr]
            times[spec].append(time.perf_counter() - t0)
    base = statistics.median(times[specs[0]])
    lines = [f"Query embedding alone, one question per call ({len(questions)} questions)",
             f"{'embedder':<12}{'model id':<28}{'p50 ms':>9}{'p95 ms':>9}{'speed-up vs ' + specs[0]:>22}"]
    for spec, ts in times.items():
        ts = sorted(ts)
        lines.append(f"{spec:<12}{embedders[spec].model_id:<28}{1000 * statistics.median(ts):>9.2f}"  # type: ignore[union-attr]
                     f"{1000 * ts[int(0.95 * len(ts))]:>9.2f}{base / statistics.median(ts):>22.2f}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, required=True, help="LoCoMo JSON (locomo10.json or a subset)")
    parser.add_argument("--corrected-evidence", type=Path, help="audit JSON with correct_evidence per question")
    parser.add_argument("--embedder", default="local", help="embedder spec shared by every system (local, onnx, onnx-int8)")
    parser.add_argument("--conversations", nargs="*", help="only these sample ids")
    parser.add_argument("--peers", nargs="*", choices=list(SYSTEMS), help="only these systems (default: all)")
    parser.add_argument("--json", type=Path, help="also write the results as JSON here")
    parser.add_argument("--compare-embedders", nargs="*", default=[], metavar="SPEC",
                        help="also time single-query embedding with these embedders (e.g. local onnx onnx-int8), "
                             "interleaved question by question")
    args = parser.parse_args(argv)
    if not args.data.is_file():
        parser.error(f"--data {args.data} does not exist")
    convs, _, _ = load_conversations(args.data, args.corrected_evidence)
    if args.conversations:
        convs = [c for c in convs if c.sample_id in set(args.conversations)]
    for conv in convs:
        conv.memory_texts = memory_texts(conv)
    inner = resolve_embedder(args.embedder)
    if inner is None:
        parser.error("an embedder is required")
    texts = list(dict.fromkeys(t for c in convs for t in c.memory_texts))
    t0 = time.perf_counter()
    embedder = SharedEmbedder(inner, dict(zip(texts, inner.embed(texts, input_type="document"))))
    embed_s = time.perf_counter() - t0
    embedder.query("warm-up")
    n_q = sum(len(c.questions) for c in convs)
    header = (f"LoCoMo: {len(convs)} conversations, {len(texts)} turns, {n_q} questions; embedder "
              f"{inner.model_id} ({type(inner).__name__}), documents embedded once in {embed_s:.1f} s")
    print(header, flush=True)
    results = []
    with tempfile.TemporaryDirectory(prefix="manowar-peers-") as tmp:
        for name in args.peers or list(SYSTEMS):
            workdir = Path(tmp) / name
            workdir.mkdir()
            res = run_system(name, convs, embedder, workdir)
            print(f"  {name}: {res.status}" + (f", R@10 {res.r():.1f}, p50 {res.p(0.5):.2f} ms"
                                                 if res.status == "ok" else ""), flush=True)
            results.append(res)
    text = report(results, header)
    if args.compare_embedders:
        text += "\n\n" + compare_embedders(args.compare_embedders, [q.text for c in convs for q in c.questions])
    print(text, flush=True)
    if args.json:
        import json

        payload = {r.name: {"status": r.status, "ingest_s": r.ingest_s, "p50_ms": r.p(0.5), "p95_ms": r.p(0.95),
                            "recall": {c: {f"R@{k}": r.r(c, k) for k in KS} for c in r.recall}} for r in results}
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"embedder": inner.model_id, "systems": payload}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
