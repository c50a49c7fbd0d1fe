"""Temporal decay: older memories count less, but never vanish."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

from .._util import DAY_MS, now_ms
from ..candidates import Candidate

__all__ = ["apply_decay", "decay_multiplier", "decay_multipliers"]


def decay_multiplier(age_days: float, half_life_days: float = 30.0, floor: float = 0.0) -> float:
    """``0.5 ** (age / half_life)``, never below ``floor``.

    A negative age counts as 0; a half-life that is not a positive finite number, or an
    age that is not finite, gives 1 (no decay).
    """
    return _multiplier(half_life_days, floor)(age_days)


def apply_decay(
    candidates: Sequence[Candidate], *, half_life_days: float = 30.0, floor: float = 0.35, now: int | None = None,
    rebase: bool = False, known: Mapping[str, float] | None = None,
) -> list[Candidate]:
    """Multiply each score by its decay multiplier (recorded in ``trace['decay']``) and sort.

    The floor keeps a year-old but relevant memory in play: with the default 0.35 an old
    exact match still outranks a fresh weak one instead of being erased.

    ``rebase`` divides every multiplier by the largest one among the candidates (the
    freshest memory keeps its score). The resulting order is exactly the same — decay
    only ever compares memories with each other — but a result set of uniformly old
    memories (all at the floor) is not scaled down as a whole, which would otherwise
    shrink the relevance signal that later stages (the packer) weigh against others.
    ``trace['decay_applied']`` records the factor actually applied.

    ``known``: multipliers already worked out with the same settings (:func:`decay_multipliers`),
    by id; the other candidates' are worked out here.
    """
    now = now_ms() if now is None else now
    multiplier = _multiplier(half_life_days, floor)
    held = known or {}
    multipliers = []
    for cand in candidates:
        m = held.get(cand.id)
        multipliers.append(_of(multiplier, cand, now) if m is None else m)
    top = max(multipliers, default=1.0) if rebase else 1.0
    for cand, m in zip(candidates, multipliers):
        applied = m / top if top > 0 else m
        cand.trace["decay"] = m
        cand.trace["decay_applied"] = applied
        cand.score *= applied
    return sorted(candidates, key=lambda c: c.score, reverse=True)


def decay_multipliers(
    candidates: Sequence[Candidate], *, half_life_days: float = 30.0, floor: float = 0.35, now: int,
) -> dict[str, float]:
    """Each candidate's decay multiplier, by id, before any rebase: it depends on the memory's
    time alone, so a search works it out while the query is still being embedded and passes
    it to :func:`apply_decay` as ``known``."""
    multiplier = _multiplier(half_life_days, floor)
    return {cand.id: _of(multiplier, cand, now) for cand in candidates}


def _of(multiplier: Callable[[float], float], cand: Candidate, now: int) -> float:
    """One candidate's multiplier (1 without a time)."""
    return multiplier((now - cand.created_at) / DAY_MS) if cand.created_at else 1.0


def _multiplier(half_life_days: float, floor: float) -> Callable[[float], float]:
    """:func:`decay_multiplier` of an age in days for one half-life and floor, its rate
    worked out once (a search decays every candidate with the same two)."""
    if not math.isfinite(half_life_days) or half_life_days <= 0:
        return lambda age_days: 1.0
    rate = math.log(2) / half_life_days

    def multiplier(age_days: float) -> float:
        if not math.isfinite(age_days):
            return 1.0
        return max(floor, math.exp(-rate * max(0.0, age_days)))

    return multiplier
