"""The artifacts role of the MongoDB store (:class:`~manowar_memory.stores.base.ArtifactStore`)."""

from __future__ import annotations

from typing import Any

from ...errors import MissingDependencyError, StoreError
from ...records import Archive, Job, Pattern, Skill
from .._mql_schema import (
    ARCHIVES,
    PATTERNS,
)
from ..base import MemoryQuery
from .connection import (
    MongoConnection,
    _scoped_doc,
    _strip,
)

try:
    from pymongo.errors import DuplicateKeyError
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise MissingDependencyError("pymongo", "mongo", "The MongoDB store") from exc

__all__ = ["MongoArtifacts"]


class MongoArtifacts(MongoConnection):
    """Patterns, archives, skills and jobs."""

    # -- patterns, archives, skills, jobs --
    def upsert_pattern(self, pattern: Pattern) -> None:
        doc = _scoped_doc(pattern)
        created = doc.pop("createdAt")
        with self._errors("upsert"):
            for attempt in range(3):
                try:
                    self.patterns.update_one(
                        {"patternId": pattern.pattern_id},
                        {"$set": doc, "$setOnInsert": {"createdAt": created}},
                        upsert=True,
                    )
                    return
                except DuplicateKeyError:
                    if attempt == 2:
                        raise

    def get_pattern(self, pattern_id: str) -> Pattern | None:
        return self._get(self.patterns, "patternId", pattern_id, Pattern)

    def find_patterns(self, query: MemoryQuery, limit: int) -> list[Pattern]:
        order = [("successRate", -1), ("createdAt", -1), ("_id", -1)]
        return self._find(self.patterns, query, PATTERNS, order, limit, Pattern)

    def add_archive(self, archive: Archive) -> None:
        with self._errors("insert"):
            try:
                self.archives.insert_one(_scoped_doc(archive))
            except DuplicateKeyError as exc:
                raise StoreError(f"archive {archive.archive_id} already exists") from exc

    def get_archive(self, archive_id: str) -> Archive | None:
        return self._get(self.archives, "archiveId", archive_id, Archive)

    def update_archive(self, archive_id: str, changes: dict[str, Any]) -> None:
        archive = self.get_archive(archive_id)
        if archive is None:
            raise StoreError(f"archive {archive_id} does not exist")
        updated = archive.model_copy(update=changes)
        with self._errors("update"):
            self.archives.replace_one({"archiveId": archive_id}, _scoped_doc(updated))

    def find_archives(self, query: MemoryQuery, limit: int) -> list[Archive]:
        return self._find(self.archives, query, ARCHIVES, [("createdAt", -1), ("_id", -1)], limit, Archive)

    def add_skill(self, skill: Skill) -> None:
        with self._errors("insert"):
            try:
                self.skills.insert_one(skill.to_doc())
            except DuplicateKeyError as exc:
                raise StoreError(f"skill {skill.skill_id} already exists") from exc

    def get_skill(self, skill_id: str) -> Skill | None:
        return self._get(self.skills, "skillId", skill_id, Skill)

    def list_skills(self, agent_wallet: str | None, category: str | None, limit: int) -> list[Skill]:
        flt: dict[str, Any] = {}
        if agent_wallet is not None:
            flt["agents"] = agent_wallet
        if category is not None:
            flt["category"] = category
        if limit <= 0:
            return []
        with self._errors("read"):
            docs = self.skills.find(flt).sort(
                [("successRate", -1), ("usageCount", -1), ("createdAt", -1)]
            ).limit(int(limit))
            return [Skill.model_validate(_strip(d)) for d in docs]

    def put_job(self, job: Job) -> None:
        with self._errors("upsert"):
            self._upsert(self.jobs, {"jobId": job.job_id}, job.to_doc())

    def get_job(self, job_id: str) -> Job | None:
        return self._get(self.jobs, "jobId", job_id, Job)
