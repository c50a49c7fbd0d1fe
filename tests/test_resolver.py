"""The LLM resolver (manowar_memory.resolver): ADD / UPDATE / DELETE / NONE against the nearest
stored facts of exactly the scope, with a scripted chat function; what it cannot use (bad JSON,
unknown ids, low confidence, a failing model) is reported and the slot rules still apply."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator

import pytest

from manowar_memory import LLMResolver, MemoryEngine, ResolverError, Scope
from manowar_memory.errors import ConfigurationError
from manowar_memory.lifecycle import FactRef
from manowar_memory.resolver import parse_decisions
from manowar_memory.stores.base import MemoryQuery

MAYA = Scope(agent_wallet="agent", user_address="maya", thread_id="t1")
T0 = 1_772_452_800_000
DAY = 86_400_000

Answer = Callable[[dict[str, str], dict[str, str]], str]


class ScriptedChat:
    """A chat function that answers with ``answer(new, stored)`` (local id -> text) and keeps
    every prompt it was sent."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.prompts: list[list[dict[str, str]]] = []

    def __call__(self, messages: list[dict[str, str]]) -> str:
        self.prompts.append(messages)
        text = messages[-1]["content"]
        stored = dict(re.findall(r"^(F\d+): (.*)$", text, re.M))
        new = dict(re.findall(r"^(N\d+): (.*)$", text, re.M))
        return self.answer(new, stored)


def decide(event: str, about: str | None = None, *, reason: str = "scripted", confidence: float = 0.9,
           target: str | None = None) -> Answer:
    """One decision for N1, naming the stored fact whose text contains ``about``."""

    def answer(new: dict[str, str], stored: dict[str, str]) -> str:
        tid = target if target is not None else next((i for i, t in stored.items() if about and about in t), None)
        return json.dumps({"decisions": [{"fact": "N1", "event": event, "target": tid, "reason": reason,
                                          "confidence": confidence}]})

    return answer


@pytest.fixture
def engine() -> Iterator[MemoryEngine]:
    eng = MemoryEngine(store="sqlite:///:memory:", embedder="fake")
    yield eng
    eng.close()


def _rows(engine: MemoryEngine, scope: Scope = MAYA) -> dict[str, object]:
    rows = engine.store.list_memories(MemoryQuery(scope=scope, sources=("fact",), active_only=False))
    return {r.content: r for r in rows}


def _use(engine: MemoryEngine, answer: Answer, **kw: object) -> ScriptedChat:
    chat = ScriptedChat(answer)
    engine.resolver = LLMResolver(chat, name="scripted", **kw)  # type: ignore[arg-type]
    return chat


def test_update_supersedes_the_named_fact_with_provenance(engine: MemoryEngine) -> None:
    old = engine.remember(MAYA, "The user drives a red Volvo.", created_at=T0)
    chat = _use(engine, decide("UPDATE", "Volvo", reason="sold the Volvo, drives a Tesla now"))
    new = engine.remember(MAYA, "The user sold the Volvo and now drives a Tesla.", created_at=T0 + DAY)
    assert new.superseded == [old.id] and not new.deduplicated
    rows = _rows(engine)
    was = rows["The user drives a red Volvo."]
    assert was.status == "superseded"
    assert was.metadata["supersededBy"] == new.id and was.metadata["supersededAt"] >= T0 + DAY
    assert was.metadata["supersededReason"] == "llm: sold the Volvo, drives a Tesla now"
    assert (was.metadata["resolution"], was.metadata["resolver"]) == ("update", "scripted")
    assert "slot" in was.metadata
    assert rows["The user sold the Volvo and now drives a Tesla."].status == "active"
    assert len(chat.prompts) == 1
    hits, _ = engine.search("What car does the user drive?", MAYA, layers=["graph"])
    assert [h.text for h in hits] == ["The user sold the Volvo and now drives a Tesla."]


def test_an_update_observed_before_the_stored_fact_gives_way(engine: MemoryEngine) -> None:
    stored = engine.remember(MAYA, "The user drives a red Volvo.", created_at=T0)
    _use(engine, decide("UPDATE", "Volvo"))
    report = engine.ingest_report(MAYA, [{"content": "The user drives a grey Fiat.", "source": "fact",
                                          "created_at": T0 - 30 * DAY}])
    rows = _rows(engine)
    old = rows["The user drives a grey Fiat."]
    assert old.id == report.ids[0] and old.status == "superseded" and old.metadata["supersededBy"] == stored.id
    assert rows["The user drives a red Volvo."].status == "active"


def test_notes_name_the_facts_by_text() -> None:
    chat = ScriptedChat(lambda new, stored: json.dumps({"decisions": [
        {"fact": f"N{i}", "event": "ADD", "confidence": 1} for i in range(1, 11)]}))
    news = [FactRef(f"n{i}", f"new fact {i}", 1) for i in range(1, 12)]
    _, notes = LLMResolver(chat, max_new=20).decide(news, [FactRef("o", "old fact", 0)])
    assert notes == ["N11 'new fact 11' has no decision"]


