"""`SlotScaler` against a real database, on a stepped clock: the signals it reads, the target it
writes to the registry, and an outage that keeps the current target."""

from __future__ import annotations

import asyncio
import json

import pytest

from jobqueue.db import gateway as db
from jobqueue.model.errors import DatabaseUnavailable
from jobqueue.store import workers as worker_store
from jobqueue.worker.slot_scaler import SlotScaler
from jobqueue.worker.stats import WorkerStats
from tests.harness.devdb import free_port
from tests.support.workers import test_settings


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Slots:
    """The worker's side the scaler reads and moves (its `WorkerStatus`): the jobs running, the
    slots, and every resize asked for."""

    def __init__(self, slots: int, queues: list[str]) -> None:
        self.slots, self.running, self.resized, self.queues = slots, 0, [], queues

    def resize(self, slots: int) -> None:
        self.slots = slots
        self.resized.append(slots)

    def claimable(self) -> list[str]:
        return self.queues


def registry_target(conn, worker_id: str = "w1") -> int | None:
    return conn.execute("SELECT concurrency_target FROM jobqueue.workers WHERE id = %s", (worker_id,)).fetchone()[0]


def test_the_target_follows_depth_per_worker_and_utilization_under_the_cooldowns(conn, dsn):
    settings = test_settings(dsn, queues=("q",), concurrency=10, concurrency_min=2)
    conn.execute(
        "SELECT * FROM jobqueue.enqueue_many(%s::jsonb)", (json.dumps([{"job_type": "x", "queue": "q"}] * 250),)
    )

    async def main():
        pool = db.async_pool(dsn, min_size=1, max_size=2)
        await pool.open()
        try:
            async with db.connection(pool) as c:
                for worker_id in ("w1", "w2"):  # two live workers serve q: 250 / 2 = 125 per worker
                    await db.run(
                        c,
                        worker_store.register(
                            worker_id=worker_id,
                            host="h",
                            pid=1,
                            queues=["q"],
                            concurrency=10,
                            concurrency_min=2,
                            concurrency_target=2,
                        ),
                    )
            clock, slots = Clock(), Slots(2, ["q"])
            stats = WorkerStats(pool, "w1", slots, clock=clock)
            scaler = SlotScaler(
                pool,
                "w1",
                settings.worker,
                settings.autoscale,
                stale_seconds=settings.metrics.worker_stale_seconds,
                queues=slots,
                stats=stats,
                slots=slots,
                clock=clock,
            )
            assert (scaler.target, stats.concurrency) == (2, 2)
            clock.now += 5
            assert await scaler.step() == 4
            assert (slots.resized, stats.concurrency, registry_target(conn)) == ([4], 4, 4)
            clock.now += 10
            assert await scaler.step() == 4  # up cooldown (30 s)
            clock.now += 20
            assert await scaler.step() == 6
            conn.execute("DELETE FROM jobqueue.jobs WHERE id IN (SELECT id FROM jobqueue.jobs LIMIT 100)")
            slots.running = 6  # 150 / 2 = 75 per worker, but every slot busy: still up
            clock.now += 30
            assert await scaler.step() == 8
            conn.execute("DELETE FROM jobqueue.jobs")
            slots.running = 0
            clock.now += 100
            assert await scaler.step() == 8  # idle and empty, but within 5 min of the last change
            clock.now += 200
            assert await scaler.step() == 6
            assert registry_target(conn) == 6

            dead = db.async_pool(
                f"postgresql://nobody@127.0.0.1:{free_port()}/none",
                min_size=0,
                max_size=1,
                timeout=0.5,
                connect_timeout=1,
            )
            await dead.open()
            scaler._pool = dead  # the database goes away: the target stays, the next step tries again
            clock.now += 300
            with pytest.raises(DatabaseUnavailable):
                await scaler.step()
            assert scaler.target == 6 and slots.resized[-1] == 6
            await dead.close()
            scaler._pool = pool
            assert await scaler.step() == 4 and registry_target(conn) == 4
        finally:
            await pool.close()

    asyncio.run(main())


def test_only_claimable_queues_count(conn, dsn):
    """A worker whose queues are all paused sees no depth (the runner passes its claimable queues)."""
    settings = test_settings(dsn, queues=("q",), concurrency=10, concurrency_min=2)
    conn.execute(
        "SELECT * FROM jobqueue.enqueue_many(%s::jsonb)", (json.dumps([{"job_type": "x", "queue": "q"}] * 500),)
    )

    async def main():
        pool = db.async_pool(dsn, min_size=1, max_size=2)
        await pool.open()
        try:
            slots = Slots(2, [])
            stats = WorkerStats(pool, "w1", slots, clock=Clock())
            scaler = SlotScaler(
                pool,
                "w1",
                settings.worker,
                settings.autoscale,
                stale_seconds=settings.metrics.worker_stale_seconds,
                queues=slots,
                stats=stats,
                slots=slots,
                clock=Clock(),
            )
            assert await scaler.step() == 2
        finally:
            await pool.close()

    asyncio.run(main())
