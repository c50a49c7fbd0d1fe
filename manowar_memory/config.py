"""Engine settings with the reference's defaults (the documented ones where docs and code differ)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from .errors import InvalidConfigError
from .expiry import TTL_KINDS

__all__ = ["MemoryConfig", "PackerConfig", "RetrievalConfig"]


class _Settings(BaseModel):
    """A settings model: unknown fields, NaN and infinities are refused, and a refused value
    raises :class:`~manowar_memory.errors.InvalidConfigError` (pydantic's message, which names
    the field and what it accepts), not pydantic's own ``ValidationError``."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    def __init__(self, /, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise _refusal(exc) from None

    @classmethod
    def model_validate(cls, obj: Any, *args: Any, **kwargs: Any) -> Any:
        """:meth:`pydantic.BaseModel.model_validate`, refusing with :class:`InvalidConfigError`."""
        try:
            return super().model_validate(obj, *args, **kwargs)
        except ValidationError as exc:
            raise _refusal(exc) from None


def _refusal(exc: ValidationError) -> InvalidConfigError:
    """The library's error for pydantic's; a nested settings model's own refusal (pydantic wraps
    it as a value error) comes out as it was raised."""
    details = exc.errors(include_url=False)
    for detail in details:
        inner = (detail.get("ctx") or {}).get("error")
        if isinstance(inner, InvalidConfigError):
            return inner
    return InvalidConfigError(str(exc), errors=details)


