"""Cron expressions of the maintenance schedules: plain 5-field cron only (both backends read it
the same way), checked with a message naming the setting, and their fire times in a time zone."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from ..errors import ConfigurationError

__all__ = ["CRON_EXAMPLE", "InvalidCronError", "next_fire_times", "validate_cron"]

#: a valid expression, shown in every cron error
CRON_EXAMPLE = "0 2 * * *"


class InvalidCronError(ConfigurationError):
    """A cron expression that cannot be used; the message names the setting and shows a valid one."""


_ITEM = r"(\*|\d{1,2}(-\d{1,2})?|[A-Za-z]{3}(-[A-Za-z]{3})?)(/\d{1,2})?"
_FIELD = re.compile(rf"^{_ITEM}(,{_ITEM})*$")


def validate_cron(expr: str, *, setting: str = "cron") -> str:
    """Check a 5-field cron expression (minute hour day-of-month month day-of-week) and return
    it with its spaces normalised. Both backends read it the same way, so the extensions
    only one of them knows (seconds or year fields, ``@daily``, ``L``, ``#``) are refused.
    Raises :class:`InvalidCronError` naming ``setting``."""
    hint = f"use 5 fields (minute hour day-of-month month day-of-week), e.g. {setting}={CRON_EXAMPLE!r} for daily at 02:00"
    if not isinstance(expr, str) or not expr.strip():
        raise InvalidCronError(f"{setting} is empty; {hint}")
    fields = expr.split()
    if len(fields) != 5:
        raise InvalidCronError(f"{setting}={expr!r} has {len(fields)} fields; {hint}")
    bad = [f for f in fields if not _FIELD.match(f)]
    if bad:
        raise InvalidCronError(f"{setting}={expr!r}: field {bad[0]!r} uses syntax outside plain cron; {hint}")
    text = " ".join(fields)
    try:
        next(iter(CronSim(text, datetime(2000, 1, 1, tzinfo=UTC))))
    except (CronSimError, StopIteration) as exc:
        raise InvalidCronError(f"{setting}={expr!r} is not a valid cron expression ({exc or 'never fires'}); {hint}") from None
    return text


def _zone(name: str, setting: str = "timezone") -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ConfigurationError(f"{setting}={name!r} is not an IANA time zone; use e.g. 'UTC' or 'Europe/Berlin'") from exc


def _fire_iter(cron: str, tz: str, after_ms: int) -> Iterator[int]:
    start = datetime.fromtimestamp(after_ms / 1000, tz=_zone(tz))
    for dt in CronSim(cron, start):
        yield int(dt.timestamp() * 1000)


def next_fire_times(cron: str, after_ms: int, *, tz: str = "UTC", count: int = 1) -> list[int]:
    """The next ``count`` fire times (epoch ms) strictly after ``after_ms``."""
    it = _fire_iter(validate_cron(cron), tz, after_ms)
    return [next(it) for _ in range(count)]

