"""Cancel by filter: every job matching queue, job type, state, creation time or producer, in
batches of one short statement each; waiting jobs end cancelled, running ones get the request a
single cancel gives them (and their worker stops them); nothing else is touched, and a request
with no filter at all is refused unless it asks for all jobs."""

from __future__ import annotations

import asyncio
import threading
from datetime import datetime, timedelta, timezone

import psycopg
import pytest

from jobqueue import AsyncClient, Client
from jobqueue.client.admin import CancelRun
from jobqueue.db import gateway as db
from jobqueue.db.queries import query
from jobqueue.model.errors import ValidationError
from jobqueue.model.jobs import BulkCancel
from jobqueue.store import job_admin
from tests.support import apps
from tests.support.factories import count_jobs, job_row, make_job, states
from tests.support.waiting import wait_until
from tests.support.workers import WorkerThread, test_settings


def test_only_the_jobs_matching_every_filter_are_cancelled(dsn, conn):
    target = [make_job(conn, queue="mail", job_type="send", producer_id="alice") for _ in range(3)]
    retrying = make_job(conn, queue="mail", job_type="send", state="failed", producer_id="alice")
    spared = [
        make_job(conn, queue="mail", job_type="render", producer_id="alice"),  # another type
        make_job(conn, queue="bulk", job_type="send", producer_id="alice"),  # another queue
        make_job(conn, queue="mail", job_type="send", producer_id="bob"),  # another producer
    ]
    finished = [make_job(conn, queue="mail", job_type="send", state=s) for s in ("completed", "dead_letter")]
    with Client(dsn, pool_size=1) as client:
        done = client.cancel_jobs(queue="mail", job_type="send", producer_id="alice", batch_size=2)
    assert done == BulkCancel(cancelled=4, cancel_requested=0, complete=True)
    assert set(states(conn, target + [retrying]).values()) == {"cancelled"}
    assert all(job_row(conn, j)["finished_at"] is not None for j in target)
    assert set(states(conn, spared).values()) == {"pending"}
    assert [states(conn, finished)[j] for j in finished] == ["completed", "dead_letter"]


def test_state_and_before_narrow_it(dsn, conn):
    old = make_job(conn, queue="q")
    conn.execute("UPDATE jobqueue.jobs SET created_at = now() - interval '2 hours' WHERE id = %s", (old,))
    new = make_job(conn, queue="q")
    retrying = make_job(conn, queue="q", state="failed")
    conn.execute("UPDATE jobqueue.jobs SET created_at = now() - interval '2 hours' WHERE id = %s", (retrying,))
    with Client(dsn, pool_size=1) as client:
        hour_ago = datetime.now(timezone.utc) - timedelta(hours=1)
        assert client.cancel_jobs(queue="q", state="pending", before=hour_ago).cancelled == 1
        assert states(conn, [old, new, retrying]) == {old: "cancelled", new: "pending", retrying: "failed"}
        assert client.cancel_jobs(state="failed").cancelled == 1
        assert states(conn, [retrying]) == {retrying: "cancelled"}


def test_running_jobs_get_a_cancel_request_and_their_worker_stops_them(dsn, conn):
    apps.runs.clear()
    with Client(dsn) as client, WorkerThread(apps.queue, test_settings(dsn)):
        running = [client.enqueue("slow", {"seconds": 30}, queue="default") for _ in range(2)]
        wait_until(lambda: set(states(conn, running).values()) == {"processing"}, timeout=10)
        waiting = client.enqueue("slow", {"seconds": 30}, run_at=datetime.now(timezone.utc) + timedelta(hours=1))
        done = client.cancel_jobs(job_type="slow")
        assert done == BulkCancel(cancelled=1, cancel_requested=2, complete=True)
        assert states(conn, [waiting]) == {waiting: "cancelled"}
        wait_until(lambda: set(states(conn, running).values()) == {"cancelled"}, timeout=10)  # the handler stopped
    assert all(job_row(conn, j)["attempts"] == 1 for j in running)  # and no attempt started again


def test_a_running_job_is_told_by_notify(dsn, conn):
    job_id = make_job(conn, state="processing", job_type="long")
    with psycopg.connect(dsn, autocommit=True) as listener:
        listener.execute("LISTEN jobqueue_cancel")
        with Client(dsn, pool_size=1) as client:
            assert client.cancel_jobs(job_type="long").cancel_requested == 1
            assert client.cancel_jobs(job_type="long") == BulkCancel(0, 0)  # requested once, not again
        told = [n.payload for n in listener.notifies(timeout=2, stop_after=1)]
    assert told == [str(job_id)] and job_row(conn, job_id)["cancel_requested"] is True


