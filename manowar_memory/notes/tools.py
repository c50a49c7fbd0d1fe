"""The ``notes`` group of the tool catalog: argument models and handlers over a scope's project notes.

The handlers act on ``memory.notes()``: the bound scope's agent and user, in the project of the
server's working directory (or ``MANOWAR_PROJECT_*``). ``namespace`` is the notes scope
(``project``, ``global`` or ``hybrid``). A tool's note always has provenance ``agent``: only the
application may record a note as ``human-explicit`` (through :class:`ProjectNotes`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from .results import NOTES_TOOL_RESULTS
from .service import ProjectNotes

__all__ = ["NOTES_TOOL_RESULTS", "NOTES_TOOL_SPECS"]

Kind = Literal["lesson", "decision", "pattern", "handoff"]
Tier = Literal["durable", "episodic", "reference"]
Namespace = Literal["project", "global", "hybrid"]
WriteNamespace = Literal["project", "global"]


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


class NoteRememberArgs(_Args):
    """Arguments of ``notes_remember``."""

    title: str = Field(description="A short title for the note.")
    content: str = Field(description="The note: what was learned, decided or handed off.")
    kind: Kind = Field("lesson", description="lesson, decision, pattern or handoff.")
    tags: list[str] | None = Field(None, description="2-3 lowercase tags.")
    source_refs: list[str] | None = Field(
        None, description="Where it comes from: file://path, issue://KEY, task://KEY, note://id or https:// URLs.")
    tier: Tier | None = Field(None, description="durable, episodic or reference (default: episodic for a handoff).")


class NoteIdArgs(_Args):
    """Arguments of ``notes_promote``."""

    note_id: str = Field(description="The project note to copy to the global notes.")


class NoteDeprecateArgs(_Args):
    """Arguments of ``notes_deprecate``."""

    note_id: str = Field(description="The note to take out of retrieval (kept as history).")
    namespace: WriteNamespace = Field("project", description="Where the note is: project or global.")
    replacement_note_id: str | None = Field(None, description="The note that replaces it (marks it superseded).")
    replacement_namespace: WriteNamespace | None = Field(None, description="Where the replacement is.")
    reason: str | None = Field(None, description="Why it is deprecated.")


class NoteSearchArgs(_Args):
    """Arguments of ``notes_search``."""

    query: str = Field(description="What to look for, in natural language.")
    namespace: Namespace = Field("hybrid", description="project, global, or hybrid (both, project first).")
    limit: int = Field(5, ge=1, le=20, description="Cards to return.")
    tier_filter: list[Tier] | None = Field(None, description="Tiers to include (default: durable and reference).")
    source_filter: Literal["notes", "markdown", "all"] | None = Field(None, description="Only notes or Markdown.")


class NoteHydrateArgs(_Args):
    """Arguments of ``notes_hydrate``."""

    item_id: str = Field(description="A card's item_id.")
    namespace: WriteNamespace = Field("project", description="The card's scope: project or global.")
    window: Literal["default", "related"] = Field(
        "default", description="Neighbouring blocks: 1 each side (default), or 2 (related).")


class NoteRecentArgs(_Args):
    """Arguments of ``notes_recent``."""

    namespace: Namespace = Field("project", description="project, global or hybrid.")
    limit: int = Field(10, ge=1, le=20, description="Notes to return.")
    tier_filter: list[Tier] | None = Field(None, description="Tiers to include (default: all).")


class NoteIndexArgs(_Args):
    """Arguments of ``notes_index``."""

    paths: list[str] | None = Field(None, description="Files or folders inside the project (default: the "
                                    "registered ones).")
    full: bool = Field(False, description="Re-read every file (and drop roots not listed) instead of skipping "
                       "unchanged files.")


class NoteLinkArgs(_Args):
    """Arguments of ``notes_link``."""

    source_uri: str = Field(description="note://id, file://path, issue://KEY, task://KEY or an https URL.")
    target_uri: str = Field(description="The entity it relates to.")
    relation_type: str = Field("related_to", description="How, e.g. references, implements, supersedes.")
    namespace: WriteNamespace = Field("project", description="project or global.")


class NoteUnlinkArgs(_Args):
    """Arguments of ``notes_unlink``."""

    source_uri: str = Field(description="The relation's source URI.")
    target_uri: str = Field(description="The relation's target URI.")
    relation_type: str | None = Field(None, description="Only this type (default: every relation between them).")
    namespace: WriteNamespace = Field("project", description="project or global.")


class NoteRelatedArgs(_Args):
    """Arguments of ``notes_related``."""

    uri: str = Field(description="The entity URI.")
    relation_type: str | None = Field(None, description="Only this type.")
    namespace: Namespace = Field("hybrid", description="project, global or hybrid.")


class NoteLintArgs(_Args):
    """Arguments of ``notes_lint``."""

    paths: list[str] | None = Field(None, description="Files or folders inside the project (default: the "
                                    "registered ones).")
    max_issues: int = Field(200, ge=1, le=2000, description="Issues to list at most.")


class NoArgs(_Args):
    """No arguments."""


class NotesOwner(Protocol):
    """What a handler needs of the scoped surface (:class:`manowar_memory.scoped.ScopedMemory`):
    the bound scope's project notes."""

    def notes(self, project: Any = None) -> ProjectNotes:
        """The scope's project notes."""


