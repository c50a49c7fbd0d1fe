"""A deterministic, offline reranker for tests and demos."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

from .._util import query_terms, term_overlap, tokens
from ..errors import RerankError
from ._shared import DEFAULT_TIMEOUT, check_request, finish_results, resolve_timeout
from .base import RerankResult

__all__ = ["FakeReranker"]


class FakeReranker:
    """Scores each document by the share of the query's content terms it contains.

    Options for exercising the ranking stage:

    * ``fail``: True raises :class:`RerankError`; a string raises it with that message; an
      exception instance is raised as is (a reranker that breaks its contract).
    * ``delay``: seconds to sleep per call. With ``honor_timeout`` (default) a delay longer than
      the call's timeout sleeps for the timeout, then raises RerankError like a hosted client
      would; with ``honor_timeout=False`` it just sleeps (a hung reranker).
    * ``scores``: fixed scores by document index, instead of term overlap.
    * ``hang_until``: a :class:`threading.Event`; each call waits for it, ignoring its timeout
      (a hung reranker a test can release, so timeout tests need no wall-clock bound).

    ``calls`` counts calls and ``finished`` the calls that returned or raised;
    ``last_query`` / ``last_documents`` hold the latest input.
    """

    __test__ = False  # not a pytest test class

    def __init__(
        self,
        *,
        fail: bool | str | BaseException = False,
        delay: float = 0.0,
        honor_timeout: bool = True,
        scores: Sequence[float] | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        model_id: str = "fake:reranker",
        hang_until: threading.Event | None = None,
    ) -> None:
        self.fail = fail
        self.delay = float(delay)
        self.honor_timeout = honor_timeout
        self.scores = list(scores) if scores is not None else None
        self.timeout = resolve_timeout(timeout, DEFAULT_TIMEOUT)
        self.model_id = model_id
        self.hang_until = hang_until
        self.calls = 0
        self.finished = 0
        self.last_query: str | None = None
        self.last_documents: list[str] = []
        self._lock = threading.Lock()

    def _score(self, query: str, document: str) -> float:
        terms = query_terms(query) or tokens(query)
        return round(term_overlap(terms, document), 6)

    def rerank(
        self, query: str, documents: Sequence[str], *, top_k: int | None = None, timeout: float | None = None
    ) -> list[RerankResult]:
        """Scores for ``documents``, best first (ties keep input order), at most ``top_k``."""
        try:
            return self._rerank(query, documents, top_k=top_k, timeout=timeout)
        finally:
            with self._lock:
                self.finished += 1

    def _rerank(
        self, query: str, documents: Sequence[str], *, top_k: int | None, timeout: float | None
    ) -> list[RerankResult]:
        docs, limit = check_request(query, documents, top_k)
        seconds = resolve_timeout(timeout, self.timeout)
        with self._lock:
            self.calls += 1
            self.last_query = query
            self.last_documents = list(docs)
        if self.hang_until is not None:
            self.hang_until.wait()
        if self.delay > 0:
            if self.honor_timeout and self.delay > seconds:
                time.sleep(seconds)
                raise RerankError(f"{self.model_id} timed out after {seconds:g} s")
            time.sleep(self.delay)
        if isinstance(self.fail, BaseException):
            raise self.fail
        if self.fail:
            raise RerankError(self.fail if isinstance(self.fail, str) else f"{self.model_id} configured to fail")
        if not docs:
            return []
        if self.scores is not None:
            pairs = [(i, self.scores[i]) for i in range(min(len(docs), len(self.scores)))]
        else:
            pairs = [(i, self._score(query, d)) for i, d in enumerate(docs)]
        return finish_results(pairs, len(docs), limit, self.model_id)

    def __repr__(self) -> str:
        return f"FakeReranker(model_id={self.model_id!r})"
