"""``ManowarStore``: a LangGraph ``BaseStore`` backed by the engine (and ``ManowarKVStore``, a
LangChain key-value store on top of it).

Each item ``(namespace, key) -> value`` is one keyed memory row of the namespace's scope
(``ScopedMemory.upsert`` / ``get_keys`` / ``delete_keys``; the row key is derived from the
namespace and the key; ``source="knowledge"``, so it is searched in the vectors layer).

Which scope a namespace belongs to (one store serves every user of an app):

* A store built with a user scope is bound to that user: every namespace is the user's.
* A store built with an agent-level scope (no user) reads the user from the namespace:
  by default its second label (``user_position=1``), so LangGraph's ``("memories", user_id)``
  idiom puts each user's items in that user's scope, where only that user's reads and
  recall (``pre_turn``) find them. ``namespace_scope`` maps other layouts (a callable that
  returns a user id, a scope of the store's agent, or None for a shared namespace).
  Namespaces shared by every user are shared only when the application says so:
  ``shared_namespaces=[("docs",), ...]`` (prefixes) or ``user_position=None`` (every
  namespace is the agent's shared space). A namespace that names no user, and a search or
  listing whose prefix does not reach the user's label, raise :class:`~manowar_memory.ScopeError`.

A store in a user's scope also reads the agent's shared (user-less) items; a put there
writes the user's own copy, which shadows the shared item for that user only, and a delete
removes only the user's own copy (the shared item shows through again). Its metadata holds:

* ``lg_kind: "item"`` (marks store rows), ``lg_namespace`` (the namespace as JSON, for
  exact lookups), ``lg_ns: {"d0": ..., "d1": ...}`` (one label per depth, for prefix
  filters), ``lg_depth``, ``lg_key``;
* ``lg_value`` (the value itself), ``lg_indexed`` (False for ``index=False`` puts) and
  ``lg_created_at`` (when the item was first put, kept across puts).

The row's text is built from the value: the configured index fields
(``index={"fields": [...]}``, LangGraph's path syntax; default ``["$"]``, the whole value
as JSON), or the ``index=[...]`` of a put. The engine embeds it with its own embedder, so
``search(query=...)`` is the engine's hybrid search (keyword lane + vector lane, RRF,
decay); a keyword-only engine still searches (keyword lane only).

Semantics follow LangGraph's stores: in one batch, reads see the state before the
batch's writes, and several writes to one key keep the last. ``search`` without a query
lists newest first; with a query, ranked hits come first (with ``score``), then, with
``fill_unranked`` (default, as ``InMemoryStore`` does with unindexed items), the other
matching items with ``score=None``. Filters on the value support equality and
``$eq``/``$ne``/``$gt``/``$gte``/``$lt``/``$lte``; simple equalities are pushed into the
engine's query. TTLs are not supported.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import threading
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from langchain_core.stores import BaseStore as KVBaseStore
from langgraph.store.base import (
    BaseStore,
    GetOp,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    get_text_at_path,
    tokenize_path,
)

try:
    from langgraph.store.base import validate_op_namespace
except ImportError:  # langgraph before the helper existed
    from langgraph.store.base import _validate_namespace_labels

    def validate_op_namespace(op: Op) -> None:
        """Check the labels an op carries (empty, non-string, '.' or NUL are refused)."""
        if isinstance(op, (GetOp, PutOp)):
            _validate_namespace_labels(tuple(op.namespace))
        elif isinstance(op, SearchOp):
            _validate_namespace_labels(tuple(op.namespace_prefix))
        elif isinstance(op, ListNamespacesOp):
            for condition in op.match_conditions or ():
                _validate_namespace_labels(tuple(condition.path))
from manowar_memory import MemoryEngine, MemoryRecord, Scope, ScopedMemory, ScopeError
from manowar_memory.candidates import relevance
from manowar_memory.scope import ScopeLike
from manowar_memory.scoped import DOC_KEY, TrustLevel

from ._convert import coerce_scope

__all__ = ["ManowarKVStore", "ManowarStore", "NamespaceScope", "item_key"]

#: Maps a namespace (or a search/listing prefix) to its owner: a user id, a scope of the
#: store's agent, or None for the agent's shared space; raise ScopeError when it cannot tell.
NamespaceScope = Callable[[tuple[str, ...]], "ScopeLike | str | None"]

KIND = "item"
_SAFE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def _ns_json(namespace: Sequence[str]) -> str:
    return json.dumps(list(namespace), ensure_ascii=False, separators=(",", ":"))


def _dt(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def item_key(namespace: Sequence[str], key: str) -> str:
    """The row key of a LangGraph item: its namespace and key, unambiguously."""
    return json.dumps([list(namespace), str(key)], ensure_ascii=False, separators=(",", ":"))


def _compare(item_value: Any, filter_value: Any) -> bool:
    """LangGraph's filter semantics: nested equality, lists element-wise, ``$`` operators."""
    if isinstance(filter_value, Mapping):
        if any(str(k).startswith("$") for k in filter_value):
            return all(_operator(item_value, op, v) for op, v in filter_value.items())
        if not isinstance(item_value, Mapping):
            return False
        return all(_compare(item_value.get(k), v) for k, v in filter_value.items())
    if isinstance(filter_value, (list, tuple)):
        return (
            isinstance(item_value, (list, tuple)) and len(item_value) == len(filter_value)
            and all(_compare(a, b) for a, b in zip(item_value, filter_value, strict=True))
        )
    return bool(item_value == filter_value)


