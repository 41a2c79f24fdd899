"""Workers report through the database: counters and histogram kept in memory, flushed every few
seconds into jobqueue.worker_stats, folded into the '(retired)' row when the worker stops."""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace

from jobqueue.db import gateway as db
from jobqueue.model.jobs import Job
from jobqueue.observability import metrics, prometheus
from jobqueue.store import metrics as metrics_store
from jobqueue.store import workers as worker_store
from jobqueue.worker.executor import COMPLETED, DEAD, RETRY, Outcome
from jobqueue.worker.stats import WorkerStats
from tests.support.apps import queue as test_app
from tests.support.prometheus import parse, total, value
from tests.support.waiting import wait_until
from tests.support.workers import WorkerThread, test_settings


def _samples(dsn: str) -> dict:
    async def main():
        conn = await db.connect(dsn)
        try:
            return parse(prometheus.render(await metrics.collect(conn, cap=1000, stale_seconds=30)))
        finally:
            await conn.close()

    return asyncio.run(main())


def test_a_real_worker_reports_processed_failed_and_durations(conn, dsn):
    settings = test_settings(dsn, stats_interval=0.2, concurrency=4)
    with WorkerThread(test_app, settings) as worker:
        conn.execute(
            "SELECT * FROM jobqueue.enqueue_many(%s::jsonb)",
            (
                "[" + ",".join(['{"job_type": "record"}'] * 20) + ',{"job_type": "always_fails"},'
                '{"job_type": "permanent"}]',
            ),
        )
        # record: 20 completed; always_fails: 3 failed attempts; permanent: 1 failed attempt.
        samples = wait_until(
            lambda: (s := _samples(dsn)) and total(s, "jobqueue_jobs_processed_total") == 24 and s,
            timeout=20,
            message="24 attempts reported",
        )
        assert value(samples, "jobqueue_jobs_processed_total", queue="default", job_type="record") == 20
        assert value(samples, "jobqueue_jobs_failed_total", queue="default", job_type="record") == 0
        assert value(samples, "jobqueue_jobs_failed_total", queue="default", job_type="always_fails") == 3
        assert value(samples, "jobqueue_jobs_failed_total", queue="default", job_type="permanent") == 1
        assert value(samples, "jobqueue_worker_processing_time_ms_count", queue="default", job_type="record") == 20
        assert (
            value(samples, "jobqueue_worker_processing_time_ms_bucket", queue="default", job_type="record", le="+Inf")
            == 20
        )
        assert value(samples, "jobqueue_worker_count") == 1
        assert value(samples, "jobqueue_worker_utilization", worker=worker.worker.worker_id) is not None
        assert value(samples, "jobqueue_jobs_in_dlq", queue="default", job_type="always_fails") == 1
        rows = conn.execute(
            "SELECT count(*) FROM jobqueue.worker_stats WHERE worker_id = %s", (worker.worker.worker_id,)
        ).fetchone()[0]
        assert rows == 3  # one per (queue, job type): nothing is written per job
    after = _samples(dsn)
    assert total(after, "jobqueue_jobs_processed_total") == 24  # the stopped worker's totals are kept
    assert value(after, "jobqueue_worker_count") == 0
    owners = {r[0] for r in conn.execute("SELECT DISTINCT worker_id FROM jobqueue.worker_stats")}
    assert owners == {metrics_store.RETIRED_WORKER}


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _outcome(kind: str, duration_ms: float, job_type: str = "t") -> Outcome:
    job = Job(uuid.uuid4(), "q", job_type, {}, 2, 1, 3, None, False, None)
    return Outcome(job=job, kind=kind, duration_ms=duration_ms)


