"""Project notes for coding agents, stored as memory rows of the engine.

Storage convention (one engine, one store, no second storage engine):

* every row belongs to the notes agent (``agent``, default ``manowar-notes``; through a
  :class:`~manowar_memory.scoped.ScopedMemory`, that scope's agent and user);
* a project's rows have ``mode="local"`` and ``hai_id="project:<project id>"``; the global rows
  have ``mode="global"``. So the store's scope filters keep projects apart;
* ``metadata.item_type`` says what a row is: ``note``, ``block`` (a Markdown block),
  ``relation`` or ``roots`` (the registered Markdown roots); ``metadata.active`` is False once a
  note is deprecated, which takes it out of retrieval while the row (its history) stays;
* rows are written with an ingest key (``note:<id>``, the block id, ``rel:<hash>``), so each has a
  row id derived from its scope and key.

Searches run the engine's hybrid lanes (keyword and vector, fused) over those rows to pick the
candidates, then score each one as the reference does: cosine similarity plus a lexical bonus
(the card's ``confidence``), plus a project bias in hybrid mode, a Markdown bonus and a bonus for
human-written notes (the ranking score).
"""

from __future__ import annotations

import builtins
import hashlib
import math
import os
import re
import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from .._version import __version__
from ..errors import InvalidInputError, NotFoundError, ScopeError
from ..records import MemoryRecord
from ..scope import Scope
from . import cards, fusion, lint
from .identity import ProjectIdentity, resolve_project
from .markdown import discover, parse_markdown
from .results import NOTES_TOOL_RESULTS

__all__ = [
    "DEFAULT_AGENT",
    "NOTE_KINDS",
    "PROVENANCES",
    "TIERS",
    "GlobalWriteError",
    "NotesHost",
    "NotesMemory",
    "ProjectNotes",
    "check_uri",
]

DEFAULT_AGENT = "manowar-notes"
NOTE_KINDS = ("lesson", "decision", "pattern", "handoff")
TIERS = ("durable", "episodic", "reference")
PROVENANCES = ("human-explicit", "agent")
DEFAULT_TIERS = ("durable", "reference")
HYBRID_PROJECT_BIAS = 0.15
MARKDOWN_KIND_BONUS = 0.02
PROVENANCE_HUMAN_BONUS = 0.06
SUPERSEDE_SIMILARITY = 0.88
REVIEW_SIMILARITY = 0.78
MAX_LIMIT = 20
#: The version of the Markdown blocks' shape; an index made by another version is rebuilt in full.
MARKDOWN_FORMAT = 2
_SCAN = 100_000
_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
_SLASHED = ("note", "file", "issue", "task", "http", "https")


class NotesMemory(Protocol):
    """The part of the scoped surface (:class:`~manowar_memory.scoped.ScopedMemory`) project notes
    act through: one scope's reads, keyed writes and changes of its own rows."""

    @property
    def embedder(self) -> Any:
        """The engine's embedder, or None on a keyword-only engine."""

    @property
    def model_id(self) -> str | None:
        """The embedding model's id, or None."""

    def get(self, memory_id: str) -> MemoryRecord:
        """A row visible in the scope; :class:`NotFoundError` otherwise."""

    def list(self, *, filters: Mapping[str, Any] | None = None, limit: int = 50) -> builtins.list[MemoryRecord]:
        """Active rows visible in the scope, newest first."""

    def similar(self, query: str | None, *, k: int = 4,
                filters: Mapping[str, Any] | None = None) -> builtins.list[tuple[MemoryRecord, float]]:
        """The ``k`` visible rows nearest to ``query``, each with its cosine similarity."""

    def keyword(self, query: str, *, k: int = 4,
                filters: Mapping[str, Any] | None = None) -> builtins.list[tuple[MemoryRecord, float]]:
        """The ``k`` visible rows the keyword index ranks first for ``query``."""

    def ingest(self, items: Sequence[Mapping[str, Any]]) -> builtins.list[str]:
        """Write rows keyed by an idempotency ``key`` each; the row ids."""

    def ingest_id(self, key: str) -> str:
        """The row id of the keyed row ``key`` in the scope."""

    def update(self, memory_id: str, *, metadata: Mapping[str, Any] | None = None) -> MemoryRecord:
        """Merge ``metadata`` into one of the scope's own rows."""

    def delete(self, memory_id: str, *, hard: bool = False) -> bool:
        """Delete one of the scope's own rows."""