def _operator(value: Any, op: str, operand: Any) -> bool:
    if op == "$eq":
        return bool(value == operand)
    if op == "$ne":
        return bool(value != operand)
    if op in ("$gt", "$gte", "$lt", "$lte"):
        try:
            a, b = float(value), float(operand)
        except (TypeError, ValueError):
            return False
        return {"$gt": a > b, "$gte": a >= b, "$lt": a < b, "$lte": a <= b}[op]
    raise ValueError(f"unsupported filter operator {op!r}; use $eq, $ne, $gt, $gte, $lt or $lte")


def _listing_prefix(op: ListNamespacesOp) -> tuple[str, ...]:
    """The prefix a listing asks for (empty when it has no prefix condition)."""
    return tuple(next((c.path for c in op.match_conditions or () if c.match_type == "prefix"), ()))


def _matches(ns: tuple[str, ...], condition: MatchCondition) -> bool:
    path = tuple(condition.path)
    if len(ns) < len(path):
        return False
    if condition.match_type == "prefix":
        pairs = zip(ns, path, strict=False)
    elif condition.match_type == "suffix":
        pairs = zip(reversed(ns), reversed(path), strict=False)
    else:
        raise ValueError(f"unsupported match type {condition.match_type!r}")
    return all(p == "*" or a == p for a, p in pairs)


