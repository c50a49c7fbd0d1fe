"""Maintenance: forgetting, re-embedding, warm-up and the store's plumbing."""

from __future__ import annotations

from typing import Any

from ..errors import ConfigurationError, InvalidInputError
from ..jobs import core
from ..jobs._store import ChangedScopes, job_store
from ..jobs.base import Owner
from ..jobs.reembed import ReembedParams, count_reembed, reembed
from ..jobs.runner import invalidate_changes
from ..results import ForgetReport
from ..scope import Scope, ScopeLike
from ..stores.base import Store
from .core import EngineBase
from .results import ReembedReport


class EngineMaintenance(EngineBase):
    """Maintenance: forgetting, re-embedding, warm-up and the store's plumbing."""

    def forget(self, scope: ScopeLike) -> ForgetReport:
        """Erase everything ``scope`` owns (its agent, user, mode and HAI; every thread): memory
        rows of every layer, transcripts, working sessions, patterns and archives of the scope,
        its rows inside the agent's shared archives, their full-text and vector index entries and
        the cached results that could show them. Queued background work is finished first, so
        nothing of the scope is written after the erasure. Safe to run again after a failure
        part-way (it removes what is left) and a no-op on an erased scope. A user-less scope
        erases the agent's shared rows, never users' rows. Returns a :class:`ForgetReport`."""
        scope = Scope.coerce(scope)
        self.flush()
        params = core.ForgetParams(agent_wallet=scope.agent_wallet, user_address=scope.user_address, mode=scope.mode,
                                   hai_id=scope.hai_id)
        changes = ChangedScopes()
        try:
            report = core.forget(job_store(self), params, changes=changes)
        finally:
            invalidate_changes(self.query_cache, changes)
        return ForgetReport(memories=report["memories"], transcripts=report["transcripts"],
                            sessions=report["sessions"], patterns=report["patterns"], archives=report["archives"],
                            turns=report.get("turns", 0),
                            archives_rewritten=report["archivesRewritten"],
                            archived_rows_removed=report["archivedRowsRemoved"],
                            pinned_copies=report["pinnedCopies"])

    def maintenance_store(self) -> Store:
        """The store the maintenance jobs and schedules act on when given this engine
        (:func:`manowar_memory.jobs.run_job`, the schedules, the Temporal activities)."""
        return self.store

    @property
    def store_name(self) -> str:
        """The store's kind (``sqlite``, ``mongodb``...), as the servers announce it."""
        return self.store.name

    def check_store(self) -> None:
        """Read one (missing) row, so a store that cannot answer raises here (the readiness probe)."""
        self.store.get_memory("readyz-probe", agent_wallet="readyz-probe")  # by the index, never a scan

    def warm_up(self) -> bool:
        """Load the embedder now (model files, ONNX session) and embed one text, so the first
        call does not wait for it; the servers call this at startup. A model that cannot load
        raises here (:class:`EmbeddingError`, :class:`MissingDependencyError`). False when the
        engine is keyword-only."""
        if self.embedder is None:
            return False
        load = getattr(self.embedder.inner, "load", None)
        if callable(load):
            load()
        self.embedder.inner.embed(["warm up"], input_type="query")
        return True

    def reembed(self, agent_wallet: str | None = None, *, owner: ScopeLike | None = None,
                batch_size: int = 64, progress: bool = False, dry_run: bool = False) -> ReembedReport:
        """Give a vector of this engine's model to every active row that has none: rows written
        keyword-only or embedded by another model (vectors of different models never mix). Rows
        are embedded ``batch_size`` at a time and each batch is written at once, so a run that
        stops keeps what it wrote and running it again continues (rows this model embedded are
        skipped). ``agent_wallet``: only that agent (default: every row of the store);
        ``owner``: only the rows this scope owns (its agent, user, mode and HAI). ``progress``
        shows a tqdm bar. Raises :class:`ConfigurationError` on a keyword-only engine and
        :class:`EmbeddingError` when the embedder fails (saying how far it got)."""
        if self.embedder is None:
            raise ConfigurationError(
                f"reembed needs an embedder and this engine is keyword-only ({self.keyword_only_note}); name one "
                "(MemoryEngine(embedder='onnx'), `manowar reembed --embedder onnx`)")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise InvalidInputError(f"batch_size must be a positive integer (rows embedded per batch), got {batch_size!r}")
        wallet = agent_wallet
        owned: Owner | None = None
        if owner is not None:
            sc = Scope.coerce(owner)
            if wallet is not None and wallet != sc.agent_wallet:
                raise InvalidInputError(f"owner belongs to agent {sc.agent_wallet!r}, not {wallet!r}: pass one agent")
            wallet = sc.agent_wallet
            owned = Owner(user_address=sc.user_address, mode=sc.mode, hai_id=sc.hai_id)
        params = ReembedParams(agent_wallet=wallet, owner=owned, batch_size=batch_size)
        store = job_store(self)
        embedder = self.embedder.inner  # bulk document vectors would only crowd the query cache
        changes = ChangedScopes()
        bar = None
        if progress:
            from tqdm import tqdm

            bar = tqdm(total=count_reembed(store, params, embedder.model_id), unit="row",
                       desc=f"reembed {embedder.model_id}{' (dry run)' if dry_run else ''}")

        def tick(rows: int) -> None:
            if bar is not None:
                bar.update(rows)

        try:
            report = reembed(store, params, embedder=embedder, dry_run=dry_run, changes=changes, progress=tick)
        finally:
            invalidate_changes(self.query_cache, changes)
            if bar is not None:
                bar.close()
        return ReembedReport(model_id=report["modelId"], scanned=report["scanned"], embedded=report["embedded"],
                             already_embedded=report["alreadyEmbedded"], skipped_inactive=report["skippedInactive"],
                             batches=report["batches"], dry_run=dry_run)

    def stats(self, agent_wallet: str | None = None) -> dict[str, Any]:
        """Counts and ages of what is stored (optionally for one agent)."""
        return self.store.stats(agent_wallet)
