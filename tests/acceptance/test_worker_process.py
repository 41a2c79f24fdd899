"""`jobqueue-worker` as a real process: SIGKILL mid-job, SIGTERM, several processes, Postgres restart."""

from __future__ import annotations

import signal
import time

import psycopg
import pytest

from jobqueue import Client
from tests.support.factories import job_row, make_job
from tests.support.waiting import wait_until
from tests.support.workers import spawn_worker, terminate

pytestmark = pytest.mark.slow


def state_of(conn, job_id) -> str:
    return conn.execute("SELECT state FROM jobqueue.jobs WHERE id = %s", (job_id,)).fetchone()[0]


def test_job_of_a_killed_worker_completes_on_another_after_its_lease(dsn, conn):
    job_id = make_job(conn, job_type="slow", payload={"seconds": 1.0})
    victim = spawn_worker(dsn, "tests.support.apps:queue", "--lease", "2", "--no-maintenance")
    try:
        wait_until(lambda: state_of(conn, job_id) == "processing", timeout=20)
        holder = job_row(conn, job_id)["locked_by"]
        victim.send_signal(signal.SIGKILL)
        victim.wait(10)
    finally:
        terminate(victim, signal.SIGKILL)
    assert state_of(conn, job_id) == "processing"  # nobody completed it: the holder is dead
    rescuer = spawn_worker(dsn, "tests.support.apps:queue", "--lease", "2", env={"JOBQUEUE_SWEEP_INTERVAL": "0.3"})
    try:
        wait_until(lambda: state_of(conn, job_id) == "completed", timeout=30)
    finally:
        output = terminate(rescuer)
    row = job_row(conn, job_id)
    assert row["attempts"] == 2
    errors = conn.execute(
        "SELECT attempt, error_type, worker_id FROM jobqueue.job_errors WHERE job_id = %s", (job_id,)
    ).fetchall()
    assert errors == [(1, "LeaseExpired", holder)]
    assert "lease of" in output  # the sweeper said what it did


def test_sigterm_finishes_in_flight_jobs_and_exits_cleanly(dsn, conn):
    worker = spawn_worker(dsn, "tests.support.apps:queue", "--concurrency", "4", "--shutdown-grace", "10")
    try:
        with Client(dsn) as client:
            ids = client.enqueue_many([{"job_type": "slow", "payload": {"seconds": 1.0}} for _ in range(4)])
        wait_until(lambda: all(state_of(conn, i) == "processing" for i in ids), timeout=20)
        worker.send_signal(signal.SIGTERM)
        # no new claims after SIGTERM
        late = conn.execute("SELECT jobqueue.enqueue('record')").fetchone()[0]
        assert worker.wait(15) == 0
    finally:
        terminate(worker, signal.SIGKILL)
    assert all(state_of(conn, i) == "completed" for i in ids)
    assert state_of(conn, late) == "pending"


def test_two_processes_share_the_work_exactly_once(dsn, conn):
    worker = spawn_worker(dsn, "tests.support.apps:queue", "--processes", "2", "--concurrency", "8")
    try:
        # both processes up before the work arrives, or the first one alone may drain it all
        wait_until(
            lambda: conn.execute("SELECT count(*) FROM jobqueue.workers WHERE status = 'running'").fetchone()[0] == 2,
            timeout=30,
        )
        with Client(dsn) as client:
            ids = client.enqueue_many([{"job_type": "slow", "payload": {"seconds": 0.01}} for _ in range(400)])
        wait_until(
            lambda: (
                conn.execute("SELECT count(*) FROM jobqueue.jobs WHERE state = 'completed'").fetchone()[0] == len(ids)
            ),
            timeout=60,
        )
    finally:
        assert "Traceback" not in terminate(worker)
    workers = conn.execute("SELECT count(DISTINCT worker_id) FROM jobqueue.job_results").fetchone()[0]
    assert workers == 2
    assert conn.execute("SELECT max(attempts) FROM jobqueue.jobs").fetchone()[0] == 1
    assert conn.execute("SELECT count(*) FROM jobqueue.job_results").fetchone()[0] == len(ids)


def test_worker_survives_a_postgres_restart(own_cluster):
    """Jobs accepted before and after a restart all complete; the worker reconnects by itself."""
    dsn = own_cluster
    from tests.support.workers import spawn_worker as spawn

    with psycopg.connect(dsn, autocommit=True) as conn:
        before = conn.execute("SELECT jobqueue.enqueue('record')").fetchone()[0]
    worker = spawn(dsn, "tests.support.apps:queue", "--poll-interval", "0.5")
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            wait_until(lambda: state_of(conn, before) == "completed", timeout=20)
        own_cluster.cluster.stop(mode="fast")
        time.sleep(1.0)
        own_cluster.cluster.start()
        with psycopg.connect(dsn, autocommit=True) as conn:
            after = conn.execute("SELECT jobqueue.enqueue('record')").fetchone()[0]
            wait_until(lambda: state_of(conn, after) == "completed", timeout=30)
    finally:
        output = terminate(worker)
    assert "Traceback" not in output, output


def test_supervisor_restarts_a_crashed_worker_process(dsn, conn):
    """--processes 2: a child killed with SIGKILL is replaced, and work goes on."""
    import os

    supervisor = spawn_worker(dsn, "tests.support.apps:queue", "--processes", "2", "--concurrency", "2")
    try:
        wait_until(
            lambda: conn.execute("SELECT count(*) FROM jobqueue.workers WHERE status = 'running'").fetchone()[0] == 2,
            timeout=30,
        )
        pids = [r[0] for r in conn.execute("SELECT pid FROM jobqueue.workers").fetchall()]
        os.kill(pids[0], signal.SIGKILL)
        wait_until(
            lambda: (
                conn.execute("SELECT count(*) FROM jobqueue.workers WHERE pid <> ALL(%s)", (pids,)).fetchone()[0] == 1
            ),
            timeout=30,
            message="a replacement child",
        )
        with Client(dsn) as client:
            ids = client.enqueue_many([{"job_type": "record"} for _ in range(20)])
        wait_until(
            lambda: (
                conn.execute(
                    "SELECT count(*) FROM jobqueue.jobs WHERE id = ANY(%s) AND state = 'completed'", (ids,)
                ).fetchone()[0]
                == 20
            ),
            timeout=30,
        )
    finally:
        output = terminate(supervisor)
    assert "restarting it" in output


@pytest.mark.slow
def test_supervisor_gives_up_on_children_that_can_never_start(dsn):
    """A crash loop (here: the app fails to import in every child) ends with exit status 1, as
    one process failing the same way would, instead of restarting forever."""
    supervisor = spawn_worker(dsn, "tests.support.crashing_app:queue", "--processes", "2")
    try:
        status = supervisor.wait(timeout=60)
    finally:
        output = terminate(supervisor)
    assert status == 1
    assert output.count("restarting it") == 5 and "giving up" in output
