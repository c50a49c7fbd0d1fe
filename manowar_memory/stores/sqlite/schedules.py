"""The schedules role of the SQLite store (:class:`~manowar_memory.stores.base.ScheduleStore`)."""

from __future__ import annotations

import json
from typing import Any

from ..._util import now_ms
from .connection import SQLiteConnection

__all__ = ["SQLiteSchedules"]


class SQLiteSchedules(SQLiteConnection):
    """Inline maintenance schedules, written with compare-and-set."""

    def get_schedule(self, schedule_id: str) -> dict[str, Any] | None:
        """The schedule doc with its ``rev``, or None."""
        with self._conn() as conn:
            row = conn.execute("SELECT doc, rev FROM schedules WHERE schedule_id = ?", (schedule_id,)).fetchone()
        return {**json.loads(row[0]), "rev": int(row[1])} if row else None


    def list_schedules(self) -> list[dict[str, Any]]:
        """Every schedule doc (with ``rev``), by id."""
        with self._conn() as conn:
            rows = conn.execute("SELECT doc, rev FROM schedules ORDER BY schedule_id").fetchall()
        return [{**json.loads(r[0]), "rev": int(r[1])} for r in rows]


    def save_schedule(self, doc: dict[str, Any], expected_rev: int | None = None) -> int | None:
        """Write ``doc`` (keyed by ``doc["scheduleId"]``). With ``expected_rev`` only when the
        stored rev is still that (compare-and-set), else create or replace. Returns the new
        rev, or None when the compare failed."""
        body = json.dumps({k: v for k, v in doc.items() if k != "rev"}, ensure_ascii=False)
        with self._write() as conn:
            row = conn.execute("SELECT rev FROM schedules WHERE schedule_id = ?", (doc["scheduleId"],)).fetchone()
            if expected_rev is not None and (row is None or int(row[0]) != expected_rev):
                return None
            rev = int(row[0]) + 1 if row else 1
            conn.execute(
                "INSERT INTO schedules VALUES (?,?,?,?) ON CONFLICT (schedule_id) DO UPDATE SET "
                "doc = excluded.doc, rev = excluded.rev, updated_at = excluded.updated_at",
                (doc["scheduleId"], body, rev, now_ms()),
            )
        return rev


    def delete_schedule(self, schedule_id: str) -> bool:
        """Delete the schedule; False when there was none."""
        with self._write() as conn:
            return conn.execute("DELETE FROM schedules WHERE schedule_id = ?", (schedule_id,)).rowcount > 0
