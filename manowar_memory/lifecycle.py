"""Fact lifecycle without an LLM: attribute slots, and which stored fact a new one replaces.

A fact such as "The user moved to Berlin" fills a *slot* of a *subject*: ``residence`` of
``user``, value ``berlin``. :func:`parse_slots` reads the slots a fact fills from its text
(third person, as the extractors write it, or first person as a caller may ``remember`` it).
:func:`resolve` compares a new fact with the active facts of its scope:

* same subject, same slot, another value: the older of the two is superseded (the new fact
  replaces what it contradicts; a fact observed before the stored one is itself superseded);
* a hedged statement ("might move to Porto"), a pronoun subject ("she lives in Rome") or a
  fact that fills several slots of which only some are contradicted: reported as uncertain,
  nothing is changed;
* another slot, another subject, the same value or an additive statement ("also works at
  ..."): both are kept.

Slots: ``residence``, ``employer``, ``job_title``, ``school``, ``partner``, ``pet:<kind>``
(a pet's name), ``favourite:<thing>``, ``opinion:<object>`` (a like or dislike that can
flip) and ``plan:<what>``. :func:`apply_updates` writes the outcome to a store, with
provenance on the superseded row (``supersededBy``, ``supersededAt``, ``supersededReason``,
``slot``); superseded rows stay readable (``active_only=False``) and leave retrieval.
:func:`mark_outdated_sources` then marks the conversation turns whose every extracted fact is
superseded (``metadata.outdated``): the turn stays searchable (it is what was said), but ranks
lower and is packed tagged ``superseded``, so "I live in Lisbon" said a year ago does not read
as current beside "The user moved to Berlin".
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import regex

from .records import MemoryRecord
from .scope import Scope
from .stores.base import INACTIVE_STATUSES, MemoryQuery, Store

__all__ = [
    "OUTDATED", "SOURCE_MEMORY_ID", "FactRef", "Resolution", "SlotFact", "UpdateReport", "apply_updates",
    "mark_outdated_sources", "parse_slots", "resolve",
]

#: Metadata key of an extracted fact: the id of the conversation turn row it was read from.
SOURCE_MEMORY_ID = "sourceMemoryId"
#: Metadata key of a turn row whose every extracted fact was superseded (with ``outdatedAt``,
#: ``outdatedBy``: the facts that replaced them).
OUTDATED = "outdated"


@dataclass(frozen=True)
class SlotFact:
    """One attribute a fact states: ``subject``'s ``slot`` is ``value`` (all normalised)."""

    subject: str
    slot: str
    value: str
    hedged: bool = False
    additive: bool = False
    #: the value the subject no longer has ("moved out of Lisbon", "quit Acme", "gone off sencha"):
    #: such a fact supersedes only a stored fact with that value (``value`` is then empty)
    leaves: str = ""


@dataclass(frozen=True)
class FactRef:
    """A fact to compare: its row id, text and observation time (ms)."""

    id: str
    text: str
    observed_at: int


@dataclass
class Resolution:
    """What a new fact does to the stored ones: rows it supersedes, the stored row that
    supersedes it (when it was observed earlier), and notes on matches left alone."""

    supersede: list[tuple[str, str]] = field(default_factory=list)  # (row id, slot)
    superseded_by: tuple[str, str] | None = None  # (row id, slot)
    uncertain: list[str] = field(default_factory=list)


# ---------------------------------------------------------------- parsing
_FIRST_PERSON = [
    (regex.compile(r"\bI(?:'m| am)\b"), "the user is"),
    (regex.compile(r"\bI've\b"), "the user has"),
    (regex.compile(r"\bI\b"), "the user"),
    (regex.compile(r"\b[Mm]y\b"), "the user's"),
]
#: The longest clause the slot rules read (see :func:`_clauses`); the rules' open-ended values
#: are bounded by it too, so a rule costs time linear in the text however long it is.
_MAX_CLAUSE = 400
# a name starts at the first capital of its word (from a later one it could only end the same
# way) and is taken whole (``++``: a space or the pattern's end follows it, so giving letters
# back never helps): a long run of letters is read once, not once per capital in it
_NAME_START = r"(?<!\p{Lu}[\p{L}'-]*?)\p{Lu}"
_SUBJ = (r"(?P<subj>(?:[Tt]he )?[Uu]ser(?:'s (?:\p{Ll}+ ){0,2}?\p{Ll}+(?: \p{Lu}[\p{L}'-]++)?)?|[Hh]e|[Ss]he|[Tt]hey|"
         + _NAME_START + r"[\p{L}'-]++(?: \p{Lu}[\p{L}'-]++)?)")