@pytest.mark.parametrize(
    "filters, field",
    [
        ({}, "all"),
        ({"all_jobs": "yes"}, "all"),  # only True asks for every job
        ({"queue": ""}, "queue"),  # an empty filter once matched nothing (or everything)
        ({"state": "completed"}, "state"),
        ({"state": "dead_letter"}, "state"),
        ({"state": "cancelled"}, "state"),
        ({"before": datetime(2030, 1, 1)}, "before"),  # naive
        ({"queue": "q", "batch_size": 0}, "batch_size"),
        ({"queue": "q", "batch_size": True}, "batch_size"),
        ({"queue": "q", "batch_size": 10**9}, "batch_size"),
    ],
)
def test_bad_requests_are_refused_and_nothing_is_cancelled(dsn, conn, filters, field):
    job_id = make_job(conn, queue="q")
    with Client(dsn, pool_size=1) as client, pytest.raises(ValidationError) as refused:
        client.cancel_jobs(**filters)
    assert refused.value.field == field
    assert states(conn, [job_id]) == {job_id: "pending"}


def test_all_jobs_cancels_every_live_job(dsn, conn):
    for i in range(5):
        make_job(conn, queue=f"q{i}")
    make_job(conn, state="processing")
    done_job = make_job(conn, state="completed")
    with Client(dsn, pool_size=1) as client:
        assert client.cancel_jobs(all_jobs=True, batch_size=2) == BulkCancel(5, 1)
    assert count_jobs(conn) == 7 and states(conn, [done_job]) == {done_job: "completed"}


def batch(conn, *, limit: int, after=job_admin.CANCEL_START, cutoff=None, queue="q") -> job_admin.CancelBatch:
    call = job_admin.cancel_batch(
        limit=limit, after=after, first=False, cutoff=cutoff, state=None, queue=queue, job_type=None, producer_id=None
    )
    return db.run_sync(conn, call)


def test_each_statement_does_a_bounded_batch_and_jobs_enqueued_later_are_not_chased(conn):
    for _ in range(5):
        make_job(conn, queue="q")
    first = batch(conn, limit=2)
    assert (first.cancelled, first.requested, first.ahead, first.skipped) == (2, 0, True, False)
    late = make_job(conn, queue="q")  # enqueued while the cancel runs
    conn.execute("UPDATE jobqueue.jobs SET created_at = %s WHERE id = %s", (first.cutoff + timedelta(seconds=1), late))
    rest = batch(conn, limit=100, after=first.last, cutoff=first.cutoff)
    assert (rest.cancelled, rest.ahead, rest.skipped, rest.more_left, rest.cutoff) == (
        3,
        False,
        False,
        False,
        first.cutoff,
    )
    assert states(conn, [late]) == {late: "pending"}


def test_a_batch_never_walks_again_what_earlier_batches_passed(conn):
    """The walk of waiting jobs goes on from the last key: before, each batch started from the
    first live job again, through every index entry the jobs cancelled before it left behind, and
    the last batch of a large cancel read the whole table."""
    ids = [make_job(conn, queue="q") for _ in range(6)]
    first = batch(conn, limit=3)
    assert first.last is not None and first.ahead
    conn.execute("UPDATE jobqueue.jobs SET state = 'pending', finished_at = NULL WHERE id = ANY(%s)", (ids[:3],))
    second = batch(conn, limit=3, after=first.last)  # the first three are pending again, behind the cursor
    assert second.cancelled == 3 and states(conn, ids[:3]) == dict.fromkeys(ids[:3], "pending")


def test_its_plans_read_the_partial_indexes_not_the_table(conn):
    conn.execute(
        "INSERT INTO jobqueue.jobs (queue, job_type, state, attempts, finished_at) "
        "SELECT 'q', 'noop', 'completed', 1, now() FROM generate_series(1, 20000)"
    )
    make_job(conn, queue="q")
    conn.execute("ANALYZE jobqueue.jobs")
    params = dict(
        limit=500,
        after_queue="",
        after_priority=-1,
        after_run_at=job_admin.CANCEL_START[2],
        after_seq=-1,
        first=False,
        cutoff=None,
        state=None,
        queue=None,
        job_type="noop",
        producer_id=None,
    )
    plan = "\n".join(r[0] for r in conn.execute("EXPLAIN " + query("job_cancel_batch"), params).fetchall())
    assert "Seq Scan on jobs" not in plan, plan
    assert "jobs_claim_idx" in plan or "jobs_claim_type_idx" in plan, plan
    assert "jobs_lease_idx" in plan, plan


