"""Cancel means cancelled: once a cancel is requested, no new attempt of that job ever starts —
whatever ends the running attempt (a retryable failure, an expired lease, a shutdown release) —
and a job claimed just as its cancel committed is not run."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta, timezone

import psycopg
import pytest

from jobqueue import Client
from jobqueue.db import gateway as db
from jobqueue.model.jobs import CancelOutcome
from jobqueue.store import jobs as job_store
from tests.support import apps
from tests.support.factories import job_row, make_job
from tests.support.waiting import wait_until
from tests.support.workers import WorkerThread, test_settings


@pytest.fixture(autouse=True)
def _clear_runs():
    apps.runs.clear()
    yield
    apps.runs.clear()


def runs_of(job_id) -> list[int]:
    return [attempt for run_id, attempt, *_ in apps.runs if run_id == job_id]


def error_types(conn, job_id) -> list[str]:
    return [
        r[0]
        for r in conn.execute(
            "SELECT error_type FROM jobqueue.job_errors WHERE job_id = %s ORDER BY attempt", (job_id,)
        ).fetchall()
    ]


def test_a_retryable_failure_after_a_cancel_request_ends_the_job_cancelled(dsn, conn):
    """The handler ignores the request and fails: before, the failure scheduled a retry that ran
    again (and could end in the dead-letter queue)."""
    with Client(dsn) as client, WorkerThread(apps.queue, test_settings(dsn)):
        job_id = client.enqueue("ignores_cancel_then_fails")
        wait_until(lambda: runs_of(job_id) == [1])
        assert client.cancel(job_id) is CancelOutcome.CANCEL_REQUESTED
        wait_until(lambda: job_row(conn, job_id)["state"] == "cancelled", timeout=10)
        time.sleep(0.3)  # the fast backoff (50 ms) would have run a retry by now
    row = job_row(conn, job_id)
    assert runs_of(job_id) == [1] and row["attempts"] == 1 and row["finished_at"] is not None
    assert error_types(conn, job_id) == ["ValueError"]  # the attempt's own failure is kept


def test_an_expired_lease_of_a_cancel_requested_job_ends_it_cancelled(dsn, conn):
    job_id = make_job(
        conn,
        job_type="record",
        state="processing",
        attempts=1,
        max_attempts=3,
        locked_by="gone",
        locked_until=datetime.now(timezone.utc) - timedelta(seconds=1),
    )
    assert conn.execute("SELECT jobqueue.cancel(%s)", (job_id,)).fetchone() == ("cancel_requested",)
    rows = db.run_sync(conn, job_store.reclaim_expired())
    assert [(r[0], r[1]) for r in rows] == [(job_id, "cancelled")]
    row = job_row(conn, job_id)
    assert row["state"] == "cancelled" and row["locked_by"] is None and row["finished_at"] is not None
    assert error_types(conn, job_id) == ["LeaseExpired"]
    with WorkerThread(apps.queue, test_settings(dsn)):
        time.sleep(0.5)
    assert runs_of(job_id) == []  # never claimed again


def test_a_shutdown_release_of_a_cancel_requested_job_ends_it_cancelled(dsn, conn):
    worker = WorkerThread(apps.queue, test_settings(dsn, shutdown_grace=0.3)).start()
    job_id = conn.execute("SELECT jobqueue.enqueue('ignores_cancel', '{\"seconds\": 30}')").fetchone()[0]
    wait_until(lambda: runs_of(job_id) == [1])
    assert conn.execute("SELECT jobqueue.cancel(%s)", (job_id,)).fetchone() == ("cancel_requested",)
    worker.stop()
    row = job_row(conn, job_id)
    assert row["state"] == "cancelled" and row["locked_by"] is None
    with WorkerThread(apps.queue, test_settings(dsn)):
        time.sleep(0.5)
    assert runs_of(job_id) == [1]


def test_cancel_over_sql_of_a_running_job_is_honoured_when_its_attempt_fails(dsn, conn):
    with WorkerThread(apps.queue, test_settings(dsn)):
        job_id = conn.execute("SELECT jobqueue.enqueue('ignores_cancel_then_fails')").fetchone()[0]
        wait_until(lambda: runs_of(job_id) == [1])
        with psycopg.connect(dsn) as service:  # another service's own transaction
            assert service.execute("SELECT jobqueue.cancel(%s)", (job_id,)).fetchone() == ("cancel_requested",)
        wait_until(lambda: job_row(conn, job_id)["state"] == "cancelled", timeout=10)
    assert runs_of(job_id) == [1]


def test_a_job_claimed_with_its_cancel_requested_is_not_run(dsn, conn):
    """Whatever path left a cancel-requested job waiting (here: typed in psql), the worker that
    claims it ends it cancelled without running its handler."""
    job_id = make_job(conn, job_type="record")
    conn.execute("UPDATE jobqueue.jobs SET cancel_requested = true WHERE id = %s", (job_id,))
    with WorkerThread(apps.queue, test_settings(dsn)):
        wait_until(lambda: job_row(conn, job_id)["state"] == "cancelled")
    assert runs_of(job_id) == []
    assert error_types(conn, job_id) == ["JobCancelled"]


def test_cancels_racing_claims_never_start_a_second_attempt(dsn, conn):
    """Cancel every job while two workers drain them: each job is either cancelled before it
    started (never run) or cancelled/completed after running once — never retried, never dead."""
    with Client(dsn) as client:
        ids = client.enqueue_many([{"job_type": "ignores_cancel_then_fails"} for _ in range(60)])
    outcomes: dict = {}

    def cancel_all() -> None:
        with psycopg.connect(dsn, autocommit=True) as canceller:
            for job_id in ids:
                outcomes[job_id] = canceller.execute("SELECT jobqueue.cancel(%s)", (job_id,)).fetchone()[0]
                time.sleep(0.002)

    workers = [WorkerThread(apps.queue, test_settings(dsn, concurrency=8)).start() for _ in range(2)]
    try:
        canceller = threading.Thread(target=cancel_all)
        canceller.start()
        canceller.join(30)
        wait_until(
            lambda: (
                conn.execute("SELECT count(*) FROM jobqueue.jobs WHERE state = 'cancelled'").fetchone()[0] == len(ids)
            ),
            timeout=20,
            message="every job cancelled",
        )
    finally:
        for worker in workers:
            worker.stop()
    assert {outcomes[job_id] for job_id in ids} <= {"cancelled", "cancel_requested"}
    for job_id in ids:
        assert len(runs_of(job_id)) == (1 if outcomes[job_id] == "cancel_requested" else 0), job_id
    assert conn.execute("SELECT max(attempts) FROM jobqueue.jobs").fetchone()[0] <= 1


def test_a_cancelled_error_raised_by_the_handler_fails_that_attempt(dsn, conn):
    """Before, the worker took any CancelledError for its own shutdown: the job sat in processing
    until its lease ran out. It is the attempt's failure, retried like any other."""
    with WorkerThread(apps.queue, test_settings(dsn, lease_seconds=30.0)):
        job_id = conn.execute("SELECT jobqueue.enqueue('raises_cancelled')").fetchone()[0]
        wait_until(lambda: job_row(conn, job_id)["state"] == "completed", timeout=5)
    assert runs_of(job_id) == [1, 2]
    assert error_types(conn, job_id) == ["HandlerCancelled"]
    message = conn.execute("SELECT message FROM jobqueue.job_errors WHERE job_id = %s", (job_id,)).fetchone()[0]
    assert "an inner operation was cancelled" in message


