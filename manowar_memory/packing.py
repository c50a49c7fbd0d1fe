"""The prompt packer: fit the best memories into a character budget and account for
every candidate (kept, or dropped as duplicate, below threshold, over budget or past
the item cap).

Score of an item (reference §7.3)::

    layer priority + w·semantic + 0.35·query overlap + 0.12·confidence
                   + 0.08·importance + 0.08·recency(30 d) + 0.04·min(1, ln(1+accesses)/8)

``w`` is the reference's 0.45 by default; the engine passes ``PackerConfig.semantic_weight``
(1.0): its semantic signal is the hybrid retrieval's fused score, a better ranking than the
packer's substring overlap (measured on LoCoMo: evidence kept at 900 characters 59.6 % with
0.45, 64.6 % with 1.0).

Items are deduplicated by normalised fingerprint (the user-turn fingerprint for
transcript-like rows), ranked by score, and packed greedily in that order: an item that
does not fit is skipped and the next one tried (the reference's code; its docs' "score per
character" packing favoured short items and kept 5 points less evidence at 900 characters).
The rendered prompt — header, newlines and all — never exceeds the budget.

Recalled memory is data, not instructions. With ``untrusted_delimiter`` set (the engine
does by default: ``PackerConfig.wrap_untrusted``), the items below the ``system`` trust
level are packed inside one untrusted-content wrapper (Comis), counted in the budget::

    Memory context:
    [GRAPH] <system rows, unwrapped>
    <<<UNTRUSTED_<delim>>>>
    Source: Memory (trust: learned)
    ---
    [VECTORS] <everything else, in rank order>
    <<<END_UNTRUSTED_<delim>>>>

Forged markers inside stored text are neutralised before packing, so no item can close
the wrapper early or open a fake one.
"""

from __future__ import annotations

import datetime
import functools
import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import regex
from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

from ._util import DAY_MS, now_ms, query_terms, short_text_cache, term_overlap, truncate
from .candidates import Candidate
from .ranking.mmr import mmr_order
from .ranking.trust import DELIMITER, TRUST_LEVELS, capped_trust_level, neutralize_markers, trust_level
from .records import LAYERS, Layer

__all__ = [
    "LAYER_PRIORITY",
    "ContextUsage",
    "Decision",
    "PackResult",
    "PackedItem",
    "fingerprint",
    "pack",
    "sanitize",
    "score_candidate",
]

LAYER_PRIORITY: dict[str, float] = {
    "working": 1.15, "patterns": 1.12, "graph": 1.08, "vectors": 1.02, "scene": 0.96, "archives": 0.88,
}
DropReason = Literal["duplicate", "below_threshold", "over_budget", "max_items"]


