"""Every acknowledged turn is stored exactly once, in order.

* Concurrent ``post_turn`` calls on ONE thread from threads (one shared engine), processes
  (spawn, each its own engine on the same SQLite file / MongoDB database) and REST clients (a
  real uvicorn server): every message is in the transcript once, each writer's in its order,
  the ledger numbers the turns 1..n and there is one session row per turn.
* Each write of ``post_turn`` fails once in turn, and the same turn is retried: it is stored
  once (transcript, working buffer, session row), and a further retry reports a duplicate.
* A turn id given none is derived from client timestamps only; un-keyed ingest run twice
  stores its items once.
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from manowar_memory import MemoryEngine, Scope, SQLiteStore
from manowar_memory.stores.base import MemoryQuery
from manowar_memory.stores.sqlite import migrations as sqlite_migrations

AGENT = "agent-turns"
USER = "u1"
THREAD = "t-shared"
SCOPE = Scope(agent_wallet=AGENT, user_address=USER, thread_id=THREAD)
TURNS = 25  # per writer; 8 writers: 200 turns on one thread


def _engine(spec: tuple[str, ...]) -> MemoryEngine:
    if spec[0] == "sqlite":
        return MemoryEngine(store=SQLiteStore(spec[1], busy_timeout=60), embedder="fake")
    from manowar_memory.stores.mongo import MongoStore

    return MemoryEngine(store=MongoStore(spec[1], database=spec[2]), embedder="fake")


def _turn(writer: str, n: int) -> list[dict[str, Any]]:
    return [{"role": "user", "content": f"{writer} asks {n}"}, {"role": "assistant", "content": f"{writer} answers {n}"}]


def engine_writer(spec: tuple[str, ...], writer: str, engine: MemoryEngine | None = None) -> list[int]:
    """Post TURNS turns; returns the sequence numbers acknowledged."""
    own = engine is None
    eng = _engine(spec) if own else engine
    assert eng is not None
    try:
        return [int(eng.post_turn(SCOPE, _turn(writer, n), extract_facts=False, turn_id=f"{writer}-{n}").seq or 0)
                for n in range(TURNS)]
    finally:
        if own:
            eng.close()


def rest_writer(base: str, writer: str) -> list[int]:
    import httpx

    seqs = []
    with httpx.Client(base_url=base, timeout=60) as client:
        for n in range(TURNS):
            r = client.post("/api/memory/turns/record", json={
                "agentWallet": AGENT, "userAddress": USER, "threadId": THREAD, "messages": _turn(writer, n),
                "extractFacts": False, "turnId": f"{writer}-{n}"})
            assert r.status_code == 200, r.text
            seqs.append(int(r.json()["seq"]))
    return seqs


@pytest.fixture(params=["sqlite-file", pytest.param("mongo", marks=pytest.mark.mongo)])
def spec(request: pytest.FixtureRequest, tmp_path) -> Iterator[tuple[str, ...]]:
    if request.param == "sqlite-file":
        yield ("sqlite", str(tmp_path / "turns.db"))
        return
    uri = request.getfixturevalue("mongo_uri")
    client = request.getfixturevalue("mongo_client")
    name = f"manowar_test_{uuid.uuid4().hex[:12]}"
    yield ("mongo", uri, name)
    client.drop_database(name)


@pytest.fixture
def served(spec) -> Iterator[tuple[MemoryEngine, str, tuple[str, ...]]]:
    """An engine on the spec's store and a real uvicorn server over it on a free port."""
    import uvicorn

    from manowar_memory.server.app import create_app

    engine = _engine(spec)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(engine), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    assert server.started, "uvicorn did not start"
    yield engine, f"http://127.0.0.1:{port}", spec
    server.should_exit = True
    thread.join(10)
    engine.close()


def _check_thread(engine: MemoryEngine, writers: list[str], acked: dict[str, list[int]]) -> None:
    messages = [m.content for m in engine.thread_messages(SCOPE)]
    expected = {f"{w} {verb} {n}" for w in writers for n in range(TURNS) for verb in ("asks", "answers")}
    assert len(messages) == len(expected) == 2 * TURNS * len(writers)
    assert set(messages) == expected  # every acknowledged message, none twice (the lengths match)
    for w in writers:  # each writer's turns in its order, each turn whole (question then answer)
        mine = [m for m in messages if m.startswith(f"{w} ")]
        assert mine == [f"{w} {verb} {n}" for n in range(TURNS) for verb in ("asks", "answers")]
    for i in range(0, len(messages), 2):  # no turn interleaved with another
        assert messages[i].replace(" asks ", " answers ") == messages[i + 1]
    seqs = sorted(s for got in acked.values() for s in got)
    assert seqs == list(range(1, len(writers) * TURNS + 1))
    rows = engine.store.list_memories(MemoryQuery(scope=SCOPE.with_thread(THREAD)))
    assert len([r for r in rows if r.source == "session"]) == len(writers) * TURNS
    buffer = engine.store.get_session(SCOPE.thread_session_id(), AGENT)
    assert buffer is not None
    limit = engine.config.session_context_limit
    assert [line.split(": ", 1)[1] for line in buffer.working_memory.context] == messages[-limit:]


