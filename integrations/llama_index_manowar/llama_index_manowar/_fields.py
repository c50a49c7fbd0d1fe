"""Pydantic field types shared by the adapters (private).

Every adapter is built from ``engine=`` (a :class:`MemoryEngine`) and ``scope=`` (a
:class:`Scope` or a loose scope mapping, normalised with :meth:`Scope.coerce`). Both are
excluded from serialisation: an engine is a live object, not configuration.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator, Field, InstanceOf

from manowar_memory.engine import MemoryEngine
from manowar_memory.scope import Scope
from manowar_memory.scoped import ScopedMemory

__all__ = ["EngineField", "OptionalEngineField", "OptionalScopeField", "ScopeField", "coerce_scope", "settings_surface"]

#: The scope of a surface used only to read engine settings (embedder, reranker, config):
#: embeddings and ranking stages have no owner, and any scope reaches the same settings.
SETTINGS_SCOPE = Scope(agent_wallet="llama-index-manowar:settings")


def coerce_scope(value: Any) -> Any:
    """A Scope from a Scope or a scope mapping (aliases allowed); None passes through."""
    if value is None or isinstance(value, Scope):
        return value
    return Scope.coerce(value)


EngineField = Annotated[InstanceOf[MemoryEngine], Field(exclude=True, description="The memory engine.")]
ScopeField = Annotated[
    InstanceOf[Scope], BeforeValidator(coerce_scope),
    Field(exclude=True, description="Whose memory: a Scope or a scope mapping."),
]
OptionalEngineField = Annotated[
    InstanceOf[MemoryEngine] | None, Field(exclude=True, description="The memory engine (optional here)."),
]
"""Use as ``engine: OptionalEngineField = None``."""
def settings_surface(engine: MemoryEngine, scope: Scope | None) -> ScopedMemory:
    """The scoped surface a settings-only adapter (embeddings, node postprocessors) reads the
    engine's embedder, reranker and config through: ``scope`` when given, else a placeholder
    (nothing is read from or written to it)."""
    return engine.scoped(scope if scope is not None else SETTINGS_SCOPE)


OptionalScopeField = Annotated[
    InstanceOf[Scope] | None, BeforeValidator(coerce_scope),
    Field(exclude=True, description="Whose memory (optional here)."),
]
"""Use as ``scope: OptionalScopeField = None``."""
