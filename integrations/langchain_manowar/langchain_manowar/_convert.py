"""Conversions shared by the adapters: scopes, chat messages, candidates and documents."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from langchain_core.documents import Document
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)

from manowar_memory import LAYERS, Candidate, MemoryRecord, Message, Scope, ScopeError
from manowar_memory.scope import ScopeLike
from manowar_memory.scoped import chat_role
from manowar_memory.tools import memory_view

__all__ = [
    "coerce_scope",
    "document_to_candidate",
    "documents_to_candidates",
    "identity",
    "memory_document",
    "message_text",
    "messages_to_turn",
    "parse_timestamp_ms",
    "stored_to_message",
]


def coerce_scope(value: ScopeLike) -> Scope:
    """A :class:`~manowar_memory.Scope` from a Scope or a loose mapping (reference aliases accepted)."""
    return Scope.coerce(value)


def _field(source: Any, name: str) -> str | None:
    """``source[name]`` or ``source.name`` as an id; None when absent. A blank id is refused."""
    if source is None:
        return None
    value = source.get(name) if isinstance(source, Mapping) else getattr(source, name, None)
    if value is None:
        return None
    if not isinstance(value, (str, int)) or isinstance(value, bool):
        raise ScopeError(f"{name} of the run must be a string id, got {type(value).__name__}")
    text = str(value)
    if not text.strip():
        raise ScopeError(f"{name} of the run is blank; pass the real id (or leave it out)")
    return text


def identity(context: Any, configurable: Mapping[str, Any] | None) -> tuple[str | None, str | None]:
    """A run's ``(user_id, thread_id)``: from its context (``runtime.context``, an object or a
    mapping) first, then from ``config["configurable"]``."""
    user = _field(context, "user_id") or _field(configurable, "user_id")
    thread = _field(context, "thread_id") or _field(configurable, "thread_id")
    return user, thread


# ---------------------------------------------------------------- messages


def message_text(message: BaseMessage) -> str:
    """The plain text of a message (text blocks of list content joined; other blocks dropped)."""
    content = message.content
    if isinstance(content, str):
        return content
    return message.text if hasattr(message, "text") else str(content)


def _role(message: BaseMessage) -> str:
    """The engine role of a message, by :func:`manowar_memory.scoped.chat_role` (the one rule of
    every adapter): unknown roles raise :class:`~manowar_memory.InvalidInputError`."""
    if isinstance(message, ChatMessage):
        return chat_role(message.role)
    for cls, role in ((HumanMessage, "user"), (AIMessage, "assistant"), (SystemMessage, "system"),
                      (ToolMessage, "tool")):
        if isinstance(message, cls):  # chunks too (their ``type`` is the class name)
            return role
    return chat_role(message.type)


def _tool_call_line(call: Mapping[str, Any]) -> str:
    args = json.dumps(call.get("args") or {}, ensure_ascii=False, sort_keys=True, default=str)
    return f"[tool call] {call.get('name', 'tool')}({args})"


def messages_to_turn(messages: Sequence[BaseMessage]) -> list[dict[str, Any]]:
    """LangChain messages as the engine's message dicts (``role``, ``content``, ``tool_calls``).

    An AI message that only calls tools gets a ``[tool call] name({...})`` line as content
    (the engine needs non-blank content) and keeps the calls in ``tool_calls``; a tool
    message keeps its ``tool_call_id`` and name there too, so the history round-trips.
    Messages with no text and no tool calls are skipped; a role the engine does not know
    (a ``ChatMessage(role="critic")``) raises :class:`~manowar_memory.InvalidInputError`.
    """
    out: list[dict[str, Any]] = []
    for message in messages:
        role = _role(message)
        text = message_text(message).strip()
        entry: dict[str, Any] = {"role": role}
        if isinstance(message, AIMessage) and message.tool_calls:
            calls = [{"id": c.get("id"), "name": c.get("name"), "args": c.get("args") or {}}
                     for c in message.tool_calls]
            entry["tool_calls"] = calls
            if not text:
                text = "\n".join(_tool_call_line(c) for c in calls)
        elif isinstance(message, ToolMessage):
            entry["tool_calls"] = [{"id": message.tool_call_id, "name": message.name, "status": message.status}]
        if not text:
            continue
        entry["content"] = text
        out.append(entry)
    return out


def stored_to_message(message: Message) -> BaseMessage:
    """An engine :class:`~manowar_memory.Message` as the matching LangChain message."""
    calls = message.tool_calls or []
    extra = {"timestamp": message.timestamp}
    if message.role == "user":
        return HumanMessage(content=message.content, additional_kwargs=extra)
    if message.role == "system":
        return SystemMessage(content=message.content, additional_kwargs=extra)
    if message.role == "tool":
        first = calls[0] if calls else {}
        return ToolMessage(
            content=message.content, tool_call_id=str(first.get("id") or "unknown"),
            name=first.get("name"), status=first.get("status") or "success", additional_kwargs=extra,
        )
    tool_calls = [
        {"id": c.get("id"), "name": str(c.get("name") or "tool"), "args": dict(c.get("args") or {}),
         "type": "tool_call"}
        for c in calls if isinstance(c, Mapping)
    ]
    content = message.content
    if tool_calls and all(line.startswith("[tool call] ") for line in content.splitlines()):
        content = ""  # the placeholder written by messages_to_turn
    return AIMessage(content=content, tool_calls=tool_calls, additional_kwargs=extra)


# ---------------------------------------------------------------- candidates and documents


def memory_document(item: Candidate | MemoryRecord, *, default_trust: str = "learned",
                    decisions: bool = False, degradations: Sequence[str] = ()) -> Document:
    """A recalled memory as a Document: ``metadata`` is :func:`manowar_memory.tools.memory_view`'s
    schema (``id``, ``layer``, ``score``, ``created_at``, ``trust``, ``source``, ``lanes``, and
    ``decisions`` when asked), the same keys a LlamaIndex node of the same memory carries;
    ``degradations`` is added when the search degraded."""
    view = memory_view(item, default_trust=default_trust, decisions=decisions)
    metadata = dict(view["metadata"])
    if degradations:
        metadata["degradations"] = list(degradations)
    return Document(id=metadata["id"], page_content=view["text"], metadata=metadata)


def parse_timestamp_ms(value: Any) -> int | None:
    """Milliseconds since the epoch from ms/seconds numbers, ISO strings or datetimes (else None).

    A number above 10^11 is taken as milliseconds, otherwise as seconds.
    """
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, datetime):
        stamp = value if value.tzinfo else value.replace(tzinfo=UTC)
        return int(stamp.timestamp() * 1000)
    if isinstance(value, (int, float)):
        if not math.isfinite(value):
            return None
        return int(value) if abs(value) > 1e11 else int(value * 1000)
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return None
        try:
            return parse_timestamp_ms(float(text))
        except ValueError:
            pass
        try:
            return parse_timestamp_ms(datetime.fromisoformat(text.replace("Z", "+00:00")))
        except ValueError:
            return None
    return None


DEFAULT_TIME_KEYS: tuple[str, ...] = ("created_at", "createdAt", "timestamp", "date", "created")


def _score(doc: Document, score_key: str) -> float | None:
    value = doc.metadata.get(score_key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def document_to_candidate(
    doc: Document,
    index: int,
    *,
    score: float,
    time_keys: Sequence[str] = DEFAULT_TIME_KEYS,
    layer_key: str = "layer",
    default_layer: str = "vectors",
) -> Candidate:
    """Any Document as a ranking :class:`~manowar_memory.Candidate` (the document rides in ``record``)."""
    meta = doc.metadata or {}
    created = None
    for key in time_keys:
        created = parse_timestamp_ms(meta.get(key))
        if created is not None:
            break
    layer = meta.get(layer_key)
    layer = layer if layer in LAYERS else default_layer
    conf = meta.get("confidence")
    imp = meta.get("importance")
    access = meta.get("access_count")
    return Candidate(
        layer=layer,  # type: ignore[arg-type]  # default_layer is the caller's str, passed through unchecked
        id=str(doc.id or meta.get("id") or f"doc-{index}"),
        text=doc.page_content,
        score=score,
        created_at=created,
        access_count=int(access) if isinstance(access, int) and not isinstance(access, bool) else 0,
        confidence=float(conf) if isinstance(conf, (int, float)) and not isinstance(conf, bool) else None,
        importance=float(imp) if isinstance(imp, (int, float)) and not isinstance(imp, bool) else None,
        source=meta.get("source") if isinstance(meta.get("source"), str) else None,
        metadata=dict(meta),
        record=doc,
    )


def documents_to_candidates(
    documents: Sequence[Document],
    *,
    score_key: str = "score",
    unscored: str = "rank",
    time_keys: Sequence[str] = DEFAULT_TIME_KEYS,
    layer_key: str = "layer",
    default_layer: str = "vectors",
) -> tuple[list[Candidate], bool]:
    """Candidates for ``documents`` (ids made unique) and whether every document carried a score.

    When any document lacks a numeric ``metadata[score_key]``, scores come from the input
    order instead: ``unscored="rank"`` gives ``1 - i/n`` (the retriever's order is the only
    relevance signal), ``unscored="equal"`` gives 1.0 to all (no claim of dominance).
    """
    n = len(documents)
    raw = [_score(d, score_key) for d in documents]
    given = [s for s in raw if s is not None]
    scored = n > 0 and len(given) == n
    out: list[Candidate] = []
    seen: dict[str, int] = {}
    for i, doc in enumerate(documents):
        if scored:
            score = given[i]
        elif unscored == "equal":
            score = 1.0
        else:
            score = 1.0 - i / n
        cand = document_to_candidate(doc, i, score=score, time_keys=time_keys, layer_key=layer_key,
                                     default_layer=default_layer)
        count = seen.get(cand.id, 0)
        seen[cand.id] = count + 1
        if count:
            cand.id = f"{cand.id}#{count}"
        out.append(cand)
    return out, scored
