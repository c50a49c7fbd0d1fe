"""The static checks are part of the suite: ``mypy --strict`` and ``ruff check`` over the paths
configured in pyproject.toml ([tool.mypy] files, [tool.ruff]) must report nothing.

Run as tests (not as a separate step of scripts/test.sh) so that the README's one test command
runs them, their findings appear in pytest's summary like any other failure, and a targeted
``scripts/test.sh tests/x.py`` run stays fast."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=900,
                          check=False)


def test_mypy_strict_reports_nothing() -> None:
    """mypy --strict (with the pydantic plugin) on the core and both adapters."""
    done = _run("mypy")
    assert done.returncode == 0, f"mypy found problems:\n{done.stdout}{done.stderr}"


def test_ruff_reports_nothing() -> None:
    """ruff check with the project's rule set on the whole repository."""
    done = _run("ruff", "check", "--output-format", "concise", ".")
    assert done.returncode == 0, f"ruff found problems:\n{done.stdout}{done.stderr}"