# the name ends at the "'s" before a space (every use puts a space after it)
_POSS = r"(?P<subj>(?:[Tt]he )?[Uu]ser|" + _NAME_START + r"(?:[\p{L}-]|'(?!s ))++)'s"
_ADV = r"(?:(?:now|currently|still|also|recently|just|so|finally|actually|officially|has|have|had|been|is|was|will|might|may|could|would|(?:\p{Ll}+ly)|no longer|never)\s+){0,3}"
_VAL = r"(?P<val>[^,.;!?()]+)"
_NAME = r"(?P<val>" + _NAME_START + r"[\p{L}'-]++(?: \p{Lu}[\p{L}'-]++)?)"
_MONTHS = "january|february|march|april|may|june|july|august|september|october|november|december"
_CUT = regex.compile(
    rf"\s+(?:and|but|since|because|with|for|as|last|next|this|in \d{{4}}|in (?:{_MONTHS})|on|ago|yesterday|today|"
    r"tomorrow|now|these days|nowadays|when|where|who|which|after|before|until|from|over|than|more than|instead|"
    r"anymore|any more|lately|completely|entirely|totally|altogether|at all|indefinitely|"
    r"again|a few|two|three|several)\b.*$", regex.I)
_ARTICLE = regex.compile(r"^(?:the|a|an|some|their|his|her|the user's)\s+", regex.I)
_JOBS = (
    "engineer|developer|programmer|designer|nurse|teacher|doctor|lawyer|accountant|scientist|researcher|"
    "manager|consultant|chef|cook|baker|waiter|waitress|barista|pilot|architect|analyst|journalist|writer|"
    "editor|photographer|artist|musician|pharmacist|dentist|therapist|psychologist|electrician|plumber|"
    "carpenter|mechanic|farmer|firefighter|police officer|paramedic|professor|lecturer|librarian|"
    "translator|salesperson|cashier|driver|veterinarian|vet|student|intern|freelancer|entrepreneur|ceo|cto|"
    "illustrator|animator|tutor|coach|trainer|nanny|cleaner|surgeon|dietitian|midwife|optician|tailor|butcher|"
    "hairdresser|receptionist|clerk|paralegal|copywriter|marketer|recruiter|founder"
)
_PETS = {"dog": "dog", "puppy": "dog", "cat": "cat", "kitten": "cat", "rabbit": "rabbit", "hamster": "hamster",
         "parrot": "bird", "bird": "bird", "fish": "fish", "horse": "horse", "turtle": "turtle", "snake": "snake",
         "pet": "pet", "tortoise": "turtle"}
_PET = "|".join(sorted(_PETS, key=len, reverse=True))
_PARTNER = r"partner|wife|husband|boyfriend|girlfriend|fianc[eé]e?|spouse"
_JOB_VAL = rf"(?:a |an )?(?P<val>[\p{{L}} -]{{1,{_MAX_CLAUSE}}}?)(?= at | for | with | in |[,.;!?]|$)"  # "a pilot at KLM": "pilot"
#: a like that ends ("has gone off sencha", "is over reality TV", "used to love jazz")
_DISLIKE = (r"(?:hates?|dislikes?|detests?|can't stand|cannot stand|(?:doesn't|does not|don't|do not) "
            r"(?:really )?(?:like|enjoy|love|want)|no longer (?:likes?|enjoys?|loves?|eats|drinks)|is not a fan of|"
            r"isn't a fan of|is tired of|is sick of|is done with|(?:so |really )?(?:tired|sick) of|done with|(?:is )?over(?! the moon\b)|stopped (?:liking|eating|drinking)|has gone off|gone off|"
            r"gave up|used to (?:love|like|enjoy|adore)|switched from)")

