"""Conversions between the engine's shapes and LlamaIndex's (private).

* :func:`candidate_to_node`: an engine :class:`Candidate` as a ``NodeWithScore`` whose
  metadata is the one recalled-memory schema of :func:`manowar_memory.tools.memory_view`
  (``id``, ``layer``, ``score``, ``created_at``, ``trust``, ``source``, ``lanes``,
  ``decisions`` when asked), the same keys as the LangChain adapter's Documents.
* :func:`node_to_candidate`: any ``NodeWithScore`` (ours or another retriever's) as a
  Candidate, so the engine's ranking stages and packer can run on it.
* :func:`with_trace`: a copy of a node with a new score and the ranking trace recorded.
* :func:`chat_messages_to_engine`: LlamaIndex ``ChatMessage`` objects as engine messages
  (roles through :func:`manowar_memory.scoped.chat_role`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from datetime import UTC, date, datetime
from typing import Any

from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.schema import MetadataMode, NodeWithScore, TextNode

from manowar_memory.candidates import Candidate, relevance
from manowar_memory.records import LAYERS, Layer
from manowar_memory.scoped import chat_role
from manowar_memory.tools import memory_view

__all__ = [
    "TIME_KEYS",
    "TRACE_KEY",
    "candidate_to_node",
    "chat_messages_to_engine",
    "message_text",
    "node_to_candidate",
    "parse_timestamp",
    "with_trace",
]

TRACE_KEY = "manowar_trace"
"""Node metadata key where the postprocessors record what each stage did (hidden from the LLM)."""

TIME_KEYS = ("created_at", "createdAt", "creation_date", "last_modified_date", "timestamp", "date")
"""Metadata keys tried, in order, for a node's timestamp when no ``time_key`` is given."""


def parse_timestamp(value: Any) -> int | None:
    """Epoch milliseconds from an int/float (seconds or milliseconds), a digit string,
    an ISO 8601 string, a ``date`` or a ``datetime`` (naive means UTC); None when unusable."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, datetime):
        stamp = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
        return int(stamp.timestamp() * 1000)
    if isinstance(value, date):
        return int(datetime(value.year, value.month, value.day, tzinfo=UTC).timestamp() * 1000)
    if isinstance(value, (int, float)):
        if not math.isfinite(value) or value <= 0:
            return None
        # below 1e11 it is seconds (1e11 s is the year 5138; 1e11 ms is 1973)
        return int(value * 1000) if value < 1e11 else int(value)
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return None
        try:
            return parse_timestamp(float(text))
        except ValueError:
            pass
        try:
            return parse_timestamp(datetime.fromisoformat(text.replace("Z", "+00:00")))
        except ValueError:
            return None
    return None


def _unit_number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    number = float(value)
    return number if 0.0 <= number <= 1.0 else None


def candidate_to_node(cand: Candidate, *, default_trust: str = "learned", decisions: bool = False) -> NodeWithScore:
    """An engine candidate as a ``NodeWithScore`` whose id is the memory's id and whose
    metadata is :func:`~manowar_memory.tools.memory_view`'s schema. All of it is hidden from
    what the LLM and embedders see, so prompts hold only the memory text."""
    view = memory_view(cand, default_trust=default_trust, decisions=decisions)
    metadata = dict(view["metadata"])
    hidden = list(metadata)
    node = TextNode(
        id_=cand.id, text=view["text"], metadata=metadata,
        excluded_embed_metadata_keys=hidden, excluded_llm_metadata_keys=hidden,
    )
    return NodeWithScore(node=node, score=relevance(cand))


def _node_timestamp(metadata: Mapping[str, Any], time_key: str | None) -> int | None:
    if time_key is not None:
        return parse_timestamp(metadata.get(time_key))
    for key in TIME_KEYS:
        stamp = parse_timestamp(metadata.get(key))
        if stamp is not None:
            return stamp
    return None


def node_to_candidate(
    nws: NodeWithScore, *, default_layer: Layer = "vectors", time_key: str | None = None
) -> Candidate:
    """Any scored node as a Candidate (``record`` holds the original ``NodeWithScore``).

    Nodes from :class:`~llama_index_manowar.ManowarRetriever` keep their layer and time;
    other nodes get ``default_layer`` and a timestamp from ``time_key`` (or the first usable
    of :data:`TIME_KEYS`). A node without a score counts as 0. The packer reads its metadata
    as foreign (:func:`manowar_memory.scoped.pack_context` with ``foreign=True``): a trust it
    states can lower the node's level (``external`` stays ``external``), never raise it above
    the default, so every node packs inside the untrusted-content wrapper.
    """
    node = nws.node
    metadata = node.metadata if isinstance(node.metadata, Mapping) else {}
    layer = metadata.get("layer")
    source = metadata.get("source")
    cand = Candidate(
        layer=layer if layer in LAYERS else default_layer,
        id=node.node_id,
        text=node.get_content(metadata_mode=MetadataMode.NONE),
        score=float(nws.score) if nws.score is not None else 0.0,
        created_at=_node_timestamp(metadata, time_key),
        confidence=_unit_number(metadata.get("confidence")),
        importance=_unit_number(metadata.get("importance")),
        source=source if isinstance(source, str) else None,
        metadata=dict(metadata),
        embedding=list(node.embedding) if node.embedding is not None else None,
        record=nws,
    )
    previous = metadata.get(TRACE_KEY)
    if isinstance(previous, Mapping):
        cand.trace.update({k: v for k, v in previous.items() if isinstance(v, (int, float))})
    return cand


def with_trace(
    nws: NodeWithScore, score: float | None, trace: Mapping[str, Any], *, text: str | None = None
) -> NodeWithScore:
    """A copy of ``nws`` with ``score``, ``trace`` merged into ``metadata['manowar_trace']``
    and optionally new text. The original node is never mutated (it may be shared with a
    docstore or another pipeline)."""
    node = nws.node.model_copy()
    metadata = dict(node.metadata)
    previous = metadata.get(TRACE_KEY)
    metadata[TRACE_KEY] = {**(dict(previous) if isinstance(previous, Mapping) else {}), **trace}
    node.metadata = metadata
    node.excluded_llm_metadata_keys = list(dict.fromkeys([*node.excluded_llm_metadata_keys, TRACE_KEY]))
    node.excluded_embed_metadata_keys = list(dict.fromkeys([*node.excluded_embed_metadata_keys, TRACE_KEY]))
    if text is not None:
        node.set_content(text)
    return NodeWithScore(node=node, score=score)


def message_text(message: ChatMessage) -> str:
    """The text of a chat message (its text blocks joined), stripped."""
    content = message.content
    return content.strip() if isinstance(content, str) else ""


def chat_messages_to_engine(messages: Iterable[ChatMessage]) -> list[dict[str, str]]:
    """Engine messages (``{'role', 'content'}``) from chat messages. Roles go through
    :func:`~manowar_memory.scoped.chat_role` (developer → system, function → tool,
    chatbot/model → assistant; an unknown role raises ``InvalidInputError``); messages
    without text (such as a bare tool-call request) are left out."""
    out: list[dict[str, str]] = []
    for message in messages:
        role = chat_role(message.role)
        text = message_text(message)
        if text:
            out.append({"role": role, "content": text})
    return out
