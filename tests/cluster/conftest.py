"""A three-member replica set of real ``mongod`` processes for the ``cluster`` tests, started
once per session on free local ports and stopped afterwards (no setup outside pytest).

A missing ``mongod`` binary skips these tests, or fails them when ``MANOWAR_REQUIRE_SERVICES=1``
or ``CI`` is set, like every other server-backed test."""

from __future__ import annotations

import uuid

import pytest

from manowar_memory.errors import ConfigurationError


@pytest.fixture(scope="session")
def replica_set(request: pytest.FixtureRequest):
    """A running 3-member :class:`~manowar_memory.testing.cluster.ReplicaSet` (fast elections)."""
    from manowar_memory.testing.cluster import ReplicaSet

    try:
        rs = ReplicaSet(members=3, name="rsc").start()
    except ConfigurationError as exc:
        # the parent conftest decides between skip and fail, as for the other servers
        unavailable = request.config.pluginmanager.get_plugin(
            f"{request.config.rootpath}/tests/conftest.py")
        message = f"a local replica set could not start ({exc})"
        if unavailable is not None and unavailable.services_required():
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    yield rs
    rs.stop()


@pytest.fixture
def cluster_db() -> str:
    """A fresh database name on the replica set (the set is thrown away after the session)."""
    return f"manowar_cluster_{uuid.uuid4().hex[:10]}"