_BORING = (rf"(?P<val>\p{{L}}[\p{{L}} -]{{0,{_MAX_CLAUSE}}}?) (?:got|gets|has gotten|is getting|became|has become) "
           r"(?:boring|old|stale|dull)\b")

# (slot, value kind, pattern): value kinds say how the value is read
#   "val": the captured value; "none": the slot is emptied (quit, broke up); "pos"/"neg": polarity
_SLOT_RULES: list[tuple[str, str, regex.Pattern[str]]] = [
    ("residence", "val", regex.compile(
        rf"{_SUBJ}\s+{_ADV}(?:lives?|lived|living|resides?|based|move|moved|moves|moving|relocated|relocating|settled)"
        rf"\s+(?:in|to|back to)\s+{_VAL}")),
    ("residence", "val", regex.compile(rf"{_POSS} (?:new )?home is (?:in|now in) {_VAL}")),
    ("residence", "val", regex.compile(rf"{_SUBJ}\s+{_ADV}(?:is|are) (?:now )?(?:an? )?{_NAME} residents?\b")),
    ("residence", "left", regex.compile(rf"{_SUBJ}\s+{_ADV}(?:moved|moves|moving|has moved) (?:out of|away from) {_NAME}")),
    ("employer", "val", regex.compile(
        rf"{_SUBJ}\s+{_ADV}(?:works?|working|employed|started working)\s+(?:at|for|by)\s+{_VAL}")),
    ("employer", "val", regex.compile(
        rf"{_SUBJ}\s+{_ADV}(?:got|took|started|accepted|landed|has|began) (?:a |an )?(?:new )?(?:job|position|role)"
        rf"(?: as (?:a |an )?[\p{{L}} ]{{1,{_MAX_CLAUSE}}}?)? (?:at|with) {_VAL}")),
    ("employer", "val", regex.compile(rf"{_SUBJ}\s+{_ADV}joined {_NAME}")),
    # "is a developer at Spotify": the employer (the title is read below)
    ("employer", "val", regex.compile(
        rf"{_SUBJ}\s+{_ADV}(?:is|became) (?:now )?(?:a |an )?(?:[\p{{Ll}}-]+ ){{0,2}}(?<!student )(?:{_JOBS}) at {_NAME}")),
    ("employer", "val", regex.compile(rf"{_SUBJ}\s+{_ADV}(?:was|got|has been|been) hired (?:by|at) {_NAME}")),
    ("employer", "left", regex.compile(
        rf"{_SUBJ}\s+{_ADV}(?:quit|quits|left|handed in (?:the user's |their )?notice at) {_NAME}")),
    ("employer", "val", regex.compile(rf"{_POSS} (?:new )?(?:employer|company) is {_VAL}")),
    ("employer", "none", regex.compile(
        rf"{_SUBJ}\s+{_ADV}(?:quit|left|lost) (?:the user's |their |his |her |a |the )?(?:job|position|role)\b")),
    ("job_title", "val", regex.compile(
        rf"{_SUBJ}\s+{_ADV}(?:works?|working|employed|started working|retrained) as (?:a |an )?{_VAL}")),
    ("job_title", "val", regex.compile(
        rf"{_SUBJ}\s+{_ADV}(?:got|landed|found|took|started|accepted) (?:a |an )?(?:new )?job as {_JOB_VAL}")),
    ("job_title", "val", regex.compile(rf"{_POSS} (?:new )?(?:job|job title|role|position|profession) is (?:a |an )?{_VAL}")),
    ("job_title", "val", regex.compile(
        rf"{_SUBJ}\s+(?:is|became|has become|is now|was promoted to|got promoted to) (?:now )?(?:a |an )?"
        rf"(?P<val>(?:[\p{{Ll}}-]+ ){{0,2}}(?:{_JOBS}))\b(?! at\b)")),
    ("job_title", "val", regex.compile(
        rf"{_SUBJ}\s+(?:is|became|is now) (?:now )?(?:a |an )?(?P<val>(?:[\p{{Ll}}-]+ ){{0,2}}(?:{_JOBS}))(?<!student) at \p{{Lu}}")),
    ("school", "val", regex.compile(
        rf"{_SUBJ}\s+{_ADV}(?:stud(?:y|ies|ying)|enrolled|is a student|is a (?:\p{{Ll}}+ )?student)"
        rf"(?: [\p{{Ll}} ]{{1,{_MAX_CLAUSE}}}?)? (?:at|in) (?P<val>\p{{Lu}}[^,.;!?()]*)")),
    ("school", "val", regex.compile(
        rf"{_SUBJ}\s+{_ADV}(?:attends?|attending|goes to|got into|was accepted (?:at|to|into)) "
        rf"(?P<val>[^,.;!?()]{{0,{_MAX_CLAUSE}}}\b(?:University|College|School|Academy|Institute|university|college|school)\b"
        r"[^,.;!?()]*)")),
    ("partner", "val", regex.compile(
        rf"{_POSS} (?:new )?(?:{_PARTNER})(?:'s name)? (?:is )?(?:called |named )?{_NAME}")),
    ("partner", "val", regex.compile(
        rf"{_SUBJ}\s+{_ADV}(?:dating|seeing|married to|engaged to|in a relationship with|going out with|"
        rf"married|started dating|started seeing|got engaged to) {_NAME}")),
    ("partner", "val", regex.compile(rf"{_NAME} (?:has )?(?:just )?moved in with (?P<subj>the user)\b")),
    ("partner", "left", regex.compile(
        rf"{_SUBJ}\s+{_ADV}(?:broke up with|split up with|divorced|separated from|is no longer with|is no longer dating) {_NAME}")),
    ("partner", "none", regex.compile(
        rf"{_SUBJ}\s+{_ADV}(?:broke up with|split up with|divorced|separated from|is single|is no longer with|"
        rf"is no longer dating|ended (?:the|their|a) relationship)")),
    ("pet", "val", regex.compile(
        rf"{_POSS} (?P<extra>new |other |second |another )?(?P<kind>{_PET})(?:'s name)? (?:is )?(?:called |named )?{_NAME}")),
    ("pet", "val", regex.compile(
        rf"{_SUBJ}\s+{_ADV}(?:has|got|adopted) (?P<extra>another |a second |also )?(?:a |an )?(?:new )?"
        rf"(?:\p{{Ll}}+ )?(?P<kind>{_PET}) (?:called|named) {_NAME}")),
    ("favourite", "val", regex.compile(
        rf"{_POSS} (?:all-time |new )?favou?rite (?:(?P<kind>[\p{{Ll}} -]{{2,30}}?) )?(?:is|are) (?:now )?{_VAL}")),
    # "has gone off sencha": sencha is no longer a favourite of any kind (favourite:*)
    ("favourite", "left", regex.compile(rf"{_SUBJ}\s+{_ADV}{_DISLIKE} {_VAL}")),
    ("opinion", "neg", regex.compile(rf"{_SUBJ}\s+{_ADV}{_DISLIKE} {_VAL}")),
    # "the user loves mate these days, hot chocolate got boring": hot chocolate is no longer liked
    ("favourite", "left", regex.compile(rf"{_SUBJ}\s.{{0,{_MAX_CLAUSE}}}?,\s*{_BORING}")),
    ("opinion", "neg", regex.compile(rf"{_SUBJ}\s.{{0,{_MAX_CLAUSE}}}?,\s*{_BORING}")),
    ("opinion", "pos", regex.compile(
        rf"{_SUBJ}\s+{_ADV}(?:likes?|loves?|enjoys?|adores?|prefers?|(?:is )?into|is a (?:big |huge )?fan of|"
        rf"is obsessed with|is hooked on|started (?:liking|eating|drinking)|(?:has )?come around (?:on|to)|"
        rf"switched from [^,.;!?()]{{1,{_MAX_CLAUSE}}}? to) {_VAL}")),
    # the value starts at the first letter after a punctuation mark (or where the search
    # resumes): the same match as trying every letter, but each stretch is read once, not once per letter
    ("opinion", "pos", regex.compile(
        rf"(?:^|\G|(?<=[,.;!?()]))[^\p{{L}},.;!?()]*+(?P<val>\p{{L}}[^,.;!?()]*?) (?:grew|has grown|have grown) on {_SUBJ}")),
    ("plan", "neg", regex.compile(
        rf"{_SUBJ}\s+{_ADV}(?:(?:no longer|doesn't|does not) (?:plans?|wants?|intends?|is going|going) to|"
        rf"(?:cancelled|canceled|called off|gave up on|dropped|postponed|scrapped) (?:the user's |their |the |a )?"
        rf"(?:plans? to )?){_VAL}")),
    ("plan", "pos", regex.compile(
        rf"{_SUBJ}\s+{_ADV}(?:plans?|planning|intends?|intending|is going|is heading|is hoping|hopes?|is about) to {_VAL}")),
    ("plan", "pos", regex.compile(rf"{_SUBJ}\s+{_ADV}booked (?:a |the )?(?P<val>(?:trip|flights?|holiday) to [^,.;!?()]+)")),
    ("plan", "pos", regex.compile(rf"{_SUBJ}\s+{_ADV}(?:is )?planning (?:a |an )?(?P<val>(?:trip|visit|move) to [^,.;!?()]+)")),
]
_HEDGE = regex.compile(
    r"\b(?:might|maybe|perhaps|possibly|probably|thinking (?:about|of)|considering|not sure|could|unsure|"
    r"wondering)\b|(?<![Ii]n )\bmay\b")
