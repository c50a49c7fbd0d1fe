"""Bad input gets a clear error from the library's root exception, stores nothing and loses
nothing: surrogates, odd timestamps, odd metadata, non-string ids, failing custom embedders,
a held SQLite write lock, a store path in a missing directory and text over the size limit.
On SQLite and MongoDB."""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from pydantic import ValidationError

from manowar_memory import (
    ConfigurationError,
    ConflictError,
    EmbeddingError,
    InvalidConfigError,
    InvalidInputError,
    ManowarError,
    MemoryConfig,
    MemoryEngine,
    PackerConfig,
    RetrievalConfig,
    Scope,
    ScopeError,
    StoreError,
)
from manowar_memory.scoped import check_metadata

SCOPE = Scope(agent_wallet="agent-bad", user_address="u1", thread_id="t1")
SURROGATE = "caf\udce9 au lait"


def _engine(kind: str, request: pytest.FixtureRequest, **kwargs: Any) -> Iterator[MemoryEngine]:
    kwargs.setdefault("embedder", "fake")
    if kind == "sqlite":
        eng = MemoryEngine(store="sqlite:///:memory:", **kwargs)
        yield eng
        eng.close()
        return
    from manowar_memory.stores.mongo import MongoStore

    db = request.getfixturevalue("mongo_store_db")
    eng = MemoryEngine(store=MongoStore(client=db.client, database=db.name), **kwargs)
    yield eng
    eng.close()


STORES = ["sqlite", pytest.param("mongo", marks=pytest.mark.mongo)]


@pytest.fixture(params=STORES)
def engine(request: pytest.FixtureRequest) -> Iterator[MemoryEngine]:
    yield from _engine(request.param, request)


def snapshot(engine: MemoryEngine) -> list[tuple[Any, ...]]:
    """Every memory row as stored (id, content, metadata, times, vector), in id order."""
    rows = [
        (r.id, r.content, r.metadata, r.created_at, r.updated_at, r.decay_score, r.embedding)
        for r in engine.store.iter_memories()
    ]
    return sorted(rows, key=lambda r: r[0])


def seeded(engine: MemoryEngine) -> tuple[str, list[tuple[Any, ...]]]:
    rid = engine.remember(SCOPE, "The user's cat is called Miso.", metadata={"tag": "pets"}).id
    engine.post_turn(SCOPE, [{"role": "user", "content": "I moved to Lisbon."}], extract_facts=False)
    return rid, snapshot(engine)


def refused(call: Any, *exc: type[BaseException]) -> ManowarError:
    with pytest.raises(exc or (InvalidInputError,)) as info:
        call()
    assert isinstance(info.value, ManowarError)
    return info.value


# ---------------------------------------------------------------- surrogates


def test_surrogates_in_text_are_refused_before_anything_is_written(engine: MemoryEngine) -> None:
    rid, before = seeded(engine)
    calls = [
        lambda: engine.remember(SCOPE, SURROGATE),
        lambda: engine.remember(SCOPE, "fine text", metadata={"note": SURROGATE}),
        lambda: engine.remember(SCOPE, "fine text", metadata={SURROGATE: 1}),
        lambda: engine.remember(SCOPE, "fine text", retention=SURROGATE),
        lambda: engine.post_turn(SCOPE, [{"role": "user", "content": SURROGATE}]),
        lambda: engine.post_turn(SCOPE, [{"role": "user", "content": "hi"}], session_id=SURROGATE),
        lambda: engine.post_turn(SCOPE, [{"role": "user", "content": "hi"}], summary=SURROGATE),
        lambda: engine.pre_turn(SURROGATE, SCOPE),
        lambda: engine.search(SURROGATE, SCOPE),
        lambda: engine.get_item(SCOPE, "vec_\udce9"),
        lambda: engine.update_item(SCOPE, rid, content=SURROGATE),
        lambda: engine.update_item(SCOPE, rid, metadata={"x": [SURROGATE]}),
        lambda: engine.delete_item(SCOPE, "vec_\udce9"),
        lambda: engine.resolve_conflict(SCOPE, rid, "keep", reason=SURROGATE),
    ]
    for i, call in enumerate(calls):
        err = refused(call)
        assert "surrogate" in str(err), (i, str(err))
    assert snapshot(engine) == before