def test_add_keeps_both(engine: MemoryEngine) -> None:
    engine.remember(MAYA, "The user drives a red Volvo.", created_at=T0)
    _use(engine, decide("ADD"))
    result = engine.remember(MAYA, "The user also rides a bike to work.", created_at=T0 + DAY)
    assert result.superseded == [] and result.notes == []
    assert {r.status for r in _rows(engine).values()} == {"active"}


def test_delete_retires_the_old_fact_and_keeps_the_statement(engine: MemoryEngine) -> None:
    old = engine.remember(MAYA, "The user has a gym membership.", created_at=T0)
    _use(engine, decide("DELETE", "gym", reason="membership cancelled"))
    new = engine.remember(MAYA, "The user cancelled the gym membership.", created_at=T0 + DAY)
    assert new.superseded == [old.id]
    rows = _rows(engine)
    was = rows["The user has a gym membership."]
    assert was.status == "superseded" and was.metadata["resolution"] == "delete"
    assert was.metadata["supersededBy"] == new.id and was.metadata["supersededReason"] == "llm: membership cancelled"
    assert rows["The user cancelled the gym membership."].status == "active"


def test_none_keeps_no_second_current_fact_and_reports_it(engine: MemoryEngine) -> None:
    old = engine.remember(MAYA, "The user is vegetarian.", created_at=T0)
    _use(engine, decide("NONE", "vegetarian", reason="same diet"))
    again = engine.remember(MAYA, "The user does not eat meat.", created_at=T0 + DAY)
    assert again.deduplicated and again.id == old.id and again.superseded == []
    assert any("already known" in n and "same diet" in n for n in again.notes)
    rows = _rows(engine)
    dup = rows["The user does not eat meat."]
    assert dup.status == "superseded" and dup.metadata["supersededBy"] == old.id
    assert dup.metadata["resolution"] == "none"
    assert rows["The user is vegetarian."].status == "active"
    assert rows["The user is vegetarian."].access_count >= 1  # reinforced
    assert [h.id for h in engine.search("meat vegetarian", MAYA, layers=["graph"])[0]] == [old.id]


@pytest.mark.parametrize("answer, problem", [
    (decide("UPDATE", target="F9"), "not one of the facts shown"),
    (lambda new, stored: "Sure! UPDATE F1 please", "no JSON object"),
    (lambda new, stored: '{"decisions": [', "no JSON object"),
    (lambda new, stored: json.dumps({"facts": []}), '"decisions" list'),
    (decide("UPDATE", "Volvo", confidence=0.4), "unsure"),
    (decide("MERGE", "Volvo"), "unknown event"),
    (lambda new, stored: json.dumps({"decisions": []}), "has no decision"),
])
def test_an_unusable_answer_adds_the_fact_and_is_reported(engine: MemoryEngine, answer: Answer, problem: str) -> None:
    engine.remember(MAYA, "The user drives a red Volvo.", created_at=T0)
    _use(engine, answer)
    result = engine.remember(MAYA, "The user sold the Volvo and now drives a Tesla.", created_at=T0 + DAY)
    assert result.superseded == [] and not result.deduplicated
    assert any(problem in n and n.startswith("scripted resolver:") for n in result.notes), result.notes
    assert {r.status for r in _rows(engine).values()} == {"active"}


def test_a_failing_model_is_reported_and_the_slot_rules_still_apply(engine: MemoryEngine) -> None:
    old = engine.remember(MAYA, "The user lives in Lisbon.", created_at=T0)

    def boom(new: dict[str, str], stored: dict[str, str]) -> str:
        raise RuntimeError("rate limited")

    _use(engine, boom)
    new = engine.remember(MAYA, "The user moved to Berlin.", created_at=T0 + DAY)
    assert new.superseded == [old.id]  # by the residence slot
    assert any("rate limited" in n for n in new.notes)
    was = _rows(engine)["The user lives in Lisbon."]
    assert was.metadata["supersededReason"] == "replaced by a newer fact on residence"


def test_the_slot_rules_run_after_an_add(engine: MemoryEngine) -> None:
    old = engine.remember(MAYA, "The user lives in Lisbon.", created_at=T0)
    _use(engine, decide("ADD"))
    assert engine.remember(MAYA, "The user moved to Berlin.", created_at=T0 + DAY).superseded == [old.id]


def test_the_prompt_holds_only_the_scopes_facts_under_local_ids(engine: MemoryEngine) -> None:
    mine = engine.remember(MAYA, "The user drives a red Volvo.", created_at=T0)
    engine.remember(Scope(agent_wallet="agent", user_address="bob"), "The user drives a blue Volvo.")
    engine.remember(Scope(agent_wallet="agent"), "The user drives a green Volvo.")  # the agent's, of no user
    engine.remember(Scope(agent_wallet="other", user_address="maya"), "The user drives a black Volvo.")
    engine.remember(Scope(agent_wallet="agent", user_address="maya", mode="local", hai_id="h1"), "The user drives a white Volvo.")
    chat = _use(engine, decide("ADD"))
    new = engine.remember(MAYA, "The user sold the Volvo and now drives a Tesla.")
    (prompt,) = chat.prompts
    text = "\n".join(m["content"] for m in prompt)
    assert "F1: The user drives a red Volvo." in text and "N1: The user sold the Volvo" in text
    for colour in ("blue", "green", "black", "white"):
        assert colour not in text
    assert mine.id not in text and new.id not in text


