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
from manowar_memory import LAYERS, Candidate, Message, Scope
from manowar_memory.scope import ScopeLike

__all__ = [
    "candidate_to_document",
    "coerce_scope",
    "document_to_candidate",
    "documents_to_candidates",
    "message_text",
    "messages_to_turn",
    "parse_timestamp_ms",
    "provenance_of",
    "stored_to_message",
]


def coerce_scope(value: ScopeLike) -> Scope:
    """A :class:`~manowar_memory.Scope` from a Scope or a loose mapping (reference aliases accepted)."""
    return Scope.coerce(value)


# ---------------------------------------------------------------- messages


def message_text(message: BaseMessage) -> str:
    """The plain text of a message (text blocks of list content joined; other blocks dropped)."""
    content = message.content
    if isinstance(content, str):
        return content
    return message.text if hasattr(message, "text") else str(content)


def _role(message: BaseMessage) -> str | None:
    if isinstance(message, HumanMessage):
        return "user"
    if isinstance(message, AIMessage):
        return "assistant"
    if isinstance(message, SystemMessage):
        return "system"
    if isinstance(message, ToolMessage):
        return "tool"
    if isinstance(message, ChatMessage):
        role = message.role.lower()
        return {"human": "user", "ai": "assistant"}.get(role, role) if role in (
            "user", "assistant", "system", "tool", "human", "ai") else None
    return None


def _tool_call_line(call: Mapping[str, Any]) -> str:
    args = json.dumps(call.get("args") or {}, ensure_ascii=False, sort_keys=True, default=str)
    return f"[tool call] {call.get('name', 'tool')}({args})"


def messages_to_turn(messages: Sequence[BaseMessage]) -> list[dict[str, Any]]:
    """LangChain messages as the engine's message dicts (``role``, ``content``, ``tool_calls``).

    An AI message that only calls tools gets a ``[tool call] name({...})`` line as content
    (the engine needs non-blank content) and keeps the calls in ``tool_calls``; a tool
    message keeps its ``tool_call_id`` and name there too, so the history round-trips.
    Messages with no text and no tool calls, and message types with no engine role, are skipped.
    """
    out: list[dict[str, Any]] = []
    for message in messages:
        role = _role(message)
        if role is None:
            continue
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


def _ms_to_iso(ms: int | None) -> str | None:
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat()


def provenance_of(cand: Candidate) -> dict[str, Any]:
    """Where a candidate came from: the memory id, layer, source, times, turn/session and extractor."""
    meta = cand.metadata or {}
    record = cand.record
    prov: dict[str, Any] = {
        "memory_id": cand.id,
        "layer": cand.layer,
        "source": cand.source,
        "created_at": cand.created_at,
        "created_at_iso": _ms_to_iso(cand.created_at),
        "updated_at": getattr(record, "updated_at", None),
        "thread_id": getattr(record, "thread_id", None),
        "user_address": getattr(record, "user_address", None),
        "embedding_model": getattr(record, "embedding_model", None),
        "session_id": meta.get("sessionId") or getattr(record, "session_id", None),
        "turn_id": meta.get("turnId") or meta.get("sourceTurnId"),
        "extractor": meta.get("extractor"),
        "fact_type": meta.get("factType"),
        "fact_hash": meta.get("factHash"),
        "type": meta.get("type"),
    }
    return {k: v for k, v in prov.items() if v is not None}


def candidate_to_document(cand: Candidate, scope: Scope, *, degradations: Sequence[str] = ()) -> Document:
    """A retrieved candidate as a Document: ``layer``, ``score``, ``scope`` and ``provenance`` in metadata."""
    metadata: dict[str, Any] = {
        "id": cand.id,
        "layer": cand.layer,
        "score": float(cand.score),
        "source": cand.source,
        "created_at": cand.created_at,
        "scope": scope.as_dict(),
        "provenance": provenance_of(cand),
        "lanes": dict(cand.lanes),
        "trace": dict(cand.trace),
        "confidence": cand.confidence,
        "importance": cand.importance,
        "access_count": cand.access_count,
        "memory_metadata": dict(cand.metadata or {}),
    }
    if degradations:
        metadata["degradations"] = list(degradations)
    return Document(id=cand.id, page_content=cand.text, metadata=metadata)


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
    if created is None and isinstance(meta.get("provenance"), Mapping):
        created = parse_timestamp_ms(meta["provenance"].get("created_at"))
    layer = meta.get(layer_key)
    layer = layer if layer in LAYERS else default_layer
    conf = meta.get("confidence")
    imp = meta.get("importance")
    access = meta.get("access_count")
    return Candidate(
        layer=layer,  # type: ignore[arg-type]
        id=str(doc.id or meta.get("id") or f"doc-{index}"),
        text=doc.page_content,
        score=score,
        created_at=created,
        access_count=int(access) if isinstance(access, int) and not isinstance(access, bool) else 0,
        confidence=float(conf) if isinstance(conf, (int, float)) and not isinstance(conf, bool) else None,
        importance=float(imp) if isinstance(imp, (int, float)) and not isinstance(imp, bool) else None,
        source=meta.get("source") if isinstance(meta.get("source"), str) else None,
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
    scored = n > 0 and all(s is not None for s in raw)
    out: list[Candidate] = []
    seen: dict[str, int] = {}
    for i, doc in enumerate(documents):
        if scored:
            score = float(raw[i])  # type: ignore[arg-type]
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
