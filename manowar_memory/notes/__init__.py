"""Working memory for coding agents: notes tied to the repository they were written in, a small
curated global set reached only by promotion, indexed Markdown, compact result cards and bounded
hydration, all stored as memory rows of the engine (see :mod:`manowar_memory.notes.service`).

>>> notes = engine.notes()                      # the project of the working directory
>>> notes.remember_note("Run tests with pytest -q", "…", kind="lesson", tags=["tests"])
>>> notes.index_paths(["docs"])
>>> cards = notes.semantic_search("how do I run the tests")   # hybrid: project + global
>>> notes.hydrate(cards["items"][0]["item_id"], scope=cards["items"][0]["scope"])
"""

from .cards import compressed_summary, key_points
from .identity import ProjectIdentity, check_project_id, normalize_remote, resolve_project
from .markdown import Block, parse_markdown
from .service import DEFAULT_AGENT, NOTE_KINDS, TIERS, GlobalWriteError, ProjectNotes, check_uri

__all__ = [
    "DEFAULT_AGENT",
    "NOTE_KINDS",
    "TIERS",
    "Block",
    "GlobalWriteError",
    "ProjectIdentity",
    "ProjectNotes",
    "check_project_id",
    "check_uri",
    "compressed_summary",
    "key_points",
    "normalize_remote",
    "parse_markdown",
    "resolve_project",
]
