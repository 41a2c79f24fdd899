"""A deadline on every attempt: the task's timeout, else the worker's processing TTL. The lease
never outlives it; a hung attempt is failed as a timeout by its worker, or by the sweeper when the
worker cannot. Retries a worker scheduled itself run on time, not at the next poll."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

import pytest

from jobqueue.db import gateway as db
from jobqueue.store import jobs as job_store
from jobqueue.store.jobs import Deadlines
from tests.support import apps
from tests.support.factories import job_row, make_job
from tests.support.waiting import wait_until
from tests.support.workers import WorkerThread, test_settings


@pytest.fixture(autouse=True)
def _clear_runs():
    apps.runs.clear()
    yield
    apps.runs.clear()


def errors_of(conn, job_id) -> list[tuple[str, str]]:
    return conn.execute(
        "SELECT error_type, message FROM jobqueue.job_errors WHERE job_id = %s ORDER BY attempt", (job_id,)
    ).fetchall()


def test_a_handler_without_a_timeout_gets_the_processing_ttl(dsn, conn):
    """Before, a hung handler without a task timeout held its job in processing forever."""
    job_id = make_job(conn, job_type="hangs", max_attempts=2)
    with WorkerThread(apps.queue, test_settings(dsn, processing_ttl=0.5)):
        wait_until(lambda: job_row(conn, job_id)["state"] == "processing")
        held = job_row(conn, job_id)
        assert held["deadline_at"] is not None
        assert timedelta(0) < held["deadline_at"] - held["started_at"] <= timedelta(seconds=0.6)
        wait_until(lambda: job_row(conn, job_id)["state"] == "dead_letter", timeout=10)
    errors = errors_of(conn, job_id)
    assert [e[0] for e in errors] == ["JobTimeout", "JobTimeout"]
    assert "deadline (0.5 s)" in errors[0][1]
    row = job_row(conn, job_id)
    assert row["dead_reason"] == "attempts_exhausted" and row["deadline_at"] is None


def test_the_claim_sets_the_deadline_from_the_task_timeout_else_the_default(dsn, conn):
    with_timeout, without = make_job(conn, job_type="timed"), make_job(conn, job_type="untimed")
    deadlines = Deadlines(timeouts_json='{"timed": 2.5}', default=600.0, grace=4.0)
    claimed = db.run_sync(
        conn, job_store.claim(worker_id="w", queues=["default"], limit=2, lease_seconds=30, deadlines=deadlines)
    )
    by_type = {job.job_type: job for job in claimed}
    assert by_type["timed"].timeout == pytest.approx(2.5, abs=0.01)
    assert by_type["untimed"].timeout == pytest.approx(600.0, abs=0.01)
    timed, untimed = job_row(conn, with_timeout), job_row(conn, without)
    # the lease is the shorter of the lease and the deadline plus its grace
    assert timed["locked_until"] - timed["deadline_at"] == pytest.approx(
        timedelta(seconds=4.0), abs=timedelta(seconds=0.01)
    )
    assert untimed["locked_until"] - untimed["started_at"] <= timedelta(seconds=30.01)


def test_the_heartbeat_never_extends_a_lease_past_the_deadline(dsn, conn):
    job_id = make_job(conn, job_type="timed")
    deadlines = Deadlines(timeouts_json='{"timed": 1}', default=600.0, grace=2.0)
    [job] = db.run_sync(
        conn, job_store.claim(worker_id="w", queues=["default"], limit=1, lease_seconds=30, deadlines=deadlines)
    )
    later = datetime.now(timezone.utc) + timedelta(seconds=20)
    held = db.run_sync(
        conn,
        job_store.extend_leases(worker_id="w", attempts=[job.key], lease_seconds=30, deadline_grace=2.0, now=later),
    )
    assert held.written == {job.key: False}  # still held (the attempt is not reclaimed by the heartbeat itself)
    row = job_row(conn, job_id)
    assert row["locked_until"] == row["deadline_at"] + timedelta(seconds=2.0)  # not later + 30 s


def test_the_sweeper_fails_an_attempt_that_overran_its_deadline_as_a_timeout(dsn, conn):
    """The worker kept the lease alive up to the deadline but never reported: a wedged worker."""
    job_id = make_job(conn, job_type="timed", max_attempts=1)
    deadlines = Deadlines(timeouts_json='{"timed": 1}', default=600.0, grace=1.0)
    db.run_sync(
        conn, job_store.claim(worker_id="wedged", queues=["default"], limit=1, lease_seconds=30, deadlines=deadlines)
    )
    rows = db.run_sync(conn, job_store.reclaim_expired(now=datetime.now(timezone.utc) + timedelta(seconds=3)))
    assert [(r[0], r[1]) for r in rows] == [(job_id, "dead_letter")]
    [(error_type, message)] = errors_of(conn, job_id)
    assert error_type == "JobTimeout" and "past its deadline; worker wedged did not report it" in message
    assert conn.execute("SELECT error->>'type' FROM jobqueue.job_results WHERE job_id = %s", (job_id,)).fetchone() == (
        "JobTimeout",
    )


def test_a_lease_that_ran_out_before_the_deadline_is_a_lost_lease(dsn, conn):
    job_id = make_job(conn, job_type="untimed")
    db.run_sync(
        conn,
        job_store.claim(
            worker_id="gone", queues=["default"], limit=1, lease_seconds=5, deadlines=Deadlines(default=600.0)
        ),
    )
    db.run_sync(conn, job_store.reclaim_expired(now=datetime.now(timezone.utc) + timedelta(seconds=6)))
    assert [e[0] for e in errors_of(conn, job_id)] == ["LeaseExpired"]
    assert job_row(conn, job_id)["state"] == "pending"


def test_a_retry_the_worker_scheduled_itself_runs_when_due_not_at_the_next_poll(dsn, conn):
    """Before, a quick failure on an idle worker was retried at the next 5 s poll, not when its
    backoff ended. The backoff here is 0.5 s, the poll interval 30 s."""
    with WorkerThread(apps.queue, test_settings(dsn, poll_interval=30.0)):
        job_id = conn.execute("SELECT jobqueue.enqueue('fails_fast')").fetchone()[0]
        wait_until(lambda: job_row(conn, job_id)["state"] == "completed", timeout=10)
    failed_at = conn.execute("SELECT failed_at FROM jobqueue.job_errors WHERE job_id = %s", (job_id,)).fetchone()[0]
    started = job_row(conn, job_id)["started_at"]
    assert timedelta(seconds=0.45) <= started - failed_at <= timedelta(seconds=1.5)


def test_a_retry_woken_for_while_another_job_runs_is_not_missed(dsn, conn):
    """The wake-up for a retry must survive the claim loop being busy with another job's slot."""
    with WorkerThread(apps.queue, test_settings(dsn, poll_interval=30.0, concurrency=1)):
        first = conn.execute("SELECT jobqueue.enqueue('fails_fast')").fetchone()[0]
        conn.execute("SELECT jobqueue.enqueue('slow', '{\"seconds\": 0.2}')")
        wait_until(lambda: job_row(conn, first)["state"] == "completed", timeout=10)
    failed_at = conn.execute("SELECT failed_at FROM jobqueue.job_errors WHERE job_id = %s", (first,)).fetchone()[0]
    assert job_row(conn, first)["started_at"] - failed_at <= timedelta(seconds=1.5)


