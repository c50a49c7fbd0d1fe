"""The documentation's shell blocks run as written: every ``bash``/``sh``/``shell``/``console`` block
of README.md and docs/ runs, on a copy of the checkout, and must exit 0.

A block runs with ``bash -e -o pipefail`` in a throwaway copy of the checkout's files (tracked and
untracked, not ignored: what a fresh clone plus your edits holds), with this interpreter as
``python``/``python3`` and a ``manowar`` command on ``PATH``, ``MANOWAR_HOME`` in the test's
directory, no model downloads, and the servers' addresses the suite checked. The only rewrites
are addresses: the default MongoDB, Redis and Temporal addresses become the environment's, and a
``manowar serve`` block listens on a free port instead of 8080 (parallel runs share the machine).
Every process a block leaves (a server it put in the background) is stopped after it.

A ``console`` block's ``$ `` lines are the commands, and each other line is output that must
appear in what they print. A ``json`` block right after a shell block (nothing but blank lines
between) shows what it prints: the printed JSON must hold the keys it shows, at every level (the
values, such as a reader's paths, differ).

An HTML comment on the line before a block, which neither GitHub nor the site shows, says more:

* ``<!-- docs-test: skip (REASON) -->``: not run, for a stated reason (it installs from PyPI,
  needs root, runs for hours, needs the LoCoMo file, ...). A block neither run nor marked fails
  the test, so a new block is never skipped silently.

Every block, run or skipped, is also read: the scripts and paths it names exist, every ``--flag``
it gives (or its comments mention for) ``manowar``, a ``benchmarks/`` script or a ``scripts/``
script is one that command knows, its ``pip install`` extras are defined, its wheels are the
ones this checkout builds and its torch is the one the tests run.
* ``<!-- docs-test: requires mongo redis -->``: the block uses those servers; its test gets their
  markers (fails in CI when one is missing instead of skipping).
* ``<!-- docs-test: stop after "TEXT" -->``: the block serves until stopped (a worker); once its
  output shows TEXT the test interrupts it (SIGINT, Ctrl-C) and it must exit 0.

Directives combine with ``;``: ``<!-- docs-test: requires temporal; stop after "worker ready" -->``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import tomllib
import uuid
from dataclasses import dataclass
from pathlib import Path

import click
import pytest

ROOT = Path(__file__).resolve().parent.parent
SHELLS = {"bash", "sh", "shell", "console", "zsh"}
SERVERS = {"mongo", "redis", "temporal"}
BLOCK_TIMEOUT = 300  # seconds: a block that hangs (a server left in the foreground) fails, not the run

_FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})\s*(?P<info>.*)$")
_DIRECTIVE = re.compile(r"^\s*<!--\s*docs-test:\s*(?P<body>.*?)\s*-->\s*$")
_SKIP = re.compile(r"^skip\s*\((?P<reason>.+)\)$")
_REQUIRES = re.compile(r"^requires\s+(?P<servers>[\w ]+)$")
_STOP = re.compile(r'^stop after\s+"(?P<text>[^"]+)"$')
DOCS_DATABASE = "manowar_docs_shell_"  # + a random suffix: the database a block's MongoDB URL names instead


@dataclass(frozen=True)
class ShellBlock:
    """One shell block of a page: where it is, its text, and what its marker comment says."""

    page: str
    line: int  # 1-based line of the opening fence
    language: str
    text: str
    skip: str | None  # the reason it is not run
    requires: frozenset[str]
    ready: str | None  # the output after which the test stops a block that serves until stopped
    unknown: tuple[str, ...]  # the marker's directives this test does not know
    shown: str | None = None  # the JSON block right after it: what it prints

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def _language(info: str) -> str:
    info = info.strip()
    if info.startswith("{"):
        match = re.match(r"\{\s*\.?([\w+-]+)", info)
        return match.group(1).lower() if match else ""
    return info.split()[0].lower() if info else ""


def _page_blocks(path: Path, page: str) -> list[ShellBlock]:
    lines = path.read_text().splitlines()
    blocks: list[ShellBlock] = []
    previous_shell_end = -1  # 1-based line of the last shell block's closing fence
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        fence, indent = opening["fence"], len(opening["indent"])
        end = i + 1
        while end < len(lines):
            closing = _FENCE.match(lines[end])
            if (closing and closing["fence"][0] == fence[0] and len(closing["fence"]) >= len(fence)
                    and not closing["info"].strip()):
                break
            end += 1
        language = _language(opening["info"])
        if language == "json" and blocks and previous_shell_end > 0 \
                and not any(line.strip() for line in lines[previous_shell_end:i]):
            blocks[-1] = dataclasses.replace(blocks[-1], shown="\n".join(lines[i + 1:end]))
        if language in SHELLS:
            body = [line[indent:] if line[:indent].isspace() else line.lstrip() for line in lines[i + 1:end]]
            before = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
            directive = _DIRECTIVE.match(before)
            skip, requires, ready, unknown = None, frozenset[str](), None, []
            for part in re.split(r";(?![^()]*\))", directive["body"]) if directive else []:  # not within (...)
                part = part.strip()
                if skipped := _SKIP.match(part):
                    skip = skipped["reason"].strip()
                elif needed := _REQUIRES.match(part):
                    requires = frozenset(needed["servers"].split())
                elif stop := _STOP.match(part):
                    ready = stop["text"]
                else:
                    unknown.append(part)
            blocks.append(ShellBlock(page, i + 1, language, "\n".join(body) + "\n", skip, requires, ready,
                                     tuple(unknown)))
            previous_shell_end = end + 1
        i = end + 1
    return blocks


def _blocks() -> list[ShellBlock]:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    return [block for page in pages for block in _page_blocks(page, str(page.relative_to(ROOT)))]


BLOCKS = _blocks()
RUN = [b for b in BLOCKS if b.skip is None]


def test_every_shell_block_runs_or_says_why_not() -> None:
    """A block without a skip marker is run by test_shell_block_runs; a marker says what it means."""
    assert any(b.page == "README.md" for b in BLOCKS) and RUN, "no shell blocks found: the parser is broken"
    for block in BLOCKS:
        assert not block.unknown, (f"{block.id}: unknown docs-test directive {block.unknown}; write 'skip (REASON)', "
                                   "'requires mongo redis' or 'stop after \"TEXT\"'")
        assert block.requires <= SERVERS, f"{block.id}: requires names unknown servers; use {sorted(SERVERS)}"
        if block.skip is not None:
            assert block.skip.strip(), f"{block.id}: a skipped block must say why: <!-- docs-test: skip (REASON) -->"
        if block.language == "console":
            assert _script(block)[0].strip(), f"{block.id}: a console block shows its commands after '$ '"


def test_the_parser_reads_markers_and_fences(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("Text\n\n<!-- docs-test: skip (needs the network) -->\n```bash\npip install x\n```\n\n"
                    "```python\nprint('```bash inside')\n```\n\n"
                    '<!-- docs-test: requires mongo; stop after "ready: x" -->\n\n~~~sh\nmanowar stats\n~~~\n\n'
                    "!!! note\n    ```console\n    $ echo hi\n    hi\n    ```\n\n"
                    "<!-- docs-test: skp (typo) -->\n```shell\nls\n```\n\n"
                    "<!-- docs-test: skip (slow; needs root) -->\n```zsh\nsudo ls\n```\n\n```json\n{\"a\": 1}\n```\n"
                    "\n```bash\nls\n```\nText.\n\n```json\n{}\n```\n")
    found = _page_blocks(page, "page.md")
    assert [(b.line, b.language, b.skip, sorted(b.requires), b.ready, b.unknown) for b in found] == [
        (4, "bash", "needs the network", [], None, ()), (14, "sh", None, ["mongo"], "ready: x", ()),
        (19, "console", None, [], None, ()), (25, "shell", None, [], None, ("skp (typo)",)),
        (30, "zsh", "slow; needs root", [], None, ()), (38, "bash", None, [], None, ())]
    assert found[0].text == "pip install x\n" and found[2].text == "$ echo hi\nhi\n"
    assert _script(found[2]) == ("echo hi\n", ["hi"])
    assert [b.shown for b in found] == [None, None, None, None, '{"a": 1}', None]  # JSON right after a block
    assert _missing_keys({"a": {"b": [1], "c": "x"}}, {"a": {"b": [2, 3], "c": "y", "d": 1}}) == []
    assert _missing_keys({"a": {"b": [1], "c": "x"}}, {"a": {"b": "1"}}) == ["a.b as a list", "a.c"]


# ---------------------------------------------------------------- running a block


def _checkout_files() -> list[str]:
    """The checkout's files (tracked, and untracked but not ignored), as a fresh clone plus the
    working tree's edits holds them."""
    try:
        listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                                cwd=ROOT, capture_output=True, check=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        skipped = {".git", ".venv", "site", "__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache"}
        return [str(p.relative_to(ROOT)) for p in ROOT.rglob("*")
                if p.is_file() and not skipped.intersection(p.relative_to(ROOT).parts)]
    return [name for name in listed.decode().split("\0") if name and (ROOT / name).is_file()]