class RetrievalConfig(_Settings):
    """Lanes, fusion, ranking, boosts and trust.

    The lane weights are tuned on the LoCoMo development split with the local MiniLM
    embedder (``benchmarks/locomo.py``): the keyword lane (FTS5, Porter stemming) is the
    strong one there, so the dense lane gets a light weight that lets it break ties and
    add semantic matches without dragging exact keyword hits down. Comis's own defaults
    (vector 1.5) suit a strong embedder; raise ``lane_weights["vector"]`` with one.
    """


    rrf_k: int = Field(
        15, ge=1,
        description="RRF constant k: a hit at rank r earns weight / (k + r). Comis and Cormack et al. use 60, "
        "made for fusing many lists of similar quality; with one strong lane and light helpers, 15 keeps the "
        "strong lane's order visible in the fused score that the packer weighs against word overlap. Measured "
        "with benchmarks/locomo.py (the changelog says what each change did).",
    )
    lane_weights: dict[str, float] = Field(
        default_factory=lambda: {"keyword": 1.0, "vector": 0.15, "entity": 0.1},
        description="Per-lane RRF weights (Comis: keyword 1.0, vector 1.5; tuned here, see the class doc).",
    )
    undated_keyword_share: float = Field(
        0.5, ge=0.0, le=1.0,
        description="When a query names a calendar date ('in March 2023', 'in June'), the keyword lane also runs "
        "without those words (lane 'undated', fused at this share of the keyword weight; 0 turns it off): the "
        "words match every row stamped with that month or year and bury the event asked about, while the time "
        "stage weighs the date.",
    )
    word_forms: bool = Field(
        True,
        description="The keyword lane also matches the word forms Porter stemming does not join: the past forms "
        "of the irregular verbs a query names in their base form ('When did Nate win ...?' finds 'I won') and the "
        "roots of its '-ship' and '-hood' nouns ('mentorship' finds 'mentored').",
    )
    date_lane_weight: float = Field(
        0.6, ge=0.0, le=5.0,
        description="RRF weight of the dated lane (0 turns it off): when a query names a bounded time window of at "
        "most date_lane_max_days ('on 15 May 2023', 'between August 11 and August 15 2023'), the scope's rows "
        "recorded in it are read (a store without that read leaves the lane out and the search says so) and ranked "
        "by similarity to the query (cosine of the query vector, else word overlap), so a turn of that day that "
        "shares no word with the question still reaches the ranking stages. A weight near the keyword lane's "
        "lets the day's rows crowd out better matches.",
    )
    date_lane_max_days: int = Field(
        14, ge=1, le=366,
        description="Widest query window (in days) the dated lane reads: a day, a week, a short span. A month "
        "('in March 2023') holds too many rows for the date alone to say much, and its rows recorded that month "
        "crowd out the one recorded later that says 'last month'.",
    )
    date_lane_pad_days: int = Field(
        7, ge=0, le=31,
        description="The dated lane also reads the rows recorded up to this many days after the window and keeps "
        "those whose words place them inside it: a relative time they state ('yesterday', 'last Friday', 'two "
        "days ago'), resolved against when they were recorded, that falls in the window. 0 reads the window only.",
    )
    date_lane_rows: int = Field(
        500, ge=1, le=10_000, description="Most rows the dated lane reads from its window (oldest first)."
    )
    lane_depth: int = Field(
        2, ge=1,
        description="Each lane fetches limit × lane_depth candidates before fusion. Deeper keyword hits rarely "
        "reach the results, so 2 ranks as a deeper pool does and reads fewer rows; 1 loses some deep recall.",
    )
    lane_depths: dict[str, int] = Field(
        default_factory=lambda: {"vector": 1},
        description="Per-lane overrides of lane_depth, e.g. {'vector': 1}: a weak lane's deep ranks only add noise.",
    )
    min_vector_cosine: float = Field(
        0.1, ge=-1.0, le=1.0,
        description="Vector-only hits below this cosine are dropped as below threshold (keyword hits are kept).",
    )
    # entity lane (Comis §2.8): memories sharing named entities with the top fused hits
    entity_lane: bool = Field(True, description="Run the entity lane (needs a non-zero entity weight).")
    entity_seed_count: int = Field(5, ge=1, description="Top fused hits whose entities seed the lane.")
    entity_cap: int = Field(50, ge=1, description="Most rows the entity lane fetches.")
    entity_max_share: float = Field(
        0.2, gt=0.0, le=1.0,
        description="Entities found in more than this share of the keyword and vector hits (the user's own "
        "name, the agent's) link everything and are ignored.",
    )
    # ranking stages, in this order: decay, rerank, boosts, MMR
    decay_half_life_days: float = Field(30.0, gt=0)
    decay_floor: float = Field(0.35, ge=0.0, le=1.0, description="Decay never multiplies a score below this.")
    decay_rebase: bool = Field(
        True,
        description="Divide the decay multipliers by the freshest candidate's: same order, but uniformly old "
        "results are not scaled down as a whole, and keep their weight against the packer's other signals.",
    )
    rerank_timeout_s: float = Field(0.8, gt=0)
    rerank_min_candidates: int = Field(3, ge=2)
    rerank_dominance_delta: float = Field(
        0.16, ge=0,
        description="Rerank is skipped when the best score beats the second by this much. In a fused list the "
        "gap between ranks depends on rrf_k: Comis's 0.05 at k = 60 is the gap from rank 1 to rank 5 of the "
        "strong lane; at k = 15 that gap is 0.16. A lane passed through alone keeps its own scores (keyword: "
        "BM25 relative to the best hit).",
    )
    mmr_lambda: float = Field(0.7, ge=0.0, le=1.0)
    # boosts (Comis score.ts): factor = 1 + alpha × (signal − 0.5); 0 turns a boost off
    recency_alpha: float = Field(0.2, ge=0.0, le=1.0, description="Signal 1/(1 + age in days of created_at).")
    temporal_alpha: float = Field(
        0.2, ge=0.0, le=1.0, description="Signal 1/(1 + age in days of metadata.occurredAt); neutral when absent."
    )
    proof_alpha: float = Field(
        0.1, ge=0.0, le=1.0, description="Signal from metadata.proofCount and confidence; neutral when absent."
    )
    trust_alpha: float = Field(0.1, ge=0.0, le=1.0, description="Signal system 1.0, learned 0.5, external 0.0.")
    outdated_factor: float = Field(
        0.5, ge=0.0, le=1.0,
        description="Score multiplier of a conversation turn whose every extracted fact was superseded "
        "(metadata.outdated): 'I live in Lisbon' said before 'I moved to Berlin' still answers history "
        "questions but ranks below what is current; 1 turns the demotion off.",
    )
    # time in the query (manowar_memory.ranking.temporal), after the boosts and before MMR
    time_queries: bool = Field(True, description="Read time in the query: 'when' questions, windows, first/last.")
    when_boost: float = Field(
        0.5, ge=0.0, le=2.0,
        description="A 'when' question multiplies the score of memories that state a time by 1 + this; a larger "
        "factor lifts dated small talk over the answer.",
    )
    when_neighbour_seeds: int = Field(
        5, ge=0, le=50,
        description="A 'when' question looks at this many of its best fused candidates: each that states no time "
        "lends when_neighbour_share of its score to the when_neighbour_turns turns just before it in its thread "
        "that state one ('I'll come over tomorrow' before 'I'll bring my recipes'; the turn after a match is "
        "already found through its thread context). Needs the store's memories_created_before. "
        "0 turns it off.",
    )
    when_neighbour_turns: int = Field(
        2, ge=1, le=10, description="How many turns before a 'when' question's candidate may take its score."
    )
    when_neighbour_share: float = Field(
        0.9, gt=0.0, le=1.0,
        description="The share of its fused score a 'when' question's candidate lends to the turns before it.",
    )
    when_speaker_boost: float = Field(
        0.5, ge=0.0, le=2.0,
        description="A 'when' question that names someone ('When did Nate win his third tourney?') multiplies the "
        "score of the memories that person said (metadata.speaker, else a transcript line's 'Nate:') by 1 + this: "
        "people tell their own events ('I won another tournament last week'), the others' replies ('Congrats on "
        "winning!') share the words but rarely the time. 0 turns it off. Weighing the speaker for every "
        "question, not only 'when', would hurt the questions that pin one person's event on the other.",
    )
    time_window_boost: float = Field(
        0.5, ge=0.0, le=2.0,
        description="Memories inside the query's time window ('last week', 'in June 2023'), or on the asked side "
        "of its event ('before she moved'), get 1 + this.",
    )
    time_stated_boost: float = Field(
        1.0, ge=0.0, le=2.0,
        description="In a query window of at most date_lane_max_days ('in the second week of November', 'on 15 May "
        "2023'), a memory inside it whose own words place it there (a relative time it states, such as 'last "
        "Friday', resolved against when it was said, or its event date) gets a further 1 + this over the window "
        "boost: a row merely recorded that week is near the time asked about, a row that says what happened then "
        "tells it. Wider windows (a month, a year) hold too many such rows for the words to single one out. "
        "0 turns it off.",
    )
    time_order_boost: float = Field(
        0.3, ge=0.0, le=2.0,
        description="'The first time' / 'most recently': the oldest / newest of the top (twice limit) gets up to "
        "1 + this / 2, the other end 1 - this / 2.",
    )
    time_window_restrict: bool = Field(
        False,
        description="Keep only the memories inside the query's time window (when at least one is inside; when "
        "none is, nothing is dropped and the search's lane report says so).",
    )
    # trust (Comis): which levels a search may return; rows without a level count as default_trust
    include_trust: tuple[Literal["system", "learned", "external"], ...] = Field(
        ("system", "learned"), description="Trust levels returned; external is excluded by default."
    )
    default_trust: str = Field("learned", pattern="^(system|learned|external)$")


