"""Threads and archives: index a conversation, change or read a thread's working session,
summarise a thread into an archive row, pin an archive."""

from typing import Any

from fastapi import APIRouter

from ... import errors
from ..deps import CallerDep, Id, Q
from ..models import (
    ArchiveSyncBody,
    CompressBody,
    CompressResult,
    TranscriptIndexBody,
    TranscriptIndexResult,
    WorkingPatchBody,
    WorkingSession,
    message_dicts,
)
from ..rest import tool_response

__all__ = ["router"]

router = APIRouter(tags=["sessions"])


def _thread_of(path_id: str, body_thread: str | None) -> str:
    if body_thread is not None and body_thread != path_id:
        raise errors.InvalidInputError(f"threadId {body_thread!r} differs from the session in the path {path_id!r}")
    return path_id


def _working_view(thread: str, session: Any) -> WorkingSession:
    return WorkingSession(sessionId=thread, workingMemory=session.working_memory.model_dump(mode="json"),
                          metadata=session.metadata, compressed=session.compressed, createdAt=session.created_at,
                          expiresAt=session.expires_at, lastAccessedAt=session.last_accessed_at)


@router.post("/transcripts/index", response_model=TranscriptIndexResult,
             summary="Store a conversation and index each message")
def transcripts_index(body: TranscriptIndexBody, caller: CallerDep) -> Any:
    data = body.scope_data()
    thread = body.thread_id or body.session_id
    if thread is None:
        raise errors.InvalidInputError("transcripts/index needs 'threadId' or 'sessionId'")
    if body.session_id is not None:
        _thread_of(body.session_id, body.thread_id)
    meta = {**(body.metadata or {}),
            **{k: v for k, v in (("model", body.model), ("totalTokens", body.total_tokens)) if v is not None}}
    return caller.memory({**data, "threadId": thread}).index_transcript(message_dicts(body.messages), metadata=meta)


@router.patch("/sessions/{sessionId}/working", response_model=WorkingSession,
              summary="Change a thread's working session")
def working_patch(sessionId: Id, body: WorkingPatchBody, caller: CallerDep) -> Any:  # noqa: N803
    thread = _thread_of(sessionId, body.thread_id)
    session = caller.memory({**body.scope_data(), "threadId": thread}).update_working(
        context=body.context, entities=body.entities, state=body.state, metadata=body.metadata,
        replace=body.replace)
    return _working_view(thread, session)


@router.post("/sessions/{sessionId}/compress", response_model=CompressResult,
             summary="Summarise a thread into an archive row")
def compress(sessionId: Id, body: CompressBody, caller: CallerDep) -> Any:  # noqa: N803
    thread = _thread_of(sessionId, body.thread_id)
    return caller.memory({**body.scope_data(), "threadId": thread}).compress_thread(max_chars=body.max_chars)


@router.post("/archives/{archiveId}/sync", summary="Pin an archive to IPFS (Pinata)",
             **tool_response("memory_archive_pin"))
def archive_sync(archiveId: Id, body: ArchiveSyncBody, caller: CallerDep) -> dict[str, Any]:  # noqa: N803
    return caller.tool(body.scope_data(), "memory_archive_pin", archive_id=archiveId, dry_run=body.dry_run)


@router.get("/sessions/{sessionId}/working", summary="A thread's messages (working memory)")
def working(sessionId: Id, q: Q, caller: CallerDep) -> dict[str, Any]:  # noqa: N803
    messages = caller.memory({**q.scope_data(), "threadId": sessionId}).messages()
    if not messages:
        raise errors.NotFoundError(f"session {sessionId!r} has no messages in this scope")
    return {"sessionId": sessionId, "messages": [m.model_dump(mode="json", by_alias=True) for m in messages]}