_ADDITIVE = regex.compile(r"\b(?:also|too|as well|another|second|other|both)\b", regex.I)
_PRONOUNS = {"he", "she", "they"}
_TRAVEL = regex.compile(r"^(?:visit|go|travel|fly|take a trip|trip|vacation|holiday)\b", regex.I)
_STOP = {"to", "the", "a", "an", "in", "on", "at", "of", "for", "with", "their", "user's", "go", "visit", "travel",
         "fly", "trip", "take", "some", "and"}
_TIME_TAIL = regex.compile(
    rf"\s+(?:in|on|by|next|this|last|before|after|around|at)\s+(?P<time>(?:the )?(?:\d{{4}}|{_MONTHS}|"
    r"spring|summer|autumn|fall|winter|week|month|year|weekend|monday|tuesday|wednesday|thursday|friday|saturday|"
    r"sunday)\b.*)$", regex.I)


def _subject(raw: str) -> str:
    s = raw.strip().lower()
    s = regex.sub(r"^the ", "", s)
    if s in ("user", "i", "me"):
        return "user"
    return s


def _clean(value: str) -> str:
    v = _CUT.sub("", " " + value.strip()).strip()
    v = _ARTICLE.sub("", v).strip()
    return " ".join(v.lower().split())


def _plan_key(action: str) -> tuple[str, str]:
    """A plan's key (what is planned) and value (when), e.g. ``travel japan`` / ``may``."""
    action = action.strip()
    when = ""
    m = _TIME_TAIL.search(action)
    if m:
        when, action = m.group("time").lower(), action[: m.start()]
    names = regex.findall(r"\b\p{Lu}[\p{L}'-]+", action)
    first = action.split()[0] if action.split() else ""
    verb = "travel" if _TRAVEL.search(action) or (names and first == names[0]) else (action.split()[0].lower() if action.split() else "")
    words = [n.lower() for n in names] or [w for w in _clean(action).split() if w not in _STOP][:3]
    if verb and verb != "travel" and words and words[0] == verb:
        words = words[1:]
    return " ".join([verb, *words]).strip(), when


