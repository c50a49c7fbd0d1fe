"""Approximate nearest neighbours for one large group of a :class:`~._vectors.VectorIndex`.

A faiss inverted-file index with 4-bit product-quantised codes scanned by faiss's SIMD
"fast scan" kernels (``IndexIVFPQFastScan``, one sub-quantiser per 4 dimensions, so d/8 bytes
a vector; inner product on normalised vectors). Its labels are the vector index's row
positions, so the scope mask is passed to faiss as a bitmap (``IDSelectorBitmap``) and
filtering happens inside the scan. faiss only proposes candidates: the caller re-scores them
exactly from its float32 matrix, so the scores and the order of the final top ``k`` are exact.

Why 4-bit fast-scan codes and not 8-bit scalar codes (``IndexIVFScalarQuantizer``, used
before and still for dimensions not divisible by 2): the probed share of the group, not the
codes, limits recall once candidates are re-scored exactly (recall@10 against the exact scan
was the same for both on 200k synthetic rows at every probed share), and the fast-scan codes
are an eighth of the bytes, scanned ~10x faster (a 30 % probe of 200k rows: 0.4 against 4.6 ms).

Why an inverted file and not a graph (HNSW): a group is built in seconds even at a million rows
on two cores (k-means on a sample, then one assignment pass), rows are removed (one pass over
the labels, hashed; fast-scan lists support no direct map) and re-added in place, and a
restrictive filter only skips codes of the lists it scans instead of cutting a graph's paths.
"""

from __future__ import annotations

import math
from typing import Any

import faiss as _faiss
import numpy as np

# faiss's bundled hints (generated from SWIG) lack DirectMap and the search-parameter
# keywords used here: the module is used as untyped, its results checked by the tests.
faiss: Any = _faiss

__all__ = ["CODE_BYTES_PER_DIM", "ID_BYTES", "AnnGroup"]

#: Bytes per dimension of a stored code (4-bit codes of 4 dimensions; 8-bit scalar codes,
#: one byte a dimension, only for dimensions not divisible by 2).
CODE_BYTES_PER_DIM = 0.125
#: Bytes per row of the label, plus its direct-map entry (roughly).
ID_BYTES = 8 + 24

_TRAIN_PER_LIST = 40  # k-means sample: rows per list
_MIN_LISTS = 8
_MAX_LISTS = 4096


def _subquantizers(dims: int) -> int:
    """Product-quantiser sub-vectors for ``dims`` (4 dimensions each; 2 below 128 dimensions,
    where 4-bit codes of 4 dimensions rank too coarsely); 0: not divisible, use 8-bit codes."""
    per = 4 if dims >= 128 and dims % 4 == 0 else 2
    return dims // per if dims % per == 0 else 0


