"""An in-process BM25 index of one full-text scope of the SQLite store (pure: no connection).

FTS5 ranks a keyword search by calling ``bm25()`` on every row that holds any of the query's
OR-ed terms, and for each such row it reads the row's length from its ``docsize`` table: about a
microsecond a row, so a query whose words a large scope holds ten thousand times costs over ten
milliseconds before the best rows are kept. A :class:`ScopeKeywordIndex` holds the same scope's
postings (each term's rows, with the term's count in the ``content`` and ``context`` columns) and
row lengths in numpy arrays, and scores a query's matches with the very formula FTS5's
``bm25()`` applies (:func:`bm25`), over the same table-wide row count and average length
(:func:`averages`), in a few vector operations: the same scores, in a fraction of the time.

Terms are the words :func:`~manowar_memory.stores._fts.words` gives, as the index's triggers
store them (unscoped here: an index holds one scope). A query phrase of two words whose second is
a clitic (``don't``: ``("don", "t")``) is held as a pair of adjacent words; any other phrase of
several words is not held (:meth:`ScopeKeywordIndex.holds`), and the store asks FTS5 instead.
"""

from __future__ import annotations

import math
from array import array
from collections import Counter
from collections.abc import Iterable, KeysView, Sequence
from itertools import pairwise

import numpy as np

from . import _fts

__all__ = ["CLITICS", "K1", "B", "ScopeKeywordIndex", "averages", "bm25"]

#: FTS5's ``bm25()`` constants.
K1, B = 1.2, 0.75

#: A term's count in one column of one row is held up to this (uint16); a row holding one word more
#: often than that scores as if it held it this often (FTS5 counts on).
_MAX_COUNT = 65_535

#: Second words of the two-word phrases the index holds (the parts after an apostrophe).
CLITICS = frozenset(("s", "t", "d", "m", "ll", "re", "ve"))


def _varint(blob: bytes, at: int) -> tuple[int, int]:
    """SQLite's variable-length integer at ``at`` and the offset after it."""
    value = 0
    for i in range(8):
        byte = blob[at + i]
        value = (value << 7) | (byte & 0x7F)
        if byte < 0x80:
            return value, at + i + 1
    return (value << 8) | blob[at + 8], at + 9


def averages(blob: bytes | None) -> tuple[int, int]:
    """``(rows, tokens)`` of a whole FTS5 table, from its averages record (``%_data`` row 1: the
    row count, then each column's token total): the ``N`` and, divided, the average row length
    ``bm25()`` uses."""
    if not blob:
        return 0, 0
    rows, at = _varint(blob, 0)
    tokens = 0
    while at < len(blob):
        n, at = _varint(blob, at)
        tokens += n
    return rows, tokens


def bm25(freq: np.ndarray, lengths: np.ndarray, df: int, rows: int, avgdl: float) -> np.ndarray:
    """One phrase's share of FTS5's ``bm25()`` for rows where it has weighted frequency ``freq``
    and which hold ``lengths`` tokens, the phrase being in ``df`` of the table's ``rows`` rows
    (inverse document frequency ``log((N - df + 0.5) / (df + 0.5))``, at least 1e-6)."""
    idf = math.log((rows - df + 0.5) / (df + 0.5))
    if idf <= 0.0:
        idf = 1e-6
    out: np.ndarray = idf * ((freq * (K1 + 1.0)) / (freq + K1 * (1.0 - B + B * lengths / avgdl)))
    return out


class _Postings:
    """One term's rows (positions in the index) and its counts in each column; postings added
    since the term was last read wait as chunks and join the arrays when it is next read."""

    __slots__ = ("content", "context", "pos", "tail")

    def __init__(self, pos: np.ndarray, content: np.ndarray, context: np.ndarray) -> None:
        self.pos, self.content, self.context = pos, content, context
        self.tail: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if self.tail:
            chunks = [(self.pos, self.content, self.context), *self.tail]
            self.pos, self.content, self.context = (np.concatenate([c[i] for c in chunks]) for i in range(3))
            self.tail = []
        return self.pos, self.content, self.context