def test_a_retry_due_just_after_the_claim_is_found_when_the_next_run_lookup_runs_late(dsn, conn, monkeypatch):
    """next_run_at's bound is "after the last claim began", that claim's start on this host carried
    to the server's clock: a lookup that reaches the server late puts the bound late. A retry falls
    due a few ms after the worker's own estimate (its run_at counts from the ack), so the claim at
    the estimate comes just early, and a bound 50 ms late hid the retry until the next poll (30 s
    here; it failed in CI under load)."""
    late_lookup = job_store.next_run_in

    def next_run_in(*, queues, since=0.0, now=None):
        return late_lookup(queues=queues, since=since - 0.05, now=now)

    monkeypatch.setattr(job_store, "next_run_in", next_run_in)
    # acks written 30 ms after the failure, as a loaded box writes them: the run_at comes that late
    with WorkerThread(apps.queue, test_settings(dsn, poll_interval=30.0, concurrency=1, ack_flush_interval=0.03)):
        first = conn.execute("SELECT jobqueue.enqueue('fails_fast')").fetchone()[0]
        wait_until(lambda: job_row(conn, first)["state"] == "completed", timeout=10)
    failed_at = conn.execute("SELECT failed_at FROM jobqueue.job_errors WHERE job_id = %s", (first,)).fetchone()[0]
    assert job_row(conn, first)["started_at"] - failed_at <= timedelta(seconds=1.5)