def test_threads_processes_and_rest_clients_on_one_thread(served) -> None:
    """3 threads (one engine), 3 processes (own engines), 2 REST clients: 200 turns on one thread."""
    engine, base, spec = served
    threads, processes, clients = ["th0", "th1", "th2"], ["pr0", "pr1", "pr2"], ["re0", "re1"]
    ctx = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(len(processes), mp_context=ctx) as procs, \
            concurrent.futures.ThreadPoolExecutor(len(threads) + len(clients)) as pool:
        futures = {w: procs.submit(engine_writer, spec, w) for w in processes}
        futures |= {w: pool.submit(engine_writer, spec, w, engine) for w in threads}
        futures |= {w: pool.submit(rest_writer, base, w) for w in clients}
        acked = {w: f.result(timeout=240) for w, f in futures.items()}
    _check_thread(engine, threads + processes + clients, acked)


# ------------------------------------------------------------------ failures between writes

#: The writes of one turn, per store: each is made to fail once.
WRITES = {
    "SQLiteStore": ["_put_transcript", "_put_session", "_insert", "_put_turn"],
    "MongoStore": ["_put_transcript", "_upsert", "_insert_turn_record", "_put_turn"],
}


class Injected(RuntimeError):
    """The failure a test injects."""


def test_each_write_failing_once_then_retried_stores_the_turn_once(engine_on_each_store, monkeypatch) -> None:
    engine = engine_on_each_store
    store: Any = engine.store
    scope = Scope(agent_wallet=AGENT, user_address=USER, thread_id="t-faults")
    first = engine.post_turn(scope, _turn("w", 0), extract_facts=False, turn_id="turn-0")
    assert first.created and first.seq == 1
    writes = WRITES[type(store).__name__]
    for k, name in enumerate(writes, start=1):
        real = getattr(store, name)
        calls = {"n": 0}

        def failing(*args: Any, _real: Any = real, _calls: dict[str, int] = calls, _name: str = name,
                    **kwargs: Any) -> Any:
            _calls["n"] += 1
            if _calls["n"] == 1:
                raise Injected(f"{_name} failed")
            return _real(*args, **kwargs)

        monkeypatch.setattr(store, name, failing)
        with pytest.raises(Injected):
            engine.post_turn(scope, _turn("w", k), extract_facts=False, turn_id=f"turn-{k}")
        again = engine.post_turn(scope, _turn("w", k), extract_facts=False, turn_id=f"turn-{k}")
        monkeypatch.undo()
        assert again.created and again.seq == k + 1, name
        third = engine.post_turn(scope, _turn("w", k), extract_facts=False, turn_id=f"turn-{k}")
        assert not third.created and third.seq == k + 1 and third.vector_id == again.vector_id
        assert third.stored == {"transcript": False, "working": False, "vector": False}
    contents = [m.content for m in engine.thread_messages(scope)]
    assert contents == [f"w {verb} {n}" for n in range(len(writes) + 1) for verb in ("asks", "answers")]
    session = store.get_session(scope.thread_session_id(), AGENT)
    assert [line.split(": ", 1)[1] for line in session.working_memory.context] == contents[
        -engine.config.session_context_limit:]
    rows = [r for r in store.list_memories(MemoryQuery(scope=scope)) if r.source == "session"]
    assert sorted(r.metadata["turnId"] for r in rows) == [f"turn-{n}" for n in range(len(writes) + 1)]