@pytest.mark.parametrize("field", ["agent_wallet", "user_address", "thread_id", "hai_id"])
def test_a_scope_with_a_surrogate_is_a_scope_error(field: str) -> None:
    values = {"agent_wallet": "a", field: "x\ud800y"}
    with pytest.raises(ScopeError, match="surrogate"):
        Scope(**values)  # type: ignore[arg-type]


# ---------------------------------------------------------------- timestamps


@pytest.mark.parametrize("stamp", [math.nan, math.inf, -math.inf, 1e300, 2**70, -(2**70), "yesterday"])
def test_odd_message_timestamps_are_refused(engine: MemoryEngine, stamp: Any) -> None:
    _, before = seeded(engine)
    err = refused(lambda: engine.post_turn(SCOPE, [{"role": "user", "content": "hello", "timestamp": stamp}]))
    assert "timestamp" in str(err)
    assert snapshot(engine) == before


@pytest.mark.parametrize("stamp", [2**70, -(2**70), math.nan, math.inf, 1.5e20, True])
def test_odd_created_at_is_refused(engine: MemoryEngine, stamp: Any) -> None:
    _, before = seeded(engine)
    err = refused(lambda: engine.remember(SCOPE, "A fact with an odd time.", created_at=stamp))
    assert "created_at" in str(err)
    assert snapshot(engine) == before


def test_a_float_timestamp_in_range_is_kept_as_integer_milliseconds(engine: MemoryEngine) -> None:
    result = engine.post_turn(SCOPE, [{"role": "user", "content": "hello", "timestamp": 1_700_000_000_000.7}],
                              extract_facts=False)
    assert [m.timestamp for m in engine.thread_messages(SCOPE)] == [1_700_000_000_000]
    assert result.turn_id


# ---------------------------------------------------------------- metadata


class _Opaque:
    pass


def _deep(levels: int) -> dict[str, Any]:
    node: dict[str, Any] = {}
    for _ in range(levels):
        node = {"k": node}
    return node


BAD_METADATA = [
    pytest.param({"tags": {"a", "b"}}, "set", id="set"),
    pytest.param({"obj": _Opaque()}, "_Opaque", id="object"),
    pytest.param({"raw": b"\x00\xff"}, "bytes", id="bytes"),
    pytest.param(_deep(5000), "deeper", id="deep-5000"),
    pytest.param({1: "one"}, "key", id="int-key"),
    pytest.param({"a\x00b": 1}, "NUL", id="nul-key"),
    pytest.param({"$where": "1"}, "$", id="dollar-key"),
    pytest.param({"n": 2**70}, "64 bits", id="huge-int"),
    pytest.param({"x": math.nan}, "nan", id="nan"),
    pytest.param({"x": [math.inf]}, "inf", id="inf"),
    pytest.param({"x": {"": 1}}, "empty key", id="empty-key"),
    pytest.param(["not", "a", "mapping"], "mapping", id="list"),
]


@pytest.mark.parametrize(("metadata", "says"), BAD_METADATA)
def test_odd_metadata_is_refused_on_every_write_path(engine: MemoryEngine, metadata: Any, says: str) -> None:
    rid, before = seeded(engine)
    calls = [
        lambda: engine.remember(SCOPE, "Another fact to store.", metadata=metadata),
        lambda: engine.post_turn(SCOPE, [{"role": "user", "content": "hello there"}], metadata=metadata),
        lambda: engine.update_item(SCOPE, rid, metadata=metadata),
        lambda: engine.scoped(SCOPE).remember("Another fact to store.", metadata=metadata),
        lambda: check_metadata(metadata),
    ]
    for call in calls:
        err = refused(call)
        assert says.lower() in str(err).lower(), str(err)
    assert snapshot(engine) == before


def test_scope_metadata_is_checked_like_call_metadata(engine: MemoryEngine) -> None:
    _, before = seeded(engine)
    scope = Scope(agent_wallet="agent-bad", user_address="u1", thread_id="t1", metadata={"s": {1, 2}})
    refused(lambda: engine.remember(scope, "A fact from an odd scope."))
    refused(lambda: engine.post_turn(scope, [{"role": "user", "content": "hi"}]))
    assert snapshot(engine) == before


