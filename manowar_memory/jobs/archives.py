"""archive_create and archive_restore: an agent's rows of a window serialised into a (compressed)
archive, and decoded back into rows (rows that still exist are skipped)."""

from __future__ import annotations

import base64
import gzip
import json
from datetime import UTC, datetime
from typing import Any

from pydantic import Field

from .._util import now_ms
from ..errors import NotFoundError
from ..records import Archive, MemoryRecord
from ._store import ChangedScopes, JobStore
from .base import _OWNER, Owner, Progress, TimeRange, _owned_by, _owner_tag, _owner_users, _Params, _tick, _window
from .pinning import pin_report_after_create

__all__ = ["ArchiveCreateParams", "ArchiveRestoreParams", "archive_create", "archive_restore", "decode_archive"]


class ArchiveCreateParams(_Params):
    """Serialise an agent's rows of a date range into a compressed archive."""

    agent_wallet: str = Field(description="the agent whose rows are archived")
    date_range: TimeRange | None = Field(default=None, description="explicit createdAt window")
    window_days: float | None = Field(default=None, description="window ending now, in days (default 7)")
    compress: bool = Field(default=True, description="gzip + base64 the payload")
    pin: bool = Field(default=False, description=(
        "also pin the archive to IPFS through Pinata (PINATA_JWT, or PINATA_API_KEY + PINATA_API_SECRET); "
        "a failed pin keeps the archive and the report says why it is not pinned"))
    owner: Owner | None = _OWNER


class ArchiveRestoreParams(_Params):
    """Decode an archive back into memory rows. Rows that still exist are skipped (a
    superseded or soft-deleted row stays as it is), and so are rows deleted or erased since
    the archive was made, unless ``restore_deleted`` (the application's choice, never a
    model's)."""

    archive_id: str = Field(description="the archive to restore")
    owner: Owner | None = _OWNER
    restore_deleted: bool = Field(default=False, description=(
        "also bring back rows that no longer exist (deleted or erased after the archive was made)"))


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat().replace("+00:00", "Z")


def archive_create(store: JobStore, params: ArchiveCreateParams, *, dry_run: bool = False,
                   progress: Progress | None = None, now: int | None = None,
                   changes: ChangedScopes | None = None, pinner: Any | None = None) -> dict[str, Any]:
    """Archive the agent's rows of the window; with ``params.pin`` also pin it to IPFS
    (``pinner``: a :class:`~manowar_memory.jobs.pinning.PinataClient`, default from the environment)."""
    now = now if now is not None else now_ms()
    start, end = _window(params.date_range, params.window_days, 7, now)
    owner = params.owner
    read = store.iter_memories(params.agent_wallet, created_from=start, created_to=end, users=_owner_users(owner))
    rows = [r.to_doc() for r in _tick(read, progress) if _owned_by(owner, r)]
    tag = _owner_tag(owner)
    base_id = f"arc_{params.agent_wallet[2:10]}_{now}" + (f"_{tag}" if tag else "")
    archive_id = base_id
    n = 0
    while not dry_run and store.get_archive(archive_id) is not None:
        n += 1
        archive_id = f"{base_id}_{n}"
    date_range = {"start": start, "end": end}
    payload = json.dumps({"archiveId": archive_id, "agentWallet": params.agent_wallet, "dateRange": date_range,
                          "vectors": rows}, ensure_ascii=False, separators=(",", ":"))
    original_size = len(payload.encode("utf-8"))
    content = base64.b64encode(gzip.compress(payload.encode("utf-8"))).decode("ascii") if params.compress else payload
    compressed_size = len(content.encode("utf-8"))
    if not dry_run:
        store.add_archive(Archive(
            archive_id=archive_id, agent_wallet=params.agent_wallet, **(owner.fields() if owner else {}),
            summary=f"Archive for {_iso(start)} - {_iso(end)}", content=content, compressed=params.compress,
            date_range=date_range,
            metadata={"entryCount": len(rows), "originalSize": original_size, "compressedSize": compressed_size,
                      "topics": [], **({"owner": owner.fields()} if owner is not None else {})},
            created_at=now,
        ))
        if changes is not None:
            changes.add_key(owner.key(params.agent_wallet) if owner else (params.agent_wallet, None, None, None))
    report: dict[str, Any] = {
        "archiveId": None if dry_run else archive_id, "memoriesArchived": len(rows), "originalSize": original_size,
        "compressedSize": compressed_size, "dateRange": date_range}
    if params.pin:
        if dry_run:
            report["pin"] = {"pinned": False, "reason": "not pinned: dry run"}
        else:
            report["pin"] = pin_report_after_create(store, archive_id, pinner)
        report["pinned"] = report["pin"]["pinned"]
        report["ipfsHash"] = report["pin"].get("ipfsHash")
    return report


def decode_archive(archive: Archive) -> dict[str, Any]:
    """The archive's payload ``{archiveId, agentWallet, dateRange, vectors}``."""
    raw = gzip.decompress(base64.b64decode(archive.content)).decode("utf-8") if archive.compressed else archive.content
    payload: dict[str, Any] = json.loads(raw)
    return payload


def archive_restore(store: JobStore, params: ArchiveRestoreParams, *, dry_run: bool = False,
                    progress: Progress | None = None, now: int | None = None,
                    changes: ChangedScopes | None = None) -> dict[str, Any]:
    archive = store.get_archive(params.archive_id)
    if archive is None:
        raise NotFoundError(f"archive {params.archive_id} does not exist")
    payload = decode_archive(archive)
    to_add: list[MemoryRecord] = []
    existing = deleted = 0
    entries = 0
    for doc in _tick(payload.get("vectors", []), progress):
        doc = {k: v for k, v in doc.items() if k not in ("scopeKind", "scopeId", "_id")}
        rec = MemoryRecord.model_validate(doc)
        if rec.agent_wallet != archive.agent_wallet or not _owned_by(params.owner, rec):
            continue  # another scope's row: neither restored nor counted
        entries += 1
        if store.get_memory(rec.id, agent_wallet=rec.agent_wallet) is not None:
            existing += 1
            continue
        if not params.restore_deleted:
            deleted += 1  # deleted, erased or cleaned up since the archive was made
            continue
        to_add.append(rec)
    if to_add and not dry_run:
        for i in range(0, len(to_add), 1000):
            store.add_memories(to_add[i:i + 1000])
        if changes is not None:
            for rec in to_add:
                changes.add(rec)
    return {"archiveId": archive.archive_id, "restored": len(to_add), "skippedExisting": existing,
            "skippedDeleted": deleted, "entryCount": entries}