class PackerConfig(_Settings):
    """Prompt packing defaults (the reference's docs: limit 12, 6 items, 120 chars, 900 budget)."""


    limit: int = Field(12, ge=1, le=100, description="Hits per layer.")
    max_items: int = Field(
        12, ge=1, le=50,
        description="Most items packed; the budget is what binds. The reference's 6 left a third of 900 characters "
        "unused when memories are short (a fact, a chat turn).",
    )
    max_item_chars: int = Field(120, ge=20, le=4000)
    budget_chars: int = Field(900, ge=40)
    header: str = "Memory context:"
    semantic_weight: float = Field(
        1.0, ge=0.0, le=10.0,
        description="Weight of the retrieval score in the packer's item score (the reference: 0.45). The "
        "hybrid search's fused score ranks better than the packer's word overlap, so it weighs more here.",
    )
    dates: bool = Field(
        True,
        description="Tag each packed line with the day its memory was observed, '[GRAPH 2026-06-03] ...', so the "
        "model can tell the current statement from an earlier one and place 'last month' in time. The tag costs "
        "11 characters a line of the budget; turn it off for prompts where time never matters.",
    )
    wrap_untrusted: bool = Field(
        True,
        description="Pack items below the system trust level inside one untrusted-content wrapper "
        "(<<<UNTRUSTED_<delim>>>> ... <<<END_UNTRUSTED_<delim>>>>, delimiter stable per scope and thread), "
        "its markers counted in the budget. Off only for models that never see the prompt.",
    )


