"""Attribute slots: which stored fact a new one replaces (manowar_memory.lifecycle)."""

from __future__ import annotations

import pytest

from manowar_memory.extraction import RuleBasedExtractor
from manowar_memory.lifecycle import _MAX_CLAUSE, _SLOT_RULES, FactRef, _clauses, parse_slots, resolve
from manowar_memory.records import Message

# (stored fact, new fact, expected): "supersede" = the new fact replaces the stored one,
# "keep" = both stay current, "uncertain" = both kept and the match reported
ROWS: list[tuple[str, str, str]] = [
    # residence
    ("The user lives in Lisbon.", "The user moved to Berlin last month.", "supersede"),
    ("The user lives in Lisbon.", "The user now lives in Berlin.", "supersede"),
    ("I live in Porto.", "The user relocated to Madrid.", "supersede"),
    ("The user lives in Lisbon.", "The user's new home is in Oslo.", "supersede"),
    ("The user is based in Paris.", "The user is moving to Rome next month.", "supersede"),
    ("The user lives in Lisbon.", "The user lives in Lisbon with the user's wife.", "keep"),
    ("The user lives in Lisbon.", "The user's sister Marta lives in Porto.", "keep"),
    ("Ada lives in Lisbon.", "The user lives in Berlin.", "keep"),
    ("The user lives in Lisbon.", "The user might move to Porto.", "uncertain"),
    ("The user lives in Lisbon.", "She lives in Rome.", "uncertain"),
    # employer
    ("The user works at Acme.", "The user now works at Zalando.", "supersede"),
    ("The user works for Acme.", "The user got a new job at Zalando.", "supersede"),
    ("The user works at Acme.", "The user joined Spotify in March.", "supersede"),
    ("The user works at Acme.", "The user quit the job at Acme.", "supersede"),
    ("The user works at Acme.", "The user also works at Lidl on weekends.", "keep"),
    ("The user works at Acme.", "The user's brother works at Zalando.", "keep"),
    ("The user works at Acme.", "The user works at Acme as an engineer.", "keep"),
    # job title
    ("The user works as a nurse.", "The user is now a software engineer.", "supersede"),
    ("The user is a teacher.", "The user works as a librarian.", "supersede"),
    ("The user works as a nurse.", "The user's job title is head nurse.", "supersede"),
    ("The user works as a nurse.", "The user works at the city hospital.", "keep"),
    ("The user is a teacher.", "The user is a big fan of jazz.", "keep"),
    # school
    ("The user studies at Oxford University.", "The user studies at Cambridge University.", "supersede"),
    ("The user studies biology at Oxford.", "The user is a student at Imperial College.", "supersede"),
    ("The user studies at Oxford University.", "The user's son studies at Eton College.", "keep"),
    # partner
    ("The user's girlfriend is called Ana.", "The user broke up with Ana.", "supersede"),
    ("The user's girlfriend is called Ana.", "The user is dating Sofia.", "supersede"),
    ("The user is married to Tom.", "The user's husband is Tom.", "keep"),
    ("The user's partner is Kim.", "The user's sister is called Kim.", "keep"),
    # pets
    ("The user's cat is Miso.", "The user's cat is called Tofu.", "supersede"),
    ("The user has a dog named Rex.", "The user's dog is named Max.", "supersede"),
    ("The user's cat is Miso.", "The user's dog is called Rex.", "keep"),
    ("The user has a dog named Rex.", "The user adopted another dog named Max.", "keep"),
    # favourites
    ("The user's favourite colour is blue.", "The user's favourite colour is now green.", "supersede"),
    ("The user's favourite band is Queen.", "The user's favourite food is sushi.", "keep"),
    ("My favourite city is Lisbon.", "The user's favorite city is Kyoto.", "supersede"),
    # preferences that flip
    ("The user likes green tea.", "The user doesn't like green tea anymore.", "supersede"),
    ("The user hates jazz.", "The user loves jazz now.", "supersede"),
    ("The user enjoys running.", "The user is tired of running.", "supersede"),
    ("The user likes green tea.", "The user loves green tea.", "keep"),
    ("The user likes green tea.", "The user dislikes coffee.", "keep"),
    ("The user likes jazz.", "The user's wife hates jazz.", "keep"),
    # plans
    ("The user plans to visit Japan in May.", "The user plans to visit Japan in July.", "supersede"),
    ("The user plans to visit Japan in May.", "The user cancelled the trip to Japan.", "supersede"),
    ("The user is planning a trip to Japan.", "The user no longer plans to visit Japan.", "supersede"),
    ("The user plans to visit Japan in May.", "The user plans to move to Canada.", "keep"),
    ("The user plans to visit Japan in May.", "The user might visit Japan in June.", "keep"),
    # unrelated
    ("The user lives in Lisbon.", "The user likes green tea.", "keep"),
    ("The user speaks French.", "The user speaks German.", "keep"),
    # leaves: "moved out of", "quit X", "broke up with X" replace only the value they name
    ("The user lives in Lisbon.", "The user moved out of Lisbon.", "supersede"),
    ("The user lives in Lisbon.", "The user moved out of Faro.", "keep"),
    ("The user works at Acme.", "The user quit Acme.", "supersede"),
    ("The user works at Acme.", "The user quit Globex.", "keep"),
    ("The user's girlfriend is called Ana.", "The user broke up with Maria.", "keep"),
    ("The user's favourite tea is sencha.", "The user has gone off sencha.", "supersede"),
    ("The user's favourite tea is sencha.", "The user has gone off coffee.", "keep"),
    # a stored fact with more than the contradicted slot
    ("The user lives in Lisbon and works at Acme.", "The user moved to Berlin.", "uncertain"),
    ("The user lives in Lisbon and works at Acme.", "The user lives in Berlin and works at Zalando.", "supersede"),
]


