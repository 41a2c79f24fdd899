"""The cron scheduler against a real database: exactly-once fires, misfires, DST, latency, wake-ups."""

from __future__ import annotations

import asyncio
import random
from datetime import datetime, timedelta, timezone

import pytest

from jobqueue.maintenance.scheduler import Fired, Scheduler, SchedulerOptions
from jobqueue.model.cron import CronSchedule
from jobqueue.runtime.clock import ManualClock, SystemClock
from tests.support.maintenance import fired_ticks, insert_schedule, pools

UTC = timezone.utc
START = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


def expected(cron: str, zone: str, start: datetime, end: datetime) -> list[datetime]:
    return CronSchedule(cron, zone).between(start, end)


def test_three_schedulers_racing_fire_each_tick_exactly_once(dsn, conn):
    """Three schedulers that all believe they lead (no elector): the database alone keeps it to
    one job per tick, over a few hundred ticks and clock steps of uneven size."""
    crons = {"every-second": "* * * * * *", "every-7s": "* * * * * */7", "every-minute": "* * * * *"}
    for name, cron in crons.items():
        insert_schedule(conn, name, cron, next_fire_at=CronSchedule(cron).next_after(START - timedelta(seconds=1)))
    clock = ManualClock(START)
    rng = random.Random(7)

    async def race() -> None:
        async with pools(dsn, 3) as opened:
            schedulers = [Scheduler(pool, fired_by=f"scheduler-{i}", clock=clock) for i, pool in enumerate(opened)]
            while clock.now() < START + timedelta(minutes=5):
                clock.advance(rng.choice([0.4, 1.0, 1.0, 2.5]))
                await asyncio.gather(*(s.run_once() for s in schedulers))

    asyncio.run(race())
    end = clock.now()
    for name, cron in crons.items():
        ticks = fired_ticks(conn, name)
        assert ticks == expected(cron, "UTC", START, end), name
    assert len(fired_ticks(conn, "every-second")) > 290
    winners = {r[0] for r in conn.execute("SELECT fired_by FROM jobqueue.schedule_fires").fetchall()}
    assert len(winners) >= 2  # they really raced: more than one scheduler won ticks
    fires = conn.execute("SELECT count(*), count(DISTINCT job_id) FROM jobqueue.schedule_fires").fetchone()
    jobs = conn.execute("SELECT count(*) FROM jobqueue.jobs").fetchone()[0]
    assert fires == (jobs, jobs)  # one fire row per job, each naming its job


def test_a_tick_that_already_has_a_fire_row_creates_no_second_job(dsn, conn):
    """The (schedule, tick) key holds even if next_fire_at is moved back by hand."""
    insert_schedule(conn, "daily", "0 6 * * *", next_fire_at=START.replace(hour=6))
    clock = ManualClock(START.replace(hour=6, second=1))

    async def fire_twice() -> None:
        async with pools(dsn) as (pool,):
            scheduler = Scheduler(pool, fired_by="s", clock=clock)
            assert await scheduler.run_once() == Fired(due=1, jobs=1)
            conn.execute("UPDATE jobqueue.schedules SET next_fire_at = %s", (START.replace(hour=6),))
            assert (await scheduler.run_once()).jobs == 0  # due again, but its tick has its job

    asyncio.run(fire_twice())
    assert fired_ticks(conn, "daily") == [START.replace(hour=6)]


@pytest.mark.parametrize(
    "policy, limit, ticks_fired",
    [
        ("fire_once", 100, [9, 10]),  # one job for the outage (the latest missed tick), then on time
        ("fire_all", 100, list(range(11))),  # every missed tick
        ("fire_all", 3, [7, 8, 9, 10]),  # ... the latest `misfire_limit` of them
        ("skip", 100, [10]),  # none of the missed ones
    ],
)
def test_misfire_policies_after_an_outage(dsn, conn, policy, limit, ticks_fired):
    insert_schedule(conn, "minutely", "* * * * *", next_fire_at=START, misfire_policy=policy, misfire_limit=limit)
    clock = ManualClock(START + timedelta(minutes=10, seconds=5))  # down from 12:00 to 12:10:05; grace 60 s

    async def catch_up() -> None:
        async with pools(dsn) as (pool,):
            await Scheduler(pool, SchedulerOptions(misfire_grace=60), fired_by="s", clock=clock).run_once()

    asyncio.run(catch_up())
    assert fired_ticks(conn, "minutely") == [START + timedelta(minutes=m) for m in ticks_fired]
    assert conn.execute("SELECT next_fire_at, last_fire_at FROM jobqueue.schedules").fetchone() == (
        START + timedelta(minutes=11),
        START + timedelta(minutes=10),
    )


def test_a_failover_shorter_than_the_grace_loses_no_tick_even_with_skip(dsn, conn):
    insert_schedule(conn, "every-5s", "* * * * * */5", next_fire_at=START, misfire_policy="skip")
    clock = ManualClock(START + timedelta(seconds=17))  # the old leader died at START; 4 ticks due

    async def take_over() -> None:
        async with pools(dsn) as (pool,):
            await Scheduler(pool, SchedulerOptions(misfire_grace=60), fired_by="successor", clock=clock).run_once()

    asyncio.run(take_over())
    assert fired_ticks(conn, "every-5s") == [START + timedelta(seconds=s) for s in (0, 5, 10, 15)]