class MemoryConfig(_Settings):
    """Every tunable of the engine."""


    session_context_limit: int = Field(12, ge=1, description="Working buffer length (MEMORY_SESSION_CONTEXT_LIMIT).")
    session_ttl_ms: int = Field(2_592_000_000, ge=1000, description="Working session expiry (30 days).")
    fact_max_per_turn: int = Field(5, ge=1)
    fact_min_confidence: float = Field(0.6, ge=0.0, le=1.0)
    fact_max_chars: int = Field(240, ge=40)
    thread_context: bool = Field(
        True,
        description="Index each ingested row that names its thread with the messages it followed there (the row's "
        "``context``: searched by the keyword lane at a lower weight, never shown). A reply like "
        "'Yes, in June' is then found by the words of the question it answers.",
    )
    thread_context_messages: int = Field(
        3, ge=1, le=20,
        description="How many earlier messages of its thread an ingested row is indexed with. A conversation's "
        "topic spans several turns, and a reply is found by the words of the question a few turns up; more "
        "messages add little and cost index size.",
    )
    thread_context_chars: int = Field(
        400, ge=0, description="Most characters of each earlier message kept in a row's thread context."
    )
    single_tenant: bool = Field(
        False,
        description="Whether conversations may be recorded without a user. Off (the default), ``post_turn`` and "
        "working-memory writes in a scope without ``user_address`` raise ScopeError: a user-less turn is stored "
        "agent-wide, so every user of the agent would read it. Turn it on only for an engine that serves one "
        "person (a CLI, a personal assistant). Agent-shared knowledge is written explicitly either way "
        "(``remember``/``ingest`` in a scope without a user).",
    )
    concurrent_layers: bool = True
    access_write_delay_s: float = Field(
        1.0, ge=0.0, le=60.0,
        description="Seconds the access bumps of packed rows (access_count, last_accessed_at) are gathered "
        "before one background write; 0 writes after every pre_turn. Each write is a transaction, and on "
        "SQLite it empties other connections' page caches, which slows the next read. engine.flush() and "
        "close() write what is pending.",
    )
    query_cache: bool | None = Field(
        None,
        description="Cache layered search results keyed by scope namespace tokens. None: on only with a "
        "shared cache (Redis), since an in-process cache cannot see other processes' writes.",
    )
    query_cache_ttl_s: float = Field(120.0, gt=0)
    max_text_chars: int = Field(
        50_000, ge=1_000,
        description="Longest text one write may store: a memory row, a message, a summary, a query. Longer "
        "input is refused with InvalidInputError (never cut silently): split documents into chunks. Every "
        "search in a scope reads its rows' text, so one huge row slows them all.",
    )
    max_metadata_chars: int = Field(
        100_000, ge=1_000,
        description="Largest metadata one write may store, measured as compact JSON characters "
        "(InvalidInputError above it). Metadata holds JSON data only (see manowar_memory.validation).",
    )
    ttl_by_kind: dict[str, float] = Field(
        default_factory=dict,
        description="Default time to live, in seconds, of memory rows written without one (no ttl, expires_at "
        "or metadata.expiresAt), by kind: a fact type ('preference', 'event', ...), a source ('session', "
        "'knowledge', 'fact', ...), a layer ('graph', 'vectors') or '*'; the most specific key that matches a row "
        "wins (fact type, then source, then layer, then '*'). Counted from the row's created_at. Rows with "
        "retention='pinned' get no default TTL. Empty (the default): rows never expire unless told. See "
        "manowar_memory.expiry and docs/concepts/lifecycle.md.",
    )
    retrieval: RetrievalConfig = Field(default_factory=RetrievalConfig)
    packer: PackerConfig = Field(default_factory=PackerConfig)

    @field_validator("ttl_by_kind")
    @classmethod
    def _check_ttl_by_kind(cls, value: dict[str, float]) -> dict[str, float]:
        for key, seconds in value.items():
            if key not in TTL_KINDS:
                raise ValueError(f"ttl_by_kind key {key!r} is not a fact type, source, layer or '*'; "
                                 f"use one of {list(TTL_KINDS)}")
            if not seconds > 0:
                raise ValueError(f"ttl_by_kind[{key!r}] must be a positive number of seconds, got {seconds!r}")
        return value