def _opinion_object(value: str) -> str:
    v = _clean(regex.sub(r"^to\s+", "", value.strip()))
    v = regex.sub(r"\s+(?:over|to|than)\s.*$", "", v)
    if v in ("it", "them", "that", "this", "those", "these", "him", "her"):
        return ""  # a pronoun names no object
    return " ".join(w[:-1] if len(w) > 3 and w.endswith("s") and not w.endswith("ss") else w for w in v.split())


_CLAUSE = regex.compile(r",?\s+(?:and|but)\s+(?:then\s+)?|;\s*")
_LEADING_SUBJECT = regex.compile(rf"^{_SUBJ}\s")
_SENTENCE_END = regex.compile(r"(?<=[.!?])\s+")


def _pieces(text: str) -> list[str]:
    """``text`` cut at and / but / semicolons, and a piece longer than :data:`_MAX_CLAUSE`
    cut again at sentence ends."""
    out: list[str] = []
    for part in _CLAUSE.split(text):
        out.extend([part] if len(part) <= _MAX_CLAUSE else _SENTENCE_END.split(part))
    return out


def _clauses(text: str) -> list[str]:
    """``text`` cut at and / but / semicolons (see :func:`_pieces`); a clause without a
    subject of its own ("... and works at Acme") borrows the previous clause's. A clause
    longer than :data:`_MAX_CLAUSE` states no one fact (a fact is a phrase, not a page): it
    is dropped, not cut, so no slot is read from half a phrase and the rules, whose values
    are bounded by that length, read a long text in linear time."""
    out: list[str] = []
    subject = ""
    for part in _pieces(text):
        part = part.strip()
        if not part:
            continue
        m = _LEADING_SUBJECT.match(part)
        if m:
            subject = m.group("subj")
        elif subject and part[:1].islower():
            part = f"{subject} {part}"
        if len(part) <= _MAX_CLAUSE:
            out.append(part)
    return out


