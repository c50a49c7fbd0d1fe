"""The wheels a user installs work on their own: ``python -m build --wheel`` builds the engine and
both adapters, they install into a fresh virtual environment, and the demo and the quickstart
run there on the installed code, not on this checkout's (docs/install.md says how to do this).

The fresh environment reaches the third-party dependencies already installed beside this
interpreter through a ``.pth`` file, so nothing is downloaded: pip installs the three wheels from
no index, and a check run there finds every requirement of the engine with the ``[server,onnx]``
extras and of both adapters met by what is installed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path

import pytest

pytest.importorskip("build", reason="pip install -e '.[dev]' (the build package)")

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
_SKIP = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build", "dist")


def _sources(tmp: Path) -> list[Path]:
    """Copies of the three projects' sources (a build writes egg-info and build/ beside them)."""
    core = tmp / "src" / "manowar-memory"
    core.mkdir(parents=True)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, core / name)
    shutil.copytree(ROOT / "manowar_memory", core / "manowar_memory", ignore=_SKIP)
    out = [core]
    for name in ("langchain_manowar", "llama_index_manowar"):
        out.append(shutil.copytree(ROOT / "integrations" / name, tmp / "src" / name, ignore=_SKIP))
    return out


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    return {**env, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PIP_NO_INDEX": "1",
            "PIP_DISABLE_PIP_VERSION_CHECK": "1", **extra}


