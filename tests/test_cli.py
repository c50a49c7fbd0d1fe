"""The ``manowar`` command line, through click's CliRunner and through ``main()``."""

from __future__ import annotations

import json
import re
import sys

import pytest
from click.testing import CliRunner

from manowar_memory.cli import cli, main


@pytest.fixture
def runner(tmp_path, monkeypatch) -> CliRunner:
    monkeypatch.setenv("MANOWAR_HOME", str(tmp_path / "home"))  # never touch ~/.manowar
    return CliRunner()


@pytest.fixture
def store_url(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'm.db'}"


def test_demo_with_the_fake_embedder(runner: CliRunner) -> None:
    result = runner.invoke(cli, ["demo", "--embedder", "fake"])
    assert result.exit_code == 0, result.output
    assert "Memory context:" in result.output
    assert "Facts extracted" in result.output
    assert re.search(r"\[GRAPH \d{4}-\d\d-\d\d\] ", result.output)  # dated lines
    assert "Lisbon" in result.output


def test_demo_keyword_only_explains_decisions(runner: CliRunner) -> None:
    result = runner.invoke(cli, ["demo", "--embedder", "none", "--explain", "--budget", "300"])
    assert result.exit_code == 0, result.output
    assert "vector lane disabled: no embedder configured" in result.output
    assert "kept" in result.output
    assert "/300 chars" in result.output


def test_remember_then_recall_round_trip(runner: CliRunner, store_url: str) -> None:
    stored = runner.invoke(cli, ["remember", "User likes oolong tea", "--agent", "a1", "--user", "u1",
                                 "--type", "preference", "--store", store_url])
    assert stored.exit_code == 0, stored.output
    assert stored.output.startswith("stored vec_") and "(preference)" in stored.output
    again = runner.invoke(cli, ["remember", "User likes oolong tea", "--agent", "a1", "--user", "u1",
                                "--store", store_url])
    assert again.output.startswith("reinforced vec_")
    recalled = runner.invoke(cli, ["recall", "what tea does the user drink?", "--agent", "a1", "--user", "u1",
                                   "--store", store_url, "--explain"])
    assert recalled.exit_code == 0, recalled.output
    assert "Memory context:\n<<<UNTRUSTED_" in recalled.output
    assert re.search(r"Source: Memory \(trust: learned\)\n---\n\[GRAPH \d{4}-\d\d-\d\d\] User likes oolong tea\n<<<END_UNTRUSTED_",
                     recalled.output)
    assert "kept" in recalled.output
    # another user of the same agent sees nothing
    other = runner.invoke(cli, ["recall", "tea", "--agent", "a1", "--user", "u2", "--store", store_url])
    assert other.exit_code == 0 and "(no memory matched)" in other.output


def test_recall_json_output(runner: CliRunner, store_url: str) -> None:
    runner.invoke(cli, ["remember", "User plays the oboe", "--agent", "a1", "--store", store_url])
    result = runner.invoke(cli, ["recall", "oboe", "--agent", "a1", "--store", store_url, "--json",
                                 "--layers", "graph", "--embedder", "fake"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert re.fullmatch(r"\[GRAPH \d{4}-\d\d-\d\d\] User plays the oboe", data["prompt"].split("\n")[4])
    assert data["prompt"].split("\n")[1].startswith("<<<UNTRUSTED_")
    assert data["totals"] == {"graph": 1}
    assert data["context_usage"]["items"] == 1


def test_ingest_and_stats(runner: CliRunner, store_url: str, tmp_path) -> None:
    path = tmp_path / "memories.jsonl"
    path.write_text('{"content": "The wiki lives at wiki.internal"}\n\n"Standup is at 9:30"\n')
    ingested = runner.invoke(cli, ["ingest", str(path), "--agent", "a1", "--store", store_url])
    assert ingested.exit_code == 0, ingested.output
    assert "ingested 2 memories" in ingested.output
    stats = runner.invoke(cli, ["stats", "--store", store_url])
    assert stats.exit_code == 0
    data = json.loads(stats.output)
    assert data["totalVectors"] == 2 and data["bySource"] == {"knowledge": 2}
    assert json.loads(runner.invoke(cli, ["stats", "--store", store_url, "--agent", "nobody"]).output)["totalVectors"] == 0


def test_ingest_rejects_a_line_that_is_not_json(runner: CliRunner, store_url: str, tmp_path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"content": "ok"}\nnot json\n')
    result = runner.invoke(cli, ["ingest", str(path), "--agent", "a1", "--store", store_url])
    assert result.exit_code == 2
    assert "line 2" in result.output and "not JSON" in result.output


def test_default_store_lives_under_manowar_home(runner: CliRunner, tmp_path) -> None:
    result = runner.invoke(cli, ["remember", "Home fact", "--agent", "a1"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "home" / "memory.db").exists()


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["remember", "x"], "Missing option '--agent'"),
        (["remember", "x", "--agent", "a", "--type", "hobby"], "Invalid value for '--type'"),
        (["remember", "x", "--agent", "a", "--confidence", "2"], "Invalid value for '--confidence'"),
        (["recall", "x", "--agent", "a", "--budget", "10"], "Invalid value for '--budget'"),
        (["recall", "x", "--agent", "a", "--max-items", "0"], "Invalid value for '--max-items'"),
        (["ingest", "/does/not/exist.jsonl", "--agent", "a"], "does not exist"),
        (["recall"], "Missing argument 'QUERY'"),
        (["frobnicate", "x"], "No such command 'frobnicate'"),
    ],
)
def test_bad_arguments_give_a_clear_usage_error(runner: CliRunner, args: list[str], fragment: str) -> None:
    result = runner.invoke(cli, args)
    assert result.exit_code == 2
    assert fragment in result.output