def test_a_job_locked_by_another_transaction_is_passed_over_and_reported(dsn, conn, monkeypatch):
    """SKIP LOCKED: the cancel never waits on (nor deadlocks with) a claim, an ack or an operator's
    open transaction; it tries again briefly, then says it left jobs (complete false)."""
    monkeypatch.setattr(CancelRun, "LOCKED_RETRIES", 3)
    free, held = make_job(conn, queue="q"), make_job(conn, queue="q")
    with psycopg.connect(dsn) as other:
        other.execute("SELECT 1 FROM jobqueue.jobs WHERE id = %s FOR UPDATE", (held,))
        with Client(dsn, pool_size=1) as client:
            assert client.cancel_jobs(queue="q") == BulkCancel(1, 0, complete=False)
        other.rollback()
    assert states(conn, [free, held]) == {free: "cancelled", held: "pending"}
    with Client(dsn, pool_size=1) as client:
        assert client.cancel_jobs(queue="q") == BulkCancel(1, 0)  # run again once it is free


def test_a_lock_released_while_it_retries_is_cancelled_in_the_same_run(dsn, conn):
    held = make_job(conn, queue="q")
    with psycopg.connect(dsn) as other:
        other.execute("SELECT 1 FROM jobqueue.jobs WHERE id = %s FOR UPDATE", (held,))
        threading.Timer(0.2, other.rollback).start()
        with Client(dsn, pool_size=1) as client:
            assert client.cancel_jobs(queue="q") == BulkCancel(1, 0)
    assert states(conn, [held]) == {held: "cancelled"}


def test_the_async_client_does_the_same(dsn, conn):
    ids = [make_job(conn, queue="q") for _ in range(3)]

    async def cancel() -> BulkCancel:
        async with AsyncClient(dsn, pool_size=1) as client:
            return await client.cancel_jobs(queue="q", batch_size=2)

    assert asyncio.run(cancel()) == BulkCancel(3, 0)
    assert set(states(conn, ids).values()) == {"cancelled"}


def keyed(conn, key: str, n: int, queue: str = "q") -> list:
    return [
        conn.execute(
            "SELECT jobqueue.enqueue('t', queue => %s, ordering_key => %s, producer_id => 'alice')", (queue, key)
        ).fetchone()[0]
        for _ in range(n)
    ]


def test_jobs_held_back_behind_an_ordering_key_are_cancelled_too(dsn, conn):
    """A key's later jobs wait (state waiting) for its head: a cancel by filter that took only
    pending jobs cancelled the head, the key released the next, and the rest ran."""
    order = keyed(conn, "customer-7", 5)
    other = keyed(conn, "customer-8", 2, queue="other")
    assert [states(conn, order)[j] for j in order] == ["pending"] + ["waiting"] * 4
    with Client(dsn, pool_size=1) as client:
        assert client.cancel_jobs(queue="q", batch_size=2) == BulkCancel(5, 0)
        assert set(states(conn, order).values()) == {"cancelled"}
        assert [states(conn, other)[j] for j in other] == ["pending", "waiting"]  # another queue: left
        assert client.cancel_jobs(queue="other", state="waiting") == BulkCancel(1, 0)
    assert [states(conn, other)[j] for j in other] == ["pending", "cancelled"]


def test_a_cancel_by_filter_is_one_audit_entry_with_its_filters(dsn, conn):
    for _ in range(5):
        make_job(conn, queue="q")
    with Client(dsn, pool_size=1) as client:
        assert client.cancel_jobs(queue="q", job_type="noop", batch_size=2).cancelled == 5
    entries = conn.execute("SELECT action, details FROM jobqueue.audit_log WHERE action = 'job.cancel_all'").fetchall()
    assert len(entries) == 1  # not one per batch (3 here), nor one per job
    assert (entries[0][1]["queue"], entries[0][1]["job_type"]) == ("q", "noop")