def _copy_checkout(into: Path) -> Path:
    for name in _checkout_files():
        target = into / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, target)
    return into


def _tools(into: Path) -> Path:
    """A bin directory with this interpreter as python/python3 and the `manowar` command (the
    console script of an install, run from this checkout's code)."""
    into.mkdir()
    for name, command in {"python": f'"{sys.executable}"', "python3": f'"{sys.executable}"',
                          "manowar": f'"{sys.executable}" -m manowar_memory.cli'}.items():
        script = into / name
        script.write_text(f'#!/bin/sh\nexec {command} "$@"\n')
        script.chmod(0o755)
    return into


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _addresses(text: str, request: pytest.FixtureRequest, database: str) -> str:
    """The docs' default server addresses, replaced by the ones this run uses (and the docs'
    MongoDB database by the test's own)."""
    mongo, redis_url, temporal = "mongodb://127.0.0.1:27017", "redis://127.0.0.1:6379/0", "127.0.0.1:7233"
    if mongo in text:
        host = re.match(r"mongodb://[^/?]+", request.getfixturevalue("mongo_uri"))
        assert host is not None, "MONGODB_URI is not a mongodb:// URL"
        text = re.sub(re.escape(mongo) + r"/\w+", f"{host.group(0)}/{database}", text).replace(mongo, host.group(0))
    if redis_url in text:
        text = text.replace(redis_url, request.getfixturevalue("redis_url"))
    if temporal in text:
        text = text.replace(temporal, request.getfixturevalue("temporal_address"))
    if "manowar serve" in text:
        port = _free_port()
        text = text.replace("manowar serve", f"manowar serve --port {port}").replace("127.0.0.1:8080", f"127.0.0.1:{port}")
    return text


