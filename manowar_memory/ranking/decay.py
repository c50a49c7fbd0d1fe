"""Temporal decay: older memories count less, but never vanish."""

from __future__ import annotations

import math
from collections.abc import Sequence

from .._util import DAY_MS, now_ms
from ..candidates import Candidate

__all__ = ["apply_decay", "decay_multiplier"]


def decay_multiplier(age_days: float, half_life_days: float = 30.0, floor: float = 0.0) -> float:
    """``0.5 ** (age / half_life)``, never below ``floor``.

    A negative age counts as 0; a half-life that is not a positive finite number, or an
    age that is not finite, gives 1 (no decay).
    """
    if not math.isfinite(half_life_days) or half_life_days <= 0 or not math.isfinite(age_days):
        return 1.0
    return max(floor, math.exp(-(math.log(2) / half_life_days) * max(0.0, age_days)))


def apply_decay(
    candidates: Sequence[Candidate], *, half_life_days: float = 30.0, floor: float = 0.35, now: int | None = None
) -> list[Candidate]:
    """Multiply each score by its decay multiplier (recorded in ``trace['decay']``) and sort.

    The floor keeps a year-old but relevant memory in play: with the default 0.35 an old
    exact match still outranks a fresh weak one instead of being erased.
    """
    now = now_ms() if now is None else now
    for cand in candidates:
        age = (now - cand.created_at) / DAY_MS if cand.created_at else float("nan")
        m = decay_multiplier(age, half_life_days, floor) if cand.created_at else 1.0
        cand.trace["decay"] = m
        cand.score *= m
    return sorted(candidates, key=lambda c: c.score, reverse=True)
