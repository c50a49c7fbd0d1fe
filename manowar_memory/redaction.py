"""Credential redaction for every message, log line and stored document.

An upstream that echoes the request (its headers or its body) in an error answer would
otherwise put a provider key into an exception, a degradation note, a log record or a job
document. :func:`redact` replaces

* every *known* secret value: the keys providers were configured with (they call
  :func:`register_secret`) and the values of the provider key variables in
  :data:`SECRET_ENV_VARS`, read when redacting;
* common credential shapes: ``Authorization: Bearer/Basic/Token ...``, header or parameter
  pairs whose name says key, token, secret, password or JWT (``x-api-key: ...``,
  ``"pinata_secret_api_key": "..."``, ``?api_key=...``), JSON Web Tokens, well-known key
  prefixes (``sk-``, ``pa-``) and the password in a URL's user info
  (``mongodb://user:***@host``),

with :data:`REDACTED`. :func:`redact_value` does the same through dicts, lists and tuples
(job documents), and :class:`RedactingFilter` through log records (message, arguments and
the formatted traceback): the library's loggers carry it, and each provider puts it on its
SDK's loggers (:func:`redact_library_logs`). :class:`~manowar_memory.errors.ManowarError` redacts its own
message, so every error this library raises, and every degradation built from one, is clean.

>>> register_secret("k-123456789")
>>> redact('upstream said: {"authorization": "Bearer k-123456789", "x": 1}')
'upstream said: {"authorization": "Bearer [REDACTED]", "x": 1}'
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Iterable
from typing import Any

__all__ = [
    "REDACTED",
    "SECRET_ENV_VARS",
    "RedactingFilter",
    "install_log_redaction",
    "redact",
    "redact_library_logs",
    "redact_value",
    "register_secret",
]

#: what a credential is replaced with
REDACTED = "[REDACTED]"

#: environment variables whose values are provider credentials (redacted wherever they appear)
SECRET_ENV_VARS: tuple[str, ...] = (
    "VOYAGE_API_KEY", "CO_API_KEY", "COHERE_API_KEY", "CF_API_TOKEN", "CLOUDFLARE_API_KEY",
    "PINATA_JWT", "PINATA_API_KEY", "PINATA_API_Key", "PINATA_API_SECRET",
    "OPENAI_API_KEY", "ANTHROPIC_API_KEY",
)

#: shorter values are not treated as secrets (they would blank out ordinary words)
_MIN_SECRET_LEN = 6
#: a value of letters only must be at least this long to count as a secret ("expired" is not one)
_MIN_WORDLIKE_SECRET_LEN = 16
_MAX_REGISTERED = 256

_lock = threading.Lock()
_registered: dict[str, None] = {}  # insertion-ordered, bounded

# a header or parameter whose name says it carries a credential, then ':' or '=' and the value
_NAME = (r"(?:[A-Za-z0-9_-]*(?:api[_-]?key|api[_-]?secret|secret[_-]?api[_-]?key|secret[_-]?key|client[_-]?secret"
         r"|access[_-]?token|auth[_-]?token|refresh[_-]?token|id[_-]?token|token|passw(?:or)?d|jwt|secret))")
_TOKEN = r"[A-Za-z0-9._~+/=:-]"
# a credential-looking value: has a digit, or is long (ordinary words are neither)
_CREDENTIAL = rf"(?:(?={_TOKEN}*\d){_TOKEN}{{6,}}|{_TOKEN}{{20,}})"
_VALUE = r"""[^\s"',;&}\]]"""
_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    # Authorization / Proxy-Authorization headers: whatever follows, with or without a scheme
    (re.compile(r"""(?i)(["']?(?:proxy-)?authorization["']?\s*[:=]\s*["']?)"""
                r"""(?!(?:(?:bearer|basic|token|digest)\s+)?\[REDACTED\])((?:(?:bearer|basic|token|digest)\s+)?)"""
                rf"""{_VALUE}{{4,}}"""), r"\1\2" + REDACTED),
    # a bare "Bearer <token>"
    (re.compile(rf"(?i)\b(bearer\s+)(?!\[REDACTED\]){_CREDENTIAL}"), r"\1" + REDACTED),
    # name=value / "name": "value" pairs (headers, JSON, query strings)
    (re.compile(r"""(?i)(["']?\b""" + _NAME + r"""["']?\s*[:=]\s*["']?)(?!\[REDACTED\])"""
                rf"""(?:(?={_VALUE}*\d){_VALUE}{{6,}}|{_VALUE}{{20,}})"""), r"\1" + REDACTED),
    # JSON Web Tokens (also cut short: header and payload are enough to recognise one)
    (re.compile(r"\beyJ[A-Za-z0-9_-]{8,}(?:\.[A-Za-z0-9_-]*){0,2}"), REDACTED),
    # well-known key prefixes (OpenAI-style sk-, Voyage pa-)
    (re.compile(r"(?<![A-Za-z0-9_-])(?:sk|pa)-[A-Za-z0-9_-]{16,}"), REDACTED),
    # user:password@ in a URL
    (re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://[^/\s:@]*:)[^/\s@]+@"), r"\1" + REDACTED + "@"),
)


def _secret_like(value: str) -> bool:
    """Long enough, and not an ordinary word: redacting it cannot blank out plain text."""
    if len(value) < _MIN_SECRET_LEN:
        return False
    return len(value) >= _MIN_WORDLIKE_SECRET_LEN or not value.isalpha()


def register_secret(value: str | None) -> None:
    """Remember a credential value so :func:`redact` removes it wherever it appears.

    Providers call this with the key they were configured with (or read from the
    environment). Values that could be ordinary words (shorter than 6 characters, or
    letters only and shorter than 16) are ignored."""
    if not isinstance(value, str):
        return
    value = value.strip()
    if not _secret_like(value):
        return
    with _lock:
        if value in _registered:
            return
        if len(_registered) >= _MAX_REGISTERED:
            _registered.pop(next(iter(_registered)))
        _registered[value] = None


def _known(extra: Iterable[str | None]) -> list[str]:
    values = set(_registered)
    for name in SECRET_ENV_VARS:
        env = (os.environ.get(name) or "").strip()
        if _secret_like(env):
            values.add(env)
    for value in extra:
        if isinstance(value, str) and _secret_like(value.strip()):
            values.add(value.strip())
    return sorted(values, key=len, reverse=True)  # longest first: a key that contains another goes whole


def redact(text: str, secrets: Iterable[str | None] = ()) -> str:
    """``text`` with every known secret (registered, in the key variables, or in ``secrets``)
    and every credential-shaped substring replaced by :data:`REDACTED`.

    Redact *before* shortening a message: a key cut in half is no longer recognisable."""
    if not isinstance(text, str) or not text:
        return text
    with _lock:
        known = _known(secrets)
    for value in known:
        if value in text:
            text = text.replace(value, REDACTED)
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text


def redact_value(value: Any, secrets: Iterable[str | None] = ()) -> Any:
    """:func:`redact` applied to every string (and dict key) inside dicts, lists and tuples."""
    extra = tuple(secrets)
    if isinstance(value, str):
        return redact(value, extra)
    if isinstance(value, dict):
        return {redact_value(k, extra) if isinstance(k, str) else k: redact_value(v, extra) for k, v in value.items()}
    if isinstance(value, list):
        return [redact_value(v, extra) for v in value]
    if isinstance(value, tuple):
        return tuple(redact_value(v, extra) for v in value)
    return value


class RedactingFilter(logging.Filter):
    """A logging filter that redacts a record's message, arguments and traceback text.

    It rewrites the record in place (``msg`` becomes the redacted, formatted message and
    ``args`` is emptied; ``exc_text`` is the redacted traceback), so every handler sees
    only the redacted text."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a broken format string is logged as it is
            message = str(record.msg)
        record.msg = redact(message)
        record.args = ()
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        return True


_FILTER = RedactingFilter()


def install_log_redaction(logger: logging.Logger | str) -> logging.Logger:
    """Add the redacting filter to ``logger`` (once) and return it."""
    log = logging.getLogger(logger) if isinstance(logger, str) else logger
    if not any(isinstance(f, RedactingFilter) for f in log.filters):
        log.addFilter(_FILTER)
    return log


def redact_library_logs(*prefixes: str) -> None:
    """Install the redacting filter on the logger named by each prefix and on every logger
    below it that exists now (a filter applies only to the logger a record is made on).

    Provider modules call this for their SDK after importing it (``voyage`` logs an
    upstream's error body at INFO, ``cohere`` and ``httpx`` log requests)."""
    for prefix in prefixes:
        install_log_redaction(prefix)
        for name in list(logging.root.manager.loggerDict):
            if name.startswith(prefix + "."):
                install_log_redaction(name)
