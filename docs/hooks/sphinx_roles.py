"""A griffe extension for the API reference.

* The docstrings use Sphinx roles (``:class:`Scope```, ``:meth:`~x.y```) and double-backtick
  literals, which Markdown shows as text: they become inline code.
* Doctest examples (``>>>`` lines, their ``...`` continuations and output) would read as nested
  Markdown block quotes with their lines run together: they become ``pycon`` code blocks.
* A parameter default or a class field's value naming a module constant (``k: int = DEFAULT_K``)
  shows the constant's value, which is what a reader needs, instead of its name."""

from __future__ import annotations

import importlib
import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:class|meth|func|attr|data|mod|exc|obj):`~?([^`]+)`")
_LITERAL = re.compile(r"``([^`]+)``")
_PROMPT = re.compile(r"^(?P<indent>\s*)>>>(?: |$)")
_SHOWN = (bool, int, float, str, bytes, tuple, frozenset, type(None))  # values whose repr reads as code


def _inline(text: str) -> str:
    text = _ROLE.sub(lambda m: f"`{m.group(1).rsplit('.', 1)[-1] if '~' in m.group(0) else m.group(1)}`", text)
    return _LITERAL.sub(r"`\1`", text)


def fence_doctests(text: str) -> str:
    """``text`` with each run of doctest lines (from a ``>>>`` line to the next blank line) in a
    ``pycon`` fence at the run's indentation; Sphinx roles and literals rewritten outside them."""
    lines = text.split("\n")
    out: list[str] = []
    prose: list[str] = []
    i = 0
    while i < len(lines):
        m = _PROMPT.match(lines[i])
        if m is None:
            prose.append(lines[i])
            i += 1
            continue
        out.extend(_inline("\n".join(prose)).split("\n") if prose else [])
        prose = []
        indent = m.group("indent")
        if out and out[-1].strip():
            out.append("")  # a fence needs a blank line above it inside a paragraph or a list item
        out.append(f"{indent}```pycon")
        while i < len(lines) and lines[i].strip():
            out.append(indent + lines[i][len(indent):] if lines[i].startswith(indent) else lines[i])
            i += 1
        out.append(f"{indent}```")
    out.extend(_inline("\n".join(prose)).split("\n") if prose else [])
    return "\n".join(out)


def _constant_value(module: str, name: str) -> object:
    """The value of ``name`` as the running code sees it from ``module``, or a KeyError."""
    try:
        value: Any = importlib.import_module(module)
        for part in name.split("."):
            value = getattr(value, part)
    except (ImportError, AttributeError) as exc:
        raise KeyError(name) from exc
    return value


_CONSTANT = re.compile(r"\b[A-Z][A-Z0-9_]*[A-Z0-9]\b")


def _with_values(code: str, module: str) -> str | None:
    """``code`` (a default or an attribute's value) with each module constant it names replaced by
    the constant's value, or None when it names none that resolves to a plain value."""
    changed = False

    def value(m: re.Match[str]) -> str:
        nonlocal changed
        try:
            found = _constant_value(module, m.group(0))
        except KeyError:
            return m.group(0)
        if not isinstance(found, _SHOWN):
            return m.group(0)
        changed = True
        return repr(found)

    out = _CONSTANT.sub(value, code)
    return out if changed else None


class SphinxRoles(griffe.Extension):
    """Rewrite docstrings (roles, literals, doctests) and constant defaults for the reference."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = fence_doctests(obj.docstring.value)
        if isinstance(obj, griffe.Function):
            for parameter in obj.parameters:
                if parameter.default is not None:
                    shown = _with_values(str(parameter.default), obj.module.path)
                    if shown is not None:
                        parameter.default = shown
        elif isinstance(obj, griffe.Attribute) and obj.value is not None and obj.parent is not None \
                and obj.parent.is_class:  # a field's default (`k: int = Field(DEFAULT_K, ge=1)`), not a constant itself
            shown = _with_values(str(obj.value), obj.module.path)
            if shown is not None:
                obj.value = shown
