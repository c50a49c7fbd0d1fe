"""Project notes for coding agents (manowar_memory.notes), on SQLite and MongoDB: identity, scopes,
notes, promotion, deprecation, Markdown indexing, compact cards, hydration and relations."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner

from manowar_memory import InvalidInputError, MemoryEngine, NotFoundError, Scope, memory_tools
from manowar_memory.cli import cli
from manowar_memory.errors import ToolCallError
from manowar_memory.notes import (
    GlobalWriteError,
    ProjectIdentity,
    ProjectNotes,
    compressed_summary,
    key_points,
    normalize_remote,
    parse_markdown,
    resolve_project,
)
from manowar_memory.notes.cards import lexical_bonus
from manowar_memory.notes.fusion import gated_fusion
from manowar_memory.notes.tools import NOTES_TOOL_SPECS


@pytest.fixture
def engine(engine_on_each_store: MemoryEngine) -> MemoryEngine:
    return engine_on_each_store


def _ident(root: Path, pid: str = "proj-one") -> ProjectIdentity:
    return ProjectIdentity(pid, pid, str(root), "override", pid)


@pytest.fixture
def notes(engine: MemoryEngine, tmp_path: Path) -> ProjectNotes:
    return ProjectNotes(engine, project=_ident(tmp_path))


# ---------------------------------------------------------------- identity


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def test_spellings_of_one_remote_give_one_id() -> None:
    spellings = ["git@GitHub.com:Org/Repo.git", "https://github.com/Org/Repo", "https://user@GITHUB.com:443/Org/Repo.git/",
                 "ssh://git@github.com:22/Org/Repo.git", "github.com:Org/Repo/"]
    assert {normalize_remote(s) for s in spellings} == {"github.com/Org/Repo"}
    assert normalize_remote("file:///srv/git/../git/repo") == "/srv/git/repo"


def test_identity_prefers_the_remote_and_falls_back_to_the_root_path(tmp_path: Path) -> None:
    repo = tmp_path / "myrepo"
    (repo / "src" / "deep").mkdir(parents=True)
    _git(repo, "init", "-q")
    by_path = resolve_project(repo / "src" / "deep", env={}, use_cache=False)
    assert (by_path.identity_kind, by_path.root, by_path.name) == ("repo_path", str(repo.resolve()), "myrepo")
    cached = resolve_project(repo / "src" / "deep", env={})
    _git(repo, "remote", "add", "origin", "git@github.com:Org/Repo.git")
    by_remote = resolve_project(repo / "src" / "deep", env={})  # the config changed: the cache is bypassed
    assert cached.identity_kind == "repo_path"
    assert by_remote.identity_kind == "git_remote" and by_remote.identity_source == "github.com/Org/Repo"
    clone = tmp_path / "elsewhere"
    clone.mkdir()
    _git(clone, "init", "-q")
    _git(clone, "remote", "add", "origin", "https://github.com/org/repo")  # host case differs, path case kept
    assert resolve_project(clone, env={}).id != by_remote.id
    _git(clone, "remote", "set-url", "origin", "https://GitHub.com/Org/Repo.git/")
    assert resolve_project(clone, env={}).id == by_remote.id and by_remote.id != by_path.id


def test_overrides_bypass_git_and_a_bad_id_is_refused(tmp_path: Path) -> None:
    env = {"MANOWAR_PROJECT_ID": "team-api", "MANOWAR_PROJECT_NAME": "API", "MANOWAR_PROJECT_ROOT": str(tmp_path),
           "PATH": "/nonexistent"}
    ident = resolve_project(tmp_path / "..", env=env, use_cache=False)
    assert (ident.id, ident.name, ident.root, ident.identity_kind) == ("team-api", "API", str(tmp_path), "override")
    rooted = resolve_project(Path("/"), env={"MANOWAR_PROJECT_ROOT": str(tmp_path)}, use_cache=False)
    assert rooted.root == str(tmp_path) and rooted.identity_kind == "repo_path"
    for bad in ("../x", "a/b", ".."):
        with pytest.raises(InvalidInputError, match="project id"):
            resolve_project(tmp_path, env={"MANOWAR_PROJECT_ID": bad}, use_cache=False)


def test_a_hung_git_falls_back_to_the_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "git"
    fake.write_text("#!/bin/sh\nexec sleep 60\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    ident = resolve_project(tmp_path, env={}, git_timeout=0.3, use_cache=False)
    assert ident.identity_kind == "repo_path" and ident.root == str(tmp_path.resolve())


# ---------------------------------------------------------------- notes


def test_global_writes_are_refused_and_input_is_validated(notes: ProjectNotes) -> None:
    with pytest.raises(GlobalWriteError, match="Direct global writes are disabled"):
        notes.remember_note("t", "c", scope="global")
    for kwargs in ({"title": " ", "content": "c"}, {"title": "t", "content": ""}, {"title": "t", "content": "c", "kind": "fact"},
                   {"title": "t", "content": "c", "tier": "forever"}):
        with pytest.raises(InvalidInputError):
            notes.remember_note(**kwargs)
    handoff = notes.remember_note("  Handoff  ", " Next: wire the CLI. ", "handoff", provenance="system")["item"]
    assert (handoff["title"], handoff["tier"], handoff["provenance"]) == ("Handoff", "episodic", "agent")
    full = notes.hydrate(handoff["item_id"])["item"]
    assert full["content"] == "Next: wire the CLI." and full["note_kind"] == "handoff"


def test_write_hints_suggest_but_never_deprecate(notes: ProjectNotes, tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# Cache\n\nThe query cache is invalidated on every write to a scope.\n")
    notes.index_paths(["a.md"])
    first = notes.remember_note("Cache invalidation", "The query cache is invalidated on every write to a scope.",
                                "lesson")["item"]
    same = notes.remember_note("Cache invalidation", "The query cache is invalidated on every write to a scope!",
                               "lesson")
    assert [(s["note_id"], s["suggestion"]) for s in same["similar_notes"]] == [(first["item_id"], "supersede_candidate")]
    other = notes.remember_note("Cache invalidation", "The query cache is invalidated on every write to a scope.",
                                "decision")
    kinds = {s["note_id"]: s["suggestion"] for s in other["similar_notes"]}
    assert kinds[first["item_id"]] == "review_for_conflict"  # a different kind is never a supersede candidate
    assert all(s["note_id"] for s in other["similar_notes"])  # Markdown blocks are never suggested
    assert notes.hydrate(first["item_id"])["item"]["note_status"] == "active"
    assert "similar_notes" not in notes.remember_note("Unrelated", "Deploys go out on Tuesdays.", "decision")


def test_provenance_round_trips_and_human_notes_rank_first(notes: ProjectNotes) -> None:
    agent = notes.remember_note("Release steps", "Tag the release and push the tag.", "pattern")["item"]
    human = notes.remember_note("Release steps", "Tag the release and push the tag.", "pattern",
                                provenance="human-explicit", tags=["release"])["item"]
    assert notes.hydrate(human["item_id"])["item"]["provenance"] == "human-explicit"
    assert notes.hydrate(agent["item_id"])["item"]["provenance"] == "agent"
    found = notes.semantic_search("release tag push", scope="project")
    assert [i["item_id"] for i in found["items"][:2]] == [human["item_id"], agent["item_id"]]
    assert found["items"][0]["provenance"] == "human-explicit"


def test_promotion_keeps_provenance_and_leaves_the_project_note(engine: MemoryEngine, tmp_path: Path) -> None:
    p1 = ProjectNotes(engine, project=_ident(tmp_path, "p-one"))
    note = p1.remember_note("Use uv", "Install dependencies with uv sync.", "decision", tags=["deps"],
                            source_refs=["issue://15"])["item"]
    promoted = p1.promote_note(note["item_id"])
    assert promoted["action"] == "promoted" and promoted["item"]["item_id"] == note["item_id"]
    assert promoted["item"]["promoted_from"] == {"scope": "project", "project_id": "p-one", "project_name": "p-one",
                                                 "note_id": note["item_id"], "source_path": f"note://{note['item_id']}"}
    p2 = ProjectNotes(engine, project=_ident(tmp_path, "p-two"))
    assert p2.semantic_search("install dependencies uv", scope="project")["result_count"] == 0  # projects are apart
    card = p2.semantic_search("install dependencies uv")["items"][0]
    assert card["scope"] == "global" and card["promoted_from"]["project_id"] == "p-one"
    full = p2.hydrate(card["item_id"], scope="global")["item"]
    assert full["source_refs"] == ["issue://15"] and full["tags"] == ["deps"] and full["promoted_from"]["note_id"]
    assert p1.hydrate(note["item_id"])["item"].get("promoted_from") is None
    p1.promote_note(note["item_id"])  # again: the global copy is replaced, not doubled
    assert p2.recent_context("global")["result_count"] == 1
    p1.deprecate_note(note["item_id"])
    with pytest.raises(InvalidInputError, match="only an active note"):
        p1.promote_note(note["item_id"])


def test_hybrid_prefers_the_project_when_relevance_is_close(engine: MemoryEngine, tmp_path: Path) -> None:
    other = ProjectNotes(engine, project=_ident(tmp_path, "other"))
    shared = other.remember_note("Timeouts", "Every HTTP client call sets a ten second timeout.", "pattern")["item"]
    other.promote_note(shared["item_id"])
    mine = ProjectNotes(engine, project=_ident(tmp_path, "mine"))
    own = mine.remember_note("Timeouts", "Every HTTP client call sets a ten second timeout here.", "pattern")["item"]
    found = mine.semantic_search("HTTP client timeout")
    assert [(i["scope"], i["item_id"]) for i in found["items"]] == [("project", own["item_id"]),
                                                                     ("global", shared["item_id"])]
    assert mine.semantic_search("HTTP client timeout", scope="global")["items"][0]["scope"] == "global"


def test_close_results_are_ambiguous_and_no_results_are_low(notes: ProjectNotes) -> None:
    a = notes.remember_note("Ports", "The API listens on port 8080.", "lesson")["item"]
    b = notes.remember_note("Ports", "The API listens on port 8080.", "decision")["item"]
    found = notes.semantic_search("API port")
    assert found["confidence_state"] == "ambiguous" and found["warning"] == "Top results are close; hydrate before acting."
    assert {i["item_id"] for i in found["items"][:2]} == {a["item_id"], b["item_id"]}
    assert all(i["confidence_state"] == "ambiguous" and i["warning"] for i in found["items"][:2])
    empty = notes.semantic_search("zebra xylophone quantum", source_filter="markdown")
    assert (empty["result_count"], empty["confidence_state"], empty["warning"]) == (
        0, "low", "No relevant memory results found.")
    notes.deprecate_note(b["item_id"], replacement_note_id=a["item_id"])
    one = notes.semantic_search("The API listens on port 8080.")
    assert one["confidence_state"] == "high" and one["items"][0]["confidence"] >= 0.82


def test_deprecation_keeps_history_and_leaves_retrieval(notes: ProjectNotes) -> None:
    old = notes.remember_note("Lint", "Run ruff check before committing.", "lesson")["item"]
    new = notes.remember_note("Lint", "Run ruff check and ruff format before committing.", "lesson")["item"]
    gone = notes.remember_note("Lint flake8", "Run flake8 before committing.", "lesson")["item"]
    with pytest.raises(InvalidInputError, match="itself"):
        notes.deprecate_note(old["item_id"], replacement_note_id=old["item_id"])
    sup = notes.deprecate_note(old["item_id"], replacement_note_id=new["item_id"], reason="format too")
    assert sup["action"] == "superseded" and sup["item"]["superseded_by"]["note_id"] == new["item_id"]
    arch = notes.deprecate_note(gone["item_id"])
    assert arch["action"] == "archived" and arch["item"]["deprecated_at"]
    with pytest.raises(InvalidInputError, match="only an active note"):
        notes.deprecate_note(old["item_id"])
    ids = {i["item_id"] for i in notes.semantic_search("run ruff flake8 before committing")["items"]}
    assert ids == {new["item_id"]}
    assert {i["item_id"] for i in notes.recent_context()["items"]} == {new["item_id"]}
    history = notes.hydrate(old["item_id"])["item"]
    assert history["note_status"] == "superseded" and history["deprecation_reason"] == "format too"
    assert history["content"] == "Run ruff check before committing."


def test_recent_context_is_newest_first_with_every_tier_and_search_hides_episodic(notes: ProjectNotes) -> None:
    notes.remember_note("Decision", "We store notes as memory rows.", "decision")
    handoff = notes.remember_note("Handoff", "Next session: finish the memory rows benchmark.", "handoff")["item"]
    recent = notes.recent_context(limit=50)
    assert recent["mode"] == "recent_context" and recent["result_count"] == 2
    assert {i["tier"] for i in recent["items"]} == {"durable", "episodic"}
    assert all("score" not in i and len(i["compressed_summary"]) <= 220 for i in recent["items"])
    assert handoff["item_id"] not in {i["item_id"] for i in notes.semantic_search("memory rows")["items"]}
    only = notes.semantic_search("memory rows benchmark", tier_filter=["episodic"])
    assert [i["item_id"] for i in only["items"]] == [handoff["item_id"]]
    assert [i["item_id"] for i in notes.recent_context(tier_filter=["episodic"])["items"]] == [handoff["item_id"]]
    with pytest.raises(InvalidInputError):
        notes.semantic_search("x", tier_filter=[])
    with pytest.raises(InvalidInputError):
        notes.semantic_search("x", source_filter="code")


# ---------------------------------------------------------------- Markdown and cards

MANY_SECTIONS = "# Guide\n\nIntro.\n\n" + "".join(f"## Step {i}\n\nDo thing number {i} carefully.\n\n" for i in range(12))


def test_markdown_blocks_have_document_positions_and_stable_ids() -> None:
    blocks = parse_markdown(MANY_SECTIONS + "```\n# not a heading\n```\n", "docs/g.md", "r")
    assert [b.position for b in blocks] == list(range(13))
    assert all(b.chunk_index == 0 for b in blocks)  # the reference's neighbours sorted by this: arbitrary
    assert blocks[-1].heading_path == ("Guide", "Step 11") and "# not a heading" in blocks[-1].text
    again = parse_markdown(MANY_SECTIONS.replace("number 3", "number three"), "docs/g.md", "r")
    assert [b.block_id for b in again] == [b.block_id for b in blocks[:13]]
    long = "# Big\n\n" + "\n\n".join(f"Paragraph {i} " + "word " * 60 for i in range(8))
    chunks = parse_markdown(long, "b.md", "r")
    assert len(chunks) > 1 and all(c.text.startswith("# Big\n\n") and len(c.text) <= 1000 for c in chunks)
    assert [c.chunk_index for c in chunks] == list(range(len(chunks)))
    dup = parse_markdown("## Example\n\none\n\n## Example\n\ntwo\n", "d.md", "r")
    assert len({b.block_id for b in dup}) == 2


def test_hydrate_neighbours_follow_the_document_and_stay_in_the_file(notes: ProjectNotes, tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "guide.md").write_text(MANY_SECTIONS)
    (docs / "other.md").write_text("# Other\n\nDo thing number 5 elsewhere.\n")
    assert notes.index_paths(["docs"])["files_indexed"] == 2
    card = next(i for i in notes.semantic_search("Step 5 thing number 5 carefully", source_filter="markdown",
                                                 limit=10)["items"] if i["title"] == "Step 5")
    assert card["source_kind"] == "markdown" and card["tier"] == "reference" and card["heading_path"] == ["Guide", "Step 5"]
    default = notes.hydrate(card["item_id"])
    assert [n["title"] for n in default["neighbors_before"]] == ["Step 4"]
    assert [n["title"] for n in default["neighbors_after"]] == ["Step 6"]
    related = notes.hydrate(card["item_id"], mode="related")
    assert [n["title"] for n in related["neighbors_before"]] == ["Step 3", "Step 4"]
    assert [n["title"] for n in related["neighbors_after"]] == ["Step 6", "Step 7"]
    assert related["neighbor_window"] == {"before": 2, "after": 2}
    assert all(n["tier"] == "reference" and n["source_path"] == "docs/guide.md"
               for n in related["neighbors_before"] + related["neighbors_after"])
    first = notes.hydrate(notes.semantic_search("Guide Intro", source_filter="markdown")["items"][0]["item_id"],
                          mode="related")
    assert first["item"]["position"] == 0 and first["neighbors_before"] == []
    lone = notes.semantic_search("Do thing number 5 elsewhere", source_filter="markdown")["items"][0]
    assert lone["source_path"] == "docs/other.md"
    alone = notes.hydrate(lone["item_id"], mode="related")
    assert alone["neighbors_before"] == alone["neighbors_after"] == []  # never into another file
    with pytest.raises(InvalidInputError, match="not hybrid"):
        notes.hydrate(card["item_id"], scope="hybrid")
    with pytest.raises(NotFoundError):
        notes.hydrate("mdblk-missing")


def test_incremental_index_and_refresh_before_a_query(notes: ProjectNotes, tmp_path: Path) -> None:
    doc = tmp_path / "notes.md"
    doc.write_text("# Setup\n\nInstall with pip.\n\n# Usage\n\nCall the engine.\n")
    with pytest.raises(InvalidInputError, match="no Markdown roots"):
        notes.index_paths()
    assert notes.index_paths(["notes.md"])["blocks_written"] == 2
    assert notes.index_paths()["files_skipped"] == 1
    os.utime(doc, ns=(doc.stat().st_atime_ns, doc.stat().st_mtime_ns + 10**9))  # touched, same text
    same = notes.index_paths()
    assert (same["files_skipped"], same["blocks_written"]) == (1, 0)
    doc.write_text("# Setup\n\nInstall with uv, the zephyr way.\n\n# Usage\n\nCall the engine.\n")
    found = notes.semantic_search("zephyr install")  # no index call: refreshed before the query
    assert found["index_refreshed"] == {"files_indexed": 1, "files_removed": 0}
    assert "zephyr" in found["items"][0]["compressed_summary"]
    assert notes.index_paths()["files_skipped"] == 1
    doc.unlink()
    assert notes.semantic_search("zephyr install", source_filter="markdown")["result_count"] == 0


def test_index_refuses_symlinks_and_paths_outside_the_root(notes: ProjectNotes, tmp_path: Path) -> None:
    outside = tmp_path.parent / f"outside-{uuid.uuid4().hex[:6]}"
    outside.mkdir()
    (outside / "secret.md").write_text("# Secret\n\nThe outside secret is hunter2.\n")
    (tmp_path / "linked").symlink_to(outside)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "real.md").write_text("# Real\n\nReal docs.\n")
    (tmp_path / "docs" / "escape.md").symlink_to(outside / "secret.md")
    for bad, why in ((outside, "outside the project root"), ("../" + outside.name, "outside the project root"),
                     ("linked", "outside the project root"), ("docs/escape.md", "outside the project root"),
                     ("missing", "does not exist")):
        with pytest.raises(InvalidInputError, match=why):
            notes.index_paths([bad])
    (tmp_path / "docs" / "inner").mkdir()
    (tmp_path / "docs" / "inner" / "x.md").write_text("# X\n\nx text.\n")
    (tmp_path / "docs" / "alias").symlink_to(tmp_path / "docs" / "inner")
    with pytest.raises(InvalidInputError, match="symlink"):
        notes.index_paths(["docs/alias"])
    report = notes.index_paths(["docs"])
    assert report["files_indexed"] == 2  # real.md and inner/x.md; the symlinked file and dir are skipped
    hits = notes.semantic_search("outside secret hunter2", source_filter="markdown")["items"]
    assert not any("hunter2" in i["compressed_summary"] or i["source_path"] == "docs/escape.md" for i in hits)


def test_manowarignore_patterns_are_honoured(notes: ProjectNotes, tmp_path: Path) -> None:
    """The nearest `.manowarignore` drops files by their path relative to it, by a directory name in
    the path, and by bare file name; comments and blank lines are skipped."""
    docs = tmp_path / "docs"
    for rel in ("keep.md", "drafts/wip.md", "api/generated/ref.md", "api/manual.md", "CHANGELOG.md", "nested/CHANGELOG.md"):
        (docs / rel).parent.mkdir(parents=True, exist_ok=True)
        (docs / rel).write_text(f"# {rel}\n\nText of {rel}.\n")
    (tmp_path / ".manowarignore").write_text("# generated docs\n\ndrafts\ndocs/api/generated/*\nCHANGELOG.md\n")
    assert notes.index_paths(["docs"])["files_indexed"] == 2
    paths = {i["source_path"] for i in notes.semantic_search("text", source_filter="markdown", limit=20)["items"]}
    assert paths == {"docs/keep.md", "docs/api/manual.md"}
    (tmp_path / ".manowarignore").write_text("")  # patterns removed: the files are picked up by the next index
    assert notes.index_paths()["files_indexed"] == 4


def test_rrf_merge_down_weights_a_lane() -> None:
    """Keyword counts 0.3 against the vector lane's 1.0: a keyword rank 1 loses to a vector rank 2,
    and an item both lanes find beats either lane's own best; with equal weights the keyword
    lane's rank 1 would tie the vector lane's."""
    vector = [("v1", 0.7), ("v2", 0.6), ("both", 0.5)]
    fused = gated_fusion(vector, lambda: ["k1", "both"], 4)
    assert not fused.gated
    assert fused.ids == ["both", "v1", "v2", "k1"]  # both: 1/63 + 0.3/62 > v1: 1/61 > ... > k1: 0.3/61
    assert fused.ranks["both"] == {"vector": 3, "keyword": 2} and fused.ranks["k1"] == {"keyword": 1}
    even = gated_fusion(vector, lambda: ["k1", "both"], 4, weights={"vector": 1.0, "keyword": 1.0})
    assert even.ids.index("k1") < even.ids.index("v2")  # k1 ties v1 (1/61) and beats v2 (1/62)
    assert gated_fusion([], lambda: ["k1", "k2"], 5).ids == ["k1", "k2"]  # no vector lane: keyword alone


def test_gating_skips_fts_when_vector_is_confident() -> None:
    calls: list[int] = []

    def keyword() -> list[str]:
        calls.append(1)
        return ["k1"]

    confident = gated_fusion([("v1", 0.82), ("v2", 0.5), ("v3", 0.4)], keyword, 2)
    assert (confident.gated, confident.ids, calls) == (True, ["v1", "v2"], [])
    unsure = gated_fusion([("v1", 0.819), ("v2", 0.5)], keyword, 3)
    assert (unsure.gated, calls) == (False, [1]) and "k1" in unsure.ids


def test_search_runs_the_keyword_lane_only_when_the_vector_lane_is_unsure(
        notes: ProjectNotes, monkeypatch: pytest.MonkeyPatch) -> None:
    from manowar_memory.scoped import ScopedMemory

    note = notes.remember_note("Release", "Tag the release after the changelog is merged.", "decision")["item"]
    notes.remember_note("Review", "Two approvals are needed to merge.", "pattern")
    calls: list[str] = []
    real = ScopedMemory.keyword

    def spy(self: ScopedMemory, query: str, **kw: object) -> list:
        calls.append(query)
        return real(self, query, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(ScopedMemory, "keyword", spy)
    exact = notes.semantic_search("Release\nTag the release after the changelog is merged.", scope="project")
    assert exact["lanes"] == {"project": "vector"} and calls == []  # cosine 1.0: the gate holds
    assert exact["items"][0]["item_id"] == note["item_id"]
    loose = notes.semantic_search("changelog approvals", scope="hybrid")
    assert loose["lanes"] == {"project": "vector+keyword", "global": "vector+keyword"}
    assert len(calls) == 2  # once per scope (the global scope is empty: no vector row to be confident about)
    assert {i["item_id"] for i in loose["items"]} >= {note["item_id"]}


def test_lint_reports_each_issue_kind(notes: ProjectNotes, engine: MemoryEngine, tmp_path: Path,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    docs = tmp_path / "docs"
    (docs / "sub").mkdir(parents=True)
    (tmp_path / "tool.py").write_text("print('linked code')\n")
    (docs / "a.md").write_text("# Start\n\nSee [b](sub/b.md#usage), [code](../tool.py), [[b]], [web](https://x.org) "
                               "and [gone](missing.md) and [[Nowhere]].\n\n```\n[not a link](fenced.md)\n```\n"
                               "Also `[inline](span.md)`.\n")
    (docs / "sub" / "b.md").write_text("# Guide\n\nBack to [start](../a.md).\n")
    (docs / "c.md").write_text("# Guide\n\nNothing links here, and it links nowhere.\n")
    (docs / "ru.md").write_text("# Руководство\n\n[a](a.md)\n")
    (docs / "uk.md").write_text("# Довідник\n\n[a](a.md)\n")
    old = notes.remember_note("Handoff", "Pick up the migration tomorrow.", "handoff")["item"]
    rows = notes.scope_of("project")
    engine.update_item(rows, engine.ingest_id(rows, f"note:{old['item_id']}"),
                       metadata={"updated_at": "2020-01-01T00:00:00Z"})
    notes.remember_note("Retries", "Retry the upload three times with backoff.", "lesson")
    notes.remember_note("Retries", "Retry the upload three times with backoff.", "pattern")
    report = notes.lint_knowledge_base(["docs"])
    kinds = sorted(i["kind"] for i in report["issues"])
    assert kinds == ["broken_link", "broken_link", "duplicate_title", "near_duplicate_notes", "orphan_candidate",
                     "stale_episodic_note"], report["issues"]
    assert {i["target"] for i in report["issues"] if i["kind"] == "broken_link"} == {"missing.md", "[[Nowhere]]"}
    assert [i["source_path"] for i in report["issues"] if i["kind"] == "orphan_candidate"] == ["docs/c.md"]
    assert [i["source_paths"] for i in report["issues"] if i["kind"] == "duplicate_title"] == [
        ["docs/c.md", "docs/sub/b.md"]]  # the Cyrillic titles differ: no collision
    summary = report["summary"]
    assert (summary["file_count"], summary["issue_count"], summary["markdown_configured"]) == (5, 6, True)
    assert report["truncated"] is False and notes.lint_knowledge_base(["docs"], max_issues=2)["truncated"] is True
    monkeypatch.setenv("MANOWAR_EPISODIC_STALE_DAYS", "100000")
    assert notes.lint_knowledge_base(["docs"])["summary"]["stale_episodic_note_count"] == 0
    with pytest.raises(InvalidInputError, match="max_issues"):
        notes.lint_knowledge_base(max_issues=0)


def test_operations_report_scopes_tools_health_and_index_state(engine: MemoryEngine, tmp_path: Path) -> None:
    from manowar_memory.embeddings.fake import FakeEmbedder

    notes = ProjectNotes(engine, project=_ident(tmp_path, "ops"))
    assert {s["scope"]: s["writes"] for s in notes.list_scopes()["scopes"]} == {
        "project": "default", "global": "promotion_only", "hybrid": "read_only"}
    test = notes.self_test()
    assert test["tool_count"] == len(test["tools"]) == 15 and "notes_lint" in test["tools"]
    assert test["tools"] == [spec[0] for spec in NOTES_TOOL_SPECS]  # the tools the catalog serves, in order
    assert notes.health()["checks"] == {"store": "ok", "embedder": "ok"}
    assert notes.server_info()["index_status"]["project"]["state"] == "empty"
    note = notes.remember_note("Ops", "Operations report the index state.", "lesson")["item"]
    assert notes.server_info()["index_status"]["project"]["state"] == "not_indexed"
    doc = tmp_path / "ops.md"
    doc.write_text("# Ops\n\nFirst text.\n")
    notes.index_paths(["ops.md"])
    info = notes.server_info()
    assert info["index_status"]["project"]["state"] == "fresh" and info["current_project"]["id"] == "ops"
    assert info["storage_stats"]["project"]["block_count"] == info["storage_stats"]["project"]["file_count"] == 1
    notes.deprecate_note(note["item_id"])
    assert info["storage_stats"]["project"]["notes"]["active"] == 1
    assert notes.server_info()["storage_stats"]["project"]["notes"] == {
        "active": 0, "total": 1, "inactive": 1, "archived": 1, "superseded": 0}
    doc.write_text("# Ops\n\nChanged text.\n")
    stale = notes.server_info()["index_status"]["project"]
    assert (stale["state"], stale["changed_files"]) == ("stale", ["ops.md"])
    gone = tmp_path / "gone"
    gone.mkdir()
    ProjectNotes(engine, project=resolve_project(gone, env={}))  # recorded, then its root disappears
    gone.rmdir()
    assert str(gone.resolve()) in {b["project_root"] for b in notes.server_info()["orphaned_buckets"]}
    with MemoryEngine(store="sqlite:///:memory:", embedder=FakeEmbedder(fail=True)) as broken:
        health = ProjectNotes(broken, project=_ident(tmp_path)).health()
        assert health["status"] == "degraded" and health["checks"]["embedder"].startswith("error: EmbeddingError")


def test_cards_are_compact() -> None:
    text = "## Install\n\n- Use [uv](https://x.y) to `sync` the deps.\n- Run the tests. Then ship it!\n" + "filler " * 80
    summary = compressed_summary("Install", text)
    assert len(summary) <= 220 and summary.endswith("…") and "https" not in summary and "`" not in summary
    assert key_points(text, "run tests")[0] == "Run the tests."
    assert len(key_points(text, "x")) <= 3
    assert compressed_summary("Title", "body").startswith("Title: body")
    assert lexical_bonus("привет мир", "Привет", [], "мир дружба") > 0.16
    assert lexical_bonus("zzz", "a", [], "b") == 0.0


def test_card_fields(notes: ProjectNotes, tmp_path: Path) -> None:
    (tmp_path / "r.md").write_text("# Readme\n\nManowar stores notes as rows.\n")
    notes.index_paths(["."])
    notes.remember_note("Rows", "Notes are stored as memory rows.", "decision", tags=["storage"])
    found = notes.semantic_search("notes stored as rows")
    assert found["status"] == "ok" and found["scope"] == "hybrid" and found["result_count"] == 2
    for card in found["items"]:
        assert {"scope", "project_id", "project_name", "source_kind", "item_id", "source_path", "title", "heading_path",
                "updated_at", "score", "confidence", "confidence_state", "compressed_summary", "key_points",
                "can_hydrate", "relations", "tier"} <= set(card)
        assert card["can_hydrate"] and len(card["key_points"]) <= 3 and "content" not in card
    kinds = {c["source_kind"] for c in found["items"]}
    assert kinds == {"markdown", "memory_note"}
    assert {c["source_kind"] for c in notes.semantic_search("rows", source_filter="notes")["items"]} == {"memory_note"}


# ---------------------------------------------------------------- relations


def test_relations_link_unlink_and_auto_link(notes: ProjectNotes) -> None:
    note = notes.remember_note("Bug", "Fixed the cache fence race.", "lesson",
                               source_refs=["issue://12", "file://manowar_memory/engine.py", "not a uri"])
    assert {r["target"] for r in note["linked_refs"]} == {"issue://12", "file://manowar_memory/engine.py"}
    uri = f"note://{note['item']['item_id']}"
    first = notes.link_entities(uri, "https://example.org/pr/3", "implements")
    assert notes.link_entities(uri, "https://example.org/pr/3", "implements")["relation"] == first["relation"]
    assert len(notes.get_related_entities(uri)["relations"]) == 3
    assert [r["source"] for r in notes.get_related_entities("issue://12")["relations"]] == [uri]
    card = notes.semantic_search("cache fence race")["items"][0]
    assert len(card["relations"]) == 3
    for bad in ("nope", "issue:12", "note://", "://x"):
        with pytest.raises(InvalidInputError):
            notes.link_entities(uri, bad)
    assert notes.unlink_entities(uri, "https://example.org/pr/3")["changed"] == 1
    assert len(notes.get_related_entities(uri, relation_type="references")["relations"]) == 2


# ---------------------------------------------------------------- surfaces


def test_notes_tools_act_in_the_bound_agents_notes(engine: MemoryEngine, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MANOWAR_PROJECT_ID", "tools-proj")
    monkeypatch.setenv("MANOWAR_PROJECT_ROOT", str(tmp_path))
    (tmp_path / "README.md").write_text("# Tools\n\nThe notes tools index Markdown.\n")
    alice = {t.name: t for t in memory_tools(engine.scoped(Scope(agent_wallet="coder-a")), groups=["notes"])}
    assert set(alice) == {"notes_remember", "notes_promote", "notes_deprecate", "notes_search", "notes_hydrate",
                          "notes_recent", "notes_index", "notes_link", "notes_unlink", "notes_related", "notes_lint",
                          "notes_server_info", "notes_health", "notes_scopes", "notes_self_test"}
    assert alice["notes_index"].call(paths=["README.md"])["files_indexed"] == 1
    stored = alice["notes_remember"].call(title="Tool note", content="Tools write agent notes.", kind="pattern")
    assert stored["item"]["provenance"] == "agent"
    found = alice["notes_search"].call(query="tools agent notes")
    assert found["items"] and alice["notes_hydrate"].call(item_id=found["items"][0]["item_id"])["status"] == "ok"
    other = {t.name: t for t in memory_tools(engine.scoped(Scope(agent_wallet="coder-b")), groups=["notes"])}
    assert other["notes_recent"].call()["result_count"] == 0  # another agent's notes are not visible
    with pytest.raises(ToolCallError) as err:
        other["notes_promote"].call(note_id=stored["item"]["item_id"])
    assert err.value.payload["error"]["type"] == "NotFoundError"
    with pytest.raises(ToolCallError):
        alice["notes_remember"].call(title="x", content="y", provenance="human-explicit")


def test_cli_notes_group(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# Alpha\n\nThe alpha section explains deployment.\n")
    base = ["notes", "--project", str(tmp_path), "--store", f"sqlite:///{tmp_path / 'm.db'}", "--embedder", "fake"]
    runner = CliRunner()

    def run(*args: str) -> dict:
        result = runner.invoke(cli, [*base, *args], env={"MANOWAR_PROJECT_ID": "cli-proj"})
        assert result.exit_code == 0, result.output
        return json.loads(result.output)

    assert run("index", "docs")["files_indexed"] == 1
    note = run("remember", "Deploy", "Deploy with the release script.", "--kind", "decision", "--tag", "deploy",
               "--human")["item"]
    assert note["provenance"] == "human-explicit"
    assert run("promote", note["item_id"])["action"] == "promoted"
    card = run("search", "deployment alpha", "--source", "markdown")["items"][0]
    assert run("hydrate", card["item_id"])["item"]["content"].startswith("# Alpha")
    assert run("recent", "--scope", "global")["result_count"] == 1
    assert run("deprecate", note["item_id"], "--reason", "old")["action"] == "archived"
    assert run("lint")["summary"]["file_count"] == 1
    info = run("info")
    assert info["index_status"]["project"]["state"] == "fresh" and info["health"]["status"] == "ok"
    refused = runner.invoke(cli, [*base, "remember", "t", "c", "--scope", "global"], env={"MANOWAR_PROJECT_ID": "cli-proj"})
    assert refused.exit_code != 0 and "Direct global writes are disabled" in refused.output


def test_reconciliation_keeps_the_bucket_across_remote_changes(engine: MemoryEngine, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")

    def bucket() -> ProjectNotes:
        return ProjectNotes(engine, project=resolve_project(repo, env={}))

    first = bucket()
    note = first.remember_note("Bucket", "Notes survive remote changes.", "lesson")["item"]
    _git(repo, "remote", "add", "origin", "git@github.com:org/app.git")
    added = bucket()
    assert added.project.identity_kind == "git_remote" and added.project.id == first.project.id
    assert added.hydrate(note["item_id"])["item"]["title"] == "Bucket"
    _git(repo, "remote", "remove", "origin")
    assert bucket().project.id == first.project.id
    _git(repo, "remote", "add", "origin", "https://github.com/someone/else")  # same path, another project
    other = bucket()
    assert other.project.id != first.project.id and other.recent_context()["result_count"] == 0
    _git(repo, "remote", "set-url", "origin", "https://github.com/org/app")  # a known alias pins the bucket
    assert bucket().project.id == first.project.id
    override = ProjectNotes(engine, project=_ident(repo, "pinned"))
    assert override.project.id == "pinned"


def test_a_stale_index_format_forces_a_full_reindex(notes: ProjectNotes, engine: MemoryEngine, tmp_path: Path) -> None:
    (tmp_path / "f.md").write_text("# Format\n\nBlocks of an older parser are rebuilt.\n")
    notes.index_paths(["f.md"])
    assert notes.semantic_search("older parser")["items"][0]["source_kind"] == "markdown"
    assert "index_refreshed" not in notes.semantic_search("older parser")  # nothing changed
    roots = notes.scope_of("project")
    engine.update_item(roots, engine.ingest_id(roots, "roots"), metadata={"format": 0})
    found = notes.semantic_search("older parser")
    assert found["index_refreshed"] == {"files_indexed": 1, "files_removed": 0}  # same files, re-read in full
    assert "index_refreshed" not in notes.semantic_search("older parser")


def test_a_keyword_only_engine_still_finds_notes(tmp_path: Path) -> None:
    with MemoryEngine(store="sqlite:///:memory:", embedder=None) as eng:
        notes = ProjectNotes(eng, project=_ident(tmp_path))
        note = notes.remember_note("Keyword", "Lexical lanes find notes without vectors.", "lesson")
        assert "similar_notes" not in note
        found = notes.semantic_search("lexical lanes vectors")
        assert found["items"][0]["item_id"] == note["item"]["item_id"]
        assert 0 < found["items"][0]["confidence"] <= 0.24 + 0.001 and found["confidence_state"] == "low"


async def test_mcp_server_offers_the_notes_tools(tmp_path: Path) -> None:
    """`manowar mcp --groups ...,notes` as a real subprocess: the notes tools are listed and act in the
    server's project, for the configured agent; a model cannot claim human provenance."""
    pytest.importorskip("mcp")
    import sys

    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "ops.md").write_text("# Ops\n\nRestart the worker with systemctl.\n")
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "manowar_memory.cli", "mcp", "--agent", "coder", "--store", f"sqlite:///{tmp_path / 'm.db'}",
              "--embedder", "fake", "--groups", "memory,notes"],
        env={**os.environ, "MANOWAR_PROJECT_ID": "mcp-proj", "MANOWAR_PROJECT_ROOT": str(tmp_path)})
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        names = {t.name for t in (await session.list_tools()).tools}
        assert {"notes_search", "notes_hydrate", "notes_index", "notes_remember"} <= names

        async def call(name: str, args: dict) -> dict:
            result = await session.call_tool(name, args)
            assert not result.is_error, result.content[0].text
            return json.loads(result.content[0].text)

        assert (await call("notes_index", {"paths": ["docs"]}))["files_indexed"] == 1
        card = (await call("notes_search", {"query": "restart the worker"}))["items"][0]
        assert card["source_path"] == "docs/ops.md" and card["project_id"] == "mcp-proj"
        assert "systemctl" in (await call("notes_hydrate", {"item_id": card["item_id"]}))["item"]["content"]
        refused = await session.call_tool("notes_remember", {"title": "t", "content": "c", "provenance": "human-explicit"})
        assert refused.is_error