def test_no_stored_fact_means_no_call(engine: MemoryEngine) -> None:
    chat = _use(engine, decide("ADD"))
    engine.remember(MAYA, "The user drives a red Volvo.")
    engine.remember(Scope(agent_wallet="agent", user_address="bob"), "The user drives a blue Volvo.")
    assert chat.prompts == []


def test_candidates_bounds_the_facts_shown(engine: MemoryEngine) -> None:
    for i in range(8):
        engine.remember(MAYA, f"The user owns a car number {i} called Volvo {i}.", created_at=T0 + i)
    chat = _use(engine, decide("ADD"), candidates=3)
    engine.remember(MAYA, "The user sold a Volvo.")
    assert len(re.findall(r"^F\d+: ", chat.prompts[0][-1]["content"], re.M)) == 3


def test_a_large_batch_is_sent_in_calls_of_max_new_facts(engine: MemoryEngine) -> None:
    engine.remember(MAYA, "The user drives a red Volvo.", created_at=T0)
    chat = _use(engine, lambda new, stored: json.dumps({"decisions": [
        {"fact": n, "event": "ADD", "target": None, "reason": "", "confidence": 1} for n in new]}), max_new=2)
    report = engine.ingest_report(MAYA, [{"content": f"The user washed the Volvo on day {i}.", "source": "fact"}
                                         for i in range(5)])
    assert report.inserted == 5 and report.notes == []
    assert [len(re.findall(r"^N\d+: ", p[-1]["content"], re.M)) for p in chat.prompts] == [2, 2, 1]


def test_engine_refuses_a_resolver_that_is_not_one() -> None:
    with pytest.raises(ConfigurationError, match="FactResolver"):
        MemoryEngine(store="sqlite:///:memory:", embedder="fake", resolver=lambda m: "{}")  # type: ignore[arg-type]


def test_resolver_options_are_checked() -> None:
    with pytest.raises(ResolverError, match="candidates"):
        LLMResolver(lambda m: "", candidates=0)
    with pytest.raises(ResolverError, match="min_confidence"):
        LLMResolver(lambda m: "", min_confidence=2)


def test_parse_decisions_keeps_the_first_decision_and_reports_the_rest() -> None:
    raw = "```json\n" + json.dumps({"decisions": [
        {"fact": "N1", "event": "update", "target": "F1", "reason": "moved", "confidence": 0.95},
        {"fact": "N1", "event": "ADD", "confidence": 1},
        {"fact": "N7", "event": "ADD", "confidence": 1},
        "N2 is new",
        {"fact": "N2", "event": "NONE", "target": "F2", "confidence": True},
    ]}) + "\n```"
    decisions, notes = parse_decisions(raw, ["N1", "N2"], ["F1", "F2"], min_confidence=0.7)
    assert [(d.fact, d.event, d.target, d.reason) for d in decisions] == [("N1", "UPDATE", "F1", "moved")]
    assert any("more than one decision" in n for n in notes)
    assert any("unknown new fact 'N7'" in n for n in notes)
    assert any("not an object" in n for n in notes)
    assert any("N2: NONE has no numeric confidence" in n for n in notes)


def test_decide_maps_local_ids_to_rows() -> None:
    chat = ScriptedChat(decide("UPDATE", "Lisbon"))
    resolver = LLMResolver(chat)
    decisions, notes = resolver.decide([FactRef("row-new", "The user moved to Berlin.", 2)],
                                       [FactRef("row-a", "The user likes tea.", 1),
                                        FactRef("row-b", "The user lives in Lisbon.", 1)])
    assert notes == []
    assert [(d.fact, d.event, d.target) for d in decisions] == [("row-new", "UPDATE", "row-b")]
    assert "row-" not in chat.prompts[0][-1]["content"]


def test_flush_and_ingest_report_what_the_resolver_did(engine: MemoryEngine) -> None:
    engine.remember(MAYA, "The user drives a red Volvo.", created_at=T0)
    _use(engine, decide("NONE", "Volvo"))
    report = engine.ingest_report(MAYA, [{"key": "car", "content": "The user's car is a red Volvo.",
                                          "source": "fact"}])
    assert report.inserted == 1 and any("already known" in n for n in report.notes)
    assert _rows(engine)["The user's car is a red Volvo."].status == "superseded"
    again = engine.ingest_report(MAYA, [{"key": "car", "content": "The user's car is a red Volvo.",
                                         "source": "fact"}])
    assert again.already_stored == ["car"] and again.notes == []

    _use(engine, lambda new, stored: "no idea")
    engine.post_turn(MAYA, [{"role": "user", "content": "I drive a red Volvo, and I love my Volvo."}])
    flushed = engine.flush()
    assert flushed.failed == 0 and any("no JSON object" in n for n in flushed.notes)
