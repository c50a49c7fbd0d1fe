"""Markdown into blocks: sections by heading, long sections packed into paragraph chunks.

* Text before the first heading is the ``__preamble__`` section; each ATX heading (outside code
  fences) starts a section that runs to the next heading of any level; its heading path is the
  list of ancestor titles, its title the heading's (the file name for the preamble). Empty
  sections are dropped.
* A section of at most :data:`SOFT_LIMIT` characters is one block. A longer one is split at
  blank lines (never inside a fence) and packed greedily; each chunk repeats the heading line.
* Every block has its **position** in the document (0, 1, 2, ... over the whole file), which is
  what hydration orders neighbours by, and its chunk index inside its section.
* ``block_id`` is location-based (root, path, heading path, the heading path's occurrence in the
  file, chunk index), so it stays stable when the text changes.
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = ["IGNORED_DIRS", "MAX_FILE_BYTES", "SOFT_LIMIT", "Block", "discover", "parse_markdown"]

SOFT_LIMIT = 1000
MAX_FILE_BYTES = 5 * 1024 * 1024
PREAMBLE = "__preamble__"
IGNORED_DIRS = frozenset({
    ".git", ".omc", ".planning", ".pytest_cache", ".ruff_cache", ".serena", ".mypy_cache", ".venv", "__pycache__",
    "benchmarks", "build", "dist", "node_modules", "venv", ".tox", ".eggs",
})
_HEADING = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?[ \t]*#*[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")


@dataclass(frozen=True)
class Block:
    """One block of a Markdown file."""

    block_id: str
    source_path: str
    heading_path: tuple[str, ...]
    title: str
    position: int
    chunk_index: int
    text: str
    checksum: str


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _sections(text: str) -> list[tuple[tuple[str, ...], str | None, list[str]]]:
    """(heading path, heading line or None, body lines) per section, in document order."""
    sections: list[tuple[tuple[str, ...], str | None, list[str]]] = [((PREAMBLE,), None, [])]
    stack: list[tuple[int, str]] = []
    fence: str | None = None
    for line in text.splitlines():
        m = _FENCE.match(line)
        if m:
            mark = m.group(1)
            if fence is None:
                fence = mark
            elif mark[0] == fence[0] and len(mark) >= len(fence) and not line.strip()[len(mark):].strip():
                fence = None
            sections[-1][2].append(line)
            continue
        h = _HEADING.match(line) if fence is None else None
        if h:
            level = len(h.group(1))
            title = (h.group(2) or "").strip() or f"untitled-h{level}"
            while stack and stack[-1][0] >= level:
                stack.pop()
            stack.append((level, title))
            sections.append((tuple(t for _, t in stack), line.strip(), []))
        else:
            sections[-1][2].append(line)
    return sections


def _paragraphs(lines: list[str]) -> list[str]:
    out: list[list[str]] = [[]]
    fence: str | None = None
    for line in lines:
        m = _FENCE.match(line)
        if m:
            fence = m.group(1) if fence is None else (None if m.group(1)[0] == fence[0] else fence)
        if not line.strip() and fence is None:
            if out[-1]:
                out.append([])
            continue
        out[-1].append(line)
    return ["\n".join(p).strip("\n") for p in out if any(text.strip() for text in p)]


def parse_markdown(text: str, source_path: str, root_id: str, soft_limit: int = SOFT_LIMIT) -> list[Block]:
    """The blocks of one file, in document order (``position`` 0..n-1)."""
    blocks: list[Block] = []
    seen: dict[tuple[str, ...], int] = {}
    for path, heading, body in _sections(text):
        body_text = "\n".join(body).strip("\n")
        if not body_text.strip() and (heading is None or path == (PREAMBLE,)):
            continue
        whole = f"{heading}\n\n{body_text}".strip() if heading else body_text.strip()
        if len(whole) <= soft_limit:
            chunks = [whole]
        else:
            room = max(soft_limit - (len(heading) + 2 if heading else 0), 1)
            packed: list[str] = []
            for para in _paragraphs(body):
                if packed and len(packed[-1]) + 2 + len(para) <= room:
                    packed[-1] += "\n\n" + para
                else:
                    packed.append(para)
            chunks = [f"{heading}\n\n{c}" if heading else c for c in packed]
        occurrence = seen.get(path, 0)
        seen[path] = occurrence + 1
        label = " > ".join(path) + (f" #{occurrence}" if occurrence else "")
        for i, chunk in enumerate(chunks):
            bid = "mdblk-" + _sha(f"{root_id}|{source_path}|{label}|{i}")[:20]
            title = source_path.rsplit("/", 1)[-1] if path == (PREAMBLE,) else path[-1]  # a preamble: the file
            blocks.append(Block(bid, source_path, path, title, len(blocks), i, chunk, _sha(chunk)))
    return blocks


def _ignore_patterns(root: Path) -> tuple[Path, list[str]]:
    """The directory and patterns of the nearest ``.manowarignore`` from ``root`` up to the
    repository boundary (the directory holding ``.git``)."""
    for base in (root, *root.parents):
        f = base / ".manowarignore"
        if f.is_file():
            lines = (raw.strip() for raw in f.read_text(errors="replace").splitlines())
            return base, [line.lstrip("/") for line in lines if line and not line.startswith("#")]
        if (base / ".git").exists():
            break
    return root, []


def _ignored(rel: str, patterns: list[str]) -> bool:
    parts = rel.split("/")
    for pat in patterns:
        pat = pat.rstrip("/")
        if fnmatch.fnmatch(rel, pat) or any(fnmatch.fnmatch(d, pat) for d in parts[:-1]):
            return True
        if "/" not in pat and fnmatch.fnmatch(parts[-1], pat):
            return True
    return False


def _walk(root: Path) -> Iterator[Path]:
    """``*.md`` under ``root``, never descending into ignored or symlinked directories."""
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in IGNORED_DIRS and not os.path.islink(os.path.join(dirpath, d))]
        for name in filenames:
            if name.endswith(".md"):
                yield Path(dirpath) / name


def discover(root: Path, refused: list[Path] | None = None) -> Iterator[tuple[str, Path]]:
    """(posix path relative to ``root``, file) of every indexable ``*.md`` under ``root``: regular
    files only, no symlinks (file or directory), ignored directories and ``.manowarignore``
    patterns skipped (matched, like gitignore, against the path relative to the ignore file's
    directory, each directory name in it, and a slash-less pattern against the file name),
    nothing over 5 MiB.

    Hard links: a file with more than one name (``st_nlink > 1``) is read only when every one of
    its names is found under ``root``; otherwise a name outside the project may be the same file
    (a hard link made to read it), so it is skipped and appended to ``refused``."""
    root = root.resolve()
    ignore_base, patterns = _ignore_patterns(root if root.is_dir() else root.parent)
    if root.is_file():
        candidates: Iterator[Path] = iter([root])
        base = root.parent
    else:
        candidates = iter(sorted(_walk(root)))
        base = root
    found: list[tuple[str, Path, os.stat_result]] = []
    for f in candidates:
        rel_parts = f.relative_to(base).parts
        if any(p in IGNORED_DIRS for p in rel_parts[:-1]):
            continue
        # no symlink anywhere between the root and the file: nothing reached through a link is read
        if any((base.joinpath(*rel_parts[: i + 1])).is_symlink() for i in range(len(rel_parts))):
            continue
        if not f.is_file() or not f.resolve().is_relative_to(base):
            continue
        rel = "/".join(rel_parts)
        if patterns and _ignored(f.relative_to(ignore_base).as_posix(), patterns):
            continue
        try:
            st = f.stat()
        except OSError:
            continue
        if st.st_size > MAX_FILE_BYTES:
            continue
        found.append((rel, f, st))
    # every name of a multiply-linked file must be among the files found here
    names: dict[tuple[int, int], int] = {}
    for _, _, st in found:
        if st.st_nlink > 1:
            names[(st.st_dev, st.st_ino)] = names.get((st.st_dev, st.st_ino), 0) + 1
    for rel, f, st in found:
        if st.st_nlink > 1 and names[(st.st_dev, st.st_ino)] < st.st_nlink:
            if refused is not None:
                refused.append(f)
            continue
        yield rel, f
