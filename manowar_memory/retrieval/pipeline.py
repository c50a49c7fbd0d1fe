"""The ranking stages of a hybrid search, and the one function that puts them in order.

A stage takes the candidates (best first) and returns them re-ranked; it writes what it
did into each candidate's ``trace`` and, when something degraded, into the run's
:class:`RankContext`. :func:`ranking_stages` assembles the list from the
:class:`~manowar_memory.config.RetrievalConfig` and the search's :class:`RankOptions`:

1. ``decay``: half-life on the memory's time, with a floor (when ``options.decay``);
2. ``rerank``: the cross-encoder with its skip rule, timeout and fail-soft (when ``options.rerank``);
3. ``boosts``: recency, temporal, proof and trust factors centred on 1 (after a successful
   rerank, the reranked pool and the rest are boosted apart, the pool staying first);
4. ``time``: what the query says about time (:mod:`manowar_memory.ranking.temporal`): "when"
   questions favour memories that state a time, a window ("last week", "in June 2023")
   favours (or, with ``time_window_restrict``, keeps only) memories inside it, "before she
   moved" those before the event, "the first time" the oldest (when ``time_queries``);
5. ``mmr``: maximal marginal relevance, the only place the engine's searches apply it
   (when ``options.mmr``); the returned order is the MMR order.

A user adds a stage of their own with :class:`StageInsert` (``MemoryEngine.insert_stage``):

>>> class DropShort:
...     name = "drop-short"
...     def __call__(self, candidates, ctx):
...         return [c for c in candidates if len(c.text) > 3]
>>> [s.name for s in ranking_stages(RetrievalConfig(), RankOptions(), [StageInsert(DropShort(), before="boosts")])]
['decay', 'drop-short', 'boosts', 'time']
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from .._util import DAY_MS
from ..candidates import Candidate
from ..config import RetrievalConfig
from ..errors import ConfigurationError
from ..ranking.boosts import apply_boosts, boost_entries
from ..ranking.decay import apply_decay, decay_multipliers
from ..ranking.mmr import mmr_order
from ..ranking.rerank import rerank_candidates
from ..ranking.temporal import TimeIntent, apply_time_intent, parse_time_query
from ..rerankers.base import Reranker
from ..threads import EngineThreads

__all__ = [
    "BoostStage",
    "DecayStage",
    "LaneReport",
    "MMRStage",
    "RankContext",
    "RankOptions",
    "RankingStage",
    "RerankStage",
    "StageInsert",
    "TimeStage",
    "prepare_stages",
    "ranking_stages",
    "run_stages",
]


@dataclass(frozen=True)
class RankOptions:
    """Which optional ranking stages run for a search."""

    decay: bool = True
    rerank: bool = False
    mmr: bool = False


@dataclass
class LaneReport:
    """What each lane found and how the search was served.

    ``keyword`` / ``vector`` / ``entity``: hit counts; ``hits``: each lane's own best hits
    as ``[id, score]`` (at most the search limit per lane); ``fallback``: set when keyword
    results stood in for the vector lane; ``rerank``: the rerank outcome;
    ``trust_filtered``: lane hits dropped by the trust filter before fusion;
    ``keyword_pruned_terms``: query terms the store left out of the keyword and entity lanes'
    full-text searches, too common in a large scope to score every row holding them (0: exact).
    """

    keyword: int = 0
    vector: int = 0
    entity: int = 0
    vector_method: str | None = None
    fallback: str | None = None
    rerank: str | None = None
    below_threshold: int = 0
    trust_filtered: int = 0
    keyword_pruned_terms: int = 0
    entities: list[str] = field(default_factory=list)
    hits: dict[str, list[list[object]]] = field(default_factory=dict)
    extra: dict[str, object] = field(default_factory=dict)

    def as_dict(self) -> dict[str, object]:
        """The report as results show it: counts always, the rest when set."""
        return {k: v for k, v in vars(self).items() if v not in (None, {}, 0) or k in ("keyword", "vector")}


@dataclass
class RankContext:
    """What a stage may read and where it reports: the query, the search limit, the time
    ``now`` (ms), the settings, the reranker and threads, the lane report (the rerank
    outcome goes there) and the run's degradations (a stage appends what it gave up on).

    ``pool``: set by a successful rerank to the number of leading candidates it scored; a
    later stage must not mix those scores with the rest (:class:`BoostStage` boosts the two
    parts apart). ``time``: what the query says about time, read once per search when the
    ``time`` stage runs. ``ahead``: what stages worked out before the search's candidates were
    all known (:func:`prepare_stages`), by stage name."""

    text: str
    limit: int
    now: int
    config: RetrievalConfig
    report: LaneReport
    reranker: Reranker | None = None
    threads: EngineThreads | None = None
    degradations: list[str] = field(default_factory=list)
    pool: int | None = None
    time: TimeIntent | None = None
    ahead: dict[str, Any] = field(default_factory=dict)

    def degrade(self, message: str) -> None:
        """Record a degradation of this search (once)."""
        if message not in self.degradations:
            self.degradations.append(message)


@runtime_checkable
class RankingStage(Protocol):
    """One ranking stage: ``stage(candidates, ctx) -> candidates``, best first.

    A stage records what it did in each candidate's ``trace`` and what it gave up on with
    ``ctx.degrade``; ``name`` labels it in ``timings_ms`` and places inserted stages. It may
    also have ``prepare(candidates, ctx)``, for work on some candidates ahead of its call
    (:func:`prepare_stages`)."""

    @property
    def name(self) -> str:
        """The stage's name (``timings_ms`` key, insertion anchor)."""
        ...

    def __call__(self, candidates: list[Candidate], ctx: RankContext) -> list[Candidate]: ...


