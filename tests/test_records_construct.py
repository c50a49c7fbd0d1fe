"""The fast ``model_construct`` of the stored shapes builds exactly what pydantic's does."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from manowar_memory.records import MemoryRecord, Transcript


def _row(**over: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "id": "vec_a_1", "agent_wallet": "agent-1", "user_address": "u", "thread_id": "t", "mode": None, "hai_id": None,
        "content": "Lisbon, with my sister.", "context": "Where did you move?", "source": "knowledge", "decay_score": 1.0,
        "access_count": 2, "created_at": 1, "updated_at": 2, "last_accessed_at": 3, "metadata": {"trust": "learned"},
        "embedding": None, "embedding_model": "fake:64",
    }
    row.update(over)
    return row


def _same(fast: BaseModel, slow: BaseModel) -> None:
    assert type(fast) is type(slow)
    assert list(fast.__dict__.items()) == list(slow.__dict__.items())  # same values, same order
    assert fast.model_fields_set == slow.model_fields_set
    assert fast.__pydantic_extra__ == slow.__pydantic_extra__
    assert fast.__pydantic_private__ == slow.__pydantic_private__
    assert fast.model_dump(by_alias=True) == slow.model_dump(by_alias=True)
    assert fast == slow


def test_every_field_by_name_matches_pydantic() -> None:
    row = _row()
    # the store's argument order differs from the declaration order: the instance follows the declaration
    _same(MemoryRecord.model_construct(**row), BaseModel.model_construct.__func__(MemoryRecord, **row))  # type: ignore[attr-defined]


def test_other_calls_go_to_pydantic() -> None:
    stamps = {"created_at": 1, "updated_at": 1, "last_accessed_at": 1}  # fixed: their defaults read the clock
    partial = {"id": "vec_b", "agent_wallet": "a", "content": "x", **stamps}  # other defaults must be filled in
    rec = MemoryRecord.model_construct(**partial)
    _same(rec, BaseModel.model_construct.__func__(MemoryRecord, **partial))  # type: ignore[attr-defined]
    assert rec.model_fields_set == {"id", "agent_wallet", "content", *stamps}
    assert rec.source == "knowledge"
    by_alias = {"vectorId": "vec_c", "agentWallet": "a", "content": "y"}
    assert MemoryRecord.model_construct(**by_alias).id == "vec_c"
    chosen = MemoryRecord.model_construct({"id"}, **_row())
    assert chosen.model_fields_set == {"id"}


def test_other_models_take_the_same_path() -> None:
    values = {"agent_wallet": "a", "user_address": None, "thread_id": "t", "mode": None, "hai_id": None, "session_id": "s",
                  "messages": [], "summary": None, "token_count": 0, "metadata": {}, "created_at": 5}
    _same(Transcript.model_construct(**values), BaseModel.model_construct.__func__(Transcript, **values))  # type: ignore[attr-defined]
