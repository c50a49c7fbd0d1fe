"""Scopes: who a memory belongs to, normalised from the loose shapes callers use."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal
from urllib.parse import quote

from ._util import as_str
from .errors import ScopeError
from .filters import FilterValue, normalize_filters

__all__ = ["SCOPE_FIELDS", "Scope", "ScopeLike", "owns", "visible"]

Mode = Literal["global", "local"]

_ALIASES: dict[str, tuple[str, ...]] = {
    "agent_wallet": ("agent_wallet", "agentWallet", "agent_id"),
    "user_address": ("user_address", "userAddress", "user_id"),
    "thread_id": ("thread_id", "threadId", "runId", "run_id"),
    "mode": ("mode",),
    "hai_id": ("hai_id", "haiId"),
    "filters": ("filters",),
    "metadata": ("metadata",),
}
#: each scope field by its reference (camelCase) name, as stored rows and filters spell it
SCOPE_FIELDS: dict[str, str] = {
    "agentWallet": "agent_wallet", "userAddress": "user_address", "threadId": "thread_id", "mode": "mode",
    "haiId": "hai_id",
}
_ACCEPTED = sorted({alias for names in _ALIASES.values() for alias in names})


def _blank(name: str) -> str:
    """The message for an id that is empty or only whitespace."""
    return (f"{name} is blank: pass a non-empty id, or leave it out (None) for none. An empty id is refused "
            "rather than read as 'no user', which would share the data with every user of the agent")


@dataclass(frozen=True)
class Scope:
    """Who a memory belongs to and which slice of memory a read may see.

    ``agent_wallet`` is required. A read with ``user_address`` sees that user's memories
    plus the agent's shared (user-less) ones; a read without a user sees only the shared
    ones, never other users'. ``thread_id`` narrows the hot layers (working, scene);
    durable layers ignore it. ``mode`` is ``"global"`` or ``"local"`` (local needs
    ``hai_id``); an absent mode applies no mode filter. ``filters`` are allowlisted
    filters applied to every read in this scope; ``metadata`` is merged into every write.
    An id that is empty or only whitespace raises :class:`ScopeError`: "no user" (or no
    thread, no HAI) is only ever ``None``.
    """

    agent_wallet: str
    user_address: str | None = None
    thread_id: str | None = None
    mode: Mode | None = None
    hai_id: str | None = None
    filters: Mapping[str, FilterValue] = field(default_factory=dict)
    metadata: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if isinstance(self.agent_wallet, str) and not self.agent_wallet.strip():
            raise ScopeError(_blank("agent_wallet"))
        agent = as_str(self.agent_wallet)
        if agent is None:
            raise ScopeError("agent_wallet is required: pass Scope(agent_wallet='your-agent-id', ...)")
        object.__setattr__(self, "agent_wallet", agent)
        for name in ("user_address", "thread_id", "hai_id"):
            raw = getattr(self, name)
            if raw is not None and not isinstance(raw, str):
                raise ScopeError(f"{name} must be a string, got {type(raw).__name__}")
            if raw is not None and not raw.strip():
                raise ScopeError(_blank(name))
            object.__setattr__(self, name, as_str(raw))
        for name in ("agent_wallet", "user_address", "thread_id", "hai_id"):
            value = getattr(self, name)
            if value is not None and not value.isascii():
                try:
                    value.encode("utf-8")
                except UnicodeEncodeError as exc:
                    raise ScopeError(
                        f"{name} holds an unpaired surrogate (index {exc.start}), which is not valid Unicode text: "
                        "decode the id correctly"
                    ) from None
        if self.mode is not None and self.mode not in ("global", "local"):
            raise ScopeError(f"mode must be 'global', 'local' or None, got {self.mode!r}")
        if self.mode == "local" and self.hai_id is None:
            raise ScopeError("hai_id is required when mode is 'local'")
        if not isinstance(self.metadata, Mapping):
            raise ScopeError(f"metadata must be a mapping, got {type(self.metadata).__name__}")
        object.__setattr__(self, "filters", normalize_filters(self.filters))
        object.__setattr__(self, "metadata", dict(self.metadata))

    def __hash__(self) -> int:
        return hash((self.agent_wallet, self.user_address, self.thread_id, self.mode, self.hai_id))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Scope:
        """Normalise a loose scope dict (reference aliases: ``agentWallet``/``agent_id``, ...).

        Unknown keys are rejected rather than dropped. An unrecognised ``mode`` value
        is rejected too (the reference silently ignored it).
        """
        if not isinstance(data, Mapping):
            raise ScopeError(f"a scope must be a mapping or Scope, got {type(data).__name__}")
        unknown = sorted(set(data) - set(_ACCEPTED))
        if unknown:
            raise ScopeError(f"unknown scope key(s) {unknown}; accepted keys are {_ACCEPTED}")
        values: dict[str, Any] = {}
        for target, names in _ALIASES.items():
            for name in names:
                if name in data and data[name] is not None:
                    raw = data[name]
                    if isinstance(raw, str) and not raw.strip() and target != "mode":
                        raise ScopeError(_blank(name))
                    values[target] = as_str(raw) if isinstance(raw, str) else raw
                    if values[target] is not None:
                        break
        if values.get("agent_wallet") is None:
            raise ScopeError("agentWallet is required (also accepted as agent_wallet or agent_id)")
        return cls(**{k: v for k, v in values.items() if v is not None})

    @classmethod
    def coerce(cls, value: ScopeLike) -> Scope:
        """Return ``value`` as a Scope (a Scope passes through; a mapping is normalised)."""
        if isinstance(value, Scope):
            return value
        return cls.from_dict(value)

    def with_thread(self, thread_id: str | None) -> Scope:
        """A copy with another thread id."""
        return replace(self, thread_id=thread_id)

    @property
    def scope_id(self) -> str:
        """The reference's ``scopeId``: hai_id when set, else the agent."""
        return self.hai_id or self.agent_wallet

    def thread_session_id(self) -> str:
        """Session id of this scope's thread: an unambiguous function of the whole scope.

        ``session:{mode}:{agent}[:h:{hai}]:{thread}[:u:{user}]``, each part percent-encoded
        (so a ``:`` inside a value cannot forge another scope's id), ``any`` for no mode and
        ``main`` for no thread. The reference dropped the user, dropped the agent of a local
        scope, treated no mode as global and joined raw values, so different scopes could share
        one working buffer."""

        def q(value: str) -> str:
            return quote(value, safe="-_.!~*'()")

        key = f"session:{self.mode or 'any'}:{q(self.agent_wallet)}"
        if self.hai_id is not None:
            key += f":h:{q(self.hai_id)}"
        key += f":{q(self.thread_id or 'main')}"
        return f"{key}:u:{q(self.user_address)}" if self.user_address else key

    def cache_key(self) -> str:
        """A stable key for caches: every part URI-encoded, missing parts as ``_``. Case is kept,
        as scopes keep it: a lower-cased key let ``Alice`` and ``alice`` share cached results."""

        def part(v: str | None) -> str:
            return "_" if not v else quote(v, safe="-_.!~*'()")

        return (
            f"a:{part(self.agent_wallet)}:m:{part(self.mode)}:h:{part(self.hai_id)}"
            f":u:{part(self.user_address)}:t:{part(self.thread_id)}"
        )

    def as_dict(self) -> dict[str, Any]:
        """The scope as plain data (reference field names), omitting absent values."""
        values = {camel: getattr(self, name) for camel, name in SCOPE_FIELDS.items()}
        return {camel: value for camel, value in values.items() if value is not None}


ScopeLike = Scope | Mapping[str, Any]


# -- the ownership and visibility rules: the engine and the scoped surface both read them --------


def owns(scope: Scope, record: Any) -> bool:
    """Whether ``scope`` may write ``record``: same agent, user, mode and HAI (the thread is ignored)."""
    return (
        getattr(record, "agent_wallet", None) == scope.agent_wallet
        and getattr(record, "user_address", None) == scope.user_address
        and getattr(record, "mode", None) == scope.mode
        and getattr(record, "hai_id", None) == scope.hai_id
    )


def visible(reader: Scope, record: Any, *, durable: bool = True) -> bool:
    """The engine's visibility rule for one row: same agent; the reader's user or none; the
    reader's mode and HAI when it sets them; the thread too for the hot layers (``durable=False``)."""
    if getattr(record, "agent_wallet", None) != reader.agent_wallet:
        return False
    user = getattr(record, "user_address", None)
    if user is not None and user != reader.user_address:
        return False
    if reader.mode is not None and getattr(record, "mode", None) != reader.mode:
        return False
    if reader.hai_id is not None and getattr(record, "hai_id", None) != reader.hai_id:
        return False
    return durable or reader.thread_id is None or getattr(record, "thread_id", None) == reader.thread_id
