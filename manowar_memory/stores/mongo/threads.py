"""The threads role of the MongoDB store (:class:`~manowar_memory.stores.base.ThreadStore`):
sessions, chunked transcripts and the turn ledger."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from typing import Any

from ..._notes import degrade
from ..._util import now_ms, query_terms
from ...errors import MissingDependencyError, StoreError
from ...records import MemoryRecord, Session, Transcript
from .. import _mql
from .. import base as _base
from .._mql_schema import (
    SYNC_FIELD,
    TRANSCRIPT_CHUNKS,
    TRANSCRIPTS,
)
from ..base import MemoryQuery
from .connection import (
    _UNAVAILABLE,
    CHUNKS_FIELD,
    MongoConnection,
    T,
    _scoped_doc,
    _strip,
    doc_to_session,
    log,
    memory_to_doc,
    session_to_doc,
)
from .migrations import _INDEX_NOT_FOUND

try:
    import pymongo
    from bson import encode as bson_encode
    from bson.binary import Binary
    from pymongo.errors import DuplicateKeyError, OperationFailure, PyMongoError
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise MissingDependencyError("pymongo", "mongo", "The MongoDB store") from exc

__all__ = ["MongoThreads", "join_transcript", "pack_transcript", "transcript_entries"]


_TURN_COUNTER = "turnCounter"  # on the session_turns document that numbers a transcript's turns


_TRANSACTION_SECONDS = 60.0  # how long a turn's transaction is tried again after transient errors


_NO_TRANSACTIONS = {20, 263}  # IllegalOperation (a standalone server), OperationNotSupportedInTransaction


_MORE = "_more"  # on a stored piece of a message: its content goes on in the next piece


_ENTRY_OVERHEAD = 16  # BSON bytes an array element adds beyond its document (type byte, index key)


def _split_text(text: str, budget: int) -> list[str]:
    """``text`` in pieces of at most ``budget`` UTF-8 bytes, cut between characters (at a
    space near the end of a piece when there is one, so words stay whole for the text index)."""
    raw = text.encode("utf-8")
    pieces: list[str] = []
    start = 0
    while len(raw) - start > budget:
        end = start + budget
        while end > start and (raw[end] & 0xC0) == 0x80:  # never start a piece inside a character
            end -= 1
        space = raw.rfind(b" ", max(start, end - 512), end)
        if space > start:
            end = space + 1
        pieces.append(raw[start:end].decode("utf-8"))
        start = end
    pieces.append(raw[start:].decode("utf-8"))
    return pieces


def transcript_entries(messages: Sequence[dict[str, Any]], chunk_bytes: int) -> list[tuple[dict[str, Any], int]]:
    """The stored entries of a transcript's messages with their BSON sizes. A message larger
    than ``chunk_bytes`` becomes several pieces, each but the last marked ``_more``: its
    content cut into text pieces (still found by the text index), then its other fields
    (tool calls) as BSON cut into binary ``_rest`` pieces."""
    out: list[tuple[dict[str, Any], int]] = []
    for msg in messages:
        size = len(bson_encode(msg)) + _ENTRY_OVERHEAD
        if size <= chunk_bytes:
            out.append((msg, size))
            continue
        head = {"role": msg["role"], "timestamp": msg.get("timestamp")}
        budget = chunk_bytes - len(bson_encode({**head, "content": "", _MORE: True})) - _ENTRY_OVERHEAD - 64
        pieces: list[dict[str, Any]] = [{**head, "content": p} for p in _split_text(msg["content"], budget)]
        rest = {k: v for k, v in msg.items() if k not in head and k != "content"}
        if rest:
            raw = bson_encode(rest)
            pieces += [{**head, "content": "", "_rest": Binary(raw[i : i + budget])} for i in range(0, len(raw), budget)]
        for k, piece in enumerate(pieces):
            if k < len(pieces) - 1:
                piece[_MORE] = True
            out.append((piece, len(bson_encode(piece)) + _ENTRY_OVERHEAD))
    return out


def pack_transcript(entries: Sequence[tuple[dict[str, Any], int]], chunk_bytes: int) -> list[list[dict[str, Any]]]:
    """Entries packed greedily, oldest first, into chunks of at most ``chunk_bytes``. Appending
    messages never changes a chunk before the last one, so sealed chunks are written once."""
    chunks: list[list[dict[str, Any]]] = []
    current: list[dict[str, Any]] = []
    used = 0
    for entry, size in entries:
        if current and used + size > chunk_bytes:
            chunks.append(current)
            current, used = [], 0
        current.append(entry)
        used += size
    chunks.append(current)
    return chunks


def join_transcript(entries: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages of stored entries: pieces marked ``_more`` joined with the next ones."""
    from bson import decode as bson_decode

    out: list[dict[str, Any]] = []
    pending: dict[str, Any] | None = None
    rest = b""
    for entry in entries:
        if pending is None:
            pending = {k: v for k, v in entry.items() if k not in (_MORE, "_rest")}
        else:
            pending["content"] += entry["content"]
        rest += bytes(entry.get("_rest") or b"")
        if not entry.get(_MORE):
            if rest:
                pending.update(bson_decode(rest))
            out.append(pending)
            pending, rest = None, b""
    if pending is not None:
        out.append(pending)
    return out