def test_a_result_above_the_size_limit_dead_letters_with_the_reason(dsn, conn):
    job_id = make_job(conn, job_type="big_result", payload={"bytes": 5000})
    small = make_job(conn, job_type="big_result", payload={"bytes": 10})
    with WorkerThread(apps.queue, test_settings(dsn, max_result_bytes=1000)):
        wait_until(
            lambda: job_row(conn, job_id)["state"] == "dead_letter" and job_row(conn, small)["state"] == "completed"
        )
    [(error_type, message)] = errors_of(conn, job_id)
    assert error_type == "PermanentError" and "more than the 1,000 allowed (JOBQUEUE_MAX_RESULT_BYTES)" in message
    assert job_row(conn, job_id)["attempts"] == 1


def test_processing_age_and_overdue_attempts_are_in_the_metrics(dsn, conn):
    from jobqueue.observability import metrics, prometheus

    long_running = make_job(conn, job_type="timed")
    deadlines = Deadlines(timeouts_json='{"timed": 1}', default=600.0, grace=1.0)
    db.run_sync(
        conn, job_store.claim(worker_id="w", queues=["default"], limit=1, lease_seconds=30, deadlines=deadlines)
    )
    conn.execute(
        "UPDATE jobqueue.jobs SET started_at = now() - interval '700 seconds', "
        "deadline_at = now() - interval '90 seconds' WHERE id = %s",
        (long_running,),
    )

    async def snapshot():
        import psycopg

        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as aconn:
            return await metrics.collect(aconn, cap=1000, stale_seconds=60)

    import asyncio

    text = prometheus.render(asyncio.run(snapshot()))
    age = next(
        line
        for line in text.splitlines()
        if line.startswith('jobqueue_processing_age_seconds{queue="default",priority="normal"}')
    )
    overdue = next(
        line
        for line in text.splitlines()
        if line.startswith('jobqueue_processing_overdue_seconds{queue="default",priority="normal"}')
    )
    assert 699 < float(age.split()[-1]) < 760
    assert 89 < float(overdue.split()[-1]) < 150


def test_the_registry_counts_stuck_handlers(dsn, conn):
    """A sync handler blocked past its deadline keeps its thread: the worker reports it (and its
    other jobs go on, on the spare threads)."""
    blocked = make_job(conn, job_type="blocks_forever", max_attempts=1)
    with WorkerThread(apps.queue, test_settings(dsn, concurrency=2, lease_seconds=0.9)) as worker:
        wait_until(lambda: job_row(conn, blocked)["state"] == "dead_letter", timeout=10)
        assert worker.worker.threads.stuck == 1
        others = [make_job(conn, job_type="record_sync") for _ in range(6)]
        wait_until(lambda: all(job_row(conn, j)["state"] == "completed" for j in others), timeout=10)
        wait_until(
            lambda: conn.execute("SELECT stuck_handlers FROM jobqueue.workers").fetchone() == (1,),
            timeout=5,
            message="the heartbeat to report the stuck handler",
        )
        assert not worker.worker.restart_requested  # 1 stuck < 2 (the default bound: concurrency)
    assert [e[0] for e in errors_of(conn, blocked)] == ["JobTimeout"]