def _run_main(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "argv", ["manowar", *args])
    with pytest.raises(SystemExit) as info:
        main()
    out = capsys.readouterr()
    return info.value.code, out.out, out.err


def test_main_turns_library_errors_into_one_line_and_exit_2(monkeypatch, capsys, store_url: str) -> None:
    code, out, err = _run_main(monkeypatch, capsys, "recall", "   ", "--agent", "a1", "--store", store_url)
    assert code == 2
    assert err.strip() == "error: query is required: pass the user's message or question as a non-empty string"
    assert "Traceback" not in err and out == ""


def test_main_reports_a_bad_store_url(monkeypatch, capsys) -> None:
    code, _, err = _run_main(monkeypatch, capsys, "stats", "--store", "postgres://nowhere")
    assert code == 2 and err.startswith("error: unknown store 'postgres://nowhere'")


def test_main_reports_usage_errors_with_their_exit_code(monkeypatch, capsys) -> None:
    code, _, err = _run_main(monkeypatch, capsys, "remember", "x")
    assert code == 2 and "Missing option '--agent'" in err


def test_main_succeeds_with_exit_code_zero_or_none(monkeypatch, capsys, store_url: str) -> None:
    monkeypatch.setattr(sys, "argv", ["manowar", "remember", "Fact via main", "--agent", "a1", "--store", store_url])
    try:
        main()
        code = 0
    except SystemExit as exc:  # click may exit 0 explicitly
        code = exc.code or 0
    assert code == 0
    assert capsys.readouterr().out.startswith("stored vec_")


class _HardExit(Exception):
    """Raised by the patched ``os._exit``: the process would have left without finalizing."""


@pytest.mark.parametrize(("args", "expected"), [(("stats", "--store", "postgres://nowhere"), 2), (("--help",), 0)])
def test_main_leaves_without_finalizing_once_its_command_loaded_temporals_core(
        monkeypatch, capsys, args: tuple[str, ...], expected: int) -> None:
    # temporalio/sdk-python#300: Temporal's Rust threads can abort a finalizing interpreter
    # (CI saw the worker exit with SIGABRT after "worker stopped"), so main() skips finalization then
    import os

    import manowar_memory.cli as cli_module

    codes: list[int] = []

    def hard_exit(code: int) -> None:
        codes.append(code)
        raise _HardExit

    def loading_cli(*a: object, **kw: object) -> object:  # the command loads the core, as `worker` does
        monkeypatch.setitem(sys.modules, "temporalio.bridge.temporal_sdk_bridge", sys)
        return cli(*a, **kw)

    monkeypatch.delitem(sys.modules, "temporalio.bridge.temporal_sdk_bridge", raising=False)
    monkeypatch.setattr(cli_module, "cli", loading_cli)
    monkeypatch.setattr(os, "_exit", hard_exit)
    monkeypatch.setattr(sys, "argv", ["manowar", *args])
    with pytest.raises(_HardExit):
        main()
    assert codes == [expected]
    out = capsys.readouterr()
    assert ("error: unknown store" in out.err) if expected else ("Usage:" in out.out)


