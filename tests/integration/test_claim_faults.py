"""What the claim loop survives: a server error that is not an outage, a claim whose reply was
lost after it committed, acks that cannot be written; and recovery that does not wait for an
election (every maintenance process sweeps)."""

from __future__ import annotations

import asyncio
import time
from datetime import datetime, timedelta, timezone

import psycopg
import pytest

from jobqueue.db import gateway as db
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


def fail_next_claims(conn, worker_id: str, times: int) -> None:
    """The next ``times`` claims by ``worker_id`` fail on the server with an ordinary error (a
    trigger raising P0001) — not an outage. A sequence counts them: it is not rolled back with
    the failed statement."""
    conn.execute("CREATE SEQUENCE test_claim_failures")
    conn.execute(f"""
        CREATE FUNCTION test_fail_claim() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF nextval('test_claim_failures') <= {int(times)} THEN
                RAISE EXCEPTION 'injected claim failure';
            END IF;
            RETURN NEW;
        END $$""")
    conn.execute(
        """CREATE TRIGGER test_fail_claim BEFORE UPDATE ON jobqueue.jobs FOR EACH ROW
                    WHEN (NEW.state = 'processing' AND OLD.state <> 'processing' AND NEW.locked_by = %s)
                    EXECUTE FUNCTION test_fail_claim()""".replace("%s", psycopg.sql.quote(worker_id))
    )


def test_a_claim_the_server_refuses_is_logged_and_retried(dsn, conn, caplog):
    """Before, any claim error that was not DatabaseUnavailable ended the claim loop (and with
    it the worker process)."""
    worker = WorkerThread(apps.queue, test_settings(dsn))
    fail_next_claims(conn, worker.worker.worker_id, times=3)
    job_id = make_job(conn, job_type="record")
    with caplog.at_level("ERROR", logger="jobqueue.worker"), worker:
        wait_until(lambda: job_row(conn, job_id)["state"] == "completed", timeout=15)
    assert "claim failed" in caplog.text and "injected claim failure" in caplog.text
    assert job_row(conn, job_id)["attempts"] == 1


def test_attempts_claimed_by_a_statement_whose_reply_was_lost_are_released_uncounted(dsn, conn):
    """A claim that committed but whose reply never arrived (PostgreSQL restarted between the two)
    leaves rows held by the worker that it knows nothing of. They used to wait out their lease and
    come back with a LeaseExpired error and an attempt burned: with max_attempts=1, dead-lettered
    without ever running. Here the lost claim is played by a claim made under the worker's id,
    and the worker's own next claim fails, so it cannot know whether it got anything."""
    worker = WorkerThread(apps.queue, test_settings(dsn, lease_seconds=60.0))
    lost = make_job(conn, job_type="record", max_attempts=1)
    db.run_sync(conn, job_store.claim(worker_id=worker.worker.worker_id, queues=["default"], limit=1, lease_seconds=60))
    assert job_row(conn, lost)["attempts"] == 1
    fail_next_claims(conn, worker.worker.worker_id, times=1)
    fresh = make_job(conn, job_type="record", max_attempts=1)
    with worker:
        wait_until(lambda: {job_row(conn, j)["state"] for j in (lost, fresh)} == {"completed"}, timeout=15)
    assert job_row(conn, lost)["attempts"] == 1  # released uncounted, then run once
    assert conn.execute("SELECT count(*) FROM jobqueue.job_errors").fetchone() == (0,)
    assert sorted(run[0] for run in apps.runs) == sorted([lost, fresh])


def test_the_worker_stops_claiming_while_too_many_outcomes_wait_for_their_acks(dsn, conn):
    """Acks cannot be written (a lock holds job_results): the worker keeps at most its bound of
    finished-but-unwritten jobs instead of draining the whole queue into memory."""
    ids = [make_job(conn, job_type="record") for _ in range(200)]
    settings = test_settings(dsn, concurrency=5, max_unacked=20, ack_batch_size=10)
    with WorkerThread(apps.queue, settings) as worker:
        with psycopg.connect(dsn) as blocker:
            blocker.execute("LOCK TABLE jobqueue.job_results IN EXCLUSIVE MODE")
            time.sleep(1.5)
            assert 20 <= worker.worker.acks.backlog <= 20 + 5
            taken = conn.execute("SELECT count(*) FROM jobqueue.jobs WHERE state <> 'pending'").fetchone()[0]
            assert taken <= 20 + 5 + 10  # the bound, the slots, one batch in flight
            assert len(apps.runs) <= 20 + 5 + 10
            blocker.rollback()
        wait_until(
            lambda: (
                conn.execute("SELECT count(*) FROM jobqueue.jobs WHERE state = 'completed'").fetchone()[0] == len(ids)
            ),
            timeout=20,
        )


def test_a_worker_that_is_not_the_leader_still_returns_expired_leases(dsn, conn):
    """The sweeper runs in every maintenance process: a crashed leader's jobs do not wait for a
    new leader to be elected (recovery is lease + sweep interval)."""
    conn.execute(
        "INSERT INTO jobqueue.leaders (name, leader_id, expires_at) "
        "VALUES ('maintenance', 'someone-else', now() + interval '1 hour')"
    )
    expired = make_job(
        conn,
        job_type="record",
        state="processing",
        attempts=1,
        locked_by="crashed",
        locked_until=datetime.now(timezone.utc) - timedelta(seconds=1),
    )
    with WorkerThread(apps.queue, test_settings(dsn, sweep_interval=0.2)) as worker:
        wait_until(lambda: job_row(conn, expired)["state"] == "completed", timeout=10)
        assert not worker.process.maintenance.elector.is_leader
    assert conn.execute("SELECT error_type FROM jobqueue.job_errors WHERE job_id = %s", (expired,)).fetchone() == (
        "LeaseExpired",
    )


