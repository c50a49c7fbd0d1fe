"""What the engine's main calls return: ``remember``, ``post_turn``, ``pre_turn`` and ``forget``.

In a module of their own, below both the engine and the scoped surface, so that each can name
them; :mod:`manowar_memory.engine` re-exports them (``from manowar_memory.engine import
PreTurnResult`` keeps working).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from .packing import ContextUsage, Decision, PackedItem

__all__ = ["ForgetReport", "PostTurnResult", "PreTurnResult", "RememberResult"]


class RememberResult(BaseModel):
    """What ``remember`` stored."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)  # camelCase over JSON (REST)

    id: str
    fact_type: str
    fact_hash: str
    deduplicated: bool = Field(False, description="True when an identical fact existed and was reinforced instead.")
    superseded: list[str] = Field(
        default_factory=list, description="Rows this fact replaced (same subject and attribute, another value); "
        "its own id when a fact observed later already replaced it. See manowar_memory.lifecycle.")
    notes: list[str] = Field(default_factory=list, description=(
        "Possible contradictions left alone (uncertain); with a resolver, also what it found already known or "
        "could not decide (see manowar_memory.resolver)."))


class PostTurnResult(BaseModel):
    """What ``post_turn`` stored in-band and what it queued."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)  # camelCase over JSON (REST)

    session_id: str
    thread_id: str
    turn_id: str
    vector_id: str | None
    stored: dict[str, bool]
    queued: dict[str, bool]
    degradations: list[str] = Field(default_factory=list)
    created: bool = Field(True, description=(
        "False when this turn id was already stored (a retry): nothing was written, and vector_id is the "
        "row the first call stored."))
    seq: int | None = Field(None, description="The turn's place in its transcript (1, 2, ...), in commit order.")


class ForgetReport(BaseModel):
    """What ``forget`` erased: rows of each kind the scope owned, its rows cut out of the agent's
    shared archives, and the pinned copies of those archives (public IPFS copies that still hold
    the rows until the application unpins them at its provider)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)  # camelCase over JSON (REST)

    memories: int = Field(description="memory rows (facts, knowledge, session rows, archive rows) deleted")
    transcripts: int = Field(description="transcripts deleted, with their chunks")
    sessions: int = Field(description="working sessions deleted")
    patterns: int = Field(description="patterns built from the scope's transcripts deleted")
    archives: int = Field(description="the scope's own archives deleted")
    turns: int = Field(0, description="entries of the turn ledger (the record of which turn ids were stored) deleted")
    archives_rewritten: int = Field(description="the agent's archives rewritten without the scope's rows")
    archived_rows_removed: int = Field(description="rows cut out of those archives")
    pinned_copies: list[dict[str, Any]] = Field(
        default_factory=list, description="archives that had been pinned to IPFS: {archiveId, ipfsHash, unpinned, "
        "reason?}; the engine unpins them with the application's Pinata credentials, but a public copy others "
        "fetched or pinned is beyond its reach")

    @property
    def total(self) -> int:
        """Rows and documents removed in all."""
        return (self.memories + self.transcripts + self.sessions + self.patterns + self.archives
                + self.archived_rows_removed)


class PreTurnResult(BaseModel):
    """The packed memory context of a turn, with full accounting."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)  # camelCase over JSON (REST)

    prompt: str
    items: list[PackedItem]
    totals: dict[str, int]
    omitted: dict[str, int]
    context_usage: ContextUsage
    decisions: list[Decision] | None = None
    degradations: list[str] = Field(default_factory=list)
    lanes: dict[str, dict[str, Any]] = Field(default_factory=dict)
    timings_ms: dict[str, float] = Field(default_factory=dict)
    context_id: str
