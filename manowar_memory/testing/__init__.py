"""Test helpers for manowar_memory users and backends.

* :class:`StoreConformance` (``manowar_memory.testing.conformance``): the suite every
  :class:`~manowar_memory.stores.base.Store` must pass unchanged. Needs pytest.
* :class:`QueryCachedEngine`: a :class:`~manowar_memory.engine.MemoryEngine` with the layer
  query cache forced on, even over an in-process cache.
* ``manowar_memory.testing.provider_servers``: local HTTP servers that speak the embedding
  and rerank providers' REST shapes.

``StoreConformance`` is imported lazily so that importing this package does not need pytest.
"""

from __future__ import annotations

from typing import Any

from ..cache.namespace import QUERY_TTL_SECONDS
from ..config import MemoryConfig
from ..engine import MemoryEngine

__all__ = ["QueryCachedEngine", "StoreConformance"]


class QueryCachedEngine(MemoryEngine):
    """A MemoryEngine with the layer query cache forced on, whatever the cache backend
    (the engine turns it on by itself only for a shared cache such as Redis)."""

    def __init__(self, *args: Any, query_cache_ttl_s: float = QUERY_TTL_SECONDS, **kwargs: Any) -> None:
        config = kwargs.pop("config", None) or MemoryConfig()
        config = config.model_copy(update={"query_cache": True, "query_cache_ttl_s": query_cache_ttl_s})
        super().__init__(*args, config=config, **kwargs)


def __getattr__(name: str) -> Any:
    if name == "StoreConformance":  # pytest is imported only when the suite is asked for
        from .conformance import StoreConformance

        return StoreConformance
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