def _notes(m: NotesOwner) -> ProjectNotes:
    notes: ProjectNotes = m.notes()
    return notes


def _remember(m: NotesOwner, a: NoteRememberArgs) -> dict[str, Any]:
    return _notes(m).remember_note(a.title, a.content, a.kind, tags=a.tags, source_refs=a.source_refs, tier=a.tier)


def _promote(m: NotesOwner, a: NoteIdArgs) -> dict[str, Any]:
    return _notes(m).promote_note(a.note_id)


def _deprecate(m: NotesOwner, a: NoteDeprecateArgs) -> dict[str, Any]:
    return _notes(m).deprecate_note(a.note_id, scope=a.namespace, replacement_note_id=a.replacement_note_id,
                                    replacement_scope=a.replacement_namespace, reason=a.reason)


def _search(m: NotesOwner, a: NoteSearchArgs) -> dict[str, Any]:
    return _notes(m).semantic_search(a.query, a.namespace, a.limit, a.tier_filter, a.source_filter)


def _hydrate(m: NotesOwner, a: NoteHydrateArgs) -> dict[str, Any]:
    return _notes(m).hydrate(a.item_id, a.namespace, a.window)


def _recent(m: NotesOwner, a: NoteRecentArgs) -> dict[str, Any]:
    return _notes(m).recent_context(a.namespace, a.limit, a.tier_filter)


def _index(m: NotesOwner, a: NoteIndexArgs) -> dict[str, Any]:
    return _notes(m).index_paths(a.paths, "full" if a.full else "incremental")


def _link(m: NotesOwner, a: NoteLinkArgs) -> dict[str, Any]:
    return _notes(m).link_entities(a.source_uri, a.target_uri, a.relation_type, a.namespace)


def _unlink(m: NotesOwner, a: NoteUnlinkArgs) -> dict[str, Any]:
    return _notes(m).unlink_entities(a.source_uri, a.target_uri, a.relation_type, a.namespace)


def _related(m: NotesOwner, a: NoteRelatedArgs) -> dict[str, Any]:
    return _notes(m).get_related_entities(a.uri, a.relation_type, a.namespace)


def _lint(m: NotesOwner, a: NoteLintArgs) -> dict[str, Any]:
    return _notes(m).lint_knowledge_base(a.paths, a.max_issues)


def _info(m: NotesOwner, a: NoArgs) -> dict[str, Any]:
    return _notes(m).server_info()


def _health(m: NotesOwner, a: NoArgs) -> dict[str, Any]:
    return _notes(m).health()


def _scopes(m: NotesOwner, a: NoArgs) -> dict[str, Any]:
    return _notes(m).list_scopes()


def _self_test(m: NotesOwner, a: NoArgs) -> dict[str, Any]:
    return _notes(m).self_test()


#: (name, arguments model, handler, writes, description) of each tool of the ``notes`` group.
NOTES_TOOL_SPECS: tuple[tuple[str, type[BaseModel], Callable[..., dict[str, Any]], bool, str], ...] = (
    ("notes_remember", NoteRememberArgs, _remember, True,
     ("Save a note about this repository (a lesson, decision, pattern or handoff) to the project's notes. "
      "Reports similar notes it may supersede or conflict with; never changes them.")),
    ("notes_promote", NoteIdArgs, _promote, True,
     "Copy a project note to the global notes shared by every project (the only way to write global notes)."),
    ("notes_deprecate", NoteDeprecateArgs, _deprecate, True,
     "Archive a note, or mark it superseded by its replacement; it leaves retrieval but its history is kept."),
    ("notes_search", NoteSearchArgs, _search, False,
     ("Search the project's notes and indexed Markdown (and the global notes) and return compact cards with a "
      "confidence state. Hydrate a card before acting on a low or ambiguous result.")),
    ("notes_hydrate", NoteHydrateArgs, _hydrate, False,
     "Read a card in full: a note, or a Markdown block with its neighbouring blocks in the same file."),
    ("notes_recent", NoteRecentArgs, _recent, False,
     "The newest notes (handoffs included), without a query: use at the start of a session."),
    ("notes_index", NoteIndexArgs, _index, True,
     "Index the project's Markdown files (incrementally) so notes_search finds them."),
    ("notes_link", NoteLinkArgs, _link, True, "Record a relation between two entities (notes, files, issues, tasks, URLs)."),
    ("notes_unlink", NoteUnlinkArgs, _unlink, True, "Remove a relation between two entities."),
    ("notes_related", NoteRelatedArgs, _related, False, "The relations of an entity (as source or target)."),
    ("notes_lint", NoteLintArgs, _lint, False,
     ("Check the project's Markdown and notes: broken links, orphan documents, duplicate titles, stale handoffs "
      "and near-duplicate notes.")),
    ("notes_server_info", NoArgs, _info, False,
     ("The notes contract and state: current project, scopes and modes, counts per scope, index freshness and "
      "orphaned projects.")),
    ("notes_health", NoArgs, _health, False, "Whether the notes' store and embedder answer, and the version."),
    ("notes_scopes", NoArgs, _scopes, False, "The notes scopes (project, global, hybrid) and how each is written."),
    ("notes_self_test", NoArgs, _self_test, False, "The notes tools and the scope rules they follow."),
)
