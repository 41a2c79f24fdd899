"""Transactional completion: a handler's writes in `job.transaction()` commit with its completion
and result, or not at all — a lost lease, a cancel, a deadline, a failure after the block."""

from __future__ import annotations

import psycopg
import pytest

from jobqueue import Client
from tests.support import ledger_app
from tests.support.waiting import wait_until
from tests.support.workers import WorkerThread, test_settings


@pytest.fixture
def ledger(dsn, monkeypatch):
    monkeypatch.setenv("LEDGER_DSN", dsn)
    ledger_app.release.clear()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(ledger_app.SCHEMA)
        yield conn
    ledger_app.release.set()


def rows(conn, job_id) -> list[tuple]:
    return conn.execute("SELECT attempt, amount FROM public.ledger WHERE job_id = %s", (job_id,)).fetchall()


def job(conn, job_id) -> dict:
    cur = conn.execute(
        "SELECT j.state, j.attempts, r.result FROM jobqueue.jobs j LEFT JOIN jobqueue.job_results r ON r.job_id = j.id "
        "WHERE j.id = %s",
        (job_id,),
    )
    state, attempts, result = cur.fetchone()
    return {"state": state, "attempts": attempts, "result": result}


def holding_transaction(conn) -> bool:
    """A handler's transaction is open (its block ended, the worker has not settled it yet)."""
    return (
        conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name LIKE '%%:tx'"
            " AND state = 'idle in transaction'"
        ).fetchone()[0]
        > 0
    )


def finished(conn, job_id) -> bool:
    return job(conn, job_id)["state"] in ("completed", "dead_letter", "cancelled", "failed")


@pytest.mark.parametrize("job_type", ["credit", "credit_sync"])
def test_the_handlers_writes_its_completion_and_result_commit_together(dsn, ledger, job_type):
    with Client(dsn) as client, WorkerThread(ledger_app.queue, test_settings(dsn, concurrency=2)):
        job_id = client.enqueue(job_type, {"amount": 5})
        wait_until(lambda: finished(ledger, job_id), message="the job to finish")
    assert job(ledger, job_id)["state"] == "completed"
    assert job(ledger, job_id)["result"]["credited"] == 5
    assert rows(ledger, job_id) == [(1, 5)]


def test_a_failure_inside_the_block_or_after_it_rolls_the_writes_back_and_retries(dsn, ledger):
    with Client(dsn) as client, WorkerThread(ledger_app.queue, test_settings(dsn, concurrency=2)):
        inside = client.enqueue("credit_sync", {"fail_inside": True}, max_attempts=1)
        after = client.enqueue("credit", {"fail_after": True}, max_attempts=2)
        wait_until(
            lambda: job(ledger, inside)["state"] == "dead_letter" and job(ledger, after)["state"] == "dead_letter"
        )
    assert rows(ledger, inside) == [] and rows(ledger, after) == []
    assert job(ledger, after)["attempts"] == 2


def test_a_lost_lease_rolls_the_writes_back_and_the_attempt_that_took_over_writes_once(dsn, ledger):
    """The attempt writes, then its lease is lost (the sweeper put the job back and another worker
    started it: attempts moved on) before the handler returns: its guard fails, nothing commits."""
    with Client(dsn) as client, WorkerThread(ledger_app.queue, test_settings(dsn, concurrency=2)) as worker:
        job_id = client.enqueue("credit", {"hold": True})
        wait_until(lambda: holding_transaction(ledger))
        ledger.execute(
            "UPDATE jobqueue.jobs SET attempts = attempts + 1, locked_by = 'another-worker' WHERE id = %s", (job_id,)
        )
        ledger_app.release.set()
        wait_until(lambda: not worker.worker.running and worker.worker.acks.backlog == 0, message="the settle")
        idle = (
            "SELECT count(*) FROM pg_stat_activity WHERE state = 'idle in transaction' AND datname = current_database()"
        )
        assert ledger.execute(idle).fetchone()[0] == 0
    assert rows(ledger, job_id) == []
    assert job(ledger, job_id)["state"] == "processing"  # still the other attempt's, untouched


def test_a_cancel_requested_while_the_transaction_is_open_rolls_it_back_and_cancels(dsn, ledger):
    with Client(dsn) as client, WorkerThread(ledger_app.queue, test_settings(dsn, concurrency=2)):
        job_id = client.enqueue("credit", {"until_cancelled": True})
        wait_until(lambda: holding_transaction(ledger))
        client.cancel(job_id)
        wait_until(lambda: job(ledger, job_id)["state"] == "cancelled")
    assert rows(ledger, job_id) == []


def test_a_handler_past_its_deadline_rolls_back_and_fails_as_a_timeout(dsn, ledger):
    with Client(dsn) as client, WorkerThread(ledger_app.queue, test_settings(dsn, concurrency=2)):
        job_id = client.enqueue("credit_late", max_attempts=1)
        wait_until(lambda: job(ledger, job_id)["state"] == "dead_letter", timeout=15)
    assert rows(ledger, job_id) == []
    error = ledger.execute("SELECT error_type FROM jobqueue.job_errors WHERE job_id = %s", (job_id,)).fetchone()
    assert error == ("JobTimeout",)


def test_one_transaction_per_attempt(dsn, ledger):
    with Client(dsn) as client, WorkerThread(ledger_app.queue, test_settings(dsn, concurrency=2)):
        job_id = client.enqueue("credit_twice", max_attempts=1)
        wait_until(lambda: job(ledger, job_id)["state"] == "dead_letter")
    message = ledger.execute("SELECT message FROM jobqueue.job_errors WHERE job_id = %s", (job_id,)).fetchone()[0]
    assert "one per attempt" in message


def test_transactions_come_from_a_pool_of_their_own_so_busy_handlers_leave_the_acks_theirs(dsn, ledger):
    """Twenty handlers holding transactions at once: more than the worker's own pool has
    connections (4), and its acks and heartbeats go on beside them."""
    with Client(dsn) as client, WorkerThread(ledger_app.queue, test_settings(dsn, concurrency=20)):
        ids = [client.enqueue("credit", {"sleep": 0.5}) for _ in range(40)]
        wait_until(lambda: all(job(ledger, i)["state"] == "completed" for i in ids), timeout=30)
    assert ledger.execute("SELECT count(*), count(DISTINCT job_id) FROM public.ledger").fetchone() == (40, 40)


def test_outside_a_worker_the_job_has_no_transaction():
    from jobqueue.model.jobs import Job

    job = Job(None, "q", "t", {}, 2, 1, 1, None, False, None)  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="handler a jobqueue worker runs"):
        job.transaction()
