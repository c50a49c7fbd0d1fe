"""Print the third-party requirements of the project and its integrations, one per line.

    python3 scripts/requirements.py all dev

Reads pyproject.toml and integrations/*/pyproject.toml, follows the project's references to
its own extras (``manowar-memory[local,onnx]``) and leaves out the project's own
distributions, so a virtual environment can hold every dependency while the code itself
comes from whichever checkout is being tested (``scripts/test.sh`` puts it on PYTHONPATH).
That lets every clone share one environment instead of installing torch and the rest again.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[([^\]]*)\])?")


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirements(extras: list[str]) -> list[str]:
    """Third-party requirement strings for the root project with ``extras`` and every integration."""
    projects = {}
    for path in [ROOT / "pyproject.toml", *sorted(ROOT.glob("integrations/*/pyproject.toml"))]:
        project = tomllib.loads(path.read_text(encoding="utf-8"))["project"]
        projects[_canonical(project["name"])] = project
    root = _canonical(tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["name"])

    found: dict[str, None] = {}
    seen: set[tuple[str, str]] = set()

    def visit(name: str, extra: str | None) -> None:
        if (name, extra or "") in seen:
            return
        seen.add((name, extra or ""))
        project = projects[name]
        specs = project.get("dependencies", []) if extra is None else project.get("optional-dependencies", {})[extra]
        for spec in specs:
            match = _NAME.match(spec)
            if match is None:
                raise SystemExit(f"cannot read the requirement {spec!r} of {name}")
            dep = _canonical(match.group(1))
            if dep in projects:
                visit(dep, None)
                for sub in filter(None, (e.strip() for e in (match.group(2) or "").split(","))):
                    visit(dep, sub)
            else:
                found[spec.strip()] = None

    visit(root, None)
    for extra in extras:
        visit(root, extra)
    for name in projects:
        if name != root:
            visit(name, None)
    return list(found)


if __name__ == "__main__":
    print("\n".join(requirements(sys.argv[1:])))
