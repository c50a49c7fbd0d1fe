"""The ``reembed`` job: give a vector of the configured model to the rows that have none.

Rows written keyword-only (no embedder installed, or ``--embedder none``) have no vector, and
rows embedded by another model have that model's vector, which a search with this model
never compares (vectors of different models never mix: a store scores only the rows whose
``embedding_model`` is the query's). ``reembed`` embeds the content of every active row whose
``embedding_model`` is not the embedder's ``model_id``, in batches, and writes each batch's
vectors at once. It is resumable: a run that stops (an embedder failure, Ctrl-C) keeps the
batches already written, and running it again skips every row this model has embedded.
Superseded, deleted and archived rows are skipped (searches never see them).

Unlike the other jobs it needs an embedder: :func:`~manowar_memory.jobs.run_job` passes the
engine's, and a job run on a bare store or by the Temporal worker (which embeds nothing)
fails with a :class:`~manowar_memory.errors.ConfigurationError`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pydantic import Field

from ..errors import ConfigurationError, EmbeddingError, InvalidInputError
from ..records import MemoryRecord
from ..stores.base import INACTIVE_STATUSES, by_agent
from ._store import ChangedScopes, JobStore
from .base import _OWNER, Owner, Progress, _owned_by, _owner_users, _Params

__all__ = ["DEFAULT_REEMBED_BATCH", "ReembedParams", "count_reembed", "reembed"]

#: rows embedded (and written) per batch by default
DEFAULT_REEMBED_BATCH = 64
_PAGE = 1000  # rows read per page (without their vectors)


class ReembedParams(_Params):
    """Embed, with the engine's embedder, the active rows that have no vector of its model."""

    agent_wallets: list[str] | None = Field(default=None, description="agents whose rows to embed")
    agent_wallet: str | None = Field(default=None, description="one agent (default: every agent of the store)")
    owner: Owner | None = _OWNER
    batch_size: int = Field(default=DEFAULT_REEMBED_BATCH, ge=1, le=10_000,
                            description="rows embedded and written per batch")


def _wallets(params: ReembedParams) -> list[str | None]:
    wallets: list[str | None] = list(dict.fromkeys(params.agent_wallets or []))
    if not wallets and params.agent_wallet:
        wallets = [params.agent_wallet]
    if params.owner is not None and not wallets:
        raise InvalidInputError("reembed of one scope's rows needs its agent_wallet")
    return wallets or [None]


def _rows(store: JobStore, params: ReembedParams) -> Iterator[MemoryRecord]:
    """Every row of the job's agents (every status, without vectors) that its owner owns."""
    for wallet in _wallets(params):
        cursor: Any = None
        while True:
            rows, cursor = store.page_memories(wallet, cursor, _PAGE, users=_owner_users(params.owner))
            if not rows:
                break
            yield from (r for r in rows if _owned_by(params.owner, r))


def count_reembed(store: JobStore, params: ReembedParams, model_id: str) -> int:
    """How many rows a :func:`reembed` with ``model_id`` would embed now (for a progress bar's total)."""
    return sum(1 for r in _rows(store, params) if r.status not in INACTIVE_STATUSES and r.embedding_model != model_id)


def reembed(store: JobStore, params: ReembedParams, *, embedder: Any = None, dry_run: bool = False,
            progress: Progress | None = None, changes: ChangedScopes | None = None) -> dict[str, Any]:
    """Embed the rows without a vector of ``embedder``'s model; the report counts what was
    ``scanned``, ``embedded`` (or would be, in a dry run), ``alreadyEmbedded`` (by this model)
    and ``skippedInactive``. ``progress`` is told the rows embedded after each batch.
    An embedder failure raises :class:`EmbeddingError` saying how many rows were written
    before it: run the job again to continue."""
    if embedder is None or not isinstance(getattr(embedder, "model_id", None), str):
        raise ConfigurationError(
            "reembed needs an embedder: run it on a MemoryEngine that has one (MemoryEngine(embedder='onnx'), "
            "`manowar reembed --embedder onnx`); a bare store and the Temporal worker embed nothing")
    model_id: str = embedder.model_id
    scanned = embedded = already = inactive = batches = 0
    pending: list[MemoryRecord] = []

    def flush() -> None:
        nonlocal embedded, batches
        if not pending:
            return
        failure: EmbeddingError | None = None
        try:
            vectors = embedder.embed([r.content for r in pending], input_type="document")
        except EmbeddingError as exc:
            failure = exc
        if failure is not None:
            raise EmbeddingError(
                f"reembed stopped after {embedded} row(s) were embedded with {model_id}: {failure}; run it again "
                "to continue (rows already embedded are skipped)")
        rows = by_agent((r.agent_wallet, (r.id, {"embedding": v, "embedding_model": model_id}))
                        for r, v in zip(pending, vectors))
        for agent, mine in rows.items():
            store.update_memories(mine, agent_wallet=agent)
        if changes is not None:
            for r in pending:
                changes.add(r)
        embedded += len(pending)
        batches += 1
        if progress is not None:
            progress(len(pending))
        pending.clear()

    for row in _rows(store, params):
        scanned += 1
        if row.status in INACTIVE_STATUSES:
            inactive += 1
        elif row.embedding_model == model_id:
            already += 1
        elif dry_run:
            embedded += 1
        else:
            pending.append(row)
            if len(pending) >= params.batch_size:
                flush()
    flush()
    return {"modelId": model_id, "scanned": scanned, "embedded": embedded, "alreadyEmbedded": already,
            "skippedInactive": inactive, "batches": batches}
