"""Attribute slots: which stored fact a new one replaces (manowar_memory.lifecycle)."""

from __future__ import annotations

import pytest

from manowar_memory.lifecycle import FactRef, parse_slots, resolve

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


def test_a_fact_observed_before_the_stored_one_is_itself_superseded() -> None:
    res = resolve(FactRef("late", "The user lives in Lisbon.", 1_000),
                  [FactRef("current", "The user moved to Berlin.", 5_000)])
    assert res.supersede == [] and res.superseded_by == ("current", "residence")


def test_slots_read_first_and_third_person_alike() -> None:
    assert parse_slots("I live in Porto and work at Acme") == parse_slots("The user lives in Porto and works at Acme.")
    assert [(s.slot, s.value) for s in parse_slots("The user lives in Porto and works at Acme.")] == [
        ("residence", "porto"), ("employer", "acme")]