def _chunk_digest(chunk: list[dict[str, Any]]) -> str:
    import hashlib

    return hashlib.sha256(bson_encode({"m": chunk})).hexdigest()[:32]


class MongoThreads(MongoConnection):
    """Sessions, transcripts and the turn ledger."""

    # -- sessions --
    def get_session(self, session_id: str, agent_wallet: str) -> Session | None:
        with self._errors("read"):
            doc = self.sessions.find_one(
                {"sessionId": session_id, "agentWallet": agent_wallet, "expiresAt": {"$gt": _mql.ms_to_date(now_ms())}}
            )
        return doc_to_session(doc) if doc else None

    def upsert_session(self, session: Session) -> None:
        with self._errors("upsert"):
            self._upsert(
                self.sessions, {"agentWallet": session.agent_wallet, "sessionId": session.session_id},
                session_to_doc(session),
            )

    def find_sessions(self, query: MemoryQuery, limit: int) -> list[Session]:
        if limit <= 0:
            return []
        with self._errors("read"):
            docs = self.sessions.find(_mql.live_session_filter(query, now_ms())).sort(
                [("lastAccessedAt", -1), ("_id", -1)]
            ).limit(int(limit))
            return [doc_to_session(d) for d in docs]

    def purge_expired_sessions(self, now: int) -> int:
        with self._errors("delete"):
            return int(self.sessions.delete_many({"expiresAt": {"$lte": _mql.ms_to_date(now)}}).deleted_count)

    # -- transcripts --
    def upsert_transcript(self, transcript: Transcript) -> None:
        """Insert or replace a transcript. Its messages are packed into chunks of at most
        ``transcript_chunk_bytes``: the newest chunk stays in the transcript document, the
        sealed older ones go to ``session_transcript_chunks`` (written once: appending
        messages only adds chunks), so no document nears 16 MB however long the transcript."""
        with self._errors("upsert"):
            self._put_transcript(transcript)

    def _put_transcript(self, transcript: Transcript, session: Any = None) -> None:
        doc = _scoped_doc(transcript)
        key = {"agentWallet": transcript.agent_wallet, "sessionId": transcript.session_id}
        chunks = pack_transcript(transcript_entries(doc["messages"], self.transcript_chunk_bytes),
                                 self.transcript_chunk_bytes)
        sealed = [(seq, _chunk_digest(chunk), chunk) for seq, chunk in enumerate(chunks[:-1])]
        doc["messages"] = chunks[-1]
        if sealed:
            doc[CHUNKS_FIELD] = [{"seq": seq, "digest": digest} for seq, digest, _ in sealed]
        user = transcript.user_address
        stored = {(c["seq"], c["digest"])
                  for c in self.transcript_chunks.find(key, {"seq": 1, "digest": 1}, session=session)}
        for seq, digest, chunk in sealed:  # the chunks first: the document never names a missing one
            if (seq, digest) not in stored:
                try:
                    self.transcript_chunks.insert_one(
                        {**key, "userAddress": user, "seq": seq, "digest": digest, "messages": chunk},
                        session=session)
                except DuplicateKeyError:  # a concurrent writer stored the same chunk
                    pass
        if stored:  # chunks keep the transcript's user (the text index's prefix); older ones had none
            self.transcript_chunks.update_many({**key, "userAddress": {"$ne": user}}, {"$set": {"userAddress": user}},
                                              session=session)
        self._upsert(self.transcripts, key, doc, session)
        stale = stored - {(seq, digest) for seq, digest, _ in sealed}
        if stale:
            self.transcript_chunks.delete_many(
                {**key, "$or": [{"seq": seq, "digest": digest} for seq, digest in sorted(stale)]}, session=session)

    def _transcript(self, doc: dict[str, Any], session: Any = None) -> Transcript:
        """A stored transcript document as a :class:`Transcript`, its older messages read back
        from its chunks."""
        for _attempt in range(3):
            refs = doc.get(CHUNKS_FIELD) or []
            data = _strip(doc)
            if not refs and not any(_MORE in m for m in data.get("messages", [])):
                return Transcript.model_validate(data)
            key = {"agentWallet": doc["agentWallet"], "sessionId": doc["sessionId"]}
            found = {
                (c["seq"], c["digest"]): c["messages"]
                for c in self.transcript_chunks.find({**key, "digest": {"$in": [r["digest"] for r in refs]}},
                                                     session=session)
            }
            if all((r["seq"], r["digest"]) in found for r in refs):
                entries = [e for r in sorted(refs, key=lambda r: r["seq"]) for e in found[(r["seq"], r["digest"])]]
                data["messages"] = join_transcript(entries + list(data.get("messages", [])))
                return Transcript.model_validate(data)
            # a concurrent rewrite replaced a chunk between the two reads: read the document again
            fresh = self.transcripts.find_one(key, session=session)
            if fresh is None:
                break
            doc = fresh
        raise StoreError(
            f"transcript {doc.get('sessionId')!r} of agent {doc.get('agentWallet')!r} names message chunks that "
            "are missing from session_transcript_chunks; it was changed by another writer while being read, "
            "try again"
        )

    def append_turn(
        self, agent_wallet: str, session_id: str, working_id: str, turn_id: str, build: _base.TurnBuilder
    ) -> _base.TurnWrite:
        """One multi-document transaction per turn (a replica set or sharded cluster, even of one
        member): the ledger check, the reads ``build`` sees and every write. Its first write
        takes the transcript's next sequence number from a counter document in ``session_turns``,
        so of two turns on one transcript the second conflicts at once, before reading anything
        large, and is run again (after a short random pause, growing with each conflict) on what
        the first committed. On a standalone server, which has no transactions, the turn is
        written without one, the ledger entry last, and a degradation says so."""
        key = {"agentWallet": agent_wallet, "sessionId": session_id}

        def run(session: Any) -> _base.TurnWrite:
            done = self.turns.find_one({**key, "turnId": turn_id}, {"seq": 1, "memoryId": 1}, session=session)
            if done is not None:
                return _base.TurnWrite(False, done.get("memoryId"), int(done["seq"]))
            counter = self.turns.find_one_and_update(
                {**key, _TURN_COUNTER: True}, {"$inc": {"lastSeq": 1}}, upsert=True,
                projection={"lastSeq": 1, "userAddress": 1}, return_document=pymongo.ReturnDocument.AFTER, session=session)
            seq = int(counter["lastSeq"])
            doc = self.transcripts.find_one(key, session=session)
            live = self.sessions.find_one(
                {"sessionId": working_id, "agentWallet": agent_wallet, "expiresAt": {"$gt": _mql.ms_to_date(now_ms())}},
                session=session)
            rows = build(self._transcript(doc, session) if doc else None, doc_to_session(live) if live else None)
            rec = rows.record
            if counter.get("userAddress") != rec.user_address:  # erasure by user finds the counter too
                self.turns.update_one({**key, "_id": counter["_id"]}, {"$set": {"userAddress": rec.user_address}},
                                      session=session)
            self._put_transcript(rows.transcript, session)
            self._upsert(self.sessions, {"agentWallet": rows.session.agent_wallet, "sessionId": rows.session.session_id},
                         session_to_doc(rows.session), session)
            self._insert_turn_record(rec, session)
            self._put_turn({**key, "turnId": turn_id, "seq": seq, "memoryId": rec.id,
                            "userAddress": rec.user_address, "threadId": rec.thread_id, "mode": rec.mode,
                            "haiId": rec.hai_id, "createdAt": rec.created_at}, session)
            return _base.TurnWrite(True, rec.id, seq)

        with self._errors("turn write"):
            if self._transactions is not False:
                try:
                    result = self._in_transaction(run)
                    self._transactions = True
                    return result
                except OperationFailure as exc:
                    if self._transactions or exc.code not in _NO_TRANSACTIONS:
                        raise
                    self._transactions = False
            degrade("MongoDB server without transactions (standalone): post_turn wrote the turn's rows one by one; "
                    "concurrent turns on one thread may overwrite each other. Run MongoDB as a replica set "
                    "(one member is enough) for atomic turns")
            return run(None)

    def _in_transaction(self, run: Callable[[Any], T]) -> T:
        """``run(session)`` in a transaction, run again after a transient error (a write
        conflict with a concurrent turn) with a random pause that doubles up to 100 ms, for up
        to 60 s; a commit whose outcome is unknown is committed again. A server that cannot be
        reached (no primary, an election) is not waited for here: that error goes to the caller
        at once as :class:`StoreUnavailableError`, within the client's own timeouts, and the
        turn's id makes the caller's retry safe."""
        deadline = time.monotonic() + _TRANSACTION_SECONDS
        pause = 0.002
        with self.client.start_session() as session:
            while True:
                session.start_transaction()
                try:
                    result = run(session)
                except BaseException as exc:
                    if session.in_transaction:
                        session.abort_transaction()
                    if (isinstance(exc, PyMongoError) and not isinstance(exc, _UNAVAILABLE)
                            and exc.has_error_label("TransientTransactionError") and time.monotonic() < deadline):
                        time.sleep(random.uniform(0, pause))
                        pause = min(2 * pause, 0.1)
                        continue
                    raise
                while True:
                    try:
                        session.commit_transaction()
                        return result
                    except PyMongoError as exc:
                        if time.monotonic() >= deadline or isinstance(exc, _UNAVAILABLE):
                            raise
                        if exc.has_error_label("UnknownTransactionCommitResult"):
                            continue
                        if exc.has_error_label("TransientTransactionError"):
                            break
                        raise

    def _insert_turn_record(self, record: MemoryRecord, session: Any) -> None:
        """A turn's session row (its id is unique to the turn)."""
        self.memory.insert_one({**memory_to_doc(record), SYNC_FIELD: now_ms()}, session=session)

    def _put_turn(self, doc: dict[str, Any], session: Any) -> None:
        """A turn's ledger entry."""
        self.turns.insert_one(doc, session=session)

    def get_transcript(self, session_id: str, agent_wallet: str) -> Transcript | None:
        with self._errors("read"):
            doc = self.transcripts.find_one({"agentWallet": agent_wallet, "sessionId": session_id})
            return self._transcript(doc) if doc else None

    def search_transcripts(self, query: MemoryQuery, text: str | None, limit: int) -> list[tuple[Transcript, float]]:
        if limit <= 0:
            return []
        with self._errors("transcript search"):
            if not text:
                docs = self.transcripts.find(_mql.scope_filter(query, collection=TRANSCRIPTS)).sort(
                    [("createdAt", -1), ("_id", -1)]
                ).limit(int(limit))
                return [(self._transcript(d), 0.0) for d in docs]
            terms = query_terms(text)
            if not terms:
                return []
            docs = list(self.transcripts.aggregate(
                _mql.union_by_score(TRANSCRIPTS, _mql.transcript_search_pipelines(query, terms, limit), limit)))
            scored = {d["sessionId"]: (d, float(d["_score"])) for d in docs}
            # the older messages of long transcripts are in chunks: find their sessions too
            try:
                many = max(1000, 20 * int(limit))
                chunk_hits = list(self.transcript_chunks.aggregate(_mql.union_by_score(
                    TRANSCRIPT_CHUNKS, _mql.transcript_chunk_pipelines(query, terms, many), 2 * many, {"_score": -1})))
            except OperationFailure as exc:
                if exc.code != _INDEX_NOT_FOUND:
                    raise
                log.warning("MongoStore: session_transcript_chunks has no text index (run migrate()); "
                            "the older messages of long transcripts are not searched")
                chunk_hits = []
            best: dict[str, float] = {}
            hit_chunks: dict[str, set[tuple[int, str]]] = {}
            for c in chunk_hits:
                best[c["sessionId"]] = max(best.get(c["sessionId"], 0.0), float(c["_score"]))
                hit_chunks.setdefault(c["sessionId"], set()).add((c["seq"], c["digest"]))
            if best:
                flt = _mql.merge([*_mql.scope_filter(query, collection=TRANSCRIPTS).items(),
                                   ("sessionId", {"$in": sorted(best)})])
                for d in self.transcripts.find(flt):
                    refs = {(r["seq"], r["digest"]) for r in d.get(CHUNKS_FIELD) or []}
                    if not refs & hit_chunks[d["sessionId"]]:
                        continue  # only a stale chunk matched
                    score = best[d["sessionId"]]
                    if d["sessionId"] not in scored or scored[d["sessionId"]][1] < score:
                        scored[d["sessionId"]] = (d, score)
            ranked = sorted(scored.values(), key=lambda ds: (-ds[1], -int(ds[0].get("createdAt") or 0)))[: int(limit)]
            return [(self._transcript(d), score) for d, score in ranked]

    def list_transcripts(self, agent_wallet: str, created_from: int, created_to: int, *,
                         users: Sequence[str | None] | None = None) -> list[Transcript]:
        """Transcripts of an agent created in ``[created_from, created_to]``, oldest first."""
        flt = _mql.transcripts_created_between_filter(agent_wallet, created_from, created_to, users)
        with self._errors("read"):
            docs = self.transcripts.find(flt).sort([("createdAt", 1), ("_id", 1)])
            return [self._transcript(d) for d in docs]