def test_a_timeout_given_at_enqueue_overrides_the_tasks(dsn, conn):
    """`slow` declares timeout=60; this job carries 0.3 s of its own."""
    job_id = conn.execute(
        "SELECT jobqueue.enqueue('slow', '{\"seconds\": 5}', timeout => interval '0.3 seconds', max_attempts => 1)"
    ).fetchone()[0]
    with WorkerThread(apps.queue, test_settings(dsn)):
        wait_until(lambda: job_row(conn, job_id)["state"] == "dead_letter", timeout=10)
    [(error_type, message)] = errors_of(conn, job_id)
    assert error_type == "JobTimeout" and "deadline (0.3 s)" in message


def test_a_job_still_waiting_at_its_expiry_is_dead_lettered_as_expired_and_can_be_retried(dsn, conn):
    """Expired jobs are never started and never silently deleted: they go to the DLQ with reason
    expired, and an admin retry (which clears the expiry) runs them."""
    from jobqueue import Client

    conn.execute("INSERT INTO jobqueue.queue_settings (queue, paused) VALUES ('default', true)")
    job_id = conn.execute("SELECT jobqueue.enqueue('record', expire_after => interval '0.3 seconds')").fetchone()[0]
    assert (
        db.run_sync(
            conn,
            job_store.claim(
                worker_id="w",
                queues=["default"],
                limit=1,
                lease_seconds=30,
                now=datetime.now(timezone.utc) + timedelta(seconds=1),
            ),
        )
        == []
    )
    with WorkerThread(apps.queue, test_settings(dsn, sweep_interval=0.2)):
        wait_until(lambda: job_row(conn, job_id)["state"] == "dead_letter", timeout=10)
        row = job_row(conn, job_id)
        assert row["dead_reason"] == "expired" and row["attempts"] == 0
        assert conn.execute("SELECT dead_reason FROM jobqueue.dead_letters WHERE id = %s", (job_id,)).fetchone() == (
            "expired",
        )
        assert apps.runs == []
        conn.execute("UPDATE jobqueue.queue_settings SET paused = false WHERE queue = 'default'")
        with Client(dsn) as client:
            assert client.retry_dead(job_id).value == "retried"
        wait_until(lambda: job_row(conn, job_id)["state"] == "completed", timeout=10)
    assert job_row(conn, job_id)["expires_at"] is None


def test_a_sigterm_during_a_self_restart_stops_the_worker_for_good(dsn):
    """The poison campaign once saw a worker re-execute itself after SIGTERM: the stop arrived
    while it was stopping to restart, and the restart won. A requested stop wins."""
    worker = WorkerThread(apps.queue, test_settings(dsn)).worker
    worker.request_restart()
    assert worker.restart_requested and worker.stopping
    worker.request_stop()
    assert not worker.restart_requested and worker.stopping


def skew_the_workers_clock(monkeypatch, seconds: float) -> None:
    """The worker's host clock runs ``seconds`` ahead of the database server's (behind if negative)."""
    from jobqueue.worker import worker as worker_module

    class Skewed(datetime):
        @classmethod
        def now(cls, tz=None):
            return datetime.now(tz) + timedelta(seconds=seconds)

    monkeypatch.setattr(worker_module, "datetime", Skewed)


