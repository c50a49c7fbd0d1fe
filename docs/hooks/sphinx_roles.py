"""A griffe extension for the API reference: the docstrings use Sphinx roles
(``:class:`Scope```, ``:meth:`~x.y```) and double-backtick literals, which Markdown shows as
text; render them as inline code instead."""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:class|meth|func|attr|data|mod|exc|obj):`~?([^`]+)`")
_LITERAL = re.compile(r"``([^`]+)``")


class SphinxRoles(griffe.Extension):
    """Rewrite roles and ``literals`` in every docstring to Markdown inline code."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            text = _ROLE.sub(lambda m: f"`{m.group(1).rsplit('.', 1)[-1] if '~' in m.group(0) else m.group(1)}`",
                             obj.docstring.value)
            obj.docstring.value = _LITERAL.sub(r"`\1`", text)
