"""Errors raised by the LlamaIndex adapters.

Both derive from the engine's hierarchy, so ``except ManowarError`` still catches them::

    ManowarError
    ├── InvalidInputError
    │   └── FilterError
    │       └── UnsupportedFilterError      a LlamaIndex filter the engine cannot express
    └── ConfigurationError
        └── EmbeddingModelMismatchError     LlamaIndex vectors from another model than the engine's
"""

from __future__ import annotations

from manowar_memory.errors import ConfigurationError, FilterError

__all__ = ["EmbeddingModelMismatchError", "UnsupportedFilterError"]


class UnsupportedFilterError(FilterError):
    """A LlamaIndex ``MetadataFilters`` uses an operator or condition the engine's allowlisted
    equality filters cannot express (only EQ and IN, combined with AND, are supported)."""


class EmbeddingModelMismatchError(ConfigurationError):
    """Vectors computed by a LlamaIndex embedding model are not in the engine's vector space.

    The engine embeds what it stores and searches with its own embedder; vectors of two
    models must never be mixed, so a mismatch is an error rather than a silent re-embed.
    """
