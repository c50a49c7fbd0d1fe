"""The documentation is executed: every Python block in docs/ and README.md runs, offline, and
``mkdocs build --strict`` passes, so a broken example, link, nav entry or API reference fails CI.

Blocks of one page run in order and share their globals, as a reader runs them. A block's fence
can say more (``{.python ...}`` in docs/, ``python ...`` in the README, which GitHub renders):

* ``requires="mongo redis"``: the page's test gets those server markers (the servers of
  ``scripts/services.sh``), so it fails in CI when they are missing instead of skipping;
* ``test="skip" reason="..."``: not executed (a long-running server, a paid API); the reason is
  required and there may be only a few such blocks.
"""

from __future__ import annotations

import functools
import html as html_lib
import http.server
import io
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import traceback
from collections import defaultdict
from pathlib import Path
from typing import BinaryIO, ClassVar

import pytest

pytest.importorskip("pytest_examples", reason="pip install -e '.[docs]'")
from pytest_examples import CodeExample, EvalExample, find_examples

# one worker runs this module under pytest-xdist: its module-scoped fixtures are built once
pytestmark = pytest.mark.xdist_group("docs-site")

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
SERVERS = {"mongo", "redis", "temporal"}
MAX_SKIPPED = 6
DOCS_DATABASE = "manowar_docs"  # the database the docs' MongoDB examples use


def _pages() -> dict[str, list[CodeExample]]:
    pages: dict[str, list[CodeExample]] = defaultdict(list)
    for example in find_examples(str(DOCS), str(ROOT / "README.md")):
        pages[str(Path(example.path).relative_to(ROOT))].append(example)
    return dict(sorted(pages.items()))


PAGES = _pages()


def _skipped(example: CodeExample) -> bool:
    return example.prefix_settings().get("test") == "skip"


def _requires(example: CodeExample) -> set[str]:
    return set(example.prefix_settings().get("requires", "").split())


def _params() -> list[object]:
    params = []
    for page, examples in PAGES.items():
        needed = set().union(*(_requires(e) for e in examples if not _skipped(e)))
        params.append(pytest.param(page, marks=[getattr(pytest.mark, s) for s in sorted(needed)], id=page))
    return params


def test_every_page_has_examples_and_few_are_skipped() -> None:
    assert "README.md" in PAGES and "docs/quickstart.md" in PAGES
    skipped = [e for examples in PAGES.values() for e in examples if _skipped(e)]
    for example in skipped:
        assert example.prefix_settings().get("reason"), f"{example}: a skipped block must say why (reason=...)"
    assert len(skipped) <= MAX_SKIPPED, f"{len(skipped)} blocks are not executed: run them against the services"
    unknown = {s for e in (e for es in PAGES.values() for e in es) for s in _requires(e)} - SERVERS
    assert not unknown, f"requires= names unknown servers {unknown}; use {sorted(SERVERS)}"


def test_readme_introduces_in_under_150_lines() -> None:
    """The README introduces (what it is, install, tests, a first use per framework, the surfaces,
    links into the site) and leaves the rest to the docs: under 150 lines."""
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) < 150, f"README.md has {len(text.splitlines())} lines: move detail into docs/"
    ci = (ROOT / ".ci" / "run").read_text()
    assert "bash scripts/test.sh" in ci and "bash scripts/test.sh" in text, "the README names what CI runs"
    for needed in ("root", "apt-get", "chromium", "27017", "6379", "7233", "MANOWAR_MONGO_PORT",
                   "MANOWAR_REDIS_PORT", "MANOWAR_TEMPORAL_PORT", "stops the servers it started"):
        assert needed in text, f"the README's test section does not say {needed!r}"
    for needed in ("from manowar_memory import", "langchain_manowar", "llama_index", "manowar serve", "manowar mcp",
                   "Jupyter"):
        assert needed in text, f"the README does not show {needed!r}"
    links = set(re.findall(r"\]\((docs/[^)#]+)", text))
    assert links and all((ROOT / link).is_file() for link in links), sorted(x for x in links if not (ROOT / x).is_file())