def test_main_ends_normally_in_a_process_that_had_loaded_temporals_core_before(monkeypatch, capsys) -> None:
    # a test worker that ran Temporal tests earlier calls main() in-process: ending that process
    # without finalizing took two CI workers down ("node down: Not properly terminated")
    import os

    def hard_exit(code: int) -> None:
        raise AssertionError(f"main() would have ended the host process (os._exit({code}))")

    monkeypatch.setitem(sys.modules, "temporalio.bridge.temporal_sdk_bridge", sys)
    monkeypatch.setattr(os, "_exit", hard_exit)
    code, _, err = _run_main(monkeypatch, capsys, "stats", "--store", "postgres://nowhere")
    assert code == 2 and err.startswith("error: unknown store")


def test_version_option(runner: CliRunner) -> None:
    result = runner.invoke(cli, ["--version"])
    assert result.exit_code == 0 and "0.1.0" in result.output


# what each sample question of the demo asks for: text that must be in its packed context
DEMO_ANSWERS = {
    "Which programming language does Maya prefer for backend work?": ["Python"],
    "What kind of code examples does the user like?": ["short code examples with type hints"],
    "Where does Maya live and who lives nearby?": ["Lisbon", "Ada lives nearby in Sintra"],
    "Is there any food allergy I should know about?": ["allergic to peanuts"],
    "What happened with Redis during the outage?": ["evicted the session keys"],
    "What is Maya's upcoming talk about?": ["PyCon Lisbon", "event sourcing"],
}


def _demo_sections(output: str) -> dict[str, str]:
    """Question -> the packed context the demo printed for it."""
    sections = {}
    for part in output.split("\n? ")[1:]:
        question, _, rest = part.partition("\n")
        sections[question] = rest.split("<<<END_UNTRUSTED_")[0]
    return sections


@pytest.mark.local_model
@pytest.mark.parametrize("embedder", ["local", "fake"])
@pytest.mark.parametrize("explain", [[], ["--explain"]], ids=["plain", "explain"])
def test_demo_answers_each_of_its_questions(runner: CliRunner, embedder: str, explain: list[str]) -> None:
    result = runner.invoke(cli, ["demo", "--embedder", embedder, *explain])
    assert result.exit_code == 0, result.output
    sections = _demo_sections(result.output)
    assert sorted(sections) == sorted(DEMO_ANSWERS)
    for question, answers in DEMO_ANSWERS.items():
        for answer in answers:
            assert answer in sections[question], f"{question!r}: {answer!r} is not in its packed context"
    # the talk is a fact of its own, in the third person
    assert "[event] The user is speaking at PyCon Lisbon in March about event sourcing." in result.output


def test_recall_reports_the_true_difference_with_the_raw_texts(runner: CliRunner, store_url: str) -> None:
    """A short memory packs longer than it is (the wrapper and headers): the line says by how much,
    never "saved 0"; a long one packed under a small budget saves characters, and says how many."""
    pattern = r"(\d+)/\d+ chars \(raw (\d+), (?:saved (\d+)|packed is (\d+) chars longer)"
    args = ["--agent", "a1", "--user", "u1", "--store", store_url]
    assert runner.invoke(cli, ["remember", "User likes oolong tea", *args]).exit_code == 0
    short = runner.invoke(cli, ["recall", "which tea?", *args])
    assert short.exit_code == 0, short.output
    packed, raw, saved, longer = re.search(pattern, short.output).groups()  # type: ignore[union-attr]
    assert saved is None and "saved 0" not in short.output
    assert int(longer) == int(packed) - int(raw) > 0
    assert runner.invoke(cli, ["remember", "User likes oolong tea " + "and green tea " * 40, *args]).exit_code == 0
    cut = runner.invoke(cli, ["recall", "which tea?", "--budget", "300", *args])
    assert cut.exit_code == 0, cut.output
    packed, raw, saved, longer = re.search(pattern, cut.output).groups()  # type: ignore[union-attr]
    assert longer is None and int(saved) == int(raw) - int(packed) > 0


