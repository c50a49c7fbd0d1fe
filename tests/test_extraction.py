"""Fact extraction: the offline rules and the LLM extractor's prompt and parser."""

from __future__ import annotations

import json

import pytest

from manowar_memory import ExtractedFact, ExtractionError, FactExtractor, LLMExtractor, RuleBasedExtractor
from manowar_memory.extraction import _REWRITES, _RULES, parse_facts
from manowar_memory.records import FACT_TYPES, Message


def user(text: str) -> Message:
    return Message(role="user", content=text)


def assistant(text: str) -> Message:
    return Message(role="assistant", content=text)


# ---------------------------------------------------------------- rules


@pytest.mark.parametrize(
    "sentence, fact, kind",
    [
        ("I prefer Python for backend work.", "The user prefers Python for backend work.", "preference"),
        ("I love hiking with my dog.", "The user loves hiking with the user's dog.", "preference"),
        ("My favourite colour is teal.", "The user's favourite colour is teal.", "preference"),
        ("My name is Maya.", "The user's name is Maya.", "identity"),
        ("I work as a backend engineer.", "The user works as a backend engineer.", "identity"),
        ("I'm from Lagos.", "The user is from Lagos.", "identity"),
        ("My sister Ada lives in Sintra.", "The user's sister Ada lives in Sintra.", "relationship"),
        ("I moved to Lisbon in June.", "The user moved to Lisbon in June.", "context"),
        ("I'm learning Rust.", "The user is learning Rust.", "context"),
        ("I speak Portuguese fluently.", "The user speaks Portuguese fluently.", "skill"),
        ("I adopted a puppy last week.", "The user adopted a puppy last week.", "event"),
    ],
)
def test_first_person_statements_become_third_person_facts(sentence: str, fact: str, kind: str) -> None:
    (got,) = RuleBasedExtractor().extract([user(sentence)])
    assert (got.fact, got.type) == (fact, kind)
    assert 0.6 <= got.confidence <= 1.0
    assert got.type in FACT_TYPES


@pytest.mark.parametrize(
    "sentence, fact",
    [
        ("I really like short code examples.", "The user really likes short code examples."),
        ("I usually prefer tea.", "The user usually prefers tea."),
        ("I don't like cilantro.", "The user doesn't like cilantro."),
    ],
)
def test_adverbs_and_negations_keep_third_person_grammar(sentence: str, fact: str) -> None:
    (got,) = RuleBasedExtractor().extract([user(sentence)])
    assert got.fact == fact


def test_big_fan_of_is_a_preference() -> None:
    (got,) = RuleBasedExtractor().extract([user("I'm a big fan of jazz.")])
    assert got.type == "preference"


def test_questions_and_small_talk_are_ignored() -> None:
    facts = RuleBasedExtractor().extract([user("Do I like tea? Can you help me? Thanks a lot! Hi.")])
    assert facts == []


def test_assistant_system_and_tool_messages_are_ignored() -> None:
    messages = [
        assistant("I prefer Java myself. My name is Bot."),
        Message(role="system", content="I prefer concise answers."),
        Message(role="tool", content="My name is Tool."),
    ]
    assert RuleBasedExtractor().extract(messages) == []


def test_several_sentences_and_messages_give_several_facts_in_order() -> None:
    facts = RuleBasedExtractor().extract([
        user("I prefer Python. Do you? My dog Pixel loves the beach."),
        assistant("Nice."),
        user("I live in Porto."),
    ])
    assert [f.fact for f in facts] == [
        "The user prefers Python.", "The user's dog Pixel loves the beach.", "The user lives in Porto.",
    ]


def test_max_per_turn_is_honoured() -> None:
    text = "I prefer tea. I live in Porto. My sister is a nurse. I speak French. I work at a bank."
    assert len(RuleBasedExtractor().extract([user(text)])) == 5
    assert [f.fact for f in RuleBasedExtractor(max_per_turn=2).extract([user(text)])] == [
        "The user prefers tea.", "The user lives in Porto.",
    ]


def test_min_confidence_drops_weaker_rules() -> None:
    text = "I moved to Lisbon in June."  # a context rule of confidence 0.75
    assert RuleBasedExtractor(min_confidence=0.8).extract([user(text)]) == []
    assert len(RuleBasedExtractor(min_confidence=0.7).extract([user(text)])) == 1


def test_repeated_statements_are_extracted_once() -> None:
    facts = RuleBasedExtractor().extract([user("I prefer tea."), user("I prefer tea!")])
    assert [f.fact for f in facts] == ["The user prefers tea."]


def test_long_facts_are_cut_to_max_chars() -> None:
    text = "I prefer " + "very " * 80 + "strong coffee."
    (fact,) = RuleBasedExtractor(max_chars=60).extract([user(text)])
    assert len(fact.fact) <= 60 and fact.fact.endswith("...")


