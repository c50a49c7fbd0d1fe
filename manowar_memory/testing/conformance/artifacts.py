"""The artifacts role of the conformance suite (:class:`ArtifactsConformance`)."""

from __future__ import annotations

from typing import Any

from ...errors import StoreError
from ...records import (
    Archive,
    Job,
    Skill,
)
from ...stores.base import Store

try:
    import pytest
except ImportError as exc:  # pragma: no cover - only without the dev extra
    from ...errors import MissingDependencyError

    raise MissingDependencyError("pytest", "dev", "The store conformance suite") from exc

from .common import AGENT, OTHER_AGENT, T0, _q, _RoleConformance

__all__ = ["ArtifactsConformance"]


class ArtifactsConformance(_RoleConformance):
    """The :class:`~manowar_memory.stores.base.ArtifactStore` role: patterns, archives, skills, jobs."""

    # ------------------------------------------------------------------ patterns
    def test_patterns(self, store: Store) -> None:
        p = self._pattern("p1", 0.5, created_at=T0, metadata={"tags": ["a"]})
        store.upsert_pattern(p)
        assert store.get_pattern("p1") == p
        assert store.get_pattern("p-missing") is None
        again = self._pattern("p1", 0.9, created_at=T0 + 500, summary="search, compare, then book")
        store.upsert_pattern(again)
        got = store.get_pattern("p1")
        assert got is not None and got.created_at == T0  # kept from the first insert
        assert (got.success_rate, got.summary, got.updated_at) == (0.9, "search, compare, then book", T0 + 500)
        store.upsert_pattern(self._pattern("p2", 0.7, created_at=T0 + 1))
        store.upsert_pattern(self._pattern("p3", 0.7, created_at=T0 + 2))
        store.upsert_pattern(self._pattern("p-user", 0.95, user="u1"))
        store.upsert_pattern(self._pattern("p-other", 1.0, agent=OTHER_AGENT))
        store.upsert_pattern(self._pattern("p-local", 0.99, mode="local", hai="h1"))
        assert [x.pattern_id for x in store.find_patterns(_q(), 10)] == ["p-local", "p1", "p3", "p2"]
        assert [x.pattern_id for x in store.find_patterns(_q(user="u1"), 10)] == ["p-local", "p-user", "p1", "p3", "p2"]
        assert [x.pattern_id for x in store.find_patterns(_q(mode="local", hai="h1"), 10)] == ["p-local"]
        assert [x.pattern_id for x in store.find_patterns(_q(user="u1"), 2)] == ["p-local", "p-user"]

    # ------------------------------------------------------------------ archives
    def test_archives(self, store: Store) -> None:
        def arc(aid: str, created: int, **kw: Any) -> Archive:
            return Archive(archive_id=aid, agent_wallet=kw.pop("agent", AGENT), summary=f"archive {aid}",
                           content="H4sIAAAA", date_range={"start": created - 10, "end": created},
                           metadata={"entryCount": 3, "topics": ["travel"]}, created_at=created, **kw)

        a1 = arc("a1", T0)
        store.add_archive(a1)
        store.add_archive(arc("a2", T0 + 10))
        store.add_archive(arc("a-user", T0 + 20, user_address="u1"))
        store.add_archive(arc("a-other", T0 + 30, agent=OTHER_AGENT))
        assert store.get_archive("a1") == a1
        assert store.get_archive("missing") is None
        store.update_archive("a1", {"ipfs_cid": "bafy123", "summary": "updated"})
        got = store.get_archive("a1")
        assert got is not None and (got.ipfs_cid, got.summary, got.content) == ("bafy123", "updated", "H4sIAAAA")
        with pytest.raises(StoreError):
            store.update_archive("missing", {"ipfs_cid": "x"})
        assert [a.archive_id for a in store.find_archives(_q(), 10)] == ["a2", "a1"]
        assert [a.archive_id for a in store.find_archives(_q(user="u1"), 10)] == ["a-user", "a2", "a1"]
        assert [a.archive_id for a in store.find_archives(_q(user="u1"), 1)] == ["a-user"]
        assert [a.archive_id for a in store.find_archives(_q(agent=OTHER_AGENT), 10)] == ["a-other"]

    # ------------------------------------------------------------------ skills
    def test_skills(self, store: Store) -> None:
        def skill(sid: str, rate: float, usage: int, agents: list[str], category: str = "learned") -> Skill:
            return Skill(skill_id=sid, name=f"skill {sid}", description="does things", category=category,
                         trigger={"type": "intent", "patterns": ["book"]}, spawn_config={"skillType": "learned"},
                         success_rate=rate, usage_count=usage, agents=agents, tags=["t"], created_at=T0)

        k1 = skill("k1", 0.8, 5, [AGENT])
        store.add_skill(k1)
        store.add_skill(skill("k2", 0.9, 1, [AGENT, OTHER_AGENT]))
        store.add_skill(skill("k3", 0.8, 9, [OTHER_AGENT], category="custom"))
        assert store.get_skill("k1") == k1 and store.get_skill("nope") is None
        assert [s.skill_id for s in store.list_skills(None, None, 10)] == ["k2", "k3", "k1"]
        assert [s.skill_id for s in store.list_skills(AGENT, None, 10)] == ["k2", "k1"]
        assert [s.skill_id for s in store.list_skills(None, "custom", 10)] == ["k3"]
        assert [s.skill_id for s in store.list_skills(OTHER_AGENT, "learned", 10)] == ["k2"]
        assert [s.skill_id for s in store.list_skills(None, None, 1)] == ["k2"]

    # ------------------------------------------------------------------ jobs
    def test_jobs(self, store: Store) -> None:
        job = Job(job_id="j1", type="consolidate", agent_wallet=AGENT, data={"n": 1}, created_at=T0)
        store.put_job(job)
        assert store.get_job("j1") == job
        done = job.model_copy(update={"status": "completed", "completed_at": T0 + 5, "data": {"merged": 2}})
        store.put_job(done)
        assert store.get_job("j1") == done
        failed = Job(job_id="j2", type="cleanup", status="failed", error="boom", created_at=T0)
        store.put_job(failed)
        assert store.get_job("j2") == failed and store.get_job("j3") is None