def parse_slots(text: str) -> list[SlotFact]:
    """The attribute slots ``text`` states (each slot once, first match wins)."""
    return list(_parse(text))


@functools.lru_cache(maxsize=8192)
def _parse(text: str) -> tuple[SlotFact, ...]:
    """:func:`parse_slots`, cached: every new fact is compared with the stored facts of its scope."""
    t = " ".join(text.split()).rstrip(".!")
    if regex.search(r"\b(?:I|my|My|I'm)\b", t):
        for pattern, repl in _FIRST_PERSON:
            t = pattern.sub(repl, t)
    hedged = bool(_HEDGE.search(t))
    out: dict[tuple[str, str], SlotFact] = {}
    clauses = _clauses(t)
    for slot, kind, pattern in _SLOT_RULES:
        for m in (m for c in clauses for m in pattern.finditer(c)):
            groups = m.groupdict()
            subject = _subject(groups["subj"])
            name = slot
            extra = (groups.get("extra") or "").strip()
            additive = bool(extra and extra != "new") or bool(_ADDITIVE.search(m.group(0)))
            if slot == "pet":
                name = f"pet:{_PETS[groups['kind'].lower()]}"
                value = groups["val"].lower()
            elif kind == "left":
                gone = _opinion_object(groups["val"]) if slot == "favourite" else _clean(groups["val"])
                if not gone:
                    continue
                name = "favourite:*" if slot == "favourite" else slot
                out.setdefault((subject, name), SlotFact(subject, name, "", hedged=hedged, leaves=gone))
                continue
            elif slot == "favourite":
                name = f"favourite:{_clean(groups.get('kind') or '') or '*'}"
                value = _clean(groups["val"])
            elif slot == "opinion":
                obj = _opinion_object(groups["val"])
                if not obj:
                    continue
                name, value = f"opinion:{obj}", "+" if kind == "pos" else "-"
                additive = False
            elif slot == "plan":
                key, when = _plan_key(groups["val"])
                if not key:
                    continue
                name, value = f"plan:{key}", ("-" if kind == "neg" else "+" + (f" {when}" if when else ""))
                additive = False
            elif kind == "none":
                value = ""
                additive = False
            else:
                value = _clean(groups["val"])
                if not value:
                    continue
            if (subject, name) not in out and not (slot == "job_title" and (subject, "employer") in out
                                                    and value == out[(subject, "employer")].value):
                out[(subject, name)] = SlotFact(subject, name, value, hedged=hedged, additive=additive)
    return tuple(out.values())