def test_both_frameworks_generate_the_notes_tools(engine: MemoryEngine, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    lc = pytest.importorskip("langchain_manowar")
    li = pytest.importorskip("llama_index.tools.manowar")
    monkeypatch.setenv("MANOWAR_PROJECT_ID", "fw-proj")
    monkeypatch.setenv("MANOWAR_PROJECT_ROOT", str(tmp_path))
    scope = Scope(agent_wallet="coder-fw")
    lc_tools = {t.name: t for t in lc.create_manowar_tools(engine, scope, groups=["notes"])}
    stored = json.loads(lc_tools["notes_remember"].invoke(
        {"title": "Frameworks", "content": "Both frameworks get the notes tools.", "kind": "pattern"}))
    li_tools = {t.metadata.name: t for t in li.make_tools(engine=engine, scope=scope, groups=["notes"])}
    assert set(li_tools) == set(lc_tools)
    found = li_tools["notes_search"].call(query="frameworks notes tools")
    assert stored["item"]["item_id"] in str(found)


def test_filters_combine_on_every_scope_and_markdown_wins_a_tie(engine: MemoryEngine, tmp_path: Path) -> None:
    text = "Rotate the signing keys every ninety days."
    (tmp_path / "keys.md").write_text(f"# Key rotation\n\n{text}\n")
    notes = ProjectNotes(engine, project=_ident(tmp_path, "filters"))
    notes.index_paths(["keys.md"])
    note = notes.remember_note("Key rotation", text, "decision")["item"]  # same title and words as the block
    ref = notes.remember_note("Key rotation", text, "pattern", tier="reference")["item"]
    handoff = notes.remember_note("Key rotation handoff", text, "handoff")["item"]
    notes.promote_note(note["item_id"])
    top = notes.semantic_search("rotate signing keys", scope="project")["items"]
    assert top[0]["source_kind"] == "markdown"  # +0.02 for Markdown on otherwise equal relevance
    for scope in ("project", "global", "hybrid"):
        for source, tiers, kinds in (("notes", None, {"memory_note"}), ("markdown", None, {"markdown"}),
                                     ("notes", ["reference"], {"memory_note"}), ("all", ["episodic"], {"memory_note"})):
            items = notes.semantic_search("rotate signing keys", scope=scope, source_filter=source,
                                          tier_filter=tiers, limit=20)["items"]
            assert {i["source_kind"] for i in items} <= kinds, (scope, source, tiers)
            if tiers:
                assert {i["tier"] for i in items} <= set(tiers)
            if scope == "global":
                assert {i["scope"] for i in items} <= {"global"} and all(i["source_kind"] != "markdown" for i in items)
    ids = {i["item_id"] for i in notes.semantic_search("rotate signing keys", tier_filter=["reference"],
                                                       source_filter="notes")["items"]}
    assert ids == {ref["item_id"]}
    assert handoff["item_id"] in {i["item_id"] for i in notes.semantic_search(
        "rotate signing keys", scope="hybrid", tier_filter=["episodic"])["items"]}


def test_index_refuses_hard_links_to_files_outside_the_root(notes: ProjectNotes, tmp_path: Path) -> None:
    """A hard link is not a symlink: its real path is inside the root, but its inode is the outside file."""
    outside = tmp_path.parent / f"outside-{uuid.uuid4().hex[:6]}"
    outside.mkdir()
    (outside / "secret.md").write_text("# Secret\n\nThe outside secret is hunter2.\n")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "real.md").write_text("# Real\n\nReal docs.\n")
    os.link(outside / "secret.md", tmp_path / "docs" / "leak.md")
    # two names of one file, both inside the indexed root: read once under each name
    (tmp_path / "docs" / "twin-a.md").write_text("# Twin\n\nTwin text.\n")
    os.link(tmp_path / "docs" / "twin-a.md", tmp_path / "docs" / "twin-b.md")
    with pytest.raises(InvalidInputError, match="hard link"):
        notes.index_paths(["docs/leak.md"])
    report = notes.index_paths(["docs"])
    assert report["files_refused"] == ["docs/leak.md"]
    assert report["files_indexed"] == 3  # real.md, twin-a.md, twin-b.md
    hits = notes.semantic_search("outside secret hunter2", source_filter="markdown")["items"]
    assert not any("hunter2" in i["compressed_summary"] or i["source_path"] == "docs/leak.md" for i in hits)