def test_the_same_lines_from_another_file_are_not_stored_again(runner: CliRunner, store_url: str, tmp_path) -> None:
    lines = '"Standup is at 9:30"\n{"content": "The wiki lives at wiki.internal"}\n"Deploys happen on Thursdays"\n'
    for name in ("notes.jsonl", "copy.jsonl"):
        (tmp_path / name).write_text(lines)
    first = runner.invoke(cli, ["ingest", str(tmp_path / "notes.jsonl"), "--agent", "a1", "--store", store_url])
    assert first.exit_code == 0, first.output
    assert "ingested 3 memories (3 new, 0 already stored)" in first.output
    (tmp_path / "more.jsonl").write_text(lines + '"The office is in Lyon"\n')
    for name in ("copy.jsonl", "more.jsonl"):
        again = runner.invoke(cli, ["ingest", str(tmp_path / name), "--agent", "a1", "--store", store_url])
        assert again.exit_code == 0, again.output
    assert "ingested 4 memories (1 new, 3 already stored)" in again.output
    assert json.loads(runner.invoke(cli, ["stats", "--store", store_url]).output)["totalVectors"] == 4
    other = runner.invoke(cli, ["ingest", str(tmp_path / "copy.jsonl"), "--agent", "a1", "--user", "u2",
                                "--store", store_url])
    assert "(3 new, 0 already stored)" in other.output  # keys are per scope: another user's copy is stored


@pytest.mark.parametrize(("line", "fragments"), [
    ('{"text": "Standup is at 9:30"}', ['has "text" but no "content"', '{"content": "Standup is at 9:30"}']),
    ('{"page_content": "Standup", "metadata": {}}', ['has "page_content" but no "content"']),
    ('{"metadata": {"a": 1}}', ['has no "content"', '{"content": "..."}']),
    ('{"content": "x", "tags": ["a"]}', ["unknown field(s) ['tags']", 'under "metadata"']),
    ('{"content": "x", "created_at": "yesterday"}', ['field "created_at" is invalid']),
    ('{"content": "   "}', ['has an empty "content"']),
    ("[1, 2]", ["is a JSON list"]),
])
def test_a_bad_line_names_its_line_number_and_what_to_write(
        monkeypatch, capsys, store_url: str, tmp_path, line: str, fragments: list[str]) -> None:
    path = tmp_path / "memories.jsonl"
    path.write_text(f'"A good first line"\n\n{line}\n')
    code, _, err = _run_main(monkeypatch, capsys, "ingest", str(path), "--agent", "a1", "--store", store_url)
    assert code == 2 and err.startswith(f"error: line 3 of {path}"), err
    for fragment in fragments:
        assert fragment in err, err
    assert "validation error" not in err and "item 2" not in err  # no raw pydantic text, no 0-based item number
    assert json.loads(runner_stats(store_url))["totalVectors"] == 0  # a bad line stores nothing


def runner_stats(store_url: str) -> str:
    return CliRunner().invoke(cli, ["stats", "--store", store_url]).output


def test_the_commands_default_to_the_environment_s_embedder(runner: CliRunner, store_url: str, monkeypatch) -> None:
    from manowar_memory import MemoryEngine, Scope

    monkeypatch.setenv("MANOWAR_EMBEDDER", "fake:16")
    assert runner.invoke(cli, ["remember", "User likes oolong tea", "--agent", "a1", "--store", store_url]).exit_code == 0
    assert runner.invoke(cli, ["remember", "User plays oboe", "--agent", "a1", "--store", store_url,
                               "--embedder", "none"]).exit_code == 0
    with MemoryEngine(store=store_url, embedder=None) as engine:
        rows = {r.content: r.embedding_model for r in engine.scoped(Scope(agent_wallet="a1")).owned()}
    assert rows == {"User likes oolong tea": "fake:16", "User plays oboe": None}


def test_notes_index_without_paths_says_what_to_pass(tmp_path) -> None:
    base = ["notes", "--project", str(tmp_path), "--store", f"sqlite:///{tmp_path / 'm.db'}", "--embedder", "none"]
    result = CliRunner().invoke(cli, [*base, "index"], env={"MANOWAR_PROJECT_ID": "cli-index"})
    assert result.exit_code == 2, result.output
    assert "pass the Markdown files or directories to index" in result.output
    assert "manowar notes index docs README.md" in result.output and "index_paths" not in result.output