# ---------------------------------------------------------------- resolution
def _same_slot(a: SlotFact, b: SlotFact) -> bool:
    """Whether ``a`` speaks of ``b``'s slot: the same slot, or ``favourite:*`` (a favourite of
    any kind) that leaves a value, against a favourite of some kind."""
    if a.slot == b.slot:
        return True
    return a.slot == "favourite:*" and bool(a.leaves) and b.slot.startswith("favourite:")


def _value(fact: SlotFact) -> str:
    """The value a fact holds for comparison with a leave (an opinion's value is its object)."""
    return fact.value


def resolve(new: FactRef, existing: Sequence[FactRef]) -> Resolution:
    """Which of ``existing`` the ``new`` fact supersedes (or is superseded by), and what is
    uncertain. Pure: reads text and times only."""
    res = Resolution()
    mine = parse_slots(new.text)
    if not mine:
        return res
    for old in existing:
        if old.id == new.id:
            continue
        theirs = parse_slots(old.text)
        if not theirs:
            continue
        contradicted: list[str] = []
        for a in mine:
            for b in theirs:
                if not _same_slot(a, b):
                    continue
                if a.subject != b.subject:
                    if (a.subject in _PRONOUNS) != (b.subject in _PRONOUNS):
                        res.uncertain.append(
                            f"{new.id} and {old.id} both state {a.slot}, but one names its subject only by a pronoun "
                            f"({a.subject if a.subject in _PRONOUNS else b.subject!r}): both kept")
                    continue
                if a.value == b.value or a.additive or (a.leaves and _value(b) != a.leaves):
                    continue
                if not (a.value or a.leaves) and new.observed_at == old.observed_at:
                    continue  # "broke up; seeing Sofia now": emptying a slot never undoes what the same turn said
                if a.hedged or b.hedged:
                    res.uncertain.append(
                        f"{new.id} may contradict {old.id} on {a.subject}'s {a.slot}, but one of them is hedged: both kept")
                    continue
                contradicted.append(a.slot)
        if not contradicted:
            continue
        slot = ", ".join(dict.fromkeys(contradicted))
        older_is_old = old.observed_at <= new.observed_at
        loser = theirs if older_is_old else mine
        if len([x for x in loser if not x.leaves]) > len(set(contradicted)):  # a leave restates the slot
            res.uncertain.append(
                f"{new.id} contradicts {old.id} on {slot}, but the {'stored' if older_is_old else 'new'} fact states "
                "more than that: both kept")
            continue
        if older_is_old:
            res.supersede.append((old.id, slot))
        elif res.superseded_by is None or res.superseded_by[0] != old.id:
            res.superseded_by = (old.id, slot)
    return res


@dataclass
class UpdateReport:
    """What :func:`apply_updates` changed: rows superseded (the new one's id when a stored,
    newer fact replaced it) and the uncertain matches it left alone; with a resolver
    (:func:`manowar_memory.resolver.resolve_updates`), also the new facts it found already
    known (``duplicates``: new row id -> the stored fact's id)."""

    superseded: list[str] = field(default_factory=list)
    uncertain: list[str] = field(default_factory=list)
    duplicates: dict[str, str] = field(default_factory=dict)


