"""The threads role of the SQLite store (:class:`~manowar_memory.stores.base.ThreadStore`)."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from ..._util import now_ms
from ...records import MemoryRecord, Session, Transcript
from .. import _fts, _sql
from ..base import (
    MemoryQuery,
    TurnBuilder,
    TurnWrite,
)
from .connection import SQLiteConnection, _qualify

__all__ = ["SQLiteThreads"]


class SQLiteThreads(SQLiteConnection):
    """Sessions, transcripts and the turn ledger."""

    # -- sessions --
    def get_session(self, session_id: str, agent_wallet: str) -> Session | None:
        with self._conn() as conn:
            row = conn.execute(
                "SELECT doc FROM sessions WHERE session_id = ? AND agent_wallet = ? AND expires_at > ?",
                (session_id, agent_wallet, now_ms()),
            ).fetchone()
        return Session.model_validate_json(row[0]) if row else None


    def upsert_session(self, session: Session) -> None:
        with self._write() as conn:
            self._put_session(conn, session)


    @staticmethod
    def _put_session(conn: sqlite3.Connection, session: Session) -> None:
        conn.execute(
            "INSERT INTO sessions VALUES (?,?,?,?,?,?,?,?,?) ON CONFLICT (agent_wallet, session_id) DO UPDATE SET "
            "user_address = excluded.user_address, thread_id = excluded.thread_id, mode = excluded.mode, "
            "hai_id = excluded.hai_id, doc = excluded.doc, expires_at = excluded.expires_at, "
            "last_accessed_at = excluded.last_accessed_at",
            (
                session.session_id, session.agent_wallet, session.user_address, session.thread_id, session.mode,
                session.hai_id, session.model_dump_json(by_alias=True), session.expires_at,
                session.last_accessed_at,
            ),
        )


    def find_sessions(self, query: MemoryQuery, limit: int) -> list[Session]:
        where, params = self._scope_sql(query, has_status=False, json_col="doc", source_col=None)
        with self._conn() as conn:
            rows = conn.execute(
                f"SELECT doc FROM sessions WHERE {where} AND expires_at > ? ORDER BY last_accessed_at DESC LIMIT ?",
                [*params, now_ms(), limit],
            ).fetchall()
        return [Session.model_validate_json(r[0]) for r in rows]


    def purge_expired_sessions(self, now: int) -> int:
        with self._write() as conn:
            return conn.execute("DELETE FROM sessions WHERE expires_at <= ?", (now,)).rowcount

    # -- transcripts --
    def upsert_transcript(self, transcript: Transcript) -> None:
        with self._write() as conn:
            self._put_transcript(conn, transcript)


    @staticmethod
    def _put_transcript(conn: sqlite3.Connection, transcript: Transcript) -> None:
        search_text = "\n".join([transcript.summary or "", *(m.content for m in transcript.messages)])
        conn.execute(
            "INSERT INTO transcripts (session_id, agent_wallet, user_address, thread_id, mode, hai_id, doc, "
            "search_text, created_at) VALUES (?,?,?,?,?,?,?,?,?) ON CONFLICT (agent_wallet, session_id) DO UPDATE SET "
            "user_address = excluded.user_address, "
            "thread_id = excluded.thread_id, mode = excluded.mode, hai_id = excluded.hai_id, doc = excluded.doc, "
            "search_text = excluded.search_text, created_at = excluded.created_at",
            (
                transcript.session_id, transcript.agent_wallet, transcript.user_address, transcript.thread_id,
                transcript.mode, transcript.hai_id, transcript.model_dump_json(by_alias=True), search_text,
                transcript.created_at,
            ),
        )


    def append_turn(
        self, agent_wallet: str, session_id: str, working_id: str, turn_id: str, build: TurnBuilder
    ) -> TurnWrite:
        """One ``BEGIN IMMEDIATE`` transaction per turn: the ledger check, the reads ``build``
        sees and every write, so concurrent writers (threads or processes) queue on the write
        lock, each reading what the one before it committed."""
        with self._write() as conn:
            done = conn.execute(
                "SELECT seq, memory_id FROM thread_turns WHERE agent_wallet = ? AND session_id = ? AND turn_id = ?",
                (agent_wallet, session_id, turn_id),
            ).fetchone()
            if done is not None:
                return TurnWrite(False, done[1], int(done[0]))
            row = conn.execute(
                "SELECT doc FROM transcripts WHERE session_id = ? AND agent_wallet = ?", (session_id, agent_wallet)
            ).fetchone()
            live = conn.execute(
                "SELECT doc FROM sessions WHERE session_id = ? AND agent_wallet = ? AND expires_at > ?",
                (working_id, agent_wallet, now_ms()),
            ).fetchone()
            rows = build(Transcript.model_validate_json(row[0]) if row else None,
                         Session.model_validate_json(live[0]) if live else None)
            self._put_transcript(conn, rows.transcript)
            self._put_session(conn, rows.session)
            memory_id = self._insert(conn, rows.record)
            seq = int(conn.execute(
                "SELECT COALESCE(MAX(seq), 0) + 1 FROM thread_turns WHERE agent_wallet = ? AND session_id = ?",
                (agent_wallet, session_id),
            ).fetchone()[0])
            self._put_turn(conn, agent_wallet, session_id, turn_id, seq, rows.record.model_copy(update={"id": memory_id}))
        return TurnWrite(True, memory_id, seq)


    @staticmethod
    def _put_turn(conn: sqlite3.Connection, agent_wallet: str, session_id: str, turn_id: str, seq: int,
                  rec: MemoryRecord) -> None:
        """Inside a write transaction: the ledger entry of a turn whose session row is ``rec``."""
        conn.execute(
            "INSERT INTO thread_turns VALUES (?,?,?,?,?,?,?,?,?,?)",
            (agent_wallet, session_id, turn_id, seq, rec.id, rec.user_address, rec.thread_id, rec.mode,
             rec.hai_id, rec.created_at),
        )


    def get_transcript(self, session_id: str, agent_wallet: str) -> Transcript | None:
        with self._conn() as conn:
            row = conn.execute(
                "SELECT doc FROM transcripts WHERE session_id = ? AND agent_wallet = ?", (session_id, agent_wallet)
            ).fetchone()
        return Transcript.model_validate_json(row[0]) if row else None


    def search_transcripts(self, query: MemoryQuery, text: str | None, limit: int) -> list[tuple[Transcript, float]]:
        where, params = self._scope_sql(query, has_status=False, json_col="doc", source_col=None)
        phrases = _fts.query_phrases(text)
        if text and not phrases:
            return []
        with self._conn() as conn:
            if not phrases:
                rows = conn.execute(
                    f"SELECT doc, 0.0 AS score FROM transcripts WHERE {where} ORDER BY created_at DESC LIMIT ?",
                    [*params, limit],
                ).fetchall()
            else:
                scope_ids = [sid for sid, _ in self._fts_scopes(conn, query)]
                if not scope_ids:
                    return []
                # one query: each scope's phrases are its own terms, so their counts are its own
                match = " OR ".join(_fts.scoped_match(sid, phrases) for sid in scope_ids)
                rows = conn.execute(
                    f"SELECT t.doc AS doc, -bm25(transcripts_fts) AS score FROM transcripts_fts "
                    f"JOIN transcripts t ON t.rowid = transcripts_fts.rowid "
                    f"WHERE transcripts_fts MATCH ? AND {_qualify(where, 't')} ORDER BY score DESC LIMIT ?",
                    [match, *params, limit],
                ).fetchall()
        return [(Transcript.model_validate_json(r["doc"]), float(r["score"])) for r in rows]


    def list_transcripts(self, agent_wallet: str, created_from: int, created_to: int, *,
                         users: Sequence[str | None] | None = None) -> list[Transcript]:
        """Transcripts of an agent created in ``[created_from, created_to]``, oldest first."""
        sql, params = _sql.transcripts_created_between(agent_wallet, created_from, created_to, users)
        with self._conn() as conn:
            rows = conn.execute(sql, params).fetchall()
        return [Transcript.model_validate_json(r[0]) for r in rows]
