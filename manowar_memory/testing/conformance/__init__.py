"""The conformance suite every :class:`~manowar_memory.stores.base.Store` must pass unchanged.

Subclass :class:`StoreConformance` in a pytest module and override the ``store`` fixture so it
yields an **empty** store (and closes it afterwards)::

    import pytest
    from manowar_memory import SQLiteStore
    from manowar_memory.testing import StoreConformance

    class TestMyStore(StoreConformance):
        @pytest.fixture
        def store(self):
            s = SQLiteStore(":memory:")
            yield s
            s.close()

Do not override the tests: ``test_no_overrides_DO_NOT_OVERRIDE`` fails if a subclass does
(a store that needs a different answer does not conform). The suite covers every method of
the protocol and the scope rules shared by all read paths: agent exact; a user sees their
rows and the agent's user-less rows, no user sees only user-less rows; the thread narrows only
non-durable reads; mode and hai when set; ``active_only`` hides deleted and superseded rows;
allowlisted filters (equality, lists, null, nested ``metadata.*`` paths); sources.

``StoreConformance`` is the union of one class per role of :mod:`manowar_memory.stores.base`:
:class:`MemoryRowsConformance`, :class:`ThreadsConformance`, :class:`ArtifactsConformance`,
:class:`CacheFencesConformance`, :class:`MaintenanceConformance` (what the jobs call) and
:class:`SchedulesConformance` (compare-and-set). A store must pass all of them; while you
build one, subclass a single role class the same way to check that role alone. Each role
class lives in the module of the same name as the store modules that implement the role
(:mod:`.rows`, :mod:`.threads`, :mod:`.artifacts`, :mod:`.fences`, :mod:`.maintenance`,
:mod:`.schedules`); the shared test data is in :mod:`.common`.

Needs pytest (``pip install "manowar-memory[dev]"``).
"""

from __future__ import annotations

from ..._util import now_ms
from ...stores.base import Store

try:
    import pytest
except ImportError as exc:  # pragma: no cover - only without the dev extra
    from ...errors import MissingDependencyError

    raise MissingDependencyError("pytest", "dev", "The store conformance suite") from exc

from .artifacts import ArtifactsConformance
from .common import AGENT as AGENT
from .common import MODEL as MODEL
from .common import OTHER_AGENT as OTHER_AGENT
from .common import OTHER_MODEL as OTHER_MODEL
from .common import SCOPE_CASES as SCOPE_CASES
from .common import T0 as T0
from .common import _q, make_record, unit_vector
from .fences import CacheFencesConformance
from .maintenance import MaintenanceConformance
from .rows import MemoryRowsConformance
from .schedules import SchedulesConformance
from .threads import ThreadsConformance

__all__ = [
    "ArtifactsConformance",
    "CacheFencesConformance",
    "MaintenanceConformance",
    "MemoryRowsConformance",
    "SchedulesConformance",
    "StoreConformance",
    "ThreadsConformance",
    "make_record",
    "unit_vector",
]


class StoreConformance(MemoryRowsConformance, ThreadsConformance, ArtifactsConformance, CacheFencesConformance,
                       MaintenanceConformance, SchedulesConformance):
    """Behaviour every store must have: every role suite, plus what spans the roles.
    Override only the ``store`` fixture."""

    # ------------------------------------------------------------------ protocol
    def test_implements_the_store_protocol(self, store: Store) -> None:
        assert isinstance(store, Store)
        assert isinstance(store.name, str) and store.name

    def test_empty_store_answers_every_read(self, store: Store) -> None:
        q = _q(user="u1", thread="t1")
        assert store.list_memories(q) == []
        assert store.count_memories(q) == 0
        assert store.keyword_search(q, "anything here", 5) == []
        hits, info = store.vector_search(q, [1.0, 0.0, 0.0, 0.0], MODEL, 5)
        assert hits == [] and isinstance(info.method, str)
        assert list(store.iter_memories()) == []
        assert store.get_memory("vec_nothing") is None
        assert store.find_fact_by_hash(AGENT, "nope") is None
        assert store.find_sessions(q, 5) == [] and store.get_session("s", AGENT) is None
        assert store.search_transcripts(q, None, 5) == [] and store.search_transcripts(q, "hello world", 5) == []
        assert store.get_transcript("s", AGENT) is None
        assert store.find_patterns(q, 5) == [] and store.get_pattern("p") is None
        assert store.find_archives(q, 5) == [] and store.get_archive("a") is None
        assert store.list_skills(None, None, 5) == [] and store.get_skill("k") is None
        assert store.get_job("j") is None
        assert store.purge_expired_sessions(now_ms()) == 0
        assert store.stats()["totalVectors"] == 0

    # ------------------------------------------------------------------ stats
    def test_stats(self, store: Store) -> None:
        store.add_memories([
            make_record("s1", created_at=T0, source="fact"),
            make_record("s2", created_at=T0 + 10, metadata={"status": "deleted"}),
            make_record("s3", created_at=T0 + 20, user="u1"),
            make_record("s4", created_at=T0 + 30, agent=OTHER_AGENT),
        ])
        store.upsert_session(self._session("sess"))
        store.upsert_transcript(self._transcript("tr"))
        store.upsert_pattern(self._pattern("p", 0.5))
        stats = store.stats(AGENT)
        assert stats["totalVectors"] == 3
        assert stats["avgDecayScore"] == pytest.approx(1.0)
        assert (stats["oldestVector"], stats["newestVector"]) == (T0, T0 + 20)
        assert stats["bySource"] == {"fact": 1, "knowledge": 2}
        assert stats["byStatus"] == {"active": 2, "deleted": 1}
        assert (stats["totalSessions"], stats["totalTranscripts"], stats["totalPatterns"], stats["totalArchives"]) == (
            1, 1, 1, 0)
        everything = store.stats()
        assert everything["totalVectors"] == 4 and everything["newestVector"] == T0 + 30

    def test_close_is_safe_to_call(self, store: Store) -> None:
        store.close()  # the fixture closes again afterwards

    # ------------------------------------------------------------------ guard
    def test_no_overrides_DO_NOT_OVERRIDE(self) -> None:  # noqa: N802 - the name warns subclass authors
        """Subclasses may only override fixtures: a store that needs another answer does not conform."""
        suites = set(StoreConformance.__mro__)
        base = {name: value for klass in reversed(StoreConformance.__mro__) for name, value in vars(klass).items()}
        overridden = []
        for klass in type(self).__mro__:
            if klass in suites:
                continue
            for name, value in vars(klass).items():
                if name.startswith("test") and name in base and value is not base[name]:
                    overridden.append(f"{klass.__name__}.{name}")
        assert not overridden, f"conformance tests must not be overridden: {overridden}"