def test_a_handler_that_finishes_successfully_after_the_request_completes(dsn, conn):
    """Cancelling a running job is cooperative: a handler that completes anyway completes."""
    with Client(dsn) as client, WorkerThread(apps.queue, test_settings(dsn)):
        job_id = client.enqueue("ignores_cancel", {"seconds": 0.5})
        wait_until(lambda: runs_of(job_id) == [1])
        assert client.cancel(job_id) is CancelOutcome.CANCEL_REQUESTED
        wait_until(lambda: job_row(conn, job_id)["state"] == "completed", timeout=5)
    assert job_row(conn, job_id)["cancel_requested"] is True


def test_the_cancelled_error_of_a_stopping_worker_still_releases_the_job(dsn, conn):
    """The worker's own cancellation at shutdown is not mistaken for the handler's."""
    worker = WorkerThread(apps.queue, test_settings(dsn, shutdown_grace=0.2)).start()
    job_id = conn.execute("SELECT jobqueue.enqueue('ignores_cancel', '{\"seconds\": 30}')").fetchone()[0]
    wait_until(lambda: runs_of(job_id) == [1])
    worker.stop()
    row = job_row(conn, job_id)
    assert row["state"] == "pending" and row["attempts"] == 0
    assert error_types(conn, job_id) == []
