"""The schedules role of the conformance suite (:class:`SchedulesConformance`)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from ...stores.base import Store
from .common import _RoleConformance

__all__ = ["SchedulesConformance"]


class SchedulesConformance(_RoleConformance):
    """The :class:`~manowar_memory.stores.base.ScheduleStore` role: documents with compare-and-set."""

    def test_schedule_round_trip_replace_and_delete(self, store: Store) -> None:
        assert store.get_schedule("s1") is None and store.list_schedules() == []
        assert store.save_schedule({"scheduleId": "s1", "cron": "0 3 * * *", "params": {"x": [1, "ü"]}}) == 1
        assert store.get_schedule("s1") == {"scheduleId": "s1", "cron": "0 3 * * *", "params": {"x": [1, "ü"]},
                                            "rev": 1}
        assert store.save_schedule({"scheduleId": "s1", "cron": "0 4 * * *", "rev": 99}) == 2  # rev is the store's
        assert store.save_schedule({"scheduleId": "s0", "cron": "x"}) == 1
        assert [(d["scheduleId"], d["rev"]) for d in store.list_schedules()] == [("s0", 1), ("s1", 2)]
        assert store.get_schedule("s1")["cron"] == "0 4 * * *"  # type: ignore[index]
        assert store.delete_schedule("s1") is True and store.delete_schedule("s1") is False
        assert store.get_schedule("s1") is None

    def test_schedule_compare_and_set(self, store: Store) -> None:
        assert store.save_schedule({"scheduleId": "gone", "n": 1}, expected_rev=1) is None  # nothing to compare
        assert store.get_schedule("gone") is None
        store.save_schedule({"scheduleId": "s", "n": 1})
        assert store.save_schedule({"scheduleId": "s", "n": 2}, expected_rev=5) is None
        assert store.get_schedule("s") == {"scheduleId": "s", "n": 1, "rev": 1}
        assert store.save_schedule({"scheduleId": "s", "n": 2}, expected_rev=1) == 2
        assert store.get_schedule("s") == {"scheduleId": "s", "n": 2, "rev": 2}

    def test_concurrent_compare_and_set_lets_one_writer_win(self, store: Store) -> None:
        store.save_schedule({"scheduleId": "race", "owner": None})
        with ThreadPoolExecutor(max_workers=8) as pool:
            revs = list(pool.map(lambda i: store.save_schedule({"scheduleId": "race", "owner": i}, expected_rev=1),
                                 range(8)))
        winners = [i for i, rev in enumerate(revs) if rev is not None]
        assert len(winners) == 1 and revs[winners[0]] == 2
        assert store.get_schedule("race") == {"scheduleId": "race", "owner": winners[0], "rev": 2}