@dataclass(frozen=True)
class DecayStage:
    """Temporal decay: half-life on the memory's time, never below the floor."""

    name: str = "decay"

    def prepare(self, candidates: list[Candidate], ctx: RankContext) -> None:
        """The candidates' multipliers ahead of the stage (they depend on each memory's time alone)."""
        c = ctx.config
        ctx.ahead.setdefault(self.name, {}).update(
            decay_multipliers(candidates, half_life_days=c.decay_half_life_days, floor=c.decay_floor, now=ctx.now))

    def __call__(self, candidates: list[Candidate], ctx: RankContext) -> list[Candidate]:
        c = ctx.config
        return apply_decay(candidates, half_life_days=c.decay_half_life_days, floor=c.decay_floor, now=ctx.now,
                           rebase=c.decay_rebase, known=ctx.ahead.get(self.name))


@dataclass(frozen=True)
class RerankStage:
    """The cross-encoder over the top ``2 × limit`` (skip rule, timeout, fail-soft)."""

    name: str = "rerank"

    def __call__(self, candidates: list[Candidate], ctx: RankContext) -> list[Candidate]:
        if ctx.reranker is None:
            ctx.report.rerank = "skipped: no reranker configured"
            ctx.degrade("rerank skipped: no reranker configured")
            return candidates
        if not candidates:
            return candidates
        c = ctx.config
        cut = max(ctx.limit * 2, ctx.limit)
        pool, tail = candidates[:cut], candidates[cut:]
        ordered, outcome = rerank_candidates(
            ctx.text, pool, ctx.reranker, timeout=c.rerank_timeout_s, min_candidates=c.rerank_min_candidates,
            dominance_delta=c.rerank_dominance_delta,
            executor=ctx.threads.rerank if ctx.threads is not None else None,
        )
        ctx.report.rerank = outcome.status if outcome.reason is None else f"{outcome.status}: {outcome.reason}"
        if outcome.status == "failed" and outcome.reason:
            ctx.degrade(outcome.reason)
        if outcome.status == "reranked":
            ctx.pool = len(ordered)
        return ordered + tail


@dataclass(frozen=True)
class BoostStage:
    """Recency, temporal, proof and trust factors (centred on 1) and the outdated-turn demotion;
    re-sorts by score."""

    name: str = "boosts"

    @staticmethod
    def _settings(ctx: RankContext) -> dict[str, Any]:
        c = ctx.config
        return {
            "now": ctx.now, "recency_alpha": c.recency_alpha, "temporal_alpha": c.temporal_alpha,
            "proof_alpha": c.proof_alpha, "trust_alpha": c.trust_alpha, "default_trust": c.default_trust,
            "outdated_factor": c.outdated_factor,
        }

    def prepare(self, candidates: list[Candidate], ctx: RankContext) -> None:
        """The candidates' boosts ahead of the stage (they depend on each memory alone)."""
        ctx.ahead.setdefault(self.name, {}).update(boost_entries(candidates, **self._settings(ctx)))

    def __call__(self, candidates: list[Candidate], ctx: RankContext) -> list[Candidate]:
        boost = {**self._settings(ctx), "known": ctx.ahead.get(self.name)}
        if ctx.pool is None:
            return apply_boosts(candidates, **boost)
        # two score scales (reranker and fused): boost each part on its own, the pool first
        head, tail = candidates[: ctx.pool], candidates[ctx.pool:]
        return apply_boosts(head, **boost) + apply_boosts(tail, **boost)