class NotesHost(Protocol):
    """What opens the scoped surface of each notes scope (:meth:`MemoryEngine.scoped`)."""

    def scoped(self, scope: Scope) -> NotesMemory:
        """The surface bound to ``scope``."""


class GlobalWriteError(ScopeError):
    """A note was written straight to the global scope, which only promotion may write."""


def _now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def check_uri(uri: Any, what: str = "uri") -> str:
    """``uri`` if it is an entity URI: a scheme and ``:``; ``note``, ``file``, ``issue``, ``task`` and
    http(s) also need ``//`` and something after it."""
    if not isinstance(uri, str) or not _URI.match(uri.strip()):
        raise InvalidInputError(f"{what} {uri!r} is not an entity URI (note://id, file://path, issue://KEY, "
                                "task://KEY, https://...)")
    text: str = uri.strip()
    scheme, rest = text.split(":", 1)
    if scheme.lower() in _SLASHED and (not rest.startswith("//") or len(rest) <= 2):
        raise InvalidInputError(f"{what} {text!r}: a {scheme}: URI needs '//' and a target after it")
    return text


def _is_uri(value: str) -> bool:
    try:
        check_uri(value)
        return True
    except InvalidInputError:
        return False


def _text(value: Any, name: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InvalidInputError(f"{name} must be a non-empty string")
    return value.strip()


def _strings(values: Any, name: str) -> list[str]:
    if values is None:
        return []
    if isinstance(values, str) or not isinstance(values, Sequence):
        raise InvalidInputError(f"{name} must be a list of strings")
    out: list[str] = []
    for v in values:
        if not isinstance(v, str):
            raise InvalidInputError(f"{name} must be a list of strings, got an item {v!r}")
        if v.strip() and v.strip() not in out:
            out.append(v.strip())
    return out


def _limit(limit: Any) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise InvalidInputError(f"limit must be an integer, got {limit!r}")
    return max(1, min(MAX_LIMIT, limit))


def _cosine(a: Sequence[float] | None, b: Sequence[float] | None) -> float | None:
    if not a or not b or len(a) != len(b):
        return None
    dot = sum(x * y for x, y in zip(a, b))
    na, nb = math.sqrt(sum(x * x for x in a)), math.sqrt(sum(y * y for y in b))
    return dot / (na * nb) if na and nb else None


class ProjectNotes:
    """Scoped notes and Markdown knowledge of one project, on a :class:`MemoryEngine`.

    ``project``: a :class:`ProjectIdentity`, a directory to resolve it from, or None for the
    working directory (see :func:`resolve_project`). ``agent``/``user``: whose notes these are.
    ``auto_refresh``: re-index changed Markdown before a project or hybrid search. ``reconcile``: keep
    a project's notes when its identity changes (see :meth:`reconcile`).
    """

    def __init__(self, engine: NotesHost, *, project: ProjectIdentity | str | os.PathLike[str] | None = None,
                 agent: str = DEFAULT_AGENT, user: str | None = None, auto_refresh: bool = True,
                 reconcile: bool = True) -> None:
        self._host = engine
        self._registry = Scope(agent_wallet=agent, user_address=user, mode="local", hai_id="projects")
        ident = project if isinstance(project, ProjectIdentity) else resolve_project(project)
        self.project: ProjectIdentity = self.reconcile(ident) if reconcile else ident
        self._scopes = {
            "project": Scope(agent_wallet=agent, user_address=user, mode="local", hai_id=f"project:{self.project.id}"),
            "global": Scope(agent_wallet=agent, user_address=user, mode="global"),
        }
        self.auto_refresh = auto_refresh

    def reconcile(self, ident: ProjectIdentity) -> ProjectIdentity:
        """The bucket of ``ident`` among the projects seen before, so notes are never stranded: a
        project that listed this identity source before keeps its id (adding or removing a remote
        keeps the bucket); else a project recorded at the same root is adopted, unless both have
        remotes and they differ (another project reusing the path). An override is taken as is."""
        if ident.identity_kind == "override":
            return ident
        registry = self._at(self._registry)
        rows = registry.list(filters={"metadata.item_type": "project_manifest"}, limit=_SCAN)
        chosen = next((r for r in rows if ident.identity_source in r.metadata.get("identity_sources", [])), None)
        if chosen is None:
            remote = ident.identity_source if ident.identity_kind == "git_remote" else None
            chosen = next((r for r in rows if r.metadata.get("project_root") == ident.root
                           and not (remote and r.metadata.get("remote") and r.metadata["remote"] != remote)), None)
        m = chosen.metadata if chosen is not None else {}
        pid = str(m.get("project_id", ident.id))
        sources = list(dict.fromkeys([*m.get("identity_sources", []), ident.identity_source]))
        remote = ident.identity_source if ident.identity_kind == "git_remote" else m.get("remote")
        if chosen is None or sources != m.get("identity_sources") or remote != m.get("remote") \
                or ident.root != m.get("project_root"):
            meta = {"item_type": "project_manifest", "active": False, "project_id": pid, "project_root": ident.root,
                    "identity_sources": sources, "remote": remote, "updated_at": _now_iso()}
            key = f"manifest:{pid}"
            try:  # the manifest row is replaced whole (a keyed ingest never overwrites)
                registry.delete(registry.ingest_id(key), hard=True)
            except NotFoundError:
                pass
            registry.ingest([{"key": key, "content": f"project {ident.name} at {ident.root}", "metadata": meta}])
        return ProjectIdentity(pid, ident.name, ident.root, ident.identity_kind, ident.identity_source)

    # ------------------------------------------------------------------ plumbing
    def _at(self, scope: Scope) -> NotesMemory:
        """The scoped surface of one notes scope: every read and write goes through it."""
        return self._host.scoped(scope)

    def scope_of(self, name: str) -> Scope:
        """The engine scope of ``project`` or ``global``."""
        if name not in self._scopes:
            raise InvalidInputError(f"scope must be 'project' or 'global' here, got {name!r}")
        return self._scopes[name]

    def _read_scopes(self, scope: str) -> list[str]:
        if scope == "hybrid":
            return ["project", "global"]
        if scope in ("project", "global"):
            return [scope]
        raise InvalidInputError(f"scope must be 'project', 'global' or 'hybrid', got {scope!r}")

    def _row(self, scope: str, key: str) -> MemoryRecord | None:
        memory = self._at(self.scope_of(scope))
        try:
            return memory.get(memory.ingest_id(key))
        except NotFoundError:
            return None

    def _rows(self, scope: str, filters: Mapping[str, Any]) -> list[MemoryRecord]:
        return self._at(self.scope_of(scope)).list(filters=filters, limit=_SCAN)

    def _write(self, scope: str, key: str, content: str, metadata: dict[str, Any], context: str | None = None) -> str:
        sc = self.scope_of(scope)
        old = self._row(scope, key)
        if old is not None:
            self._at(sc).delete(old.id, hard=True)
        return self._at(sc).ingest([{"key": key, "content": content, "metadata": metadata, "context": context}])[0]

    def _note_row(self, note_id: str, scope: str) -> MemoryRecord:
        row = self._row(scope, f"note:{_text(note_id, 'note_id')}")
        if row is None:
            raise NotFoundError(f"no {scope} note {note_id!r} in project {self.project.name!r}")
        return row

    # ------------------------------------------------------------------ notes
    def remember_note(self, title: str, content: str, kind: str = "lesson", *, tags: Sequence[str] | None = None,
                      source_refs: Sequence[str] | None = None, provenance: str = "agent", tier: str | None = None,
                      scope: str = "project") -> dict[str, Any]:
        """Store a project note; returns ``{status, action: "stored", item, similar_notes?, linked_refs?,
        hints?}``. A direct ``global`` write raises :class:`GlobalWriteError` (promote instead).
        Similar active notes are reported (``supersede_candidate`` at cosine ≥ 0.88 and the same kind,
        ``review_for_conflict`` at ≥ 0.78), never deprecated."""
        if scope == "global":
            raise GlobalWriteError("Direct global writes are disabled: remember the note in the project scope and "
                                   "promote it with promote_note")
        if scope != "project":
            raise InvalidInputError(f"notes are written to the 'project' scope, got {scope!r}")
        title, body = _text(title, "title"), _text(content, "content")
        if kind not in NOTE_KINDS:
            raise InvalidInputError(f"kind must be one of {list(NOTE_KINDS)}, got {kind!r}")
        if tier is None:
            tier = "episodic" if kind == "handoff" else "durable"
        elif tier not in TIERS:
            raise InvalidInputError(f"tier must be one of {list(TIERS)}, got {tier!r}")
        prov = provenance if provenance in PROVENANCES else "agent"
        tag_list, refs = _strings(tags, "tags"), _strings(source_refs, "source_refs")
        similar = self._similar_notes(f"{title}\n{body}", kind)
        note_id = uuid.uuid4().hex[:16]
        stamp = _now_iso()
        meta = {
            "item_type": "note", "active": True, "note_id": note_id, "title": title, "note_kind": kind, "tier": tier,
            "provenance": prov, "tags": tag_list, "source_refs": refs, "note_status": "active",
            "project_id": self.project.id, "project_name": self.project.name, "created_at": stamp,
            "updated_at": stamp,
        }
        self._write("project", f"note:{note_id}", f"{title}\n{body}", meta, context=" ".join([kind, *tag_list]))
        out: dict[str, Any] = {"status": "ok", "action": "stored", "item": self._note_item(self._note_row(note_id, "project"), "project")}
        if similar:
            out["similar_notes"] = similar
        linked = []
        for ref in refs:
            if _is_uri(ref) and ref != f"note://{note_id}":
                try:
                    linked.append(self.link_entities(f"note://{note_id}", ref, "references")["relation"])
                except Exception:  # noqa: BLE001 - auto-linking is best-effort; the note is stored
                    continue
        if linked:
            out["linked_refs"] = linked
        hints = []
        if not tag_list:
            hints.append("add 2-3 lowercase tags so the note is easier to find")
        if not linked:
            hints.append("link related files, issues or notes with link_entities (or pass source_refs URIs)")
        if hints:
            out["hints"] = hints
        return out

    def _similar_notes(self, text: str, kind: str) -> list[dict[str, Any]]:
        if self._at(self.scope_of("project")).embedder is None:
            return []
        found = self._at(self.scope_of("project")).similar(
            text, k=4, filters={"metadata.item_type": "note", "metadata.active": True})
        out = []
        for rec, cos in found:
            m = rec.metadata
            if cos >= SUPERSEDE_SIMILARITY and m.get("note_kind") == kind:
                suggestion = "supersede_candidate"
            elif cos >= REVIEW_SIMILARITY:
                suggestion = "review_for_conflict"
            else:
                continue
            out.append({"note_id": m.get("note_id"), "title": m.get("title"), "note_kind": m.get("note_kind"),
                        "similarity": round(cos, 3), "suggestion": suggestion,
                        "suggested_action": "deprecate_note(old, replacement_note_id=new) if the new note replaces it"
                        if suggestion == "supersede_candidate" else "check the two notes agree"})
        return out

    def _body(self, rec: MemoryRecord) -> str:
        title = str(rec.metadata.get("title", ""))
        return rec.content[len(title) + 1:] if rec.content.startswith(title + "\n") else rec.content

    def _note_item(self, rec: MemoryRecord, scope: str) -> dict[str, Any]:
        m = rec.metadata
        item = {
            "title": m.get("title"), "note_kind": m.get("note_kind"), "note_status": m.get("note_status"),
            "content_preview": cards.preview(self._body(rec)), "tags": m.get("tags", []), "scope": scope,
            "project_id": m.get("project_id"), "project_name": m.get("project_name"), "source_kind": "memory_note",
            "item_id": m.get("note_id"), "source_path": f"note://{m.get('note_id')}", "updated_at": m.get("updated_at"),
            "provenance": m.get("provenance"), "tier": m.get("tier"), "confidence": 1.0, "can_hydrate": True,
        }
        for key in ("promoted_from", "deprecated_at", "deprecation_reason", "superseded_by"):
            if m.get(key) is not None:
                item[key] = m[key]
        return item

    def promote_note(self, note_id: str) -> dict[str, Any]:
        """Copy an active project note to the global scope under the same id, with ``promoted_from``
        (scope, project id and name, note id, source path). The project note is unchanged;
        promoting again replaces the global copy."""
        rec = self._note_row(note_id, "project")
        if rec.metadata.get("note_status") != "active":
            raise InvalidInputError(f"only an active note can be promoted; {note_id!r} is {rec.metadata.get('note_status')}")
        meta = dict(rec.metadata)
        meta["promoted_from"] = {"scope": "project", "project_id": self.project.id, "project_name": self.project.name,
                                 "note_id": meta["note_id"], "source_path": f"note://{meta['note_id']}"}
        meta["updated_at"] = _now_iso()
        self._write("global", f"note:{meta['note_id']}", rec.content, meta, context=rec.context)
        return {"status": "ok", "action": "promoted", "item": self._note_item(self._note_row(note_id, "global"), "global")}

    def deprecate_note(self, note_id: str, *, scope: str = "project", replacement_note_id: str | None = None,
                       replacement_scope: str | None = None, reason: str | None = None) -> dict[str, Any]:
        """Archive a note, or mark it superseded by an active replacement (``superseded_by`` points at
        it). The row stays (history) but leaves retrieval."""
        rec = self._note_row(note_id, scope)
        if rec.metadata.get("note_status") != "active":
            raise InvalidInputError(f"only an active note can be deprecated; {note_id!r} is {rec.metadata.get('note_status')}")
        stamp = _now_iso()
        changes: dict[str, Any] = {"active": False, "deprecated_at": stamp, "updated_at": stamp}
        if reason is not None:
            changes["deprecation_reason"] = _text(reason, "reason")
        if replacement_note_id is not None:
            rscope = replacement_scope or scope
            if rscope == scope and replacement_note_id == note_id:
                raise InvalidInputError("a note cannot supersede itself")
            repl = self._note_row(replacement_note_id, rscope)
            if repl.metadata.get("note_status") != "active":
                raise InvalidInputError(f"the replacement {replacement_note_id!r} is not active")
            rm = repl.metadata
            changes["note_status"] = "superseded"
            changes["superseded_by"] = {"scope": rscope, "project_id": rm.get("project_id"),
                                        "project_name": rm.get("project_name"), "note_id": rm.get("note_id"),
                                        "title": rm.get("title"), "source_path": f"note://{rm.get('note_id')}"}
        else:
            changes["note_status"] = "archived"
        updated = self._at(self.scope_of(scope)).update(rec.id, metadata=changes)
        return {"status": "ok", "action": changes["note_status"], "item": self._note_item(updated, scope)}

    def recent_context(self, scope: str = "project", limit: int = 10,
                       tier_filter: Sequence[str] | None = None) -> dict[str, Any]:
        """The newest active notes (no query, no embedding), all tiers unless ``tier_filter`` says."""
        limit = _limit(limit)
        filters: dict[str, Any] = {"metadata.item_type": "note", "metadata.active": True}
        if tier_filter is not None:
            filters["metadata.tier"] = self._tiers(tier_filter)
        items = []
        for sc in self._read_scopes(scope):
            for rec in self._rows(sc, filters):
                item = self._note_item(rec, sc)
                item.pop("confidence", None)
                item["compressed_summary"] = cards.compressed_summary(str(item["title"]), self._body(rec))
                item.pop("content_preview", None)
                items.append(item)
        items.sort(key=lambda i: (i.get("updated_at") or "", i.get("item_id") or ""), reverse=True)
        items = items[:limit]
        rels = self._relations_index(scope)
        for item in items:
            item["relations"] = rels(f"note://{item['item_id']}")
        out = {"status": "ok", "mode": "recent_context", "scope": scope, "result_count": len(items), "items": items}
        if tier_filter is not None:
            out["tier_filter"] = list(filters["metadata.tier"])
        return out

    @staticmethod
    def _tiers(tier_filter: Sequence[str] | None) -> tuple[str, ...]:
        if tier_filter is None:
            return DEFAULT_TIERS
        tiers = tuple(dict.fromkeys(_strings(tier_filter, "tier_filter")))
        if not tiers or any(t not in TIERS for t in tiers):
            raise InvalidInputError(f"tier_filter must be a non-empty list of {list(TIERS)}, got {tier_filter!r}")
        return tiers

    # ------------------------------------------------------------------ search
    def semantic_search(self, query: str, scope: str = "hybrid", limit: int = 5,
                        tier_filter: Sequence[str] | None = None, source_filter: str | None = None) -> dict[str, Any]:
        """Compact cards for ``query`` over notes and Markdown blocks, best first, with an overall
        ``confidence_state`` (and warning). Hybrid (the default) merges project and global results
        with a project bias. Default tiers: durable and reference (episodic handoffs hidden)."""
        query = _text(query, "query")
        scopes = self._read_scopes(scope)
        limit = _limit(limit)
        tiers = self._tiers(tier_filter)
        kinds = {None: ("note", "block"), "": ("note", "block"), "all": ("note", "block"),
                 "notes": ("note",), "markdown": ("block",)}.get(source_filter)
        if kinds is None:
            raise InvalidInputError(f"source_filter must be 'notes', 'markdown' or 'all', got {source_filter!r}")
        refreshed = None
        if self.auto_refresh and "project" in scopes and "block" in kinds:
            refreshed = self.refresh()
        filters = {"metadata.item_type": kinds, "metadata.active": True, "metadata.tier": tiers}
        count = max(5, 2 * limit) if scope == "hybrid" else max(5, limit)
        embedder = self._at(self._registry).embedder
        scored: list[tuple[tuple[Any, ...], float, float, str, MemoryRecord]] = []
        notes: list[str] = [] if embedder is not None else ["vector lane disabled: no embedder configured"]
        gated: dict[str, bool] = {}
        for sc in scopes:
            found, gated[sc] = self._candidates(query, sc, filters, count)
            for rec, cos in found:
                m = rec.metadata
                if m.get("item_type") not in kinds or not m.get("active"):  # defence in depth
                    continue
                base = max(0.0, min(cos, 1.0))
                is_block = m.get("item_type") == "block"
                title = str(m.get("title", ""))
                conf = min(base + cards.lexical_bonus(query, title, m.get("tags", []), rec.content), 1.0)
                human = m.get("provenance") == "human-explicit"
                bonus = (HYBRID_PROJECT_BIAS if scope == "hybrid" and sc == "project" else 0.0) + \
                    (MARKDOWN_KIND_BONUS if is_block else 0.0) + (PROVENANCE_HUMAN_BONUS if human else 0.0)
                eff = min(conf + bonus, 1.0)
                item_id = str(m.get("block_id") if is_block else m.get("note_id"))
                key = (-round(eff, 3), not human, sc != "project", not is_block, -rec.updated_at, item_id)
                scored.append((key, eff, conf, sc, rec))
        scored.sort(key=lambda s: s[0])
        top = scored[:limit]
        state, warning = cards.overall_confidence([s[1] for s in top], top[0][2] if top else None)
        rels = self._relations_index(scope)
        items = []
        for i, (_, _eff, conf, sc, rec) in enumerate(top):
            item_state = "ambiguous" if state == "ambiguous" and i < 2 else cards.confidence_state(conf)
            items.append(self._card(rec, sc, query, conf, item_state, rels))
        out: dict[str, Any] = {"status": "ok", "query": query, "scope": scope, "result_count": len(items),
                               "items": items, "confidence_state": state,
                               "lanes": {sc: "vector" if g else "vector+keyword" for sc, g in gated.items()}}
        if warning:
            out["warning"] = warning
        if refreshed and (refreshed["files_indexed"] or refreshed["files_removed"]):
            out["index_refreshed"] = {k: refreshed[k] for k in ("files_indexed", "files_removed")}
        if notes:
            out["degradations"] = list(dict.fromkeys(notes))
        return out

    def _candidates(self, query: str, scope: str, filters: Mapping[str, Any],
                    count: int) -> tuple[list[tuple[MemoryRecord, float]], bool]:
        """``count`` candidates of one scope with their cosine similarity to the query, and whether
        the vector-first gate held (the keyword lane was skipped). The lanes: the vector lane
        (:meth:`ScopedMemory.similar`) and the keyword lane (:meth:`ScopedMemory.keyword`), each
        asked for ``3 × count`` rows, chosen by :func:`~manowar_memory.notes.fusion.gated_fusion`.
        A keyword-only hit gets its real cosine (its stored embedding; 0 on a keyword-only
        engine). When both lanes find nothing, the rows with a lexical bonus stand in (cosine 0)."""
        memory = self._at(self.scope_of(scope))
        embedder = memory.embedder
        fetch = 3 * count
        vector = memory.similar(query, k=fetch, filters=filters) if embedder is not None else []
        records = {rec.id: rec for rec, _ in vector}
        cosine = {rec.id: cos for rec, cos in vector}

        def keyword() -> list[str]:
            hits = memory.keyword(query, k=fetch, filters=filters)
            for rec, _ in hits:
                records.setdefault(rec.id, rec)
            return [rec.id for rec, _ in hits]

        chosen = fusion.gated_fusion([(rec.id, cos) for rec, cos in vector], keyword, count)
        if not chosen.ids:  # the lexical fallback: every row with a query term
            rows = [r for r in self._rows(scope, filters)
                    if cards.lexical_bonus(query, str(r.metadata.get("title", "")), r.metadata.get("tags", []),
                                           r.content) > 0]
            return [(r, 0.0) for r in rows], False
        qvec: list[float] | None = None
        out = []
        for item in chosen.ids:
            rec = records[item]
            if item not in cosine and embedder is not None:
                if rec.embedding is None:  # a store that leaves embeddings out of keyword hits
                    rec = memory.get(item)
                if qvec is None:
                    qvec = embedder.embed([query], input_type="query")[0]
                cosine[item] = _cosine(qvec, rec.embedding) or 0.0
            out.append((rec, cosine.get(item, 0.0)))
        return out, chosen.gated

    def _card(self, rec: MemoryRecord, scope: str, query: str, conf: float, state: str, rels: Any) -> dict[str, Any]:
        m = rec.metadata
        is_block = m.get("item_type") == "block"
        title = str(m.get("title", ""))
        text = rec.content if is_block else self._body(rec)
        card: dict[str, Any] = {
            "scope": scope, "project_id": m.get("project_id"), "project_name": m.get("project_name"),
            "source_kind": "markdown" if is_block else "memory_note",
            "item_id": m.get("block_id") if is_block else m.get("note_id"),
            "source_path": m.get("source_path") if is_block else f"note://{m.get('note_id')}",
            "title": title, "heading_path": m.get("heading_path", []), "updated_at": m.get("updated_at"),
            "score": round(conf, 3), "confidence": round(conf, 3), "confidence_state": state,
            "compressed_summary": cards.compressed_summary(title, text), "key_points": cards.key_points(text, query),
            "can_hydrate": True, "tier": m.get("tier"),
        }
        if is_block:
            card["block_id"] = m.get("block_id")
            card["relations"] = rels(f"file://{m.get('source_path')}")
        else:
            card.update(note_kind=m.get("note_kind"), note_status=m.get("note_status"), provenance=m.get("provenance"))
            if m.get("promoted_from") is not None:
                card["promoted_from"] = m["promoted_from"]
            card["relations"] = rels(f"note://{m.get('note_id')}")
        if state in ("low", "ambiguous"):
            card["warning"] = cards.AMBIGUOUS if state == "ambiguous" else cards.LOW
        return card

    # ------------------------------------------------------------------ hydration
    def hydrate(self, item_id: str, scope: str = "project", mode: str = "default") -> dict[str, Any]:
        """A note in full, or a Markdown block with its neighbours in the same file by document
        position (``default``: 1 before and after; ``related``: 2 and 2)."""
        item_id = _text(item_id, "item_id")
        if scope not in ("project", "global"):
            raise InvalidInputError("hydrate needs the card's scope, 'project' or 'global' (not hybrid)")
        windows = {"default": 1, "related": 2}
        if mode not in windows:
            raise InvalidInputError(f"mode must be 'default' or 'related', got {mode!r}")
        note = self._row(scope, f"note:{item_id}")
        block = self._row(scope, item_id) if scope == "project" else None
        if note is not None and block is not None:
            raise InvalidInputError(f"{item_id!r} names both a note and a block")
        rels = self._relations_index("hybrid")
        if note is not None:
            m = note.metadata
            item = self._note_item(note, scope)
            item.pop("content_preview", None)
            item.update(content=self._body(note), source_refs=m.get("source_refs", []),
                        created_at=m.get("created_at"), relations=rels(f"note://{item_id}"))
            return {"status": "ok", "mode": mode, "scope": scope, "source_kind": "memory_note", "item": item,
                    "neighbors_before": [], "neighbors_after": [], "neighbor_window": {"before": 0, "after": 0}}
        if block is None or block.metadata.get("item_type") != "block":
            raise NotFoundError(f"no {scope} note or Markdown block {item_id!r} in project {self.project.name!r}")
        w = windows[mode]
        siblings = self._rows(scope, {"metadata.item_type": "block", "metadata.active": True,
                                      "metadata.source_path": block.metadata.get("source_path")})
        siblings.sort(key=lambda r: (int(r.metadata.get("position", 0)), str(r.metadata.get("block_id"))))
        at = next((i for i, r in enumerate(siblings) if r.id == block.id), None)
        if at is None:  # not listed with its file (a concurrent re-index): the block alone
            siblings, at = [block], 0
        item = self._block_view(block)
        item["relations"] = rels(f"file://{block.metadata.get('source_path')}")
        return {"status": "ok", "mode": mode, "scope": scope, "source_kind": "markdown", "item": item,
                "neighbors_before": [self._block_view(r) for r in siblings[max(0, at - w):at]],
                "neighbors_after": [self._block_view(r) for r in siblings[at + 1:at + 1 + w]],
                "neighbor_window": {"before": w, "after": w}}

    @staticmethod
    def _block_view(rec: MemoryRecord) -> dict[str, Any]:
        m = rec.metadata
        return {"item_id": m.get("block_id"), "block_id": m.get("block_id"), "source_kind": "markdown",
                "source_path": m.get("source_path"), "title": m.get("title"), "heading_path": m.get("heading_path", []),
                "position": m.get("position"), "tier": "reference", "content": rec.content,
                "updated_at": m.get("updated_at"), "project_id": m.get("project_id"),
                "project_name": m.get("project_name")}

    # ------------------------------------------------------------------ Markdown
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

    # ------------------------------------------------------------------ relations
    def link_entities(self, source_uri: str, target_uri: str, relation_type: str = "related_to",
                      scope: str = "project") -> dict[str, Any]:
        """Record a directed relation between two entity URIs (an exact duplicate is a no-op)."""
        src, dst = check_uri(source_uri, "source_uri"), check_uri(target_uri, "target_uri")
        rtype = _text(relation_type, "relation_type")
        self.scope_of(scope)
        key = "rel:" + hashlib.sha256(f"{src}\x00{rtype}\x00{dst}".encode()).hexdigest()[:32]
        row = self._row(scope, key)
        if row is None:
            meta = {"item_type": "relation", "active": False, "source": src, "target": dst, "relation_type": rtype,
                    "created_at": _now_iso()}
            self._at(self.scope_of(scope)).ingest([{"key": key, "content": f"{src} {rtype} {dst}", "metadata": meta}])
            row = self._row(scope, key)
        assert row is not None
        return {"status": "ok", "action": "linked", "relation": self._relation(row), "scope": scope}

    @staticmethod
    def _relation(rec: MemoryRecord) -> dict[str, Any]:
        m = rec.metadata
        return {"source": m.get("source"), "target": m.get("target"), "type": m.get("relation_type"),
                "created_at": m.get("created_at")}

    def unlink_entities(self, source_uri: str, target_uri: str, relation_type: str | None = None,
                        scope: str = "project") -> dict[str, Any]:
        """Remove the relation(s) from ``source_uri`` to ``target_uri`` (every type when none is given)."""
        src, dst = check_uri(source_uri, "source_uri"), check_uri(target_uri, "target_uri")
        filters: dict[str, Any] = {"metadata.item_type": "relation", "metadata.source": src, "metadata.target": dst}
        if relation_type is not None:
            filters["metadata.relation_type"] = relation_type
        changed = 0
        for rec in self._rows(scope, filters):
            changed += int(self._at(self.scope_of(scope)).delete(rec.id, hard=True))
        return {"status": "ok", "action": "unlinked", "changed": changed, "scope": scope}

    def get_related_entities(self, uri: str, relation_type: str | None = None, scope: str = "hybrid") -> dict[str, Any]:
        """Every relation where ``uri`` is the source or the target."""
        uri = check_uri(uri)
        rels = [r for r in self._relations_index(scope)(uri) if relation_type is None or r["type"] == relation_type]
        return {"status": "ok", "uri": uri, "relations": rels, "scope": scope}

    def _relations_index(self, scope: str) -> Any:
        rows: list[tuple[str, MemoryRecord]] = []
        for sc in self._read_scopes(scope):
            rows.extend((sc, r) for r in self._rows(sc, {"metadata.item_type": "relation"}))

        def lookup(uri: str) -> list[dict[str, Any]]:
            return [{**self._relation(r), "scope": sc} for sc, r in rows
                    if uri in (r.metadata.get("source"), r.metadata.get("target"))]

        return lookup

    # ------------------------------------------------------------------ operations
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

    def __repr__(self) -> str:
        return f"ProjectNotes(project={self.project.name!r}, id={self.project.id!r})"
