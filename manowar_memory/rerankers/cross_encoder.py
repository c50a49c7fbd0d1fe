"""A local cross-encoder (sentence-transformers ``CrossEncoder``) loaded from disk only.

No model is downloaded: ``model_path`` must be a directory holding a saved cross-encoder
(for example one written by ``CrossEncoder(...).save(path)`` on a machine with network).
"""

from __future__ import annotations

import importlib.util
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import ConfigurationError, MissingDependencyError, RerankError
from ._shared import check_request, finish_results
from .base import RerankResult

__all__ = ["CrossEncoderReranker"]


def _has_sentence_transformers() -> bool:
    try:
        return importlib.util.find_spec("sentence_transformers") is not None
    except (ImportError, ValueError):
        return False


def _load_cross_encoder(path: str, device: str, max_length: int | None) -> Any:
    """Load a CrossEncoder from a local directory (a seam for tests)."""
    from sentence_transformers import CrossEncoder

    return CrossEncoder(path, device=device, max_length=max_length, local_files_only=True)


class CrossEncoderReranker:
    """Scores (query, document) pairs with a cross-encoder on this machine.

    The model loads on the first :meth:`rerank` (thread-safe; :meth:`load` warms it up).
    ``timeout`` is accepted for the protocol but not enforced: local inference cannot be
    interrupted, so the caller's deadline (the ranking stage's 0.8 s) is what bounds it.
    A missing path raises :class:`ConfigurationError` here; a model that fails to load or
    score raises :class:`RerankError` from :meth:`rerank`.
    """

    def __init__(
        self,
        model_path: str | os.PathLike[str] | None = None,
        *,
        device: str = "cpu",
        batch_size: int = 32,
        max_length: int | None = 512,
    ) -> None:
        if model_path is None or not str(model_path).strip():
            raise ConfigurationError(
                "CrossEncoderReranker needs model_path, a directory with a cross-encoder saved on disk "
                "(models are never downloaded)"
            )
        path = Path(model_path).expanduser()
        if not path.is_dir():
            state = "is not a directory" if path.exists() else "does not exist"
            raise ConfigurationError(
                f"cross-encoder model path {str(model_path)!r} {state}; point it at a saved cross-encoder "
                "directory (models are never downloaded)"
            )
        if not _has_sentence_transformers():
            raise MissingDependencyError("sentence-transformers", "local", "The local cross-encoder reranker")
        self.path = path
        self.device = device
        self.batch_size = batch_size
        self.max_length = max_length
        self.model_id = f"local:{path}"
        self._model: Any = None
        self._load_lock = threading.Lock()
        self._predict_lock = threading.Lock()

    def load(self) -> Any:
        """Load the model now (once) and return it; RerankError when it cannot load."""
        if self._model is None:
            with self._load_lock:
                if self._model is None:
                    try:
                        self._model = _load_cross_encoder(str(self.path), self.device, self.max_length)
                    except ImportError as exc:
                        missing = MissingDependencyError(
                            getattr(exc, "name", None) or "sentence-transformers", "local",
                            "The local cross-encoder reranker",
                        )
                        raise RerankError(str(missing)) from exc
                    except Exception as exc:
                        raise RerankError(
                            f"{self.model_id}: could not load a cross-encoder from {self.path}: "
                            f"{type(exc).__name__}: {exc}"
                        ) from exc
        return self._model

    def rerank(
        self, query: str, documents: Sequence[str], *, top_k: int | None = None, timeout: float | None = None
    ) -> list[RerankResult]:
        """Scores for ``documents``, best first (at most ``top_k``); RerankError on any failure."""
        docs, limit = check_request(query, documents, top_k)
        if not docs:
            return []
        model = self.load()
        try:
            with self._predict_lock:
                scores = model.predict(
                    [(query, d) for d in docs], batch_size=self.batch_size, show_progress_bar=False
                )
            values = [float(s) for s in scores]
        except Exception as exc:
            raise RerankError(f"{self.model_id} failed to score: {type(exc).__name__}: {exc}") from exc
        return finish_results(enumerate(values), len(docs), limit, self.model_id)

    def __repr__(self) -> str:
        return f"CrossEncoderReranker(model_id={self.model_id!r}, device={self.device!r})"
