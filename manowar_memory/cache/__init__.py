"""Caches: the protocol, the in-process cache and (with the ``redis`` extra) Redis."""

from .base import Cache, InMemoryCache

__all__ = ["Cache", "InMemoryCache"]
