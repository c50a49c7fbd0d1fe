"""Scope-local full-text terms for the SQLite store's memory index (pure: no connection).

FTS5's ``bm25()`` counts, for each query term, every row of the table that holds it, whichever
scope the row belongs to: a user's keyword search then walks the posting lists of every other
user of the store, and gets slower as they grow. So the memory index does not hold words but
*scoped terms*: each word folded and stemmed here, in Python, and prefixed with the number of
the row's scope (``fts_scopes.id``), as in ``"7xpaint"``. A term's posting list is then one
scope's rows alone, and so are the document frequencies BM25 reads. The table's row count and
average row length, the two other inputs of BM25, stay those of the whole table.

The same functions build the rows' terms (through the ``manowar_fts_terms`` SQL function the
store's triggers call) and the queries' terms, so both sides fold and stem alike by
construction. Folding follows FTS5's ``unicode61 remove_diacritics 2`` tokenizer (letters,
digits and private-use characters make words; case and diacritics are folded away), and words
are stemmed with the Porter algorithm (PyStemmer's Snowball ``porter``, in C).
"""

from __future__ import annotations

import re
import threading
import unicodedata
from collections.abc import Mapping, Sequence

import regex
import Stemmer

from .._util import ROLE_WORDS, STOPWORDS, tokens

__all__ = ["FILLER", "TERMS_FUNCTION", "folded", "phrase_words", "prune_phrases", "query_phrases", "scoped_match", "scoped_terms",
           "stemmed", "words"]

#: Name of the SQL function (``scope_id, text -> scoped terms``) the store registers on every
#: connection; the memory table's triggers call it.
TERMS_FUNCTION = "manowar_fts_terms"

_WORD = regex.compile(r"[\p{L}\p{N}\p{Co}]+")
_ASCII_WORD = re.compile(r"[a-z0-9]+")  # _WORD on lower-cased ASCII text
_MARK = regex.compile(r"\p{M}+")
#: Tokens of chat filler that carry no content (beside :data:`STOPWORDS`).
FILLER = frozenset(("us", "ur", "vs", "im", "ya", "ye", "eh", "uh", "um", "ah", "aw"))
_local = threading.local()  # a PyStemmer Stemmer is not thread-safe: one per thread


def _stem(items: list[str]) -> list[str]:
    """Porter stems of words of three characters or more (as FTS5's ``porter`` tokenizer:
    ``"is"`` stays ``"is"``, and ``"s"`` never becomes an empty word)."""
    stemmer = getattr(_local, "stemmer", None)
    if stemmer is None:
        stemmer = _local.stemmer = Stemmer.Stemmer("porter")
    return [w if len(w) < 3 else (s or w) for w, s in zip(items, stemmer.stemWords(items), strict=True)]


def folded(text: str) -> list[str]:
    """The text's words, folded (lower case, no diacritics), not stemmed, in order."""
    if not text:
        return []
    if text.isascii():  # the common case: the same words, found three times faster
        return _ASCII_WORD.findall(text.lower())
    return _WORD.findall(_MARK.sub("", unicodedata.normalize("NFKD", text)).lower())


def words(text: str) -> list[str]:
    """The text's words, folded (lower case, no diacritics) and stemmed, in order."""
    found = folded(text)
    return _stem(found) if found else []


def stemmed(found: list[str], stems: dict[str, str]) -> list[str]:
    """:func:`_stem` of folded words through ``stems``, a cache (word to stem) the caller keeps:
    reading many rows, most words have been stemmed before."""
    out: list[str] = []
    for w in found:
        s = stems.get(w)
        if s is None:
            s = stems[w] = _stem([w])[0]
        out.append(s)
    return out


def scoped_terms(scope_id: int | None, text: str | None) -> str:
    """What the memory index stores for ``text`` in scope ``scope_id``: its words as scoped
    terms (``f"{scope_id}x{word}"``), space-separated. Empty for no text or no scope."""
    if text is None or scope_id is None:
        return ""
    found = words(text)
    if not found:
        return ""
    prefix = f"{int(scope_id)}x"
    return prefix + f" {prefix}".join(found)


def query_phrases(text: str | None) -> list[tuple[str, ...]]:
    """The content terms of a query, each as the phrase of its words (:func:`words`), unique,
    in order; empty when it has none.

    Content terms are the text's word tokens (Unicode letters and digits), without English
    stop words, chat filler, the role words ``user`` and ``assistant`` and single characters; two-character tokens are kept (``AI``,
    ``TV``, ``LA``: +0.4 recall@10 on LoCoMo against dropping them). A token with an
    apostrophe is a phrase of two words (``don't``: ``("don", "t")``)."""
    if not text:
        return []
    phrases: dict[tuple[str, ...], None] = {}
    for tok in tokens(text):
        if len(tok) > 1 and tok not in STOPWORDS and tok not in FILLER and tok.split("'")[0] not in ROLE_WORDS:
            stems = words(tok)
            if stems:
                phrases.setdefault(tuple(stems), None)
    return list(phrases)


def scoped_match(scope_id: int, phrases: list[tuple[str, ...]]) -> str:
    """The FTS5 query of ``phrases`` (:func:`query_phrases`) in scope ``scope_id``: each a quoted
    phrase of scoped terms (``"7xdon 7xt"``), OR-ed, for broad recall, with BM25 ranking rows
    that match more, and rarer, terms first. Scoped terms hold only letters, digits and ``x``,
    so no query syntax can be injected."""
    prefix = f"{int(scope_id)}x"
    return " OR ".join('"' + " ".join(prefix + w for w in phrase) + '"' for phrase in phrases)


def phrase_words(scope_id: int, phrases: Sequence[tuple[str, ...]]) -> list[str]:
    """The distinct scoped terms (``"7xpaint"``) of ``phrases`` in scope ``scope_id``, in order:
    the terms whose document counts :func:`prune_phrases` reads."""
    prefix = f"{int(scope_id)}x"
    return list(dict.fromkeys(prefix + w for phrase in phrases for w in phrase))


def prune_phrases(scope_id: int, phrases: Sequence[tuple[str, ...]], doc_counts: Mapping[str, int],
                  budget: int) -> tuple[list[tuple[str, ...]], list[tuple[str, ...]]]:
    """``(kept, pruned)``: the phrases a keyword search of scope ``scope_id`` scores, and the
    commonest ones it leaves out so that BM25 scores at most about ``budget`` matches.

    FTS5 scores every row matching any OR-ed phrase before it keeps the best, so a query's
    cost is the sum of its phrases' document counts (``doc_counts``: scoped term to the number
    of rows holding it; a phrase counts as its rarest word, a missing word as 0). When that
    sum is over ``budget``, phrases are taken rarest first while the running sum stays within
    it, and the rest, the commonest, whose inverse document frequency adds least to a row's
    score, are pruned; the rarest phrase is always kept. Within the budget, or with a budget
    of 0 or less (no pruning), every phrase is kept: small scopes stay exact. Both lists keep
    the phrases' order."""
    prefix = f"{int(scope_id)}x"
    counts = [min(int(doc_counts.get(prefix + w, 0)) for w in phrase) if phrase else 0 for phrase in phrases]
    if budget <= 0 or sum(counts) <= budget:
        return list(phrases), []
    keep: set[int] = set()
    total = 0
    for i in sorted(range(len(phrases)), key=lambda i: (counts[i], i)):
        if keep and total + counts[i] > budget:
            break
        keep.add(i)
        total += counts[i]
    return ([p for i, p in enumerate(phrases) if i in keep], [p for i, p in enumerate(phrases) if i not in keep])
