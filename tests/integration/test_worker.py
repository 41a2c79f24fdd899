"""The worker: claim order, wake-ups, retries, dead letters, timeouts, cancel, leases, shutdown."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections import defaultdict
from datetime import datetime, timedelta, timezone

import psycopg
import psycopg.sql
import pytest
from psycopg.conninfo import make_conninfo

from jobqueue import Client
from jobqueue.model.jobs import CancelOutcome, JobState
from tests.support import apps
from tests.support.factories import job_row, make_job, states
from tests.support.waiting import wait_until
from tests.support.workers import WorkerThread, test_settings


@pytest.fixture(autouse=True)
def _clear_runs():
    apps.runs.clear()
    yield
    apps.runs.clear()


def all_in(conn, ids, state: str) -> bool:
    current = states(conn, ids)
    return len(current) == len(ids) and all(s == state for s in current.values())


def test_commit_wakes_an_idle_worker_without_polling(dsn, conn):
    settings = test_settings(dsn, poll_interval=60.0)
    with WorkerThread(apps.queue, settings):
        time.sleep(0.2)  # the worker has found nothing and sleeps on LISTEN (next poll in 60 s)
        with psycopg.connect(dsn) as producer:
            job_id = producer.execute("SELECT jobqueue.enqueue('record', '{\"n\": 1}')").fetchone()[0]
            time.sleep(0.3)
            assert job_id not in states(conn, [job_id])  # uncommitted: invisible, no wake-up
            producer.commit()
            committed = time.monotonic()
        wait_until(lambda: all_in(conn, [job_id], "completed"), timeout=5)
        assert time.monotonic() - committed < 2.0


def test_scheduled_job_runs_when_due_without_notify(dsn, conn):
    settings = test_settings(dsn, poll_interval=60.0)
    with WorkerThread(apps.queue, settings):
        job_id = conn.execute("SELECT jobqueue.enqueue('record', delay => interval '0.7 seconds')").fetchone()[0]
        time.sleep(0.3)
        assert states(conn, [job_id])[job_id] == "pending"
        wait_until(lambda: all_in(conn, [job_id], "completed"), timeout=5)
    row = job_row(conn, job_id)
    assert row["started_at"] >= row["run_at"]


def test_single_worker_runs_in_priority_then_fifo_order(dsn, conn):
    ids = []
    for i, priority in enumerate(["low", "normal", "critical", "high", "low", "critical", "normal", "high"]):
        ids.append((priority, i, make_job(conn, job_type="record", priority=priority, payload={"n": i})))
    with WorkerThread(apps.queue, test_settings(dsn, concurrency=1)):
        wait_until(lambda: len(apps.runs) == len(ids))
    order = {"critical": 0, "high": 1, "normal": 2, "low": 3}
    expected = [job_id for _, _, job_id in sorted(ids, key=lambda t: (order[t[0]], t[1]))]
    assert [run[0] for run in apps.runs] == expected


def test_concurrent_workers_run_each_job_once_in_order_per_worker(dsn, conn):
    with Client(dsn) as client:
        ids = client.enqueue_many(
            [
                {"job_type": "record", "priority": p, "payload": {"n": i}}
                for i, p in enumerate(["low", "high", "normal", "critical"] * 50)
            ]
        )
    rank = {
        job_id: index
        for index, job_id in enumerate(
            r[0] for r in conn.execute("SELECT id FROM jobqueue.jobs ORDER BY priority, run_at, seq").fetchall()
        )
    }
    workers = [WorkerThread(apps.queue, test_settings(dsn, concurrency=2)) for _ in range(3)]
    for worker in workers:
        worker.start()
    try:
        wait_until(lambda: all_in(conn, ids, "completed"), timeout=20)
    finally:
        for worker in workers:
            worker.stop()
    assert sorted(run[0] for run in apps.runs) == sorted(ids)  # every job ran, exactly once
    assert conn.execute("SELECT count(*) FROM jobqueue.job_results").fetchone()[0] == len(ids)
    by_worker = defaultdict(list)
    worker_of = dict(conn.execute("SELECT job_id, worker_id FROM jobqueue.job_results").fetchall())
    for job_id, *_ in apps.runs:
        by_worker[worker_of[job_id]].append(rank[job_id])
    assert len(by_worker) == 3
    for ranks in by_worker.values():
        # each worker claims in batches of its free slots, so it starts jobs in global order up to
        # the width of one batch (2) -- never a low job before a critical one it could have had.
        assert all(b > a - 2 for a, b in zip(ranks, ranks[1:])), ranks


def test_retryable_failure_backs_off_then_dead_letters_with_every_error(dsn, conn):
    job_id = make_job(conn, job_type="always_fails", max_attempts=3)
    with WorkerThread(apps.queue, test_settings(dsn)):
        wait_until(lambda: all_in(conn, [job_id], "dead_letter"), timeout=10)
    with Client(dsn) as client:
        info = client.get(job_id)
    assert info.attempts == 3
    assert [e.attempt for e in info.errors] == [1, 2, 3]
    assert all(e.error_type == "ValueError" and "boom on attempt" in e.message for e in info.errors)
    assert "Traceback" in info.errors[0].traceback
    assert info.final_error == {"type": "ValueError", "message": "boom on attempt 3"}
    attempts = [run[1] for run in apps.runs if run[0] == job_id]
    assert attempts == [1, 2, 3]
    dead = conn.execute("SELECT last_error FROM jobqueue.dead_letters WHERE id = %s", (job_id,)).fetchone()
    assert dead == ("boom on attempt 3",)


def test_failed_job_waits_for_its_backoff(dsn, conn):
    job_id = make_job(conn, job_type="retry_after")  # raises Retry(after=0.3) on attempt 1
    with WorkerThread(apps.queue, test_settings(dsn)):
        wait_until(lambda: all_in(conn, [job_id], "completed"), timeout=10)
    errors = conn.execute(
        "SELECT failed_at, error_type, message FROM jobqueue.job_errors WHERE job_id = %s", (job_id,)
    ).fetchall()
    assert [(e[1], e[2]) for e in errors] == [("Retry", "throttled")]
    second_start = job_row(conn, job_id)["started_at"]
    assert (second_start - errors[0][0]).total_seconds() >= 0.28


def test_permanent_error_dead_letters_at_once(dsn, conn):
    job_id = make_job(conn, job_type="permanent", max_attempts=5)
    with WorkerThread(apps.queue, test_settings(dsn)):
        wait_until(lambda: all_in(conn, [job_id], "dead_letter"))
    row = job_row(conn, job_id)
    assert row["attempts"] == 1 and row["finished_at"] is not None


def test_timeout_fails_the_attempt_as_retryable(dsn, conn):
    job_id = make_job(conn, job_type="times_out", max_attempts=2)
    with WorkerThread(apps.queue, test_settings(dsn)):
        wait_until(lambda: all_in(conn, [job_id], "dead_letter"), timeout=10)
    types = [
        r[0]
        for r in conn.execute(
            "SELECT error_type FROM jobqueue.job_errors WHERE job_id = %s ORDER BY attempt", (job_id,)
        ).fetchall()
    ]
    assert types == ["JobTimeout", "JobTimeout"]


def test_result_that_is_not_json_dead_letters(dsn, conn):
    job_id = make_job(conn, job_type="unserialisable")
    with WorkerThread(apps.queue, test_settings(dsn)):
        wait_until(lambda: all_in(conn, [job_id], "dead_letter"))
    assert (
        "not JSON" in conn.execute("SELECT message FROM jobqueue.job_errors WHERE job_id = %s", (job_id,)).fetchone()[0]
    )


def test_nul_characters_in_results_and_errors_do_not_stop_the_acks(dsn, conn):
    """PostgreSQL cannot store NUL: such a result dead-letters, such an error message is stored
    escaped, and the jobs after them are acked as usual (the ack writer once died on them)."""
    bad_result, bad_error, good = (make_job(conn, job_type=t) for t in ("nul_result", "nul_error", "record"))
    with WorkerThread(apps.queue, test_settings(dsn)):
        wait_until(
            lambda: (
                states(conn, [bad_result, bad_error, good])
                == {bad_result: "dead_letter", bad_error: "dead_letter", good: "completed"}
            )
        )
    messages = dict(conn.execute("SELECT job_id, message FROM jobqueue.job_errors").fetchall())
    assert "NUL" in messages[bad_result]
    assert messages[bad_error] == "could not parse b'\\x00\x01'\\x00"  # NUL escaped, the rest kept


def test_a_result_the_database_refuses_dead_letters_its_job_once(dsn, conn, caplog):
    """Should the server refuse one outcome of a batch, the others are written one by one, and the
    refused result becomes a dead letter carrying the server's reason — at once, instead of the job
    coming back after its lease to fail the same way (a 300 MB result ran 4 times before)."""
    from jobqueue.db import gateway as db
    from jobqueue.worker.acks import AckBuffer
    from jobqueue.worker.executor import COMPLETED, Outcome

    ids = [make_job(conn, state="processing", locked_by="w") for _ in range(3)]
    jobs = {job.id: job for job in _claimed_jobs(conn, ids)}

    async def flush() -> set:
        pool = db.async_pool(dsn, min_size=1, max_size=1)
        await pool.open(wait=True)
        accepted: set = set()
        buffer = AckBuffer(pool, "w", on_flushed=lambda batch, ok: accepted.update(ok))
        for n, job_id in enumerate(ids):  # the middle result bypasses the executor's NUL check
            buffer.add(
                Outcome(
                    job=jobs[job_id],
                    kind=COMPLETED,
                    duration_ms=1.0,
                    result_json='{"x": "\\u0000"}' if n == 1 else '{"ok": true}',
                )
            )
        await buffer.flush()
        await pool.close()
        return accepted

    with caplog.at_level("WARNING", logger="jobqueue.worker.acks"):
        accepted = asyncio.run(flush())
    assert accepted == set(ids)
    assert states(conn, ids) == {ids[0]: "completed", ids[1]: "dead_letter", ids[2]: "completed"}
    assert f"job {ids[1]}: the database refused its outcome" in caplog.text
    error = conn.execute("SELECT error_type, message FROM jobqueue.job_errors WHERE job_id = %s", (ids[1],)).fetchone()
    assert error[0] == "ResultRefused" and "unsupported Unicode escape sequence" in error[1]
    assert job_row(conn, ids[1])["dead_reason"] == "permanent_error"


def _claimed_jobs(conn, ids: list) -> list:
    from jobqueue.model.jobs import Job

    rows = conn.execute(
        "SELECT id, queue, job_type, payload, priority, attempts, max_attempts, traceparent, "
        "cancel_requested, created_at FROM jobqueue.jobs WHERE id = ANY(%s)",
        (ids,),
    ).fetchall()
    return [Job(*row) for row in rows]


def test_a_background_task_that_dies_stops_the_worker_instead_of_running_on(dsn, conn, caplog):
    async def broken() -> None:
        raise RuntimeError("heartbeat broke")

    worker = WorkerThread(apps.queue, test_settings(dsn))
    worker.worker.heartbeat.run = broken  # e.g. what the NUL result did to the ack writer
    with caplog.at_level("ERROR", logger="jobqueue.background"):
        worker.start()
        worker._thread.join(15)
        assert not worker._thread.is_alive(), "the worker ran on without its heartbeat"
    assert "background task heartbeat ended unexpectedly: RuntimeError('heartbeat broke')" in caplog.text
    assert conn.execute("SELECT status FROM jobqueue.workers").fetchone() == ("stopped",)


def test_sync_handler_runs_in_a_thread_and_stores_its_result(dsn, conn):
    job_id = make_job(conn, job_type="record_sync")
    with WorkerThread(apps.queue, test_settings(dsn)):
        wait_until(lambda: all_in(conn, [job_id], "completed"))
    with Client(dsn) as client:
        info = client.get(job_id)
    assert info.result["thread"].startswith("jobqueue-handler")
    assert info.duration_ms is not None and info.duration_ms >= 0


def test_a_job_of_a_type_the_worker_has_no_handler_for_is_never_claimed(dsn, conn):
    """Issue 17 §5: it used to be claimed, failed "no handler registered" and dead-lettered; it now
    waits, pending with no attempt used, for a worker whose app has the handler."""
    unknown = [make_job(conn, job_type="nobody_knows_me", max_attempts=1) for _ in range(2)]
    known = make_job(conn, job_type="record")
    with WorkerThread(apps.queue, test_settings(dsn)):
        wait_until(lambda: all_in(conn, [known], "completed"))
        later = make_job(conn, job_type="record")  # another claim, past them again
        conn.execute("NOTIFY jobqueue_jobs, 'default'")
        wait_until(lambda: all_in(conn, [later], "completed"))
    assert conn.execute("SELECT state, attempts FROM jobqueue.jobs WHERE id = ANY(%s)", (unknown,)).fetchall() == [
        ("pending", 0),
        ("pending", 0),
    ]
    assert conn.execute("SELECT count(*) FROM jobqueue.job_errors").fetchone()[0] == 0


def test_task_defaults_are_published_at_worker_start(dsn, conn):
    with WorkerThread(apps.queue, test_settings(dsn)):
        pass
    assert conn.execute(
        "SELECT max_attempts FROM jobqueue.task_defaults WHERE job_type = 'always_fails'"
    ).fetchone() == (3,)
    job_id = conn.execute("SELECT jobqueue.enqueue('always_fails')").fetchone()[0]
    assert job_row(conn, job_id)["max_attempts"] == 3


def test_cancel_in_every_state(dsn, conn):
    pending = make_job(conn, job_type="record", run_at=datetime.now(timezone.utc) + timedelta(hours=1))
    failed = make_job(conn, job_type="record", state="failed")
    completed = make_job(conn, state="completed")
    dead = make_job(conn, state="dead_letter")
    cancelled = make_job(conn, state="cancelled")
    with Client(dsn) as client:
        assert client.cancel(pending) is CancelOutcome.CANCELLED
        assert client.cancel(failed) is CancelOutcome.CANCELLED
        assert client.cancel(completed) is CancelOutcome.COMPLETED
        assert client.cancel(dead) is CancelOutcome.DEAD_LETTER
        assert client.cancel(cancelled) is CancelOutcome.ALREADY_CANCELLED
        assert client.cancel(uuid.uuid4()) is CancelOutcome.NOT_FOUND
        assert client.get(pending).state is JobState.CANCELLED
        assert client.get(completed).state is JobState.COMPLETED  # nothing changed

        with WorkerThread(apps.queue, test_settings(dsn)):
            running = client.enqueue("slow", {"seconds": 30})
            wait_until(lambda: any(run[0] == running for run in apps.runs))
            assert client.cancel(running) is CancelOutcome.CANCEL_REQUESTED
            wait_until(lambda: all_in(conn, [running], "cancelled"), timeout=5)
        info = client.get(running)
    assert info.cancel_requested and info.errors[-1].error_type == "JobCancelled"
    # a cancelled job is never claimed again
    assert [run[0] for run in apps.runs].count(running) == 1


def test_late_ack_after_reclaim_is_refused(dsn, conn):
    """Worker A's lease expired and the job went to worker B: A's completion must not count."""
    from jobqueue.db import gateway as db
    from jobqueue.store import jobs as job_store

    job_id = make_job(conn, job_type="record")
    with psycopg.connect(dsn, autocommit=True) as a:
        claimed = db.run_sync(a, job_store.claim(worker_id="A", queues=["default"], limit=1, lease_seconds=30))
        assert [job.id for job in claimed] == [job_id] and claimed[0].attempt == 1
        later = datetime.now(timezone.utc) + timedelta(seconds=31)
        reclaimed = db.run_sync(a, job_store.reclaim_expired(now=later))
        assert [(r[0], r[1]) for r in reclaimed] == [(job_id, "pending")]
        again = db.run_sync(a, job_store.claim(worker_id="B", queues=["default"], limit=1, lease_seconds=30))
        assert again[0].attempt == 2
        late = db.run_sync(
            a,
            job_store.complete_many(
                worker_id="A", ids=[job_id], attempts=[1], results=['{"from": "A"}'], durations=[1.0]
            ),
        )
        assert late.written == [] and late.busy == set()
        row = job_row(conn, job_id)
        assert row["state"] == "processing" and row["locked_by"] == "B"
        late_failure = db.run_sync(
            a,
            job_store.fail_many(
                worker_id="A",
                ids=[job_id],
                attempts=[1],
                actions=["retry"],
                retry_in=[0.0],
                error_types=["X"],
                messages=["late"],
                tracebacks=[None],
                default_limits=(50_000, 100_000),
            ),
        )
        assert late_failure.written == [] and late_failure.busy == set()
        assert job_row(conn, job_id)["state"] == "processing"
        done = db.run_sync(
            a,
            job_store.complete_many(
                worker_id="B", ids=[job_id], attempts=[2], results=['{"from": "B"}'], durations=[1.0]
            ),
        )
        assert done.written == [job_id]
    errors = conn.execute("SELECT attempt, error_type FROM jobqueue.job_errors WHERE job_id = %s", (job_id,)).fetchall()
    assert errors == [(1, "LeaseExpired")]


def test_a_late_success_completes_its_job_while_no_newer_attempt_has_started(dsn, conn):
    """A's lease ran out and the sweeper put the job back, but nobody has claimed it again: A's
    success, arriving late, completes it (the job does not run a second time)."""
    from jobqueue.db import gateway as db
    from jobqueue.store import jobs as job_store

    job_id = make_job(conn, job_type="record")
    with psycopg.connect(dsn, autocommit=True) as a:
        db.run_sync(a, job_store.claim(worker_id="A", queues=["default"], limit=1, lease_seconds=30))
        db.run_sync(a, job_store.reclaim_expired(now=datetime.now(timezone.utc) + timedelta(seconds=31)))
        assert job_row(conn, job_id)["state"] == "pending"
        late = db.run_sync(
            a,
            job_store.complete_many(
                worker_id="A", ids=[job_id], attempts=[1], results=['{"computed_on_attempt": 1}'], durations=[1.0]
            ),
        )
        assert late.written == [job_id]
    with WorkerThread(apps.queue, test_settings(dsn)):
        time.sleep(0.3)
    assert [run for run in apps.runs if run[0] == job_id] == []  # never run again
    with Client(dsn) as client:
        info = client.get(job_id)
    assert info.state is JobState.COMPLETED and info.result == {"computed_on_attempt": 1} and info.attempts == 1


def test_a_late_success_after_a_dead_letter_or_a_newer_attempt_writes_nothing(dsn, conn):
    """Results belong to the attempt that finished the job: a late success for a job another
    worker now holds, or that the sweeper dead-lettered on its last attempt, changes nothing and
    stores no result; the dead letter keeps its own final error."""
    from jobqueue.db import gateway as db
    from jobqueue.store import jobs as job_store

    held_again = make_job(conn, job_type="record")
    last = make_job(conn, job_type="record", max_attempts=1)
    later = datetime.now(timezone.utc) + timedelta(seconds=31)
    with psycopg.connect(dsn, autocommit=True) as a:
        db.run_sync(a, job_store.claim(worker_id="A", queues=["default"], limit=2, lease_seconds=30))
        db.run_sync(a, job_store.reclaim_expired(now=later))
        db.run_sync(a, job_store.claim(worker_id="B", queues=["default"], limit=2, lease_seconds=30, now=later))
        late = db.run_sync(
            a,
            job_store.complete_many(
                worker_id="A",
                ids=[held_again, last],
                attempts=[1, 1],
                results=['{"from": "A"}', '{"from": "A"}'],
                durations=[1.0, 1.0],
            ),
        )
        assert late.written == [] and late.busy == set()
    assert job_row(conn, held_again)["state"] == "processing" and job_row(conn, held_again)["locked_by"] == "B"
    assert job_row(conn, last)["state"] == "dead_letter"
    results = dict(conn.execute("SELECT job_id, error FROM jobqueue.job_results").fetchall())
    assert held_again not in results
    assert results[last]["type"] == "LeaseExpired"


def test_sweeper_returns_expired_leases_and_dead_letters_the_last_attempt(dsn, conn):
    past = datetime.now(timezone.utc) - timedelta(seconds=1)
    retry = make_job(
        conn, job_type="record", state="processing", attempts=1, max_attempts=3, locked_until=past, locked_by="gone"
    )
    last = make_job(
        conn, job_type="record", state="processing", attempts=3, max_attempts=3, locked_until=past, locked_by="gone"
    )
    with WorkerThread(apps.queue, test_settings(dsn, sweep_interval=0.2)):
        wait_until(lambda: states(conn, [retry, last]) == {retry: "completed", last: "dead_letter"}, timeout=10)
    assert job_row(conn, retry)["attempts"] == 2
    assert conn.execute("SELECT error_type FROM jobqueue.job_errors WHERE job_id = %s", (last,)).fetchone() == (
        "LeaseExpired",
    )


def test_heartbeat_extends_leases_of_long_jobs(dsn, conn):
    job_id = make_job(conn, job_type="slow", payload={"seconds": 2.5})
    with WorkerThread(apps.queue, test_settings(dsn, lease_seconds=1.0, sweep_interval=0.2)):
        wait_until(lambda: all_in(conn, [job_id], "completed"), timeout=10)
    row = job_row(conn, job_id)
    assert row["attempts"] == 1  # never reclaimed although the job outlived its first lease
    assert conn.execute("SELECT count(*) FROM jobqueue.job_errors").fetchone()[0] == 0


def test_weighted_priorities_do_not_starve_low(dsn, conn):
    with Client(dsn) as client:
        client.enqueue_many(
            [{"job_type": "record", "priority": "critical"} for _ in range(300)]
            + [{"job_type": "record", "priority": "low"} for _ in range(60)]
        )
    settings = test_settings(dsn, concurrency=4, priority_mode="weighted", priority_weights=(4, 2, 2, 2))
    with WorkerThread(apps.queue, settings):
        wait_until(lambda: len(apps.runs) >= 150, timeout=20)
        worker_runs = list(apps.runs[:150])
    low_ids = {r[0] for r in conn.execute("SELECT id FROM jobqueue.jobs WHERE priority = 3").fetchall()}
    low_share = sum(1 for run in worker_runs if run[0] in low_ids)
    # low owns 2/10 of the slots by weight (the empty levels' slots go to critical): about 30 of
    # 150, standard deviation ~5; strict mode gives 0. 10 keeps the test far from chance failures.
    assert low_share >= 10, low_share


def test_strict_priorities_run_critical_first(dsn, conn):
    with Client(dsn) as client:
        client.enqueue_many(
            [{"job_type": "record", "priority": "critical"} for _ in range(100)]
            + [{"job_type": "record", "priority": "low"} for _ in range(20)]
        )
    with WorkerThread(apps.queue, test_settings(dsn, concurrency=4)):
        wait_until(lambda: len(apps.runs) >= 100, timeout=20)
        first = list(apps.runs[:100])
    low_ids = {r[0] for r in conn.execute("SELECT id FROM jobqueue.jobs WHERE priority = 3").fetchall()}
    assert not any(run[0] in low_ids for run in first)


def test_graceful_stop_finishes_short_jobs_and_releases_long_ones(dsn, conn):
    short = make_job(conn, job_type="slow", payload={"seconds": 0.3})
    long = make_job(conn, job_type="slow", payload={"seconds": 30})
    worker = WorkerThread(apps.queue, test_settings(dsn, concurrency=2, shutdown_grace=1.0)).start()
    wait_until(lambda: len(apps.runs) == 2)
    started = time.monotonic()
    worker.stop()
    assert time.monotonic() - started < 5
    assert states(conn, [short, long]) == {short: "completed", long: "pending"}
    released = job_row(conn, long)
    assert released["attempts"] == 0 and released["locked_by"] is None
    status = conn.execute("SELECT status FROM jobqueue.workers WHERE id = %s", (worker.worker.worker_id,)).fetchone()
    assert status == ("stopped",)


@pytest.mark.slow
def test_jobs_a_stopping_worker_cannot_release_are_reclaimed_after_their_lease(dsn, conn, caplog):
    """The database is gone when the worker stops: releasing its unfinished job fails, the worker
    still stops, and the job comes back through the sweeper once its lease runs out."""
    long = make_job(conn, job_type="slow", payload={"seconds": 30})
    worker = WorkerThread(apps.queue, test_settings(dsn, lease_seconds=2.0, shutdown_grace=0.3, leader_ttl=2.0)).start()
    wait_until(lambda: len(apps.runs) == 1)
    database = psycopg.sql.Identifier(conn.info.dbname)
    admin = psycopg.connect(make_conninfo(dsn, dbname="postgres"), autocommit=True)  # it cannot lock itself out
    admin.execute(psycopg.sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS false").format(database))
    try:
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (conn.info.dbname,))
        stopping = time.monotonic()
        with caplog.at_level("WARNING", logger="jobqueue"):
            worker.stop(timeout=60)
        stopped_in = time.monotonic() - stopping
    finally:
        admin.execute(psycopg.sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS true").format(database))
        admin.close()
    assert "could not release jobs" in caplog.text
    assert stopped_in < 15  # each shutdown step waits db.SHUTDOWN_WAIT, not the pool's 10 s (was ~20 s)
    with psycopg.connect(dsn, autocommit=True) as fresh:  # the fixture's connection was terminated too
        assert job_row(fresh, long)["state"] == "processing"  # still leased to the worker that left
        with WorkerThread(apps.queue, test_settings(dsn, queues=("elsewhere",))):  # its sweeper, not its claims
            wait_until(lambda: job_row(fresh, long)["state"] != "processing", timeout=15, message="lease reclaimed")
        reclaimed = job_row(fresh, long)
    assert reclaimed["state"] in ("pending", "failed") and reclaimed["locked_by"] is None


def test_worker_recovers_when_its_connections_are_dropped(dsn, conn):
    """Every connection of the worker is terminated: it reconnects (pool and LISTEN) and goes on."""
    from tests.support.waiting import wait_until as wait

    job_id = make_job(conn, job_type="record")
    with WorkerThread(apps.queue, test_settings(dsn)) as worker:
        wait(lambda: all_in(conn, [job_id], "completed"))
        # drop every connection the worker holds; it must reconnect and keep working
        conn.execute("""SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                        WHERE datname = current_database() AND pid <> pg_backend_pid()""")
        second = conn.execute("SELECT jobqueue.enqueue('record')").fetchone()[0]
        wait(lambda: all_in(conn, [second], "completed"), timeout=15)
        assert worker.worker.status.processed == 2


def test_poll_only_mode_works_without_listen(dsn, conn):
    """Behind PgBouncer in transaction mode NOTIFY is lost: JOBQUEUE_LISTEN=0 polls instead."""
    settings = test_settings(dsn, listen=False, poll_interval=0.2)
    with WorkerThread(apps.queue, settings) as worker:
        listeners = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query ILIKE 'LISTEN%%'"
        ).fetchone()[0]
        job_id = conn.execute("SELECT jobqueue.enqueue('record')").fetchone()[0]
        wait_until(lambda: all_in(conn, [job_id], "completed"), timeout=5)
        assert worker.process.notifier.connected.is_set() is False
    assert listeners == 0


def test_listen_connection_comes_back_after_it_is_dropped(dsn, conn):
    """The LISTEN connection is terminated: the notifier reconnects, and NOTIFY wakes the worker
    again (the 60 s poll is far beyond the wait here)."""
    with WorkerThread(apps.queue, test_settings(dsn, poll_interval=60.0)) as worker:
        notifier = worker.process.notifier
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND query ILIKE 'LISTEN%%'"
        )
        wait_until(lambda: not notifier.connected.is_set(), timeout=5, message="the drop to be noticed")
        wait_until(notifier.connected.is_set, timeout=10, message="the notifier to reconnect")
        time.sleep(0.3)  # the worker is asleep again (its wake-up on reconnect found nothing)
        job_id = conn.execute("SELECT jobqueue.enqueue('record')").fetchone()[0]
        wait_until(lambda: all_in(conn, [job_id], "completed"), timeout=5)


def test_ack_that_meets_a_dead_connection_is_retried_and_lands_once(dsn):
    """The handler returns right after every worker connection was killed: the ack flush fails,
    keeps its outcome, reconnects and writes it — the job completes once, on its first attempt."""
    with psycopg.connect(dsn, autocommit=True, application_name="test-observer") as observer:
        job_id = observer.execute(
            "SELECT jobqueue.enqueue('cut_connections', %s::jsonb)", (json.dumps({"dsn": dsn}),)
        ).fetchone()[0]
        with WorkerThread(apps.queue, test_settings(dsn, concurrency=1)) as worker:
            wait_until(lambda: all_in(observer, [job_id], "completed"), timeout=15)
            assert worker.worker.status.processed == 1
        row = job_row(observer, job_id)
        assert row["attempts"] == 1
        assert observer.execute("SELECT result FROM jobqueue.job_results WHERE job_id = %s", (job_id,)).fetchone() == (
            {"cut": True},
        )
    assert [run[0] for run in apps.runs] == [job_id]


def test_the_same_worker_holding_two_attempts_of_one_job_keeps_them_apart(dsn, conn):
    """A reclaimed the job after its lease and claimed it again: its heartbeat extends only the
    attempt it holds, and the stale attempt's outcome cannot finish the job."""
    from jobqueue.db import gateway as db
    from jobqueue.store import jobs as job_store

    job_id = make_job(conn, job_type="record")
    with psycopg.connect(dsn, autocommit=True) as a:
        [first] = db.run_sync(a, job_store.claim(worker_id="A", queues=["default"], limit=1, lease_seconds=30))
        later = datetime.now(timezone.utc) + timedelta(seconds=31)
        db.run_sync(a, job_store.reclaim_expired(now=later))
        [second] = db.run_sync(
            a, job_store.claim(worker_id="A", queues=["default"], limit=1, lease_seconds=30, now=later)
        )
        assert (first.id, first.attempt, second.attempt) == (job_id, 1, 2)
        held = db.run_sync(
            a,
            job_store.extend_leases(
                worker_id="A", attempts=[first.key, second.key], lease_seconds=30, deadline_grace=5
            ),
        )
        assert held.written == {second.key: False} and held.busy == set()
        stale = db.run_sync(
            a,
            job_store.fail_many(
                worker_id="A",
                ids=[job_id],
                attempts=[1],
                actions=["retry"],
                retry_in=[0.0],
                error_types=["X"],
                messages=["stale"],
                tracebacks=[None],
                default_limits=(50_000, 100_000),
            ),
        )
        assert stale.written == []
        assert db.run_sync(
            a,
            job_store.complete_many(
                worker_id="A", ids=[job_id], attempts=[2], results=['{"attempt": 2}'], durations=[1.0]
            ),
        ).written == [job_id]
    assert conn.execute("SELECT result FROM jobqueue.job_results WHERE job_id = %s", (job_id,)).fetchone() == (
        {"attempt": 2},
    )