def test_flush_adds_deltas_and_utilization_and_retire_keeps_totals(conn, dsn):
    async def main():
        pool = db.async_pool(dsn, min_size=1, max_size=2)
        await pool.open()
        try:
            async with db.connection(pool) as c:
                for worker_id in ("w1", "w2"):
                    await db.run(
                        c, worker_store.register(worker_id=worker_id, host="h", pid=1, queues=["q"], concurrency=4)
                    )
            clock, occupancy = _Clock(), SimpleNamespace(running=2, slots=4)
            stats = WorkerStats(pool, "w1", occupancy, clock=clock)
            for kind, ms in ((COMPLETED, 0.5), (COMPLETED, 7), (RETRY, 70), (DEAD, 90000)):
                stats.record(_outcome(kind, ms))
            for _ in range(10):  # half of the 4 slots busy for 10 s
                clock.now += 1
                stats.sample()
            await stats.flush()
            assert abs(stats.utilization - 0.5) < 1e-9
            stats.record(_outcome(COMPLETED, 3))
            occupancy.running = 4
            clock.now += 2
            await stats.flush()
            other = WorkerStats(pool, "w2", SimpleNamespace(running=0, slots=4), clock=clock)
            other.record(_outcome(COMPLETED, 1))
            await other.flush()
            await stats.close()  # folds w1 into '(retired)'
        finally:
            await pool.close()

    asyncio.run(main())

    rows = {
        r[0]: r[1:]
        for r in conn.execute("SELECT worker_id, processed, failed, duration_buckets FROM jobqueue.worker_stats")
    }
    assert set(rows) == {"(retired)", "w2"}
    processed, failed, buckets = rows["(retired)"]
    assert (processed, failed) == (5, 2)
    #                  <=1 <=2.5 <=5 <=10 <=25 <=50 <=100 ...                          >60000
    assert buckets == [1, 0, 1, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1]
    utilization, busy_seconds = conn.execute(
        "SELECT utilization, busy_seconds FROM jobqueue.workers WHERE id = 'w1'"
    ).fetchone()
    assert abs(utilization - 1.0) < 1e-6 and abs(busy_seconds - 28.0) < 1e-6
    totals = {(t.queue, t.job_type): t for t in db.run_sync(conn, metrics_store.worker_totals())}
    assert totals[("q", "t")].processed == 6 and totals[("q", "t")].buckets[0] == 2


def test_stale_rows_of_crashed_workers_are_folded(conn, dsn):
    conn.execute("""INSERT INTO jobqueue.worker_stats
                        (worker_id, queue, job_type, processed, failed, duration_buckets, updated_at)
                    VALUES ('crashed', 'q', 't', 7, 1, '{7}', now() - interval '2 hours'),
                           ('alive', 'q', 't', 3, 0, '{3}', now())""")
    db.run_sync(conn, metrics_store.retire_worker_stats(worker_id=None, older_than_seconds=3600))
    rows = dict(conn.execute("SELECT worker_id, processed FROM jobqueue.worker_stats").fetchall())
    assert rows == {"(retired)": 7, "alive": 3}


def test_counts_survive_a_failed_flush(conn, dsn):
    from jobqueue.model.errors import DatabaseUnavailable
    from tests.harness.devdb import free_port

    async def main():
        dead_pool = db.async_pool(
            f"postgresql://nobody@127.0.0.1:{free_port()}/none", min_size=0, max_size=1, timeout=0.5, connect_timeout=1
        )
        pool = db.async_pool(dsn, min_size=1, max_size=1)
        await dead_pool.open()
        await pool.open()
        try:
            stats = WorkerStats(dead_pool, "w", SimpleNamespace(running=0, slots=2))
            stats.record(_outcome(COMPLETED, 1))
            try:
                await stats.flush()
            except DatabaseUnavailable:
                pass
            else:
                raise AssertionError("the flush should have failed")
            stats.record(_outcome(RETRY, 2))
            stats._pool = pool  # the database is back
            await stats.flush()
        finally:
            await dead_pool.close()
            await pool.close()

    asyncio.run(main())
    assert conn.execute("SELECT processed, failed FROM jobqueue.worker_stats WHERE worker_id = 'w'").fetchone() == (
        2,
        1,
    )
