"""Word forms the stemmer does not join, in the keyword lane (manowar_memory.retrieval.wordforms)."""

from __future__ import annotations

import pytest

from manowar_memory import MemoryConfig, MemoryEngine, Scope
from manowar_memory.config import RetrievalConfig
from manowar_memory.retrieval.wordforms import VERB_FORMS, with_word_forms, word_forms


@pytest.mark.parametrize(
    ("query", "forms"),
    [
        ("When did Nate win his third tournament?", ["won"]),
        ("When did Maria meet Jean?", ["met"]),
        ("What did Joanna write and sell?", ["wrote", "written", "sold"]),
        ("When did she buy the car she drives?", ["bought"]),  # "drives" is no base form
        ("Who won the final?", []),  # past forms are not turned back into the base form
        ("Where did they go and what did they make?", []),  # light verbs are left out
        ("When did Caroline paint a sunrise?", []),  # regular verbs: the stemmer joins them
        ("Did he win? He won, I think: win!", []),  # a form already asked adds nothing
        ("When did Jon receive mentorship?", ["mentor"]),
        ("What did she say about her childhood friendship?", ["child", "friend"]),
        ("Who was on the ship? The hardship?", ["hard"]),
        ("Is the championship in the neighbourhood?", ["champion", "neighbour"]),
        ("Which ships and hoods?", []),  # no root of four letters
    ],
)
def test_the_forms_a_query_adds(query: str, forms: list[str]) -> None:
    assert word_forms(query) == forms


def test_with_word_forms_appends_them_and_leaves_other_queries_alone() -> None:
    assert with_word_forms("When did Nate win?") == "When did Nate win? won"
    assert with_word_forms("When did Nate paint?") == "When did Nate paint?"
    assert all(base not in forms for base, forms in VERB_FORMS.items())


def _ids_for(query: str, *, forms_on: bool) -> tuple[list[str], str]:
    engine = MemoryEngine(store="sqlite:///:memory:", embedder="fake",
                          config=MemoryConfig(retrieval=RetrievalConfig(word_forms=forms_on)))
    scope = Scope(agent_wallet="agent", user_address="nate")
    ids = engine.ingest(scope, [
        "Nate: I was in the final of a big Valorant tournament last Saturday, and I won!",
        "Nate: Last week's tournament made me nervous, a tournament is a lot of pressure.",
        "Nate: Yesterday my tournament team practised for the next tournament.",
        "Nate: Last month the tournament stream had a big audience, a tournament record.",
    ])
    result = engine.search_layers(query, scope, ["vectors"], limit=4)
    engine.close()
    return [row[0] for row in result.lanes["vectors"]["hits"]["keyword"]], ids[0]


def test_the_keyword_lane_ranks_first_the_turn_told_in_the_past() -> None:
    ranked, won = _ids_for("When did Nate win a tournament?", forms_on=True)
    assert ranked[0] == won
    ranked, won = _ids_for("When did Nate win a tournament?", forms_on=False)
    assert ranked[0] != won  # "tournament" alone prefers the rows that repeat it
