"""Thread context: each ingested row is indexed with the messages it followed in its thread
(``MemoryRecord.context``), searched by the keyword lane at a lower weight and never shown."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from manowar_memory import InvalidInputError, MemoryConfig, MemoryEngine, NotFoundError, Scope
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


TALK = [*DIALOG, "Do you miss the rain?"]


def _found(engine: MemoryEngine, query: str) -> list[str]:
    hits, _ = engine.search(query, SCOPE, layers=("vectors",), k=10)
    return sorted(h.id for h in hits)


@pytest.mark.parametrize("hard", [False, True])
def test_a_deleted_message_leaves_the_context_of_the_rows_after_it(make_engine, hard: bool) -> None:
    """Its words no longer find the rows that followed it, soft or hard delete; the rows after
    them, whose windows never held it, keep theirs."""
    engine = make_engine(thread_context_messages=2)
    ids = engine.ingest(SCOPE, _items(TALK))
    assert _found(engine, "Lisbon sister") == sorted(ids[1:4])  # the row itself and the two after it
    assert engine.delete_item(SCOPE, ids[1], hard=hard)
    assert _found(engine, "Lisbon sister") == []
    assert _contexts(engine, [ids[0], *ids[2:]]) == [None, TALK[0], " ".join([TALK[0], TALK[2]]),
                                                     " ".join(TALK[2:4])]


def test_an_edited_or_superseded_message_reindexes_the_rows_after_it(make_engine) -> None:
    engine = make_engine()
    ids = engine.ingest(SCOPE, _items(TALK))
    original = _contexts(engine, ids)
    engine.update_item(SCOPE, ids[1], content="Porto, alone.")
    assert _found(engine, "Lisbon") == []
    assert _found(engine, "Porto") == sorted(ids[1:5])
    assert _contexts(engine, ids)[2] == " ".join([TALK[0], "Porto, alone."])
    engine.update_item(SCOPE, ids[1], content=TALK[1])  # and back: the contexts ingest gave
    assert _contexts(engine, ids) == original
    engine.update_item(SCOPE, ids[1], status="superseded")  # out of the thread's active rows
    assert _found(engine, "Lisbon") == []
    assert _contexts(engine, ids[2:]) == [TALK[0], " ".join([TALK[0], TALK[2]]), " ".join([TALK[0], *TALK[2:4]])]
    engine.resolve_conflict(SCOPE, ids[2], "supersede", winning_memory_id=ids[3])  # the same, by a conflict
    assert _found(engine, "weather") == []
    assert _contexts(engine, ids[3:]) == [TALK[0], " ".join([TALK[0], TALK[3]])]


def test_a_context_the_caller_gave_is_left_alone(make_engine) -> None:
    engine = make_engine()
    items = _items(TALK)
    items[2]["context"] = "Chapter 2 of the interview"
    ids = engine.ingest(SCOPE, items)
    engine.delete_item(SCOPE, ids[1])
    assert _contexts(engine, ids[2:4]) == ["Chapter 2 of the interview", " ".join([TALK[0], TALK[2]])]


@pytest.mark.parametrize("hard", [False, True])
def test_deleting_several_messages_rebuilds_each_thread_once(make_engine, hard: bool) -> None:
    engine = make_engine(thread_context_messages=2)
    ids = engine.ingest(SCOPE, _items(TALK) + _items(["Tea or coffee?", "Tea, always.", "Green or black?"],
                                                   thread="s2", start=T0 + 100))
    reads: list[object] = []
    real = engine.store.list_memories
    engine.store.list_memories = lambda query, limit=None: (reads.append(query), real(query, limit))[1]  # type: ignore[method-assign]
    try:
        assert engine.delete_items(SCOPE, [ids[1], ids[2], ids[6]], hard=hard) == 3
    finally:
        engine.store.list_memories = real  # type: ignore[method-assign]
    assert sum(1 for q in reads if getattr(q, "durable", True) is False) == 2  # one read per thread
    assert _found(engine, "Lisbon") == _found(engine, "weather") == _found(engine, "always") == []
    assert _contexts(engine, [ids[3], ids[4], ids[7]]) == [TALK[0], " ".join([TALK[0], TALK[3]]), "Tea or coffee?"]
    with pytest.raises(NotFoundError):  # a row not visible in the scope: nothing is deleted
        engine.delete_items(SCOPE, [ids[0], "vec_missing"])
    assert engine.get_item(SCOPE, ids[0]).content == TALK[0]
    with pytest.raises(InvalidInputError, match="not one string"):
        engine.delete_items(SCOPE, ids[0])  # type: ignore[arg-type]
    assert engine.delete_items(SCOPE, []) == 0


def test_a_users_delete_never_writes_into_the_agents_shared_rows(make_engine) -> None:
    """A shared (user-less) row of the same thread whose context happens to read like the user's
    window keeps it: rebuilding it would copy the user's other messages into a row every user sees."""
    engine = make_engine(thread_context_messages=2)
    ids = engine.ingest(SCOPE, _items(TALK[:3]))
    agent = Scope(agent_wallet="agent")
    (shared,) = engine.ingest(agent, [{"content": "Shared note", "thread_id": "s1", "created_at": T0 + 5000,
                                       "context": " ".join(TALK[1:3])}])
    engine.delete_item(SCOPE, ids[1])
    assert engine.get_item(agent, shared).context == " ".join(TALK[1:3])
    assert _contexts(engine, [ids[2]]) == [TALK[0]]


def test_in_a_long_thread_a_recent_delete_reads_a_page_and_an_old_one_the_whole_thread(make_engine) -> None:
    engine = make_engine(thread_context_messages=2)
    talk = [f"message {i} about topic{i}" for i in range(150)]
    ids = engine.ingest(SCOPE, _items(talk))
    limits: list[int | None] = []
    real = engine.store.list_memories
    engine.store.list_memories = lambda query, limit=None: (limits.append(limit), real(query, limit))[1]  # type: ignore[method-assign]
    try:
        engine.delete_item(SCOPE, ids[140])
        assert limits == [64]  # the newest page holds the rows after it and their windows
        limits.clear()
        engine.delete_item(SCOPE, ids[10])
        assert limits == [64, None]  # older than the page: the whole thread
    finally:
        engine.store.list_memories = real  # type: ignore[method-assign]
    assert _found(engine, "topic140") == _found(engine, "topic10") == []
    assert _contexts(engine, [ids[141], ids[142], ids[11], ids[12]]) == [
        " ".join(talk[138:140]), " ".join([talk[139], talk[141]]), " ".join(talk[8:10]), " ".join([talk[9], talk[11]])]
