"""Score boosts (Comis ``score.ts``): recency, temporal, proof and trust, as factors centred on 1.

Every signal lies in 0–1 with 0.5 meaning "no information", and every factor follows one rule::

    factor = 1 + alpha × (signal − 0.5)

so an absent signal (or alpha 0) multiplies by exactly 1 and never reorders anything.

* recency: ``1 / (1 + age in days)`` of ``created_at`` (the record time);
* temporal: the same curve on the event time ``metadata.occurredAt`` (epoch ms), neutral
  when absent; a future time counts as now;
* proof: ``0.5 + ln(proofCount) / 10`` clamped to 0–1, with the part above neutral decayed by
  ``confidence × 0.5 ** (event age / 30 days)``; neutral without ``metadata.proofCount``;
* trust: system 1.0, learned 0.5, external 0.0;
* outdated: ``outdated_factor`` (not centred: a demotion) on a conversation turn whose every
  extracted fact was superseded (``metadata.outdated``, see
  :func:`~manowar_memory.lifecycle.mark_outdated_sources`), 1 on anything else.

``boosted = score × recency × temporal × proof × trust × outdated``; candidates are sorted by the
boosted score, and scores within 1e-9 of each other go to the more trusted memory.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from .._util import DAY_MS, now_ms
from ..candidates import Candidate
from .trust import TRUST_WEIGHT, trust_level

__all__ = ["apply_boosts", "boost_entries", "boost_factors", "factor"]

TIE_EPSILON = 1e-9


def factor(alpha: float, signal: float) -> float:
    """``1 + alpha × (signal − 0.5)``."""
    return 1.0 + alpha * (signal - 0.5)


def _age_signal(stamp: Any, now: int) -> float:
    if isinstance(stamp, bool) or not isinstance(stamp, (int, float)) or not math.isfinite(stamp) or stamp <= 0:
        return 0.5
    age_days = max(0.0, (now - float(stamp)) / DAY_MS)
    return 1.0 / (1.0 + age_days)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def boost_factors(
    cand: Candidate, *, now: int, recency_alpha: float = 0.2, temporal_alpha: float = 0.2,
    proof_alpha: float = 0.1, trust_alpha: float = 0.1, default_trust: str = "learned",
    outdated_factor: float = 1.0,
) -> dict[str, float]:
    """The five factors for one candidate."""
    level = trust_level(cand.metadata or {}, default_trust)
    trust = factor(trust_alpha, TRUST_WEIGHT[level])
    return dict(zip(_NAMES, _factors(cand, now, recency_alpha, temporal_alpha, proof_alpha, trust, outdated_factor)))


_NAMES = ("recency", "temporal", "proof", "trust", "outdated")
_TRACE_KEYS = tuple("boost_" + name for name in _NAMES)


def _factors(cand: Candidate, now: int, recency_alpha: float, temporal_alpha: float, proof_alpha: float,
             trust: float, outdated_factor: float = 1.0) -> tuple[float, float, float, float, float]:
    """The five factors in :data:`_NAMES` order (``factor`` written out: this runs per candidate;
    ``trust``: the candidate's trust factor)."""
    meta = cand.metadata or {}
    recency = 1.0 + recency_alpha * (_age_signal(cand.created_at, now) - 0.5)
    occurred = meta.get("occurredAt", meta.get("occurred_at"))
    temporal = 1.0 + temporal_alpha * (_age_signal(occurred, now) - 0.5) if occurred is not None else 1.0
    proof_count = _number(meta.get("proofCount", meta.get("proof_count")))
    proof = 1.0
    if proof_count is not None and proof_count >= 1:
        norm = min(1.0, max(0.0, 0.5 + math.log(proof_count) / 10.0))
        confidence = _number(meta.get("confidence"))
        stamp = _number(occurred) or _number(cand.created_at)
        age = max(0.0, (now - stamp) / DAY_MS) if stamp else 0.0
        conf_factor = (confidence if confidence is not None else 1.0) * 0.5 ** (age / 30.0)
        proof = factor(proof_alpha, 0.5 + (norm - 0.5) * conf_factor)
    outdated = outdated_factor if meta.get("outdated") is True else 1.0
    return recency, temporal, proof, trust, outdated


def boost_entries(
    candidates: Sequence[Candidate], *, now: int, recency_alpha: float = 0.2, temporal_alpha: float = 0.2,
    proof_alpha: float = 0.1, trust_alpha: float = 0.1, default_trust: str = "learned", outdated_factor: float = 1.0,
) -> dict[str, tuple[float, tuple[tuple[str, float], ...]]]:
    """Each candidate's boost ahead of :func:`apply_boosts`, by id: the product of its factors
    and the trace entries of those that are not 1. They depend on the memory alone, never on
    its score or the other candidates, so a search works them out while the query is still
    being embedded and passes them to :func:`apply_boosts` as ``known``."""
    trust_factors = {level: factor(trust_alpha, weight) for level, weight in TRUST_WEIGHT.items()}
    return {cand.id: _entry(cand, now, recency_alpha, temporal_alpha, proof_alpha,
                            trust_factors[trust_level(cand.metadata, default_trust)], outdated_factor)
            for cand in candidates}


def _entry(cand: Candidate, now: int, recency_alpha: float, temporal_alpha: float, proof_alpha: float,
           trust: float, outdated_factor: float) -> tuple[float, tuple[tuple[str, float], ...]]:
    """One candidate's boost: the product of its factors and the trace entries of those not 1."""
    factors = _factors(cand, now, recency_alpha, temporal_alpha, proof_alpha, trust, outdated_factor)
    total = 1.0
    for value in factors:
        total *= value
    return total, tuple((key, value) for key, value in zip(_TRACE_KEYS, factors) if value != 1.0)


def apply_boosts(
    candidates: Sequence[Candidate], *, now: int | None = None, recency_alpha: float = 0.2,
    temporal_alpha: float = 0.2, proof_alpha: float = 0.1, trust_alpha: float = 0.1,
    default_trust: str = "learned", outdated_factor: float = 1.0,
    known: Mapping[str, tuple[float, tuple[tuple[str, float], ...]]] | None = None,
) -> list[Candidate]:
    """Multiply each score by its factors (recorded in ``trace``) and sort: boosted score
    descending, near-ties (≤ 1e-9) to the higher trust, remaining ties in input order.
    ``known``: boosts already worked out with the same settings (:func:`boost_entries`), by id;
    the other candidates' are worked out here."""
    now = now_ms() if now is None else now
    held = known or {}
    missing = [cand for cand in candidates if cand.id not in held]
    fresh = boost_entries(missing, now=now, recency_alpha=recency_alpha, temporal_alpha=temporal_alpha,
                          proof_alpha=proof_alpha, trust_alpha=trust_alpha, default_trust=default_trust,
                          outdated_factor=outdated_factor) if missing else {}
    for cand in candidates:
        total, entries = held.get(cand.id) or fresh[cand.id]
        trace = cand.trace
        for key, value in entries:
            trace[key] = value
        trace["boost"] = total
        cand.score *= total

    ranked = sorted(candidates, key=lambda c: c.score, reverse=True)
    out: list[Candidate] = []
    start = 0
    while start < len(ranked):  # runs of near-equal scores go to the more trusted memory first
        end = start + 1
        while end < len(ranked) and ranked[start].score - ranked[end].score <= TIE_EPSILON:
            end += 1
        out.extend(sorted(ranked[start:end], key=lambda c: -TRUST_WEIGHT[trust_level(c.metadata, default_trust)])
                   if end - start > 1 else ranked[start:end])
        start = end
    return out