def test_extractors_satisfy_the_protocol() -> None:
    assert isinstance(RuleBasedExtractor(), FactExtractor)
    assert isinstance(LLMExtractor(lambda m: '{"facts": []}'), FactExtractor)


# ---------------------------------------------------------------- LLM extractor: parsing


def _answer(*rows: dict) -> str:
    return json.dumps({"facts": list(rows)})


def test_parse_valid_answer() -> None:
    raw = _answer({"fact": " The user likes tea. ", "type": "preference", "confidence": 0.9})
    assert parse_facts(raw) == [ExtractedFact("The user likes tea.", "preference", 0.9)]


def test_parse_tolerates_junk_around_the_json() -> None:
    raw = "Sure! Here you go:\n```json\n" + _answer({"fact": "A", "type": "identity", "confidence": 0.8}) + "\n```"
    assert parse_facts(raw) == [ExtractedFact("A", "identity", 0.8)]


@pytest.mark.parametrize("raw", ["no json here", "{not: valid}", "{\"facts\": [}", ""])
def test_parse_rejects_invalid_json(raw: str) -> None:
    with pytest.raises(ExtractionError):
        parse_facts(raw)


@pytest.mark.parametrize("raw", ['{"facts": "x"}', '{"rows": []}', "[1, 2]", "null"])
def test_parse_rejects_a_wrong_shape(raw: str) -> None:
    with pytest.raises(ExtractionError, match="facts"):
        parse_facts(raw)


def test_parse_filters_rows_by_type_confidence_and_length() -> None:
    raw = _answer(
        {"fact": "kept", "type": " Preference ", "confidence": 0.7},
        {"fact": "unknown type", "type": "opinion", "confidence": 0.9},
        {"fact": "missing type", "confidence": 0.9},
        {"fact": "low confidence", "type": "skill", "confidence": 0.5},
        {"fact": "bool confidence", "type": "skill", "confidence": True},
        {"fact": "string confidence", "type": "skill", "confidence": "0.9"},
        {"fact": "x" * 241, "type": "event", "confidence": 0.9},
        {"fact": "   ", "type": "event", "confidence": 0.9},
        {"fact": 42, "type": "event", "confidence": 0.9},
        "not an object",
        {"fact": "clamped", "type": "event", "confidence": 7},
    )
    assert parse_facts(raw) == [ExtractedFact("kept", "preference", 0.7), ExtractedFact("clamped", "event", 1.0)]


def test_parse_stops_at_max_per_turn() -> None:
    raw = _answer(*({"fact": f"fact {i}", "type": "context", "confidence": 0.9} for i in range(9)))
    assert [f.fact for f in parse_facts(raw, max_per_turn=3)] == ["fact 0", "fact 1", "fact 2"]
    assert len(parse_facts(raw)) == 5


def test_parse_respects_custom_limits() -> None:
    raw = _answer({"fact": "x" * 50, "type": "context", "confidence": 0.65})
    assert parse_facts(raw, max_chars=40) == []
    assert parse_facts(raw, min_confidence=0.7) == []
    assert len(parse_facts(raw, max_chars=50, min_confidence=0.65)) == 1


# ---------------------------------------------------------------- LLM extractor: prompt and call


def test_prompt_holds_the_last_six_user_and_assistant_messages() -> None:
    seen: list[list[dict[str, str]]] = []

    def chat(messages):
        seen.append(messages)
        return _answer({"fact": "The user likes tea.", "type": "preference", "confidence": 0.9})

    turn = [user(f"user message {i}") if i % 2 == 0 else assistant(f"assistant message {i}") for i in range(8)]
    turn.insert(3, Message(role="tool", content="tool output secret"))
    turn.insert(5, Message(role="system", content="system rule secret"))
    facts = LLMExtractor(chat, max_per_turn=4).extract(turn)
    assert facts == [ExtractedFact("The user likes tea.", "preference", 0.9)]
    (messages,) = seen
    assert [m["role"] for m in messages] == ["system", "user"]
    system, body = messages[0]["content"], messages[1]["content"]
    for kind in FACT_TYPES:
        assert kind in system
    assert "at most 4 facts" in system
    assert body.startswith("Conversation turn:\n")
    assert body.endswith("\n\nExtract durable user facts as JSON.")
    lines = body.split("\n")[1:7]
    assert lines == [
        "user: user message 2", "assistant: assistant message 3", "user: user message 4",
        "assistant: assistant message 5", "user: user message 6", "assistant: assistant message 7",
    ]
    assert "secret" not in body and "message 1" not in body


def test_prompt_collapses_whitespace_and_cuts_long_messages() -> None:
    extractor = LLMExtractor(lambda m: _answer())
    body = extractor.prompt([user("a   b\n\nc " + "z" * 2000)])[1]["content"]
    line = body.split("\n")[1]
    assert line.startswith("user: a b c z")
    assert len(line) == len("user: ") + 1200 and line.endswith("...")


