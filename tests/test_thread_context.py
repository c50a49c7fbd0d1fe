"""Thread context: each ingested row is indexed with the messages it followed in its thread
(``MemoryRecord.context``), searched by the keyword lane at a lower weight and never shown."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from manowar_memory import MemoryConfig, MemoryEngine, Scope
from manowar_memory.stores.mongo import MongoStore

SCOPE = Scope(agent_wallet="agent", user_address="maya")
T0 = 1_700_000_000_000
DIALOG = [
    "Where did you move last year?",
    "Lisbon, with my sister.",
    "How is the weather there?",
    "Sunny most days, I swim a lot.",
]


def _items(texts: list[str], thread: str = "s1", start: int = T0) -> list[dict]:
    return [{"content": t, "thread_id": thread, "created_at": start + 1000 * i} for i, t in enumerate(texts)]


@pytest.fixture(params=["sqlite", pytest.param("mongo", marks=pytest.mark.mongo)])
def make_engine(request: pytest.FixtureRequest) -> Iterator:
    engines: list[MemoryEngine] = []

    def make(**config: object) -> MemoryEngine:
        if request.param == "sqlite":
            store: object = "sqlite:///:memory:"
        else:
            client = request.getfixturevalue("mongo_client")
            name = f"ctx_{uuid.uuid4().hex[:10]}"
            request.addfinalizer(lambda: client.drop_database(name))
            store = MongoStore(client=client, database=name, vector_search="local")
        eng = MemoryEngine(store=store, embedder=None, config=MemoryConfig(**config))
        engines.append(eng)
        return eng

    yield make
    for eng in engines:
        eng.close()


def _contexts(engine: MemoryEngine, ids: list[str]) -> list[str | None]:
    return [engine.get_item(SCOPE, i).context for i in ids]


def test_each_row_is_indexed_with_the_messages_before_it_in_its_thread(make_engine) -> None:
    engine = make_engine()  # three earlier messages by default, oldest first
    ids = engine.ingest(SCOPE, _items(DIALOG) + _items(["A different thread opens here"], thread="s2"))
    assert _contexts(engine, ids) == [None, DIALOG[0], " ".join(DIALOG[:2]), " ".join(DIALOG[:3]), None]
    assert [engine.get_item(SCOPE, i).content for i in ids[:4]] == DIALOG  # content is untouched

    one = make_engine(thread_context_messages=1)
    ids = one.ingest(SCOPE, _items(DIALOG))
    assert _contexts(one, ids) == [None, DIALOG[0], DIALOG[1], DIALOG[2]]
    two = make_engine(thread_context_messages=2, thread_context_chars=6)  # the cap is per message
    ids = two.ingest(SCOPE, _items(DIALOG))
    assert _contexts(two, ids) == [None, "Where", "Where Lisbon", "Lisbon How is"]


def test_interleaved_threads_keep_their_own_windows(make_engine) -> None:
    engine = make_engine(thread_context_messages=2)
    items = [
        {"content": f"{thread}-{n}", "thread_id": thread, "created_at": T0 + 10 * n + (thread == "b")}
        for n in range(3) for thread in ("a", "b")
    ]
    ids = engine.ingest(SCOPE, items)
    assert _contexts(engine, ids) == [None, None, "a-0", "b-0", "a-0 a-1", "b-0 b-1"]


def test_a_reply_is_found_by_the_words_of_the_question_it_answers(make_engine) -> None:
    engine = make_engine()
    ids = engine.ingest(SCOPE, _items(DIALOG))
    found, _ = engine.search("Where did Maya move?", SCOPE, layers=("vectors",), k=5)
    assert ids[1] in [c.id for c in found]  # "Lisbon, with my sister." shares no word with the query
    assert found[0].id == ids[0]  # the question itself still ranks first: content outweighs context

    off = make_engine(thread_context=False)
    off_ids = off.ingest(SCOPE, _items(DIALOG))
    assert _contexts(off, off_ids) == [None] * 4
    found, _ = off.search("Where did Maya move?", SCOPE, layers=("vectors",), k=5)
    assert off_ids[1] not in [c.id for c in found]


def test_the_context_is_never_shown(make_engine) -> None:
    engine = make_engine()
    ids = engine.ingest(SCOPE, _items(DIALOG))
    result = engine.pre_turn("Where did Maya move?", SCOPE, ["vectors"], budget_chars=900)
    kept = {item.id: item for item in result.items}
    assert ids[1] in kept and kept[ids[1]].text == DIALOG[1]
    assert result.prompt.count(DIALOG[0]) == (1 if ids[0] in kept else 0)


def test_the_first_row_of_a_later_call_follows_the_stored_thread(make_engine) -> None:
    engine = make_engine()
    engine.ingest(SCOPE, _items(DIALOG[:2]))
    later = engine.ingest(SCOPE, _items(DIALOG[2:], start=T0 + 10_000))
    # the stored rows come first, then the earlier items of this call
    assert _contexts(engine, later) == [" ".join(DIALOG[:2]), " ".join(DIALOG[:3])]
    # a row dated before some stored ones follows only the stored rows written before it
    (early,) = engine.ingest(SCOPE, _items(["An early note"], start=T0 + 500))
    assert _contexts(engine, [early]) == [DIALOG[0]]


def test_explicit_context_wins_and_only_derived_context_is_capped(make_engine) -> None:
    engine = make_engine(thread_context_chars=10)
    ids = engine.ingest(SCOPE, [
        {"content": "Chapter one text", "thread_id": "doc", "created_at": T0, "context": "Title: Moby Dick"},
        {"content": "Chapter two text", "thread_id": "doc", "created_at": T0 + 1},
        {"content": "No thread at all", "created_at": T0 + 2},
    ])
    # the cap is for derived context; the caller's own is kept whole
    assert _contexts(engine, ids) == ["Title: Moby Dick", "Chapter on", None]
    no_derived = make_engine(thread_context_chars=0)
    ids = no_derived.ingest(SCOPE, [{"content": "Chapter one", "thread_id": "doc", "context": "Title: Moby Dick"},
                                    {"content": "Chapter two", "thread_id": "doc"}])
    assert _contexts(no_derived, ids) == ["Title: Moby Dick", None]


def test_documents_that_only_share_the_scope_thread_get_no_context(make_engine) -> None:
    engine = make_engine()
    scope = Scope(agent_wallet="agent", user_address="maya", thread_id="t1")
    ids = engine.ingest(scope, ["Coffee brewing notes", "Tea ceremony notes"])
    assert [engine.get_item(scope, i).context for i in ids] == [None, None]


def test_a_turn_row_is_indexed_with_the_exchange_it_follows(make_engine) -> None:
    engine = make_engine()
    scope = Scope(agent_wallet="agent", user_address="maya", thread_id="chat-1")
    first = engine.post_turn(scope, [{"role": "user", "content": "I need a new hobby."},
                                     {"role": "assistant", "content": "Which instrument did you play as a child?"}],
                             extract_facts=False)
    second = engine.post_turn(scope, [{"role": "user", "content": "The cello, for eight years."},
                                      {"role": "assistant", "content": "Lovely."}], extract_facts=False)
    assert engine.get_item(scope, first.vector_id).context is None  # nothing came before it
    assert engine.get_item(scope, second.vector_id).context == (
        "I need a new hobby. Which instrument did you play as a child?")
    found, _ = engine.search("instrument", scope, layers=("vectors",), k=5)
    assert [c.id for c in found] == [first.vector_id, second.vector_id]  # content first, context second

    third = engine.post_turn(scope, [{"role": "user", "content": "Cello it is."}], extract_facts=False)
    assert engine.get_item(scope, third.vector_id).context == (  # the last three messages, as for ingest
        "Which instrument did you play as a child? The cello, for eight years. Lovely.")

    off = make_engine(thread_context=False)
    off.post_turn(scope, [{"role": "user", "content": "I need a new hobby."},
                          {"role": "assistant", "content": "Which instrument did you play?"}], extract_facts=False)
    later = off.post_turn(scope, [{"role": "user", "content": "The cello."}], extract_facts=False)
    assert off.get_item(scope, later.vector_id).context is None


def test_one_call_or_one_message_at_a_time_gives_the_same_contexts(make_engine) -> None:
    together = make_engine()
    ids = together.ingest(SCOPE, _items(DIALOG))
    apart = make_engine()
    apart_ids = [apart.ingest(SCOPE, [item])[0] for item in _items(DIALOG)]
    assert _contexts(apart, apart_ids) == _contexts(together, ids) == [
        None, DIALOG[0], " ".join(DIALOG[:2]), " ".join(DIALOG[:3])]
