"""The result models of :class:`~manowar_memory.engine.MemoryEngine`'s methods."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import AliasChoices, BaseModel, ConfigDict, Field

from ..candidates import Candidate
from ..retrieval.pipeline import RankOptions


class LayerSearchResult(BaseModel):
    """Raw hits per layer, before packing."""

    model_config = {"arbitrary_types_allowed": True}

    query: str
    layers: dict[str, list[Candidate]]
    totals: dict[str, int]
    lanes: dict[str, dict[str, Any]] = Field(default_factory=dict)
    degradations: list[str] = Field(default_factory=list)
    timings_ms: dict[str, float] = Field(
        default_factory=dict, description="Milliseconds per step: embed, each layer's lanes and ranking stages.")


@dataclasses.dataclass(frozen=True)
class SearchOptions:
    """What one layered search is asked for: the layers (None: all six), extra filters, hits
    per layer (None: ``PackerConfig.limit``) and the optional ranking stages."""

    layers: Sequence[str] | None = None
    filters: Mapping[str, Any] | None = None
    limit: int | None = None
    rank: RankOptions = dataclasses.field(default_factory=RankOptions)


@dataclasses.dataclass
class SearchOutcome:
    """A layered search's candidates per layer, counts, lane reports, degradations and timings."""

    layers: dict[str, list[Candidate]]
    totals: dict[str, int]
    lanes: dict[str, dict[str, Any]]
    degradations: list[str]
    timings_ms: dict[str, float]


class FlushResult(BaseModel):
    """Background work finished by ``flush``."""

    completed: int
    failed: int
    errors: list[str]
    facts_indexed: int = 0
    facts_reinforced: int = 0
    facts_superseded: int = 0
    notes: list[str] = Field(default_factory=list, description=(
        "Possible contradictions left alone (uncertain); with a resolver, also what it found already known or "
        "could not decide (see manowar_memory.resolver)."))


class IngestItem(BaseModel):
    """One memory row for :meth:`MemoryEngine.ingest`.

    ``key`` (also accepted as ``id``) is the item's idempotency key: an item with a key is
    stored once per scope (agent, user, mode, HAI) however many times it is ingested, so a
    failed or interrupted ingest can simply be run again."""

    model_config = ConfigDict(extra="forbid")

    key: str | None = Field(None, validation_alias=AliasChoices("key", "id"),
                            description="Idempotency key: the item is stored once per scope.")
    content: str
    source: str = "knowledge"
    created_at: int | None = None
    thread_id: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    context: str | None = Field(
        None, description="Text to find the row by but never show (default: the previous message of its thread).")
    ttl: Any = Field(None, description="Time to live: seconds or a timedelta, from created_at (overrides ingest's ttl).")
    expires_at: Any = Field(None, description="Absolute expiry: epoch ms or an aware datetime (overrides ingest's).")


#: the keys an ingest item may have (``id`` is an alias of ``key``)
_INGEST_KEYS = frozenset({*IngestItem.model_fields, "id"})


class IngestReport(BaseModel):
    """What :meth:`MemoryEngine.ingest_report` did: the row id of every item in order, how
    many rows it stored and which keys were already stored (by an earlier run)."""

    ids: list[str]
    inserted: int
    already_stored: list[str] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list, description=(
        "Possible contradictions left alone (uncertain) among the ingested facts; with a resolver, also what it "
        "found already known or could not decide (see manowar_memory.resolver)."))


@dataclasses.dataclass(frozen=True)
class ReembedReport:
    """What :meth:`MemoryEngine.reembed` did: the rows it read (``scanned``), gave a vector of
    ``model_id`` (``embedded``; in a dry run, would give), found embedded by that model already
    (``already_embedded``) and left alone as superseded, deleted or archived (``skipped_inactive``)."""

    model_id: str
    scanned: int
    embedded: int
    already_embedded: int
    skipped_inactive: int
    batches: int
    dry_run: bool = False