def apply_updates(store: Store, scope: Scope, records: Sequence[MemoryRecord], now: int, *,
                  limit: int = 500) -> UpdateReport:
    """Supersede what each newly stored fact of ``records`` (in order) contradicts among the
    active facts of exactly its scope (same agent, user, mode and HAI), or supersede the new
    fact itself when a stored fact observed later already replaced it. The scope's facts are
    read once for the whole batch. Superseded rows keep their text and get
    ``status: superseded``, ``supersededBy``, ``supersededAt``, ``supersededReason`` and
    ``slot``, and a decay score of at most 0.05 (as :meth:`MemoryEngine.resolve_conflict`)."""
    report = UpdateReport()
    new = [r for r in records if parse_slots(r.content)]
    if not new:
        return report
    active = {r.id: r for r in store.list_memories(MemoryQuery(scope=scope, sources=("fact",)), limit)
              if r.status not in INACTIVE_STATUSES}
    for record in new:
        active.setdefault(record.id, record)  # stored, but perhaps past the read's limit
    changes: list[tuple[str, dict[str, Any]]] = []

    def supersede(row: MemoryRecord, winner: str, slot: str) -> None:
        meta = {**row.metadata, "status": "superseded", "supersededAt": now, "supersededBy": winner,
                "supersededReason": f"replaced by a newer fact on {slot}", "slot": slot}
        changes.append((row.id, {"metadata": meta, "decay_score": min(row.decay_score, 0.05), "updated_at": now}))
        report.superseded.append(row.id)
        active.pop(row.id, None)

    for record in new:
        if record.id not in active:  # an earlier fact of this batch replaced it already
            continue
        key = (record.user_address, record.mode, record.hai_id)
        same = [r for r in active.values() if r.id != record.id and (r.user_address, r.mode, r.hai_id) == key]
        res = resolve(FactRef(record.id, record.content, record.created_at),
                      [FactRef(r.id, r.content, r.created_at) for r in same])
        report.uncertain += res.uncertain
        if res.superseded_by is not None:
            supersede(record, *res.superseded_by)
        else:
            for row_id, slot in res.supersede:
                supersede(active[row_id], record.id, slot)
    if changes:
        store.update_memories(changes, agent_wallet=scope.agent_wallet)
    return report


def mark_outdated_sources(store: Store, scope: Scope, superseded: Sequence[str], now: int, *,
                          limit: int = 500) -> list[str]:
    """Mark the turn rows that stated the ``superseded`` facts when none of the facts read from
    them is still active: ``metadata.outdated`` (True), ``outdatedAt`` and ``outdatedBy`` (the
    ids that replaced them). A turn that still backs an active fact is left alone (it says
    something current too), and nothing is marked when the scope holds more than ``limit``
    facts (the check could not see them all). Returns the ids of the turns marked."""
    losers: dict[str, list[MemoryRecord]] = {}
    for row_id in dict.fromkeys(superseded):
        row = store.get_memory(row_id, agent_wallet=scope.agent_wallet)
        source = row.metadata.get(SOURCE_MEMORY_ID) if row is not None else None
        if row is not None and isinstance(source, str):
            losers.setdefault(source, []).append(row)
    if not losers:
        return []
    facts = store.list_memories(MemoryQuery(scope=scope, sources=("fact",)), limit + 1)
    if len(facts) > limit:
        return []
    key = (scope.agent_wallet, scope.user_address, scope.mode, scope.hai_id)
    backing = {f.metadata.get(SOURCE_MEMORY_ID) for f in facts
               if f.status not in INACTIVE_STATUSES and (f.agent_wallet, f.user_address, f.mode, f.hai_id) == key}
    changes: list[tuple[str, dict[str, Any]]] = []
    for source, rows in losers.items():
        turn = None if source in backing else store.get_memory(source, agent_wallet=scope.agent_wallet)
        if turn is None or turn.source != "session" or (
                turn.agent_wallet, turn.user_address, turn.mode, turn.hai_id) != key:
            continue
        by = sorted({str(r.metadata["supersededBy"]) for r in rows if r.metadata.get("supersededBy")}
                    | set(turn.metadata.get("outdatedBy") or []))
        meta = {**turn.metadata, OUTDATED: True, "outdatedAt": now, "outdatedBy": by}
        changes.append((turn.id, {"metadata": meta}))
    if changes:
        store.update_memories(changes, agent_wallet=scope.agent_wallet)
    return [row_id for row_id, _ in changes]
