"""Knowledge-base lint: the checks of the reference's ``lint_knowledge_base``, as pure functions.

* ``broken_link``: an internal Markdown link (``[text](path)``, ``[text](path#anchor)``) or a
  wikilink (``[[Name]]``, ``[[Name|label]]``) that points at no file of the project;
* ``orphan_candidate``: a document with no internal link in or out (only when there are at least
  two documents);
* ``duplicate_title``: two documents with the same normalised title (their first heading, else
  the file name); normalisation case-folds and keeps letters and digits of every script, so
  titles in other scripts never collide;
* ``stale_episodic_note``: an active episodic note (a handoff) not updated for ``stale_days``;
* ``near_duplicate_notes``: two active notes whose probes (title and summary) have cosine
  similarity of at least :data:`NEAR_DUPLICATE_SIMILARITY`; probes under 12 characters are left
  out and at most :data:`MAX_NOTES` notes are compared.

Links inside code (fenced blocks and inline spans) are not links.
"""

from __future__ import annotations

import posixpath
import re
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np

__all__ = [
    "MAX_NOTES",
    "NEAR_DUPLICATE_SIMILARITY",
    "STALE_EPISODIC_DAYS",
    "document_issues",
    "near_duplicate_pairs",
    "normalise_title",
    "stale_episodic",
]

NEAR_DUPLICATE_SIMILARITY = 0.90
STALE_EPISODIC_DAYS = 14
MAX_NOTES = 2000
MIN_PROBE_CHARS = 12

_FENCED = re.compile(r"^ {0,3}(`{3,}|~{3,}).*?^ {0,3}\1[ \t]*$", re.MULTILINE | re.DOTALL)
_INLINE = re.compile(r"(`+)[^`].*?\1", re.DOTALL)
_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+[\"'][^)]*[\"'])?\s*\)")
_WIKI = re.compile(r"\[\[([^\]|#]+)(?:#[^\]|]*)?(?:\|[^\]]*)?\]\]")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
_HEADING = re.compile(r"^ {0,3}#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$", re.MULTILINE)


def normalise_title(title: str) -> str:
    """Case-folded letters and digits (any script) of ``title``, words separated by one space."""
    text = unicodedata.normalize("NFKC", title).casefold()
    return " ".join("".join(c if c.isalnum() else " " for c in text).split())


def _title(rel: str, text: str) -> str:
    m = _HEADING.search(text)
    return m.group(1) if m else posixpath.splitext(posixpath.basename(rel))[0]


def _links(text: str) -> tuple[list[str], list[str]]:
    """(Markdown link targets, wikilink names) outside code."""
    prose = _INLINE.sub(" ", _FENCED.sub(" ", text))
    return [m.group(1) for m in _LINK.finditer(prose)], [m.group(1).strip() for m in _WIKI.finditer(prose)]