def test_a_busy_poll_only_worker_stops_claiming_a_paused_queue_within_a_second(dsn, conn):
    """With JOBQUEUE_LISTEN=0 (behind PgBouncer) a worker re-read the paused queues only before an
    idle sleep: one with a backlog never idles, and kept claiming a paused queue until its backlog
    was gone (202 jobs taken 1.5–4.5 s after a pause, in the issue)."""
    conn.execute(
        "INSERT INTO jobqueue.jobs (job_type, payload) SELECT 'slow', '{\"seconds\": 0.05}' "
        "FROM generate_series(1, 3000)"
    )
    with WorkerThread(apps.queue, test_settings(dsn, listen=False, poll_interval=30.0, concurrency=10)):
        wait_until(
            lambda: conn.execute("SELECT count(*) FROM jobqueue.jobs WHERE state = 'completed'").fetchone()[0] >= 50,
            timeout=20,
        )
        with Client(dsn) as client:
            client.pause_queue("default")
        paused_at = conn.execute("SELECT now()").fetchone()[0]
        time.sleep(2.5)
        late, waiting = conn.execute(
            "SELECT count(*) FILTER (WHERE started_at > %s + interval '1.2 seconds'), "
            "       count(*) FILTER (WHERE state = 'pending') FROM jobqueue.jobs",
            (paused_at,),
        ).fetchone()
    assert waiting > 0  # the backlog was not gone: the worker had more to claim
    assert late == 0, f"{late} jobs started more than 1.2 s after the pause"