class PackedItem(BaseModel):
    """One line of the packed prompt."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)  # camelCase over JSON (REST)

    layer: Layer
    id: str
    text: str
    score: float
    source: str | None = None
    created_at: int | None = None
    characters: int
    trust: str = "learned"
    wrapped: bool = False
    line: str = ""
    """The line as packed: its tag (layer, date or the document's source label) and text."""


class Decision(BaseModel):
    """What the packer did with one candidate, and why."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)  # camelCase over JSON (REST)

    layer: Layer
    id: str
    status: Literal["kept", "duplicate", "below_threshold", "over_budget", "max_items"]
    score: float
    characters: int
    reason: str


class ContextUsage(BaseModel):
    """Character accounting of a packed prompt."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)  # camelCase over JSON (REST)

    characters: int
    raw_characters: int
    budget_characters: int
    saved_characters_vs_raw: int
    items: int
    marker_characters: int = 0


@dataclass
class PackResult:
    """The packer's output."""

    prompt: str
    items: list[PackedItem]
    decisions: list[Decision]
    omitted: dict[str, int]
    context_usage: ContextUsage


@dataclass(slots=True)
class _Entry:
    cand: Candidate
    line: str
    text: str
    score: float
    order: int
    fp: str
    trust: str = "learned"
    wrapped: bool = False

    @property
    def cost(self) -> int:
        return len(self.line) + 1  # the newline that joins it to the block


_MD_LINK = regex.compile(r"\[([^\]]+)\]\((https?://[^)\s]+)\)")
_URL = regex.compile(r"https?://[^\s)]+")
_SPACES = regex.compile(r"[ \t]{2,}")
_NEWLINES = regex.compile(r"\n{2,}")
# every line boundary str.splitlines knows (besides \n and \r): VT, FF, FS, GS, RS, NEL, LS, PS
_LINE_BREAKS = regex.compile("[\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")
_ASCII_LINE_BREAKS = "\x0b\x0c\x1c\x1d\x1e"
_PLACEHOLDERS = (
    "your-", "your_", "localhost", "127.0.0.1", "0.0.0.0", "example.com", "placeholder",
    "your-deployment", "your-server", "your-mcp",
)


def _placeholder(url: str) -> bool:
    lowered = url.lower()
    return any(p in lowered for p in _PLACEHOLDERS)


def sanitize(text: str) -> str:
    """Drop placeholder links, collapse spaces, and fold newlines so each item is one line."""
    # each pass runs only when the text holds what it looks for (most memories hold none of it)
    if "http" in text:
        text = _MD_LINK.sub(lambda m: m.group(0) if not _placeholder(m.group(2)) else m.group(1), text)
        text = _URL.sub(lambda m: "" if _placeholder(m.group(0)) else m.group(0), text)
    if not text.isascii() or any(c in text for c in _ASCII_LINE_BREAKS):
        text = _LINE_BREAKS.sub("\n", text)
    if "\n" in text or "\r" in text:
        text = _NEWLINES.sub("\n", text.replace("\r\n", "\n").replace("\r", "\n"))
        text = text.replace("\n", " | ")
    if "  " in text or "\t" in text:
        text = _SPACES.sub(" ", text)
    return text.strip()


_NORM_URL = regex.compile(r"https?://\S+")
_NORM_CHARS = regex.compile(r"[^\p{L}\p{N}\s:._-]")
_USER_TURN = regex.compile(
    r"(?ims)^[ \t]*user:(.*?)(?=^[ \t]*(?:assistant|ai|tool|system|user):|\Z)"
)


#: :data:`_NORM_CHARS` over ASCII text as a ``bytes.translate`` table, read off the pattern itself
_NORM_ASCII = bytes(ord(" ") if _NORM_CHARS.fullmatch(chr(c)) else c for c in range(256))


def _normalize(text: str) -> str:
    text = text.lower()
    if "http" in text:
        text = _NORM_URL.sub(" ", text)
    text = text.encode("ascii").translate(_NORM_ASCII).decode("ascii") if text.isascii() else _NORM_CHARS.sub(" ", text)
    return " ".join(text.split())


@short_text_cache()  # stored rows come back query after query
def fingerprint(text: str) -> str:
    """Dedupe key: ``user:`` + the normalised first user turn (when ≥ 24 chars), else ``text:`` + the text."""
    # the pattern ignores case, and Unicode folding can match "user:" in non-ASCII spellings
    match = _USER_TURN.search(text) if not text.isascii() or "user:" in text.lower() else None
    if match:
        user = _normalize(match.group(1))
        if len(user) >= 24:
            return "user:" + user[:360]
    return "text:" + _normalize(text)[:480]


@short_text_cache()  # stored rows come back query after query
def _item_text(text: str, max_chars: int | None) -> str:
    """A candidate's text made one safe line, cut to ``max_chars`` (None: stripped only):
    :func:`sanitize`, then markers neutralised (after sanitising: dropping a placeholder link or
    a \r can join a marker)."""
    line = neutralize_markers(sanitize(text))
    return truncate(line, max_chars) if max_chars is not None else line.strip()


def score_candidate(cand: Candidate, terms: Sequence[str], text: str, now: int,
                    semantic_weight: float = 0.45) -> tuple[float, dict[str, float]]:
    """The packer's score of one candidate and its signals (``semantic_weight``: the
    reference's 0.45 unless given)."""
    signals = _signals(cand, terms, text, now)
    return _weighted(signals, semantic_weight), dict(zip(_SIGNALS, signals))


_SIGNALS = ("priority", "semantic", "overlap", "confidence", "importance", "recency", "access")


def _signals(cand: Candidate, terms: Sequence[str], text: str,
             now: int) -> tuple[float, float, float, float, float, float, float]:
    """The packer's signals of one candidate, in :data:`_SIGNALS` order."""
    stamp = cand.created_at or cand.last_accessed_at
    return (
        LAYER_PRIORITY.get(cand.layer, 0.9),
        cand.score if cand.score is not None else 0.5,
        term_overlap(terms, text),
        cand.confidence if cand.confidence is not None else 0.5,
        cand.importance if cand.importance is not None else 0.5,
        0.5 ** (max(0.0, (now - stamp) / DAY_MS) / 30.0) if stamp else 0.0,
        min(1.0, math.log1p(max(0, cand.access_count)) / 8.0),
    )


def _weighted(signals: tuple[float, float, float, float, float, float, float], semantic_weight: float) -> float:
    priority, semantic, overlap, confidence, importance, recency, access = signals
    return (
        priority + semantic_weight * semantic + 0.35 * overlap + 0.12 * confidence + 0.08 * importance
        + 0.08 * recency + 0.04 * access
    )


def pack(
    query: str,
    layers: Mapping[str, Sequence[Candidate]],
    *,
    layer_order: Sequence[str] | None = None,
    max_items: int = 6,
    max_item_chars: int | None = 120,
    budget_chars: int = 900,
    header: str = "Memory context:",
    mmr_lambda: float | None = None,
    now: int | None = None,
    untrusted_delimiter: str | None = None,
    default_trust: str = "learned",
    semantic_weight: float = 0.45,
    trust_ceiling: str | None = None,
    dates: bool = False,
    keep_order: bool = False,
    label: Callable[[Candidate], str | None] | None = None,
    explain: bool = True,
) -> PackResult:
    """Pack candidates into ``header`` + one ``[LAYER] text`` line per item within ``budget_chars``.

    ``mmr_lambda`` (None = off) selects greedily by maximal marginal relevance instead of by score, so
    near-duplicates give way to variety in the final prompt: for candidates of other retrievers
    (:func:`~manowar_memory.scoped.pack_context`, the framework adapters); the engine's ``pre_turn`` runs
    MMR as a ranking stage (:class:`~manowar_memory.retrieval.pipeline.MMRStage`) and never passes it.
    Candidates with ``trace['below_threshold']`` set are reported and never packed. ``untrusted_delimiter`` (8–64 lowercase hex, see
    :func:`~manowar_memory.ranking.trust.content_delimiter`) wraps the items below the ``system`` trust level
    (``metadata['trust']``, else ``default_trust``) in one untrusted-content block whose markers count against the
    budget. ``trust_ceiling`` (for candidates from another retriever) caps what their metadata may claim: a level
    above it reads as the ceiling, a lower one (``external``) is kept
    (:func:`~manowar_memory.ranking.trust.capped_trust_level`). ``dates`` tags each line with the day its memory was
    observed (UTC), ``[GRAPH 2026-06-03]``, so the model can tell a newer statement from an older one; the tag
    counts against the budget. A conversation turn whose every extracted fact was superseded (``metadata.outdated``)
    is tagged ``superseded``, ``[VECTORS 2026-01-09 superseded]``, dates or not.

    For documents of another retriever (RAG): ``max_item_chars=None`` cuts no item on its own, the budget decides;
    ``keep_order`` keeps the order the candidates came in (the previous stage's ranking) and fills the budget in
    that order, cutting only the last item that fits in part (``mmr_lambda`` still reorders when given); ``label``
    gives a line's tag instead of the layer (a document's own source; sanitised, at most 80 characters), inside the
    untrusted-content block with the text. ``explain=False`` makes no decisions (``decisions`` empty), same packing.
    """
    _check(max_items, budget_chars, header, untrusted_delimiter)
    now = now_ms() if now is None else now
    order = [x for x in (layer_order or LAYERS) if x in layers] + [x for x in layers if x not in (layer_order or LAYERS)]
    style = _LineStyle(max_item_chars, dates, label, default_trust, trust_ceiling, untrusted_delimiter is not None)
    decisions: list[Decision] = []
    entries = _entries(query_terms(query), {x: layers[x] for x in dict.fromkeys(order)}, style, now,
                       semantic_weight, decisions)
    ranked = sorted(entries, key=lambda e: e.order if keep_order else (-e.score, e.order))
    if mmr_lambda is not None:
        ranked = _diversified(ranked, mmr_lambda)
    # the wrapper's cost is reserved up front when any candidate would go inside it (its Source
    # line names every level among the candidates, so the reservation is an upper bound)
    wrap_levels = _levels(e for e in ranked if e.wrapped)
    reserve = sum(len(marker) + 1 for marker in _wrapper(untrusted_delimiter, wrap_levels)) if wrap_levels else 0
    available = budget_chars - len(header)
    chosen = (_greedy(ranked, available, max_items, reserve, keep_order=True) if keep_order
              else _select(ranked, available, max_items, reserve))
    if not chosen and ranked and _cut(ranked[0], available - (reserve if ranked[0].wrapped else 0), least=8):
        chosen = [ranked[0]]
    left = available - sum(e.cost for e in chosen) - (reserve if any(e.wrapped for e in chosen) else 0)
    decisions = decisions + _outcomes(ranked, chosen, max_items, left) if explain else []
    # keep the ranked order in the prompt (score order, or MMR order when requested)
    chosen_ids = {id(e) for e in chosen}
    chosen = [e for e in ranked if id(e) in chosen_ids]
    prompt, markers = _render(header, chosen, untrusted_delimiter)
    assert len(prompt) <= budget_chars, "packer exceeded its budget"
    items = [PackedItem(layer=e.cand.layer, id=e.cand.id, text=e.text, score=round(e.score, 6), source=e.cand.source,
                        created_at=e.cand.created_at, characters=len(e.line), trust=e.trust, wrapped=e.wrapped,
                        line=e.line) for e in chosen]
    packed_per_layer: Counter[str] = Counter(e.cand.layer for e in chosen)
    omitted = {layer: max(0, len(layers[layer]) - packed_per_layer[layer]) for layer in layers}
    raw_lines = [cand.text for layer in dict.fromkeys(order) for cand in layers[layer]]
    raw_chars = len((header + "\n" + "\n".join(raw_lines)).strip()) if raw_lines else 0
    usage = ContextUsage(
        characters=len(prompt), raw_characters=raw_chars, budget_characters=budget_chars,
        saved_characters_vs_raw=max(0, raw_chars - len(prompt)), items=len(items), marker_characters=markers,
    )
    return PackResult(prompt=prompt, items=items, decisions=decisions, omitted=omitted, context_usage=usage)


def _diversified(ranked: list[_Entry], mmr_lambda: float) -> list[_Entry]:
    """The entries in MMR order, relevance being the packer's score."""
    by_id = {id(e.cand): e for e in ranked}
    reordered = mmr_order([e.cand for e in ranked], lambda_=mmr_lambda, relevance=lambda c: by_id[id(c)].score)
    return [by_id[id(c)] for c in reordered]


def _check(max_items: int, budget_chars: int, header: str, delimiter: str | None) -> None:
    if max_items < 1:
        raise ValueError("max_items must be at least 1")
    if budget_chars < len(header) + 1:
        raise ValueError(f"budget_chars must be at least {len(header) + 1} to hold the header {header!r}")
    if delimiter is not None and not DELIMITER.fullmatch(delimiter):
        raise ValueError("untrusted_delimiter must be 8 to 64 lowercase hex characters (see content_delimiter)")


@dataclass(frozen=True)
class _LineStyle:
    """How :func:`pack` turns a candidate into a line, and at which trust level."""

    max_item_chars: int | None
    dates: bool
    label: Callable[[Candidate], str | None] | None
    default_trust: str
    trust_ceiling: str | None
    wrapping: bool


def _entries(terms: Sequence[str], layers: Mapping[str, Sequence[Candidate]], style: _LineStyle, now: int,
             semantic_weight: float, decisions: list[Decision]) -> list[_Entry]:
    """One scored line per candidate, in layer order, with the near-duplicates (same
    fingerprint) and the unpackable ones (no text left, under the threshold) recorded in
    ``decisions`` instead."""
    best: dict[str, _Entry] = {}
    counter = 0
    for layer, cands in layers.items():
        for cand in cands:
            counter += 1
            text = _item_text(cand.text, style.max_item_chars)
            if not text:
                decisions.append(Decision(layer=cand.layer, id=cand.id, status="below_threshold", score=0.0,
                                          characters=0, reason="no text left after sanitising"))
                continue
            line = f"{_line_tag(cand, layer, style.dates, style.label)} {text}"
            score = _weighted(_signals(cand, terms, text, now), semantic_weight)
            trust = (trust_level(cand.metadata, style.default_trust) if style.trust_ceiling is None
                     else capped_trust_level(cand.metadata, style.trust_ceiling))
            entry = _Entry(cand, line, text, score, counter, fingerprint(cand.text), trust,
                           style.wrapping and trust != "system")
            if cand.trace.get("below_threshold"):
                decisions.append(_decision(entry, "below_threshold", "retrieval score under the configured threshold"))
                continue
            held = best.get(entry.fp)
            if held is None:
                best[entry.fp] = entry
            elif _replaces(entry, held):
                decisions.append(_decision(held, "duplicate", f"same fingerprint as {entry.cand.id}"))
                best[entry.fp] = entry
            else:
                decisions.append(_decision(entry, "duplicate", f"same fingerprint as {held.cand.id}"))
    return list(best.values())


def _outcomes(ranked: Sequence[_Entry], chosen: Sequence[_Entry], max_items: int, left: int) -> list[Decision]:
    """Why each ranked entry was kept or left out (``left``: the characters still free)."""
    chosen_ids = {id(e) for e in chosen}
    out: list[Decision] = []
    for e in ranked:
        if id(e) in chosen_ids:
            out.append(_decision(e, "kept", "packed"))
        elif len(chosen) >= max_items:
            out.append(_decision(e, "max_items", f"max_items={max_items} reached"))
        else:
            out.append(_decision(e, "over_budget", f"needs {e.cost} chars, {left} left"))
    return out


def _render(header: str, chosen: Sequence[_Entry], delimiter: str | None) -> tuple[str, int]:
    """The prompt (``header``, the trusted lines, then the untrusted ones inside one wrapper) and
    the characters its wrapper markers take."""
    if not chosen:
        return "", 0
    inside = [e for e in chosen if e.wrapped]
    lines = [e.line for e in chosen if not e.wrapped]
    if not inside:
        return header + "\n" + "\n".join(lines), 0
    opening, closing = _wrapper(delimiter, _levels(inside))
    lines += [opening, *(e.line for e in inside), closing]
    return header + "\n" + "\n".join(lines), len(opening) + len(closing) + 2


def _levels(entries: Iterable[_Entry]) -> list[str]:
    """The trust levels among ``entries``, most trusted first."""
    found = {e.trust for e in entries}
    return [t for t in TRUST_LEVELS if t in found]


def _outdated(cand: Candidate) -> bool:
    """Whether the candidate is a turn whose every extracted fact was superseded."""
    return bool(cand.metadata) and cand.metadata.get("outdated") is True


def _tag(layer: str, observed_at: int | None, outdated: bool = False) -> str:
    """A line's tag: ``[LAYER]``, ``[LAYER YYYY-MM-DD]`` with the observation day (UTC), and
    `` superseded`` last on a turn whose every extracted fact was replaced by a newer one."""
    parts = [layer.upper()]
    if observed_at is not None:
        parts.append(_utc_day(observed_at // DAY_MS))
    if outdated:
        parts.append("superseded")
    return f"[{' '.join(parts)}]"


@functools.lru_cache(maxsize=4096)
def _utc_day(day: int) -> str:
    """The UTC date (ISO) of a day counted from the epoch: packed items come back day after day."""
    return (datetime.date(1970, 1, 1) + datetime.timedelta(days=day)).isoformat()


def _line_tag(cand: Candidate, layer: str, dates: bool, label: Callable[[Candidate], str | None] | None) -> str:
    """A line's tag: the caller's label for the candidate (a document's source), else the layer's."""
    own = label(cand) if label is not None else None
    if own:
        text = truncate(neutralize_markers(sanitize(str(own))).replace("[", "(").replace("]", ")"), 80)
        if text:
            return f"[{text}]"
    return _tag(layer, cand.created_at if dates else None, _outdated(cand))


def _greedy(ranked: Sequence[_Entry], available: int, max_items: int, reserve: int, *,
            keep_order: bool) -> list[_Entry]:
    """Take items in the given order while they fit; ``reserve`` characters are charged once the
    first wrapped item is in. At the first misfit, ``keep_order`` cuts that item to the room left
    (when at least 40 characters of it fit) and stops; otherwise the misfit is skipped."""
    chosen: list[_Entry] = []
    used = 0
    wrapped = False
    for e in ranked:
        if len(chosen) >= max_items:
            break
        extra = reserve if e.wrapped and not wrapped else 0
        if used + extra + e.cost <= available:
            chosen.append(e)
            used += extra + e.cost
            wrapped = wrapped or e.wrapped
        elif keep_order:
            if _cut(e, available - used - extra):
                chosen.append(e)
            break
    return chosen


def _cut(e: _Entry, room: int, least: int = 40) -> bool:
    """Shorten ``e`` to cost at most ``room`` characters; False when under ``least`` characters
    of its text would be left."""
    prefix = e.line[: len(e.line) - len(e.text)]
    keep = room - 1 - len(prefix)
    if keep < least:
        return False
    e.text = truncate(e.text, keep)
    e.line = prefix + e.text
    return e.cost <= room


def _replaces(new: _Entry, held: _Entry) -> bool:
    """Reference dedupe rule: clearly better score, else newer, else shorter."""
    if new.score > held.score + 0.02:
        return True
    if held.score > new.score + 0.02:
        return False
    if (new.cand.created_at or 0) != (held.cand.created_at or 0):
        return (new.cand.created_at or 0) > (held.cand.created_at or 0)
    return new.cost < held.cost


def _wrapper(delimiter: str | None, levels: Sequence[str]) -> tuple[str, str]:
    """The untrusted block's opening lines (marker, Source line, ``---``) and closing marker."""
    opening = f"<<<UNTRUSTED_{delimiter}>>>\nSource: Memory (trust: {', '.join(levels)})\n---"
    return opening, f"<<<END_UNTRUSTED_{delimiter}>>>"


def _select(ranked: list[_Entry], available: int, max_items: int, reserve: int = 0) -> list[_Entry]:
    """The items to pack; ``reserve`` characters are charged once the first wrapped item is in."""

    def cost(entries: Sequence[_Entry]) -> int:
        return sum(e.cost for e in entries) + (reserve if any(e.wrapped for e in entries) else 0)

    pool = ranked[: 3 * max_items]
    top = pool[:max_items]
    if cost(top) <= available:
        return top
    # The budget binds: greedy in score order, skipping what does not fit.
    return _greedy(pool, available, max_items, reserve, keep_order=False)


def _decision(e: _Entry, status: str, reason: str) -> Decision:
    return Decision(
        layer=e.cand.layer, id=e.cand.id, status=status,  # type: ignore[arg-type]
        score=round(e.score, 6), characters=len(e.line), reason=reason,
    )
