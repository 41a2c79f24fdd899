"""The worker registry: each worker keeps its row fresh; the reaper marks silent ones lost and
forgets old rows; a lost worker that beats again is running again."""

from __future__ import annotations

import asyncio
import os
from datetime import datetime, timedelta, timezone

import psycopg

from jobqueue import Client
from jobqueue.db import gateway as db
from jobqueue.maintenance.reaper import Reaper, ReaperOptions
from jobqueue.runtime.clock import ManualClock, SystemClock
from jobqueue.store import workers as worker_store
from tests.support import apps
from tests.support.maintenance import pools
from tests.support.waiting import wait_until
from tests.support.workers import WorkerThread, test_settings

UTC = timezone.utc


def registry(conn) -> dict[str, dict]:
    with conn.cursor(row_factory=psycopg.rows.dict_row) as cur:
        return {r["id"]: r for r in cur.execute("SELECT * FROM jobqueue.workers").fetchall()}


def reap(dsn: str, now: datetime, **options) -> int:
    async def main() -> int:
        async with pools(dsn) as (pool,):
            return (await Reaper(pool, ReaperOptions(**options), clock=ManualClock(now)).run_once()).count

    return asyncio.run(main())


def add_worker(conn, worker_id: str, *, status: str = "running", silent_for: float, interval: float = 10.0) -> None:
    conn.execute(
        """INSERT INTO jobqueue.workers (id, host, pid, queues, concurrency, status, last_heartbeat,
                                                  heartbeat_interval)
                    VALUES (%s, 'h', 1, '{default}', 1, %s, now() - make_interval(secs => %s), %s)""",
        (worker_id, status, silent_for, interval),
    )


def test_a_worker_keeps_its_row_and_counts_fresh(dsn, conn):
    settings = test_settings(dsn, lease_seconds=0.6, concurrency=3, queues=("default", "other"), run_maintenance=False)
    with WorkerThread(apps.queue, settings) as worker:
        row = registry(conn)[worker.worker.worker_id]
        assert (row["host"], row["pid"], row["queues"], row["concurrency"], row["status"]) == (
            os.uname().nodename,
            os.getpid(),
            ["default", "other"],
            3,
            "running",
        )
        assert abs(row["heartbeat_interval"] - 0.2) < 1e-6
        with Client(dsn) as client:
            client.enqueue_many([{"job_type": "record"} for _ in range(5)])
        wait_until(lambda: registry(conn)[worker.worker.worker_id]["jobs_processed"] == 5, timeout=10)
        beat = registry(conn)[worker.worker.worker_id]["last_heartbeat"]
        wait_until(lambda: registry(conn)[worker.worker.worker_id]["last_heartbeat"] > beat, timeout=5)
    assert registry(conn)[worker.worker.worker_id]["status"] == "stopped"


def test_silent_workers_are_marked_lost_after_three_missed_beats(dsn, conn):
    add_worker(conn, "fresh", silent_for=25)  # 2.5 beats: not yet
    add_worker(conn, "silent", silent_for=35)  # 3.5 beats: lost
    add_worker(conn, "slow-beater", silent_for=35, interval=60)  # its own interval is long: fine
    add_worker(conn, "stopping", status="stopping", silent_for=35)
    add_worker(conn, "stopped", status="stopped", silent_for=35)
    now = conn.execute("SELECT now()").fetchone()[0]
    assert reap(dsn, now) == 2
    status = {worker_id: row["status"] for worker_id, row in registry(conn).items()}
    assert status == {
        "fresh": "running",
        "silent": "lost",
        "slow-beater": "running",
        "stopping": "lost",
        "stopped": "stopped",
    }


def test_a_lost_worker_that_beats_again_is_running_again(dsn, conn):
    add_worker(conn, "flaky", silent_for=100)
    reap(dsn, conn.execute("SELECT now()").fetchone()[0])
    assert registry(conn)["flaky"]["status"] == "lost"
    db.run_sync(conn, worker_store.heartbeat(worker_id="flaky", status="running", processed=1, failed=0))
    assert registry(conn)["flaky"]["status"] == "running"


def test_old_lost_and_stopped_rows_are_forgotten(dsn, conn):
    add_worker(conn, "gone-long-ago", status="lost", silent_for=2 * 86400)
    add_worker(conn, "stopped-long-ago", status="stopped", silent_for=2 * 86400)
    add_worker(conn, "stopped-recently", status="stopped", silent_for=3600)
    add_worker(conn, "alive", silent_for=1)
    assert reap(dsn, conn.execute("SELECT now()").fetchone()[0]) == 2
    assert set(registry(conn)) == {"stopped-recently", "alive"}


def test_the_registry_is_listed_through_the_client(dsn, conn):
    add_worker(conn, "old", status="stopped", silent_for=60)
    add_worker(conn, "live", silent_for=1)
    with Client(dsn) as client:
        workers = client.workers()
    assert [w.id for w in workers] == ["live", "old"]  # live ones first
    assert workers[0].queues == ["default"] and workers[0].heartbeat_interval == 10.0


def test_the_reaper_uses_its_clock(dsn, conn):
    add_worker(conn, "w", silent_for=0)
    assert reap(dsn, datetime.now(UTC) + timedelta(seconds=29)) == 0
    assert reap(dsn, datetime.now(UTC) + timedelta(seconds=31)) == 1


def test_the_reaper_folds_the_metrics_rows_of_crashed_workers(dsn, conn):
    """A crashed worker never folds its own /metrics rows; the leader's reaper does, keeping totals."""
    now = datetime.now(timezone.utc)
    conn.execute(
        """INSERT INTO jobqueue.worker_stats
                        (worker_id, queue, job_type, processed, failed, duration_buckets, updated_at)
                    VALUES ('crashed', 'q', 't', 7, 1, '{7}', %(now)s - interval '2 hours'),
                           ('alive', 'q', 't', 3, 0, '{3}', %(now)s)""",
        {"now": now},
    )
    reap(dsn, now)
    rows = dict(conn.execute("SELECT worker_id, processed FROM jobqueue.worker_stats").fetchall())
    assert rows == {"(retired)": 7, "alive": 3}


class _HostAhead(SystemClock):
    """The maintenance host's wall clock running ``skew`` seconds ahead of the database's."""

    def __init__(self, skew: float) -> None:
        self.skew = skew

    def now(self) -> datetime:
        return super().now() + timedelta(seconds=self.skew)


def test_a_maintenance_host_whose_clock_runs_ahead_marks_no_live_worker_lost(dsn, conn):
    """last_heartbeat is the database's time: the reaper compares it with the database's clock, not
    its own host's (a host 60 s ahead marked every live worker lost at each run)."""
    add_worker(conn, "live", silent_for=1)
    add_worker(conn, "dead", silent_for=35)

    async def main() -> int:
        async with pools(dsn) as (pool,):
            return (await Reaper(pool, clock=_HostAhead(60)).run_once()).count

    asyncio.run(main())
    assert {k: v["status"] for k, v in registry(conn).items()} == {"live": "running", "dead": "lost"}
