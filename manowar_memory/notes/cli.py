"""``manowar notes``: project notes from the command line (remember, promote, deprecate, search,
hydrate, index, recent, lint, info). Every command prints its result as JSON."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from ..engine import MemoryEngine
from ..errors import ManowarError
from .service import DEFAULT_AGENT, NOTE_KINDS, TIERS, ProjectNotes

__all__ = ["notes"]

_EMBEDDER_HELP = ("Embedder: 'auto' (the best one installed: 'onnx', then 'local'), 'onnx', 'local' (MiniLM, "
                  "offline), 'voyage[:model]', 'fake', or 'none' for keyword-only; use the same one to index and "
                  "to search (default $MANOWAR_EMBEDDER, else auto).")


def _open(ctx: click.Context) -> ProjectNotes:
    o = ctx.obj
    engine = MemoryEngine(store=o["store"], embedder=None if o["embedder"] == "none" else o["embedder"])
    ctx.call_on_close(engine.close)
    return ProjectNotes(engine, project=o["project"], agent=o["agent"], user=o["user"])


def _run(ctx: click.Context, fn: Any) -> None:
    try:
        result = fn(_open(ctx))
    except ManowarError as exc:
        raise click.ClickException(f"{type(exc).__name__}: {exc}") from None
    click.echo(json.dumps(result, indent=2, ensure_ascii=False, sort_keys=True))


@click.group()
@click.option("--project", type=click.Path(exists=True, file_okay=False, path_type=Path), default=None,
              help="A directory of the project (default: the working directory; MANOWAR_PROJECT_* override).")
@click.option("--agent", default=DEFAULT_AGENT, show_default=True, help="Agent whose notes these are.")
@click.option("--user", default=None, help="User id.")
@click.option("--store", default=None, help="Store URL (default: the SQLite file under $MANOWAR_HOME).")
@click.option("--embedder", envvar="MANOWAR_EMBEDDER", default="auto", help=_EMBEDDER_HELP)
@click.pass_context
def notes(ctx: click.Context, project: Path | None, agent: str, user: str | None, store: str | None,
          embedder: str) -> None:
    """Project notes for coding agents: scoped notes, indexed Markdown, compact cards and hydration."""
    ctx.obj = {"project": project, "agent": agent, "user": user, "store": store, "embedder": embedder}


@notes.command()
@click.argument("title")
@click.argument("content")
@click.option("--kind", type=click.Choice(NOTE_KINDS), default="lesson", show_default=True)
@click.option("--tag", "tags", multiple=True, help="A tag (repeatable).")
@click.option("--ref", "refs", multiple=True, help="A source reference, e.g. file://README.md (repeatable).")
@click.option("--tier", type=click.Choice(TIERS), default=None, help="Default: episodic for a handoff, else durable.")
@click.option("--human", is_flag=True, help="Record the note as written by a human (ranks a little higher).")
@click.option("--scope", type=click.Choice(["project", "global"]), default="project", show_default=True,
              help="global is refused: promote a project note instead.")
@click.pass_context
def remember(ctx: click.Context, title: str, content: str, kind: str, tags: tuple[str, ...], refs: tuple[str, ...],
             tier: str | None, human: bool, scope: str) -> None:
    """Store a project note."""
    _run(ctx, lambda n: n.remember_note(title, content, kind, tags=list(tags), source_refs=list(refs), tier=tier,
                                        provenance="human-explicit" if human else "agent", scope=scope))


@notes.command()
@click.argument("note_id")
@click.pass_context
def promote(ctx: click.Context, note_id: str) -> None:
    """Copy a project note to the global notes (with its provenance)."""
    _run(ctx, lambda n: n.promote_note(note_id))


@notes.command()
@click.argument("note_id")
@click.option("--scope", type=click.Choice(["project", "global"]), default="project", show_default=True)
@click.option("--replacement", default=None, help="The note that supersedes it.")
@click.option("--replacement-scope", type=click.Choice(["project", "global"]), default=None)
@click.option("--reason", default=None)
@click.pass_context
def deprecate(ctx: click.Context, note_id: str, scope: str, replacement: str | None, replacement_scope: str | None,
              reason: str | None) -> None:
    """Archive a note, or mark it superseded (kept as history, out of retrieval)."""
    _run(ctx, lambda n: n.deprecate_note(note_id, scope=scope, replacement_note_id=replacement,
                                         replacement_scope=replacement_scope, reason=reason))


@notes.command()
@click.argument("query")
@click.option("--scope", type=click.Choice(["project", "global", "hybrid"]), default="hybrid", show_default=True)
@click.option("--limit", default=5, show_default=True, type=click.IntRange(1, 20))
@click.option("--tier", "tiers", multiple=True, type=click.Choice(TIERS), help="Tiers (default: durable, reference).")
@click.option("--source", type=click.Choice(["notes", "markdown", "all"]), default=None)
@click.pass_context
def search(ctx: click.Context, query: str, scope: str, limit: int, tiers: tuple[str, ...], source: str | None) -> None:
    """Compact cards for a query."""
    _run(ctx, lambda n: n.semantic_search(query, scope, limit, list(tiers) or None, source))


@notes.command()
@click.argument("item_id")
@click.option("--scope", type=click.Choice(["project", "global"]), default="project", show_default=True)
@click.option("--mode", type=click.Choice(["default", "related"]), default="default", show_default=True)
@click.pass_context
def hydrate(ctx: click.Context, item_id: str, scope: str, mode: str) -> None:
    """A card in full: a note, or a Markdown block with its neighbours."""
    _run(ctx, lambda n: n.hydrate(item_id, scope, mode))


@notes.command()
@click.argument("paths", nargs=-1)
@click.option("--full", is_flag=True, help="Re-read every file; with paths, drop the roots not listed.")
@click.pass_context
def index(ctx: click.Context, paths: tuple[str, ...], full: bool) -> None:
    """Index Markdown under PATHS (default: the roots indexed before)."""

    def run(n: ProjectNotes) -> Any:
        if not paths and not n.roots():
            raise click.UsageError(
                "nothing is indexed in this project yet: pass the Markdown files or directories to index, "
                "e.g. `manowar notes index docs README.md` (paths relative to the project root); later runs "
                "without paths re-index them", ctx)
        return n.index_paths(list(paths) or None, "full" if full else "incremental")

    _run(ctx, run)


@notes.command()
@click.option("--scope", type=click.Choice(["project", "global", "hybrid"]), default="project", show_default=True)
@click.option("--limit", default=10, show_default=True, type=click.IntRange(1, 20))
@click.pass_context
def recent(ctx: click.Context, scope: str, limit: int) -> None:
    """The newest notes, handoffs included."""
    _run(ctx, lambda n: n.recent_context(scope, limit))


@notes.command()
@click.argument("paths", nargs=-1)
@click.option("--max-issues", default=200, show_default=True, type=click.IntRange(1, 100_000))
@click.pass_context
def lint(ctx: click.Context, paths: tuple[str, ...], max_issues: int) -> None:
    """Check the Markdown under PATHS (default: the registered roots) and the notes."""
    _run(ctx, lambda n: n.lint_knowledge_base(list(paths) or None, max_issues))


@notes.command()
@click.pass_context
def info(ctx: click.Context) -> None:
    """The current project, counts per scope, index freshness and health."""
    _run(ctx, lambda n: {**n.server_info(), "health": n.health()})
