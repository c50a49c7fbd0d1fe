"""The SQLite memory index's scoped terms (manowar_memory.stores._fts): pure, no store but the last test."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from manowar_memory import Scope
from manowar_memory.records import MemoryRecord
from manowar_memory.stores import _fts
from manowar_memory.stores.base import MemoryQuery
from manowar_memory.stores.sqlite import SQLiteStore


def test_words_fold_case_and_diacritics_and_stem() -> None:
    assert _fts.words("Painted PAINTING paints") == ["paint", "paint", "paint"]
    assert _fts.words("Café déjà-vu, naïve") == _fts.words("cafe deja vu naive")
    assert _fts.words("\ufb01nal \uff12\uff10\uff12\uff12") == ["final", "2022"]  # compatibility forms (ligature, full width)
    assert _fts.words("don't") == ["don", "t"]
    assert _fts.words("") == [] and _fts.words("!!! …") == []


def test_scoped_terms_prefix_every_word_with_the_scope_number() -> None:
    assert _fts.scoped_terms(7, "We went running, then painted.") == "7xwe 7xwent 7xrun 7xthen 7xpaint"
    assert _fts.scoped_terms(7, None) == "" and _fts.scoped_terms(None, "text") == "" and _fts.scoped_terms(3, "?") == ""


def test_query_phrases_drop_stop_words_and_keep_apostrophe_words_together() -> None:
    assert _fts.query_phrases("When did Melanie paint? She painted, and don't ask!") == [
        ("melani",), ("paint",), ("don", "t"), ("ask",)]
    assert _fts.query_phrases("what did you do") == [] and _fts.query_phrases(None) == []
    assert _fts.query_phrases("I moved to LA") == [("move",), ("la",)]  # two-letter terms are kept


def test_scoped_match_quotes_phrases_of_scoped_terms() -> None:
    phrases = _fts.query_phrases('say "hello" there, don\'t')
    assert _fts.scoped_match(12, phrases) == '"12xsai" OR "12xhello" OR "12xdon 12xt"'


@given(st.text(max_size=200))
def test_scoped_terms_and_queries_hold_no_fts5_syntax(text: str) -> None:
    """Whatever the text, rows and queries hold only scope-prefixed words: no quote, operator
    or column filter can reach FTS5, and the ASCII fast path finds the words the general one does."""
    terms = _fts.scoped_terms(5, text)
    assert all(t.startswith("5x") and len(t) > 2 and '"' not in t for t in terms.split())
    match = _fts.scoped_match(5, _fts.query_phrases(text))
    for phrase in re.findall(r'"([^"]*)"', match):
        assert all(t.startswith("5x") for t in phrase.split())
    assert re.sub(r'"[^"]*"', "", match).replace(" OR ", "") == ""
    if text.isascii():
        assert _fts._ASCII_WORD.findall(text.lower()) == _fts._WORD.findall(text.lower())


def test_a_store_finds_other_word_forms_and_accents_across_the_scoped_index() -> None:
    scope = Scope(agent_wallet="agent", user_address="u")
    store = SQLiteStore(":memory:")
    try:
        rows = [MemoryRecord(id=f"m{i}", **MemoryRecord.scope_fields(scope), content=text, source="knowledge",
                             created_at=1, updated_at=1, last_accessed_at=1)
                for i, text in enumerate(["We met at the Café Rouge", "Running by the river", "東京 trip"])]
        store.add_memories(rows)
        query = MemoryQuery(scope=scope)
        assert [h.record.id for h in store.keyword_search(query, "cafe rouge", 5)] == ["m0"]
        assert [h.record.id for h in store.keyword_search(query, "Does she run?", 5)] == ["m1"]
        assert [h.record.id for h in store.keyword_search(query, "東京", 5)] == ["m2"]
        assert store.keyword_search(query, 'NEAR(a b) OR * "x', 5) == []
    finally:
        store.close()


def test_role_words_are_not_content_terms_of_a_query() -> None:
    """Every turn reads "user: ..." and every fact "The user ...": the word would match every row."""
    from manowar_memory._util import query_terms

    assert _fts.query_phrases("Where does the user work now?") == [("work",)]
    assert _fts.query_phrases("What is the user's employer?") == [("employ",)]
    assert query_terms("Where does the user work now? Ask the assistant's helper.") == ["work", "ask", "helper"]



def test_prune_phrases_keeps_every_phrase_within_the_budget() -> None:
    phrases = [("kayak",), ("lake",), ("don", "t")]
    counts = {"7xkayak": 10, "7xlake": 900, "7xdon": 50, "7xt": 40}
    assert _fts.prune_phrases(7, phrases, counts, 1000) == (phrases, [])  # 10 + 900 + 40 <= 1000
    assert _fts.prune_phrases(7, phrases, counts, 0) == (phrases, [])  # 0: never prune
    assert _fts.prune_phrases(7, [], counts, 5) == ([], [])


def test_prune_phrases_drops_the_commonest_terms_first_and_keeps_the_order() -> None:
    phrases = [("lake",), ("kayak",), ("walk",), ("don", "t")]
    # a phrase counts as its rarest word ("don t": 40); other scopes' counts do not count
    counts = {"7xlake": 900, "7xkayak": 10, "7xwalk": 300, "7xdon": 50, "7xt": 40, "8xkayak": 10**6}
    assert _fts.prune_phrases(7, phrases, counts, 400) == ([("kayak",), ("walk",), ("don", "t")], [("lake",)])
    assert _fts.prune_phrases(7, phrases, counts, 100) == ([("kayak",), ("don", "t")], [("lake",), ("walk",)])
    # the rarest phrase stays, even over the budget alone; a word the index lacks counts 0
    assert _fts.prune_phrases(7, [("lake",), ("walk",)], counts, 50) == ([("walk",)], [("lake",)])
    assert _fts.prune_phrases(7, [("lake",), ("zzz",)], counts, 50) == ([("zzz",)], [("lake",)])


def test_phrase_words_are_the_distinct_scoped_terms() -> None:
    assert _fts.phrase_words(4, [("don", "t"), ("t",), ("lake",)]) == ["4xdon", "4xt", "4xlake"]


_STEMS: dict[str, str] = {}  # shared across examples, as an index keeps it across rows


@given(st.text(max_size=200))
def test_stemming_through_a_cache_gives_the_words_the_index_triggers_store(text: str) -> None:
    """The in-process keyword index stems folded words through a cache; it must give exactly
    the words the full-text triggers store (:func:`_fts.words`)."""
    assert _fts.stemmed(_fts.folded(text), _STEMS) == _fts.words(text)
