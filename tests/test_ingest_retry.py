"""Ingest that can be retried: items with an idempotency key are stored once per scope, an
embedder failure part-way says what was stored, and running the same ingest again (API or
``manowar ingest``) finishes the job without duplicates. Bad ``items`` / ``batch_size`` get a
clear error and store nothing. Every store: SQLite and MongoDB."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from manowar_memory import (
    EmbeddingError,
    FakeEmbedder,
    IngestItem,
    InvalidInputError,
    ManowarError,
    MemoryEngine,
    PartialIngestError,
    Scope,
)
from manowar_memory.stores.base import MemoryQuery

AGENT = "agent-ingest"
SCOPE = Scope(agent_wallet=AGENT, user_address="alice")


class FlakyEmbedder(FakeEmbedder):
    """Fails every provider call from call number ``fail_from`` (1-based) while ``broken``."""

    __test__ = False

    def __init__(self, fail_from: int) -> None:
        super().__init__(32)
        self.fail_from = fail_from
        self.broken = True

    def _embed_batch(self, texts: list[str], input_type: Any) -> list[list[float]]:
        if self.broken and self.calls + 1 >= self.fail_from:
            self.calls += 1
            raise RuntimeError("upstream 503")
        return super()._embed_batch(texts, input_type)


def _store_spec(request: pytest.FixtureRequest, kind: str, tmp_path) -> Any:
    if kind == "sqlite":
        return str(tmp_path / "ingest.db")
    from manowar_memory.stores.mongo import MongoStore

    db = request.getfixturevalue("mongo_store_db")
    return lambda: MongoStore(client=db.client, database=db.name)


@pytest.fixture(params=["sqlite", pytest.param("mongo", marks=pytest.mark.mongo)])
def make_engine(request: pytest.FixtureRequest, tmp_path) -> Iterator[Any]:
    """Engines on one shared store (a SQLite file or a MongoDB database)."""
    spec = _store_spec(request, request.param, tmp_path)
    engines: list[MemoryEngine] = []

    def make(embedder: Any = None) -> MemoryEngine:
        store = spec() if callable(spec) else f"sqlite:///{spec}"
        eng = MemoryEngine(store=store, embedder=embedder or FakeEmbedder(32))
        engines.append(eng)
        return eng

    yield make
    for eng in engines:
        eng.close()


def _all_rows(engine: MemoryEngine, scope: Scope = SCOPE) -> list[Any]:
    return engine.store.list_memories(MemoryQuery(scope=scope, active_only=False))


def _items(n: int) -> list[IngestItem]:
    return [IngestItem(key=f"doc-{i}", content=f"document number {i} about topic {i % 7}") for i in range(n)]


def test_a_keyed_ingest_run_twice_stores_each_item_once(make_engine) -> None:
    engine = make_engine()
    first = engine.ingest(SCOPE, _items(10), batch_size=4)
    again = engine.ingest_report(SCOPE, _items(10), batch_size=3)
    assert again.ids == first and again.inserted == 0 and again.already_stored == [f"doc-{i}" for i in range(10)]
    assert len(_all_rows(engine)) == 10
    assert first[0] == MemoryEngine.ingest_id(SCOPE, "doc-0")
    # dicts name the key "key" or "id"; a changed text under a stored key keeps the stored row
    assert engine.ingest(SCOPE, [{"id": "doc-1", "content": "edited"}, {"key": "doc-2", "content": "x"}]) == first[1:3]
    assert engine.get_item(SCOPE, first[1]).content == "document number 1 about topic 1"
    assert len(_all_rows(engine)) == 10


def test_keys_are_per_scope(make_engine) -> None:
    engine = make_engine()
    bob = Scope(agent_wallet=AGENT, user_address="bob")
    (a,) = engine.ingest(SCOPE, [IngestItem(key="k", content="alice's note")])
    (b,) = engine.ingest(bob, [IngestItem(key="k", content="bob's note")])
    (h,) = engine.ingest(Scope(agent_wallet=AGENT, user_address="alice", mode="local", hai_id="h1"),
                         [IngestItem(key="k", content="alice's note in h1")])
    assert len({a, b, h}) == 3
    assert engine.get_item(bob, b).content == "bob's note"


def test_an_embedder_failure_midway_says_what_was_stored_and_a_rerun_finishes(make_engine) -> None:
    flaky = FlakyEmbedder(fail_from=3)  # batches 1 and 2 embed, batch 3 fails
    engine = make_engine(flaky)
    with pytest.raises(PartialIngestError) as info:
        engine.ingest(SCOPE, _items(10), batch_size=3)
    err = info.value
    assert isinstance(err, EmbeddingError) and isinstance(err, ManowarError)
    assert err.stored == 6 and err.total == 10
    assert err.stored_keys == [f"doc-{i}" for i in range(6)]
    assert err.pending_keys == [f"doc-{i}" for i in range(6, 10)]
    assert err.stored_ids == [MemoryEngine.ingest_id(SCOPE, f"doc-{i}") for i in range(6)]
    message = str(err)
    assert "6 of 10" in message and "'doc-0'" in message and "run the same ingest again" in message
    assert "upstream 503" in message
    assert len(_all_rows(engine)) == 6

    flaky.broken = False
    before = flaky.texts_embedded
    report = engine.ingest_report(SCOPE, _items(10), batch_size=3)
    assert report.inserted == 4 and len(report.already_stored) == 6
    assert flaky.texts_embedded - before == 4  # the stored items are not embedded again
    rows = _all_rows(engine)
    assert len(rows) == 10 and len({r.content for r in rows}) == 10
    assert sorted(report.ids) == sorted(r.id for r in rows)


def test_a_failure_of_items_without_keys_says_they_would_be_stored_again(make_engine) -> None:
    engine = make_engine(FlakyEmbedder(fail_from=2))
    with pytest.raises(PartialIngestError) as info:
        engine.ingest(SCOPE, [f"plain text {i}" for i in range(4)], batch_size=2)
    assert info.value.stored == 2 and info.value.stored_keys == [] and info.value.pending_keys == []
    assert "no key" in str(info.value) and "from position 2" in str(info.value)
    assert len(_all_rows(engine)) == 2


def test_concurrent_runs_of_one_ingest_store_each_item_once(make_engine) -> None:
    engines = [make_engine() for _ in range(4)]
    barrier = threading.Barrier(len(engines))
    results: list[list[str]] = []
    errors: list[BaseException] = []

    def run(eng: MemoryEngine) -> None:
        try:
            barrier.wait()
            results.append(eng.ingest(SCOPE, _items(40), batch_size=5))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(e,)) for e in engines]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert all(r == results[0] for r in results)
    assert len(_all_rows(engines[0])) == 40


@pytest.mark.parametrize("items", [None, "hello", b"hello", {"content": "one item"}, IngestItem(content="x"), 42])
def test_items_that_are_not_a_list_of_items_are_refused(make_engine, items: Any) -> None:
    engine = make_engine()
    engine.ingest(SCOPE, ["kept"])
    with pytest.raises(InvalidInputError, match="items must be a list"):
        engine.ingest(SCOPE, items)
    assert [r.content for r in _all_rows(engine)] == ["kept"]


@pytest.mark.parametrize("batch_size", [0, -1, True, 1.5, "10", None])
def test_a_batch_size_that_is_not_a_positive_integer_is_refused(make_engine, batch_size: Any) -> None:
    engine = make_engine()
    with pytest.raises(InvalidInputError, match="batch_size must be a positive integer"):
        engine.ingest(SCOPE, ["one", "two"], batch_size=batch_size)
    assert _all_rows(engine) == []


def test_bad_keys_are_refused_before_anything_is_stored(make_engine) -> None:
    engine = make_engine()
    with pytest.raises(InvalidInputError, match="same key 'a'"):
        engine.ingest(SCOPE, [IngestItem(key="a", content="one"), "two", {"key": "a", "content": "three"}])
    with pytest.raises(InvalidInputError, match="empty key"):
        engine.ingest(SCOPE, [{"key": "  ", "content": "one"}])
    with pytest.raises(InvalidInputError, match="item 0 is invalid"):
        engine.ingest(SCOPE, [{"key": 5, "content": "one"}])
    assert _all_rows(engine) == []


# ----------------------------------------------------------------------------- the CLI


def test_cli_ingest_run_twice_stores_each_line_once_and_a_rerun_finishes(make_engine, tmp_path, monkeypatch) -> None:
    import manowar_memory.cli as cli_mod

    path = tmp_path / "notes.jsonl"
    lines = ['"same text"', '"same text"'] + [f'{{"content": "note {i}"}}' for i in range(8)]
    path.write_text("\n".join(lines) + "\n\n" + '{"id": "explicit", "content": "keyed by the file"}\n')
    flaky = FlakyEmbedder(fail_from=2)
    engines = iter([make_engine(flaky), make_engine(flaky), make_engine(flaky)])
    monkeypatch.setattr(cli_mod, "_engine", lambda store, embedder: next(engines))
    monkeypatch.setattr(MemoryEngine, "ingest_report",
                        _with_batch_size(MemoryEngine.ingest_report, 4))
    runner = CliRunner()

    failed = runner.invoke(cli_mod.cli, ["ingest", str(path), "--agent", AGENT])
    assert failed.exit_code != 0 and isinstance(failed.exception, PartialIngestError)
    assert "4 of 11 ingest items are stored" in str(failed.exception)

    flaky.broken = False
    done = runner.invoke(cli_mod.cli, ["ingest", str(path), "--agent", AGENT])
    assert done.exit_code == 0, done.output
    assert "ingested 11 memories (7 new, 4 already stored)" in done.output
    again = runner.invoke(cli_mod.cli, ["ingest", str(path), "--agent", AGENT])
    assert "ingested 11 memories (0 new, 11 already stored)" in again.output
    rows = _all_rows(make_engine(), Scope(agent_wallet=AGENT))
    # a line is keyed by its content within the scope: the two identical lines are one row
    assert len(rows) == 10 and sum(r.content == "same text" for r in rows) == 1


def _with_batch_size(method: Any, size: int) -> Any:
    def patched(self: MemoryEngine, scope: Any, items: Any, **kwargs: Any) -> Any:
        kwargs["batch_size"] = size
        return method(self, scope, items, **kwargs)

    return patched


class RecordingEmbedder(FakeEmbedder):
    """A fake embedder that keeps the texts of every provider call."""

    __test__ = False

    def __init__(self) -> None:
        super().__init__(32)
        self.asked: list[list[str]] = []

    def _embed_batch(self, texts: list[str], input_type: Any) -> list[list[float]]:
        self.asked.append(list(texts))
        return super()._embed_batch(texts, input_type)


def test_a_batch_is_embedded_shortest_first_and_each_row_keeps_its_own_vector(make_engine) -> None:
    recorder = RecordingEmbedder()
    engine = make_engine(recorder)
    texts = [("word " * n).strip() + f" item {i}" for i, n in enumerate([9, 1, 30, 4, 17, 2, 12])]
    ids = engine.ingest(SCOPE, texts, batch_size=4)
    assert recorder.asked == [sorted(texts[:4], key=len), sorted(texts[4:], key=len)]
    stored = {r.id: r for r in engine.store.iter_memories(AGENT)}
    assert [stored[i].content for i in ids] == texts
    assert np.allclose([stored[i].embedding for i in ids], FakeEmbedder(32).embed(texts), atol=1e-6)


def test_ids_taken_within_and_before_a_batch_are_each_resolved(make_engine) -> None:
    engine = make_engine()
    (old,) = engine.ingest(SCOPE, [IngestItem(key="old", content="stored before")])
    same = {"content": "the same words", "created_at": 1_700_000_000_000}
    # a stored key amid new rows, and two identical unkeyed rows stored as two (dedupe off)
    report = engine.ingest_report(SCOPE, [IngestItem(key="new-1", content="first new"), IngestItem(key="old",
                                  content="stored before"), IngestItem(key="new-2", content="second new"), same, same],
                                  dedupe=False)
    assert report.ids[1] == old and report.already_stored == ["old"] and report.inserted == 4
    assert len(set(report.ids)) == 5
    rows = {r.id: r for r in _all_rows(engine)}
    assert len(rows) == 5 and [rows[i].content for i in report.ids] == [
        "first new", "stored before", "second new", "the same words", "the same words"]