class ManowarStore(BaseStore):
    """A LangGraph store whose items are memories of a :class:`MemoryEngine`.

    ``create_agent(model, tools, store=ManowarStore(engine=engine, scope=scope))`` makes it
    ``runtime.store`` for tools and middleware, and memory tools that read and write a
    LangGraph store (LangMem's ``create_manage_memory_tool`` / ``create_search_memory_tool``)
    work on it unchanged. Items written here are ordinary memories: the engine's recall
    (``pre_turn``, :class:`ManowarRetriever`) finds them in the vectors layer.

    ``index={"fields": [...]}`` chooses the value fields that make the searchable text
    (LangGraph path syntax; default the whole value as JSON). An ``embed`` entry is
    refused: the engine embeds with its own embedder (wrap a LangChain model with
    :class:`LangChainEmbedder` and give it to the engine). ``fill_unranked`` appends the
    non-matching items (``score=None``) after the ranked ones in a query search, as
    ``InMemoryStore`` does. ``max_scan`` bounds the rows read for listings and filtered scans.
    ``trust`` is the trust level of the items it writes (the application's choice).

    One store serves every user of an app: built with an agent-level scope (no user), it
    puts each namespace in the scope of the user the namespace names, by default its second
    label (``user_position=1``: ``("memories", user_id)``); ``namespace_scope`` maps other
    layouts, ``shared_namespaces`` lists the prefixes every user shares and
    ``user_position=None`` makes every namespace shared (the application's choice, never
    the default). A namespace naming no user raises :class:`~manowar_memory.ScopeError`.
    A store built with a user scope is bound to that user, whatever the namespace.

    Every read and write goes through ``engine.scoped(...)`` of the namespace's scope: in a
    user's scope the agent's shared items are read too, a put shadows a shared item with the
    user's own copy and a delete removes only the user's own copy.

    Example::

        store = ManowarStore(engine=engine, scope=Scope(agent_wallet="app"), shared_namespaces=[("docs",)])
        store.put(("memories", "ana"), "k1", {"text": "..."})  # ana's scope: only ana recalls it
    """

    supports_ttl = False

    def __init__(
        self,
        *,
        engine: MemoryEngine,
        scope: ScopeLike,
        trust: TrustLevel | None = None,
        index: Mapping[str, Any] | None = None,
        fill_unranked: bool = True,
        max_scan: int = 10_000,
        user_position: int | None = 1,
        shared_namespaces: Iterable[Sequence[str]] = (),
        namespace_scope: NamespaceScope | None = None,
    ) -> None:
        self.engine = engine
        self.scope: Scope = coerce_scope(scope)
        self.trust = trust
        self.memory: ScopedMemory = engine.scoped(self.scope, trust=trust)
        index = dict(index or {})
        if index.get("embed") is not None:
            raise ValueError(
                "ManowarStore embeds with the engine's embedder; configure it on the engine "
                "(MemoryEngine(embedder=LangChainEmbedder(your_embeddings))) instead of index['embed']"
            )
        self.index_fields: list[str] = list(index.get("fields") or ["$"])
        self.fill_unranked = fill_unranked
        if max_scan < 1:
            raise ValueError("max_scan must be positive")
        self.max_scan = max_scan
        if user_position is not None and (isinstance(user_position, bool) or not isinstance(user_position, int)
                                          or user_position < 0):
            raise ValueError(f"user_position must be a label index >= 0 or None, got {user_position!r}")
        if namespace_scope is not None and self.scope.user_address is not None:
            raise ScopeError(
                "this store is bound to one user (its scope has user_address); namespace_scope maps namespaces "
                "to users only for a store built with an agent-level scope (no user)"
            )
        self.user_position = user_position
        self.shared_namespaces: tuple[tuple[str, ...], ...] = tuple(tuple(ns) for ns in shared_namespaces)
        if self.shared_namespaces and self.scope.user_address is not None:
            raise ScopeError(
                "shared_namespaces are written to the agent's shared space, which a store bound to a user cannot "
                "write: build the store with an agent-level scope (no user)"
            )
        self.namespace_scope = namespace_scope
        self._lock = threading.RLock()

    # ---------------------------------------------------------------- scopes
    @property
    def per_user(self) -> bool:
        """Whether namespaces choose the user (an agent-level store with a namespace mapping)."""
        return self.scope.user_address is None and (
            self.namespace_scope is not None or self.user_position is not None)

    def _shared(self, namespace: tuple[str, ...]) -> bool:
        return any(namespace[: len(ns)] == ns for ns in self.shared_namespaces)

    def scope_for(self, namespace: Sequence[str]) -> Scope:
        """The scope that owns ``namespace`` (an item's namespace or a search/listing prefix).

        A user-bound store's scope for every namespace; else the application's shared
        namespaces are the store's (agent-level) scope, and any other namespace is the scope
        of the user it names (``namespace_scope``, or the label at ``user_position``).
        Raises :class:`~manowar_memory.ScopeError` when the namespace names no user."""
        namespace = tuple(namespace)
        if not self.per_user or self._shared(namespace):
            return self.scope
        if self.namespace_scope is not None:
            return self._from_callable(namespace, self.namespace_scope(namespace))
        position = self.user_position
        assert position is not None  # per_user without a callable
        if len(namespace) <= position or namespace[position] == "*":
            raise ScopeError(
                f"namespace {namespace!r} names no user: this store (agent {self.scope.agent_wallet!r}, no user) "
                f"reads the user id from label {position} of a namespace, as in ('memories', user_id); put "
                "items shared by every user under shared_namespaces=[...], pass namespace_scope=... for another "
                "layout, or search/list with a prefix that includes the user id"
            )
        return self._user_scope(namespace[position], namespace)

    def _user_scope(self, user: str, namespace: tuple[str, ...]) -> Scope:
        if not isinstance(user, str) or not user.strip():
            raise ScopeError(f"namespace {namespace!r} has a blank user id; pass the user's id")
        return replace(self.scope, user_address=user)

    def _from_callable(self, namespace: tuple[str, ...], owner: ScopeLike | str | None) -> Scope:
        if owner is None:
            return self.scope
        if isinstance(owner, str):
            return self._user_scope(owner, namespace)
        scope = coerce_scope(owner)
        if scope.agent_wallet != self.scope.agent_wallet:
            raise ScopeError(
                f"namespace_scope mapped {namespace!r} to agent {scope.agent_wallet!r}; a store serves one agent "
                f"({self.scope.agent_wallet!r}): return a user id or a scope of that agent"
            )
        return scope

    def memory_for(self, namespace: Sequence[str]) -> ScopedMemory:
        """The scoped surface of the scope that owns ``namespace`` (see :meth:`scope_for`)."""
        scope = self.scope_for(namespace)
        return self.memory if scope == self.scope else self.engine.scoped(scope, trust=self.trust)

    # ---------------------------------------------------------------- rows
    def _base_filters(self) -> dict[str, Any]:
        return {"metadata.lg_kind": KIND}

    def _prefix_filters(self, prefix: Sequence[str]) -> dict[str, Any]:
        out = self._base_filters()
        for depth, label in enumerate(prefix):
            if label != "*":
                out[f"metadata.lg_ns.d{depth}"] = label
        return out

    @staticmethod
    def _visible(memory: ScopedMemory, rows: Iterable[MemoryRecord]) -> list[MemoryRecord]:
        """One row per item: the scope's own copy where it shadows a shared one; order kept."""
        rows = list(rows)
        owned = {str(r.metadata.get(DOC_KEY)) for r in rows if memory.owns(r)}
        out: list[MemoryRecord] = []
        seen: set[str] = set()
        for rec in rows:
            key = str(rec.metadata.get(DOC_KEY))
            if key in seen or (key in owned and not memory.owns(rec)):
                continue
            seen.add(key)
            out.append(rec)
        return out

    def rows(self, filters: Mapping[str, Any], limit: int, *, memory: ScopedMemory | None = None) -> list[MemoryRecord]:
        """The visible item rows matching ``filters`` (newest first, shadowed shared rows left out),
        read through ``memory`` (default: the store's own scope)."""
        memory = memory or self.memory
        return self._visible(memory, memory.list(filters=filters, limit=max(1, min(limit, self.max_scan))))

    @staticmethod
    def _namespace(rec: MemoryRecord) -> tuple[str, ...]:
        return tuple(json.loads(rec.metadata["lg_namespace"]))

    @staticmethod
    def _created(rec: MemoryRecord) -> int:
        created = rec.metadata.get("lg_created_at")
        return created if isinstance(created, int) and not isinstance(created, bool) else rec.created_at

    def _item(self, rec: MemoryRecord) -> Item:
        return Item(value=dict(rec.metadata.get("lg_value") or {}), key=str(rec.metadata["lg_key"]),
                    namespace=self._namespace(rec), created_at=_dt(self._created(rec)),
                    updated_at=_dt(rec.updated_at))

    def _search_item(self, rec: MemoryRecord, score: float | None) -> SearchItem:
        return SearchItem(namespace=self._namespace(rec), key=str(rec.metadata["lg_key"]),
                          value=dict(rec.metadata.get("lg_value") or {}), created_at=_dt(self._created(rec)),
                          updated_at=_dt(rec.updated_at), score=score)

    def text_for(self, value: Mapping[str, Any], index: Sequence[str] | None = None) -> str:
        """The searchable text of a value: the given (or configured) index fields' texts, one per line."""
        paths = list(index) if index else self.index_fields
        texts: list[str] = []
        for path in paths:
            found = get_text_at_path(dict(value), path if path == "$" else tokenize_path(path))
            texts.extend(t for t in found if t and t.strip())
        text = "\n".join(texts).strip()
        return text or json.dumps(dict(value), ensure_ascii=False, sort_keys=True, default=str)

    # ---------------------------------------------------------------- operations
    def _get(self, op: GetOp) -> Item | None:
        key = item_key(tuple(op.namespace), str(op.key))
        rec = self.memory_for(op.namespace).get_keys([key], filters=self._base_filters()).get(key)
        return self._item(rec) if rec is not None else None

    def _value_filters(self, flt: Mapping[str, Any] | None) -> dict[str, Any]:
        """Simple equalities on top-level value keys, pushed into the engine query."""
        out: dict[str, Any] = {}
        for key, expected in (flt or {}).items():
            if isinstance(expected, Mapping) and set(expected) == {"$eq"}:
                expected = expected["$eq"]
            if not isinstance(key, str) or not _SAFE_KEY.match(key):
                continue
            if isinstance(expected, (str, int, float)) and not isinstance(expected, bool):
                out[f"metadata.lg_value.{key}"] = expected
        return out

    def _keep(self, rec: MemoryRecord, op: SearchOp) -> bool:
        ns = self._namespace(rec)
        if ns[: len(op.namespace_prefix)] != tuple(op.namespace_prefix):
            return False
        value = rec.metadata.get("lg_value") or {}
        return all(_compare(value.get(k), v) for k, v in (op.filter or {}).items())

    def _search(self, op: SearchOp) -> list[SearchItem]:
        if op.limit < 1:
            return []
        memory = self.memory_for(op.namespace_prefix)
        offset = max(0, op.offset)
        want = offset + op.limit
        filters = {**self._prefix_filters(op.namespace_prefix), **self._value_filters(op.filter)}
        exact_pushdown = "*" not in op.namespace_prefix and (
            not op.filter or len(self._value_filters(op.filter)) == len(op.filter))
        ranked: list[SearchItem] = []
        seen: set[str] = set()
        if op.query and op.query.strip():
            hits = memory.search(op.query, layers=("vectors",), k=max(want * 2, 10),
                                      filters={**filters, "metadata.lg_indexed": True})
            found = [c for c in hits.candidates if isinstance(c.record, MemoryRecord)]
            kept = {id(r) for r in self._visible(memory, (c.record for c in found))}
            for cand in found:
                rec = cand.record
                if id(rec) in kept and rec.id not in seen and self._keep(rec, op):
                    seen.add(rec.id)
                    ranked.append(self._search_item(rec, relevance(cand)))
            if not self.fill_unranked or len(ranked) >= want:
                return ranked[offset:want]
        # shadowed shared rows and ranked keys are read too, so scan past them
        scan = 2 * want + len(seen) if exact_pushdown else self.max_scan
        ranked_keys = {item_key(i.namespace, i.key) for i in ranked}
        rows = self.rows(filters, scan, memory=memory)
        rest = [self._search_item(r, None) for r in rows
                if str(r.metadata.get(DOC_KEY)) not in ranked_keys and self._keep(r, op)]
        return (ranked + rest)[offset:want]

    def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        conditions = tuple(op.match_conditions or ())
        prefix = _listing_prefix(op)
        rows = self.rows(self._prefix_filters(prefix), self.max_scan, memory=self.memory_for(prefix))
        namespaces = {self._namespace(r) for r in rows}
        namespaces = {ns for ns in namespaces if all(_matches(ns, c) for c in conditions)}
        if op.max_depth is not None:
            namespaces = {ns[: op.max_depth] for ns in namespaces}
        return sorted(namespaces)[op.offset : op.offset + op.limit]

    def _write(self, puts: Sequence[PutOp]) -> None:
        """The batch's last write per key, one scope at a time."""
        by_scope: dict[Scope, list[PutOp]] = {}
        for op in puts:
            by_scope.setdefault(self.scope_for(op.namespace), []).append(op)
        for scope, ops in by_scope.items():
            self._write_scope(self.memory if scope == self.scope else self.engine.scoped(scope, trust=self.trust),
                              ops)

    def _write_scope(self, memory: ScopedMemory, puts: Sequence[PutOp]) -> None:
        """Deletes (value None) and upserts in one scope."""
        deletes = [item_key(tuple(op.namespace), str(op.key)) for op in puts if op.value is None]
        if deletes:
            memory.delete_keys(deletes, filters=self._base_filters())
        writes = [op for op in puts if op.value is not None]
        if not writes:
            return
        keys = [item_key(tuple(op.namespace), str(op.key)) for op in writes]
        current = memory.get_keys(keys, filters=self._base_filters())
        items = []
        for op, key in zip(writes, keys, strict=True):
            namespace = tuple(op.namespace)
            value = dict(op.value or {})
            previous = current.get(key)
            created = self._created(previous) if previous is not None and memory.owns(previous) else None
            meta: dict[str, Any] = {
                "lg_kind": KIND, "lg_namespace": _ns_json(namespace),
                "lg_ns": {f"d{depth}": label for depth, label in enumerate(namespace)},
                "lg_depth": len(namespace), "lg_key": str(op.key), "lg_value": value,
                "lg_indexed": op.index is not False,
            }
            if created is not None:
                meta["lg_created_at"] = created
            items.append({"key": key, "content": self.text_for(value, op.index if isinstance(op.index, list) else None),
                          "metadata": meta})
        memory.upsert(items, source="knowledge", key_filters=self._base_filters())

    @staticmethod
    def _op_namespace(op: Op) -> tuple[str, ...]:
        if isinstance(op, (GetOp, PutOp)):
            return tuple(op.namespace)
        if isinstance(op, SearchOp):
            return tuple(op.namespace_prefix)
        if isinstance(op, ListNamespacesOp):
            return _listing_prefix(op)
        raise ValueError(f"unknown operation {type(op).__name__}")

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run the operations: reads first (they see the state before this batch's writes),
        then the writes, the last one per (namespace, key)."""
        ops = list(ops)
        results: list[Result] = [None] * len(ops)
        puts: dict[tuple[tuple[str, ...], str], PutOp] = {}
        for op in ops:
            validate_op_namespace(op)
            if isinstance(op, PutOp) and op.ttl is not None:
                raise NotImplementedError("ManowarStore does not support TTLs; put with ttl=None")
            self.scope_for(self._op_namespace(op))  # a namespace that names no user fails before any write
        for i, op in enumerate(ops):
            if isinstance(op, GetOp):
                results[i] = self._get(op)
            elif isinstance(op, SearchOp):
                results[i] = self._search(op)
            elif isinstance(op, ListNamespacesOp):
                results[i] = self._list_namespaces(op)
            elif isinstance(op, PutOp):
                puts[(tuple(op.namespace), str(op.key))] = op
            else:
                raise ValueError(f"unknown operation {type(op).__name__}")
        if puts:
            with self._lock:
                self._write(list(puts.values()))
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """Async twin of :meth:`batch` (runs in a worker thread)."""
        return await asyncio.to_thread(self.batch, list(ops))


# ---------------------------------------------------------------- key-value store


_BYTES = "__manowar_bytes__"


def _encode(value: Any) -> dict[str, Any]:
    if isinstance(value, (bytes, bytearray)):
        return {"v": {_BYTES: base64.b64encode(bytes(value)).decode("ascii")}}
    return {"v": value}


def _decode(stored: Mapping[str, Any]) -> Any:
    value = stored.get("v")
    if isinstance(value, Mapping) and set(value) == {_BYTES}:
        return base64.b64decode(value[_BYTES])
    return value


class ManowarKVStore(KVBaseStore[str, Any]):
    """A LangChain key-value store (``langchain_core.stores.BaseStore``) on a :class:`ManowarStore`.

    Values are bytes or JSON-serialisable data (bytes round-trip, so it also serves as a
    ``ByteStore``, for example for ``CacheBackedEmbeddings``). Keys live under one
    LangGraph namespace (default ``("kv",)``). The rows are memories of the scope: give
    the key-value store a scope of its own (for example a dedicated ``agent_wallet``) so
    cached values stay out of an agent's recall.
    """

    def __init__(self, *, engine: MemoryEngine, scope: ScopeLike, namespace: Sequence[str] = ("kv",),
                 trust: TrustLevel | None = None) -> None:
        self.item_store = ManowarStore(engine=engine, scope=scope, trust=trust, fill_unranked=False,
                                       user_position=None)
        self.namespace = tuple(namespace)

    def mget(self, keys: Sequence[str]) -> list[Any | None]:
        """The values of ``keys`` (None where missing)."""
        items = self.item_store.batch([GetOp(self.namespace, k) for k in keys])
        return [_decode(i.value) if isinstance(i, Item) else None for i in items]

    def mset(self, key_value_pairs: Sequence[tuple[str, Any]]) -> None:
        """Set the values (the last one wins for a repeated key)."""
        self.item_store.batch([PutOp(self.namespace, k, _encode(v), index=False) for k, v in key_value_pairs])

    def mdelete(self, keys: Sequence[str]) -> None:
        """Delete the keys (missing keys are ignored)."""
        self.item_store.batch([PutOp(self.namespace, k, None) for k in keys])

    def yield_keys(self, *, prefix: str | None = None) -> Iterator[str]:
        """The keys, optionally those starting with ``prefix``."""
        rows = self.item_store.rows({"metadata.lg_kind": KIND, "metadata.lg_namespace": _ns_json(self.namespace)},
                                self.item_store.max_scan)
        for rec in rows:
            key = str(rec.metadata["lg_key"])
            if prefix is None or key.startswith(prefix):
                yield key

    async def amget(self, keys: Sequence[str]) -> list[Any | None]:
        """Async twin of :meth:`mget`."""
        return await asyncio.to_thread(self.mget, keys)

    async def amset(self, key_value_pairs: Sequence[tuple[str, Any]]) -> None:
        """Async twin of :meth:`mset`."""
        await asyncio.to_thread(self.mset, key_value_pairs)

    async def amdelete(self, keys: Sequence[str]) -> None:
        """Async twin of :meth:`mdelete`."""
        await asyncio.to_thread(self.mdelete, keys)

    async def ayield_keys(self, *, prefix: str | None = None) -> AsyncIterator[str]:
        """Async twin of :meth:`yield_keys`."""
        for key in await asyncio.to_thread(lambda: list(self.yield_keys(prefix=prefix))):
            yield key
