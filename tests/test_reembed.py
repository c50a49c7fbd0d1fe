"""``reembed``: vectors of the configured model for the rows that have none (written keyword-only
or by another model), in batches, resumable, on SQLite and MongoDB; the engine call, the job,
the scoped surface and the command."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from click.testing import CliRunner

from manowar_memory import ConfigurationError, EmbeddingError, FakeEmbedder, MemoryEngine, Scope
from manowar_memory.cli import cli
from manowar_memory.jobs import run_job
from manowar_memory.stores.base import MemoryQuery

ALICE = Scope(agent_wallet="agent-re", user_address="alice")
BOB = Scope(agent_wallet="agent-re", user_address="bob")
FACTS = ["Standup is at 9:30", "The user drinks oolong tea", "Deploys happen on Thursdays",
         "The cat is called Miso", "The office is in Lyon"]

MakeEngine = Callable[[Any], MemoryEngine]


@pytest.fixture(params=["sqlite", pytest.param("mongo", marks=pytest.mark.mongo)])
def make_engine(request: pytest.FixtureRequest, tmp_path) -> Iterator[MakeEngine]:
    """Engines with the given embedder, each on its own connection to one shared store."""
    engines: list[MemoryEngine] = []
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'memory.db'}"

        def store() -> Any:
            return url
    else:
        from manowar_memory.stores.mongo import MongoStore

        db = request.getfixturevalue("mongo_store_db")

        def store() -> Any:
            return MongoStore(client=db.client, database=db.name)

    def make(embedder: Any) -> MemoryEngine:
        engine = MemoryEngine(store=store(), embedder=embedder)
        engines.append(engine)
        return engine

    yield make
    for engine in engines:
        engine.close()


def _models(engine: MemoryEngine, scope: Scope = ALICE) -> dict[str, str | None]:
    rows = engine.store.list_memories(MemoryQuery(scope=scope, active_only=False))
    return {r.content: r.embedding_model for r in rows}


def _nearest(engine: MemoryEngine, text: str, scope: Scope = ALICE) -> list[str]:
    """The contents the store's vector search returns for ``text`` with the engine's model."""
    assert engine.embedder is not None
    vector = engine.embedder.embed([text], input_type="query")[0]
    hits, _ = engine.store.vector_search(MemoryQuery(scope=scope), vector, engine.embedder.model_id, 10)
    return [h.record.content for h in hits]


class Flaky(FakeEmbedder):
    """A fake embedder (model fake:16) whose ``fail_at``-th batch fails."""

    def __init__(self, fail_at: int) -> None:
        super().__init__(16)
        self.fail_at = fail_at

    def _embed_batch(self, texts: list[str], input_type: Any) -> list[list[float]]:
        if self.calls + 1 == self.fail_at:
            self.calls += 1
            raise RuntimeError("provider down")
        return super()._embed_batch(texts, input_type)


def test_keyword_only_rows_get_vectors_and_vector_search_finds_them(make_engine: MakeEngine) -> None:
    writer = make_engine(None)
    for fact in FACTS:
        writer.remember(ALICE, fact)
    engine = make_engine("fake:16")
    assert set(_models(engine).values()) == {None}
    assert _nearest(engine, "oolong tea") == []
    report = engine.reembed()
    assert (report.model_id, report.embedded, report.already_embedded, report.scanned) == ("fake:16", 5, 0, 5)
    assert set(_models(engine).values()) == {"fake:16"}
    assert _nearest(engine, "oolong tea")[0] == "The user drinks oolong tea"
    again = engine.reembed()
    assert (again.embedded, again.already_embedded, again.batches) == (0, 5, 0)


def test_a_stopped_run_keeps_its_batches_and_the_next_run_continues(make_engine: MakeEngine) -> None:
    writer = make_engine(None)
    for fact in FACTS:
        writer.remember(ALICE, fact)
    flaky = Flaky(fail_at=2)
    engine = make_engine(flaky)
    with pytest.raises(EmbeddingError, match=r"stopped after 2 row\(s\).*run it again"):
        engine.reembed(batch_size=2)
    assert sorted(m or "" for m in _models(engine).values()) == ["", "", "", "fake:16", "fake:16"]
    resumed = make_engine(FakeEmbedder(16))
    report = resumed.reembed(batch_size=2)
    assert (report.embedded, report.already_embedded, report.batches) == (3, 2, 2)
    assert resumed.embedder is not None and resumed.embedder.inner.texts_embedded == 3  # type: ignore[attr-defined]
    assert set(_models(resumed).values()) == {"fake:16"}


def test_rows_of_another_model_are_embedded_with_this_one(make_engine: MakeEngine) -> None:
    old = make_engine("fake:16")
    for fact in FACTS[:3]:
        old.remember(ALICE, fact)
    new = make_engine("fake:32")
    new.remember(ALICE, FACTS[3])  # already this model's
    # another model's vectors are never compared: only this model's row comes back
    assert _nearest(new, "Deploys happen on Thursdays") == [FACTS[3]]
    report = new.reembed()
    assert (report.embedded, report.already_embedded) == (3, 1)
    assert set(_models(new).values()) == {"fake:32"}
    assert _nearest(new, "Deploys happen on Thursdays")[0] == "Deploys happen on Thursdays"


def test_inactive_rows_are_skipped_and_a_dry_run_writes_nothing(make_engine: MakeEngine) -> None:
    writer = make_engine(None)
    ids = [writer.remember(ALICE, fact).id for fact in FACTS[:3]]
    writer.delete_item(ALICE, ids[0])  # soft delete: kept as history, never searched
    engine = make_engine("fake:16")
    dry = engine.reembed(dry_run=True)
    assert (dry.embedded, dry.skipped_inactive, dry.dry_run) == (2, 1, True)
    assert set(_models(engine).values()) == {None}
    report = engine.reembed()
    assert (report.embedded, report.skipped_inactive) == (2, 1)
    assert _models(engine)[FACTS[0]] is None


def test_an_owner_or_an_agent_limits_the_rows(make_engine: MakeEngine) -> None:
    writer = make_engine(None)
    writer.remember(ALICE, FACTS[0])
    writer.remember(BOB, FACTS[1])
    writer.remember(Scope(agent_wallet="agent-other", user_address="alice"), FACTS[2])
    engine = make_engine("fake:16")
    assert engine.scoped(ALICE).reembed().embedded == 1
    assert _models(engine, BOB) == {FACTS[1]: None}
    assert engine.reembed("agent-re").embedded == 1  # bob's row; the other agent's stays
    assert _models(engine, Scope(agent_wallet="agent-other", user_address="alice")) == {FACTS[2]: None}
    assert engine.reembed().embedded == 1


def test_the_job_runs_on_an_engine_and_refuses_without_an_embedder(make_engine: MakeEngine) -> None:
    writer = make_engine(None)
    writer.remember(ALICE, FACTS[0])
    engine = make_engine("fake:16")
    job = run_job(engine, "reembed", {"agentWallet": "agent-re", "batchSize": 8})
    assert job.status == "completed", job.error
    assert (job.data["embedded"], job.data["modelId"]) == (1, "fake:16")
    failed = run_job(writer, "reembed", {})
    assert failed.status == "failed" and "reembed needs an embedder" in (failed.error or "")
    scoped = engine.scoped(BOB).run_job("reembed")
    assert scoped.status == "completed" and scoped.data["scanned"] == 0  # bob owns no row
    with pytest.raises(ConfigurationError, match="keyword-only"):
        writer.reembed()


def test_the_query_cache_forgets_what_reembed_changed(tmp_path) -> None:
    from manowar_memory import MemoryConfig

    url = f"sqlite:///{tmp_path / 'memory.db'}"
    with MemoryEngine(store=url, embedder=None) as writer:
        writer.ingest(ALICE, ["The user drinks oolong tea"])
    with MemoryEngine(store=url, embedder="fake:16", config=MemoryConfig(query_cache=True)) as engine:
        before = engine.search_layers("oolong tea", ALICE, ["vectors"]).layers["vectors"]
        assert [c.text for c in before] == ["The user drinks oolong tea"] and "vector" not in before[0].lanes
        engine.reembed()
        after = engine.search_layers("oolong tea", ALICE, ["vectors"]).layers["vectors"]
        assert [c.text for c in after] == ["The user drinks oolong tea"] and "vector" in after[0].lanes


def test_the_command_embeds_rows_written_with_embedder_none(tmp_path) -> None:
    runner = CliRunner()
    store = f"sqlite:///{tmp_path / 'memory.db'}"
    base = ["--agent", "a1", "--user", "u1", "--store", store]
    assert runner.invoke(cli, ["remember", FACTS[1], *base, "--embedder", "none"]).exit_code == 0
    dry = runner.invoke(cli, ["reembed", "--store", store, "--embedder", "fake:16", "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert "would embed 1 rows with fake:16" in dry.output
    done = runner.invoke(cli, ["reembed", "--store", store, "--embedder", "fake:16", "--agent", "a1", "--user", "u1"])
    assert done.exit_code == 0, done.output
    assert "embedded 1 rows with fake:16 (0 already embedded" in done.output
    again = runner.invoke(cli, ["reembed", "--store", store, "--embedder", "fake:16"])
    assert "embedded 0 rows with fake:16 (1 already embedded" in again.output
    refused = runner.invoke(cli, ["reembed", "--store", store, "--embedder", "none"])
    assert refused.exit_code == 2 and "name an embedder" in refused.output
    nothing = runner.invoke(cli, ["reembed", "--store", store])  # the suite's MANOWAR_EMBEDDER is none
    assert nothing.exit_code == 1 and "nothing to embed with" in nothing.output
    lost = runner.invoke(cli, ["reembed", "--store", store, "--embedder", "fake", "--user", "u1"])
    assert lost.exit_code == 2 and "--user needs --agent" in lost.output
