"""The historian: the leader's per-minute samples of the throughput totals, the rates the dashboard
reads from them, a late sample that never overwrites a newer one, and the day it keeps."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

import pytest

from jobqueue.config import MaintenanceSettings
from jobqueue.db import gateway as db
from jobqueue.events.notifier import Notifier
from jobqueue.maintenance.historian import Historian, HistorianOptions
from jobqueue.maintenance.runner import Maintenance
from jobqueue.runtime.clock import ManualClock
from jobqueue.store import history as history_store
from tests.support.factories import make_job
from tests.support.maintenance import pools
from tests.support.settings import settings_of

UTC = timezone.utc
NOON = datetime(2024, 6, 1, 12, tzinfo=UTC)


def counted(conn, *, processed: int, failed: int) -> None:
    """What the workers reported so far, as their stats flushes leave it."""
    conn.execute(
        """INSERT INTO jobqueue.worker_stats (worker_id, queue, job_type, processed, failed)
                    VALUES ('w1', 'default', 'noop', %s, %s)
                    ON CONFLICT (worker_id, queue, job_type) DO UPDATE
                    SET processed = EXCLUDED.processed, failed = EXCLUDED.failed""",
        (processed, failed),
    )


def sample(dsn: str, at: datetime, **options) -> int:
    async def main() -> int:
        async with pools(dsn) as (pool,):
            return (await Historian(pool, HistorianOptions(**options), clock=ManualClock(at)).run_once()).dropped

    return asyncio.run(main())


def rates(dsn: str, at: datetime, minutes: int = 60) -> list:
    async def main() -> list:
        async with pools(dsn) as (pool,):
            async with db.connection(pool) as conn:
                return await db.run(conn, history_store.rates(minutes=minutes, now=at))

    return asyncio.run(main())


def rows(conn) -> list[tuple]:
    return conn.execute(
        "SELECT minute, measured_at, submitted, processed, failed FROM jobqueue.throughput_history ORDER BY minute"
    ).fetchall()


def test_each_minute_keeps_its_last_sample_and_rates_come_from_consecutive_minutes(dsn, conn):
    counted(conn, processed=0, failed=0)
    sample(dsn, NOON)
    for _ in range(120):
        make_job(conn)
    counted(conn, processed=100, failed=10)
    sample(dsn, NOON + timedelta(seconds=30))  # same minute: replaces the first sample
    assert rows(conn) == [(NOON, NOON + timedelta(seconds=30), 120, 100, 10)]
    for _ in range(60):
        make_job(conn)
    counted(conn, processed=220, failed=40)
    sample(dsn, NOON + timedelta(seconds=90))  # the next minute, 60 s after the last sample
    (point,) = rates(dsn, NOON + timedelta(seconds=95))
    assert point.minute == NOON + timedelta(minutes=1)
    assert point.submitted_per_s == pytest.approx(60 / 60)
    assert point.completed_per_s == pytest.approx(((220 - 40) - (100 - 10)) / 60)
    assert point.failed_per_s == pytest.approx(30 / 60)


def test_a_late_sample_from_a_former_leader_does_not_overwrite_a_newer_one(dsn, conn):
    counted(conn, processed=50, failed=0)
    sample(dsn, NOON + timedelta(seconds=40))
    counted(conn, processed=10, failed=0)
    sample(dsn, NOON + timedelta(seconds=20))  # older than the row: ignored
    assert rows(conn)[0][1:] == (NOON + timedelta(seconds=40), 0, 50, 0)


def test_totals_that_went_down_are_no_negative_rates_and_a_gap_widens_the_step(dsn, conn):
    counted(conn, processed=500, failed=0)
    sample(dsn, NOON)
    counted(conn, processed=100, failed=0)  # the stats were lost and started over
    sample(dsn, NOON + timedelta(minutes=1))
    counted(conn, processed=400, failed=0)
    sample(dsn, NOON + timedelta(minutes=4))  # no leader for three minutes
    first, second = rates(dsn, NOON + timedelta(minutes=4, seconds=5))
    assert first.completed_per_s == 0
    assert second.minute == NOON + timedelta(minutes=4) and second.completed_per_s == pytest.approx(300 / 180)


def test_the_window_asks_for_the_minutes_it_shows(dsn, conn):
    for minute in range(0, 90):
        counted(conn, processed=minute * 60, failed=0)
        sample(dsn, NOON + timedelta(minutes=minute))
    points = rates(dsn, NOON + timedelta(minutes=89, seconds=30), minutes=60)
    assert [p.minute for p in points] == [NOON + timedelta(minutes=m) for m in range(29, 90)]
    assert {p.completed_per_s for p in points} == {1.0}


def test_a_day_is_kept(dsn, conn):
    sample(dsn, NOON - timedelta(days=1, minutes=2))
    sample(dsn, NOON - timedelta(days=1) + timedelta(minutes=1))
    assert sample(dsn, NOON) == 1  # the sample two minutes past a day is pruned
    assert [r[0] for r in rows(conn)] == [NOON - timedelta(days=1) + timedelta(minutes=1), NOON]


def test_options_are_checked_and_the_runner_runs_it_unless_turned_off(dsn):
    with pytest.raises(ValueError, match="history interval"):
        HistorianOptions(interval=0)
    with pytest.raises(ValueError, match="two minutes"):
        HistorianOptions(keep=60)
    with pytest.raises(ValueError, match="JOBQUEUE_HISTORY_INTERVAL: must be 0 to"):
        MaintenanceSettings(history_interval=-1)

    def services(**overrides) -> list[str]:
        maintenance = Maintenance.of(settings_of(dsn=dsn, **overrides), Notifier(dsn), "leader-a")
        return [s.name for s in maintenance.services]

    assert "historian" in services() and "historian" not in services(history_interval=0)
