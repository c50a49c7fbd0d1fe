"""Side by side on LoCoMo: the vector stores and retrievers users would pick instead, and this engine.

    python benchmarks/peers.py --data PATH/locomo10.json [--mode shared|native|both]
        [--embedder local|onnx|onnx-int8] [--onnx-threads N] [--conversations conv-26 ...] [--peers chroma mem0 ...]
        [--json OUT]

Every system gets the same LoCoMo turns (one memory per dialog turn, the text of
``benchmarks/locomo.py``) and the same questions, and is kept per conversation the way a user
would keep per-user memory (one store, collection, index or user id per conversation).

Two modes (``--mode both`` runs one, then the other):

* ``shared`` (default): every system embeds with the one ``--embedder``, so the comparison
  is of the systems alone (``--onnx-threads N`` sets ONNX Runtime's intra-op threads of that
  one embedder; its default takes every core, so work a system does beside the embedding
  competes with it);
* ``native``: each peer embeds queries with the runtime its integration uses for
  all-MiniLM-L6-v2 by default -- sentence-transformers on torch through LangChain's
  ``HuggingFaceEmbeddings``, LlamaIndex's ``HuggingFaceEmbedding`` and mem0's ``huggingface``
  embedder; Chroma's own ``DefaultEmbeddingFunction`` (ONNX Runtime, every text padded to 256
  tokens) pointed at a local ONNX export of the same weights, since it would otherwise download
  one -- and this engine runs with its fastest embedders, ``onnx`` (the float graph, the torch
  vectors within float rounding) and ``onnx-int8`` (its own vector space, so its own document
  table). Peers' document vectors come from sentence-transformers on torch, ours from our
  embedder; every row of the output names the embedder that system used.

Systems:

* ``langchain-inmemory``: LangChain ``InMemoryVectorStore.similarity_search``;
* ``langchain-ensemble``: LangChain ``EnsembleRetriever`` over ``BM25Retriever`` and that
  store (weights 0.5 / 0.5);
* ``llamaindex-vector``: LlamaIndex ``VectorStoreIndex`` retriever;
* ``llamaindex-fusion``: LlamaIndex ``QueryFusionRetriever`` (reciprocal rank, one query,
  no LLM) over the vector retriever and ``BM25Retriever``;
* ``chroma``: an in-process Chroma collection (cosine);
* ``mem0``: mem0 OSS ``Memory`` with ``infer=False`` (raw turns, no LLM), its default local
  Qdrant store, ``threshold=0``;
* ``numpy-scan``: the floor, a bare numpy matrix and one dot product per question;
* ``manowar-search`` / ``manowar-pre_turn``: :meth:`MemoryEngine.search` and
  :meth:`MemoryEngine.pre_turn` (vectors layer, SQLite file store, 25 items, budget large
  enough for all of them).

Reported: recall@5/10/25 per LoCoMo category (as in ``benchmarks/locomo.py``), ingest time,
and per-question query latency p50/p95 with the query embedding included (embedded live,
never cached, for every system), plus our ``pre_turn`` against each: latency ratio and
recall@10 difference. Every system is ingested first; then the questions are asked one at a
time to every system in turn (rotating which goes first), so a busy spell of a shared machine
falls on all of them alike. Each system's own cost is its latency minus the query embedding it
asked the shared embedder for; against Chroma with the same embedder the report checks our
``pre_turn`` p50 at most Chroma's, ``search`` at most 0.8x of it, and R@10 at least 25 points
above, beside the numpy scan's own cost. Document embeddings are computed once per embedder and shared; a system that asks
for a text not in that table (the engine's thread context embeds a turn with the one before
it) has it embedded live, and ingest times leave all document embedding out, so they compare
the systems' own work. A peer whose package is missing is reported as skipped with the pip
command; a peer that fails is reported with its error.

Peers come from the ``bench`` extra: ``pip install "manowar-memory[bench,langchain,llamaindex,local,onnx]"``
(it pins peer packages that may clash with the rest of the project's extras: use a venv of its own).
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
from record import write_record  # type: ignore[import-not-found]

K = max(KS)
BENCH = 'pip install "manowar-memory[bench]"'
OURS = "manowar-pre_turn"


# ---------------------------------------------------------------- the shared embedder


class SharedEmbedder(BaseEmbedder):
    """The benchmark's one embedder: documents from a precomputed table, queries always live.

    Live document embeddings (texts not in the table) are timed, so ingest times can leave
    them out; query embeddings are never cached."""

    def __init__(self, inner: Embedder, table: dict[str, list[float]], label: str = "") -> None:
        self.inner = inner
        self.label = label or inner.model_id
        self.model_id = inner.model_id
        self._dimensions = inner.dimensions
        self.table = table
        self.live_document_s = 0.0
        self.query_s = 0.0  # live query embedding, summed: a system's own cost is its latency minus this
        self.batch_size = 256

    def _embed_batch(self, texts: list[str], input_type: InputType) -> list[list[float]]:
        if input_type == "query":
            t0 = time.perf_counter()
            vectors = self.inner.embed(texts, input_type="query")
            self.query_s += time.perf_counter() - t0
            return vectors
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
    embedder: str = ""
    status: str = "ok"
    ingest_s: float = 0.0
    latencies: list[float] = field(default_factory=list)
    embedding: list[float] = field(default_factory=list)  # per question: query embedding seen by the embedder
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
        return _quantile_ms(self.latencies, q)

    def own_p(self, q: float) -> float:
        """The system's own cost per question (latency minus the query embedding it asked the
        shared embedder for), in ms; NaN when the system embedded queries itself (native mode).
        An embedding that overlaps the system's other work (a lane thread) is subtracted whole,
        so this is the time the system adds on top of the embedding."""
        if not self.embedding or not any(self.embedding):
            return float("nan")
        return _quantile_ms([t - e for t, e in zip(self.latencies, self.embedding)], q)


def _quantile_ms(xs: Sequence[float], q: float) -> float:
    xs = sorted(xs)
    return 1000 * xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


class System:
    """One competitor: ``ingest`` a conversation, return a retrieve function for its questions."""

    name = "system"
    needs: tuple[str, ...] = ()

    def __init__(self, embedder: SharedEmbedder, workdir: Path, native: Any = None) -> None:
        self.embedder = embedder
        self.workdir = workdir
        self.native = native  # native mode: the peer integration's own embedding object (see NATIVE)

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

        store = InMemoryVectorStore(self.native or _lc_embeddings(self.embedder))
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

        store = InMemoryVectorStore(self.native or _lc_embeddings(self.embedder))
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

        index = VectorStoreIndex(_li_nodes(conv), embed_model=self.native or _li_embedding(self.embedder))
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
        index = VectorStoreIndex(nodes, embed_model=self.native or _li_embedding(self.embedder))
        bm25 = BM25Retriever.from_defaults(nodes=nodes, similarity_top_k=K)
        fusion = QueryFusionRetriever(
            [index.as_retriever(similarity_top_k=K), bm25], similarity_top_k=K, num_queries=1,
            mode="reciprocal_rerank", use_async=False, llm=MockLLM(),  # type: ignore[arg-type]
        )
        return lambda q: [n.node.metadata["dia_id"] for n in fusion.retrieve(q)]


class Chroma(System):
    name = "chroma"
    needs = ("chromadb",)

    def __init__(self, embedder: SharedEmbedder, workdir: Path, native: Any = None) -> None:
        super().__init__(embedder, workdir, native)
        import chromadb

        self.client = chromadb.EphemeralClient(chromadb.Settings(anonymized_telemetry=False))

    def ingest(self, conv: Conversation) -> Retrieve:
        # chromadb's ephemeral clients share one in-process system: a name of this instance's own,
        # so a second run in the process (--mode both) does not meet the first run's collection
        collection = self.client.create_collection(
            f"locomo-{conv.sample_id}-{id(self):x}", embedding_function=self.native, metadata={"hnsw:space": "cosine"}
        )
        ids = [t.dia_id for t in conv.turns]
        vectors = self.embedder.documents(conv.memory_texts)
        for start in range(0, len(ids), 1000):
            collection.add(ids=ids[start:start + 1000], embeddings=vectors[start:start + 1000],
                           documents=conv.memory_texts[start:start + 1000])

        def retrieve(q: str) -> list[str]:
            if self.native is not None:  # the collection's own embedding function embeds the question
                found = collection.query(query_texts=[q], n_results=K)
            else:
                found = collection.query(query_embeddings=[self.embedder.query(q)], n_results=K)
            return list(found["ids"][0])

        return retrieve


class Mem0(System):
    name = "mem0"
    needs = ("mem0",)

    def __init__(self, embedder: SharedEmbedder, workdir: Path, native: Any = None) -> None:
        super().__init__(embedder, workdir, native)
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

        self.memory.embedding_model = native or Mem0Embedding()

    def ingest(self, conv: Conversation) -> Retrieve:
        for turn, text in zip(conv.turns, conv.memory_texts):
            self.memory.add(text, user_id=conv.sample_id, metadata={"dia_id": turn.dia_id}, infer=False)

        def retrieve(q: str) -> list[str]:
            found = self.memory.search(q, filters={"user_id": conv.sample_id}, top_k=K, threshold=0.0)
            return [r.get("metadata", {}).get("dia_id", "?") for r in found["results"]]

        return retrieve


class NumpyScan(System):
    """The floor: a bare numpy matrix of unit vectors per conversation, one dot product and an
    ``argpartition`` per question (what any vector store does before its own bookkeeping)."""

    name = "numpy-scan"
    needs = ("numpy",)

    def ingest(self, conv: Conversation) -> Retrieve:
        import numpy as np

        matrix = np.asarray(self.embedder.documents(conv.memory_texts), dtype=np.float32)
        matrix /= np.maximum(np.linalg.norm(matrix, axis=1, keepdims=True), 1e-12)
        ids = [t.dia_id for t in conv.turns]
        k = min(K, len(ids))

        def retrieve(q: str) -> list[str]:
            scores = matrix @ np.asarray(self.embedder.query(q), dtype=np.float32)
            top = np.argpartition(-scores, k - 1)[:k]
            return [ids[i] for i in top[np.argsort(-scores[top])]]

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


SYSTEMS: dict[str, Callable[[SharedEmbedder, Path, Any], System]] = {
    "langchain-inmemory": LangChainInMemory,
    "langchain-ensemble": LangChainEnsemble,
    "llamaindex-vector": LlamaIndexVector,
    "llamaindex-fusion": LlamaIndexFusion,
    "chroma": Chroma,
    "mem0": Mem0,
    "numpy-scan": NumpyScan,
    "manowar-search": lambda e, w, n: Manowar(e, w, "search"),
    OURS: lambda e, w, n: Manowar(e, w, "pre_turn"),
}
NEEDS = {name: getattr(cls, "needs", ("manowar_memory",)) for name, cls in SYSTEMS.items()}


# ---------------------------------------------------------------- native mode: the peers' own embedding runtimes


def _model_dir() -> Path:
    from manowar_memory.embeddings.local import bundled_model_path

    return bundled_model_path(extra="local")


def _native_langchain(docs: SharedEmbedder, workdir: Path) -> Any:
    from langchain_huggingface import HuggingFaceEmbeddings

    class TableDocuments(HuggingFaceEmbeddings):  # queries: HuggingFaceEmbeddings.embed_query, untouched
        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            return docs.documents(texts)

    embeddings = TableDocuments(model_name=str(_model_dir()), model_kwargs={"device": "cpu"})
    embeddings.embed_query("warm-up")
    return embeddings


def _native_llamaindex(docs: SharedEmbedder, workdir: Path) -> Any:
    from llama_index.embeddings.huggingface import HuggingFaceEmbedding

    class TableDocuments(HuggingFaceEmbedding):  # type: ignore[misc]  # queries: _get_query_embedding, untouched
        def _get_text_embedding(self, text: str) -> list[float]:
            return docs.documents([text])[0]

        def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
            return docs.documents(texts)

    embedding = TableDocuments(model_name=str(_model_dir()), device="cpu", embed_batch_size=256)
    embedding.get_query_embedding("warm-up")
    return embedding


def _native_mem0(docs: SharedEmbedder, workdir: Path) -> Any:
    from mem0.configs.embeddings.base import BaseEmbedderConfig
    from mem0.embeddings.huggingface import HuggingFaceEmbedding

    class TableDocuments(HuggingFaceEmbedding):  # type: ignore[misc]  # "search" embeddings: mem0's own code
        def embed(self, text: Any, memory_action: Any = None) -> Any:
            if memory_action == "search":
                return super().embed(text, memory_action)
            return docs.documents([text])[0]

        def embed_batch(self, texts: Any, memory_action: Any = "add") -> Any:
            if memory_action == "search":
                return super().embed_batch(texts, memory_action)
            return docs.documents(list(texts))

    embedder = TableDocuments(BaseEmbedderConfig(model=str(_model_dir()), embedding_dims=384))
    embedder.embed("warm-up", "search")
    return embedder


def _native_chroma(docs: SharedEmbedder, workdir: Path) -> Any:
    """Chroma's default embedding function, offline: its folder layout filled with a local ONNX
    export of the same MiniLM weights (token outputs; Chroma pools and normalises itself)."""
    import shutil

    import torch
    from chromadb.utils.embedding_functions.onnx_mini_lm_l6_v2 import ONNXMiniLM_L6_V2
    from transformers import AutoModel

    root = workdir / "chroma-default-ef"
    folder = root / ONNXMiniLM_L6_V2.EXTRACTED_FOLDER_NAME
    folder.mkdir(parents=True, exist_ok=True)
    source = _model_dir()
    for name in ("config.json", "special_tokens_map.json", "tokenizer_config.json", "tokenizer.json", "vocab.txt"):
        shutil.copy(source / name, folder / name)
    class TokenStates(torch.nn.Module):  # the transformer alone, like the graph Chroma downloads
        def __init__(self) -> None:
            super().__init__()
            self.encoder = AutoModel.from_pretrained(str(source), local_files_only=True).eval()

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            return self.encoder(input_ids=input_ids, attention_mask=attention_mask,
                                token_type_ids=token_type_ids).last_hidden_state

    names = ["input_ids", "attention_mask", "token_type_ids"]
    axes = {n: {0: "batch", 1: "tokens"} for n in names} | {"last_hidden_state": {0: "batch", 1: "tokens"}}
    with torch.no_grad():
        torch.onnx.export(TokenStates(), tuple(torch.ones(1, 8, dtype=torch.long) for _ in names), str(folder / "model.onnx"),
                          input_names=names, output_names=["last_hidden_state"], dynamic_axes=axes, opset_version=17,
                          dynamo=False)

    class LocalDefault(ONNXMiniLM_L6_V2):  # type: ignore[misc]
        DOWNLOAD_PATH = root

    function = LocalDefault(preferred_providers=["CPUExecutionProvider"])
    function(["warm-up"])
    return function


NATIVE: dict[str, tuple[str, Callable[[SharedEmbedder, Path], Any]]] = {
    "langchain-inmemory": ("sentence-transformers/torch (langchain_huggingface.HuggingFaceEmbeddings)", _native_langchain),
    "langchain-ensemble": ("sentence-transformers/torch (langchain_huggingface.HuggingFaceEmbeddings)", _native_langchain),
    "llamaindex-vector": ("sentence-transformers/torch (llama_index HuggingFaceEmbedding)", _native_llamaindex),
    "llamaindex-fusion": ("sentence-transformers/torch (llama_index HuggingFaceEmbedding)", _native_llamaindex),
    "chroma": ("onnxruntime, padded to 256 (chromadb DefaultEmbeddingFunction, local export)", _native_chroma),
    "mem0": ("sentence-transformers/torch (mem0 huggingface embedder)", _native_mem0),
}
NATIVE_NEEDS = {
    "langchain-inmemory": ("langchain_huggingface",), "langchain-ensemble": ("langchain_huggingface",),
    "llamaindex-vector": ("llama_index.embeddings.huggingface",),
    "llamaindex-fusion": ("llama_index.embeddings.huggingface",), "chroma": ("torch", "transformers"), "mem0": ("torch",),
}
_native_cache: dict[Callable[[SharedEmbedder, Path], Any], Any] = {}


def _missing(modules: Sequence[str]) -> str | None:
    import importlib.util

    for module in modules:
        try:
            if importlib.util.find_spec(module) is None:
                return module
        except (ImportError, ValueError):
            return module
    return None


@dataclass
class Running:
    """A system with every conversation ingested, ready for questions."""

    result: Result
    embedder: SharedEmbedder
    system: System | None = None
    retrievers: list[Retrieve] = field(default_factory=list)

    def fail(self, exc: Exception) -> None:
        traceback.print_exc()
        self.result.status = f"failed: {type(exc).__name__}: {exc}"[:200]
        self.close()

    def close(self) -> None:
        if self.system is not None:
            self.system.close()
            self.system = None


def start_system(
    name: str, convs: list[Conversation], embedder: SharedEmbedder, workdir: Path, *, native: bool = False,
    label: str | None = None,
) -> Running:
    """Ingest every conversation into system ``name`` (timed, document embedding left out).

    ``native``: a peer embeds queries with its integration's own embedding object (``NATIVE``),
    built before the clock starts, like the imports."""
    native = native and name in NATIVE
    run = Running(Result(label or name, embedder=NATIVE[name][0] if native else embedder.label), embedder)
    missing = _missing(NEEDS[name] + (NATIVE_NEEDS[name] if native else ()))
    if missing:
        run.result.status = f"skipped: {missing} is not installed ({BENCH})"
        return run
    try:
        import importlib

        for module in NEEDS[name]:  # import time is not ingest time
            importlib.import_module(module)
        own = None
        if native:  # model loading is not ingest time either
            build = NATIVE[name][1]
            if build not in _native_cache:
                _native_cache[build] = build(embedder, workdir.parent)
            own = _native_cache[build]
        before = embedder.live_document_s
        t0 = time.perf_counter()
        run.system = SYSTEMS[name](embedder, workdir, own)
        run.retrievers = [run.system.ingest(conv) for conv in convs]
        run.result.ingest_s = time.perf_counter() - t0 - (embedder.live_document_s - before)
    except Exception as exc:  # noqa: BLE001 -- a failing peer is reported, never dropped
        run.fail(exc)
    return run


def ask_all(runs: list[Running], convs: list[Conversation]) -> None:
    """Ask every question of every conversation to every running system, interleaved: question
    by question, each system in turn, starting with a different one each time, so a slow spell
    of a shared machine falls on every system alike instead of on whichever ran then."""
    n = 0
    for c, conv in enumerate(convs):
        for q in conv.questions:
            live = [r for r in runs if r.system is not None]
            for run in live[n % len(live):] + live[:n % len(live)] if live else []:
                try:
                    embedded = run.embedder.query_s
                    t1 = time.perf_counter()
                    ranked = run.retrievers[c](q.text)
                    run.result.latencies.append(time.perf_counter() - t1)
                    run.result.embedding.append(run.embedder.query_s - embedded)
                    run.result.add(q.category, ranked, q.evidence)
                except Exception as exc:  # noqa: BLE001 -- a failing peer is reported, never dropped
                    run.fail(exc)
            n += 1
    for run in runs:
        run.close()


def run_system(
    name: str, convs: list[Conversation], embedder: SharedEmbedder, workdir: Path, *, native: bool = False,
    label: str | None = None,
) -> Result:
    """One system alone: :func:`start_system`, then its questions (:func:`ask_all`)."""
    run = start_system(name, convs, embedder, workdir, native=native, label=label)
    ask_all([run], convs)
    return run.result


# ---------------------------------------------------------------- report


def _is_ours(res: Result) -> bool:
    return res.name.startswith("manowar-")


def report(results: list[Result], header: str) -> str:
    lines = [header, "", "Recall@k (%), turn level"]
    width = max([20] + [len(r.name) + 2 for r in results])
    head = f"{'system':<{width}}{'category':<13}{'n':>5}   {'R@5':>6} {'R@10':>6} {'R@25':>6}"
    lines += [head, "-" * len(head)]
    for res in results:
        if res.status != "ok":
            lines += [f"{res.name:<{width}}{res.status}", ""]
            continue
        for cat in CATEGORY_ORDER:
            if cat in res.recall:
                lines.append(f"{res.name if cat == 'ALL' else '':<{width}}{cat:<13}{len(res.recall[cat]):>5}   "
                             + " ".join(f"{res.r(cat, k):>6.1f}" for k in KS))
        lines.append("")
    ok = [r for r in results if r.status == "ok"]
    ours_all = [r for r in ok if r.name.startswith(OURS)]
    ours = min(ours_all, key=lambda r: r.p(0.5)) if ours_all else None  # the ratio columns use our fastest pre_turn
    lines += ["Ingest (document embedding excluded) and query latency (query embedding included)",
              f"{'system':<{width}}{'ingest s':>9}{'p50 ms':>9}{'p95 ms':>9}{'own p50':>9}{'R@5':>7}{'R@10':>7}{'R@25':>7}"
              + (f"{'ours p50/theirs':>17}{'ours R@10-theirs':>18}" if ours else "") + "   query embedder"]
    for res in results:
        if res.status != "ok":
            lines.append(f"{res.name:<{width}}{res.status}")
            continue
        row = (f"{res.name:<{width}}{res.ingest_s:>9.2f}{res.p(0.5):>9.2f}{res.p(0.95):>9.2f}{res.own_p(0.5):>9.2f}"
               + "".join(f"{res.r('ALL', k):>7.1f}" for k in KS))
        if ours:
            row += (f"{ours.p(0.5) / res.p(0.5):>17.2f}{ours.r() - res.r():>+18.1f}" if res is not ours
                    else f"{'(ours)':>17}{'':>18}")
        lines.append(row + f"   {res.embedder}")
    if ours:
        lines.append(f"(ratio columns against {ours.name}; own p50: latency minus the query embedding the "
                     "system asked for, NaN when it embedded queries itself)")
    peers = [r for r in ok if not _is_ours(r) and not r.name.startswith("numpy-scan")]  # the scan is a floor
    if peers and ours_all:
        fastest = min(peers, key=lambda r: r.p(0.5))
        best = max(peers, key=lambda r: r.r())
        lines += ["", (f"Target: our pre_turn p50 below the fastest peer's ({fastest.name}, "
                      f"{fastest.p(0.5):.2f} ms) and R@10 at least 10 points above the best peer's "
                      f"({best.name}, {best.r():.1f})")]
        for res in ours_all:
            met = res.p(0.5) < fastest.p(0.5) and res.r() - best.r() >= 10
            lines.append(f"  {res.name}: p50 {res.p(0.5):.2f} ms ({res.p(0.5) / fastest.p(0.5):.2f}x the fastest "
                         f"peer's), R@10 {res.r() - best.r():+.1f} points: {'met' if met else 'NOT met'}")
    lines += same_embedder_targets(ok)
    return "\n".join(lines)


def vs_chroma(ok: list[Result]) -> dict[str, float] | None:
    """Our figures against Chroma with the very same query embedder, or None when this run has
    no such pair: p50 ratios (target: pre_turn <= 1.00, search <= 0.80), pre_turn's R@10 gain
    in points (target >= 25), and each system's own cost p50 in ms (latency minus embedding)."""
    for chroma in (r for r in ok if r.name.split(" ")[0] == "chroma"):
        same = {r.name.split(" ")[0]: r for r in ok if r.embedder == chroma.embedder}
        pre, search, scan = same.get(OURS), same.get("manowar-search"), same.get("numpy-scan")
        if pre is None or search is None:
            continue
        figures = {"chroma_p50_ms": chroma.p(0.5), "pre_turn_over_chroma": pre.p(0.5) / chroma.p(0.5),
                   "search_over_chroma": search.p(0.5) / chroma.p(0.5), "r10_gain": pre.r() - chroma.r(),
                   "pre_turn_own_ms": pre.own_p(0.5), "search_own_ms": search.own_p(0.5),
                   "chroma_own_ms": chroma.own_p(0.5)}
        if scan is not None:
            figures["numpy_scan_own_ms"] = scan.own_p(0.5)
        return figures
    return None