@pytest.mark.slow
@pytest.mark.parametrize("page", _params())
def test_page_examples_run(page: str, eval_example: EvalExample, tmp_path: Path,
                           monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> None:
    monkeypatch.chdir(tmp_path)
    # the examples read the servers' addresses from the environment, as a deployment does:
    # the addresses the suite's fixtures checked (the environment's, else the defaults)
    for marker, (variable, fixture) in {"mongo": ("MONGODB_URI", "mongo_uri"), "redis": ("REDIS_URL", "redis_url"),
                                        "temporal": ("TEMPORAL_ADDRESS", "temporal_address")}.items():
        if request.node.get_closest_marker(marker) is not None:
            monkeypatch.setenv(variable, request.getfixturevalue(fixture))
    monkeypatch.setenv("MANOWAR_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    examples = [e for e in PAGES[page] if not _skipped(e)]
    uses_mongo = any("mongo" in _requires(e) for e in examples)
    if uses_mongo:
        _drop_docs_database()
    namespace: dict[str, object] = {"__name__": "__main__"}
    try:
        for example in examples:
            error = None
            try:
                namespace = eval_example.run(example, module_globals=namespace)
            except Exception as exc:  # noqa: BLE001 - pytest cannot render the example's frames: report text
                lines = [f"line {frame.f_lineno} of {frame.f_code.co_filename}"
                         for frame, _ in traceback.walk_tb(exc.__traceback__)]
                error = f"{example}: {type(exc).__name__}: {exc}\n  " + "\n  ".join(lines[-4:])
            if error is not None:
                pytest.fail(error, pytrace=False)
    finally:
        for value in list(namespace.values()):
            close = getattr(value, "close", None)
            if type(value).__name__ == "MemoryEngine" and callable(close):
                close()
        if uses_mongo:
            _drop_docs_database()


def _drop_docs_database() -> None:
    import pymongo

    uri = os.environ.get("MONGODB_URI") or "mongodb://127.0.0.1:27017/?replicaSet=rs0"
    with pymongo.MongoClient(uri, serverSelectionTimeoutMS=3000) as client:
        client.drop_database(DOCS_DATABASE)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built once with ``mkdocs build --strict``: warnings are errors, so every nav page
    exists, every link and anchor resolves, every ``:::`` API reference and the CLI reference
    import and render."""
    if shutil.which("mkdocs", path=str(Path(sys.executable).parent)) is None:
        pytest.fail("mkdocs is not installed: pip install -e '.[docs]'")
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    run = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
                         cwd=ROOT, capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    return out


def _text(html: str) -> str:
    return html_lib.unescape(re.sub(r"<[^>]+>", "", html))


@pytest.mark.slow
def test_mkdocs_build_strict(site: Path) -> None:
    cli = (site / "reference" / "cli" / "index.html").read_text()
    assert "manowar serve" in cli and "--budget" in cli  # generated from the click commands
    api = (site / "reference" / "api" / "index.html").read_text()
    assert "pre_turn" in api and "ScopedMemory" in api
    for page in ("api", "langchain", "llamaindex", "tools", "internals"):
        html = (site / "reference" / page / "index.html").read_text()
        # doctest examples render as code, not as nested block quotes
        assert not re.search(r"<blockquote>(?:(?!</blockquote>).)*&gt;&gt;&gt;", html, re.S), page
        text = _text(html)
        # a default that names a constant shows its value (k: int = 4), not the name
        assert not re.search(r"= ?DEFAULT_[A-Z_]+\b", text), (page, re.findall(r".{40}= ?DEFAULT_[A-Z_]+", text))
        # the pydantic and LlamaIndex plumbing every model inherits is not part of the reference
        assert "model_post_init" not in text and "class_name" not in text, page
    assert ">>> engine = MemoryEngine(" in _text(api)  # the engine's example, shown as code
    home = (site / "index.html").read_text()
    assert 'href="install/"' in home and "pip install -e" in _text(home)  # an install line, and the page
    assert "Building these docs" not in home and 'href="contributing/"' in home
    for notebook in ("quickstart", "langchain_quickstart", "llamaindex_quickstart"):
        page = (site / "notebooks" / notebook / "index.html").read_text()
        assert "data:image/png;base64" in page, f"{notebook}: the rendered notebook shows no plot"


# Injected into every page the browser loads: once the theme's scripts have run, the page's body
# gets a data-layout attribute listing the tables that run past the content column (unless a
# scrolling box within the column holds them) and the block quotes that hold code.
_LAYOUT_PROBE = """<script>
window.addEventListener("load", () => setTimeout(() => {
  const content = document.querySelector(".md-content__inner");
  const box = content.getBoundingClientRect();
  const wide = [];
  for (const table of content.querySelectorAll("table")) {
    const r = table.getBoundingClientRect();
    if (r.left >= box.left - 1 && r.right <= box.right + 1) continue;
    let held = false;
    for (let el = table.parentElement; el && el !== content && !held; el = el.parentElement) {
      const overflow = getComputedStyle(el).overflowX, e = el.getBoundingClientRect();
      held = (overflow === "auto" || overflow === "scroll") && e.left >= box.left - 1 && e.right <= box.right + 1;
    }
    if (!held) wide.push(`${Math.round(r.width)} px > ${Math.round(box.width)} px: ${table.innerText.slice(0, 60)}`);
  }
  const quoted = [...content.querySelectorAll("blockquote")]
    .filter(q => q.querySelector("code, pre") || q.textContent.includes(">>>"))
    .map(q => q.textContent.slice(0, 80));
  document.body.dataset.layout = JSON.stringify({width: window.innerWidth, wide, quoted});
}, 300));
</script>"""


class _Recorder(http.server.SimpleHTTPRequestHandler):
    failed: ClassVar[list[str]] = []

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the stdlib's name
        pass

    def send_head(self) -> io.BytesIO | BinaryIO | None:
        path = Path(self.translate_path(self.path))
        page = path / "index.html" if path.is_dir() else path
        if not self.path.split("?")[0].endswith(("/", ".html")) or not page.is_file():
            return super().send_head()
        body = page.read_bytes().replace(b"</body>", _LAYOUT_PROBE.encode() + b"</body>", 1)
        self.send_response(200)
        self.send_header("Content-type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        return io.BytesIO(body)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        self.failed.append(f"{code} {self.path}")
        super().send_error(code, message, explain)


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        message = "Debian's chromium is not installed (apt-get install chromium)"
        if os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no") or \
                os.environ.get("MANOWAR_REQUIRE_SERVICES") == "1":
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    return found


@pytest.mark.slow
@pytest.mark.parametrize("page, heading", [
    ("", "manowar-memory"), ("guides/langchain/", "LangChain and LangGraph"),
    ("reference/api/", "Engine and scoped surface"), ("reference/langchain/", "LangChain adapter reference"),
    ("reference/llamaindex/", "LlamaIndex adapter reference"), ("benchmarks/", "Benchmarks"),
    ("notebooks/quickstart/", "manowar-memory quickstart"), ("install/", "Install"),
])
def test_site_renders_in_a_browser(site: Path, page: str, heading: str) -> None:
    """Headless Chromium loads the page from a local server at 1280 px: the page renders, no console
    message (error or otherwise: the theme logs none), no failed request to the server, no table
    wider than the content column (a wide one scrolls inside it) and no code in a block quote."""
    chromium = _chromium()
    _Recorder.failed = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Recorder, directory=str(site)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/{page}"
        run = subprocess.run([chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr",
                              "--v=0", "--window-size=1280,900", "--virtual-time-budget=3000", "--dump-dom", url],
                             capture_output=True, text=True, timeout=120)
    finally:
        server.shutdown()
        server.server_close()
    assert run.returncode == 0, run.stderr[-2000:]
    assert f"{heading}" in run.stdout and "md-content" in run.stdout, "the page did not render"
    console = [line for line in run.stderr.splitlines() if ":CONSOLE" in line]
    assert not console, "\n".join(console)
    assert not _Recorder.failed, _Recorder.failed
    found = re.search(r'data-layout="([^"]*)"', run.stdout)
    assert found, "the layout probe did not run"
    layout = json.loads(html_lib.unescape(found.group(1)))
    assert layout["width"] == 1280, layout
    assert not layout["wide"], f"tables wider than the content column: {layout['wide']}"
    assert not layout["quoted"], f"code rendered as block quotes: {layout['quoted']}"
