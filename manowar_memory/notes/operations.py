"""Operations on the notes of a project: scopes, self test, health, server info and the knowledge-base lint.

A part of :class:`~manowar_memory.notes.service.ProjectNotes`.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .._version import __version__
from ..errors import InvalidInputError
from ..records import MemoryRecord
from . import cards, lint
from .base import _SCAN, MARKDOWN_FORMAT, _now_iso
from .indexing import NotesIndexing
from .markdown import discover
from .results import NOTES_TOOL_RESULTS

__all__ = ["NotesOperations"]


class NotesOperations(NotesIndexing):
    """Operations on the notes of a project: scopes, self test, health, server info and the knowledge-base lint."""

    def list_scopes(self) -> dict[str, Any]:
        """The three scopes, what each reads and how each is written."""
        return {"status": "ok", "default_write_scope": "project", "default_read_mode": "hybrid", "scopes": [
            {"scope": "project", "writes": "default", "reads": "this project's notes and indexed Markdown",
             "project_id": self.project.id, "project_name": self.project.name},
            {"scope": "global", "writes": "promotion_only", "reads": "notes promoted from any project"},
            {"scope": "hybrid", "writes": "read_only", "reads": "project and global, the project first when "
             "relevance is close (+0.15)"},
        ]}

    def self_test(self) -> dict[str, Any]:
        """The notes tool contract: tool names and count, and the scope rules."""
        names = list(NOTES_TOOL_RESULTS)
        return {"status": "ok", "tool_count": len(names), "tools": names,
                "namespace_contract": {s["scope"]: s["writes"] for s in self.list_scopes()["scopes"]},
                "default_read_mode": "hybrid", "default_write_scope": "project"}

    def health(self) -> dict[str, Any]:
        """Liveness of what the notes need: the store (a read) and the embedder (one embedding),
        each reported; ``status`` is ``degraded`` when one fails (never raises)."""

        def check(fn: Any) -> str:
            try:
                fn()
            except Exception as exc:  # noqa: BLE001 - reported, never raised
                return f"error: {type(exc).__name__}: {exc}"
            return "ok"

        registry = self._at(self._registry)
        embedder = registry.embedder
        checks = {"store": check(lambda: registry.list(limit=1)),
                  "embedder": "none (keyword-only: search confidence is lexical only)" if embedder is None
                  else check(lambda: embedder.embed(["health probe"], input_type="query"))}
        ok = all(v == "ok" or v.startswith("none") for v in checks.values())
        return {"status": "ok" if ok else "degraded", "server_id": "manowar-notes", "package_name": "manowar-memory",
                "version": __version__, "embedding_model": registry.model_id, "checks": checks,
                "markdown_format": MARKDOWN_FORMAT,
                "project": {"id": self.project.id, "name": self.project.name}}

    def _changed_files(self, roots: Sequence[str], blocks: Sequence[MemoryRecord]) -> list[str]:
        """Files of ``roots`` that an incremental index would re-read or remove (read-only)."""
        base = Path(self.project.root).resolve()
        indexed = {str(r.metadata.get("source_path")): r.metadata for r in blocks}
        changed, seen = [], set()
        for root in roots:
            if not (base / root).exists():
                continue
            for _, f in discover(base / root):
                rel = f.resolve().relative_to(base).as_posix()
                seen.add(rel)
                m, st = indexed.get(rel), f.stat()
                if m is not None and (m.get("source_size"), m.get("source_mtime_ns")) == (st.st_size, st.st_mtime_ns):
                    continue
                text = f.read_bytes().decode("utf-8", "replace")
                if m is None or m.get("source_checksum") != hashlib.sha256(text.encode("utf-8")).hexdigest():
                    changed.append(rel)
        in_roots = [rel for rel in indexed
                    if any(r == "." or rel == r or rel.startswith(r.rstrip("/") + "/") for r in roots)]
        return sorted({*changed, *(rel for rel in in_roots if rel not in seen)})

    def server_info(self) -> dict[str, Any]:
        """The contract snapshot: identity, modes, the current project, storage counts per scope,
        index freshness (``empty``, ``not_indexed``, ``stale`` or ``fresh``) and orphaned buckets
        (projects whose recorded root no longer exists; nothing is deleted)."""
        roots = self.roots()
        stats: dict[str, Any] = {}
        times: dict[str, Any] = {}
        blocks: list[MemoryRecord] = []
        for sc in ("project", "global"):
            notes = self._rows(sc, {"metadata.item_type": "note"})
            status = [str(r.metadata.get("note_status")) for r in notes]
            active = status.count("active")
            stats[sc] = {"notes": {"active": active, "total": len(notes), "inactive": len(notes) - active,
                                   "archived": status.count("archived"), "superseded": status.count("superseded")}}
            times[sc] = max((str(r.metadata.get("updated_at")) for r in notes), default=None)
            if sc == "project":
                blocks = self._rows(sc, {"metadata.item_type": "block", "metadata.active": True})
                stats[sc].update(roots=roots, file_count=len({r.metadata.get("source_path") for r in blocks}),
                                 block_count=len(blocks))
            stats[sc]["index_rows"] = active + (len(blocks) if sc == "project" else 0)
        changed = self._changed_files(roots, blocks) if roots else []
        stale_format = self._index_is_stale()
        if not roots and not stats["project"]["notes"]["total"]:
            state = "empty"
        elif not roots:
            state = "not_indexed"
        else:
            state = "stale" if changed or stale_format else "fresh"
        manifests = self._at(self._registry).list(filters={"metadata.item_type": "project_manifest"},
                                            limit=_SCAN)
        orphaned = [{"project_id": r.metadata.get("project_id"), "project_root": r.metadata.get("project_root")}
                    for r in manifests if r.metadata.get("project_root")
                    and not Path(str(r.metadata["project_root"])).exists()]
        health = self.health()
        return {
            "status": "ok", "product": "Manowar project notes", "server_id": health["server_id"],
            "package_name": health["package_name"], "version": health["version"],
            "default_write_scope": "project", "default_read_mode": "hybrid",
            "query_modes": ["project", "global", "hybrid"], "index_modes": ["incremental", "full"],
            "hydrate_modes": ["default", "related"], "embedding_model": health["embedding_model"],
            "current_project": {"id": self.project.id, "name": self.project.name, "root": self.project.root,
                                "identity_kind": self.project.identity_kind},
            "storage_stats": stats,
            "index_status": {
                "project": {"state": state, "changed_files": changed, "markdown_format": MARKDOWN_FORMAT,
                            "format_current": not stale_format,
                            "last_indexed_at": max((str(r.metadata.get("updated_at")) for r in blocks), default=None),
                            "last_note_at": times["project"]},
                "global": {"state": "fresh" if stats["global"]["notes"]["total"] else "empty",
                           "last_note_at": times["global"]},
            },
            "orphaned_buckets": orphaned,
        }

    def lint_knowledge_base(self, paths: Sequence[str | os.PathLike[str]] | None = None,
                            max_issues: int = 200) -> dict[str, Any]:
        """Check the Markdown under ``paths`` (default: the registered roots) and the project's
        notes: broken links, orphan candidates, duplicate titles, stale episodic notes (older than
        ``MANOWAR_EPISODIC_STALE_DAYS``, default 14) and near-duplicate notes (cosine >= 0.90; needs
        an embedder). At most ``max_issues`` issues are listed (``truncated`` says so)."""
        if isinstance(max_issues, bool) or not isinstance(max_issues, int) or max_issues < 1:
            raise InvalidInputError(f"max_issues must be a positive integer, got {max_issues!r}")
        if isinstance(paths, (str, os.PathLike)):
            paths = [paths]
        roots = list(dict.fromkeys(self._check_root(p) for p in paths)) if paths is not None else self.roots()
        base = Path(self.project.root).resolve()
        documents: dict[str, str] = {}
        for root in roots:
            for _, f in discover(base / root):
                documents.setdefault(f.resolve().relative_to(base).as_posix(),
                                     f.read_bytes().decode("utf-8", "replace"))

        def exists(rel: str) -> bool:
            target = base / rel
            return target.exists() and not target.is_symlink() and target.resolve().is_relative_to(base)

        issues = lint.document_issues(documents, exists)
        raw_days = os.environ.get("MANOWAR_EPISODIC_STALE_DAYS", str(lint.STALE_EPISODIC_DAYS))
        try:
            days = float(raw_days)
        except ValueError as exc:
            raise InvalidInputError(f"MANOWAR_EPISODIC_STALE_DAYS must be a number of days, got {raw_days!r}") from exc
        notes = self._rows("project", {"metadata.item_type": "note", "metadata.active": True})
        issues.extend(lint.stale_episodic([r.metadata for r in notes], days))
        near: list[dict[str, Any]] = []
        embedder = self._at(self._registry).embedder
        if embedder is not None and len(notes) > 1:
            notes = notes[: lint.MAX_NOTES]
            probes = [cards.compressed_summary(str(r.metadata.get("title", "")), self._body(r)) for r in notes]
            vectors = embedder.embed(probes, input_type="document")
            near = lint.near_duplicate_pairs([str(r.metadata.get("note_id")) for r in notes], probes, vectors)
        issues.extend(near)
        counts = {kind: sum(1 for i in issues if i["kind"] == kind) for kind in
                  ("broken_link", "orphan_candidate", "duplicate_title", "stale_episodic_note", "near_duplicate_notes")}
        return {
            "status": "ok", "checked_at": _now_iso(), "max_issues": max_issues, "truncated": len(issues) > max_issues,
            "roots": roots,
            "summary": {"root_count": len(roots), "markdown_configured": bool(roots), "file_count": len(documents),
                        "issue_count": len(issues), "broken_link_count": counts["broken_link"],
                        "orphan_candidate_count": counts["orphan_candidate"],
                        "duplicate_title_count": counts["duplicate_title"],
                        "stale_episodic_note_count": counts["stale_episodic_note"],
                        "near_duplicate_note_count": counts["near_duplicate_notes"]},
            "issues": issues[:max_issues],
        }
