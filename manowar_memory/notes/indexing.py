"""The Markdown index of a project: registered roots, incremental or full re-indexing into blocks.

A part of :class:`~manowar_memory.notes.service.ProjectNotes`.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import InvalidInputError
from ..records import MemoryRecord
from .base import MARKDOWN_FORMAT, NotesBase, _now_iso
from .markdown import discover, parse_markdown

__all__ = ["NotesIndexing"]


class NotesIndexing(NotesBase):
    """The Markdown index of a project: registered roots, incremental or full re-indexing into blocks."""

    def _check_root(self, raw: str | os.PathLike[str]) -> str:
        root = Path(self.project.root).resolve()
        given = Path(raw).expanduser()
        path = given if given.is_absolute() else Path(self.project.root) / given
        if not path.exists():
            raise InvalidInputError(f"path {str(raw)!r} does not exist")
        resolved = path.resolve()
        if not resolved.is_relative_to(root):
            raise InvalidInputError(f"path {str(raw)!r} is outside the project root {str(root)!r}; index only "
                                    "the project's own files")
        probe = Path(os.path.abspath(path))
        while probe != probe.parent and probe.is_relative_to(root):
            if probe.is_symlink():
                raise InvalidInputError(f"path {str(raw)!r} goes through the symlink {str(probe)!r}; "
                                        "symlinks are not followed")
            if probe == root:
                break
            probe = probe.parent
        if resolved.is_file() and resolved.stat().st_nlink > 1:
            raise InvalidInputError(f"path {str(raw)!r} is a hard link ({resolved.stat().st_nlink} names): another name, "
                                    "perhaps outside the project root, is the same file; index its directory, or copy it")
        rel = resolved.relative_to(root).as_posix()
        return "." if rel in ("", ".") else rel

    def roots(self) -> list[str]:
        """The registered Markdown roots, relative to the project root."""
        row = self._row("project", "roots")
        return list(row.metadata.get("roots", [])) if row is not None else []

    def _index_is_stale(self) -> bool:
        """Whether the blocks were made by another version of the parser (a full re-index is due)."""
        row = self._row("project", "roots")
        return row is not None and row.metadata.get("format") != MARKDOWN_FORMAT

    def _register(self, roots: list[str]) -> None:
        self._write("project", "roots", f"Markdown roots of {self.project.name}",
                    {"item_type": "roots", "active": False, "roots": roots, "format": MARKDOWN_FORMAT})

    def index_paths(self, paths: Sequence[str | os.PathLike[str]] | None = None,
                    mode: str = "incremental") -> dict[str, Any]:
        """Index the Markdown under ``paths`` (relative to the project root; default: the registered
        roots) into blocks. ``incremental`` skips files whose size and mtime (then sha256) are
        unchanged; ``full`` rewrites every file and, with explicit paths, drops roots not listed.
        Symlinks and paths outside the project root are refused; so are hard links (files with
        more than one name) unless every name is under the indexed root: the report's
        ``files_refused`` lists them."""
        if mode not in ("incremental", "full"):
            raise InvalidInputError(f"mode must be 'incremental' or 'full', got {mode!r}")
        registered = self.roots()
        stale = self._index_is_stale()
        if paths is None:
            if not registered:
                raise InvalidInputError("no Markdown roots are registered yet: call index_paths with paths first")
            roots = registered
        else:
            if isinstance(paths, (str, os.PathLike)):
                paths = [paths]
            roots = list(dict.fromkeys(self._check_root(p) for p in paths))
            keep = roots if mode == "full" else list(dict.fromkeys([*registered, *roots]))
            if keep != registered:
                self._register(keep)
                roots = keep if stale else roots
        report = self._sync(roots, full=mode == "full" or stale, prune=paths is not None and mode == "full")
        if stale:
            self._register(self.roots())
        return report

    def refresh(self) -> dict[str, Any] | None:
        """Re-index changed Markdown of the registered roots (None when none are registered)."""
        roots = self.roots()
        if not roots:
            return None
        stale = self._index_is_stale()
        report = self._sync(roots, full=stale, prune=False)
        if stale:
            self._register(roots)
        return report

    def _sync(self, roots: list[str], *, full: bool, prune: bool) -> dict[str, Any]:
        base = Path(self.project.root).resolve()
        existing: dict[str, list[MemoryRecord]] = {}
        for rec in self._rows("project", {"metadata.item_type": "block"}):
            existing.setdefault(str(rec.metadata.get("source_path")), []).append(rec)
        report: dict[str, Any] = {"status": "ok", "mode": "full" if full else "incremental", "roots": roots, "files_indexed": 0,
                  "files_skipped": 0, "files_removed": 0, "blocks_written": 0, "blocks_deleted": 0,
                  "files_refused": []}
        seen: set[str] = set()
        sc = self.scope_of("project")
        for root in roots:
            target = base / root
            if not target.exists():
                continue
            refused: list[Path] = []
            for _, f in discover(target, refused):
                rel = f.resolve().relative_to(base).as_posix()
                if rel in seen:
                    continue
                seen.add(rel)
                st = f.stat()
                old = existing.get(rel, [])
                m0 = old[0].metadata if old else {}
                if not full and old and m0.get("source_size") == st.st_size and m0.get("source_mtime_ns") == st.st_mtime_ns:
                    report["files_skipped"] += 1
                    continue
                text = f.read_bytes().decode("utf-8", "replace")
                checksum = hashlib.sha256(text.encode("utf-8")).hexdigest()
                stamp = {"source_size": st.st_size, "source_mtime_ns": st.st_mtime_ns, "source_checksum": checksum}
                if not full and old and m0.get("source_checksum") == checksum:
                    for rec in old:
                        self._at(sc).update(rec.id, metadata=stamp)
                    report["files_skipped"] += 1
                    continue
                self._write_file(rel, root, text, stamp, old, report)
                report["files_indexed"] += 1
            report["files_refused"] += [f.resolve().relative_to(base).as_posix() for f in refused]
        for rel, old in existing.items():
            in_root = any(r == "." or rel == r or rel.startswith(r.rstrip("/") + "/") for r in roots)
            stale = rel not in seen and (in_root or prune)
            if stale:
                for rec in old:
                    self._at(sc).delete(rec.id, hard=True)
                    report["blocks_deleted"] += 1
                report["files_removed"] += 1
        report["blocks_total"] = len(self._rows("project", {"metadata.item_type": "block"}))
        return report

    def _write_file(self, rel: str, root: str, text: str, stamp: dict[str, Any], old: list[MemoryRecord],
                    report: dict[str, Any]) -> None:
        sc = self.scope_of("project")
        blocks = parse_markdown(text, rel, f"mdroot-{self.project.id}")
        by_id = {str(r.metadata.get("block_id")): r for r in old}
        now = _now_iso()
        fresh = []
        for b in blocks:
            meta = {"item_type": "block", "active": True, "block_id": b.block_id, "source_path": rel, "root": root,
                    "title": b.title, "heading_path": list(b.heading_path), "position": b.position,
                    "chunk_index": b.chunk_index, "block_checksum": b.checksum, "tier": "reference",
                    "project_id": self.project.id, "project_name": self.project.name, "updated_at": now, **stamp}
            prev = by_id.pop(b.block_id, None)
            if prev is not None and prev.metadata.get("block_checksum") == b.checksum:
                self._at(sc).update(prev.id, metadata=meta)  # same text: no re-embedding
                continue
            if prev is not None:
                self._at(sc).delete(prev.id, hard=True)
            fresh.append({"key": b.block_id, "content": b.text, "metadata": meta,
                          "context": " > ".join(p for p in b.heading_path if p != "__preamble__")})
        for rec in by_id.values():
            self._at(sc).delete(rec.id, hard=True)
            report["blocks_deleted"] += 1
        if fresh:
            self._at(sc).ingest(fresh)
            report["blocks_written"] += len(fresh)