def same_embedder_targets(ok: list[Result]) -> list[str]:
    """The report's lines for :func:`vs_chroma`."""
    f = vs_chroma(ok)
    if f is None:
        return []
    chroma = next(r for r in ok if r.name.split(" ")[0] == "chroma")

    def verdict(met: bool) -> str:
        return "met" if met else "NOT met"

    lines = ["", f"Same embedder as Chroma ({chroma.embedder}): Chroma p50 {f['chroma_p50_ms']:.2f} ms",
             f"  pre_turn p50 {f['pre_turn_over_chroma']:.2f}x Chroma's (target <= 1.00): "
             + verdict(f["pre_turn_over_chroma"] <= 1.0),
             f"  search p50 {f['search_over_chroma']:.2f}x Chroma's (target <= 0.80): "
             + verdict(f["search_over_chroma"] <= 0.8),
             f"  pre_turn R@10 {f['r10_gain']:+.1f} points (target >= +25): " + verdict(f["r10_gain"] >= 25),
             f"  own cost p50 (latency minus embedding): pre_turn {f['pre_turn_own_ms']:.2f} ms, search "
             f"{f['search_own_ms']:.2f} ms, Chroma {f['chroma_own_ms']:.2f} ms"
             + (f", numpy scan {f['numpy_scan_own_ms']:.2f} ms" if "numpy_scan_own_ms" in f else "")]
    return lines