def test_llm_extractor_wraps_chat_failures() -> None:
    def chat(messages):
        raise TimeoutError("upstream timed out")

    with pytest.raises(ExtractionError, match="upstream timed out"):
        LLMExtractor(chat, name="gemini").extract([user("I like tea.")])


def test_llm_extractor_raises_on_invalid_json() -> None:
    with pytest.raises(ExtractionError):
        LLMExtractor(lambda m: "I could not find any facts.").extract([user("I like tea.")])


def test_llm_extractor_skips_turns_without_conversation() -> None:
    calls = []
    extractor = LLMExtractor(lambda m: calls.append(m) or _answer())
    assert extractor.extract([Message(role="tool", content="x"), Message(role="system", content="y")]) == []
    assert calls == []


def test_llm_extractor_raises_extraction_error_on_a_non_string_answer() -> None:
    with pytest.raises(ExtractionError):
        LLMExtractor(lambda m: None).extract([user("I like tea.")])  # type: ignore[arg-type,return-value]


# ---------------------------------------------------------------- the turn table

SAID_AT = 1_780_488_000_000  # 2026-06-03 12:00 UTC, a Wednesday


def _table() -> list[tuple[str, list[tuple[str, ...]]]]:
    from pathlib import Path

    rows: list[tuple[str, list[tuple[str, ...]]]] = []
    for line in (Path(__file__).parent / "data" / "extraction_table.txt").read_text(encoding="utf-8").splitlines():
        if line.startswith("> "):
            rows.append((line[2:], []))
        elif line.startswith("= ") and line != "= -":
            rows[-1][1].append(tuple(part.strip() for part in line[2:].split(" | ")))
    return rows


TABLE = _table()


@pytest.mark.parametrize(("turn", "expected"), TABLE, ids=[t for t, _ in TABLE])
def test_the_turn_table(turn: str, expected: list[tuple[str, ...]]) -> None:
    facts = RuleBasedExtractor().extract([Message(role="user", content=turn, timestamp=SAID_AT)])
    got = [(f.fact, f.type, *((f.event_date,) if f.event_date else ())) for f in facts]
    assert got == expected


def test_the_turn_table_covers_at_least_100_turns() -> None:
    assert len(TABLE) >= 100
    assert sum(1 for _, facts in TABLE if len(facts) >= 2) >= 8  # clauses split into facts
    assert sum(1 for _, facts in TABLE if not facts) >= 10  # turns with nothing durable


@pytest.mark.parametrize(
    ("turn", "facts"),
    [
        ("I live in Lisbon and work at Acme.", ["The user lives in Lisbon.", "The user works at Acme."]),
        ("First I tell you my cat is Miso.", ["The user's cat is Miso."]),
        ("I study hard and I watch films.", ["The user studies hard."]),
        ("I go to the gym and I really miss my dog.", ["The user really misses the user's dog."]),
    ],
)
def test_facts_are_grammatical_third_person(turn: str, facts: list[str]) -> None:
    assert [f.fact for f in RuleBasedExtractor().extract([user(turn)])] == facts


# ---------------------------------------------------------------- long text
_LONG = 50_000
ADVERSARIAL = {
    "I went": "I went " * (_LONG // 7),
    "I am a": "I am a " * (_LONG // 7),
    "words": "word " * (_LONG // 5),
    "names": "Anna Bob " * (_LONG // 9),
    "capitals": "A" * _LONG,
    "my": "my " * (_LONG // 3),
    "adverbs": "I " + "oddly " * (_LONG // 6) + "'",
}


@pytest.mark.parametrize("name", sorted(ADVERSARIAL))
def test_every_extraction_rule_reads_a_long_sentence_without_backtracking_blowup(name: str) -> None:
    # a bound on pathological behaviour, not a speed target: regex raises TimeoutError when a
    # call runs past its timeout, which only a rule that backtracks quadratically comes near
    text = ADVERSARIAL[name]
    for pattern in [p for _type, _conf, p in _RULES] + [p for p, _repl in _REWRITES]:
        try:
            pattern.search(text, timeout=2.0)
        except TimeoutError:  # pragma: no cover - the failure this test guards against
            pytest.fail(f"the rule {pattern.pattern[:80]!r} backtracks on {name!r}")


def test_a_dated_event_is_read_when_its_time_comes_within_a_clause_length() -> None:
    event = next(p for kind, _conf, p in _RULES if kind == "event" and "yesterday" in p.pattern)
    assert event.search("I went to a concert in the old town " + "and it was lovely " * 20 + "yesterday")
    assert not event.search("I went to a concert in the old town " + "and it was lovely " * 30 + "yesterday")
