"""Memory as a service: the REST API (``manowar serve``) and the MCP server (``manowar mcp``).

Both act only through :meth:`MemoryEngine.scoped` and the tool catalog, so a remote caller
gets the isolation, trust rules and errors a Python caller gets. Needs the ``server`` extra
(``pip install "manowar-memory[server]"``).
"""

from __future__ import annotations

from .auth import (
    KEYS_ENV,
    ApiKeys,
    AuthError,
    ForbiddenScopeError,
    KeyBinding,
    hash_key,
    new_key,
    presented_key,
    scope_for,
)

__all__ = ["KEYS_ENV", "ApiKeys", "AuthError", "ForbiddenScopeError", "KeyBinding", "create_app", "hash_key",
           "new_key", "presented_key", "scope_for"]


def __getattr__(name: str) -> object:
    if name == "create_app":  # FastAPI is imported only when the app is built
        from .app import create_app

        return create_app
    raise AttributeError(name)
