"""Threads: transcripts, the working session and compression."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .. import validation
from .._util import collapse_ws, now_ms, truncate
from ..errors import NotFoundError
from ..records import Message, Session, WorkingMemory
from ..scope import owns
from .core import ScopedCore, chat_role, check_metadata

if TYPE_CHECKING:
    import builtins


class ScopedThreads(ScopedCore):
    """Threads: transcripts, the working session and compression."""

    # ---------------------------------------------------------------- threads: index, working buffer, compress
    def index_transcript(self, messages: Sequence[Mapping[str, Any] | Message], *,
                         metadata: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Store a whole conversation of the scope's thread and make each of its messages
        searchable: the transcript and working buffer as :meth:`post_turn` records them (no fact
        extraction), then one ``session`` row per user or assistant message (metadata
        ``sessionId``, ``role``, ``timestamp``, ``messageIndex`` plus ``metadata``). Nothing is
        written when no user or assistant message has text. Returns ``{indexed, messageCount,
        vectorCount}``."""
        scope = self._require_thread()
        msgs = [m if isinstance(m, Message) else Message.model_validate(
            {**m, "role": chat_role(m.get("role"))} if isinstance(m, Mapping) else m) for m in messages]
        spoken = [(i, m) for i, m in enumerate(msgs) if m.role in ("user", "assistant") and m.content.strip()]
        if not spoken:
            return {"indexed": False, "messageCount": len(msgs), "vectorCount": 0}
        extra = check_metadata(metadata)
        self.post_turn(msgs, metadata=extra, extract_facts=False)
        session_id = scope.thread_id
        metas = [{**extra, "sessionId": session_id, "role": m.role, "timestamp": m.timestamp, "messageIndex": i}
                 for i, m in spoken]
        ids = self.add([m.content for _, m in spoken], metadatas=metas, source="session")
        return {"indexed": True, "messageCount": len(msgs), "vectorCount": len(ids)}

    def _own_session(self) -> Any:
        scope = self._require_thread()
        session = self._engine.thread_session(scope)
        if session is not None and not owns(scope, session):
            raise NotFoundError("this thread's working session belongs to another user, mode or HAI of the agent")
        return session

    def working(self) -> Any:
        """The thread's working session (:class:`~manowar_memory.records.Session`: context lines,
        entities, state), or None when the thread has none."""
        return self._own_session()

    def update_working(self, *, context: Sequence[str] | None = None, entities: Mapping[str, Any] | None = None,
                       state: Mapping[str, Any] | None = None, metadata: Mapping[str, Any] | None = None,
                       replace: bool = False) -> Any:
        """Change the thread's working session (created when missing) and return it. By default
        ``context`` lines are appended (the buffer keeps the newest ``session_context_limit``)
        and ``entities``, ``state`` and ``metadata`` are merged key by key; ``replace`` sets all
        four to what is given (empty when omitted). The expiry is refreshed."""
        scope = self._engine.check_conversation_scope(self._require_thread(), "update_working")
        config = self._engine.config
        lines = [validation.check_text(line, f"context[{i}]", max_chars=config.max_text_chars)
                 for i, line in enumerate(context or [])]
        ents = validation.check_metadata(entities, "entities")
        st = validation.check_metadata(state, "state")
        meta = check_metadata(metadata)
        existing = self._own_session()
        now = now_ms()
        wm = existing.working_memory if existing is not None and not replace else WorkingMemory()
        old_meta = existing.metadata if existing is not None and not replace else {}
        session = Session(
            session_id=scope.thread_session_id(), **Session.scope_fields(scope),
            working_memory=WorkingMemory(context=(wm.context + lines)[-config.session_context_limit:],
                                         entities={**wm.entities, **ents}, state={**wm.state, **st}),
            metadata={**old_meta, **meta}, compressed=bool(existing.compressed) if existing is not None else False,
            created_at=existing.created_at if existing is not None else now,
            expires_at=now + config.session_ttl_ms, last_accessed_at=now)
        self._engine.put_session(session)
        self._engine.invalidate(scope)
        return session

    def compress_thread(self, *, max_chars: int = 1800) -> dict[str, Any]:
        """Summarise the thread into one ``archive`` row of this scope (so the scope's reads find
        it): an extractive summary of its latest user and assistant lines (no model call, at most
        ``max_chars``), with ``keyFacts`` the engine's fact extractor finds in the whole thread;
        the working session is marked compressed. :class:`NotFoundError` when the thread has no
        messages. Returns ``{sessionId, summary, keyFacts, archiveRowId, entitiesExtracted}``."""
        scope = self._require_thread()
        msgs = self.messages()
        if not msgs:
            raise NotFoundError(f"thread {scope.thread_id!r} has no messages in this scope")
        lines = [f"{m.role}: {collapse_ws(m.content)}" for m in msgs if m.role in ("user", "assistant")]
        picked: builtins.list[str] = []
        for line in reversed(lines):  # newest lines first, as many as fit
            if sum(len(x) + 1 for x in picked) + len(line) > max_chars:
                if not picked:
                    picked.append(truncate(line, max_chars))
                break
            picked.append(line)
        summary = "\n".join(reversed(picked)) or truncate(" ".join(m.content for m in msgs), max_chars)
        extractor = self._engine.extractor
        facts = list(dict.fromkeys(f.fact for f in extractor.extract(msgs))) if extractor is not None else []
        meta = {"sessionId": scope.thread_id, "type": "session_compression", "keyFacts": facts,
                "messageCount": len(msgs)}
        row_id = self.add([summary], metadatas=[meta], source="archive")[0]
        session = self._own_session()
        if session is not None and not session.compressed:
            self._engine.put_session(session.model_copy(update={"compressed": True}))
        return {"sessionId": scope.thread_id, "summary": summary, "keyFacts": facts, "archiveRowId": row_id,
                "entitiesExtracted": len(facts)}
