"""Single memories and threads by id: get, list, update, delete, conflicts."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .._util import as_str, now_ms
from ..cache.namespace import scope_of
from ..errors import InvalidInputError, NotFoundError, ScopeError
from ..records import Job, MemoryRecord, Message, Pattern, Session, Transcript, WorkingMemory
from ..scope import Scope, ScopeLike, owns
from ..stores.base import MemoryQuery
from ..validation import check_id, check_optional_text
from .core import EngineBase, _active


class EngineItems(EngineBase):
    """Single memories and threads by id: get, list, update, delete, conflicts."""

    # ------------------------------------------------------------------ items
    def get_item(self, scope: ScopeLike, memory_id: str, *, filters: Mapping[str, Any] | None = None) -> MemoryRecord:
        """An active memory row visible in ``scope`` (thread ignored); raises :class:`NotFoundError`."""
        scope = Scope.coerce(scope)
        memory_id = check_id(memory_id)
        query = MemoryQuery(scope=scope, filters=self.merge_filters(scope, filters))
        record = self.store.get_memory(memory_id, query)
        if record is None:
            raise NotFoundError(f"memory {memory_id!r} does not exist in this scope (or was deleted or superseded)")
        return record

    def list_items(
        self, scope: ScopeLike, *, filters: Mapping[str, Any] | None = None, sources: Sequence[str] | None = None,
        limit: int = 50,
    ) -> list[MemoryRecord]:
        """Active memory rows of the scope, newest first."""
        scope = Scope.coerce(scope)
        query = MemoryQuery(scope=scope, filters=self.merge_filters(scope, filters),
                            sources=tuple(sources) if sources else None)
        return self.store.list_memories(query, limit)

    def update_item(
        self, scope: ScopeLike, memory_id: str, *, content: str | None = None,
        metadata: Mapping[str, Any] | None = None, confidence: float | None = None,
        status: str | None = None,
    ) -> MemoryRecord:
        """Change a row: new content is re-embedded (and its fact hash recomputed); metadata is
        merged; ``status`` is one of active, superseded, archived."""
        memory_id = check_id(memory_id)
        if content is not None:
            content = self._text(content, "content")
        current = self.get_item(scope, memory_id)
        changes: dict[str, Any] = {"updated_at": now_ms()}
        meta = {**current.metadata, **self._metadata(metadata)}
        if status is not None:
            if status not in ("active", "superseded", "archived"):
                raise InvalidInputError(f"status must be active, superseded or archived, got {status!r}")
            meta["status"] = status
        if confidence is not None:
            if isinstance(confidence, bool) or not isinstance(confidence, (int, float)) or not 0 <= confidence <= 1:
                raise InvalidInputError(f"confidence must be a number between 0 and 1, got {confidence!r}")
            meta["confidence"] = float(confidence)
        if content is not None:
            text = as_str(content)
            if text is None:
                raise InvalidInputError("content must be a non-empty string")
            if text != current.content:
                vectors = self._embed_documents([text])
                changes["content"] = text
                changes["embedding"] = vectors[0] if vectors else None
                changes["embedding_model"] = self.model_id if vectors else None
                if current.source == "fact":
                    meta["factHash"] = self.fact_hash(Scope.coerce(scope), text)
        changes["metadata"] = self._metadata(meta)
        updated = self.store.update_memory(memory_id, changes, agent_wallet=current.agent_wallet)
        if updated is None:
            raise NotFoundError(f"memory {memory_id!r} disappeared during the update")
        # the rows that followed it were indexed with its text while it was active
        self._rebuild_thread_contexts([(current, current.content if _active(current) else None,
                                        updated.content if _active(updated) else None)])
        self.invalidate(scope_of(current), scope_of(updated))
        return updated

    def delete_item(self, scope: ScopeLike, memory_id: str, *, hard: bool = False) -> bool:
        """Soft delete (``status: deleted``, ``decayScore: 0``, kept for history) or hard delete."""
        current = self.get_item(scope, memory_id)
        if hard:
            removed = self.store.delete_memory(memory_id, agent_wallet=current.agent_wallet)
        else:
            meta = {**current.metadata, "status": "deleted", "deletedAt": now_ms()}
            removed = self.store.update_memory(
                memory_id, {"metadata": meta, "decay_score": 0.0, "updated_at": now_ms()},
                agent_wallet=current.agent_wallet,
            ) is not None
        if removed and _active(current):
            self._rebuild_thread_contexts([(current, current.content, None)])  # its words leave the rows after it
        self.invalidate(scope_of(current))
        return removed

    def delete_items(self, scope: ScopeLike, memory_ids: Sequence[str], *, hard: bool = False) -> int:
        """:meth:`delete_item` for several rows of ``scope`` (each must be visible in it); the
        thread contexts of the rows after them are rebuilt once per thread. Returns how many went."""
        if isinstance(memory_ids, str):
            raise InvalidInputError("memory_ids must be a list of ids, not one string (delete_item deletes one row)")
        current = [self.get_item(scope, check_id(i)) for i in dict.fromkeys(memory_ids)]
        if not current:
            return 0
        agent = Scope.coerce(scope).agent_wallet  # every row was found in this scope: they are its agent's
        if hard:
            removed = self.store.delete_memories([r.id for r in current], agent_wallet=agent)
        else:
            at = now_ms()
            removed = self.store.update_memories([
                (r.id, {"metadata": {**r.metadata, "status": "deleted", "deletedAt": at}, "decay_score": 0.0,
                        "updated_at": at})
                for r in current
            ], agent_wallet=agent)
        self._rebuild_thread_contexts([(r, r.content, None) for r in current])
        self.invalidate(*(scope_of(r) for r in current))
        return removed

    def resolve_conflict(
        self, scope: ScopeLike, memory_id: str, resolution: str, *, winning_memory_id: str | None = None,
        reason: str | None = None,
    ) -> MemoryRecord:
        """Record how a conflict about an active row was resolved; returns the row after it.

        ``resolution``: ``supersede`` (the row becomes superseded, its decayScore capped at
        0.05, and it leaves retrieval), ``keep``, ``merge`` or ``ignore`` (the row stays
        active). ``winning_memory_id``, when given, must be another active row of the scope.
        The metadata gets ``conflictResolution``, ``conflictResolvedAt`` and, when given,
        ``winningMemoryId`` (also ``supersededBy``) and ``conflictReason``.
        """
        memory_id = check_id(memory_id)
        if winning_memory_id is not None:
            winning_memory_id = check_id(winning_memory_id, "winning_memory_id")
        reason = check_optional_text(reason, "reason", max_chars=self.config.max_text_chars)
        if not isinstance(resolution, str) or resolution not in ("supersede", "keep", "merge", "ignore"):
            raise InvalidInputError(f"resolution must be supersede, keep, merge or ignore, got {resolution!r}")
        current = self.get_item(scope, memory_id)
        if winning_memory_id is not None:
            if winning_memory_id == memory_id:
                raise InvalidInputError("winning_memory_id must name another row than memory_id")
            self.get_item(scope, winning_memory_id)  # raises NotFoundError when it is not an active row here
        now = now_ms()
        meta: dict[str, Any] = {**current.metadata, "conflictResolution": resolution, "conflictResolvedAt": now}
        if winning_memory_id is not None:
            meta["winningMemoryId"] = winning_memory_id
        if reason:
            meta["conflictReason"] = reason
        changes: dict[str, Any] = {"updated_at": now}
        if resolution == "supersede":
            meta.update({"status": "superseded", "supersededAt": now})
            if winning_memory_id is not None:
                meta["supersededBy"] = winning_memory_id
            changes["decay_score"] = min(current.decay_score, 0.05)
        changes["metadata"] = meta
        updated = self.store.update_memory(memory_id, changes, agent_wallet=current.agent_wallet)
        if updated is None:
            raise NotFoundError(f"memory {memory_id!r} disappeared while resolving the conflict")
        if not _active(updated):
            self._rebuild_thread_contexts([(current, current.content, None)])  # it left its thread's active rows
        self.invalidate(scope_of(current))
        return updated

    # ------------------------------------------------------------------ threads
    def _owned_thread_rows(self, scope: Scope) -> tuple[Transcript | None, Session | None]:
        sid = scope.thread_session_id()
        transcript = self.store.get_transcript(sid, scope.agent_wallet)
        session = self.store.get_session(sid, scope.agent_wallet)
        return (transcript if transcript is not None and owns(scope, transcript) else None,
                session if session is not None and owns(scope, session) else None)

    def thread_messages(self, scope: ScopeLike) -> list[Message]:
        """The messages of the scope's thread, oldest first: its transcript (scene layer), or,
        when a cleanup removed it, what the working buffer still holds."""
        scope = Scope.coerce(scope)
        if scope.thread_id is None:
            raise ScopeError("thread_messages needs a thread: set Scope(thread_id=...)")
        transcript, session = self._owned_thread_rows(scope)
        if transcript is not None:
            return list(transcript.messages)
        if session is None:
            return []
        out: list[Message] = []
        for i, line in enumerate(session.working_memory.context):
            role, sep, text = line.partition(": ")
            if sep and role in ("user", "assistant", "system"):
                out.append(Message(role=role, content=text, timestamp=session.created_at + i))  # type: ignore[arg-type]
        return out

    def clear_thread(self, scope: ScopeLike) -> None:
        """Empty the thread's transcript and working buffer. Durable memories (graph, vectors,
        patterns, archives) stay: they belong to the agent, not to the thread."""
        scope = Scope.coerce(scope)
        if scope.thread_id is None:
            raise ScopeError("clear_thread needs a thread: set Scope(thread_id=...)")
        transcript, session = self._owned_thread_rows(scope)
        if transcript is not None:
            self.store.upsert_transcript(transcript.model_copy(update={"messages": [], "summary": None,
                                                                       "token_count": 0}))
        if session is not None:
            wm = session.working_memory
            fresh = WorkingMemory(entities=dict(wm.entities), state=dict(wm.state))
            self.store.upsert_session(session.model_copy(update={"working_memory": fresh}))
        self.invalidate(scope)

    def agent_artifact(self, scope: ScopeLike, kind: str, artifact_id: str) -> Any:
        """An archive, pattern or skill of the scope's agent; :class:`NotFoundError` when it does
        not exist or belongs to another agent."""
        scope = Scope.coerce(scope)
        getters = {"archive": self.store.get_archive, "pattern": self.store.get_pattern, "skill": self.store.get_skill}
        if kind not in getters:
            raise InvalidInputError(f"kind must be archive, pattern or skill, got {kind!r}")
        found = getters[kind](artifact_id) if isinstance(artifact_id, str) and artifact_id else None
        owners = {getattr(found, "agent_wallet", None), *(getattr(found, "agents", None) or [])}
        if found is None or scope.agent_wallet not in owners:
            raise NotFoundError(f"{kind} {artifact_id!r} does not exist for this agent")
        return found

    def find_patterns(self, scope: Scope, limit: int) -> list[Pattern]:
        """Patterns the store finds for ``scope``'s agent, at most ``limit`` (callers check visibility)."""
        return self.store.find_patterns(MemoryQuery(scope=scope), limit)

    def get_job(self, job_id: str) -> Job | None:
        """A maintenance job record by id, or None (callers check its agent and owner)."""
        return self.store.get_job(job_id)

    def thread_session(self, scope: Scope) -> Session | None:
        """The stored working session of ``scope``'s thread, whoever owns it (callers check), or None."""
        return self.store.get_session(scope.thread_session_id(), scope.agent_wallet)

    def put_session(self, session: Session) -> None:
        """Write a working session as given (callers check ownership and invalidate the cache)."""
        self.store.upsert_session(session)
