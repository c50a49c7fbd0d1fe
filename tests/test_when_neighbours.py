"""'When' neighbours (manowar_memory.retrieval.hybrid.when_neighbours): a "when" question's best
candidate that states no time lends its score to the turns just before it in its thread that do."""

from __future__ import annotations

from manowar_memory import MemoryConfig, MemoryEngine, Scope, SQLiteStore
from manowar_memory.config import RetrievalConfig

SCOPE = Scope(agent_wallet="agent", user_address="joanna")
T0 = 1_667_577_360_000  # 2022-11-04 15:56 UTC
QUERY = "When did they plan to swap recipes?"
DIALOG = [
    "Want to come over and try some of this? It's super yummy!",
    "Thanks so much! Sure! I'll come over tomorrow if that's fine.",
    "I don't see why not, you are welcome!",
    "Awesome! I'll bring some of my recipes so we can both share desserts!",
]


def engine_with(store: object = "sqlite:///:memory:", **retrieval: object) -> tuple[MemoryEngine, list[str]]:
    engine = MemoryEngine(store=store, embedder=None,  # type: ignore[arg-type]
                          config=MemoryConfig(retrieval=RetrievalConfig(**retrieval)))  # type: ignore[arg-type]
    ids = engine.ingest(SCOPE, [{"content": text, "thread_id": "s26", "created_at": T0 + 60_000 * i}
                                for i, text in enumerate(DIALOG)])
    # another thread, written in between: never a neighbour of the first one's turns
    engine.ingest(SCOPE, [{"content": "Tim: I went hiking yesterday.", "thread_id": "other",
                           "created_at": T0 + 150_000}])
    return engine, ids


def test_the_turn_before_a_timeless_match_lends_it_the_time() -> None:
    engine, ids = engine_with()
    found = {c.id: c for c in engine.search_layers(QUERY, SCOPE, ["vectors"], limit=10).layers["vectors"]}
    tomorrow = found[ids[1]]  # shares no word with the question: found through the recipes turn after it
    assert tomorrow.trace["when_neighbour"] == 0.9 and tomorrow.trace.get("time_when") == 1.5
    assert "when_neighbour" not in found[ids[3]].trace
    assert ids[2] not in found  # the turn between states no time
    assert all("hiking" not in c.text for c in found.values())


def test_only_when_questions_and_only_when_on() -> None:
    engine, ids = engine_with()
    plain = engine.search_layers("Did they swap recipes?", SCOPE, ["vectors"], limit=10)
    assert ids[1] not in {c.id for c in plain.layers["vectors"]}
    engine, ids = engine_with(when_neighbour_seeds=0)
    off = engine.search_layers(QUERY, SCOPE, ["vectors"], limit=10)
    assert ids[1] not in {c.id for c in off.layers["vectors"]}


def test_a_match_that_states_its_time_lends_nothing() -> None:
    engine, _ = engine_with()
    engine.ingest(SCOPE, [
        {"content": "I baked a cake last week.", "thread_id": "s27", "created_at": T0 + 86_400_000},
        {"content": "Yesterday I posted my dessert recipes online!", "thread_id": "s27",
         "created_at": T0 + 86_460_000},
    ])
    found = engine.search_layers("When were the dessert recipes posted?", SCOPE, ["vectors"], limit=10)
    assert all("when_neighbour" not in c.trace for c in found.layers["vectors"] if "cake" in c.text)
    assert any(c.text.startswith("Yesterday") for c in found.layers["vectors"])


def test_the_turns_before_are_the_nearest_ones_among_many() -> None:
    engine = MemoryEngine(store=SQLiteStore(":memory:"), embedder=None,
                          config=MemoryConfig(retrieval=RetrievalConfig(when_neighbour_turns=1)))
    filler = [{"content": f"line number {i} about nothing, said today", "thread_id": "s1", "created_at": T0 + 1000 * i}
              for i in range(100)]
    ids = engine.ingest(SCOPE, [*filler,
                                {"content": "I'll come over tomorrow.", "thread_id": "s1",
                                 "created_at": T0 + 200_000},
                                {"content": "I'll bring my recipes!", "thread_id": "s1",
                                 "created_at": T0 + 201_000}])
    found = {c.id: c for c in engine.search_layers(QUERY, SCOPE, ["vectors"], limit=10).layers["vectors"]}
    assert found[ids[100]].trace["when_neighbour"] == 0.9


class _NoEarlierRowsStore(SQLiteStore):
    """A store without the optional EarlierRows capability."""

    memories_created_before = None  # type: ignore[assignment]


def test_a_store_without_the_earlier_rows_read_leaves_them_out_and_says_so() -> None:
    engine, ids = engine_with(store=_NoEarlierRowsStore(":memory:"))
    result = engine.search_layers(QUERY, SCOPE, ["vectors"], limit=10)
    assert ids[1] not in {c.id for c in result.layers["vectors"]}
    assert any("neighbours left out" in d for d in result.degradations)
