"""Relations between URIs (notes, files, issues…): link, unlink and look up.

A part of :class:`~manowar_memory.notes.service.ProjectNotes`.
"""

from __future__ import annotations

import hashlib
from typing import Any

from ..records import MemoryRecord
from .base import NotesBase, _now_iso, _text, check_uri

__all__ = ["NotesRelations"]


class NotesRelations(NotesBase):
    """Relations between URIs (notes, files, issues…): link, unlink and look up."""

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
