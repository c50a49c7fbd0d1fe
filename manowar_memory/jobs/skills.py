"""Pattern → skill promotion: the validate rule (count ≥ 2, success rate ≥ 0.55,
confidence = min(1, count/10 × successRate) ≥ 0.2, reference §10.2), promotion of a valid pattern
into a learned skill, and the skill listing."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from .._util import content_hash, now_ms
from ..errors import InvalidInputError
from ..records import Pattern, Skill
from ._store import ChangedScopes, JobStore
from .base import _Params

__all__ = [
    "MIN_PATTERN_CONFIDENCE",
    "MIN_PATTERN_COUNT",
    "MIN_PATTERN_SUCCESS_RATE",
    "ListSkillsParams",
    "PromotePatternParams",
    "ValidatePatternParams",
    "get_skill",
    "list_skills",
    "promote_pattern",
    "validate_pattern",
]

MIN_PATTERN_COUNT = 2
MIN_PATTERN_SUCCESS_RATE = 0.55
MIN_PATTERN_CONFIDENCE = 0.2


def _confidence(count: int, success_rate: float) -> float:
    return min(1.0, (count / 10) * success_rate)


class ValidatePatternParams(_Params):
    """Check whether a stored pattern is good enough to become a skill."""

    pattern_id: str = Field(description="the pattern to validate")


class PromotePatternParams(_Params):
    """Promote a valid pattern into a learned skill (validated again here)."""

    pattern_id: str = Field(description="the pattern to promote")
    skill_name: str = Field(min_length=1, description="name of the new skill")


class ListSkillsParams(_Params):
    """List learned skills."""

    agent_wallet: str | None = Field(default=None, description="only skills of this agent")
    category: str | None = Field(default=None, description="only this category")
    limit: int = Field(default=20, description="1..100")


def validate_pattern(store: JobStore, pattern_id: str) -> dict[str, Any]:
    """``{valid, confidence, occurrences, successRate, toolSequence}`` (reference §10.2)."""
    pattern = store.get_pattern(pattern_id)
    if pattern is None:
        return {"patternId": pattern_id, "valid": False, "confidence": 0.0, "occurrences": 0, "successRate": 0.0,
                "toolSequence": [], "reason": "pattern not found"}
    confidence = _confidence(pattern.execution_count, pattern.success_rate)
    reasons = []
    if pattern.execution_count < MIN_PATTERN_COUNT:
        reasons.append(f"executionCount {pattern.execution_count} < {MIN_PATTERN_COUNT}")
    if pattern.success_rate < MIN_PATTERN_SUCCESS_RATE:
        reasons.append(f"successRate {pattern.success_rate} < {MIN_PATTERN_SUCCESS_RATE}")
    if confidence < MIN_PATTERN_CONFIDENCE:
        reasons.append(f"confidence {confidence:.3f} < {MIN_PATTERN_CONFIDENCE}")
    return {"patternId": pattern_id, "valid": not reasons, "confidence": confidence,
            "occurrences": pattern.execution_count, "successRate": pattern.success_rate,
            "toolSequence": [s.action for s in sorted(pattern.steps, key=lambda s: s.order)],
            "reason": "; ".join(reasons) or None}


def _find_promoted(store: JobStore, pattern: Pattern, skill_name: str) -> Skill | None:
    for skill in store.list_skills(pattern.agent_wallet, "learned", 100_000):
        pats = skill.trigger.get("patterns") or []
        if skill.name == skill_name and pats and pats[0] == pattern.pattern_id:
            return skill
    return None


def promote_pattern(store: JobStore, pattern_id: str, skill_name: str, *, now: int | None = None,
                    changes: ChangedScopes | None = None) -> dict[str, Any]:
    """Validate the pattern again and, when valid, create the skill. Promoting the same pattern
    into the same skill name twice returns the existing skill with ``promoted: False``."""
    now = now if now is not None else now_ms()
    skill_name = skill_name.strip()
    if not skill_name:
        raise InvalidInputError("skill_name must not be empty")
    validation = validate_pattern(store, pattern_id)
    pattern = store.get_pattern(pattern_id)
    if pattern is None or not validation["valid"]:
        return {"skillId": "", "promoted": False, "reason": validation["reason"], "validation": validation}
    existing = _find_promoted(store, pattern, skill_name)
    if existing is not None:
        return {"skillId": existing.skill_id, "promoted": False, "reason": "already promoted into this skill name",
                "validation": validation}
    tools = validation["toolSequence"]
    skill = Skill(
        skill_id=f"skill_{pattern_id}_{content_hash(skill_name + str(now), 20)}", name=skill_name,
        description=f"Learned from pattern {pattern_id}: {pattern.summary}", category="learned",
        trigger={"type": "pattern", "patterns": [pattern_id, *tools]},
        spawn_config={"skillType": "learned", "tools": tools, "maxSteps": max(3, len(tools)),
                      "conditions": {"minConfidence": validation["confidence"]}},
        success_rate=pattern.success_rate, usage_count=0, creator="system", agents=[pattern.agent_wallet],
        tags=["auto-promoted", "pattern"], created_at=now,
    )
    store.add_skill(skill)
    store.upsert_pattern(pattern.model_copy(update={
        "metadata": {**pattern.metadata, "taskType": "promoted"}, "updated_at": now}))
    if changes is not None:
        changes.add(pattern)
    return {"skillId": skill.skill_id, "promoted": True, "reason": None, "validation": validation}


def list_skills(store: JobStore, agent_wallet: str | None = None, category: str | None = None,
                limit: int = 20) -> list[Skill]:
    return store.list_skills(agent_wallet, category, max(1, min(100, int(limit or 20))))


def get_skill(store: JobStore, skill_id: str) -> Skill | None:
    return store.get_skill(skill_id)
