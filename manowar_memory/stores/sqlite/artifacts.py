"""The artifacts role of the SQLite store (:class:`~manowar_memory.stores.base.ArtifactStore`)."""

from __future__ import annotations

import json
from typing import Any

from ...errors import StoreError
from ...records import Archive, Job, Pattern, Skill
from ..base import (
    MemoryQuery,
)
from .connection import SQLiteConnection

__all__ = ["SQLiteArtifacts"]


class SQLiteArtifacts(SQLiteConnection):
    """Patterns, archives, skills and jobs."""

    # -- patterns, archives, skills, jobs --
    def upsert_pattern(self, pattern: Pattern) -> None:
        with self._write() as conn:
            existing = conn.execute("SELECT doc FROM patterns WHERE pattern_id = ?", (pattern.pattern_id,)).fetchone()
            if existing is not None:
                pattern = pattern.model_copy(update={"created_at": json.loads(existing[0])["createdAt"]})
            conn.execute(
                "INSERT INTO patterns VALUES (?,?,?,?,?,?,?,?,?) ON CONFLICT (pattern_id) DO UPDATE SET "
                "doc = excluded.doc, success_rate = excluded.success_rate",
                (
                    pattern.pattern_id, pattern.agent_wallet, pattern.user_address, pattern.thread_id, pattern.mode,
                    pattern.hai_id, pattern.model_dump_json(by_alias=True), pattern.success_rate, pattern.created_at,
                ),
            )


    def get_pattern(self, pattern_id: str) -> Pattern | None:
        with self._conn() as conn:
            row = conn.execute("SELECT doc FROM patterns WHERE pattern_id = ?", (pattern_id,)).fetchone()
        return Pattern.model_validate_json(row[0]) if row else None


    def find_patterns(self, query: MemoryQuery, limit: int) -> list[Pattern]:
        where, params = self._scope_sql(query, has_status=False, json_col="doc", source_col=None)
        with self._conn() as conn:
            rows = conn.execute(
                f"SELECT doc FROM patterns WHERE {where} ORDER BY success_rate DESC, created_at DESC LIMIT ?",
                [*params, limit],
            ).fetchall()
        return [Pattern.model_validate_json(r[0]) for r in rows]


    def add_archive(self, archive: Archive) -> None:
        with self._write() as conn:
            conn.execute(
                "INSERT INTO archives VALUES (?,?,?,?,?,?,?,?)",
                (
                    archive.archive_id, archive.agent_wallet, archive.user_address, archive.thread_id, archive.mode,
                    archive.hai_id, archive.model_dump_json(by_alias=True), archive.created_at,
                ),
            )


    def get_archive(self, archive_id: str) -> Archive | None:
        with self._conn() as conn:
            row = conn.execute("SELECT doc FROM archives WHERE archive_id = ?", (archive_id,)).fetchone()
        return Archive.model_validate_json(row[0]) if row else None


    def update_archive(self, archive_id: str, changes: dict[str, Any]) -> None:
        archive = self.get_archive(archive_id)
        if archive is None:
            raise StoreError(f"archive {archive_id} does not exist")
        updated = archive.model_copy(update=changes)
        with self._write() as conn:
            conn.execute(
                "UPDATE archives SET doc = ? WHERE archive_id = ?", (updated.model_dump_json(by_alias=True), archive_id)
            )


    def find_archives(self, query: MemoryQuery, limit: int) -> list[Archive]:
        where, params = self._scope_sql(query, has_status=False, json_col="doc", source_col=None)
        with self._conn() as conn:
            rows = conn.execute(
                f"SELECT doc FROM archives WHERE {where} ORDER BY created_at DESC LIMIT ?", [*params, limit]
            ).fetchall()
        return [Archive.model_validate_json(r[0]) for r in rows]


    def add_skill(self, skill: Skill) -> None:
        with self._write() as conn:
            conn.execute(
                "INSERT INTO skills VALUES (?,?,?,?)",
                (skill.skill_id, skill.model_dump_json(by_alias=True), skill.category, skill.created_at),
            )


    def get_skill(self, skill_id: str) -> Skill | None:
        with self._conn() as conn:
            row = conn.execute("SELECT doc FROM skills WHERE skill_id = ?", (skill_id,)).fetchone()
        return Skill.model_validate_json(row[0]) if row else None


    def list_skills(self, agent_wallet: str | None, category: str | None, limit: int) -> list[Skill]:
        with self._conn() as conn:
            rows = conn.execute("SELECT doc FROM skills").fetchall()
        skills = [Skill.model_validate_json(r[0]) for r in rows]
        skills = [
            s for s in skills
            if (agent_wallet is None or agent_wallet in s.agents) and (category is None or s.category == category)
        ]
        skills.sort(key=lambda s: (-s.success_rate, -s.usage_count, -s.created_at))
        return skills[:limit]


    def put_job(self, job: Job) -> None:
        with self._write() as conn:
            conn.execute(
                "INSERT INTO jobs VALUES (?,?,?,?,?,?) ON CONFLICT (job_id) DO UPDATE SET "
                "status = excluded.status, doc = excluded.doc",
                (job.job_id, job.type, job.status, job.agent_wallet, job.model_dump_json(by_alias=True), job.created_at),
            )


    def get_job(self, job_id: str) -> Job | None:
        with self._conn() as conn:
            row = conn.execute("SELECT doc FROM jobs WHERE job_id = ?", (job_id,)).fetchone()
        return Job.model_validate_json(row[0]) if row else None