def document_issues(documents: Mapping[str, str],
                    exists: Callable[[str], bool] | None = None) -> list[dict[str, Any]]:
    """Broken links, orphan candidates and duplicate titles of ``documents`` (project-relative
    posix path -> text). ``exists(path)``: whether a project-relative path a link points at is a
    file or folder of the project (default: one of the documents or a folder holding one)."""
    dirs = {posixpath.dirname(p) for p in documents}
    while any(posixpath.dirname(d) not in dirs for d in dirs if d):
        dirs |= {posixpath.dirname(d) for d in dirs if d}
    found_at = exists or (lambda path: path in documents or path in dirs)
    by_stem: dict[str, set[str]] = {}
    for p in documents:
        for key in (posixpath.splitext(p)[0], posixpath.splitext(posixpath.basename(p))[0]):
            by_stem.setdefault(key.casefold(), set()).add(p)
    issues: list[dict[str, Any]] = []
    linked: dict[str, set[str]] = {p: set() for p in documents}  # document -> documents linked either way
    for rel in sorted(documents):
        targets, wikis = _links(documents[rel])
        for target in targets:
            if _SCHEME.match(target) or target.startswith(("#", "//")):
                continue  # external, or an anchor in the same document
            path = target.split("#", 1)[0].split("?", 1)[0]
            joined = posixpath.normpath(posixpath.join(posixpath.dirname(rel), path)) if not path.startswith("/") \
                else posixpath.normpath(path.lstrip("/"))
            if joined == "." or (not joined.startswith("../") and joined != ".." and found_at(joined)):
                if joined in documents and joined != rel:
                    linked[rel].add(joined)
                    linked[joined].add(rel)
                continue
            issues.append({"kind": "broken_link", "source_path": rel, "target": target,
                           "message": f"{rel} links to {target}, which is not a file of the project"})
        for name in wikis:
            found = by_stem.get(name.casefold()) or by_stem.get(posixpath.splitext(name)[0].casefold())
            if not found:
                issues.append({"kind": "broken_link", "source_path": rel, "target": f"[[{name}]]",
                               "message": f"{rel} has the wikilink [[{name}]], which names no document"})
                continue
            for other in found - {rel}:
                linked[rel].add(other)
                linked[other].add(rel)
    if len(documents) > 1:
        issues.extend({"kind": "orphan_candidate", "source_path": rel,
                       "message": f"{rel} has no internal link to or from another document"}
                      for rel in sorted(documents) if not linked[rel])
    titles: dict[str, list[str]] = {}
    for rel in sorted(documents):
        key = normalise_title(_title(rel, documents[rel]))
        if key:
            titles.setdefault(key, []).append(rel)
    issues.extend({"kind": "duplicate_title", "title": key, "source_paths": paths,
                   "message": f"{len(paths)} documents share the title {key!r}"}
                  for key, paths in titles.items() if len(paths) > 1)
    return issues


def stale_episodic(notes: Sequence[Mapping[str, Any]], stale_days: float = STALE_EPISODIC_DAYS,
                   now: datetime | None = None) -> list[dict[str, Any]]:
    """Active episodic notes (metadata of note rows) last updated more than ``stale_days`` ago."""
    now = now or datetime.now(UTC)
    cutoff = now - timedelta(days=stale_days)
    out = []
    for m in notes:
        if m.get("tier") != "episodic" or m.get("note_status", "active") != "active":
            continue
        try:
            updated = datetime.strptime(str(m.get("updated_at")), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
        except ValueError:
            continue
        if updated < cutoff:
            out.append({"kind": "stale_episodic_note", "note_id": m.get("note_id"), "title": m.get("title"),
                        "updated_at": m.get("updated_at"),
                        "message": f"episodic note {m.get('title')!r} is older than {stale_days:g} days: "
                                   "deprecate it or promote what still holds into a durable note"})
    return out


def near_duplicate_pairs(ids: Sequence[str], probes: Sequence[str], vectors: Sequence[Sequence[float]],
                         threshold: float = NEAR_DUPLICATE_SIMILARITY) -> list[dict[str, Any]]:
    """Pairs of notes whose probe vectors have cosine similarity ``>= threshold``, most similar
    first. ``probes`` under 12 characters and anything past :data:`MAX_NOTES` are left out."""
    keep = [i for i, p in enumerate(probes) if len(p.strip()) >= MIN_PROBE_CHARS][:MAX_NOTES]
    if len(keep) < 2:
        return []
    mat = np.asarray([vectors[i] for i in keep], dtype=np.float64)
    norms = np.linalg.norm(mat, axis=1)
    norms[norms == 0] = 1.0
    mat = mat / norms[:, None]
    sims = mat @ mat.T
    a, b = np.nonzero(np.triu(sims >= threshold, k=1))
    pairs = sorted(((float(sims[x, y]), keep[x], keep[y]) for x, y in zip(a.tolist(), b.tolist())), reverse=True)
    return [{"kind": "near_duplicate_notes", "note_ids": [ids[x], ids[y]], "similarity": round(s, 3),
             "message": "two active notes say nearly the same thing: deprecate one with replacement_note_id"}
            for s, x, y in pairs]
