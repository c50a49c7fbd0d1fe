"""Facts that change: does the packed context carry the current value, and not the stale one?

    python benchmarks/lifecycle.py [--users 100] [--seed 7] [--embedder local|fake]
        [--systems manowar dense langchain-ensemble ...] [--locomo PATH/locomo10.json] [--json OUT]

The data (generated, deterministic for a seed): ``--users`` people talk to an assistant over
3 to 5 sessions a few weeks apart. In the first session they say who they are: where they
live, who they work for, what they do, who their partner is, a favourite thing, how they feel
about something, a trip they plan. In later sessions some of that changes, said the way people
say it ("we relocated to Ghent in the spring", "Marta and I broke up; I'm seeing Jonas now",
"the Japan trip is off, we're going to Peru instead", "I've come around on karaoke"), some of it
changes twice, the rest is only mentioned again in passing; between them come distractors
(a sister who lives in Porto, "I visited Paris", a hedged "I might move to Turin", questions
about other cities, small talk). The phrasing bank below is written from how people talk,
not from the engine's rules: some of its paraphrases are ones the rules do not read, and the
per-paraphrase table says which.

Questions per person: for every attribute, its current value ("Where does the user live now?"),
and for every changed one, when it last changed ("When did the user move to Ghent?").
``--locomo PATH`` adds LoCoMo's temporal questions (category 2; LoCoMo has no knowledge-update
category, so the generated set stands for those).

Systems, each with one store per person (scope, collection, index or user id), one shared
embedder (``--embedder``: the engine's ``local`` MiniLM, or ``fake`` for a smoke run) and a
900-character context:

* ``manowar``: every turn through :meth:`MemoryEngine.post_turn` (the user's message, with its
  timestamp, one thread per session), then :meth:`MemoryEngine.flush` (rule-based fact
  extraction and supersession); each question through :meth:`MemoryEngine.pre_turn` (all
  layers, the engine's defaults: 6 items, 120 characters an item, 900 characters) with
  ``PackerConfig(dates=True)``; ``manowar-nodates``: the same store, dates off;
  ``manowar-graph``: dates on, the graph layer alone (the extracted facts);
* ``dense``: a plain numpy scan (cosine over every turn of the person);
* ``langchain-ensemble``, ``llamaindex-fusion``, ``mem0`` (``infer=False``): the peers of
  ``benchmarks/peers.py``, built by its classes;
* ``mem0-llm``: mem0 with ``infer=True``, run only with ``--mem0-llm PROVIDER:MODEL`` (a local
  chat model mem0 can reach, e.g. ``ollama:qwen2.5:0.5b``), else reported as skipped.

Peers store each turn as ``(8 May 2023) User: <text>`` (the text of ``benchmarks/locomo.py``,
so every system can show dates); the engine gets the bare text and the turn's timestamp.
**Peers' packing rule**: the header ``Memory context:``, then the hits in rank order, each on
its own line, whole; a hit that does not fit in what is left of the 900 characters is skipped
and the next one tried (the engine's own packer does the same, but also caps items at 120
characters and 6 items).

Metrics, on the lines of the packed context as a model would read them (the same rule for
every system; ``score_current`` and ``score_when``):

* a line *mentions* a value when it holds its words (case-insensitive, whole words); for an
  opinion, when it names the object and a cue of that polarity ("love", "can't stand", ...);
* a stale mention is *marked* when the line also mentions the current value (a change stated
  in one breath), or holds a past cue ("used to", "broke up", "no longer", "left", "quit",
  "instead", "is off", ..., or the engine's tag ``[VECTORS 2023-01-09 superseded]`` on a turn
  whose facts were all replaced: a mark the model reads like the others), or carries a date earlier than a packed line mentioning the
  current value (``[GRAPH 2023-05-08]``, ``(8 May 2023)``);
* **current first**: the first line that asserts a value (mentions the current one, or a stale
  one unmarked by its own words) mentions the current one;
* **stale as current**: a stale value in a line that is not marked;
* **stale unmarked**: the same, dates not counting as marks (what a reader sees without
  comparing dates);
* **evidence**: a line mentions the current value (LoCoMo: the share of evidence turns packed);
* **dated** ("when" questions): a line mentions the changed-to value and carries the date of
  the turn that changed it (LoCoMo: an evidence turn packed in a line carrying a date).

Target (issue #30, no LLM): current first for at least 90 % of changed attributes, stale as
current at most 5 %.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import random
import re
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("MEM0_TELEMETRY", "False")

sys.path.insert(0, str(Path(__file__).resolve().parent))

from manowar_memory import MemoryConfig, MemoryEngine, PackerConfig, Scope

from locomo import Conversation, Turn, ingest_items, load_conversations, memory_texts
from peers import BENCH, NEEDS, K, SharedEmbedder, System, _missing, _table
from peers import SYSTEMS as PEER_SYSTEMS
from record import write_record  # type: ignore[import-not-found]

BUDGET = 900
HEADER = "Memory context:"
KINDS = ("residence", "employer", "job_title", "partner", "favourite", "opinion", "plan")
TARGET_FIRST, TARGET_STALE = 90.0, 5.0


# ---------------------------------------------------------------- value banks

CITIES = ["Lisbon", "Berlin", "Ghent", "Vienna", "Prague", "Dublin", "Oslo", "Krakow", "Lyon", "Utrecht", "Turin",
          "Seville", "Bologna", "Leipzig", "Munich", "Zurich", "Copenhagen", "Helsinki", "Tallinn", "Riga", "Bordeaux",
          "Nantes", "Rotterdam", "Antwerp", "Bristol", "Glasgow", "Edinburgh", "Valencia", "Gdansk", "Porto",
          "Madrid", "Marseille", "Hamburg", "Stockholm", "Brno", "Ljubljana"]
COMPANIES = ["Zalando", "Siemens", "Spotify", "Deloitte", "Novartis", "Ikea", "Lufthansa", "Philips", "Bosch",
             "Unilever", "Heineken", "Adidas", "Nokia", "Ericsson", "Decathlon", "Accenture", "Shopify", "Atlassian",
             "Maersk", "Airbus", "Danone", "Vodafone", "Ubisoft", "Klarna", "Revolut", "Celonis", "Personio"]
JOBS = ["nurse", "teacher", "accountant", "architect", "barista", "paramedic", "chef", "lawyer", "pharmacist",
        "electrician", "journalist", "translator", "physiotherapist", "librarian", "data analyst", "graphic designer",
        "carpenter", "dentist", "social worker", "software developer"]
PARTNERS = {"Marta": "f", "Jonas": "m", "Priya": "f", "Tomas": "m", "Lena": "f", "Mateo": "m", "Sofia": "f",
            "Emil": "m", "Nadia": "f", "Omar": "m", "Clara": "f", "Felix": "m", "Hana": "f", "Luca": "m",
            "Ingrid": "f", "Rafael": "m", "Yara": "f", "Bruno": "m", "Aiko": "f", "Dario": "m"}
FRIENDS = ["Ines", "Karl", "Beatriz", "Olek", "Mira", "Sven", "Rosa", "Piotr", "Greta", "Anton"]
FAVOURITES = {
    "drink": ["espresso", "green tea", "kombucha", "mate", "hot chocolate", "lemonade", "chai"],
    "sport": ["bouldering", "tennis", "swimming", "cycling", "volleyball", "badminton", "rowing"],
    "music": ["jazz", "techno", "folk", "hip hop", "opera", "reggae", "punk"],
}
OPINION_OBJECTS = ["sushi", "jogging", "horror movies", "camping", "karaoke", "board games", "yoga", "spicy food",
                   "podcasts", "museums", "cold showers", "musicals"]
COUNTRIES = ["Japan", "Peru", "Iceland", "Morocco", "Vietnam", "Canada", "Mexico", "Norway", "Kenya", "Chile",
             "Greece", "Thailand", "Georgia", "Scotland", "Jordan", "Ecuador"]
MONTHS = ["March", "April", "May", "June", "July", "August", "September", "October"]


def _a(word: str) -> str:
    return "an" if word[0].lower() in "aeiou" else "a"


# ---------------------------------------------------------------- phrasing bank (how people talk)
# Each template: (id, text). Fields: {v} the value said, {old} the value it replaces, {a} the
# article for {v}, {thing} a favourite's kind, {o} an opinion's object, {gf} girlfriend/boyfriend,
# {month} a month. Opinion values are "pos:<object>" / "neg:<object>".

INITIAL: dict[str, list[tuple[str, str]]] = {
    "residence": [
        ("res-live-in", "I live in {v}."),
        ("res-been-living", "I've been living in {v} for about three years now."),
        ("res-flat", "My flat in {v} is tiny but I love the neighbourhood."),
        ("res-based", "I'm based in {v}."),
        ("res-home-is", "Home for me is {v}, near the old town."),
    ],
    "employer": [
        ("emp-work-at", "I work at {v}."),
        ("emp-been-with", "I've been with {v} for a couple of years."),
        ("emp-team", "I'm on the logistics team at {v}."),
        ("emp-my-employer", "My employer is {v}, it's a big place."),
    ],
    "job_title": [
        ("job-work-as", "I work as {a} {v}."),
        ("job-im-a", "I'm {a} {v}."),
        ("job-being", "Being {a} {v} is exhausting some days."),
    ],
    "partner": [
        ("par-partner-and-i", "My partner {v} and I have been together for two years."),
        ("par-dating", "I'm dating {v}."),
        ("par-my-gf", "My {gf} is {v}."),
        ("par-anniversary", "{v} and I are going out tonight, it's our anniversary."),
    ],
    "favourite": [
        ("fav-is", "My favourite {thing} is {v}."),
        ("fav-nothing-beats", "Nothing beats {v}, honestly."),
        ("fav-absolute", "{v} is my absolute favourite."),
    ],
    "opinion": [
        ("opi-love", "I love {o}."),
        ("opi-big-fan", "I'm a big fan of {o}."),
        ("opi-cant-stand", "I can't stand {o}."),
        ("opi-dont-like", "I really don't like {o}."),
    ],
    "plan": [
        ("plan-planning-trip", "We're planning a trip to {v} in {month}."),
        ("plan-going-to", "I'm going to {v} in {month}, flights are booked."),
        ("plan-saving-for", "We're saving up for our {v} trip this year."),
    ],
}
POSITIVE_INITIAL = {"opi-love", "opi-big-fan"}

CHANGE: dict[str, list[tuple[str, str]]] = {
    "residence": [
        ("res-moved-to", "I moved to {v} last month."),
        ("res-relocated", "We relocated to {v} in the spring."),
        ("res-left-living-now", "Big news: I finally left {old} and I'm living in {v} now."),
        ("res-settled", "I've just settled into a new place in {v}."),
        ("res-now-that", "Now that I'm in {v}, my commute is way shorter."),
        ("res-packed-up", "Packed up everything and moved out of {old}; {v} is home now."),
        ("res-resident", "I'm {a} {v} resident now, can you believe it?"),
    ],
    "employer": [
        ("emp-now-at", "I'm now at {v}."),
        ("emp-new-job", "I started a new job at {v}."),
        ("emp-quit-joined", "I quit {old} and joined {v}."),
        ("emp-first-week", "Last week was my first week at {v}."),
        ("emp-hired-me", "{v} hired me!"),
        ("emp-switched", "I switched jobs, I'm with {v} now."),
        ("emp-notice", "I handed in my notice at {old}, and now I'm working for {v}."),
    ],
    "job_title": [
        ("job-retrained", "I retrained and I'm working as {a} {v} now."),
        ("job-not-anymore", "I'm not {olda} {old} anymore, I became {a} {v}."),
        ("job-career-change", "Career change: I'm {a} {v} these days."),
        ("job-earn-living", "These days I earn my living as {a} {v}."),
        ("job-new-role", "I got a job as {a} {v}, first time in that role."),
    ],
    "partner": [
        ("par-broke-up-seeing", "{old} and I broke up; I'm seeing {v} now."),
        ("par-didnt-work-out", "I'm with {v} now, things with {old} didn't work out."),
        ("par-met-someone", "I met someone: {v}. We've been together since the summer."),
        ("par-moved-in", "{v} moved in with me last week, we're official."),
        ("par-ended-started", "Things ended with {old}. I've started seeing {v}."),
        ("par-new-gf", "My new {gf} {v} is coming to the party with me."),
    ],
    "favourite": [
        ("fav-gone-off", "I've gone off {old}; {v} is my favourite now."),
        ("fav-all-about", "Lately I'm all about {v}."),
        ("fav-new-favourite", "My new favourite {thing} is {v}."),
        ("fav-switched", "I switched from {old} to {v}."),
        ("fav-hooked", "I'm hooked on {v} these days, {old} got boring."),
    ],
    "opinion": [  # to negative
        ("opi-used-to-love", "I used to love {o} but I can't stand it anymore."),
        ("opi-over-it", "Honestly, I'm over {o}."),
        ("opi-gone-off", "I've gone off {o} completely."),
        ("opi-sick-of", "I'm so sick of {o} lately."),
    ],
    "opinion+": [  # to positive
        ("opi-come-around", "I've come around on {o}, I actually enjoy it now."),
        ("opi-used-to-hate", "Funny, I used to hate {o} but now I love it."),
        ("opi-grew-on-me", "{o} grew on me, I'm a fan now."),
        ("opi-converted", "I'm a convert when it comes to {o} now."),
    ],
    "plan": [
        ("plan-off-instead", "The {old} trip is off, we're going to {v} instead."),
        ("plan-changed", "We changed plans: {v} instead of {old}."),
        ("plan-forget", "Forget {old}, we booked flights to {v}."),
        ("plan-it-is", "We've postponed {old} indefinitely, {v} it is."),
        ("plan-cancelled", "We cancelled the {old} trip and we're heading to {v} in {month}."),
    ],
}

MENTION: dict[str, list[tuple[str, str]]] = {  # the value in passing, as still true
    "residence": [("res-m-rain", "It's raining again in {v}, third day in a row."),
                  ("res-m-market", "The Saturday market in {v} is my favourite thing.")],
    "employer": [("emp-m-busy", "Busy week at {v}, three deadlines."),
                 ("emp-m-party", "The {v} summer party is next Friday.")],
    "job_title": [("job-m-shift", "Long day today, that's the life of {a} {v}."),
                  ("job-m-colleagues", "The other {v}s on my team are great.")],
    "partner": [("par-m-dinner", "{v} cooked dinner for me tonight."),
                ("par-m-birthday", "It's {v}'s birthday on Sunday, any gift ideas?")],
    "favourite": [("fav-m-still", "Still can't get enough of {v}."),
                  ("fav-m-weekend", "{v} is still my favourite, no contest.")],
    "opinion": [("opi-m-still-neg", "Still can't stand {o}."), ("opi-m-still-pos", "I still love {o}.")],
    "plan": [("plan-m-excited", "Really looking forward to {v}!"),
             ("plan-m-guidebook", "Bought a guidebook for {v} yesterday.")],
}

DISTRACTOR: dict[str, list[tuple[str, str]]] = {  # {x}: another value of the same kind, not the user's
    "residence": [("res-d-sister", "My sister lives in {x}."), ("res-d-visited", "I visited {x} last weekend, what a city."),
                  ("res-d-might", "I might move to {x} at some point."), ("res-d-question", "Is {x} expensive to live in?"),
                  ("res-d-friend", "My friend {f} just moved to {x}.")],
    "employer": [("emp-d-brother", "My brother works at {x}."),
                 ("emp-d-interview", "I had an interview at {x} but I'm not taking it."),
                 ("emp-d-hiring", "Do you know if {x} is hiring?"),
                 ("emp-d-recruiter", "{x} keeps sending me recruiter emails.")],
    "job_title": [("job-d-mum", "My mum was {a} {x} for thirty years."),
                  ("job-d-wonder", "Sometimes I wonder if I should become {a} {x}."),
                  ("job-d-roommate", "My roommate is {a} {x}.")],
    "partner": [("par-d-friend-wedding", "My best friend {x} is getting married."),
                ("par-d-cousin", "My cousin {x} is visiting this weekend.")],
    "favourite": [("fav-d-friend", "My friend {f} is obsessed with {x}."),
                  ("fav-d-try", "Should I try {x} sometime?")],
    "opinion": [("opi-d-friend", "{f} loves {x}, I don't get it.")],
    "plan": [("plan-d-parents", "My parents went to {x} last year."),
             ("plan-d-someday", "I'd love to see {x} someday."),
             ("plan-d-question", "Is {x} safe for tourists right now?")],
}

SMALL_TALK = ["Can you remind me to call the dentist tomorrow?", "What's a good recipe for a quick weeknight dinner?",
              "I slept terribly last night.", "Any tips for staying focused in the afternoon?",
              "My phone battery dies so fast lately.", "I finished that long novel finally.",
              "How do I get red wine out of a carpet?", "It's been a long week, honestly.",
              "Can you explain compound interest simply?", "I need a present for a colleague, nothing fancy."]

CURRENT_Q: dict[str, list[str]] = {
    "residence": ["Where does the user live now?", "Which city is the user living in these days?"],
    "employer": ["Where does the user work now?", "Which company is the user working for?"],
    "job_title": ["What does the user do for a living?", "What is the user's job now?"],
    "partner": ["Who is the user's partner now?", "Who is the user dating?"],
    "favourite": ["What is the user's favourite {thing} now?"],
    "opinion": ["How does the user feel about {o} these days?", "Does the user like {o}?"],
    "plan": ["Where is the user planning to travel?", "What trip is the user planning?"],
}
CURRENT_Q_FIRST: dict[str, list[str]] = {  # --person first: the user asks about themselves
    "residence": ["Where do I live now?", "Which city am I living in these days?"],
    "employer": ["Where do I work now?", "Which company am I working for?"],
    "job_title": ["What do I do for a living?", "What is my job now?"],
    "partner": ["Who is my partner now?", "Who am I dating?"],
    "favourite": ["What is my favourite {thing} now?"],
    "opinion": ["How do I feel about {o} these days?", "Do I like {o}?"],
    "plan": ["Where am I planning to travel?", "What trip am I planning?"],
}
WHEN_Q_FIRST = {
    "residence": "When did I move to {v}?",
    "employer": "When did I start working at {v}?",
    "job_title": "When did I become {a} {v}?",
    "partner": "When did I get together with {v}?",
    "favourite": "When did {v} become my favourite {thing}?",
    "opinion": "When did I change my mind about {o}?",
    "plan": "When did I decide to go to {v}?",
}
WHEN_Q = {
    "residence": "When did the user move to {v}?",
    "employer": "When did the user start working at {v}?",
    "job_title": "When did the user become {a} {v}?",
    "partner": "When did the user get together with {v}?",
    "favourite": "When did {v} become the user's favourite {thing}?",
    "opinion": "When did the user change their mind about {o}?",
    "plan": "When did the user decide to go to {v}?",
}


# ---------------------------------------------------------------- generated data


@dataclass
class GenTurn:
    text: str
    session: int
    index: int  # within the session
    at: dt.datetime
    dia_id: str
    kind: str = "small-talk"  # statement | change | mention | distractor | small-talk
    template: str = ""


@dataclass
class Attribute:
    kind: str
    slot: str  # e.g. residence, favourite:drink, opinion:sushi, plan:trip
    values: list[str]  # history, oldest first; the last is current
    change_templates: list[str] = field(default_factory=list)
    change_dates: list[dt.date] = field(default_factory=list)
    thing: str = ""
    obj: str = ""

    @property
    def changed(self) -> bool:
        return len(self.values) > 1


@dataclass
class Probe:
    """One question and what a correct context holds."""

    user: str
    text: str
    category: str  # an attribute kind, "when", or "locomo-temporal"
    kind: str
    current: str = ""
    stale: list[str] = field(default_factory=list)
    on_date: dt.date | None = None  # "when": the date of the change
    template: str = ""  # the paraphrase of the last change
    evidence: list[str] = field(default_factory=list)  # LoCoMo: dia ids

    @property
    def changed(self) -> bool:
        return bool(self.stale)


@dataclass
class User:
    uid: str
    turns: list[GenTurn]
    attributes: list[Attribute]
    probes: list[Probe]


def _fill(template: str, **fields: str) -> str:
    text = template.format(**fields)
    return text[0].upper() + text[1:]


def _fields(attr: Attribute, value: str, old: str = "", rng: random.Random | None = None) -> dict[str, str]:
    v = value.split(":", 1)[1] if attr.kind == "opinion" else value
    o = old.split(":", 1)[1] if attr.kind == "opinion" and old else old
    gf = {"f": "girlfriend", "m": "boyfriend"}.get(PARTNERS.get(v, ""), "partner")
    month = (rng or random.Random(0)).choice(MONTHS)
    return {"v": v, "old": o, "a": _a(v), "olda": _a(o) if o else "", "thing": attr.thing, "o": attr.obj,
            "gf": gf, "month": month}


def _pick(rng: random.Random, pool: Sequence[str], used: set[str]) -> str:
    choice = rng.choice([p for p in pool if p not in used])
    used.add(choice)
    return choice


def generate(n_users: int = 100, seed: int = 7, person: str = "third") -> list[User]:
    """``n_users`` people's sessions, deterministic for ``seed``; questions about "the user"
    (``person="third"``, LoCoMo's style) or asked by the user ("first")."""
    current_q, when_q = (CURRENT_Q_FIRST, WHEN_Q_FIRST) if person == "first" else (CURRENT_Q, WHEN_Q)
    rng = random.Random(seed)
    users = []
    start = dt.datetime(2023, 1, 9, tzinfo=dt.UTC)
    for u in range(n_users):
        uid = f"user-{u:03d}"
        used: set[str] = set()  # every value this user says of themselves (distractors avoid them)
        n_sessions = rng.randint(3, 5)
        kinds = rng.sample(KINDS, rng.randint(4, 6))
        attrs: list[Attribute] = []
        for kind in kinds:
            n_changes = 0
            if rng.random() < 0.6:
                n_changes = 2 if n_sessions >= 3 and rng.random() < 0.2 else 1
            if kind == "opinion":
                obj = _pick(rng, OPINION_OBJECTS, used)
                first = rng.choice(["pos", "neg"])
                pols = [first, "neg" if first == "pos" else "pos", first][: n_changes + 1]
                attrs.append(Attribute(kind, f"opinion:{obj}", [f"{p}:{obj}" for p in pols], obj=obj))
                continue
            thing = ""
            if kind == "favourite":
                thing = rng.choice(sorted(FAVOURITES))
                pool: Sequence[str] = FAVOURITES[thing]
            else:
                pool = {"residence": CITIES, "employer": COMPANIES, "job_title": JOBS, "partner": list(PARTNERS),
                        "plan": COUNTRIES}[kind]
            values = [_pick(rng, pool, used) for _ in range(n_changes + 1)]
            slot = {"favourite": f"favourite:{thing}", "plan": "plan:trip"}.get(kind, kind)
            attrs.append(Attribute(kind, slot, values, thing=thing))
        # which session each change lands in (sessions 2..n, in order)
        change_at: dict[int, list[tuple[Attribute, int]]] = {}
        for attr in attrs:
            if attr.changed:
                sessions = sorted(rng.sample(range(2, n_sessions + 1), len(attr.values) - 1))
                for i, s in enumerate(sessions, start=1):
                    change_at.setdefault(s, []).append((attr, i))
        turns: list[GenTurn] = []
        when = start + dt.timedelta(days=2 * u, hours=rng.randint(9, 19))
        current_index = {id(a): 0 for a in attrs}
        for s in range(1, n_sessions + 1):
            if s > 1:
                when += dt.timedelta(days=rng.choice([14, 21, 28, 35, 42]), hours=rng.randint(-3, 3))
            lines: list[tuple[str, str, str, Attribute | None]] = []  # text, kind, template, attribute changed
            if s == 1:
                for attr in attrs:
                    bank = INITIAL[attr.kind]
                    if attr.kind == "opinion":
                        positive = attr.values[0].startswith("pos:")
                        bank = [t for t in bank if (t[0] in POSITIVE_INITIAL) == positive]
                    tid, tpl = rng.choice(bank)
                    lines.append((_fill(tpl, **_fields(attr, attr.values[0], rng=rng)), "statement", tid, None))
            touched = set()
            for attr, i in change_at.get(s, []):
                bank = CHANGE[attr.kind]
                if attr.kind == "opinion" and attr.values[i].startswith("pos:"):
                    bank = CHANGE["opinion+"]
                tid, tpl = rng.choice(bank)
                text = _fill(tpl, **_fields(attr, attr.values[i], attr.values[i - 1], rng))
                lines.append((text, "change", tid, attr))
                current_index[id(attr)] = i
                attr.change_templates.append(tid)
                touched.add(id(attr))
            for attr in attrs if s > 1 else []:  # the then-current value of an untouched attribute, in passing
                if id(attr) not in touched and rng.random() < 0.3:
                    value = attr.values[current_index[id(attr)]]
                    bank = MENTION[attr.kind]
                    if attr.kind == "opinion":
                        bank = [bank[1] if value.startswith("pos:") else bank[0]]
                    tid, tpl = rng.choice(bank)
                    lines.append((_fill(tpl, **_fields(attr, value, rng=rng)), "mention", tid, None))
            for _ in range(rng.randint(1, 3)):
                attr = rng.choice(attrs)
                tid, tpl = rng.choice(DISTRACTOR[attr.kind])
                x = _distractor_value(rng, attr, used)
                lines.append((_fill(tpl, x=x, a=_a(x), f=rng.choice(FRIENDS)), "distractor", tid, None))
            for text in rng.sample(SMALL_TALK, rng.randint(1, 2)):
                lines.append((text, "small-talk", "", None))
            rng.shuffle(lines)
            for i, (text, kind, tid, changed) in enumerate(lines):
                at = when + dt.timedelta(seconds=90 * i)
                turns.append(GenTurn(text, s, i, at, f"D{s}:{i + 1}", kind, tid))
                if changed is not None:
                    changed.change_dates.append(at.date())
        probes = []
        for attr in attrs:
            fields_ = _fields(attr, attr.values[-1], rng=rng)
            probes.append(Probe(uid, _fill(rng.choice(current_q[attr.kind]), **fields_), attr.kind, attr.kind,
                                current=attr.values[-1], stale=[v for v in attr.values[:-1] if v != attr.values[-1]],
                                template=attr.change_templates[-1] if attr.change_templates else ""))
            if attr.changed:
                probes.append(Probe(uid, _fill(when_q[attr.kind], **fields_), "when", attr.kind,
                                    current=attr.values[-1], on_date=attr.change_dates[-1],
                                    template=attr.change_templates[-1]))
        users.append(User(uid, turns, attrs, probes))
    return users


def _distractor_value(rng: random.Random, attr: Attribute, used: set[str]) -> str:
    if attr.kind == "opinion":
        pool: Sequence[str] = OPINION_OBJECTS
    elif attr.kind == "favourite":
        pool = FAVOURITES[attr.thing]
    elif attr.kind == "partner":
        pool = FRIENDS
    else:
        pool = {"residence": CITIES, "employer": COMPANIES, "job_title": JOBS, "plan": COUNTRIES}[attr.kind]
    return rng.choice([p for p in pool if p not in used])


# ---------------------------------------------------------------- reading a packed context

_TAG = re.compile(r"^\[(?:WORKING|SCENE|GRAPH|PATTERNS|ARCHIVES|VECTORS)(?: \d{4}-\d{2}-\d{2})?(?: superseded)?\] ")
_ISO = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b")
_MONTHS = "January|February|March|April|May|June|July|August|September|October|November|December"
_WRITTEN = re.compile(rf"\b(\d{{1,2}}) ({_MONTHS}),? (\d{{4}})\b")
_PAST = re.compile(
    r"\b(used to|no longer|anymore|any more|broke up|split up|ex|former(ly)?|previous(ly)?|left|quit|"
    r"moved (away )?from|moved out|gone off|went off|cancel+ed|called off|is off|instead|didn'?t work out|"
    r"ended|postponed|forget|switched from|superseded)\b", re.IGNORECASE)
_NEG = re.compile(
    r"(can'?t stand|cannot stand|can'?t bear|(do|does|did)(n'?t| not) (really )?(like|enjoy|love)|"
    r"not (a|much of a) fan|\bhat(e|es|ed)\b|dislikes?|not for (me|the user|him|her|them)|gone off|went off|"
    r"sick of|tired of|(am|'m|is|are) over\b|no longer (likes?|loves?|enjoys?))", re.IGNORECASE)
_POS = re.compile(r"\b(lov(e|es|ed|ing)|lik(e|es|ed)|enjoy(s|ed)?|adore[sd]?|fan|the best|favou?rite|grew on|"
                  r"come around|convert|into|obsessed|hooked)\b", re.IGNORECASE)


def context_lines(prompt: str) -> list[str]:
    """The item lines of a packed context (ours: ``[LAYER ...] text``; header and wrapper lines dropped)."""
    return [line for line in prompt.splitlines() if _TAG.match(line)]


def pack_hits(texts: Sequence[str], budget: int = BUDGET) -> list[str]:
    """Peers' packing: the header, then each hit whole on its own line in rank order; a hit
    that does not fit is skipped and the next one tried."""
    used, lines = len(HEADER), []
    for text in texts:
        cost = len(text) + 1
        if used + cost <= budget:
            lines.append(text)
            used += cost
    return lines


def line_dates(line: str) -> list[dt.date]:
    """Dates a line carries: ``2023-05-08`` or ``8 May 2023`` / ``8 May, 2023``."""
    out = [dt.date(int(y), int(m), int(d)) for y, m, d in _ISO.findall(line)]
    for d, month, y in _WRITTEN.findall(line):
        out.append(dt.date(int(y), _MONTHS.split("|").index(month) + 1, int(d)))
    return out


def _words(value: str) -> re.Pattern[str]:
    return re.compile(r"\b" + r"\s+".join(map(re.escape, value.split())) + r"('?s)?\b", re.IGNORECASE)


def polarities(line: str) -> set[str]:
    """``pos`` and/or ``neg``: the sentiment cues in a line (negative cues first, then
    positive ones in what is left)."""
    text = line.replace("\u2019", "'")
    found = set()
    if _NEG.search(text):
        found.add("neg")
        text = _NEG.sub(" ", text)
    if _POS.search(text):
        found.add("pos")
    return found


def mentions(line: str, value: str) -> bool:
    """Whether ``line`` names ``value`` (an opinion ``pos:<object>``: the object and a cue of that polarity)."""
    if value.startswith(("pos:", "neg:")):
        polarity, obj = value.split(":", 1)
        return bool(_words(obj).search(line)) and polarity in polarities(line)
    return bool(_words(value).search(line))


def score_current(lines: Sequence[str], current: str, stale: Sequence[str]) -> dict[str, bool]:
    """The metrics of a current-value question on the packed ``lines`` (see the module doc)."""
    current_lines = [i for i, line in enumerate(lines) if mentions(line, current)]
    current_dates = [d for i in current_lines for d in line_dates(lines[i])]
    asserting = set(current_lines)
    stale_any = stale_current = False
    for i, line in enumerate(lines):
        if i in asserting or not any(mentions(line, s) for s in stale):
            continue
        if _PAST.search(line):
            continue  # the line itself says the value is past
        asserting.add(i)
        stale_any = True
        dates = line_dates(line)
        if not (dates and current_dates and max(current_dates) > max(dates)):
            stale_current = True
    first = min(asserting) if asserting else None
    return {"current_first": first is not None and first in current_lines, "stale_as_current": stale_current,
            "stale_unmarked": stale_any, "evidence": bool(current_lines)}


def score_when(lines: Sequence[str], value: str, on_date: dt.date) -> dict[str, bool]:
    """The metrics of a "when" question: the changed-to value packed, and packed with the change's date."""
    hits = [line for line in lines if mentions(line, value)]
    return {"evidence": bool(hits), "dated": any(on_date in line_dates(line) for line in hits)}


class SharedQueries(SharedEmbedder):
    """The benchmark's embedder: documents and questions from tables computed once (in batches)
    and shared by every system, anything else embedded live. Quality, not latency, is measured
    here: the latencies reported leave the query embedding out."""

    def __init__(self, shared: SharedEmbedder, questions: Sequence[str]) -> None:
        super().__init__(shared.inner, shared.table, label=shared.label)
        unique = list(dict.fromkeys(questions))
        self.queries = dict(zip(unique, shared.inner.embed(unique, input_type="query"))) if unique else {}

    def _embed_batch(self, texts: list[str], input_type: Any) -> list[list[float]]:
        if input_type == "query" and all(t in self.queries for t in texts):
            return [self.queries[t] for t in texts]
        return super()._embed_batch(texts, input_type)


# ---------------------------------------------------------------- tallies


@dataclass
class Tally:
    name: str
    embedder: str = ""
    status: str = "ok"
    ingest_s: float = 0.0
    latencies: list[float] = field(default_factory=list)
    rows: dict[str, dict[str, list[float]]] = field(default_factory=dict)  # category -> metric -> values
    templates: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def add(self, category: str, scores: dict[str, Any]) -> None:
        row = self.rows.setdefault(category, {})
        for key, value in scores.items():
            row.setdefault(key, []).append(float(value))

    def pct(self, category: str, metric: str) -> float | None:
        values = self.rows.get(category, {}).get(metric)
        return 100 * statistics.fmean(values) if values else None

    def n(self, category: str) -> int:
        return max((len(v) for v in self.rows.get(category, {}).values()), default=0)

    def as_json(self) -> dict[str, Any]:
        return {
            "status": self.status, "embedder": self.embedder, "ingest_s": round(self.ingest_s, 2),
            "query_p50_ms": round(1000 * statistics.median(self.latencies), 2) if self.latencies else None,
            "categories": {c: {"n": self.n(c), **{m: round(self.pct(c, m) or 0.0, 2) for m in row}}
                           for c, row in self.rows.items()},
            "templates": {t: {"n": len(next(iter(row.values()))), **{m: round(100 * statistics.fmean(v), 2)
                                                                     for m, v in row.items()}}
                          for t, row in sorted(self.templates.items())},
            "notes": self.notes,
        }


def score_probe(tally: Tally, probe: Probe, lines: Sequence[str]) -> None:
    """Score one generated question's packed ``lines`` into ``tally``."""
    if probe.category == "when":
        assert probe.on_date is not None
        tally.add("when", score_when(lines, probe.current, probe.on_date))
        return
    scores = score_current(lines, probe.current, probe.stale)
    if probe.changed:
        tally.add(probe.kind, scores)
        tally.add("ALL changed", scores)
        row = tally.templates.setdefault(probe.template, {})
        for key in ("current_first", "stale_as_current"):
            row.setdefault(key, []).append(float(scores[key]))
    else:
        tally.add("unchanged", {"current_first": scores["current_first"], "evidence": scores["evidence"]})


# ---------------------------------------------------------------- systems

Ask = Callable[[str], list[str]]  # question -> the lines of its packed context


def _conversation(user: User) -> Conversation:
    """A generated user as benchmarks/locomo.py's Conversation (speaker "User"), with peers' texts."""
    turns = [Turn(t.dia_id, "User", t.text, None, t.session, t.index, t.at.replace(tzinfo=None)) for t in user.turns]
    conv = Conversation(user.uid, turns, [])
    conv.memory_texts = memory_texts(conv)
    return conv


def _ms(at: dt.datetime) -> int:
    return int(at.replace(tzinfo=dt.UTC).timestamp() * 1000)


class DenseScan(System):
    """A plain vector store: cosine over every stored turn with numpy."""

    name = "dense"

    def ingest(self, conv: Conversation) -> Callable[[str], list[str]]:
        vectors = np.asarray(self.embedder.documents(conv.memory_texts), dtype=np.float32)
        vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        ids = [t.dia_id for t in conv.turns]

        def retrieve(q: str) -> list[str]:
            qv = np.asarray(self.embedder.query(q), dtype=np.float32)
            sims = vectors @ (qv / (np.linalg.norm(qv) or 1.0))
            return [ids[i] for i in np.argsort(-sims, kind="stable")[:K]]

        return retrieve


class Mem0LLM(System):
    """mem0 ``Memory`` with ``infer=True``: its LLM extracts and updates memories (``--mem0-llm``)."""

    name = "mem0-llm"
    needs = ("mem0",)
    llm = ""  # PROVIDER:MODEL, set from --mem0-llm

    def __init__(self, embedder: SharedEmbedder, workdir: Path, native: Any = None) -> None:
        super().__init__(embedder, workdir, native)
        from peers import Mem0

        provider, _, model = self.llm.partition(":")
        inner = Mem0(embedder, workdir)  # the same store and embedder set-up as the infer=False peer
        inner.memory.config.llm.provider = provider
        from mem0.utils.factory import LlmFactory

        inner.memory.llm = LlmFactory.create(provider, {"model": model})
        self.memory = inner.memory

    def ingest(self, conv: Conversation) -> Callable[[str], list[str]]:
        for text in conv.memory_texts:
            self.memory.add([{"role": "user", "content": text}], user_id=conv.sample_id, infer=True)

        def retrieve(q: str) -> list[str]:
            found = self.memory.search(q, filters={"user_id": conv.sample_id}, top_k=K, threshold=0.0)
            return [r["memory"] for r in found["results"]]  # texts, not ids: mem0 rewrote them

        return retrieve


PEERS = ("dense", "langchain-ensemble", "llamaindex-fusion", "mem0", "mem0-llm")
OURS = ("manowar", "manowar-nodates", "manowar-graph")
ALL_SYSTEMS = OURS + PEERS
PEER_CLASSES: dict[str, Callable[[SharedEmbedder, Path, Any], System]] = {
    "dense": DenseScan, "langchain-ensemble": PEER_SYSTEMS["langchain-ensemble"],
    "llamaindex-fusion": PEER_SYSTEMS["llamaindex-fusion"], "mem0": PEER_SYSTEMS["mem0"], "mem0-llm": Mem0LLM,
}
PEER_NEEDS = {"dense": (), "langchain-ensemble": NEEDS["langchain-ensemble"],
              "llamaindex-fusion": NEEDS["llamaindex-fusion"], "mem0": NEEDS["mem0"], "mem0-llm": ("mem0",)}


def run_peer(name: str, users: list[User], locomo: list[Conversation], embedder: SharedEmbedder,
             workdir: Path, mem0_llm: str = "") -> Tally:
    """Ingest every user (and LoCoMo conversation) into peer ``name``, ask, pack, score."""
    tally = Tally(name, embedder=embedder.label)
    missing = _missing(PEER_NEEDS[name])
    if missing:
        tally.status = f"skipped: {missing} is not installed ({BENCH})"
        return tally
    if name == "mem0-llm":
        if not mem0_llm:
            tally.status = ("skipped: no local chat model (pass --mem0-llm PROVIDER:MODEL, e.g. ollama:qwen2.5:0.5b, "
                            "where mem0 can reach one offline)")
            return tally
        Mem0LLM.llm = mem0_llm
    try:
        t0 = time.perf_counter()
        before = embedder.live_document_s
        system = PEER_CLASSES[name](embedder, workdir, None)
        convs = [_conversation(u) for u in users]
        asks = [system.ingest(c) for c in convs]
        loc_asks = [system.ingest(c) for c in locomo]
        tally.ingest_s = time.perf_counter() - t0 - (embedder.live_document_s - before)
        for user, conv, retrieve in zip(users, convs, asks):
            text_of = {t.dia_id: text for t, text in zip(conv.turns, conv.memory_texts)}
            for probe in user.probes:
                t1 = time.perf_counter()
                hits = retrieve(probe.text)
                tally.latencies.append(time.perf_counter() - t1)
                lines = pack_hits([text_of.get(h, h) for h in hits])
                score_probe(tally, probe, lines)
        for conv, retrieve in zip(locomo, loc_asks):
            text_of = {t.dia_id: text for t, text in zip(conv.turns, conv.memory_texts)}
            for q in conv.questions:
                hits = retrieve(q.text)
                lines = pack_hits([text_of.get(h, h) for h in hits])
                packed = dict(zip(hits, (text_of.get(h, h) for h in hits)))
                _score_locomo(tally, q.evidence, {h: line for h, line in packed.items() if line in lines})
        system.close()
    except Exception as exc:  # noqa: BLE001 -- a failing peer is reported, never dropped
        traceback.print_exc()
        tally.status = f"failed: {type(exc).__name__}: {exc}"[:200]
    return tally


def _score_locomo(tally: Tally, evidence: Sequence[str], packed: dict[str, str]) -> None:
    """LoCoMo temporal: the share of evidence turns packed, and packed in a line with a date."""
    ev = set(evidence)
    tally.add("locomo-temporal", {
        "evidence": len(ev & set(packed)) / len(ev),
        "dated": len({d for d in ev if d in packed and line_dates(packed[d])}) / len(ev),
    })


def run_ours(users: list[User], locomo: list[Conversation], embedder: SharedEmbedder, workdir: Path,
             names: Sequence[str]) -> list[Tally]:
    """The engine: post_turn every turn, flush, then pre_turn each question, dates on and off."""
    store = f"sqlite:///{workdir / 'manowar.sqlite'}"
    tallies = {n: Tally(n, embedder=embedder.label) for n in names}
    try:
        t0 = time.perf_counter()
        before = embedder.live_document_s
        writer = MemoryEngine(store=store, embedder=embedder, config=MemoryConfig(packer=PackerConfig(dates=True)))
        superseded = indexed = 0
        notes: list[str] = []
        for user in users:
            scope = Scope(agent_wallet="lifecycle", user_address=user.uid)
            for turn in user.turns:
                writer.post_turn(scope.with_thread(f"session-{turn.session}"),
                                 [{"role": "user", "content": turn.text, "timestamp": _ms(turn.at)}],
                                 turn_id=f"{user.uid}:{turn.dia_id}")
            flushed = writer.flush()
            superseded += flushed.facts_superseded
            indexed += flushed.facts_indexed
            notes += flushed.notes
        ids_of: dict[str, dict[str, str]] = {}
        for conv in locomo:
            bare = [re.sub(r"^\([^)]*\) ", "", text) for text in memory_texts(conv)]
            scope = Scope(agent_wallet="lifecycle-locomo", user_address=conv.sample_id)
            ids_of[conv.sample_id] = dict(zip(writer.ingest(scope, ingest_items(conv, bare)),
                                              (t.dia_id for t in conv.turns)))
        writer.close()
        ingest_s = time.perf_counter() - t0 - (embedder.live_document_s - before)
        changes = sum(len(a.values) - 1 for u in users for a in u.attributes)
        for name in names:
            tally = tallies[name]
            tally.ingest_s = ingest_s
            tally.notes.append(f"flush: {indexed} facts indexed, {superseded} superseded "
                               f"(the data holds {changes} changes); {len(notes)} notes")
            dates = name != "manowar-nodates"
            layers = ["graph"] if name == "manowar-graph" else None
            engine = MemoryEngine(store=store, embedder=embedder, config=MemoryConfig(packer=PackerConfig(dates=dates)))
            for user in users:
                scope = Scope(agent_wallet="lifecycle", user_address=user.uid, thread_id="questions")
                for probe in user.probes:
                    t1 = time.perf_counter()
                    result = engine.pre_turn(probe.text, scope, layers, budget_chars=BUDGET)
                    tally.latencies.append(time.perf_counter() - t1)
                    score_probe(tally, probe, context_lines(result.prompt))
            for conv in locomo if layers is None else []:
                scope = Scope(agent_wallet="lifecycle-locomo", user_address=conv.sample_id, thread_id="questions")
                for q in conv.questions:
                    result = engine.pre_turn(q.text, scope, budget_chars=BUDGET)
                    lines = context_lines(result.prompt)
                    packed = {}
                    for item in result.items:
                        line = next((x for x in lines if x.endswith(item.text)), "")
                        if item.id in ids_of[conv.sample_id] and line:
                            packed[ids_of[conv.sample_id][item.id]] = line
                    _score_locomo(tally, q.evidence, packed)
            engine.close()
    except Exception as exc:  # noqa: BLE001 -- reported, like a failing peer
        traceback.print_exc()
        for tally in tallies.values():
            tally.status = f"failed: {type(exc).__name__}: {exc}"[:200]
    return list(tallies.values())


def rule_coverage() -> list[dict[str, Any]]:
    """Each change paraphrase after each first-session phrasing of its kind, alone in a scope of
    its own (``post_turn`` a month apart, ``flush``, fake embedder): after how many the rules
    superseded a fact, and after how many an active fact names the new value. Ranking plays no part."""
    samples = {"residence": ("Lisbon", "Ghent"), "employer": ("Siemens", "Zalando"), "job_title": ("nurse", "architect"),
               "partner": ("Marta", "Jonas"), "favourite": ("jazz", "techno"), "opinion": ("pos:sushi", "neg:sushi"),
               "opinion+": ("neg:sushi", "pos:sushi"), "plan": ("Japan", "Peru")}
    engine = MemoryEngine(store="sqlite:///:memory:", embedder="fake")
    said = _ms(dt.datetime(2023, 1, 9, 12, tzinfo=dt.UTC))
    rows = []
    try:
        for bank_name, bank in CHANGE.items():
            kind = bank_name.rstrip("+")
            old, new = samples[bank_name]
            attr = Attribute(kind, kind, [old, new], thing="music", obj="sushi")
            firsts = [t for t in INITIAL[kind]
                      if kind != "opinion" or (t[0] in POSITIVE_INITIAL) == old.startswith("pos:")]
            for tid, template in bank:
                superseded = named = 0
                for fid, first in firsts:
                    scope = Scope(agent_wallet="coverage", user_address=f"{tid}:{fid}")
                    for thread, text, at in (("s1", _fill(first, **_fields(attr, old)), said),
                                             ("s2", _fill(template, **_fields(attr, new, old)), said + 30 * 86_400_000)):
                        engine.post_turn(scope.with_thread(thread), [{"role": "user", "content": text, "timestamp": at}])
                    superseded += engine.flush().facts_superseded > 0  # changes that superseded a fact
                    facts = [r.content for r in engine.list_items(scope, sources=["fact"])]
                    named += any(mentions(f, new) for f in facts)
                rows.append({"paraphrase": tid, "kind": kind, "example": _fill(template, **_fields(attr, new, old)),
                             "after": len(firsts), "superseded": superseded, "new_value_fact": named})
    finally:
        engine.close()
    return rows


def coverage_report(rows: Sequence[dict[str, Any]]) -> str:
    lines = [("Rule coverage per change paraphrase (each after every first-session phrasing of its kind): "
             "facts superseded, and changes after which an active fact names the new value"),
             f"{'paraphrase':<22}{'superseded':>11}{'new fact':>10}   example"]
    for row in rows:
        lines.append(f"{row['paraphrase']:<22}{row['superseded']:>7} / {row['after']}{row['new_value_fact']:>6} / "
                     f"{row['after']}   {row['example']}")
    return "\n".join(lines)


# ---------------------------------------------------------------- report

COLUMNS = (("current_first", "cur-first"), ("stale_as_current", "stale-cur"), ("stale_unmarked", "stale-unm"),
           ("evidence", "evidence"), ("dated", "dated"))


def report(tallies: Sequence[Tally], header: str) -> str:
    cats = ["ALL changed", *KINDS, "unchanged", "when", "locomo-temporal"]
    width = max([18] + [len(t.name) + 2 for t in tallies])
    head = f"{'system':<{width}}{'category':<17}{'n':>5}" + "".join(f"{label:>11}" for _, label in COLUMNS)
    lines = [header, "", "Packed context at 900 characters (%)", head, "-" * len(head)]
    for tally in tallies:
        if tally.status != "ok":
            lines += [f"{tally.name:<{width}}{tally.status}", ""]
            continue
        first = True
        for cat in cats:
            if cat not in tally.rows:
                continue
            cells = "".join(f"{tally.pct(cat, m):>11.1f}" if tally.pct(cat, m) is not None else f"{'-':>11}"
                            for m, _ in COLUMNS)
            lines.append(f"{tally.name if first else '':<{width}}{cat:<17}{tally.n(cat):>5}{cells}")
            first = False
        p50 = 1000 * statistics.median(tally.latencies) if tally.latencies else float("nan")
        lines.append(f"{'':<{width}}ingest {tally.ingest_s:.1f} s (document embedding excluded), "
                     f"query p50 {p50:.1f} ms (query embedding excluded), embedder {tally.embedder}")
        lines += [f"{'':<{width}}{note}" for note in tally.notes]
        lines.append("")
    ours = next((t for t in tallies if t.name == "manowar" and t.status == "ok"), None)
    if ours is not None:
        first, stale = ours.pct("ALL changed", "current_first"), ours.pct("ALL changed", "stale_as_current")
        if first is not None and stale is not None:
            met = first >= TARGET_FIRST and stale <= TARGET_STALE
            lines.append(f"Target (issue #30, no LLM): current first >= {TARGET_FIRST:.0f} % and stale as current "
                         f"<= {TARGET_STALE:.0f} % of changed attributes; manowar: {first:.1f} % / {stale:.1f} %: "
                         f"{'met' if met else 'NOT met'}")
        lines += ["", "manowar per paraphrase of the last change (changed attributes; %)",
                  f"{'paraphrase':<24}{'n':>5}{'cur-first':>11}{'stale-cur':>11}"]
        for tid, row in sorted(ours.templates.items(), key=lambda kv: statistics.fmean(kv[1]["current_first"])):
            lines.append(f"{tid:<24}{len(row['current_first']):>5}"
                         f"{100 * statistics.fmean(row['current_first']):>11.1f}"
                         f"{100 * statistics.fmean(row['stale_as_current']):>11.1f}")
    return "\n".join(lines)


def _summary(tally: Tally) -> str:
    if tally.status != "ok":
        return tally.status
    first, stale = tally.pct("ALL changed", "current_first"), tally.pct("ALL changed", "stale_as_current")
    return f"current first {first or 0:.1f} %, stale as current {stale or 0:.1f} % ({tally.ingest_s:.0f} s ingest)"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--users", type=int, default=100, help="generated people (default 100)")
    parser.add_argument("--seed", type=int, default=7, help="generator seed (default 7)")
    parser.add_argument("--person", choices=["third", "first"], default="third",
                        help='questions about "the user" (default, as in LoCoMo) or asked by the user ("Where do I live now?")')
    parser.add_argument("--systems", nargs="*", choices=list(ALL_SYSTEMS), help="only these systems (default: all)")
    parser.add_argument("--embedder", default="local", help="the embedder every system shares (local, onnx, fake)")
    parser.add_argument("--locomo", type=Path, help="LoCoMo JSON (locomo10.json): add its temporal questions")
    parser.add_argument("--mem0-llm", default="", metavar="PROVIDER:MODEL",
                        help="run mem0 with infer=True on this local chat model (e.g. ollama:qwen2.5:0.5b)")
    parser.add_argument("--json", type=Path, help="also write the results as JSON here")
    parser.add_argument("--coverage", action="store_true",
                        help="only report which change paraphrases the engine's rules read (no ranking, fake embedder)")
    args = parser.parse_args(argv)
    if args.coverage:
        rows = rule_coverage()
        print(coverage_report(rows), flush=True)
        if args.json:
            write_record(args.json, "lifecycle-coverage", {"coverage": rows}, None if argv is None else list(argv))
        return 0
    if args.users < 1:
        parser.error("--users must be at least 1")
    if args.locomo is not None and not args.locomo.is_file():
        parser.error(f"--locomo {args.locomo} does not exist")
    names = args.systems or list(ALL_SYSTEMS)
    users = generate(args.users, args.seed, args.person)
    locomo: list[Conversation] = []
    if args.locomo is not None:
        locomo, _, _ = load_conversations(args.locomo, None)
        for conv in locomo:
            conv.questions = [q for q in conv.questions if q.category == "temporal"]
            conv.memory_texts = memory_texts(conv)
    n_probes = sum(len(u.probes) for u in users)
    n_changed = sum(1 for u in users for p in u.probes if p.changed)
    data_line = (f"generated (seed {args.seed}, {args.person}-person questions): {len(users)} users, "
                 f"{sum(len(u.turns) for u in users)} turns, "
                 f"{n_probes} questions ({n_changed} on changed attributes, "
                 f"{sum(1 for u in users for p in u.probes if p.category == 'when')} 'when')"
                 + (f"; LoCoMo: {sum(len(c.questions) for c in locomo)} temporal questions "
                    "(LoCoMo has no knowledge-update category)" if locomo else ""))
    print(data_line, flush=True)
    texts = [text for u in users for text in _conversation(u).memory_texts]
    texts += [f"user: {t.text}" for u in users for t in u.turns]  # what post_turn embeds for a one-message turn
    texts += [text for c in locomo for text in c.memory_texts]
    documents, took = _table(args.embedder, list(dict.fromkeys(texts)), args.embedder)
    t0 = time.perf_counter()
    embedder = SharedQueries(documents, [p.text for u in users for p in u.probes]
                             + [q.text for c in locomo for q in c.questions])
    embed_line = (f"every system embeds with {embedder.label}; turns embedded once in {took:.1f} s, questions in "
                  f"{time.perf_counter() - t0:.1f} s (query latencies below leave the query embedding out)")
    print(embed_line, flush=True)
    tallies: list[Tally] = []
    with tempfile.TemporaryDirectory(prefix="manowar-lifecycle-") as tmp:
        ours = [n for n in OURS if n in names]
        if ours:
            workdir = Path(tmp) / "manowar"
            workdir.mkdir()
            for tally in run_ours(users, locomo, embedder, workdir, ours):
                tallies.append(tally)
                print(f"  {tally.name}: {_summary(tally)}", flush=True)
        for name in [n for n in PEERS if n in names]:
            workdir = Path(tmp) / name
            workdir.mkdir()
            tallies.append(run_peer(name, users, locomo, embedder, workdir, args.mem0_llm))
            print(f"  {name}: {_summary(tallies[-1])}", flush=True)
    text = report(tallies, f"{data_line}\n{embed_line}")
    print("\n" + text, flush=True)
    if args.json:
        payload = {"data": data_line, "embedder": embed_line, "users": args.users, "seed": args.seed,
                   "budget_chars": BUDGET, "systems": {t.name: t.as_json() for t in tallies}}
        write_record(args.json, "lifecycle", payload, None if argv is None else list(argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