def test_a_pause_whose_notification_came_to_nothing_is_seen_at_the_next_periodic_read(dsn, conn, monkeypatch):
    """In LISTEN mode the paused set was re-read only on a jobqueue_control NOTIFY: a read that
    failed then (the database busy for a moment) kept the old set until the next change."""
    from jobqueue.model.errors import DatabaseUnavailable
    from jobqueue.store import queues as queue_store

    read = queue_store.paused_among
    failing = {"left": 0}

    def paused_among(queues):
        if failing["left"]:
            failing["left"] -= 1
            raise DatabaseUnavailable("database unavailable: injected")
        return read(queues)

    monkeypatch.setattr(queue_store, "paused_among", paused_among)
    with WorkerThread(apps.queue, test_settings(dsn, poll_interval=60.0, lease_seconds=1.5)) as worker:
        failing["left"] = 1  # the read the pause's NOTIFY starts fails
        with Client(dsn) as client:
            client.pause_queue("default")
        wait_until(lambda: failing["left"] == 0, timeout=5, message="the notification's read")
        wait_until(lambda: worker.worker.paused.names == {"default"}, timeout=3, message="the periodic read")
        job_id = conn.execute("SELECT jobqueue.enqueue('record')").fetchone()[0]
        time.sleep(0.5)
        assert job_row(conn, job_id)["state"] == "pending"