def _counts(words: Sequence[str]) -> dict[str, int]:
    """Each term of a column's words (and each word-clitic pair) with its count."""
    out: dict[str, int] = Counter(words)
    for first, second in pairwise(words):
        if second in CLITICS:
            pair = f"{first} {second}"
            out[pair] = out.get(pair, 0) + 1
    return out


class ScopeKeywordIndex:
    """BM25 postings of one full-text scope's rows, read at revision :attr:`rev` and kept in step
    with the table by the store (:meth:`replace`, :meth:`remove`). Not thread-safe: the store
    holds a lock around it."""

    def __init__(self, scope_id: int) -> None:
        self.scope_id = scope_id
        #: The store revision the index's rows were read at: changes after it are the store's to
        #: replay (:class:`~manowar_memory.stores.sqlite.keywordindexes.KeywordIndexes`).
        self.rev = 0
        self._rowids = np.zeros(0, dtype=np.int64)
        self._lengths = np.zeros(0, dtype=np.float64)
        self._live = np.zeros(0, dtype=bool)
        self._size = 0
        self._position: dict[int, int] = {}
        self._terms: dict[str, _Postings] = {}
        self._stems: dict[str, str] = {}  # folded word -> stem, for every word read so far

    def _words(self, text: str | None) -> list[str]:
        """:func:`~manowar_memory.stores._fts.words` of ``text``, stems cached."""
        return _fts.stemmed(_fts.folded(text), self._stems) if text else []

    def __len__(self) -> int:
        """Rows held."""
        return len(self._position)

    def rowids(self) -> KeysView[int]:
        """The rowids of the rows held (a live view: copy it before changing the index)."""
        return self._position.keys()

    def load(self, rows: Iterable[tuple[int, str | None, str | None]]) -> None:
        """Add ``(rowid, content, context)`` rows none of which is held yet (:meth:`replace`
        takes held ones too), grouping their postings by term at once. The postings are gathered in flat
        typed arrays (a few bytes each, not Python objects) and grouped with one sort."""
        ids: dict[str, int] = {}
        flat_term, flat_pos = array("i"), array("i")
        flat_content, flat_context = array("H"), array("H")
        rowids: list[int] = []
        lengths: list[int] = []
        base = self._size
        for rowid, content, context in rows:
            pos = base + len(rowids)
            rowids.append(rowid)
            c_words, x_words = self._words(content), self._words(context)
            lengths.append(len(c_words) + len(x_words))
            c_counts = _counts(c_words)
            x_counts = _counts(x_words) if x_words else {}
            for term in (c_counts.keys() | x_counts.keys()) if x_counts else c_counts:
                tid = ids.get(term)
                if tid is None:
                    tid = ids[term] = len(ids)
                flat_term.append(tid)
                flat_pos.append(pos)
                flat_content.append(min(c_counts.get(term, 0), _MAX_COUNT))
                flat_context.append(min(x_counts.get(term, 0), _MAX_COUNT))
        if not rowids:
            return
        self._grow(len(rowids))
        end = base + len(rowids)
        self._rowids[base:end] = rowids
        self._lengths[base:end] = lengths
        self._live[base:end] = True
        self._size = end
        self._position.update(zip(rowids, range(base, end), strict=True))
        term_ids = np.frombuffer(flat_term, dtype=np.intc)
        order = np.argsort(term_ids, kind="stable")
        bounds = np.concatenate(([0], np.cumsum(np.bincount(term_ids, minlength=len(ids)))))
        all_pos = np.frombuffer(flat_pos, dtype=np.intc)[order].astype(np.int32)
        all_content = np.frombuffer(flat_content, dtype=np.uint16)[order]
        all_context = np.frombuffer(flat_context, dtype=np.uint16)[order]
        for term, tid in ids.items():
            lo, hi = int(bounds[tid]), int(bounds[tid + 1])
            new = (all_pos[lo:hi], all_content[lo:hi], all_context[lo:hi])
            held = self._terms.get(term)
            if held is None:
                self._terms[term] = _Postings(*new)
            else:
                held.tail.append(new)  # joined when the term is next read

    def replace(self, rows: Iterable[tuple[int, str | None, str | None]]) -> None:
        """Hold these ``(rowid, content, context)`` rows as they are now, whether held before or not."""
        batch = list(rows)
        for rowid, _, _ in batch:
            self.remove(rowid)
        self.load(batch)

    def remove(self, rowid: int) -> None:
        """Stop holding row ``rowid`` (no-op when not held). Its postings stay, dead, until
        :meth:`compact`."""
        pos = self._position.pop(rowid, None)
        if pos is not None:
            self._live[pos] = False
            if self._size > 1024 and len(self._position) * 2 < self._size:
                self.compact()

    def compact(self) -> None:
        """Drop dead rows' postings and renumber the live rows."""
        keep = np.flatnonzero(self._live[: self._size])
        renumber = np.full(self._size, -1, dtype=np.int64)
        renumber[keep] = np.arange(keep.shape[0])
        for term in list(self._terms):
            pos, content, context = self._terms[term].arrays()
            alive = self._live[pos]
            if not alive.any():
                del self._terms[term]
                continue
            self._terms[term] = _Postings(renumber[pos[alive]].astype(np.int32), content[alive], context[alive])
        self._rowids = self._rowids[keep].copy()
        self._lengths = self._lengths[keep].copy()
        self._live = np.ones(keep.shape[0], dtype=bool)
        self._size = int(keep.shape[0])
        self._position = {int(r): i for i, r in enumerate(self._rowids.tolist())}

    def _grow(self, extra: int) -> None:
        need = self._size + extra
        if need <= self._rowids.shape[0]:
            return
        cap = max(need, 2 * self._rowids.shape[0], 1024)
        for name, dtype in (("_rowids", np.int64), ("_lengths", np.float64), ("_live", bool)):
            grown = np.zeros(cap, dtype=dtype)
            grown[: self._size] = getattr(self, name)[: self._size]
            setattr(self, name, grown)

    @staticmethod
    def _key(phrase: tuple[str, ...]) -> str | None:
        if len(phrase) == 1:
            return phrase[0]
        if len(phrase) == 2 and phrase[1] in CLITICS:
            return f"{phrase[0]} {phrase[1]}"
        return None

    @classmethod
    def holds(cls, phrases: Sequence[tuple[str, ...]]) -> bool:
        """Whether the index can score every one of ``phrases`` (one word, or a word and a clitic)."""
        return all(cls._key(p) is not None for p in phrases)

    def matches(self, phrases: Sequence[tuple[str, ...]], rows: int, tokens: int,
                context_weight: float) -> tuple[np.ndarray, np.ndarray]:
        """``(rowids, scores)`` of every held row matching any of ``phrases`` (:meth:`holds` must
        be true), scored as FTS5's ``-bm25(table, 1.0, context_weight)`` scores them in a table of
        ``rows`` rows and ``tokens`` tokens (:func:`averages`), best first, ties by rowid."""
        if rows <= 0 or not phrases:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64)
        avgdl = tokens / rows
        positions: list[np.ndarray] = []
        shares: list[np.ndarray] = []
        for phrase in phrases:
            postings = self._terms.get(self._key(phrase) or "")
            if postings is None:
                continue
            pos, content, context = postings.arrays()
            alive = self._live[pos]
            pos = pos[alive]
            if not pos.shape[0]:
                continue
            freq = content[alive] + context_weight * context[alive].astype(np.float64)
            positions.append(pos)
            shares.append(bm25(freq, self._lengths[pos], int(pos.shape[0]), rows, avgdl))
        if not positions:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64)
        held, inverse = np.unique(np.concatenate(positions), return_inverse=True)
        scores = np.bincount(inverse, weights=np.concatenate(shares))  # summed in phrase order, as FTS5 does
        rowids = self._rowids[held]
        order = np.lexsort((rowids, -scores))
        return rowids[order], scores[order]
