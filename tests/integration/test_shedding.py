"""Load shedding on retry, in the failure statement itself: above a queue's soft limit, with the
queue's shed_low_retries on, a retryable failure of a low job is dead-lettered with reason shed."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

import psycopg
import pytest

from jobqueue.client import Client
from jobqueue.db import gateway as db
from jobqueue.model.errors import ValidationError
from jobqueue.observability.metrics import collect
from jobqueue.observability.prometheus import render
from jobqueue.store import jobs as job_store
from jobqueue.store import metrics as metrics_store
from tests.support.factories import job_row, make_job

DEFAULTS = (50_000, 100_000)


def backlog(conn, queue: str, n: int, **fields) -> None:
    for _ in range(n):
        make_job(conn, queue=queue, job_type="filler", **fields)


def fail(
    conn,
    queue: str,
    *,
    priority: str = "low",
    action: str = "retry",
    max_attempts: int = 4,
    defaults: tuple[int, int] = DEFAULTS,
) -> dict:
    """One job of ``queue`` claimed by worker w and failed with ``action``; its row afterwards."""
    job_id = make_job(
        conn,
        queue=queue,
        job_type="flaky",
        priority=priority,
        state="processing",
        locked_by="w",
        max_attempts=max_attempts,
    )
    rows = db.run_sync(
        conn,
        job_store.fail_many(
            worker_id="w",
            ids=[job_id],
            attempts=[1],
            actions=[action],
            retry_in=[5.0],
            error_types=["Timeout"],
            messages=["upstream timed out"],
            tracebacks=[None],
            default_limits=defaults,
        ),
    )
    assert [r[0] for r in rows.written] == [job_id]
    return job_row(conn, job_id)


def shedding(conn, queue: str, on: bool = True, **limits) -> None:
    with Client(conn.info.dsn, pool_size=1) as client:
        client.set_queue_shedding(queue, on)
        if limits:
            client.set_queue_limits(queue, soft_limit=limits.get("soft"), hard_limit=limits.get("hard"))


def test_a_low_retry_above_the_soft_limit_is_shed_and_its_error_kept(conn):
    shedding(conn, "q", soft=3)
    backlog(conn, "q", 4)  # depth 4 > soft limit 3
    row = fail(conn, "q")
    assert (row["state"], row["dead_reason"], row["locked_by"]) == ("dead_letter", "shed", "w")
    assert row["finished_at"] is not None
    errors = conn.execute(
        "SELECT attempt, error_type, message FROM jobqueue.job_errors WHERE job_id = %s", (row["id"],)
    ).fetchall()
    assert errors == [(1, "Timeout", "upstream timed out")]
    final = conn.execute("SELECT outcome, error FROM jobqueue.job_results WHERE job_id = %s", (row["id"],)).fetchone()
    assert final == ("dead_letter", {"type": "Timeout", "message": "upstream timed out"})
    assert conn.execute("SELECT dead_reason FROM jobqueue.dead_letters WHERE id = %s", (row["id"],)).fetchone() == (
        "shed",
    )


def test_the_limit_is_exclusive_and_only_runnable_jobs_count(conn):
    shedding(conn, "q", soft=3)
    backlog(conn, "q", 3)  # depth == soft limit: not above it
    backlog(conn, "q", 5, run_at=datetime.now(timezone.utc) + timedelta(hours=1))  # scheduled: not runnable
    backlog(conn, "q", 5, state="processing")  # running: not runnable
    backlog(conn, "other", 10)  # another queue's depth is not this one's
    row = fail(conn, "q")
    assert (row["state"], row["dead_reason"]) == ("failed", None)
    make_job(conn, queue="q", job_type="filler", state="failed", attempts=1)  # a due retry is runnable: depth 4
    assert fail(conn, "q")["dead_reason"] == "shed"


@pytest.mark.parametrize("priority", ["critical", "high", "normal"])
def test_only_low_jobs_are_shed(conn, priority):
    shedding(conn, "q", soft=1)
    backlog(conn, "q", 5)
    row = fail(conn, "q", priority=priority)
    assert (row["state"], row["dead_reason"]) == ("failed", None)


def test_shedding_is_opt_in_per_queue(conn):
    with Client(conn.info.dsn, pool_size=1) as client:
        client.set_queue_limits("q", soft_limit=1, hard_limit=None)
        backlog(conn, "q", 5)
        assert fail(conn, "q")["state"] == "failed"  # never turned on
        client.set_queue_shedding("q", True)
        assert fail(conn, "q")["dead_reason"] == "shed"
        settings = client.set_queue_shedding("q", False)
        assert settings.shed_low_retries is False and settings.soft_limit == 1  # the limits stay
        assert fail(conn, "q")["state"] == "failed"


def test_queues_without_limits_use_the_defaults_and_a_lower_hard_limit_caps_the_soft_one(conn):
    shedding(conn, "plain")
    backlog(conn, "plain", 3)
    assert fail(conn, "plain", defaults=(3, 10))["state"] == "failed"
    assert fail(conn, "plain", defaults=(2, 10))["dead_reason"] == "shed"
    assert fail(conn, "plain", defaults=(50, 2))["dead_reason"] == "shed"  # least(soft, hard)
    shedding(conn, "capped", hard=2)  # soft: the default 50,000, but never above the hard limit
    backlog(conn, "capped", 3)
    assert fail(conn, "capped")["dead_reason"] == "shed"


def test_out_of_attempts_permanent_errors_and_cancels_keep_their_reasons(conn):
    shedding(conn, "q", soft=1)
    backlog(conn, "q", 5)
    assert fail(conn, "q", max_attempts=1)["dead_reason"] == "attempts_exhausted"
    assert fail(conn, "q", action="dead")["dead_reason"] == "permanent_error"
    cancelled = fail(conn, "q", action="cancel")
    assert (cancelled["state"], cancelled["dead_reason"]) == ("cancelled", None)


def test_shed_jobs_are_counted_in_metrics_and_the_count_survives_a_retry(conn):
    shedding(conn, "q", soft=1)
    backlog(conn, "q", 5)
    first = fail(conn, "q")
    fail(conn, "q")
    fail(conn, "q", priority="normal")
    assert conn.execute("SELECT sum(shed) FROM jobqueue.worker_stats WHERE queue = 'q'").fetchone()[0] == 2
    with Client(conn.info.dsn, pool_size=1) as client:
        assert client.retry_dead(first["id"]).value == "retried"
    db.run_sync(conn, metrics_store.retire_worker_stats(worker_id="w"))  # w stops: its rows are folded
    assert conn.execute("SELECT worker_id, shed FROM jobqueue.worker_stats WHERE queue = 'q'").fetchall() == [
        ("(retired)", 2)
    ]
    assert 'jobqueue_jobs_shed_total{queue="q",job_type="flaky"} 2' in render(_snapshot(conn))


def _snapshot(conn):
    async def go():
        async with await psycopg.AsyncConnection.connect(conn.info.dsn, autocommit=True) as aconn:
            return await collect(aconn, cap=1000, stale_seconds=60)

    return asyncio.run(go())


def test_bad_settings_are_refused_and_write_nothing(conn):
    with Client(conn.info.dsn, pool_size=1) as client:
        with pytest.raises(ValidationError) as caught:
            client.set_queue_shedding("q", "yes")  # type: ignore[arg-type]
        assert caught.value.field == "shed_low_retries"
        with pytest.raises(ValidationError):
            client.set_queue_shedding(" ", True)
    assert conn.execute("SELECT count(*) FROM jobqueue.queue_settings").fetchone()[0] == 0
