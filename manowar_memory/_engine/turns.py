"""Recording conversation turns: ``post_turn`` and its working session."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from .._notes import collect
from .._util import as_str, collapse_ws, content_hash, now_ms, truncate
from ..errors import InvalidInputError, ScopeError
from ..records import MemoryRecord, Message, Session, Transcript, WorkingMemory
from ..results import PostTurnResult
from ..scope import Scope, ScopeLike
from ..stores.base import TurnRows
from ..validation import check_json_value, check_optional_text, check_text, check_timestamp
from .core import _client_stamped
from .writes import EngineWrites


class EngineTurns(EngineWrites):
    """Recording conversation turns: ``post_turn`` and its working session."""

    def post_turn(
        self,
        scope: ScopeLike,
        messages: Sequence[Mapping[str, Any] | Message],
        tool_calls: Sequence[Mapping[str, Any]] | None = None,
        *,
        session_id: str | None = None,
        turn_id: str | None = None,
        summary: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        extract_facts: bool = True,
    ) -> PostTurnResult:
        """Record a turn: transcript (scene), working buffer and a session summary row
        in-band; fact extraction (graph) queued in the background (see :meth:`flush`).

        The summary is embedded before anything is written, so an embedder failure raises
        :class:`EmbeddingError` and leaves the store untouched. The transcript, the working
        buffer and the session row are then written in one atomic store write, after the
        turns committed before it (concurrent calls on a thread queue, none is lost). A turn
        is stored once per ``turn_id`` (given none, one is derived from client timestamps,
        else made up: see :meth:`_derived_turn_id`): repeating a call, also after a failure,
        answers ``created=False`` and writes nothing.
        """
        scope = Scope.coerce(scope)
        now = now_ms()
        msgs = self._normalize_messages(messages, tool_calls, now, max_chars=self.config.max_text_chars)
        if not msgs:
            raise InvalidInputError("messages must hold at least one message with non-blank content")
        if session_id is None and scope.thread_id is None:
            raise ScopeError("post_turn needs a thread: set Scope(thread_id=...) or pass session_id=...")
        self.check_conversation_scope(scope, "post_turn")
        session_id = check_optional_text(session_id, "session_id", max_chars=1000)
        turn_id = check_optional_text(turn_id, "turn_id", max_chars=1000)
        summary = check_optional_text(summary, "summary", max_chars=self.config.max_text_chars)
        caller_meta = {**self._metadata(scope.metadata, "scope metadata"), **self._metadata(metadata)}
        sid = as_str(session_id) or scope.thread_session_id()
        thread_id = scope.thread_id or sid
        tid = as_str(turn_id) or self._derived_turn_id(scope, sid, msgs, _client_stamped(messages, tool_calls))
        turn_summary = as_str(summary) or self._compact_summary(msgs)
        vectors = self._embed_documents([turn_summary])
        meta = {**caller_meta, "type": "agent_memory_turn", "turnId": tid, "sessionId": sid}
        thread_scope = scope.with_thread(thread_id)
        # the turn happened when its messages were said (client timestamps; never in the future),
        # not when it was stored: an imported conversation keeps its dates in the packed context
        said_at = min(now, max(m.timestamp for m in msgs))
        # checked here, before any write: build() below only assembles rows
        record = self._new_record(scope, turn_summary, source="session", metadata=meta, created_at=said_at,
                                  embedding=vectors[0] if vectors else None, thread_id=thread_id)
        record = record.model_copy(update={"id": MemoryRecord.make_id(scope.agent_wallet, f"{sid}\x00{tid}", now)})

        def build(existing: Transcript | None, live: Session | None) -> TurnRows:
            _check_owner(scope, existing, f"session {sid!r}", "use a session id of your own")
            history = list(existing.messages) if existing else []
            transcript = self._next_transcript(existing, thread_scope, sid, history + msgs, meta, now)
            session = self._working_session(thread_scope, live, msgs, meta, tid, sid, now)
            return TurnRows(transcript, session, record.model_copy(update={"context": self._turn_context(history)}))

        with collect() as cache_notes:
            written = self.store.append_turn(scope.agent_wallet, sid, thread_scope.thread_session_id(), tid, build)
            if written.created:
                self.invalidate(scope)
        queued = False
        if (written.created and extract_facts and self.extractor is not None
                and any(m.role == "user" for m in msgs)):
            self._submit(self._extract_and_index, scope.with_thread(thread_id), msgs, tid, dict(metadata or {}),
                         written.memory_id)
            queued = True
        notes = ([self.keyword_only_note] if self.keyword_only_note else []) + list(cache_notes)
        new = written.created
        return PostTurnResult(
            session_id=sid, thread_id=thread_id, turn_id=tid, vector_id=written.memory_id, created=new,
            seq=written.seq, stored={"transcript": new, "working": new, "vector": new},
            queued={"facts": queued}, degradations=notes,
        )

    def _next_transcript(self, existing: Transcript | None, thread_scope: Scope, sid: str, all_msgs: list[Message],
                         meta: dict[str, Any], now: int) -> Transcript:
        """The thread's transcript after a turn: ``existing`` (or None) holding ``all_msgs``."""
        return Transcript(
            session_id=sid, **Transcript.scope_fields(thread_scope), messages=all_msgs,
            summary=self._compact_summary(all_msgs), token_count=(existing.token_count if existing else 0),
            metadata={**(existing.metadata if existing else {}), **meta, "updatedAt": now},
            created_at=existing.created_at if existing else min(now, min(m.timestamp for m in all_msgs)),
        )

    @staticmethod
    def _derived_turn_id(scope: Scope, session_id: str, msgs: Sequence[Message], stable: bool) -> str:
        """The id of a turn given none. When every message (and tool call) carries the
        client's own timestamp, a hash of the scope, the session and the messages with their
        timestamps: a retry of the same turn gets the same id, and two turns that say the same
        words at different times do not. Otherwise a fresh random id: the same words sent
        twice may be two real turns ("yes", "yes"), so nothing without a stable client value
        is merged; pass ``turn_id`` to make such retries safe."""
        if not stable:
            return "turn_" + uuid.uuid4().hex
        parts = [scope.agent_wallet, scope.user_address, scope.mode, scope.hai_id, session_id,
                 [[m.role, m.content, m.timestamp, m.tool_calls] for m in msgs]]
        return "turn_" + content_hash(json.dumps(parts, ensure_ascii=True, sort_keys=True, default=str))

    @staticmethod
    def _normalize_messages(
        messages: Sequence[Mapping[str, Any] | Message], tool_calls: Sequence[Mapping[str, Any]] | None, now: int,
        *, max_chars: int | None = None,
    ) -> list[Message]:
        """Checked messages, oldest first: valid text within ``max_chars``, timestamps in range
        (a missing one is ``now`` plus the position), JSON tool-call payloads."""
        given: object = messages  # callers outside the type checker pass anything
        if isinstance(given, (str, bytes)) or not isinstance(given, Sequence):
            raise InvalidInputError("messages must be a list of {'role': ..., 'content': ...} dicts")
        out: list[Message] = []
        for i, raw in enumerate(messages):
            if isinstance(raw, Message):
                check_text(raw.content, f"messages[{i}].content", max_chars=max_chars, allow_blank=True)
                raw = raw.model_copy(update={
                    "timestamp": check_timestamp(raw.timestamp, f"messages[{i}].timestamp"),
                    "tool_calls": check_json_value(raw.tool_calls, f"messages[{i}].tool_calls"),
                })
                out.append(raw)
                continue
            if not isinstance(raw, Mapping):
                raise InvalidInputError(f"messages[{i}] must be a dict with 'role' and 'content'")
            role = raw.get("role")
            if role not in ("user", "assistant", "system", "tool"):
                raise InvalidInputError(f"messages[{i}].role must be user, assistant, system or tool, got {role!r}")
            content = as_str(raw.get("content"))
            if content is None:
                raise InvalidInputError(f"messages[{i}].content must be a non-blank string")
            check_text(content, f"messages[{i}].content", max_chars=max_chars)
            ts = raw.get("timestamp")
            stamp = check_timestamp(ts, f"messages[{i}].timestamp") if ts is not None else now + i
            calls = raw.get("tool_calls", raw.get("toolCalls"))
            if calls is not None:
                if not isinstance(calls, list) or not all(isinstance(c, Mapping) for c in calls):
                    raise InvalidInputError(f"messages[{i}].tool_calls must be a list of dicts (one per call), "
                                            f"got {calls!r:.80}")
                calls = check_json_value(list(calls), f"messages[{i}].tool_calls")
            out.append(Message(role=role, content=content, timestamp=stamp, tool_calls=calls))
        for j, event in enumerate(tool_calls or []):
            if not isinstance(event, Mapping):
                raise InvalidInputError(f"tool_calls[{j}] must be a dict with a 'name'")
            name = as_str(event.get("name") or event.get("toolName") or event.get("tool"))
            if name is None:
                raise InvalidInputError(f"tool_calls[{j}] needs a 'name'")
            args = event.get("args", event.get("input"))
            args = check_json_value(args, f"tool_calls[{j}].args") if isinstance(args, Mapping) else {}
            status = as_str(event.get("status")) or "completed"
            result = event.get("result", event.get("output"))
            text = f"tool:{name} status:{status}" + (f" result:{str(result)[:2000]}" if result is not None else "")
            check_text(text, f"tool_calls[{j}]", max_chars=max_chars)
            ts = event.get("timestamp")
            stamp = check_timestamp(ts, f"tool_calls[{j}].timestamp") if ts is not None else now + len(out) + j
            out.append(Message(role="tool", content=text, timestamp=stamp, tool_calls=[{"name": name, "args": args}]))
        out.sort(key=lambda m: m.timestamp)
        return out

    def _turn_context(self, history: Sequence[Message]) -> str | None:
        """A turn row's thread context: the exchange it follows (the session's last
        ``thread_context_messages`` user and assistant messages before it, at least two, each
        cut to ``thread_context_chars``), so "Yes, in June" is found by the question."""
        cap = self.config.thread_context_chars
        if not self.config.thread_context or cap <= 0:
            return None
        count = max(2, self.config.thread_context_messages)
        said = [collapse_ws(m.content) for m in history if m.role in ("user", "assistant") and m.content.strip()]
        return " ".join(text[:cap].strip() for text in said[-count:]).strip() or None

    @staticmethod
    def _compact_summary(msgs: Sequence[Message]) -> str:
        picked = [m for m in msgs if m.role in ("user", "assistant", "tool")][-6:]
        lines = [f"{m.role}: {truncate(collapse_ws(m.content), 500 if m.role == 'tool' else 800)}" for m in picked]
        return truncate("\n".join(lines), 1800) or "\n".join(f"{m.role}: {m.content}" for m in msgs)

    def _working_session(
        self, scope: Scope, existing: Session | None, msgs: Sequence[Message], meta: dict[str, Any], turn_id: str,
        session_id: str, now: int,
    ) -> Session:
        """The thread's working session after a turn: ``existing`` (the live one, or None) with
        the turn's user and assistant lines appended, cut to ``session_context_limit``."""
        if existing is not None:
            _check_owner(scope, existing, f"working session {existing.session_id!r}", "use a thread of your own")
        lines = [truncate(f"{m.role}: {m.content}", 1000) for m in msgs if m.role in ("user", "assistant")]
        wm = existing.working_memory if existing else WorkingMemory()
        context = (wm.context + lines)[-self.config.session_context_limit:]
        state = {**wm.state, "lastSessionId": session_id, "lastTurnAt": now, "turnId": turn_id}
        return Session(
            session_id=scope.thread_session_id(), **Session.scope_fields(scope),
            working_memory=WorkingMemory(context=context, entities=dict(wm.entities), state=state),
            metadata={**(existing.metadata if existing else {}), **meta},
            created_at=existing.created_at if existing else now,
            expires_at=now + self.config.session_ttl_ms, last_accessed_at=now,
        )


def _check_owner(scope: Scope, row: Transcript | Session | None, what: str, advice: str) -> None:
    """A thread's stored transcript or session is written only by its owner: the same user, mode and HAI."""
    if row is not None and (row.user_address, row.mode, row.hai_id) != (scope.user_address, scope.mode, scope.hai_id):
        raise InvalidInputError(f"{what} belongs to another user, mode or HAI of this agent; {advice}")