@pytest.mark.parametrize(
    "day_start, day_end, hours",
    [
        (datetime(2024, 3, 30, 23, tzinfo=UTC), datetime(2024, 3, 31, 22, tzinfo=UTC), 23),  # spring forward
        (datetime(2024, 10, 26, 22, tzinfo=UTC), datetime(2024, 10, 27, 23, tzinfo=UTC), 25),  # fall back
    ],
)
def test_dst_days_in_the_schedules_zone_neither_skip_nor_double_a_fire(dsn, conn, day_start, day_end, hours):
    berlin = "Europe/Berlin"
    for name, cron in (
        ("daily-0230", "30 2 * * *"),
        ("daily-0200", "0 2 * * *"),
        ("hourly", "0 * * * *"),
        ("quarter", "*/15 * * * *"),
    ):
        insert_schedule(
            conn,
            name,
            cron,
            timezone=berlin,
            next_fire_at=CronSchedule(cron, berlin).next_after(day_start - timedelta(seconds=1)),
        )
    clock = ManualClock(day_start - timedelta(minutes=1))

    async def through_the_day() -> None:
        async with pools(dsn) as (pool,):
            scheduler = Scheduler(pool, fired_by="s", clock=clock)
            while clock.now() < day_end - timedelta(seconds=1):
                clock.advance(7 * 60 + 13)  # steps that do not line up with the ticks
                await scheduler.run_once()

    asyncio.run(through_the_day())
    window = lambda ticks: [t for t in ticks if day_start <= t < day_end]  # noqa: E731
    assert len(window(fired_ticks(conn, "daily-0230"))) == 1
    assert len(window(fired_ticks(conn, "daily-0200"))) == 1
    assert len(window(fired_ticks(conn, "hourly"))) == hours
    assert len(window(fired_ticks(conn, "quarter"))) == hours * 4
    for name in ("daily-0230", "daily-0200", "hourly", "quarter"):
        ticks = fired_ticks(conn, name)
        assert len(ticks) == len(set(ticks)), name


def test_an_expression_croniter_refuses_parks_only_that_schedule(dsn, conn):
    insert_schedule(conn, "never", "0 0 30 2 *")  # passes the SQL sanity check; never fires
    insert_schedule(conn, "fine", "* * * * *", next_fire_at=START)
    clock = ManualClock(START + timedelta(seconds=1))

    async def once() -> None:
        async with pools(dsn) as (pool,):
            await Scheduler(pool, fired_by="s", clock=clock).run_once()

    asyncio.run(once())
    assert fired_ticks(conn, "fine") == [START]
    error = conn.execute("SELECT error FROM jobqueue.schedules WHERE name = 'never'").fetchone()[0]
    assert "never fires" in error
    conn.execute("UPDATE jobqueue.schedules SET cron = '0 0 1 3 *' WHERE name = 'never'")  # fixing it clears it
    assert conn.execute("SELECT error FROM jobqueue.schedules WHERE name = 'never'").fetchone()[0] is None


def test_a_fire_is_late_by_milliseconds_not_a_poll_period(dsn, conn):
    """With the real clock the scheduler sleeps until the next tick (its poll interval is 60 s)."""
    insert_schedule(conn, "every-second", "* * * * * *")

    async def run_for_a_few_ticks() -> None:
        async with pools(dsn) as (pool,):
            scheduler = Scheduler(pool, SchedulerOptions(interval=60), fired_by="s", clock=SystemClock())
            task = asyncio.create_task(scheduler.run(lambda: True))
            for _ in range(200):
                await asyncio.sleep(0.05)
                if len(fired_ticks(conn, "every-second")) >= 4:
                    break
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    asyncio.run(run_for_a_few_ticks())
    late = conn.execute("""SELECT extract(epoch FROM created_at - run_at) FROM jobqueue.jobs
                           WHERE producer_id = 'schedule:every-second' ORDER BY run_at""").fetchall()
    assert len(late) >= 4
    assert all(0 <= lateness < 0.25 for (lateness,) in late), late  # typically a few ms


def test_a_cron_job_sees_the_tick_it_fired_for_on_every_attempt(dsn, conn):
    """Job.scheduled_for is the tick (migration 0034), also after a retry has moved its run_at on
    and for each of several missed ticks fired at once; a job no schedule fired has None."""
    from jobqueue import JobQueue, Retry
    from jobqueue.testing import drain_sync

    app = JobQueue("ticks")
    seen = []

    @app.task("tick")
    async def tick(job):
        seen.append((job.scheduled_for, job.attempt, job.producer_id))
        if job.attempt == 1 and job.scheduled_for == START + timedelta(minutes=1):
            raise Retry(after=600)

    insert_schedule(conn, "minutely", "* * * * *", next_fire_at=START, misfire_policy="fire_all")
    clock = ManualClock(START + timedelta(minutes=2, seconds=5))

    async def catch_up() -> None:
        async with pools(dsn) as (pool,):
            await Scheduler(pool, SchedulerOptions(misfire_grace=60), fired_by="s", clock=clock).run_once()

    asyncio.run(catch_up())
    conn.execute("SELECT jobqueue.enqueue('tick')")  # by hand: no tick
    assert drain_sync(app, dsn, with_scheduled=True).completed == 4
    ticks = [START + timedelta(minutes=m) for m in range(3)]
    assert sorted(s for s in seen if s[0] is not None) == [
        (ticks[0], 1, "schedule:minutely"),
        (ticks[1], 1, "schedule:minutely"),
        (ticks[1], 2, "schedule:minutely"),  # retried: its run_at moved on, its tick did not
        (ticks[2], 1, "schedule:minutely"),
    ]
    assert (None, 1, None) in seen
    stored = conn.execute(
        "SELECT f.fire_at = j.scheduled_for FROM jobqueue.schedule_fires f JOIN jobqueue.jobs j ON j.id = f.job_id"
    ).fetchall()
    assert stored == [(True,)] * 3
