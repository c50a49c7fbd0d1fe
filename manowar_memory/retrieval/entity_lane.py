"""The entity lane (Comis ``associativeLane``): memories that share named entities with the
top hits, so a question about one part of a story also finds the parts that name the same
people, places and things without repeating the question's words.

Comis links entities at write time with an LLM review job. This lane needs no write-time
work and no model: it reads the entities of the seed hits with a small heuristic
(:func:`~manowar_memory.retrieval.entities.extract_entities`) and finds the memories that
mention them with one keyword query through the store. Two filters keep it from linking
everything to everything:

* entities the query itself names are left to the keyword lane;
* entities found in more than ``max_share`` of the keyword and vector hits, and in more
  than two of them (the user's own name, the agent's), are too common to say anything and
  are dropped.

A hit's score is ``tanh(0.5 × shared entities)`` (1 shared: 0.46, 2: 0.76, 3: 0.91); hits
are ordered by that count, then by the keyword relevance of the entity query.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from .._util import query_terms
from ..records import MemoryRecord
from ..stores.base import Hit, KeywordHits, MemoryQuery, Store
from .entities import canonical_key, extract_entities

__all__ = ["EntityLaneResult", "entity_lane"]


@dataclass
class EntityLaneResult:
    """The lane's hits (best first, scored), the entities it searched for, and how many of
    their terms the store's full-text search left out as too common
    (:class:`~manowar_memory.stores.base.KeywordHits`)."""

    hits: list[Hit] = field(default_factory=list)
    entities: list[str] = field(default_factory=list)
    dropped_common: list[str] = field(default_factory=list)
    pruned_terms: int = 0


def entity_lane(
    store: Store,
    query: MemoryQuery,
    text: str,
    seeds: Sequence[MemoryRecord],
    pool: Sequence[MemoryRecord],
    *,
    cap: int = 50,
    max_share: float = 0.2,
    max_entities: int = 12,
) -> EntityLaneResult:
    """Memories sharing entities with ``seeds`` (the top fused hits); ``pool`` is every
    keyword and vector hit, used to spot entities too common to link anything."""
    result = EntityLaneResult()
    if not seeds:
        return result
    names: dict[str, str] = {}
    for seed in seeds:
        for key, name in extract_entities(seed.content).items():
            names.setdefault(key, name)
    if not names:
        return result
    asked = set(extract_entities(text)) | {canonical_key(t) for t in query_terms(text)}
    names = {k: v for k, v in names.items() if k not in asked}
    lowered = [canonical_key(r.content) for r in pool]
    if lowered:
        limit = max(max_share * len(lowered), 2)  # a handful of hits is no evidence of "common"
        common = [k for k in names if sum(1 for doc in lowered if k in doc) > limit]
        result.dropped_common = [names[k] for k in common]
        for k in common:
            del names[k]
    keys = list(names)[:max_entities]
    if not keys:
        return result
    result.entities = [names[k] for k in keys]
    hits = store.keyword_search(query, " ".join(result.entities), cap)
    if isinstance(hits, KeywordHits):
        result.pruned_terms = hits.pruned_terms
    scored: list[tuple[int, int, Hit]] = []
    for rank, hit in enumerate(hits):
        content = canonical_key(hit.record.content)
        shared = sum(1 for k in keys if k in content)
        if shared:
            scored.append((shared, rank, Hit(hit.record, math.tanh(0.5 * shared))))
    scored.sort(key=lambda t: (-t[0], t[1]))
    result.hits = [h for _, _, h in scored]
    return result