@pytest.mark.parametrize(("stored", "new", "expected"), ROWS)
def test_a_new_fact_replaces_only_what_it_contradicts(stored: str, new: str, expected: str) -> None:
    res = resolve(FactRef("new", new, 2_000), [FactRef("old", stored, 1_000)])
    got = "supersede" if res.supersede else "uncertain" if res.uncertain else "keep"
    assert got == expected, (parse_slots(stored), parse_slots(new), res)
    if expected == "supersede":
        assert [row for row, _ in res.supersede] == ["old"] and res.superseded_by is None


def test_the_table_has_enough_paraphrases() -> None:
    assert len(ROWS) >= 40
    assert {e for _, _, e in ROWS} == {"supersede", "keep", "uncertain"}


def test_emptying_a_slot_does_not_undo_what_the_same_turn_said() -> None:
    res = resolve(FactRef("n", "The user is single now.", 1_000), [FactRef("o", "The user is seeing Sofia now.", 1_000)])
    assert res.supersede == [] and res.superseded_by is None
    later = resolve(FactRef("n", "The user is single now.", 2_000), [FactRef("o", "The user is seeing Sofia now.", 1_000)])
    assert later.supersede == [("o", "partner")]


def test_a_fact_observed_before_the_stored_one_is_itself_superseded() -> None:
    res = resolve(FactRef("late", "The user lives in Lisbon.", 1_000),
                  [FactRef("current", "The user moved to Berlin.", 5_000)])
    assert res.supersede == [] and res.superseded_by == ("current", "residence")


def test_slots_read_first_and_third_person_alike() -> None:
    assert parse_slots("I live in Porto and work at Acme") == parse_slots("The user lives in Porto and works at Acme.")
    assert [(s.slot, s.value) for s in parse_slots("The user lives in Porto and works at Acme.")] == [
        ("residence", "porto"), ("employer", "acme")]


# ---------------------------------------------------------------- everyday phrasings of a change
def _paraphrase_table() -> list[tuple[str, list[tuple[str, set[tuple[str, str, str]]]]]]:
    from pathlib import Path

    rows: list[tuple[str, list[tuple[str, set[tuple[str, str, str]]]]]] = []
    for line in (Path(__file__).parent / "data" / "slot_paraphrases.txt").read_text(encoding="utf-8").splitlines():
        if line.startswith("> "):
            rows.append((line[2:], []))
        elif line.startswith("= ") and line != "= -":
            rows[-1][1].append((line[2:], set()))
        elif line.startswith("@ "):
            subject, slot, value = (part.strip() for part in line[2:].split(" | "))
            rows[-1][1][-1][1].add((subject, slot, value))
    return rows


PARAPHRASES = _paraphrase_table()


def _said(turn: str) -> list[str]:
    return [f.fact for f in RuleBasedExtractor().extract([Message(role="user", content=turn)])]


def _slots(fact: str) -> set[tuple[str, str, str]]:
    return {(s.subject, s.slot, f"!{s.leaves}" if s.leaves else s.value) for s in parse_slots(fact)}