@dataclass(frozen=True)
class TimeStage:
    """The query's time: "when" questions, windows, before/after an event, first/last
    (:func:`~manowar_memory.ranking.temporal.apply_time_intent`); what it read goes to the
    lane report's ``extra["time"]``."""

    name: str = "time"

    def __call__(self, candidates: list[Candidate], ctx: RankContext) -> list[Candidate]:
        intent = ctx.time if ctx.time is not None else parse_time_query(ctx.text, ctx.now)
        if intent.empty:
            return candidates
        c = ctx.config
        kwargs = {"when_boost": c.when_boost, "window_boost": c.time_window_boost, "order_boost": c.time_order_boost,
                  "restrict": c.time_window_restrict, "pool": ctx.limit * 2,
                  "speaker_boost": c.when_speaker_boost, "stated_boost": c.time_stated_boost,
                  "stated_span_ms": c.date_lane_max_days * DAY_MS}
        if ctx.pool is None:
            out, note = apply_time_intent(candidates, intent, **kwargs)  # type: ignore[arg-type]
        else:  # reranker and fused scores: each part on its own, the reranked pool first
            head, note = apply_time_intent(candidates[: ctx.pool], intent, **kwargs)  # type: ignore[arg-type]
            tail, tail_note = apply_time_intent(candidates[ctx.pool:], intent, **kwargs)  # type: ignore[arg-type]
            out, note = head + tail, note or tail_note
        report: dict[str, object] = {"phrases": list(intent.phrases)}
        for key in ("asks_when", "order", "side", "month"):
            if getattr(intent, key):
                report[key] = getattr(intent, key)
        if note:
            report["note"] = note
        ctx.report.extra["time"] = report
        return out


@dataclass(frozen=True)
class MMRStage:
    """Maximal marginal relevance over the top ``2 × limit``; the order it returns is final
    (scores are lowered just enough to follow it, so a later sort by score keeps it)."""

    name: str = "mmr"

    def __call__(self, candidates: list[Candidate], ctx: RankContext) -> list[Candidate]:
        return mmr_order(candidates[: ctx.limit * 2], lambda_=ctx.config.mmr_lambda, keep_order_in_scores=True)


@dataclass(frozen=True)
class StageInsert:
    """A user's stage and where it goes: right ``after`` or ``before`` the named stage (when
    that stage is not in this search's list, the insert is skipped), or last when neither
    is given."""

    stage: RankingStage
    after: str | None = None
    before: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.stage, RankingStage) or not isinstance(getattr(self.stage, "name", None), str):
            raise ConfigurationError("a ranking stage needs a string `name` and `__call__(candidates, ctx)`")
        if self.after is not None and self.before is not None:
            raise ConfigurationError("place a stage either after or before another one, not both")


def ranking_stages(
    config: RetrievalConfig, options: RankOptions, inserts: Sequence[StageInsert] = ()
) -> list[RankingStage]:
    """The ranking stages of one search, in order: decay, rerank, boosts, time, MMR, with the
    optional ones as ``options`` asks and the user's ``inserts`` in their places."""
    stages: list[RankingStage] = []
    if options.decay:
        stages.append(DecayStage())
    if options.rerank:
        stages.append(RerankStage())
    stages.append(BoostStage())
    if config.time_queries:
        stages.append(TimeStage())
    if options.mmr:
        stages.append(MMRStage())
    for insert in inserts:
        names = [s.name for s in stages]
        if insert.after is not None:
            if insert.after in names:
                stages.insert(names.index(insert.after) + 1, insert.stage)
        elif insert.before is not None:
            if insert.before in names:
                stages.insert(names.index(insert.before), insert.stage)
        else:
            stages.append(insert.stage)
    return stages


def prepare_stages(stages: Sequence[RankingStage], candidates: list[Candidate], ctx: RankContext) -> None:
    """Let each stage that can (a ``prepare(candidates, ctx)`` method) work out what it will need
    of ``candidates`` that depends on neither their scores nor the other candidates, into
    ``ctx.ahead``: a search calls it while the query is still being embedded, for the candidates
    the keyword and entity lanes found, so the stages have less left to do once the vector lane
    is in. A stage must rank the same with or without it."""
    for stage in stages:
        prepare = getattr(stage, "prepare", None)
        if callable(prepare):
            prepare(candidates, ctx)


def run_stages(
    candidates: list[Candidate], ctx: RankContext, stages: Sequence[RankingStage], timings: dict[str, float],
    prefix: str = "",
) -> list[Candidate]:
    """Run ``stages`` in order over the candidates; each stage's milliseconds go into
    ``timings`` under ``prefix + stage.name`` (added to what is there), so the timings list
    exactly the stages that ran."""
    for stage in stages:
        t0 = time.perf_counter()
        try:
            candidates = stage(candidates, ctx)
        finally:
            key = prefix + stage.name
            timings[key] = timings.get(key, 0.0) + (time.perf_counter() - t0) * 1000
    return candidates
