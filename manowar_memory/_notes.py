"""Collects the degradations a call went through (cache bypassed, rerank skipped, ...).

A call opens a collector with :func:`collect`; anything below it reports with
:func:`degrade` and the call puts the messages in its result. Work submitted to
threads must run in a copied context (``contextvars.copy_context().run``) to report.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager

from .redaction import redact

_current: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar("manowar_notes", default=None)


@contextmanager
def collect() -> Iterator[list[str]]:
    """Open a collector; yields the list that receives the messages."""
    notes: list[str] = []
    token = _current.set(notes)
    try:
        yield notes
    finally:
        _current.reset(token)


def degrade(message: str) -> None:
    """Report an allowed degradation to the open collector (deduplicated, in order).
    Credentials in the message (an upstream's echoed headers) are redacted."""
    notes = _current.get()
    if notes is None:
        return

    message = redact(message)
    if message not in notes:
        notes.append(message)