@pytest.mark.parametrize(("turn", "expected"), PARAPHRASES, ids=[t for t, _ in PARAPHRASES])
def test_a_change_said_in_everyday_words_gives_a_fact_that_fills_its_slot(
        turn: str, expected: list[tuple[str, set[tuple[str, str, str]]]]) -> None:
    facts = _said(turn)
    assert facts == [fact for fact, _ in expected]
    assert [_slots(fact) for fact in facts] == [slots for _, slots in expected]


def test_the_paraphrase_table_covers_every_family() -> None:
    slots = {slot.split(":")[0] for _, facts in PARAPHRASES for _, found in facts for _, slot, _ in found}
    assert {"residence", "employer", "job_title", "partner", "favourite", "opinion", "plan"} <= slots
    assert len(PARAPHRASES) >= 100
    assert sum(1 for _, facts in PARAPHRASES if not facts) >= 5  # turns that must give no fact at all


# (first statement, a later turn, expected): the turns go through the extractor, then each new
# fact is resolved against the earlier ones ("supersede": at least one earlier fact is replaced)
CHANGES: list[tuple[str, str, str]] = [
    # residence
    ("I live in Lisbon.", "We relocated to Porto over the winter.", "supersede"),
    ("I've been living in Lisbon for three years.", "Porto is home now.", "supersede"),
    ("I'm based in Leeds.", "Now that I'm in York, I take the train less.", "supersede"),
    ("I live in Graz.", "I moved out of Graz in April.", "supersede"),
    ("I live in Graz.", "I'm a Linz resident now.", "supersede"),
    ("I live in Graz.", "We settled into a new house in Salzburg.", "supersede"),
    ("I live in Lisbon.", "My friend moved to Paris.", "keep"),
    ("I live in Lisbon.", "My friend Tariq relocated to Dubai.", "keep"),
    ("I live in Lisbon.", "I visited Paris last week.", "keep"),
    ("I live in Lisbon.", "I might move to Porto.", "keep"),
    ("I live in Lisbon.", "Should I move to Berlin?", "keep"),
    ("I live in Lisbon.", "Now that I'm in Rome for the weekend, I'll see the Colosseum.", "keep"),
    ("I live in Lisbon.", "Since I'm in Paris this week, let's meet.", "keep"),
    ("I live in Lisbon.", "I moved out of Faro years ago.", "keep"),
    # employer
    ("I've been with Acme for five years.", "I quit Acme and joined Globex.", "supersede"),
    ("I work at Acme.", "Globex hired me last month.", "supersede"),
    ("I'm on the team at Acme.", "It's my first week at Initech.", "supersede"),
    ("I work for Acme.", "I handed in my notice at Acme.", "supersede"),
    ("I work for Acme.", "I switched jobs, I'm at Hooli now.", "supersede"),
    ("I work for Acme.", "I'm working for Umbrella these days.", "supersede"),
    ("I work for Acme.", "I started a new job at Cyberdyne.", "supersede"),
    ("I work at Acme.", "My sister works at Globex.", "keep"),
    ("I work at Acme.", "My brother quit Acme.", "keep"),
    ("I work at Acme.", "Should I quit Acme?", "keep"),
    ("I work at Acme.", "I quit Globex years ago.", "keep"),
    # job title
    ("I work as a teacher.", "I retrained and I'm working as a nurse now.", "supersede"),
    ("I'm a lawyer.", "I'm not a lawyer anymore, I became a chef.", "supersede"),
    ("I work as a cashier.", "I earn my living as a photographer.", "supersede"),
    ("I work as a cashier.", "I got a job as a barista.", "supersede"),
    # partner
    ("My girlfriend is called Ana.", "Ana and I broke up; I'm seeing Sofia now.", "supersede"),
    ("I'm dating Tom.", "I broke up with Tom and I'm with Lucas now.", "supersede"),
    ("My boyfriend is Tom.", "I met someone: Priya.", "supersede"),
    ("My partner is Kim.", "Sofia moved in with me.", "supersede"),
    ("I'm dating Tom.", "I started seeing Marco.", "supersede"),
    ("My girlfriend is called Ana.", "My new girlfriend Mia loves hiking.", "supersede"),
    ("My partner Sam and I live in Porto.", "My partner Sam and I go hiking a lot.", "keep"),
    ("My girlfriend is called Ana.", "My sister is dating Marco.", "keep"),
    # favourites
    ("My favourite tea is sencha.", "I've gone off sencha; matcha is my favourite now.", "supersede"),
    ("My favourite band is Queen.", "My new favourite band is Muse.", "supersede"),
    ("My favourite drink is coffee.", "I switched from coffee to tea.", "supersede"),
    ("I love coffee.", "I switched from coffee to tea.", "supersede"),
    ("I hate padel.", "I'm hooked on padel.", "supersede"),
    ("I don't like oat milk.", "I'm all about oat milk these days.", "supersede"),
    ("My favourite tea is sencha.", "My favourite band is Muse.", "keep"),
    ("My favourite tea is sencha.", "I'm sick of podcasts.", "keep"),
    # opinions that flip, both ways
    ("I love jazz.", "I used to love jazz but I can't stand it anymore.", "supersede"),
    ("I love reality TV.", "I'm over reality TV.", "supersede"),
    ("I enjoy running.", "I've gone off running.", "supersede"),
    ("I like podcasts.", "I'm sick of podcasts.", "supersede"),
    ("I hate opera.", "I've come around on opera.", "supersede"),
    ("I don't like olives.", "Olives grew on me.", "supersede"),
    ("I love jazz.", "I'm over the moon about my new job.", "keep"),
    # plans ("we" plans are the user's)
    ("I plan to visit Japan in May.", "The Japan trip is off, we're going to Rome instead.", "supersede"),
    ("We're planning a trip to Chile.", "We changed plans: Peru instead of Chile.", "supersede"),
    ("I'm planning a trip to Japan.", "Forget Japan, we booked Korea.", "supersede"),
    ("I plan to visit Greece in June.", "We postponed Greece, Croatia it is.", "supersede"),
    ("I'm planning a trip to Bali.", "We cancelled Bali and we're heading to Vietnam.", "supersede"),
    ("I plan to visit Japan in May.", "We cancelled Bali.", "keep"),
    ("I'm planning a trip to Turkey.", "We decided on Greece instead of Turkey.", "supersede"),
    ("I plan to visit Iceland in July.", "The Iceland trip is postponed; Norway it is.", "supersede"),
    # a second round, written after the rules
    ("I live in Leeds.", "Bristol's home now.", "supersede"),
    ("I work at Acme.", "I left Acme to join Globex.", "supersede"),
    ("I work at Acme.", "I'm a developer at Spotify now.", "supersede"),
    ("I work as a cashier.", "I'm a full-time illustrator now.", "supersede"),
    ("My girlfriend is Sara.", "Sara and I are done; I'm dating Theo now.", "supersede"),
    ("My boyfriend is called Jonas.", "I've got a new girlfriend, Lucia.", "supersede"),
    ("I love running.", "I'm done with running.", "supersede"),
    ("I hate pickleball.", "I'm really into pickleball now.", "supersede"),
    ("I work at Acme.", "I'm at the gym now.", "keep"),
    ("My girlfriend is Sara.", "I'm with my mum now.", "keep"),
    ("I've been with Tom for six years and we're getting married.", "Tom and I split up, and I'm seeing Paul now.",
     "supersede"),
    ("I've been with Ericsson for six years.", "I'm with Nokia now.", "supersede"),
    ("I've been with Ericsson for six years.", "My girlfriend is called Ana.", "keep"),
]