@pytest.mark.parametrize("skew", [2.0, -2.0], ids=["worker-ahead", "worker-behind"])
def test_a_scheduled_job_starts_on_the_servers_time_whatever_the_workers_clock(dsn, conn, monkeypatch, skew):
    """The idle wait compared the server's run_at with the worker host's clock: a worker 2 s ahead
    claimed (and looked the next run up) every millisecond until the job fell due — hundreds of
    statements; one 2 s behind started it 2 s late. The time left is the server's to say."""
    skew_the_workers_clock(monkeypatch, skew)
    worker = WorkerThread(apps.queue, test_settings(dsn, poll_interval=30.0))
    claims: list[float] = []
    claim = worker.worker.claimer.claim

    async def counted(*args, **kwargs):
        claims.append(time.monotonic())
        return await claim(*args, **kwargs)

    worker.worker.claimer.claim = counted  # type: ignore[method-assign]
    with worker:
        job_id = conn.execute("SELECT jobqueue.enqueue('record', delay => interval '1.5 seconds')").fetchone()[0]
        enqueued = time.monotonic()
        wait_until(lambda: job_row(conn, job_id)["state"] == "completed", timeout=10)
    row = job_row(conn, job_id)
    assert timedelta(0) <= row["started_at"] - row["run_at"] < timedelta(seconds=0.5)
    waiting = [at for at in claims if enqueued < at < enqueued + 1.4]
    assert len(waiting) <= 5, len(waiting)  # the NOTIFY's claim, then a sleep until it is due


def test_an_async_handler_that_swallows_its_cancellation_is_stuck_and_gives_its_slot_back(dsn, conn):
    """An async handler that catches the CancelledError of its deadline kept its slot for ever and
    was never counted as stuck (its lease ran out at the deadline's cap, and the sweeper failed the
    attempt; every new attempt took another slot). Past its deadline and half the lease's grace it
    is now treated like a stuck sync thread: its attempt is failed by its worker as a JobTimeout,
    it is cancelled again and counted stuck, its slot is free, and when the stuck ones reach
    JOBQUEUE_MAX_STUCK_HANDLERS the worker restarts."""
    first = make_job(conn, job_type="swallows_cancel", max_attempts=1)
    settings = test_settings(dsn, concurrency=1, max_stuck_handlers=2, lease_seconds=1.5, sweep_interval=0.2)
    apps.swallowers_released.clear()
    with WorkerThread(apps.queue, settings) as worker:
        wait_until(lambda: job_row(conn, first)["state"] == "dead_letter", timeout=10)
        wait_until(lambda: worker.worker.threads.stuck == 1, timeout=5, message="the handler counted stuck")
        other = make_job(conn, job_type="record")
        wait_until(lambda: job_row(conn, other)["state"] == "completed", timeout=5, message="the slot back")
        wait_until(
            lambda: conn.execute("SELECT stuck_handlers FROM jobqueue.workers").fetchone() == (1,),
            timeout=5,
            message="the heartbeat to report the stuck handler",
        )
        assert not worker.worker.restart_requested
        make_job(conn, job_type="swallows_cancel", max_attempts=1)
        wait_until(lambda: worker.worker.restart_requested, timeout=10, message="a restart for the second one")
        apps.swallowers_released.set()  # they may end before the worker's loop closes (else it drops them)
    [(error_type, message)] = errors_of(conn, first)
    assert error_type == "JobTimeout" and "deadline (0.3 s)" in message  # its worker's verdict, not the sweeper's


def test_a_handler_left_running_when_the_worker_loop_closes_is_collected_quietly(dsn, conn, monkeypatch):
    """A handler that never ends (it swallows every cancellation) is dropped with the worker's loop;
    the garbage collector finishes its task later, outside any loop. The task's cleanup asked
    asyncio for the current task there, which raises: an unraisable RuntimeError that failed
    whichever test ran when the collector came round."""
    import gc
    import sys

    unraisable: list = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    job_id = make_job(conn, job_type="swallows_cancel", max_attempts=1)
    apps.swallowers_released.clear()
    settings = test_settings(dsn, concurrency=1, lease_seconds=30, shutdown_grace=0.2)
    try:
        with WorkerThread(apps.queue, settings):
            wait_until(lambda: job_row(conn, job_id)["state"] == "processing", timeout=10)
        gc.collect()
    finally:
        apps.swallowers_released.set()
    assert [repr(u.exc_value) for u in unraisable] == []
