"""The cache-fences role of the MongoDB store (:class:`~manowar_memory.stores.base.CacheFenceStore`)."""

from __future__ import annotations

from collections.abc import Sequence

from .. import _mql_schema
from .connection import (
    MongoConnection,
)

__all__ = ["MongoCacheFences"]


class MongoCacheFences(MongoConnection):
    """Cache fences: counters that invalidate cached reads."""

    # -- cache fences (cache/namespace.py) --
    def cache_fences(self, keys: Sequence[str]) -> dict[str, int]:
        keys = list(dict.fromkeys(keys))
        with self._errors("read cache fences"):
            found = {d["_id"]: int(d.get("epoch", 0)) for d in self.db[_mql_schema.CACHE_FENCE].find({"_id": {"$in": keys}})}
        return {k: found.get(k, 0) for k in keys}

    def bump_cache_fence(self, key: str) -> int:
        from pymongo import ReturnDocument

        with self._errors("bump a cache fence"):
            doc = self.db[_mql_schema.CACHE_FENCE].find_one_and_update(
                {"_id": key}, {"$inc": {"epoch": 1}}, upsert=True, return_document=ReturnDocument.AFTER)
        return int(doc["epoch"])
