"""Long transcripts keep working: a thread recorded past MongoDB's 16 MB document limit is
stored in chunks (the newest in the transcript document, sealed older ones in
``session_transcript_chunks``) and every read (``thread_messages``, the scene layer,
``clear_thread``, cleanup) sees it whole, on MongoDB as on SQLite."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from manowar_memory import ConfigurationError, MemoryConfig, MemoryEngine, Scope

pytest.importorskip("pymongo")

from manowar_memory.stores.mongo import (
    join_transcript,
    pack_transcript,
    transcript_entries,
)

SCOPE = Scope(agent_wallet="agent-long", user_address="u1", thread_id="t-long")
MB = 2**20


@pytest.fixture
def engine_config() -> MemoryConfig:
    return MemoryConfig(max_text_chars=3 * MB)  # messages of 2.3 MB: few turns to pass 16 MB


@pytest.fixture
def engine(engine_on_each_store: MemoryEngine) -> MemoryEngine:
    return engine_on_each_store


def _turn(n: int) -> list[dict[str, Any]]:
    filler = f"turn{n} " + "lorem ipsum dolor sit amet " * 85_000  # ~2.3 MB each
    return [{"role": "user", "content": ("aardvark " if n == 0 else "") + filler, "timestamp": 1_000 + 3 * n},
            {"role": "assistant", "content": filler, "timestamp": 1_001 + 3 * n},
            {"role": "user", "content": f"short note {n}", "timestamp": 1_002 + 3 * n}]


def _chunks(engine: MemoryEngine) -> list[dict[str, Any]]:
    coll = getattr(engine.store, "transcript_chunks", None)
    return list(coll.find({}, {"messages": 0}).sort("seq", 1)) if coll is not None else []


def test_a_thread_past_16_mb_is_recorded_read_searched_and_cleared(engine: MemoryEngine) -> None:
    posted: list[dict[str, Any]] = []
    first_chunk_id = None
    for n in range(4):
        msgs = _turn(n)
        engine.post_turn(SCOPE, msgs, extract_facts=False)
        posted += msgs
        chunks = _chunks(engine)
        if chunks and first_chunk_id is None:
            first_chunk_id = chunks[0]["_id"]
    assert sum(len(m["content"]) for m in posted) > 16 * MB
    if engine.store.name == "mongo":  # the older messages live in sealed chunks, each written once
        chunks = _chunks(engine)
        assert len(chunks) >= 3 and chunks[0]["_id"] == first_chunk_id
        doc = engine.store.transcripts.find_one({"sessionId": SCOPE.thread_session_id()})
        assert len(engine.store.client.server_info()) and doc is not None
        from bson import encode

        assert len(encode(doc)) < 8 * MB

    got = engine.thread_messages(SCOPE)
    assert [(m.role, m.content, m.timestamp) for m in got] == [
        (m["role"], m["content"].strip(), m["timestamp"]) for m in posted]

    scene = engine.search_layers("aardvark", SCOPE, layers=["scene"])  # a word only in the oldest message
    assert [c.id for c in scene.layers["scene"]] == [SCOPE.thread_session_id()]
    result = engine.pre_turn("aardvark", SCOPE, layers=["scene"])
    assert result.totals.get("scene") == 1

    engine.clear_thread(SCOPE)
    assert engine.thread_messages(SCOPE) == []
    assert _chunks(engine) == []
    assert engine.search_layers("aardvark", SCOPE, layers=["scene"]).layers["scene"] == []
    engine.post_turn(SCOPE, [{"role": "user", "content": "a fresh start"}], extract_facts=False)
    assert [m.content for m in engine.thread_messages(SCOPE)] == ["a fresh start"]


@pytest.mark.mongo
def test_cleanup_deletes_a_long_transcript_with_its_chunks(mongo_client) -> None:
    from manowar_memory.records import Message, Transcript
    from manowar_memory.stores.mongo import MongoStore

    name = f"manowar_long_{uuid.uuid4().hex[:12]}"
    store = MongoStore(client=mongo_client, database=name, transcript_chunk_bytes=4096)
    try:
        for sid, created in (("old", 1_000), ("new", 5_000)):
            store.upsert_transcript(Transcript(
                session_id=sid, agent_wallet="a", created_at=created,
                messages=[Message(role="user", content=f"{sid} message {i} " * 100, timestamp=i) for i in range(20)]))
        assert {c["sessionId"] for c in store.transcript_chunks.find()} == {"old", "new"}
        assert store.delete_transcripts_older_than(2_000) == 1
        assert {c["sessionId"] for c in store.transcript_chunks.find()} == {"new"}
        assert store.get_transcript("old", "a") is None
        assert len(store.get_transcript("new", "a").messages) == 20  # type: ignore[union-attr]
        assert [t.session_id for t in store.list_transcripts("a", 0, 10_000)] == ["new"]
    finally:
        store.close()
        mongo_client.drop_database(name)


@pytest.mark.mongo
def test_a_chunk_changed_under_a_reader_is_not_served_half_way(mongo_client) -> None:
    from manowar_memory import StoreError
    from manowar_memory.records import Message, Transcript
    from manowar_memory.stores.mongo import MongoStore

    name = f"manowar_long_{uuid.uuid4().hex[:12]}"
    store = MongoStore(client=mongo_client, database=name, transcript_chunk_bytes=4096)
    try:
        t = Transcript(session_id="s", agent_wallet="a",
                       messages=[Message(role="user", content=f"m{i} " * 300, timestamp=i) for i in range(10)])
        store.upsert_transcript(t)
        assert store.get_transcript("s", "a") == t
        store.transcript_chunks.delete_one({"seq": 0})  # a chunk the document names is gone
        with pytest.raises(StoreError, match="missing"):
            store.get_transcript("s", "a")
    finally:
        store.close()
        mongo_client.drop_database(name)


def test_the_chunk_size_must_leave_room_under_the_document_limit() -> None:
    from manowar_memory.stores.mongo import MongoStore

    for bad in (100, 9 * MB):
        with pytest.raises(ConfigurationError, match="transcript_chunk_bytes"):
            MongoStore(uri="mongodb://127.0.0.1:1/x", transcript_chunk_bytes=bad, create_indexes=False)


_message = st.fixed_dictionaries({
    "role": st.sampled_from(["user", "assistant", "tool"]),
    "content": st.text(max_size=300) | st.builds(lambda c, n: c * n, st.sampled_from(["é", "✓東 ", "x", "ab "]),
                                                 st.integers(1000, 6000)),
    "timestamp": st.integers(0, 2**40),
    "toolCalls": st.none() | st.lists(st.fixed_dictionaries({"name": st.text(max_size=20),
                                                             "args": st.builds(lambda n: "y" * n,
                                                                               st.integers(0, 6000))}), max_size=2),
})


@settings(max_examples=60, deadline=None)
@given(st.lists(_message, max_size=12), st.lists(_message, min_size=1, max_size=4))
def test_chunking_round_trips_stays_under_the_chunk_size_and_only_appends(
    messages: list[dict[str, Any]], more: list[dict[str, Any]]
) -> None:
    from bson import encode

    size = 4096
    chunks = pack_transcript(transcript_entries(messages, size), size)
    assert join_transcript([e for c in chunks for e in c]) == messages
    assert all(len(encode({"messages": c})) <= size + 64 for c in chunks)
    grown = pack_transcript(transcript_entries(messages + more, size), size)
    assert join_transcript([e for c in grown for e in c]) == messages + more
    assert grown[: len(chunks) - 1] == chunks[:-1]  # sealed chunks never change when messages are appended