def test_tool_call_payloads_must_be_json(engine: MemoryEngine) -> None:
    _, before = seeded(engine)
    refused(lambda: engine.post_turn(SCOPE, [{"role": "assistant", "content": "ok", "tool_calls": [{"a": {1, 2}}]}]))
    refused(lambda: engine.post_turn(SCOPE, [{"role": "user", "content": "hi"}],
                                     tool_calls=[{"name": "t", "args": {"b": b"x"}}]))
    assert snapshot(engine) == before


@pytest.mark.parametrize("calls", [[None], ["search"], [[{"name": "t"}]], {"name": "t"}, "search"])
def test_a_messages_tool_calls_must_be_a_list_of_dicts(engine: MemoryEngine, calls: Any) -> None:
    """Found by the engine fuzzer: [None] raised pydantic's ValidationError, and a dict or a string
    was dropped without a word."""
    _, before = seeded(engine)
    with pytest.raises(InvalidInputError, match=r"messages\[0\]\.tool_calls must be a list of dicts"):
        engine.post_turn(SCOPE, [{"role": "assistant", "content": "ok", "tool_calls": calls}])
    assert snapshot(engine) == before


def test_plain_json_metadata_round_trips(engine: MemoryEngine) -> None:
    meta = {"a": [1, 2.5, None, True, "x"], "b": {"c": {"d": "e"}}, "t": (1, 2), "dotted.key": 1}
    rid = engine.remember(SCOPE, "A fact with rich metadata.", metadata=meta).id
    got = engine.get_item(SCOPE, rid).metadata
    assert got["a"] == [1, 2.5, None, True, "x"] and got["b"] == {"c": {"d": "e"}} and got["t"] == [1, 2]


# ---------------------------------------------------------------- ids


@pytest.mark.parametrize("bad", [[0], ("a", "b"), 5, None, b"vec_1", {"id": 1}, ""])
def test_non_string_ids_are_refused(engine: MemoryEngine, bad: Any) -> None:
    rid, before = seeded(engine)
    for call in (
        lambda: engine.delete_item(SCOPE, bad),
        lambda: engine.delete_item(SCOPE, bad, hard=True),
        lambda: engine.get_item(SCOPE, bad),
        lambda: engine.update_item(SCOPE, bad, content="new text"),
        lambda: engine.resolve_conflict(SCOPE, bad, "keep"),
        lambda: engine.resolve_conflict(SCOPE, rid, "supersede", winning_memory_id=bad) if bad is not None
        else engine.resolve_conflict(SCOPE, bad, "keep"),
    ):
        err = refused(call)
        assert "memory_id" in str(err), str(err)
    assert snapshot(engine) == before
    assert "call once per id" in str(refused(lambda: engine.delete_item(SCOPE, [rid])))


# ---------------------------------------------------------------- custom embedders


class _Custom:
    """A custom embedder whose answers are set by the test."""

    model_id = "custom:test"
    dimensions = None

    def __init__(self) -> None:
        self.answer: Any = None

    def embed(self, texts: Sequence[str], *, input_type: str = "document") -> list[list[float]]:
        if isinstance(self.answer, BaseException):
            raise self.answer
        if callable(self.answer):
            return self.answer(list(texts))
        return [[1.0, 0.0, 0.0] for _ in texts]

    async def aembed(self, texts: Sequence[str], *, input_type: str = "document") -> list[list[float]]:
        return self.embed(texts, input_type=input_type)


@pytest.fixture(params=STORES)
def custom(request: pytest.FixtureRequest) -> Iterator[tuple[MemoryEngine, _Custom]]:
    embedder = _Custom()
    for eng in _engine(request.param, request, embedder=embedder):
        yield eng, embedder


