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

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import InvalidInputError, NotFoundError
from ..records import MemoryRecord
from . import cards, fusion
from .base import (
    DEFAULT_AGENT,
    DEFAULT_TIERS,
    HYBRID_PROJECT_BIAS,
    MARKDOWN_KIND_BONUS,
    NOTE_KINDS,
    PROVENANCE_HUMAN_BONUS,
    PROVENANCES,
    REVIEW_SIMILARITY,
    SUPERSEDE_SIMILARITY,
    TIERS,
    GlobalWriteError,
    NotesHost,
    NotesMemory,
    _cosine,
    _is_uri,
    _limit,
    _now_iso,
    _strings,
    _text,
    check_uri,
)
from .operations import NotesOperations
from .relations import NotesRelations

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


class ProjectNotes(NotesOperations, NotesRelations):
    """Scoped notes and Markdown knowledge of one project, on a :class:`MemoryEngine`.

    ``project``: a :class:`ProjectIdentity`, a directory to resolve it from, or None for the
    working directory (see :func:`resolve_project`). ``agent``/``user``: whose notes these are.
    ``auto_refresh``: re-index changed Markdown before a project or hybrid search. ``reconcile``: keep
    a project's notes when its identity changes (see :meth:`reconcile`).
    """

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

    def __repr__(self) -> str:
        return f"ProjectNotes(project={self.project.name!r}, id={self.project.id!r})"
