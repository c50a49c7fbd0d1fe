"""benchmarks/lifecycle.py: the generator is deterministic and clean, the metrics fail on the
contexts they must fail on, and the engine's run scores every question (fake embedder)."""

from __future__ import annotations

import datetime as dt
import itertools
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from manowar_memory.embeddings import resolve_embedder

import lifecycle as lc
from peers import SharedEmbedder


def _texts(users: list[lc.User]) -> list[str]:
    return [t.text for u in users for t in u.turns]


def test_generator_is_deterministic_per_seed() -> None:
    assert _texts(lc.generate(6, seed=3)) == _texts(lc.generate(6, seed=3))
    assert _texts(lc.generate(6, seed=3)) != _texts(lc.generate(6, seed=4))


def test_first_person_questions_ask_the_same_of_the_same_data() -> None:
    third, first = lc.generate(5, seed=2), lc.generate(5, seed=2, person="first")
    assert _texts(third) == _texts(first)
    pairs = [(a, b) for u, v in zip(third, first) for a, b in zip(u.probes, v.probes)]
    assert all(a.current == b.current and a.category == b.category for a, b in pairs)
    assert all("the user" in a.text and "the user" not in b.text for a, b in pairs)


def test_generated_data_is_consistent() -> None:
    users = lc.generate(30, seed=11)
    changed = [a for u in users for a in u.attributes if a.changed]
    assert changed and any(len(a.values) == 3 for a in changed)
    for user in users:
        own = [v for a in user.attributes for v in a.values]
        sessions = sorted({t.session for t in user.turns})
        assert 3 <= len(sessions) <= 5
        days = sorted({t.at.date() for t in user.turns})
        assert all((b - a).days >= 10 for a, b in itertools.pairwise(days))  # weeks apart
        for turn in user.turns:
            if turn.kind in ("distractor", "small-talk"):  # never a value the user holds, so never scored
                assert not any(lc.mentions(turn.text, v) for v in own if ":" not in v), turn.text
        for attr in user.attributes:
            assert len(attr.change_dates) == len(attr.values) - 1 == len(attr.change_templates)
        for probe in user.probes:
            if probe.category == "when":
                change_days = {t.at.date() for t in user.turns if t.kind == "change"}
                assert probe.on_date in change_days
    # the phrasing bank is varied: several paraphrases per kind actually used
    used = {a.change_templates[-1] for a in changed}
    assert len(used) >= 20


def test_current_first_and_stale_dated_earlier() -> None:
    lines = ["[GRAPH 2023-05-01] The user moved to Berlin last month.", "[SCENE 2023-01-02] user: I live in Lisbon."]
    s = lc.score_current(lines, "Berlin", ["Lisbon"])
    assert s == {"current_first": True, "stale_as_current": False, "stale_unmarked": True, "evidence": True}


def test_stale_first_and_undated_fails() -> None:
    lines = ["[VECTORS] user: I live in Lisbon.", "[GRAPH] The user moved to Berlin."]
    s = lc.score_current(lines, "Berlin", ["Lisbon"])
    assert s["current_first"] is False and s["stale_as_current"] is True and s["evidence"] is True


def test_stale_dated_later_than_current_is_not_marked() -> None:
    # a stored row dated when it was written (not when it was said) does not mark it as earlier
    lines = ["[GRAPH 2023-05-01] The user moved to Berlin.", "[VECTORS 2026-11-25] user: I live in Lisbon."]
    s = lc.score_current(lines, "Berlin", ["Lisbon"])
    assert s["current_first"] is True and s["stale_as_current"] is True


def test_missing_current_value_fails_and_past_cue_marks() -> None:
    s = lc.score_current(["(1 Feb 2023) User: Marta and I broke up."], "Jonas", ["Marta"])
    assert s == {"current_first": False, "stale_as_current": False, "stale_unmarked": False, "evidence": False}
    s = lc.score_current(["(1 Feb 2023) User: Marta and I broke up; I'm seeing Jonas now."], "Jonas", ["Marta"])
    assert s["current_first"] and not s["stale_as_current"]
    assert lc.score_current([], "Jonas", ["Marta"])["current_first"] is False


def test_opinion_values_are_read_by_polarity() -> None:
    assert lc.polarities("I can't stand sushi anymore.") == {"neg"}
    assert lc.polarities("The user does not like sushi.") == {"neg"}
    assert lc.polarities("I used to hate camping but now I love it.") == {"neg", "pos"}
    s = lc.score_current(["[SCENE] user: I love sushi."], "neg:sushi", ["pos:sushi"])
    assert s["stale_as_current"] and not s["evidence"] and not s["current_first"]
    s = lc.score_current(["[GRAPH] The user used to love sushi but can't stand it anymore.", "[SCENE] user: I love sushi."],
                         "neg:sushi", ["pos:sushi"])
    assert s["current_first"] and s["evidence"] and s["stale_as_current"]