def test_a_claim_that_commits_after_the_reconcile_is_released_uncounted_too(dsn, conn):
    """Through PgBouncer a claim whose reply was lost can commit later, after the one reconcile
    that followed it found nothing: its rows then waited out their lease, and the sweeper took
    them with an attempt counted (max_attempts=1: a dead letter that never ran). The worker now
    reconciles again every heartbeat interval for as long as the lost statement could still be
    running (the statement timeout). The late commit is played by a claim made under the worker's
    id, of a queue it does not serve (so that it is not claimed again once released)."""
    worker = WorkerThread(apps.queue, test_settings(dsn, lease_seconds=3.0, sweep_interval=0.2))
    first = make_job(conn, job_type="record")
    fail_next_claims(conn, worker.worker.worker_id, times=1)
    with worker:
        wait_until(lambda: job_row(conn, first)["state"] == "completed", timeout=10)  # failed once, then claimed
        late = make_job(conn, queue="elsewhere", job_type="record", max_attempts=1)
        db.run_sync(
            conn, job_store.claim(worker_id=worker.worker.worker_id, queues=["elsewhere"], limit=1, lease_seconds=3)
        )
        wait_until(lambda: job_row(conn, late)["state"] == "pending", timeout=2.5, message="the late claim's release")
        time.sleep(3.5)  # past the lease it was claimed with: nothing for the sweeper to take
    row = job_row(conn, late)
    assert (row["state"], row["attempts"]) == ("pending", 0)
    assert conn.execute("SELECT count(*) FROM jobqueue.job_errors").fetchone() == (0,)


def test_an_outcome_on_its_way_to_the_acks_is_not_released_as_a_lost_reply(dsn, conn, monkeypatch, caplog):
    """Between the running set and the ack buffer an outcome waits while its circuit breaker is told
    and, when that opened the breaker, re-read. A reconcile then (after an uncertain claim) counted
    it as claimed by a lost reply and released it: its failure's ack was refused, the attempt
    undone, and the job ran again."""
    import os
    import tempfile
    import threading

    from tests.support import circuit_app

    down = tempfile.NamedTemporaryFile(prefix="jq-down-", delete=False)
    down.close()
    worker = WorkerThread(circuit_app.queue, test_settings(dsn, concurrency=3))
    gate, refreshing = threading.Event(), threading.Event()
    refresh = worker.worker.breakers.refresh

    async def slow_refresh():
        if worker.worker.started.is_set():
            refreshing.set()
            while not gate.is_set():
                await asyncio.sleep(0.01)
        await refresh()

    monkeypatch.setattr(worker.worker.breakers, "refresh", slow_refresh)
    try:
        with caplog.at_level("INFO", logger="jobqueue.worker"), worker:
            ids = [make_job(conn, job_type="call_api", payload={"down": down.name}, max_attempts=3) for _ in range(3)]
            wait_until(refreshing.is_set, timeout=10, message="the third failure to open the breaker")
            worker.worker._claim_uncertain = True  # as after a claim whose reply was lost
            worker.loop.call_soon_threadsafe(worker.worker._wake.set)
            time.sleep(0.5)  # the claim loop reconciles meanwhile
            gate.set()
            first_attempts = (
                "SELECT job_id FROM jobqueue.job_errors WHERE attempt = 1 AND error_type = 'ConnectionError'"
            )
            wait_until(
                lambda: len(conn.execute(first_attempts).fetchall()) == 3,
                timeout=10,
                message="each job's first failure written",
            )
    finally:
        gate.set()
        os.unlink(down.name)
    assert "whose reply was lost" not in caplog.text  # the reconcile found nothing to release
    assert sorted(r[0] for r in conn.execute(first_attempts).fetchall()) == sorted(ids)


def test_the_worker_stops_claiming_while_the_results_waiting_for_their_acks_are_too_big(dsn, conn):
    """The bound counted outcomes only: 400 results of 64 MB each fitted under it. It is sized too
    (JOBQUEUE_MAX_UNACKED_BYTES): with acks held up, results of 1 MB and a 3 MB bound, the worker
    stops claiming after about three, although the count bound would allow a thousand."""
    ids = [make_job(conn, job_type="big_result", payload={"bytes": 1_000_000}) for _ in range(40)]
    settings = test_settings(dsn, concurrency=2, max_unacked=1000, max_unacked_bytes=3_000_000, ack_batch_size=10)
    with WorkerThread(apps.queue, settings) as worker:
        with psycopg.connect(dsn) as blocker:
            blocker.execute("LOCK TABLE jobqueue.job_results IN EXCLUSIVE MODE")
            time.sleep(1.5)
            held = worker.worker.acks.backlog_bytes
            taken = conn.execute("SELECT count(*) FROM jobqueue.jobs WHERE state <> 'pending'").fetchone()[0]
            blocker.rollback()
        assert 3_000_000 <= held <= 3_000_000 + 2 * 1_000_100  # the bound, and what the two slots finished meanwhile
        assert taken <= 3 + 2 + 2  # the bound, the slots, the claims that filled them
        wait_until(
            lambda: (
                conn.execute("SELECT count(*) FROM jobqueue.jobs WHERE state = 'completed'").fetchone()[0] == len(ids)
            ),
            timeout=30,
        )
    assert worker.worker.acks.backlog_bytes == 0
