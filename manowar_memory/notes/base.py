"""What every part of :class:`~manowar_memory.notes.service.ProjectNotes` stands on: the notes
constants, the engine protocols it needs, the input checks, and :class:`NotesBase` (the project
identity, its scopes, and reading and writing the rows of one scope)."""

from __future__ import annotations

import builtins
import math
import os
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

from ..errors import InvalidInputError, NotFoundError, ScopeError
from ..records import MemoryRecord
from ..scope import Scope
from .identity import ProjectIdentity, resolve_project

__all__ = [
    "DEFAULT_AGENT",
    "NOTE_KINDS",
    "PROVENANCES",
    "TIERS",
    "GlobalWriteError",
    "NotesBase",
    "NotesHost",
    "NotesMemory",
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


class NotesBase:
    """The project, its scopes and the row plumbing of :class:`~manowar_memory.notes.service.ProjectNotes`
    (see there for the arguments)."""

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

    def _body(self, rec: MemoryRecord) -> str:
        title = str(rec.metadata.get("title", ""))
        return rec.content[len(title) + 1:] if rec.content.startswith(title + "\n") else rec.content