def _change(first: str, then: str) -> tuple[str, list[str]]:
    old = [FactRef(f"old{i}", fact, 1_000) for i, fact in enumerate(_said(first))]
    new = _said(then)
    superseded: list[str] = []
    for i, fact in enumerate(new):
        res = resolve(FactRef(f"new{i}", fact, 2_000), [o for o in old if o.id not in superseded])
        assert res.superseded_by is None
        superseded += [row for row, _ in res.supersede]
    return ("supersede" if superseded else "keep"), [o.text for o in old] + new


@pytest.mark.parametrize(("first", "then", "expected"), CHANGES, ids=[f"{a} -> {b}" for a, b, _ in CHANGES])
def test_a_first_statement_then_a_change_in_everyday_words(first: str, then: str, expected: str) -> None:
    got, facts = _change(first, then)
    assert _said(first), f"the first statement gave no fact: {first!r}"
    assert got == expected, [(f, parse_slots(f)) for f in facts]


def test_every_family_has_three_changes_and_negatives() -> None:
    assert sum(1 for *_, e in CHANGES if e == "supersede") >= 3 * 7
    assert sum(1 for *_, e in CHANGES if e == "keep") >= 10


@pytest.mark.parametrize(("first", "then", "current", "gone"), [
    ("I've been living in Lisbon for three years.", "Porto is home now.", "Porto", "Lisbon"),
    ("I've been with Acme for five years.", "I quit Acme and joined Globex.", "Globex", "working at Acme"),
    ("My girlfriend is called Ana.", "Ana and I broke up; I'm seeing Sofia now.", "Sofia", "called Ana"),
    ("My favourite tea is sencha.", "I've gone off sencha; matcha is my favourite now.", "matcha", "tea is sencha"),
    ("I plan to visit Japan in May.", "The Japan trip is off, we're going to Rome instead.", "Rome", "visit Japan"),
])
def test_a_change_in_everyday_words_replaces_the_old_fact_through_the_engine(
        first: str, then: str, current: str, gone: str) -> None:
    from manowar_memory import MemoryEngine, Scope
    from manowar_memory.stores.base import MemoryQuery

    engine = MemoryEngine(store="sqlite:///:memory:", embedder="fake")
    scope = Scope(agent_wallet="agent", user_address="ana", thread_id="t1")
    try:
        engine.post_turn(scope, [{"role": "user", "content": first, "timestamp": 1_772_452_800_000}])
        engine.flush()
        engine.post_turn(scope.with_thread("t2"), [{"role": "user", "content": then, "timestamp": 1_780_488_000_000}])
        assert engine.flush().facts_superseded >= 1
        rows = engine.store.list_memories(MemoryQuery(scope=scope, sources=("fact",), active_only=False))
        active = [r.content for r in rows if r.metadata.get("status") != "superseded"]
        superseded = [r.content for r in rows if r.metadata.get("status") == "superseded"]
        assert any(current in text for text in active), active
        assert any(gone in text for text in superseded) and not any(gone in text for text in active), (active, superseded)
    finally:
        engine.close()


