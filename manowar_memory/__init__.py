"""manowar_memory: layered long-term memory for LLM agents.

Six layers (working, scene, graph, patterns, archives, vectors), hybrid retrieval,
ranking (temporal decay, optional rerank that fails soft, MMR) and a prompt packer that
fits the best memories into a character budget and reports what it kept and dropped.

>>> from manowar_memory import MemoryEngine, Scope
>>> engine = MemoryEngine(store="sqlite:///:memory:", embedder="fake")
"""

from ._version import __version__
from .cache import Cache, InMemoryCache
from .candidates import Candidate
from .config import MemoryConfig, PackerConfig, RetrievalConfig
from .embeddings import BaseEmbedder, CachedEmbedder, Embedder, FakeEmbedder, resolve_embedder
from .engine import (
    FlushResult,
    ForgetReport,
    IngestItem,
    IngestReport,
    LayerSearchResult,
    MemoryEngine,
    PostTurnResult,
    PreTurnResult,
    ReembedReport,
    RememberResult,
)
from .errors import (
    ConfigurationError,
    ConflictError,
    EmbeddingError,
    ExtractionError,
    FilterError,
    InvalidConfigError,
    InvalidInputError,
    ManowarError,
    MissingDependencyError,
    NotFoundError,
    PartialIngestError,
    PinningError,
    RerankError,
    ResolverError,
    ScopeError,
    StoreError,
    StoreUnavailableError,
    ToolCallError,
)
from .extraction import ExtractedFact, FactExtractor, LLMExtractor, RuleBasedExtractor
from .lifecycle import SlotFact, parse_slots
from .packing import ContextUsage, Decision, PackedItem
from .records import (
    LAYERS,
    Archive,
    Job,
    Layer,
    MemoryRecord,
    Message,
    Pattern,
    Session,
    Skill,
    Transcript,
)
from .rerankers.base import Reranker, RerankResult
from .resolver import AsyncFactResolver, FactResolver, LLMResolver, ResolverDecision
from .retrieval.pipeline import RankContext, RankingStage, StageInsert
from .scope import Scope
from .scoped import RESERVED_METADATA_KEYS, ScopedMemory, SearchHits, pack_context
from .stores.base import MemoryQuery, Store
from .stores.sqlite import SQLiteStore
from .timeexpr import TimeRef, resolve_time
from .tools import BoundTool, ToolDefinition, memory_tools

__all__ = [
    "LAYERS",
    "RESERVED_METADATA_KEYS",
    "Archive",
    "AsyncFactResolver",
    "BaseEmbedder",
    "BoundTool",
    "Cache",
    "CachedEmbedder",
    "Candidate",
    "ConfigurationError",
    "ConflictError",
    "ContextUsage",
    "Decision",
    "Embedder",
    "EmbeddingError",
    "ExtractedFact",
    "ExtractionError",
    "FactExtractor",
    "FactResolver",
    "FakeEmbedder",
    "FilterError",
    "FlushResult",
    "ForgetReport",
    "InMemoryCache",
    "IngestItem",
    "IngestReport",
    "InvalidConfigError",
    "InvalidInputError",
    "Job",
    "LLMExtractor",
    "LLMResolver",
    "Layer",
    "LayerSearchResult",
    "ManowarError",
    "MemoryConfig",
    "MemoryEngine",
    "MemoryQuery",
    "MemoryRecord",
    "Message",
    "MissingDependencyError",
    "NotFoundError",
    "PackedItem",
    "PackerConfig",
    "PartialIngestError",
    "Pattern",
    "PinningError",
    "PostTurnResult",
    "PreTurnResult",
    "RankContext",
    "RankingStage",
    "ReembedReport",
    "RememberResult",
    "RerankError",
    "RerankResult",
    "Reranker",
    "ResolverDecision",
    "ResolverError",
    "RetrievalConfig",
    "RuleBasedExtractor",
    "SQLiteStore",
    "Scope",
    "ScopeError",
    "ScopedMemory",
    "SearchHits",
    "Session",
    "Skill",
    "SlotFact",
    "StageInsert",
    "Store",
    "StoreError",
    "StoreUnavailableError",
    "TimeRef",
    "ToolCallError",
    "ToolDefinition",
    "Transcript",
    "__version__",
    "memory_tools",
    "pack_context",
    "parse_slots",
    "resolve_embedder",
    "resolve_time",
]
