"""The maintenance runner in-process: NOTIFY wakes the scheduler, a clean shutdown hands the
leadership (and the cron ticks) over at once."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta

from jobqueue.events.notifier import Notifier
from jobqueue.maintenance.runner import Maintenance
from tests.support.maintenance import fired_ticks, insert_schedule
from tests.support.workers import test_settings


class Running:
    """A Maintenance with its own LISTEN connection, as a worker process runs it."""

    def __init__(self, dsn: str, leader_id: str, **settings) -> None:
        self.notifier = Notifier(dsn)
        self.maintenance = Maintenance.of(test_settings(dsn, **settings), self.notifier, leader_id)
        self.tasks: list[asyncio.Task] = []

    @property
    def leads(self) -> bool:
        return self.maintenance.elector.is_leader

    async def start(self) -> "Running":
        self.tasks = [asyncio.create_task(self.notifier.run()), asyncio.create_task(self.maintenance.run())]
        await asyncio.wait_for(self.notifier.connected.wait(), 5)
        return self

    async def stop(self) -> None:
        """A clean shutdown: the services stop and the elector resigns."""
        for task in reversed(self.tasks):
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


async def until(predicate, timeout: float) -> float:
    started = time.monotonic()
    while not predicate():
        assert time.monotonic() - started < timeout, "timed out"
        await asyncio.sleep(0.02)
    return time.monotonic() - started


def test_a_new_schedule_wakes_the_sleeping_scheduler(dsn, conn):
    async def main() -> float:
        node = await Running(dsn, "m1").start()
        try:
            await until(lambda: node.leads, 5)
            await asyncio.sleep(0.3)  # nothing scheduled: the scheduler sleeps (up to 60 s)
            insert_schedule(conn, "every-second", "* * * * * *")  # plain SQL: the trigger NOTIFYs
            return await until(lambda: fired_ticks(conn, "every-second"), 5)
        finally:
            await node.stop()

    assert asyncio.run(main()) < 2.0  # the first tick after the insert, not a 60 s poll later


def test_a_clean_shutdown_hands_leadership_and_ticks_over_at_once(dsn, conn):
    insert_schedule(conn, "every-second", "* * * * * *")

    async def main() -> float:
        first = await Running(dsn, "first", leader_ttl=30).start()
        await until(lambda: first.leads and len(fired_ticks(conn, "every-second")) >= 2, 5)
        second = await Running(dsn, "second", leader_ttl=30).start()
        try:
            await asyncio.sleep(0.3)
            assert not second.leads
            await first.stop()
            took = await until(lambda: second.leads, 5)
            count = len(fired_ticks(conn, "every-second"))
            await until(lambda: len(fired_ticks(conn, "every-second")) >= count + 2, 5)
            return took
        finally:
            await second.stop()

    assert asyncio.run(main()) < 1.0  # with a 30 s lease: the resign's NOTIFY, not the expiry
    ticks = fired_ticks(conn, "every-second")
    assert ticks == [ticks[0] + timedelta(seconds=i) for i in range(len(ticks))]  # none lost, none doubled
    fired_by = [r[0] for r in conn.execute("SELECT fired_by FROM jobqueue.schedule_fires ORDER BY fire_at")]
    assert fired_by[0] == "first" and fired_by[-1] == "second"