BAD_EMBEDDINGS = [
    pytest.param(RuntimeError("provider exploded"), "provider exploded", id="raises"),
    pytest.param(lambda texts: [], "0 vectors", id="too-few"),
    pytest.param(lambda texts: [[1.0, 0.0, 0.0]] * (len(texts) + 1), "vectors for", id="too-many"),
    pytest.param(lambda texts: [[math.nan, 0.0, 1.0] for _ in texts], "finite", id="nan"),
    pytest.param(lambda texts: [[math.inf, 0.0, 1.0] for _ in texts], "finite", id="inf"),
    pytest.param(lambda texts: [[1.0, 0.0, 0.0, 0.0] for _ in texts], "dimension", id="other-dimension"),
    pytest.param(lambda texts: [[] for _ in texts], "empty", id="empty"),
    pytest.param(lambda texts: ["abc" for _ in texts], "number", id="not-numbers"),
    pytest.param(lambda texts: None, "list", id="none"),
]


@pytest.mark.parametrize(("answer", "says"), BAD_EMBEDDINGS)
def test_a_failing_custom_embedder_is_an_embedding_error_and_nothing_is_stored(
    custom: tuple[MemoryEngine, _Custom], answer: Any, says: str
) -> None:
    engine, embedder = custom
    rid, before = seeded(engine)  # 3 dimensions from here on
    embedder.answer = answer
    for call in (
        lambda: engine.remember(SCOPE, "A brand new fact about Porto."),
        lambda: engine.post_turn(SCOPE, [{"role": "user", "content": "Something new about Porto."}]),
        lambda: engine.update_item(SCOPE, rid, content="The user's cat is called Tofu."),
    ):
        err = refused(call, EmbeddingError)
        assert says in str(err), str(err)
    assert snapshot(engine) == before
    embedder.answer = None
    hits, notes = engine.search("cat called Miso", SCOPE, layers=("graph",))
    assert hits and hits[0].id == rid
    assert not [n for n in notes if "failed" in n], notes  # the vector lane still works


def test_mixed_dimensions_in_one_answer_are_refused(custom: tuple[MemoryEngine, _Custom]) -> None:
    engine, embedder = custom
    embedder.answer = lambda texts: [[1.0, 0.0, 0.0] if i % 2 else [1.0, 0.0] for i in range(len(texts))]
    refused(lambda: engine.embedder.embed(["a", "b"]), EmbeddingError)  # type: ignore[union-attr]


# ---------------------------------------------------------------- the SQLite write lock


def test_a_held_sqlite_write_lock_is_a_store_error_saying_what_to_do(tmp_path) -> None:
    from manowar_memory.stores.sqlite import SQLiteStore

    path = tmp_path / "locked.db"
    engine = MemoryEngine(store=SQLiteStore(path, busy_timeout=0.2), embedder=None)
    rid = engine.remember(SCOPE, "The user's cat is called Miso.").id
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        err = refused(lambda: engine.remember(SCOPE, "A fact while the file is locked."), StoreError)
        assert "locked" in str(err) and "busy_timeout" in str(err) and str(path) in str(err)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert engine.get_item(SCOPE, rid).content == "The user's cat is called Miso."
    engine.remember(SCOPE, "A fact after the lock is gone.")
    engine.close()


# ---------------------------------------------------------------- a store in a missing directory


def test_a_sqlite_url_in_a_missing_directory_is_refused(tmp_path) -> None:
    missing = tmp_path / "nonexistent" / "dir"
    with pytest.raises(StoreError, match="does not exist"):
        MemoryEngine(store=f"sqlite:///{missing / 'm.db'}")
    assert not (tmp_path / "nonexistent").exists()


def test_manowar_stats_on_a_missing_directory_says_so(tmp_path) -> None:
    import subprocess
    import sys

    missing = tmp_path / "nonexistent" / "dir" / "m.db"
    proc = subprocess.run(
        [sys.executable, "-c", "from manowar_memory.cli import main; main()", "stats", "--store", f"sqlite:///{missing}"],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert "does not exist" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "nonexistent").exists()


# ---------------------------------------------------------------- the size limit


