"""The package version, in a module of its own so that any module can import it without
importing the package's ``__init__`` (and everything it re-exports).

The version is the installed distribution's (``importlib.metadata``), so it is written in one
place: ``pyproject.toml``. A checkout that is not installed (the tree on ``PYTHONPATH``) reads
the same ``pyproject.toml`` next to the package; anything else reports ``0+unknown``.
"""

from __future__ import annotations

import tomllib
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

__all__ = ["DISTRIBUTION", "__version__"]

#: the distribution (pip) name whose metadata holds the version
DISTRIBUTION = "manowar-memory"
UNKNOWN = "0+unknown"


def _checkout_version(pyproject: Path) -> str | None:
    """The version in ``pyproject`` when it is this project's, else None."""
    try:
        project = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {})
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None
    found = project.get("version")
    return found if project.get("name") == DISTRIBUTION and isinstance(found, str) and found else None


def find_version(pyproject: Path | None = None) -> str:
    """The installed distribution's version, else the checkout's ``pyproject.toml``, else ``0+unknown``."""
    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        pass
    return _checkout_version(pyproject or Path(__file__).resolve().parents[1] / "pyproject.toml") or UNKNOWN


__version__ = find_version()