# ---------------------------------------------------------------- long text
# Texts a rule used to read in quadratic time: a lazy value tried from every letter ("X grew on
# the user"), a subject run to every later comma, a name tried at every capital of a long word.
_LONG = 50_000
ADVERSARIAL = {
    "words": "word " * (_LONG // 5),
    "the user": "the user " * (_LONG // 9),
    "names": "Anna Bob " * (_LONG // 9),
    "commas": "the user likes tea, " * (_LONG // 20),
    "capitals": "A" * _LONG,
    "hyphenated capitals": "Ab-" * (_LONG // 3) + " lives in Rome",
    "a possessive": "A" * _LONG + "'s new home is in Oslo",
    "studies": "the user studies " * (_LONG // 17),
    "attends": "the user attends " * (_LONG // 17),
    "job as": "the user got a job as " * (_LONG // 22) + "5",
    "switched from": "the user switched from " * (_LONG // 23),
    "grew on": "jazz grew on " * (_LONG // 13),
    "one line": "x" * _LONG,
}


@pytest.mark.parametrize("name", sorted(ADVERSARIAL))
def test_every_slot_rule_reads_a_long_text_without_backtracking_blowup(name: str) -> None:
    # a bound on pathological behaviour, not a speed target: a linear rule reads 50,000
    # characters in milliseconds, a quadratic one took seconds to minutes (regex raises
    # TimeoutError when a call runs past its timeout)
    text = ADVERSARIAL[name]
    for slot, _kind, pattern in _SLOT_RULES:
        try:
            list(pattern.finditer(text, timeout=2.0))
        except TimeoutError:  # pragma: no cover - the failure this test guards against
            pytest.fail(f"the {slot} rule {pattern.pattern[:80]!r} backtracks on {name!r}")


@pytest.mark.parametrize("name", sorted(ADVERSARIAL))
def test_the_slot_rules_see_only_clauses_of_bounded_length(name: str) -> None:
    text = ADVERSARIAL[name]
    assert all(len(c) <= _MAX_CLAUSE for c in _clauses(text))
    assert all(len(c) <= _MAX_CLAUSE for c in _clauses(" and ".join([text[:_MAX_CLAUSE]] * 3)))


def test_a_long_text_still_gives_the_slots_of_its_short_sentences() -> None:
    filler = " ".join(["The weather was mild and nothing much happened that day."] * 20)
    text = f"{filler} The user moved to Berlin. {filler} The user works at Acme; {'blah ' * 200}"
    assert {(s.slot, s.value) for s in parse_slots(text)} == {("residence", "berlin"), ("employer", "acme")}
    # a sentence longer than a clause can be is no one fact: nothing is read from it
    assert parse_slots("The user moved to Berlin " + "with friends " * 100) == []
    assert parse_slots("The user moved to Berlin " + "with friends " * 20) == parse_slots("The user moved to Berlin")
