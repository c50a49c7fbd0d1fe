"""A three-member replica set of real ``mongod`` processes for the ``cluster`` tests, started
once per session on free local ports and stopped afterwards (no setup outside pytest).

A missing ``mongod`` binary skips these tests, or fails them when ``MANOWAR_REQUIRE_SERVICES=1``
or ``CI`` is set, like every other server-backed test."""

from __future__ import annotations

import os
import uuid

import pytest

from manowar_memory.errors import ConfigurationError


@pytest.fixture(scope="session")
def replica_set():
    """A running 3-member :class:`~manowar_memory.testing.cluster.ReplicaSet` (fast elections)."""
    from manowar_memory.testing.cluster import ReplicaSet

    try:
        rs = ReplicaSet(members=3, name="rsc").start()
    except ConfigurationError as exc:
        error = exc
    else:
        yield rs
        rs.stop()
        return
    # the same rule as the other servers (tests/conftest.py): fail in CI, skip elsewhere
    message = f"a local replica set could not start ({error})"
    required = os.environ.get("MANOWAR_REQUIRE_SERVICES", "").strip() == "1" or (
        os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no"))
    if required:
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


@pytest.fixture
def cluster_db() -> str:
    """A fresh database name on the replica set (the set is thrown away after the session)."""
    return f"manowar_cluster_{uuid.uuid4().hex[:10]}"