def _script(block: ShellBlock) -> tuple[str, list[str]]:
    """The commands to run, and the output lines a console block shows."""
    if block.language != "console":
        return block.text, []
    commands: list[str] = []
    expected: list[str] = []
    for line in block.text.splitlines():
        if line.startswith("$ "):
            commands.append(line[2:])
        elif commands and commands[-1].endswith("\\"):
            commands.append(line)
        elif line.strip():
            expected.append(line.strip())
    return "\n".join(commands) + "\n", expected


def _run(script: Path, cwd: Path, env: dict[str, str], ready: str | None) -> tuple[int | None, str]:
    """Run the block's script; with ``ready``, interrupt it (SIGINT) once its output shows that.
    Whatever it left running is killed. The exit status is None when it ran past BLOCK_TIMEOUT."""
    proc = subprocess.Popen(["bash", "-e", "-o", "pipefail", str(script)], cwd=cwd, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    stdout = proc.stdout
    assert stdout is not None
    output: list[str] = []
    reader = threading.Thread(target=lambda: output.extend(iter(stdout.readline, "")), daemon=True)
    reader.start()
    returncode: int | None = None
    try:
        if ready is not None:
            shown = threading.Event()
            watcher = threading.Thread(target=lambda: _wait_for(output, ready, proc, shown), daemon=True)
            watcher.start()
            watcher.join(BLOCK_TIMEOUT)
            if shown.is_set():
                os.killpg(proc.pid, signal.SIGINT)
        returncode = proc.wait(timeout=BLOCK_TIMEOUT)
    except subprocess.TimeoutExpired:
        pass
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        reader.join(30)
    return returncode, "".join(output)


def _wait_for(output: list[str], text: str, proc: subprocess.Popen[str], shown: threading.Event) -> None:
    while proc.poll() is None and not shown.is_set():
        if text in "".join(output):
            shown.set()
        else:
            time.sleep(0.1)


def _params() -> list[object]:
    return [pytest.param(b, id=b.id, marks=[getattr(pytest.mark, s) for s in sorted(b.requires)]) for b in RUN]


@pytest.mark.slow
@pytest.mark.parametrize("block", _params())
def test_shell_block_runs(block: ShellBlock, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    if block.unknown:  # a mistyped skip must not run the block (it may be the whole suite)
        pytest.fail(f"{block.id}: unknown docs-test directive {block.unknown}: not run", pytrace=False)
    repo = _copy_checkout(tmp_path / "repo")
    tools = _tools(tmp_path / "bin")
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTEST")}
    env.pop("MANOWAR_EMBEDDER", None)  # the suite's keyword-only default: a reader's shell has none
    env.update({
        "PATH": f"{tools}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONPATH": os.pathsep.join(str(repo / p) for p in
                                      ("", "integrations/langchain_manowar", "integrations/llama_index_manowar")),
        "MANOWAR_HOME": str(tmp_path / "home"), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
    })
    for server in block.requires:  # the addresses the suite checked, as a deployment would set them
        variable, fixture = {"mongo": ("MONGODB_URI", "mongo_uri"), "redis": ("REDIS_URL", "redis_url"),
                             "temporal": ("TEMPORAL_ADDRESS", "temporal_address")}[server]
        env[variable] = request.getfixturevalue(fixture)
    text, expected = _script(block)
    script = tmp_path / "block.sh"
    database = DOCS_DATABASE + uuid.uuid4().hex[:8]
    script.write_text(_addresses(text, request, database))
    try:
        returncode, output = _run(script, repo, env, block.ready)
    finally:
        if "mongo" in block.requires:
            _drop_database(request.getfixturevalue("mongo_uri"), database)
    assert returncode == 0, (
        f"{block.id} exited {returncode} (None: still running after {BLOCK_TIMEOUT} s)\n--- block\n{block.text}"
        f"--- output (last 4000 characters)\n{output[-4000:]}")
    if block.ready is not None:
        assert block.ready in output, f"{block.id} stopped before it printed {block.ready!r}:\n{output[-4000:]}"
    if block.shown is not None:
        missing_keys = _missing_keys(json.loads(block.shown), _printed_json(output))
        assert not missing_keys, f"{block.id} prints no {missing_keys}, which the page shows:\n{output[-4000:]}"
    missing = [line for line in expected if line not in output]
    assert not missing, f"{block.id}: the output does not show {missing}\n--- output\n{output[-4000:]}"


def _printed_json(output: str) -> object:
    """The first JSON object the block printed (its output also holds what it said on stderr)."""
    start = re.search(r"^\{", output, re.M)
    assert start is not None, f"the block printed no JSON object:\n{output[-4000:]}"
    return json.JSONDecoder().raw_decode(output[start.start():])[0]


def _missing_keys(shown: object, printed: object, at: str = "") -> list[str]:
    """The keys ``shown`` has, at any level, that ``printed`` lacks (or holds a value of another type)."""
    if not isinstance(shown, dict):
        return [] if type(printed) is type(shown) else [f"{at.rstrip('.') or 'the value'} as a {type(shown).__name__}"]
    if not isinstance(printed, dict):
        return [at or "an object"]
    return [missing for key, value in shown.items()
            for missing in ([f"{at}{key}"] if key not in printed else _missing_keys(value, printed[key], f"{at}{key}."))]


def _drop_database(uri: str, database: str) -> None:
    import pymongo

    client: pymongo.MongoClient[dict[str, object]] = pymongo.MongoClient(uri, serverSelectionTimeoutMS=3000)
    with client:
        client.drop_database(database)


# ---------------------------------------------------------------- what a skipped block names


def _commands(text: str) -> list[tuple[list[str], set[str]]]:
    """The block's commands as words (continuation lines joined, `$ ` prompts dropped, `&&`, `|`,
    `;` and `&` split), each with the flags its line's comment mentions ("# add --schedules to ...");
    a comment on a line of its own speaks of the command before it."""
    joined = re.sub(r"\\\n\s*", " ", text)
    commands: list[tuple[list[str], set[str]]] = []
    for line in joined.splitlines():
        line = line.removeprefix("$ ")
        comment = re.split(r"(?:^|\s)#", line, maxsplit=1)[1:]
        noted = set(re.findall(r"(?<![\w-])--[a-z][\w-]*", comment[0])) if comment else set()
        try:
            words = shlex.split(line, comments=True)
        except ValueError:
            words = line.split()
        current: list[str] = []
        for word in [*words, ";"]:
            if word not in ("&&", "||", "|", ";", "&"):
                current.append(word)
            elif current:
                commands.append((current, set()))
                current = []
        if noted and commands:
            commands[-1][1].update(noted)
    return commands


def _extras(project: Path) -> set[str]:
    data = tomllib.loads((project / "pyproject.toml").read_text())
    return set(data.get("project", {}).get("optional-dependencies", {}))


def _projects() -> dict[str, Path]:
    """The checkout's projects by their wheel's name (``manowar_memory``, ``langchain_manowar``, ...)."""
    found = {}
    for pyproject in [ROOT / "pyproject.toml", *sorted((ROOT / "integrations").glob("*/pyproject.toml"))]:
        name = tomllib.loads(pyproject.read_text())["project"]["name"]
        found[re.sub(r"[-_.]+", "_", name).lower()] = pyproject.parent
    return found


def _check_pinned(block: ShellBlock, arg: str) -> None:
    """A pinned torch is the one the tests run against (scripts/test.sh)."""
    if pinned := re.fullmatch(r"torch==(?P<version>[\w.+]+)", arg):
        tested = re.search(r'^TORCH="torch==(?P<version>[\w.+]+)"', (ROOT / "scripts" / "test.sh").read_text(), re.M)
        assert tested is not None, "scripts/test.sh no longer pins TORCH=\"torch==...\""
        assert pinned["version"] == tested["version"], f"{block.id}: {arg}, but the tests run torch {tested['version']}"


def _manowar_options(words: list[str], siblings: bool = False) -> set[str]:
    """The options of the `manowar` command the words name (with ``siblings``, of every command of
    its group too: a comment may speak of them, "then delete --all")."""
    from manowar_memory.cli import cli

    command: click.Command = cli
    group: click.Group = cli
    for word in words:
        if isinstance(command, click.Group) and word in command.commands:
            group, command = command, command.commands[word]
        elif word.startswith("-"):
            break
    commands = [*group.commands.values(), command] if siblings else [command]
    return {opt for c in commands for param in c.params for opt in (*param.opts, *param.secondary_opts)} | {"--help"}


def _script_help(script: Path, words: list[str]) -> str:
    sub = [words[0]] if words and re.fullmatch(r"[a-z][a-z-]*", words[0]) else []
    run = subprocess.run([sys.executable, str(script), *sub, "--help"], cwd=ROOT, capture_output=True, text=True,
                         timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert run.returncode == 0, f"{script.name} {' '.join(sub)} --help failed: {run.stderr[-2000:]}"
    return run.stdout


def _flags(words: list[str]) -> set[str]:
    return {w.strip("[]").split("=")[0] for w in words if w.strip("[").startswith("--")}


@pytest.mark.parametrize("block", [pytest.param(b, id=b.id, marks=[pytest.mark.slow] if "benchmarks/" in b.text else [])
                                   for b in BLOCKS])  # a benchmark's --help imports its libraries: seconds
def test_block_names_real_things(block: ShellBlock) -> None:
    """A block, run or not, names scripts that exist, extras that are defined and flags its
    commands accept, in the commands and in their comments; what a skipped block installs is what
    this checkout builds and the tests use."""
    for words, noted in _commands(block.text):
        program, args = Path(words[0]).name, words[1:]
        if program in ("python", "python3", "bash", "sh") and args and args[0] != "-m":
            path = ROOT / args[0]
            assert path.is_file(), f"{block.id}: {args[0]} does not exist"
            if program.startswith("python") and args[0].startswith("benchmarks/"):
                help_text = _script_help(path, args[1:])
                unknown = {f for f in _flags(args[1:]) | noted if not re.search(re.escape(f) + r"\b", help_text)}
                assert not unknown, f"{block.id}: {args[0]} accepts no {sorted(unknown)}"
            elif program in ("bash", "sh"):
                unknown = {f for f in _flags(args[1:]) | noted if f not in path.read_text()}
                assert not unknown, f"{block.id}: {args[0]} knows no {sorted(unknown)}"
        elif program == "manowar":
            unknown = (_flags(args) - _manowar_options(args)) | (noted - _manowar_options(args, siblings=True))
            assert not unknown, f"{block.id}: manowar {' '.join(args[:1])} accepts no {sorted(unknown)}"
        elif program in ("pip", "pip3") and args[:1] == ["install"]:
            for arg in args[1:]:
                _check_pinned(block, arg)
                local = re.fullmatch(r"(?P<path>\.|[\w./-]*/[\w.-]+?)(?:\[(?P<extras>[\w,-]+)\])?", arg)
                if arg.startswith("-") or local is None:
                    continue
                if wheel := re.fullmatch(r"(?:[\w./-]*/)?(?P<name>\w+)-(?P<version>[^-]+)-[^/]*\.whl", local["path"]):
                    project = _projects().get(wheel["name"].lower())
                    assert project is not None, f"{block.id}: no project of this checkout builds {arg}"
                    version = tomllib.loads((project / "pyproject.toml").read_text())["project"]["version"]
                    assert wheel["version"] == version, f"{block.id}: {arg} is not version {version}"
                else:
                    project = ROOT / local["path"]
                assert (project / "pyproject.toml").is_file(), f"{block.id}: {local['path']} is not a project"
                extras = set((local["extras"] or "").split(",")) - {""}
                assert extras <= _extras(project), f"{block.id}: {arg} names undefined extras {extras - _extras(project)}"