def test_text_over_the_size_limit_is_refused(engine: MemoryEngine) -> None:
    rid, before = seeded(engine)
    limit = engine.config.max_text_chars
    big = "word " * (limit // 5 + 1)
    for call in (
        lambda: engine.remember(SCOPE, big),
        lambda: engine.post_turn(SCOPE, [{"role": "user", "content": big}]),
        lambda: engine.update_item(SCOPE, rid, content=big),
        lambda: engine.pre_turn(big, SCOPE),
    ):
        err = refused(call)
        assert "max_text_chars" in str(err), str(err)
    assert snapshot(engine) == before
    engine.remember(SCOPE, "word " * (limit // 5 - 1))  # just under the limit is fine


def test_the_size_limit_is_configurable() -> None:
    engine = MemoryEngine(store=":memory:", config=MemoryConfig(max_text_chars=1_000, max_metadata_chars=1_000))
    refused(lambda: engine.remember(SCOPE, "x" * 1_001))
    refused(lambda: engine.remember(SCOPE, "fine", metadata={"blob": "y" * 1_000}))
    assert engine.remember(SCOPE, "x" * 1_000).id
    engine.close()


# ---------------------------------------------------------------- refuse what is not understood
@pytest.mark.parametrize("typo", ["metdata", "contents", "thread", "trust", "createdAt"])
def test_an_unknown_ingest_key_is_refused_naming_it_and_the_allowed_keys(engine: MemoryEngine, typo: str) -> None:
    before = len(engine.list_items(SCOPE, limit=1000))
    item = {"content": "The user reads sci-fi.", typo: {"trust": "external"}}
    with pytest.raises(InvalidInputError) as err:
        engine.ingest(SCOPE, ["A fine first item.", item])
    message = str(err.value)
    assert f"ingest item 1 has unknown key(s) ['{typo}']" in message
    assert "'content'" in message and "'metadata'" in message and "'key'" in message
    assert len(engine.list_items(SCOPE, limit=1000)) == before  # the good item was not stored either


def test_known_ingest_keys_and_the_id_alias_still_work(engine: MemoryEngine) -> None:
    ids = engine.ingest(SCOPE, [{"id": "k1", "content": "The user reads sci-fi.", "metadata": {"genre": "sf"},
                                 "source": "knowledge", "thread_id": "t1", "created_at": 1_700_000_000_000,
                                 "context": "what do you read?"}])
    assert engine.get_item(SCOPE, ids[0]).metadata["genre"] == "sf"


@pytest.mark.parametrize("config", [
    lambda: RetrievalConfig(trust_alpha=math.nan),
    lambda: RetrievalConfig(lane_weights={"vector": math.inf}),
    lambda: PackerConfig(semantic_weight=math.nan),
    lambda: PackerConfig(semantic_weight=-math.inf),
    lambda: MemoryConfig(fact_min_confidence=math.nan),
    lambda: MemoryConfig(packer={"semantic_weight": math.inf}),
    lambda: MemoryConfig(retrieval={"trust_alpha": math.nan}),
    lambda: MemoryConfig.model_validate({"packer": {"semantic_weight": math.nan}}),
    lambda: MemoryConfig(unknown_setting=1),
], ids=["retrieval-nan", "retrieval-inf-in-dict", "packer-nan", "packer-minus-inf", "memory-nan", "nested-packer-inf",
        "nested-retrieval-nan", "model_validate", "unknown-field"])
def test_non_finite_or_unknown_settings_raise_the_librarys_error(config: Any) -> None:
    with pytest.raises(InvalidConfigError) as err:
        config()
    assert isinstance(err.value, ConfigurationError) and isinstance(err.value, ManowarError)
    assert not isinstance(err.value, ValidationError)
    assert "finite number" in str(err.value) or "Extra inputs are not permitted" in str(err.value)
    assert err.value.errors and err.value.errors[0]["loc"]


def test_updating_a_fact_to_another_active_facts_text_is_a_conflict(engine: MemoryEngine) -> None:
    """A permanent conflict: ConflictError (an InvalidInputError), not a retryable StoreError."""
    engine.remember(SCOPE, "The user's locker is 12.")
    second = engine.remember(SCOPE, "The user's locker is 14.").id
    with pytest.raises(ConflictError, match="supersede or delete") as err:
        engine.update_item(SCOPE, second, content="The user's locker is 12.")
    assert isinstance(err.value, InvalidInputError) and not isinstance(err.value, StoreError)
    assert not getattr(err.value, "retryable", False)
    assert engine.get_item(SCOPE, second).content == "The user's locker is 14."