def test_values_match_whole_words_only() -> None:
    assert lc.mentions("I work as a data analyst.", "data analyst")
    assert lc.mentions("Marta's birthday is Sunday.", "Marta")
    assert not lc.mentions("Martha came over.", "Marta")
    assert not lc.mentions("The Berliner is great.", "Berlin")


def test_when_needs_the_change_date_on_the_line() -> None:
    day = dt.date(2023, 3, 6)
    assert lc.score_when(["[GRAPH 2023-03-06] The user moved to Ghent."], "Ghent", day) == {"evidence": True, "dated": True}
    assert lc.score_when(["(6 March 2023) User: I moved to Ghent."], "Ghent", day)["dated"]
    assert lc.score_when(["[GRAPH] The user moved to Ghent."], "Ghent", day) == {"evidence": True, "dated": False}
    assert lc.score_when(["[GRAPH 2026-11-25] The user moved to Ghent."], "Ghent", day)["dated"] is False
    assert lc.score_when(["[GRAPH 2023-03-06] The user moved to Turin."], "Ghent", day)["evidence"] is False


def test_packing_and_line_reading() -> None:
    lines = lc.pack_hits(["a" * 500, "b" * 500, "c" * 300], budget=900)
    assert lines == ["a" * 500, "c" * 300]  # b does not fit and is skipped, c still does
    assert len(lc.HEADER) + sum(len(x) + 1 for x in lines) <= 900
    prompt = ("Memory context:\n[GRAPH 2023-01-02] The user lives in Lisbon.\n<<<UNTRUSTED_ab12cd34>>>\n"
              "Source: Memory (trust: learned)\n---\n[SCENE] user: hi\n<<<END_UNTRUSTED_ab12cd34>>>")
    assert lc.context_lines(prompt) == ["[GRAPH 2023-01-02] The user lives in Lisbon.", "[SCENE] user: hi"]


def test_ours_scores_every_question(tmp_path: Path) -> None:
    users = lc.generate(4, seed=5)
    inner = resolve_embedder("fake")
    assert inner is not None
    embedder = SharedEmbedder(inner, {}, label="fake")
    tallies = lc.run_ours(users, [], embedder, tmp_path, ["manowar", "manowar-nodates"])
    assert [t.status for t in tallies] == ["ok", "ok"]
    changed = sum(1 for u in users for p in u.probes if p.changed)
    when = sum(1 for u in users for p in u.probes if p.category == "when")
    for tally in tallies:
        assert tally.n("ALL changed") == changed and tally.n("when") == when
        assert "superseded" in tally.notes[0]
    undated = tallies[1]
    assert undated.pct("when", "dated") == 0.0  # dates off: no line carries one
    assert lc.report(tallies, "header").count("ALL changed") == 2


@pytest.mark.parametrize("name", ["dense"])
def test_a_peer_runs_and_a_missing_one_is_skipped(tmp_path: Path, name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    users = lc.generate(3, seed=5)
    inner = resolve_embedder("fake")
    assert inner is not None
    embedder = SharedEmbedder(inner, {}, label="fake")
    tally = lc.run_peer(name, users, [], embedder, tmp_path)
    assert tally.status == "ok" and tally.n("when") == sum(1 for u in users for p in u.probes if p.category == "when")
    assert tally.pct("when", "dated") == tally.pct("when", "evidence")  # every peer line carries its turn's date
    monkeypatch.setitem(lc.PEER_NEEDS, name, ("no_such_module_here",))
    assert lc.run_peer(name, users, [], embedder, tmp_path).status.startswith("skipped: no_such_module_here")


def test_rule_coverage_has_a_row_per_paraphrase() -> None:
    rows = lc.rule_coverage()
    assert [r["paraphrase"] for r in rows] == [tid for bank in lc.CHANGE.values() for tid, _ in bank]
    for row in rows:
        assert 0 <= row["superseded"] <= row["after"] and 0 <= row["new_value_fact"] <= row["after"]
    moved = next(r for r in rows if r["paraphrase"] == "res-moved-to")  # "lives in" then "moved to": documented
    assert moved["superseded"] >= 1 and moved["new_value_fact"] == moved["after"]
