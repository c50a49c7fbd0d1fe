"""Writing memories: ``remember``, ``ingest`` and fact extraction."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .._twins import Steps, run_steps
from .._util import as_str, content_hash, now_ms
from ..errors import EmbeddingError, InvalidInputError, PartialIngestError
from ..expiry import EXPIRES_AT, is_expired, resolve_expiry
from ..extraction import fact_time_metadata
from ..lifecycle import SOURCE_MEMORY_ID
from ..records import FACT_TYPES, MemoryRecord, Message
from ..resolver import resolve_steps, resolve_updates
from ..results import RememberResult
from ..scope import Scope, ScopeLike
from ..validation import check_optional_text, check_timestamp
from .core import EngineBase
from .results import _INGEST_KEYS, IngestItem, IngestReport


class EngineWrites(EngineBase):
    """Writing memories: ``remember``, ``ingest`` and fact extraction."""

    # ------------------------------------------------------------------ writes
    def remember(
        self,
        scope: ScopeLike,
        content: str,
        *,
        fact_type: str | None = None,
        confidence: float | None = None,
        importance: float | None = None,
        retention: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        created_at: int | None = None,
        ttl: Any = None,
        expires_at: Any = None,
    ) -> RememberResult:
        """Store an explicit durable fact in the graph layer.

        ``fact_type`` is one of :data:`~manowar_memory.records.FACT_TYPES` (default
        ``"context"``); any other value, a different case or stray spaces included, is refused
        with :class:`InvalidInputError` rather than guessed at. Remembering the same fact again
        (same agent, user and text, case-insensitive) reinforces the existing row instead
        of inserting a duplicate.

        ``ttl`` (seconds or a timedelta, from ``created_at``) or ``expires_at`` (epoch ms or an
        aware datetime) make the fact expire: reads hide it from then on (see
        :mod:`manowar_memory.expiry`); without either, ``config.ttl_by_kind`` may give one.
        Remembering a fact again with a ttl, or after it expired, sets its expiry anew.
        """
        return run_steps(self.remember_steps(
            scope, content, fact_type=fact_type, confidence=confidence, importance=importance, retention=retention,
            metadata=metadata, created_at=created_at, ttl=ttl, expires_at=expires_at))

    def remember_steps(
        self,
        scope: ScopeLike,
        content: str,
        *,
        fact_type: str | None = None,
        confidence: float | None = None,
        importance: float | None = None,
        retention: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        created_at: int | None = None,
        ttl: Any = None,
        expires_at: Any = None,
    ) -> Steps[RememberResult]:
        """:meth:`remember` as a step generator (:mod:`manowar_memory._twins`): it yields each call
        to the fact resolver, is sent the answer and returns the :class:`RememberResult`. One body
        for ``remember``, ``aremember`` and the scoped surface's writes; call those instead."""
        scope = Scope.coerce(scope)
        text = as_str(content)
        if text is None:
            raise InvalidInputError("content is required: pass the fact to remember as a non-empty string")
        for name, value in (("confidence", confidence), ("importance", importance)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1):
                raise InvalidInputError(f"{name} must be a number between 0 and 1, got {value!r}")
        # everything is checked before the dedupe lookup: a refused call changes nothing
        text = self._text(text, "content")
        fact_type = check_optional_text(fact_type, "fact_type", max_chars=200)
        retention = check_optional_text(retention, "retention", max_chars=200)
        created_at = check_timestamp(created_at, "created_at") if created_at is not None else now_ms()
        expiry = resolve_expiry(ttl, expires_at, base=created_at)  # a ttl counts from the fact's created_at
        meta: dict[str, Any] = {**self._metadata(scope.metadata, "scope metadata"), **self._metadata(metadata)}
        if fact_type is not None and fact_type not in FACT_TYPES:
            raise InvalidInputError(f"fact_type must be one of {list(FACT_TYPES)} (or None for 'context'), "
                                    f"got {fact_type!r}")
        kind = fact_type or "context"
        fact_hash = self.fact_hash(scope, text)
        existing = self.store.find_fact_by_hash(scope.agent_wallet, fact_hash)
        if existing is not None:
            self.store.bump_access([existing.id], now_ms(), agent_wallet=scope.agent_wallet)
            self._renew(scope, existing, expiry)
            return RememberResult(id=existing.id, fact_type=str(existing.metadata.get("factType", kind)),
                                  fact_hash=fact_hash, deduplicated=True)
        meta.update({
            "type": fact_type or "explicit_save", "source": "remember", "layer": "graph", "factHash": fact_hash,
            "factType": kind, "confidence": 1.0 if confidence is None else float(confidence),
            "extractor": "explicit",
        })
        if importance is not None:
            meta["importance"] = float(importance)
        if retention is not None:
            meta["retention"] = retention
        vectors = self._embed_documents([text])
        record = self._new_record(scope, text, source="fact", metadata=meta, created_at=created_at,
                                  embedding=vectors[0] if vectors else None, expires_at=expiry)
        # atomic: a concurrent remember of the same fact (another thread or process) that got
        # past the lookup above makes this reinforce its row instead of inserting a duplicate
        stored, inserted = self.store.add_fact_if_absent(record)
        if not inserted:
            self._renew(scope, stored, expiry)
            return RememberResult(id=stored.id, fact_type=str(stored.metadata.get("factType", kind)),
                                  fact_hash=fact_hash, deduplicated=True)
        updates = yield from resolve_steps(self.store, scope, [stored], now_ms(), resolver=self.resolver)
        self.invalidate(scope)
        if stored.id in updates.duplicates:  # the resolver found it already known: that fact was reinforced
            return RememberResult(id=updates.duplicates[stored.id], fact_type=kind, fact_hash=fact_hash,
                                  deduplicated=True, notes=updates.uncertain)
        return RememberResult(id=stored.id, fact_type=kind, fact_hash=fact_hash, superseded=updates.superseded,
                              notes=updates.uncertain)

    def _renew(self, scope: Scope, fact: MemoryRecord, expiry: int | None) -> None:
        """A fact remembered again lives again: with an explicit expiry, or when it had expired,
        its ``expiresAt`` is set anew (that expiry, else the configured default from now, else none)."""
        now = now_ms()
        if expiry is None and not is_expired(fact.metadata, now):
            return
        meta = {k: v for k, v in fact.metadata.items() if k != EXPIRES_AT}
        self._expiry(meta, fact.source, now, expires_at=expiry)
        if self.store.update_memory(fact.id, {"metadata": meta, "updated_at": now},
                                    agent_wallet=fact.agent_wallet) is not None:
            self.invalidate(scope)

    def ingest(
        self,
        scope: ScopeLike,
        items: Iterable[str | IngestItem | Mapping[str, Any]],
        *,
        batch_size: int = 128,
        progress: bool = False,
        dedupe: bool = True,
        ttl: Any = None,
        expires_at: Any = None,
    ) -> list[str]:
        """Bulk-load memory rows (vectors layer by default), embedding in batches.

        Each item is a string or ``{content, source, created_at, thread_id, metadata, key}``.
        Returns the row id of every item in order. An item with a ``key`` is stored once per
        scope: ingesting it again returns the id of the stored row and changes nothing, so a
        failed or interrupted ingest can be run again. An item without a key gets one from
        what it holds (see :meth:`content_key`), so the same items ingested again are stored
        once too, and two identical items of one call are one row; ``dedupe=False`` stores
        every item without a key as a new row. When the embedder fails part-way, the
        batches before the failure stay stored and :class:`PartialIngestError` (an
        :class:`EmbeddingError`) says which.

        ``ttl`` (seconds or a timedelta, from each row's created_at) or ``expires_at`` (epoch ms
        or an aware datetime) make every row expire; an item's own ``ttl``/``expires_at``
        overrides them, and without any ``config.ttl_by_kind`` may give one
        (:mod:`manowar_memory.expiry`). A row already stored keeps its expiry.
        """
        return self.ingest_report(scope, items, batch_size=batch_size, progress=progress, dedupe=dedupe,
                                  ttl=ttl, expires_at=expires_at).ids

    @staticmethod
    def content_key(item: IngestItem) -> str:
        """The idempotency key of an ingest item given none: ``content:`` and a hash of its
        stripped content, source, thread, creation time (when given) and metadata. Items that
        differ in any of these are different rows; the scope is added by :meth:`ingest_id`."""
        parts = [item.content.strip(), item.source, item.thread_id, item.created_at, item.context, item.metadata]
        return "content:" + content_hash(json.dumps(parts, ensure_ascii=True, sort_keys=True, default=str))

    @staticmethod
    def ingest_id(scope: ScopeLike, key: str) -> str:
        """The row id of the ingest item with idempotency ``key`` in ``scope``: a hash of the
        whole scope (agent, user, mode, HAI, as the scope holds them) and the key."""
        sc = Scope.coerce(scope)
        parts = [sc.agent_wallet, sc.user_address, sc.mode, sc.hai_id, key]
        return f"vec_{sc.agent_wallet[:8]}_key_{content_hash(json.dumps(parts, ensure_ascii=True))}"

    def ingest_report(
        self,
        scope: ScopeLike,
        items: Iterable[str | IngestItem | Mapping[str, Any]],
        *,
        batch_size: int = 128,
        progress: bool = False,
        dedupe: bool = True,
        ttl: Any = None,
        expires_at: Any = None,
    ) -> IngestReport:
        """:meth:`ingest`, returning how many rows were stored and which keys were already
        stored by an earlier run (the caller's keys; items keyed by content count in
        ``inserted`` only)."""
        return run_steps(self.ingest_steps(scope, items, batch_size=batch_size, progress=progress, dedupe=dedupe,
                                            ttl=ttl, expires_at=expires_at))

    def ingest_steps(
        self,
        scope: ScopeLike,
        items: Iterable[str | IngestItem | Mapping[str, Any]],
        *,
        batch_size: int = 128,
        progress: bool = False,
        dedupe: bool = True,
        ttl: Any = None,
        expires_at: Any = None,
    ) -> Steps[IngestReport]:
        """:meth:`ingest_report` as a step generator (:mod:`manowar_memory._twins`): one body for
        ``ingest``, ``ingest_report``, ``aingest`` and the scoped surface's writes; call those instead."""
        scope = Scope.coerce(scope)
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise InvalidInputError(f"batch_size must be a positive integer (items embedded per call), got {batch_size!r}")
        parsed = self._parse_ingest_items(items)
        # every row is built (and so checked) before the first write: a bad item stores nothing
        rows = self._ingest_rows(scope, parsed, ttl, expires_at)
        ids: list[str] = []
        inserted = 0
        already: list[str] = []
        notes: list[str] = []
        bar = None
        if progress:
            from tqdm import tqdm

            bar = tqdm(total=len(parsed), unit="mem", desc="ingest")
        try:
            for start in range(0, len(parsed), batch_size):
                batch = parsed[start : start + batch_size]
                keyed = {j: self.ingest_id(scope, b.key if b.key is not None else self.content_key(b))
                         for j, b in enumerate(batch) if b.key is not None or dedupe}
                stored = (self.store.existing_memory_ids(list(keyed.values()), agent_wallet=scope.agent_wallet)
                          if keyed else set())
                batch_ids: list[str | None] = [keyed[j] if keyed.get(j) in stored else None for j in range(len(batch))]
                already.extend(b.key for j, b in enumerate(batch) if batch_ids[j] is not None and b.key is not None)
                todo = [j for j in range(len(batch)) if batch_ids[j] is None]
                try:
                    vectors = self._embed_by_length([rows[start + j].content for j in todo])
                except EmbeddingError as exc:
                    done = [i for i in batch_ids if i is not None]
                    raise self._partial_ingest(parsed, ids + done, start, batch, batch_ids, exc) from exc
                records = {  # one copy per row: its vector and, when keyed, its id
                    j: rows[start + j].model_copy(update={
                        **({"embedding": vectors[n], "embedding_model": self.model_id} if vectors else {}),
                        **({"id": keyed[j]} if j in keyed else {}),
                    })
                    for n, j in enumerate(todo)
                }
                with_key = [j for j in todo if j in keyed]
                without = [j for j in todo if j not in keyed]
                if with_key:
                    results = self.store.add_memories_if_absent([records[j] for j in with_key])
                    for j, (memory_id, new) in zip(with_key, results):
                        batch_ids[j] = memory_id
                        inserted += int(new)
                        if not new and memory_id == keyed[j] and batch[j].key is not None:  # stored first elsewhere
                            already.append(str(batch[j].key))
                if without:
                    for j, memory_id in zip(without, self.store.add_memories([records[j] for j in without])):
                        batch_ids[j] = memory_id
                    inserted += len(without)
                ids.extend(str(i) for i in batch_ids)
                # an ingested fact replaces what it contradicts, as remember's do (one read per batch)
                updates = yield from resolve_steps(
                    self.store, scope, [records[j].model_copy(update={"id": batch_ids[j]})
                                        for j in todo if records[j].source == "fact"],
                    now_ms(), resolver=self.resolver)
                notes += updates.uncertain
                if todo:
                    self.invalidate(scope)
                if bar is not None:
                    bar.update(len(batch))
        finally:
            if bar is not None:
                bar.close()
        return IngestReport(ids=ids, inserted=inserted, already_stored=already, notes=notes)

    def _embed_by_length(self, texts: list[str]) -> list[list[float]] | None:
        """``texts``' document vectors, in order, embedded shortest first: an embedder that pads
        each of its batches to its longest text then pads little."""
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        vectors = self._embed_documents([texts[i] for i in order])
        if vectors is None:
            return None
        if len(vectors) != len(texts):
            raise EmbeddingError(f"{self.model_id} returned {len(vectors)} vectors for {len(texts)} texts")
        out: list[list[float]] = [[] for _ in texts]
        for i, vector in zip(order, vectors):
            out[i] = vector
        return out

    @staticmethod
    def _parse_ingest_items(items: Iterable[str | IngestItem | Mapping[str, Any]]) -> list[IngestItem]:
        """``ingest``'s items as checked :class:`IngestItem`: strings wrapped, dicts validated, keys unique."""
        if isinstance(items, (str, bytes, bytearray, Mapping, IngestItem)) or not isinstance(items, Iterable):
            raise InvalidInputError(
                f"items must be a list of strings, IngestItem or {{'content': ...}} dicts, got {type(items).__name__}; "
                "to ingest one text, pass [text]"
            )
        parsed: list[IngestItem] = []
        seen_keys: dict[str, int] = {}
        for i, item in enumerate(items):
            if isinstance(item, str):
                item = IngestItem(content=item)
            elif not isinstance(item, IngestItem):
                unknown = sorted(str(k) for k in item if k not in _INGEST_KEYS) if isinstance(item, Mapping) else []
                if unknown:
                    raise InvalidInputError(
                        f"ingest item {i} has unknown key(s) {unknown}: the keys are {sorted(_INGEST_KEYS)} "
                        "(a misspelt key would otherwise be dropped, and its metadata with it)"
                    )
                try:
                    item = IngestItem.model_validate(item)
                except Exception as exc:
                    raise InvalidInputError(f"ingest item {i} is invalid: {exc}") from exc
            if not item.content.strip():
                raise InvalidInputError(f"ingest item {i} has empty content")
            if item.source not in ("session", "knowledge", "pattern", "archive", "fact"):
                raise InvalidInputError(f"ingest item {i} has unknown source {item.source!r}")
            if item.key is not None:
                if not item.key.strip():
                    raise InvalidInputError(f"ingest item {i} has an empty key: give it a non-empty key or none")
                if item.key in seen_keys:
                    raise InvalidInputError(
                        f"ingest items {seen_keys[item.key]} and {i} have the same key {item.key!r}: "
                        "a key names one item"
                    )
                seen_keys[item.key] = i
            parsed.append(item)
        return parsed

    def _ingest_rows(self, scope: Scope, parsed: list[IngestItem], ttl: Any, expires_at: Any) -> list[MemoryRecord]:
        """The rows ``parsed`` would store (not embedded yet); an item's own ttl/expiry wins over the call's."""
        contexts = self._thread_contexts(scope, parsed)
        return [
            self._new_record(scope, b.content.strip(), source=b.source, metadata={**scope.metadata, **b.metadata},
                             created_at=b.created_at, thread_id=b.thread_id, context=contexts[i],
                             **({"ttl": b.ttl, "expires_at": b.expires_at}
                                if b.ttl is not None or b.expires_at is not None
                                else {"ttl": ttl, "expires_at": expires_at}))
            for i, b in enumerate(parsed)
        ]

    @staticmethod
    def _partial_ingest(
        parsed: Sequence[IngestItem], stored_ids: list[str], start: int, batch: Sequence[IngestItem],
        batch_ids: Sequence[str | None], exc: EmbeddingError,
    ) -> PartialIngestError:
        """The error of an ingest whose embedder failed at the batch starting at ``start``."""
        done_items = list(parsed[:start]) + [b for b, i in zip(batch, batch_ids) if i is not None]
        pending_items = [b for b, i in zip(batch, batch_ids) if i is None] + list(parsed[start + len(batch):])
        stored_keys = [str(b.key) for b in done_items if b.key is not None]
        pending_keys = [str(b.key) for b in pending_items if b.key is not None]

        def shown(keys: list[str]) -> str:
            listed = ", ".join(repr(k) for k in keys[:3])
            return listed + (f", ... {keys[-1]!r}" if len(keys) > 3 else "")

        what = f"{len(done_items)} of {len(parsed)} ingest items are stored"
        if stored_keys:
            what += f" (keys {shown(stored_keys)})"
        unkeyed = len(done_items) - len(stored_keys)
        if unkeyed:
            fix = (f"{unkeyed} stored item(s) have no key and would be stored again by a re-run: give every item a "
                   f"key (IngestItem.key), or ingest only the items from position {start} on")
        else:
            fix = "run the same ingest again: items with a key are stored once, so it stores only the rest"
        return PartialIngestError(
            f"the embedder failed part-way through an ingest: {what}, the other {len(pending_items)} are not; "
            f"{fix}. Cause: {exc}",
            total=len(parsed), stored_ids=stored_ids, stored_keys=stored_keys, pending_keys=pending_keys,
        )

    def _extract_and_index(
        self, scope: Scope, msgs: list[Message], turn_id: str, metadata: dict[str, Any] | None = None,
        source_id: str | None = None,
    ) -> dict[str, Any]:
        assert self.extractor is not None
        facts = self.extractor.extract(msgs)
        indexed = reinforced = superseded = 0
        notes: list[str] = []
        said_at = max((m.timestamp for m in msgs if m.role == "user"), default=None)
        fresh = []
        for fact in facts:
            fact_hash = self.fact_hash(scope, fact.fact)
            existing = self.store.find_fact_by_hash(scope.agent_wallet, fact_hash)
            if existing is not None:
                self.store.bump_access([existing.id], now_ms(), agent_wallet=scope.agent_wallet)
                reinforced += 1
            else:
                fresh.append((fact, fact_hash))
        if fresh:
            vectors = self._embed_documents([f.fact for f, _ in fresh])
            records = []
            for i, (fact, fact_hash) in enumerate(fresh):
                meta = {
                    **scope.metadata, **(metadata or {}), "type": "extracted_fact", "layer": "graph", "factType": fact.type,
                    "factHash": fact_hash, "confidence": fact.confidence, "sourceTurnId": turn_id,
                    "extractor": self.extractor.name, **fact_time_metadata(fact),
                }
                if source_id is not None:  # the turn row it was read from (marked outdated once it is superseded)
                    meta[SOURCE_MEMORY_ID] = source_id
                # observed when the user said it: the turn's time, not the time extraction ran
                records.append(self._new_record(scope, fact.fact, source="fact", metadata=meta, created_at=said_at,
                                                embedding=vectors[i] if vectors else None))
            new: list[MemoryRecord] = []
            for record in records:  # each one atomic against concurrent writers of the same fact
                stored, inserted = self.store.add_fact_if_absent(record)
                if inserted:
                    new.append(stored)
                else:
                    reinforced += 1
            indexed = len(new)
            # the scope's facts read once
            updates = resolve_updates(self.store, scope, new, now_ms(), resolver=self.resolver)
            superseded, notes = len(updates.superseded), updates.uncertain
            indexed -= len(updates.duplicates)  # already known: the stored fact was reinforced
            reinforced += len(updates.duplicates)
            if new:
                self.invalidate(scope)
        return {"indexed": indexed, "reinforced": reinforced, "superseded": superseded, "notes": notes}