def test_turn_id_is_derived_from_client_timestamps_only(engine_on_each_store) -> None:
    """The same words at the same client times are one turn however often sent; without client
    timestamps, two identical messages are two turns (nothing merges real turns)."""
    engine = engine_on_each_store
    scope = Scope(agent_wallet=AGENT, user_address=USER, thread_id="t-derived")
    stamped = [{"role": "user", "content": "yes", "timestamp": 1_750_000_000_000}]
    a = engine.post_turn(scope, stamped, extract_facts=False)
    b = engine.post_turn(scope, stamped, extract_facts=False)
    assert a.created and not b.created and a.turn_id == b.turn_id
    later = engine.post_turn(scope, [{"role": "user", "content": "yes", "timestamp": 1_750_000_000_500}],
                             extract_facts=False)
    assert later.created and later.turn_id != a.turn_id
    plain = [{"role": "user", "content": "yes"}]
    c, d = (engine.post_turn(scope, plain, extract_facts=False) for _ in range(2))
    assert c.created and d.created and c.turn_id != d.turn_id
    assert [m.content for m in engine.thread_messages(scope)] == ["yes"] * 4


def test_unkeyed_ingest_run_again_stores_each_item_once(engine_on_each_store) -> None:
    """An ingest cut short by the embedder and run again with the same items stores each once;
    ``dedupe=False`` still stores deliberate duplicates."""
    engine = engine_on_each_store
    scope = Scope(agent_wallet=AGENT, user_address="ingest-user")
    items = [f"note number {i}" for i in range(30)]
    real = engine._embed_documents
    calls = {"n": 0}

    def flaky(texts: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 3:
            raise __import__("manowar_memory").errors.EmbeddingError("embedder down")
        return real(texts)

    engine._embed_documents = flaky  # type: ignore[method-assign]
    with pytest.raises(Exception, match="embedder down"):
        engine.ingest(scope, items, batch_size=10)
    engine._embed_documents = real  # type: ignore[method-assign]
    first = engine.ingest(scope, items, batch_size=10)
    again = engine.ingest_report(scope, items, batch_size=10)
    assert again.ids == first and again.inserted == 0
    q = MemoryQuery(scope=scope)
    assert engine.store.count_memories(q) == 30
    extra = engine.ingest_report(scope, ["note number 0", "note number 0"], dedupe=False)
    assert extra.inserted == 2 and engine.store.count_memories(q) == 32


# ------------------------------------------------------------------ migration


def test_m010_enters_existing_turns_in_the_ledger(tmp_path, monkeypatch) -> None:
    """A database written before m010: its turns (from their session rows) enter the ledger
    oldest first, the transcript is untouched, a retried old turn id stores nothing and the
    next turn follows them."""
    path = tmp_path / "old.db"
    names = [name for name, _ in sqlite_migrations.MIGRATIONS]
    monkeypatch.setattr(sqlite_migrations, "MIGRATIONS", sqlite_migrations.MIGRATIONS[:names.index("m010_thread_turns")])
    from manowar_memory.records import Message, Transcript
    from manowar_memory.testing.conformance import make_record

    old = SQLiteStore(path)
    scope = SCOPE
    sid = scope.thread_session_id()
    msgs = [Message(role="user", content=f"old message {i}", timestamp=1_750_000_000_000 + i) for i in range(3)]
    old.upsert_transcript(Transcript(session_id=sid, **Transcript.scope_fields(scope), messages=msgs,
                                     created_at=1_750_000_000_000))
    for i in range(3):
        rec = make_record(f"old turn {i}", agent=AGENT, user=USER, source="session", created_at=1_750_000_000_000 + i,
                          thread=THREAD, metadata={"turnId": f"old-{i}", "sessionId": sid, "type": "agent_memory_turn"})
        old.add_memories([rec])
    old.close()
    monkeypatch.undo()
    engine = MemoryEngine(store=SQLiteStore(path), embedder="fake")
    try:
        assert "m010_thread_turns" in engine.store.migrations()
        with engine.store._conn() as conn:  # type: ignore[attr-defined]
            ledger = conn.execute("SELECT turn_id, seq FROM thread_turns ORDER BY seq").fetchall()
        assert [tuple(r) for r in ledger] == [("old-0", 1), ("old-1", 2), ("old-2", 3)]
        assert [m.content for m in engine.thread_messages(scope)] == [m.content for m in msgs]
        retried = engine.post_turn(scope, [{"role": "user", "content": "old message 2"}], turn_id="old-2",
                                   extract_facts=False)
        assert not retried.created and retried.seq == 3
        new = engine.post_turn(scope, [{"role": "user", "content": "new message"}], turn_id="new-0",
                               extract_facts=False)
        assert new.created and new.seq == 4
        assert [m.content for m in engine.thread_messages(scope)] == [*(m.content for m in msgs), "new message"]
    finally:
        engine.close()