def compare_embedders(specs: Sequence[str], questions: list[str]) -> tuple[str, dict[str, dict[str, Any]]]:
    """Single-query embedding latency per embedder, measured in turn on each question: the report
    and, per embedder, its model id and p50/p95 in milliseconds."""
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
    figures: dict[str, dict[str, Any]] = {}
    for spec, ts in times.items():
        ts = sorted(ts)
        lines.append(f"{spec:<12}{embedders[spec].model_id:<28}{1000 * statistics.median(ts):>9.2f}"  # type: ignore[union-attr]
                     f"{1000 * ts[int(0.95 * len(ts))]:>9.2f}{base / statistics.median(ts):>22.2f}")
        figures[spec] = {"model_id": embedders[spec].model_id, "p50_ms": 1000 * statistics.median(ts),  # type: ignore[union-attr]
                         "p95_ms": 1000 * ts[int(0.95 * len(ts))], "questions": len(ts)}
    return "\n".join(lines), figures


def _table(spec: str, texts: list[str], label: str, threads: int | None = None) -> tuple[SharedEmbedder, float]:
    """``spec``'s embedder with every document embedded once, and the seconds that took
    (``threads``: ONNX Runtime's intra-op threads for an ``onnx`` spec, else its default)."""
    inner = resolve_embedder(spec, threads=threads) if threads and spec.startswith("onnx") else resolve_embedder(spec)
    if inner is None:
        raise SystemExit("an embedder is required")
    t0 = time.perf_counter()
    table = dict(zip(texts, inner.embed(texts, input_type="document")))
    elapsed = time.perf_counter() - t0
    shared = SharedEmbedder(inner, table, label=f"{label} [{inner.model_id}]")
    shared.query("warm-up")
    return shared, elapsed


