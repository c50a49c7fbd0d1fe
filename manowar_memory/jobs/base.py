"""What the maintenance jobs share: the params base model, the time window, the owner (the scope a
job of one scope may touch) and the progress ticker."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from .._util import DAY_MS, content_hash
from ..errors import InvalidInputError

__all__ = ["Owner", "Progress", "TimeRange"]

Progress = Callable[[int], None]  # called with the number of rows just processed
T = TypeVar("T")


def _tick(items: Iterable[T], progress: Progress | None, every: int = 1000) -> Iterator[T]:
    n = 0
    for item in items:
        yield item
        n += 1
        if progress is not None and n % every == 0:
            progress(every)
    if progress is not None and n % every:
        progress(n % every)


class _Params(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class TimeRange(_Params):
    """An inclusive createdAt window in epoch milliseconds."""

    start: int = Field(description="window start, epoch ms (inclusive)")
    end: int = Field(description="window end, epoch ms (inclusive)")


class Owner(_Params):
    """The rows a job of one scope may read and change: the rows that scope owns (the job's
    agent with exactly this user, mode and HAI, as :func:`manowar_memory.scoped.owns` decides).
    A job without an owner acts on every row of its agent: only the application runs those."""

    user_address: str | None = Field(default=None, description="the user (None: the agent's user-less rows)")
    mode: Literal["global", "local"] | None = Field(default=None, description="the mode")
    hai_id: str | None = Field(default=None, description="the HAI")

    def owns(self, row: Any) -> bool:
        """Whether ``row`` (anything with user_address, mode, hai_id) is this owner's."""
        return (row.user_address, row.mode, row.hai_id) == (self.user_address, self.mode, self.hai_id)

    def key(self, agent_wallet: str) -> tuple[str, str | None, str | None, str | None]:
        """The owner's scope key with ``agent_wallet``."""
        return (agent_wallet, self.user_address, self.mode, self.hai_id)

    def fields(self) -> dict[str, Any]:
        """The owner as the scope fields of a stored artifact."""
        return {"user_address": self.user_address, "mode": self.mode, "hai_id": self.hai_id}


def _owned_by(owner: Owner | None, row: Any) -> bool:
    return owner is None or owner.owns(row)


def _owner_users(owner: Owner | None) -> tuple[str | None] | None:
    """The users whose rows a job of ``owner`` reads from the store (None: every user): a job
    of one scope never reads another user's rows. Its user's rows of another mode or HAI are
    still read and left out by :func:`_owned_by`."""
    return None if owner is None else (owner.user_address,)


def _owner_tag(owner: Owner | None) -> str:
    """A stable tag of the owner for artifact ids ('' for an agent-wide job)."""
    if owner is None:
        return ""
    return content_hash(json.dumps([owner.user_address, owner.mode, owner.hai_id], ensure_ascii=False), 12)


_OWNER = Field(default=None, description="only the rows of this scope (set by the scoped surface); None: the whole agent")


def _window(rng: TimeRange | None, window_days: float | None, default_days: float, now: int) -> tuple[int, int]:
    if rng is not None:
        if rng.end < rng.start:
            raise InvalidInputError(f"time range end ({rng.end}) is before its start ({rng.start})")
        return rng.start, rng.end
    days = window_days if (window_days is not None and math.isfinite(window_days) and window_days > 0) else default_days
    return now - int(days * DAY_MS), now

