"""The schedules role of the MongoDB store (:class:`~manowar_memory.stores.base.ScheduleStore`)."""

from __future__ import annotations

from typing import Any

from ...errors import MissingDependencyError
from .connection import (
    MongoConnection,
)

try:
    import pymongo
    from pymongo.errors import DuplicateKeyError
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise MissingDependencyError("pymongo", "mongo", "The MongoDB store") from exc

__all__ = ["MongoSchedules"]


class MongoSchedules(MongoConnection):
    """Inline maintenance schedules, written with compare-and-set."""

    def get_schedule(self, schedule_id: str) -> dict[str, Any] | None:
        """The schedule doc with its ``rev``, or None."""
        with self._errors("read"):
            doc: dict[str, Any] | None = self.schedules.find_one({"scheduleId": schedule_id}, {"_id": 0})
        return doc

    def list_schedules(self) -> list[dict[str, Any]]:
        """Every schedule doc (with ``rev``), by id."""
        with self._errors("read"):
            return list(self.schedules.find({}, {"_id": 0}).sort("scheduleId", 1))

    def save_schedule(self, doc: dict[str, Any], expected_rev: int | None = None) -> int | None:
        """Write ``doc`` (keyed by ``doc["scheduleId"]``). With ``expected_rev`` only when the
        stored rev is still that (compare-and-set), else create or replace. Returns the new
        rev, or None when the compare failed."""
        body = {k: v for k, v in doc.items() if k not in ("rev", "_id")}
        key = {"scheduleId": doc["scheduleId"]}
        with self._errors("write"):
            if expected_rev is not None:
                done = self.schedules.update_one({**key, "rev": expected_rev},
                                                 {"$set": {**body, "rev": expected_rev + 1}})
                return expected_rev + 1 if done.matched_count else None
            for attempt in range(3):
                try:
                    saved = self.schedules.find_one_and_update(
                        key, {"$set": body, "$inc": {"rev": 1}}, upsert=True,
                        return_document=pymongo.ReturnDocument.AFTER, projection={"rev": 1})
                    return int(saved["rev"])
                except DuplicateKeyError:  # two upserts raced to insert; the second now updates
                    if attempt == 2:
                        raise
        return None

    def delete_schedule(self, schedule_id: str) -> bool:
        """Delete the schedule; False when there was none."""
        with self._errors("delete"):
            return bool(self.schedules.delete_one({"scheduleId": schedule_id}).deleted_count > 0)