def _run(args: list[str | Path], cwd: Path, **env: str) -> str:
    run = subprocess.run([str(a) for a in args], cwd=cwd, env=_clean_env(**env), capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, f"{args}:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    return run.stdout


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("wheels")
    out = tmp / "dist"
    for source in _sources(tmp):
        _run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", out, source], cwd=tmp)
    found = {re.sub(r"-\d.*", "", w.name): w for w in out.glob("*.whl")}
    assert sorted(found) == ["langchain_manowar", "llama_index_manowar", "manowar_memory"], found
    return found


def _metadata(wheel: Path) -> str:
    with zipfile.ZipFile(wheel) as z:
        name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        return z.read(name).decode()


def test_the_wheels_declare_their_extras_and_hold_their_data(wheels: dict[str, Path]) -> None:
    meta = _metadata(wheels["manowar_memory"])
    extras = set(re.findall(r"^Provides-Extra: (\S+)$", meta, re.M))
    assert {"server", "onnx", "local", "mongo", "redis", "temporal", "voyage", "all"} <= extras, extras
    assert re.search(r"^Requires-Dist: fastapi.*; extra == \"server\"$", meta, re.M)
    assert re.search(r"^Requires-Dist: onnxruntime.*; extra == \"onnx\"$", meta, re.M)
    with zipfile.ZipFile(wheels["manowar_memory"]) as z:
        names = set(z.namelist())
    assert {"manowar_memory/py.typed", "manowar_memory/data/sample_conversation.json"} <= names
    assert any(n.endswith(".dist-info/entry_points.txt") for n in names)
    for adapter in ("langchain_manowar", "llama_index_manowar"):
        assert re.search(r"^Requires-Dist: manowar-memory$", _metadata(wheels[adapter]), re.M), adapter
    with zipfile.ZipFile(wheels["llama_index_manowar"]) as z:
        assert "llama_index/retrievers/manowar/__init__.py" in z.namelist()  # the LlamaHub import path


def _quickstart() -> str:
    """The quickstart page's Python blocks that need no model: the code a reader runs first."""
    blocks = re.findall(r"^```python\n(.*?)^```", (ROOT / "docs" / "quickstart.md").read_text(), re.M | re.S)
    chosen = [b for b in blocks if 'embedder="local"' not in b]
    assert len(chosen) >= 2 and any("post_turn" in b for b in chosen)
    return "\n".join(chosen)


# Run in the fresh environment: where each package was imported from, and every requirement of the
# engine with the [server,onnx] extras and of both adapters, checked against what is installed there.
_CHECK = """
import inspect, json
from importlib.metadata import distribution, version, PackageNotFoundError
from packaging.requirements import Requirement

import manowar_memory, langchain_manowar, llama_index_manowar
from llama_index.retrievers.manowar import ManowarRetriever

unmet = []
for dist, extras in (("manowar-memory", ("server", "onnx")), ("langchain-manowar", ()), ("llama-index-manowar", ())):
    for spec in distribution(dist).requires or []:
        req = Requirement(spec)
        if req.marker is not None and not any(req.marker.evaluate({"extra": e}) for e in ("", *extras)):
            continue
        try:
            if not req.specifier.contains(version(req.name), prereleases=True):
                unmet.append(spec)
        except PackageNotFoundError:
            unmet.append(spec)
files = [inspect.getfile(m) for m in (manowar_memory, langchain_manowar, llama_index_manowar, ManowarRetriever)]
print(json.dumps({"files": files, "unmet": unmet,
                  "versions": [manowar_memory.__version__, version("manowar-memory")]}))
"""


def test_the_wheels_install_offline_and_run_from_a_fresh_environment(wheels: dict[str, Path], tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", venv], cwd=tmp_path)
    python = venv / "bin" / "python"
    site = Path(_run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=tmp_path).strip())
    shared = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (site / "_shared_dependencies.pth").write_text("\n".join(sorted(shared)) + "\n")
    # the three wheels alone, from no index: their dependencies are the ones already installed
    _run([python, "-m", "pip", "install", "-q", "--no-index", "--no-deps", *wheels.values()], cwd=tmp_path)
    (tmp_path / "check.py").write_text(_CHECK)
    found = json.loads(_run([python, "check.py"], cwd=tmp_path).strip().splitlines()[-1])
    assert found["unmet"] == [], found["unmet"]  # the [server,onnx] extras and the adapters' needs are met
    assert len(found["files"]) == 4, found
    assert found["versions"][0] == found["versions"][1], found["versions"]  # __version__ is the wheel's metadata
    for file in found["files"]:  # the installed code, not this checkout's
        assert file.startswith(str(site)) and not file.startswith(str(ROOT)), (site, file)
    home = tmp_path / "home"
    demo = _run([venv / "bin" / "manowar", "demo", "--embedder", "fake"], cwd=tmp_path, MANOWAR_HOME=str(home))
    assert "Facts extracted" in demo and "PyCon Lisbon" in demo
    (tmp_path / "quickstart.py").write_text(_quickstart())
    out = _run([python, "quickstart.py"], cwd=tmp_path, MANOWAR_HOME=str(home))
    assert "Lisbon" in out and "Memory context:" in out


# -- the version: one place (pyproject.toml), read from the installed metadata --------------------


def test_the_version_is_pyprojects_and_the_installed_distributions() -> None:
    """The suite runs the checkout's code with only the dependencies installed (scripts/test.sh),
    so the version comes from pyproject.toml; where the distribution is installed too, its
    metadata says the same (the wheel test below checks the installed case in a venv of its own)."""
    from importlib.metadata import PackageNotFoundError, version

    import manowar_memory
    from manowar_memory import _version

    expected = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
    assert manowar_memory.__version__ == _version.find_version() == expected
    try:
        installed = version("manowar-memory")
    except PackageNotFoundError:
        return
    assert installed == expected


def test_a_checkout_that_is_not_installed_reads_its_pyproject_version(monkeypatch: pytest.MonkeyPatch,
                                                                       tmp_path: Path) -> None:
    from importlib.metadata import PackageNotFoundError

    from manowar_memory import _version

    def missing(name: str) -> str:
        raise PackageNotFoundError(name)

    monkeypatch.setattr(_version, "version", missing)
    expected = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
    assert _version.find_version() == expected  # the pyproject.toml next to the package
    other = tmp_path / "pyproject.toml"
    other.write_text('[project]\nname = "another-project"\nversion = "9.9"\n', encoding="utf-8")
    assert _version.find_version(other) == "0+unknown"  # another project's file is not ours
    assert _version.find_version(tmp_path / "missing.toml") == "0+unknown"