Job = tuple[str, str, SharedEmbedder, bool]  # system, row name, embedder, native


def plan(mode: str, names: Sequence[str], texts: list[str], spec: str,
         threads: int | None = None) -> tuple[list[Job], str]:
    """The systems to run in ``mode`` with their embedders, and a header line naming the embedders."""
    if mode == "shared":
        shared, took = _table(spec, texts, spec + (f" ({threads} intra-op thread{'s' * (threads > 1)})" if threads else ""),
                              threads)
        return ([(n, n, shared, False) for n in names],
                (f"mode shared: every system embeds with {shared.label} "
                f"({type(shared.inner).__name__}); documents embedded once in {took:.1f} s"))
    peers = [n for n in names if n in NATIVE]
    ours = [n for n in names if n not in NATIVE]
    jobs: list[Job] = []
    notes = []
    if peers:
        torch_docs, took = _table("local", texts, "sentence-transformers/torch")
        jobs += [(n, n, torch_docs, True) for n in peers]
        notes.append(f"peers' documents by sentence-transformers on torch in {took:.1f} s")
    for ours_spec in ("onnx", "onnx-int8"):
        if ours:
            table, took = _table(ours_spec, texts, ours_spec)
            jobs += [(n, f"{n} [{ours_spec}]", table, False) for n in ours]
            notes.append(f"ours with {ours_spec} [{table.inner.model_id}] in {took:.1f} s")
    return jobs, ("mode native: each peer embeds queries with its integration's default runtime for "
                  "all-MiniLM-L6-v2, ours with its fastest embedders; " + "; ".join(notes))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, required=True, help="LoCoMo JSON (locomo10.json or a subset)")
    parser.add_argument("--corrected-evidence", type=Path, help="audit JSON with correct_evidence per question")
    parser.add_argument("--mode", choices=["shared", "native", "both"], default="shared",
                        help="shared: one embedder for every system (--embedder); native: each peer's default "
                             "embedding runtime, ours on onnx and onnx-int8; both: one, then the other")
    parser.add_argument("--embedder", default="local",
                        help="shared mode: the embedder spec every system uses (local, onnx, onnx-int8)")
    parser.add_argument("--conversations", nargs="*", help="only these sample ids")
    parser.add_argument("--peers", nargs="*", choices=list(SYSTEMS), help="only these systems (default: all)")
    parser.add_argument("--json", type=Path, help="also write the results as JSON here")
    parser.add_argument("--onnx-threads", type=int, metavar="N",
                        help="shared mode with an onnx embedder: ONNX Runtime's intra-op threads (default: its own "
                             "choice, one per core); 1 leaves the other cores to the systems' own work")
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
    texts = list(dict.fromkeys(t for c in convs for t in c.memory_texts))
    n_q = sum(len(c.questions) for c in convs)
    data_line = f"LoCoMo: {len(convs)} conversations, {len(texts)} turns, {n_q} questions"
    print(data_line, flush=True)
    payload: dict[str, Any] = {}
    texts_out = []
    for mode in (["shared", "native"] if args.mode == "both" else [args.mode]):
        jobs, embed_line = plan(mode, args.peers or list(SYSTEMS), texts, args.embedder, args.onnx_threads)
        print(embed_line, flush=True)
        with tempfile.TemporaryDirectory(prefix="manowar-peers-") as tmp:
            runs = []
            for name, row, embedder, native in jobs:
                workdir = Path(tmp) / row.replace(" ", "_").replace("[", "").replace("]", "")
                workdir.mkdir()
                runs.append(start_system(name, convs, embedder, workdir, native=native, label=row))
                res = runs[-1].result
                print(f"  {row}: {res.status}" + (f", ingested in {res.ingest_s:.2f} s" if res.status == "ok" else ""),
                      flush=True)
            ask_all(runs, convs)
            results = [run.result for run in runs]
            for res in results:
                print(f"  {res.name}: {res.status}" + (f", R@10 {res.r():.1f}, p50 {res.p(0.5):.2f} ms"
                                                       if res.status == "ok" else ""), flush=True)
        _native_cache.clear()
        text = report(results, f"{data_line}\n{embed_line}")
        texts_out.append(text)
        print("\n" + text, flush=True)
        payload[mode] = {"embedders": embed_line, "systems": {
            r.name: {"status": r.status, "embedder": r.embedder, "ingest_s": r.ingest_s, "p50_ms": r.p(0.5),
                     "p95_ms": r.p(0.95), "n": len(r.latencies),
                     "own_p50_ms": None if r.own_p(0.5) != r.own_p(0.5) else r.own_p(0.5),
                     "embedding_p50_ms": _quantile_ms(r.embedding, 0.5) if any(r.embedding) else None,
                     "recall": {c: {f"R@{k}": r.r(c, k) for k in KS} for c in r.recall}}
            for r in results if r.status == "ok"},
            "skipped": {r.name: r.status for r in results if r.status != "ok"}}
        same = vs_chroma([r for r in results if r.status == "ok"])
        if same is not None:
            payload[mode]["vs_chroma"] = same
    if args.compare_embedders:
        text, figures = compare_embedders(args.compare_embedders, [q.text for c in convs for q in c.questions])
        print("\n" + text, flush=True)
        payload["query_embedding"] = figures
    if args.json:
        write_record(args.json, "peers", payload, None if argv is None else list(argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