class AnnGroup:
    """An IVF index (4-bit fast-scan or 8-bit codes) over some rows, labelled by their
    positions in the owning matrix."""

    #: Rows (at least) each query scans, and the fraction of the group, whichever is larger;
    #: divided by the share of the group the query's mask allows, and at most every list.
    #: LoCoMo evidence recall@10 against the exact scan (benchmarks/scale.py recall, onnx):
    #: -1.86 / -0.69 (per conversation / all in one group) at 30 %, -1.11 / -0.39 at 40 %,
    #: -0.83 / -0.10 at 50 %: half the group keeps both within a point. The fast-scan codes
    #: make the wider probe cheap (a million rows: ~0.3 ms per extra 10 % of the group).
    min_scan: int = 4096
    scan_fraction: float = 0.5
    #: Build with 4-bit fast-scan codes where the dimensions allow (False: 8-bit scalar codes,
    #: the former layout, kept for comparison: benchmarks/scale.py).
    fast_scan: bool = True

    def __init__(self, index: Any, trained_on: int) -> None:
        self.index = index
        self.ivf = faiss.extract_index_ivf(index)
        self.trained_on = trained_on

    @classmethod
    def build(cls, vectors: np.ndarray, labels: np.ndarray, *, seed: int = 1234) -> AnnGroup:
        """Train on a sample of ``vectors`` (normalised float32 rows) and add all of them."""
        n, dims = vectors.shape
        nlist = int(min(_MAX_LISTS, max(_MIN_LISTS, min(2 * math.sqrt(n), n / 8))))
        quantizer = faiss.IndexFlatIP(dims)
        subquantizers = _subquantizers(dims) if cls.fast_scan else 0
        if subquantizers:
            index = faiss.IndexIVFPQFastScan(quantizer, dims, nlist, subquantizers, 4, faiss.METRIC_INNER_PRODUCT)
            index.pq.cp.min_points_per_centroid = 1  # small groups (tests, low thresholds): no warning
        else:
            index = faiss.IndexIVFScalarQuantizer(
                quantizer, dims, nlist, faiss.ScalarQuantizer.QT_8bit, faiss.METRIC_INNER_PRODUCT
            )
        index.cp.spherical = True
        index.cp.niter = 10
        index.cp.seed = seed
        index.cp.max_points_per_centroid = _TRAIN_PER_LIST
        index.cp.min_points_per_centroid = 1
        rng = np.random.default_rng(seed)
        sample = vectors if n <= nlist * _TRAIN_PER_LIST else vectors[rng.choice(n, nlist * _TRAIN_PER_LIST, replace=False)]
        index.train(np.ascontiguousarray(sample, dtype=np.float32))
        group = cls(index, n)
        group.add(vectors, labels)
        return group

    @classmethod
    def kind_for(cls, dims: int) -> str:
        """The codes a group of ``dims`` dimensions is built with now (see :attr:`kind`)."""
        return "pq4fs" if cls.fast_scan and _subquantizers(dims) else "sq8"

    @property
    def kind(self) -> str:
        """The codes held: ``pq4fs`` (4-bit fast-scan product codes) or ``sq8`` (8-bit scalar)."""
        return "pq4fs" if isinstance(self.index, faiss.IndexIVFFastScan) else "sq8"

    @property
    def ntotal(self) -> int:
        """Rows held."""
        return int(self.index.ntotal)

    @property
    def nlist(self) -> int:
        """Inverted lists (k-means cells)."""
        return int(self.ivf.nlist)

    @property
    def code_bytes(self) -> int:
        """Bytes of one row's code."""
        return int(getattr(self.ivf, "code_size", 0)) or math.ceil(int(self.index.d) * CODE_BYTES_PER_DIM)

    @property
    def nbytes(self) -> int:
        """Approximate memory held: codes, labels and centroids."""
        dims = int(self.index.d)
        return self.ntotal * (self.code_bytes + ID_BYTES) + self.nlist * dims * 4

    def add(self, vectors: np.ndarray, labels: np.ndarray) -> None:
        """Add rows (labels must not be held already)."""
        if len(labels):
            self.index.add_with_ids(np.ascontiguousarray(vectors, dtype=np.float32), np.asarray(labels, dtype=np.int64))

    def remove(self, labels: np.ndarray) -> None:
        """Drop rows by label (labels not held are ignored)."""
        if len(labels):
            self.index.remove_ids(faiss.IDSelectorBatch(np.ascontiguousarray(labels, dtype=np.int64)))

    def search(self, q: np.ndarray, k: int, allowed: np.ndarray | None, share: float) -> np.ndarray | None:
        """Labels of up to ``k`` candidates among the ``allowed`` positions (a bool mask over
        every position; None: every row held is allowed, no filter), or None when the mask
        allows so small a ``share`` of the group that an exact scan of the allowed rows is the
        better plan: every list would be probed, and the allowed rows' float32 vectors are fewer
        bytes than all the codes (under 1/32 of the group with fast-scan codes, 1/4 with 8-bit).
        Between that and the scan fraction every list is probed (at a million rows with half of
        them allowed, 5.5 ms against 600 ms for the exact scan)."""
        per_list = max(1.0, self.ntotal / self.nlist)
        want = max(self.min_scan, self.scan_fraction * self.ntotal) / max(share, 1e-9)
        nprobe = math.ceil(want / per_list)
        if nprobe >= self.nlist:
            if share * 4 * int(self.index.d) < self.code_bytes:
                return None
            nprobe = self.nlist
        if allowed is None:
            params = faiss.SearchParametersIVF(nprobe=max(1, nprobe))
        else:
            bits = np.packbits(allowed, bitorder="little")
            selector = faiss.IDSelectorBitmap(allowed.shape[0], faiss.swig_ptr(bits))
            params = faiss.SearchParametersIVF(sel=selector, nprobe=max(1, nprobe))
        _, found = self.index.search(np.ascontiguousarray(q[None, :], dtype=np.float32), k, params=params)
        labels: np.ndarray = found[0]
        return labels[labels >= 0]

    def relabel(self, mapping: dict[int, int]) -> bool:
        """Rename labels in place (old -> new); False (index unchanged) if a label has no new name."""
        invlists = self.ivf.invlists
        renamed = []
        for list_no in range(self.nlist):
            size = invlists.list_size(list_no)
            if not size:
                continue
            ids = faiss.rev_swig_ptr(invlists.get_ids(list_no), size)  # a view of the list's labels
            new = np.fromiter((mapping.get(int(x), -1) for x in ids), dtype=np.int64, count=size)
            if (new < 0).any():
                return False
            renamed.append((ids, new))
        for ids, new in renamed:  # in place: the fast-scan lists' codes are packed in blocks
            ids[:] = new
        return True

    def finds(self, vectors: np.ndarray, labels: np.ndarray) -> bool:
        """Whether each row of ``vectors``, searched in its own list, comes back among the first
        candidates under its label in ``labels`` (a check that stored labels match the rows)."""
        params = faiss.SearchParametersIVF(nprobe=min(2, self.nlist))
        _, found = self.index.search(np.ascontiguousarray(vectors, dtype=np.float32), 64, params=params)
        return all(int(label) in set(row.tolist()) for label, row in zip(labels, found))

    def to_bytes(self) -> np.ndarray:
        """The index serialised (uint8)."""
        out: np.ndarray = faiss.serialize_index(self.index)
        return out

    @classmethod
    def from_bytes(cls, data: np.ndarray, trained_on: int) -> AnnGroup:
        """An index serialised by :meth:`to_bytes`."""
        return cls(faiss.deserialize_index(np.ascontiguousarray(data, dtype=np.uint8)), trained_on)
