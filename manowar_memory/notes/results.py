"""The answers of the ``notes`` tools: one open result model per tool.

In a module of their own, below the notes service and the tool handlers: the service's self-test
names the tools (the keys of :data:`NOTES_TOOL_RESULTS`) without importing the handlers, which
import the service.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["NOTES_TOOL_RESULTS"]


# ---------------------------------------------------------------- results
# The notes service's answers name the fields below in every case and may carry more (hints,
# warnings, index details), so each model is open.


class _Result(BaseModel):
    model_config = ConfigDict(extra="allow")

    status: str = Field(description="ok, or degraded (health) when a check failed.")


class NoteChangeResult(_Result):
    """A note written, promoted or deprecated: the note as a card."""

    action: str = Field(description="stored, promoted, superseded or archived.")
    item: dict[str, Any] = Field(description="The note's card.")


class NoteCardsResult(_Result):
    """Cards found (``notes_search``) or the newest notes (``notes_recent``)."""

    scope: str
    result_count: int
    items: list[dict[str, Any]]


class NoteHydrateResult(_Result):
    """A card in full, with its neighbouring Markdown blocks."""

    mode: str
    scope: str
    source_kind: str = Field(description="memory_note or markdown.")
    item: dict[str, Any]
    neighbors_before: list[dict[str, Any]]
    neighbors_after: list[dict[str, Any]]


class NoteIndexResult(_Result):
    """What ``notes_index`` read, wrote and removed."""

    mode: str = Field(description="incremental or full.")
    roots: list[str]
    files_indexed: int


class NoteLinkResult(_Result):
    """A relation recorded."""

    action: str
    relation: dict[str, Any]
    scope: str


class NoteUnlinkResult(_Result):
    """Relations removed."""

    action: str
    changed: int = Field(description="Relations removed.")
    scope: str


class NoteRelatedResult(_Result):
    """An entity's relations."""

    uri: str
    relations: list[dict[str, Any]]
    scope: str


class NoteLintResult(_Result):
    """Issues found in the notes and the project's Markdown."""

    summary: dict[str, Any]
    issues: list[dict[str, Any]]
    truncated: bool


class NoteInfoResult(_Result):
    """The notes contract and state."""

    version: str
    current_project: dict[str, Any]


class NoteHealthResult(_Result):
    """Whether the notes' store and embedder answer."""

    version: str
    checks: dict[str, str]


class NoteScopesResult(_Result):
    """The notes scopes and how each is written."""

    scopes: list[dict[str, Any]]


class NoteSelfTestResult(_Result):
    """The notes tools and the scope rules they follow."""

    tool_count: int
    tools: list[str]


#: The result model of each tool of the ``notes`` group.
NOTES_TOOL_RESULTS: dict[str, type[BaseModel]] = {
    "notes_remember": NoteChangeResult, "notes_promote": NoteChangeResult, "notes_deprecate": NoteChangeResult,
    "notes_search": NoteCardsResult, "notes_hydrate": NoteHydrateResult, "notes_recent": NoteCardsResult,
    "notes_index": NoteIndexResult, "notes_link": NoteLinkResult, "notes_unlink": NoteUnlinkResult,
    "notes_related": NoteRelatedResult, "notes_lint": NoteLintResult, "notes_server_info": NoteInfoResult,
    "notes_health": NoteHealthResult, "notes_scopes": NoteScopesResult, "notes_self_test": NoteSelfTestResult,
}

