"""One locked row must not stall a worker: another transaction holding a row lock on one job a
worker runs (an operator's SELECT … FOR UPDATE, a cancel inside a caller's open transaction) used
to block the worker's one lease renewal and its batched acks. The registry heartbeat went with
them, the worker was marked lost, the sweeper handed its other jobs out again, and jobs that had
succeeded were re-run or dead-lettered as LeaseExpired."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from datetime import datetime, timedelta, timezone

import psycopg
import pytest

from jobqueue import AsyncClient
from jobqueue.db import gateway as db
from jobqueue.store import jobs as job_store
from jobqueue.store import workers as worker_store
from jobqueue.worker.acks import AckBuffer
from jobqueue.worker.executor import COMPLETED, Outcome
from tests.support import apps
from tests.support.factories import job_row, make_job, states
from tests.support.waiting import wait_until
from tests.support.workers import WorkerThread, test_settings


@pytest.fixture(autouse=True)
def _clear_runs():
    apps.runs.clear()
    yield
    apps.runs.clear()


def errors(conn) -> list[tuple]:
    return conn.execute("SELECT job_id, attempt, error_type FROM jobqueue.job_errors").fetchall()


class Watch:
    """Samples the worker's registry row in the background while a lock is held: the worst age of
    its last heartbeat, and whether it was ever anything but running."""

    def __init__(self, dsn: str, worker_id: str) -> None:
        self.dsn, self.worker_id = dsn, worker_id
        self.worst_age = 0.0
        self.statuses: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self._stop.wait(0.1):
                status, age = conn.execute(
                    "SELECT status, extract(epoch FROM now() - last_heartbeat)::float8 "
                    "FROM jobqueue.workers WHERE id = %s",
                    (self.worker_id,),
                ).fetchone()
                self.statuses.add(status)
                self.worst_age = max(self.worst_age, age)

    def __enter__(self) -> "Watch":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)


def test_a_row_locked_longer_than_the_lease_costs_no_other_job_an_attempt(dsn, conn):
    """The issue's reproduction: lease 3 s, lock timeout 1 s, four running jobs, one of them
    locked by an operator's SELECT … FOR UPDATE for 7 s (more than two leases), on a worker with
    slots to spare. Before, the other three were reclaimed and run again (their leases were never
    renewed); now every job runs once."""
    ids = [make_job(conn, job_type="slow", payload={"seconds": 8}) for _ in range(4)]
    settings = test_settings(dsn, concurrency=8, lease_seconds=3.0, lock_timeout=1.0, sweep_interval=0.3)
    with WorkerThread(apps.queue, settings) as worker:
        wait_until(lambda: set(states(conn, ids).values()) == {"processing"}, timeout=10)
        with Watch(dsn, worker.worker.worker_id) as watch, psycopg.connect(dsn) as operator:
            operator.execute("SELECT * FROM jobqueue.jobs WHERE id = %s FOR UPDATE", (ids[0],))
            time.sleep(7.0)
            operator.rollback()
        wait_until(lambda: set(states(conn, ids).values()) == {"completed"}, timeout=20)
    assert sorted((run[0], run[1]) for run in apps.runs) == sorted((job_id, 1) for job_id in ids)
    assert errors(conn) == []
    assert [job_row(conn, job_id)["attempts"] for job_id in ids] == [1, 1, 1, 1]
    assert watch.statuses == {"running"}
    assert watch.worst_age < 3.0, watch.worst_age  # the registry kept beating (every second) through the lock


def test_acks_pass_a_row_locked_by_a_cancel_in_an_open_transaction(dsn, conn):
    """`client.cancel(id, connection=conn)` inside the caller's transaction holds the job's row
    until it commits. Four jobs finish while it is held: the three others are written at once
    (before, the one ack statement waited for the row, failed at the lock timeout and was retried
    for as long as the lock lasted); the held one is written when the lock goes — a success
    completes its job whatever the cancel request, and the sweeper does not take it meanwhile
    although the lock outlived its lease."""
    ids = [make_job(conn, job_type="slow", payload={"seconds": 1.0}) for _ in range(4)]
    settings = test_settings(dsn, concurrency=4, lease_seconds=2.0, lock_timeout=1.0, sweep_interval=0.3)

    async def cancel_in_a_transaction(locked: asyncio.Event, release: asyncio.Event) -> None:
        async with AsyncClient(dsn) as client:
            async with await psycopg.AsyncConnection.connect(dsn) as caller:
                assert (await client.cancel(ids[0], connection=caller)).value == "cancel_requested"
                locked.set()
                await release.wait()
                await caller.commit()

    with WorkerThread(apps.queue, settings):
        wait_until(lambda: set(states(conn, ids).values()) == {"processing"}, timeout=10)
        loop = asyncio.new_event_loop()
        locked, release = asyncio.Event(), asyncio.Event()
        holder = threading.Thread(target=loop.run_until_complete, args=(cancel_in_a_transaction(locked, release),))
        holder.start()
        try:
            wait_until(locked.is_set)
            wait_until(
                lambda: states(conn, ids[1:]) == {job_id: "completed" for job_id in ids[1:]},
                timeout=4,
                message="the unlocked jobs' acks",
            )
            assert job_row(conn, ids[0])["state"] == "processing"
            time.sleep(3.0)  # past the held job's lease: the sweeper must still leave it to its worker
        finally:
            loop.call_soon_threadsafe(release.set)
            holder.join(10)
        wait_until(lambda: job_row(conn, ids[0])["state"] == "completed", timeout=10)
    assert sorted(run[0] for run in apps.runs) == sorted(ids)  # each ran once
    assert errors(conn) == []
    row = job_row(conn, ids[0])
    assert row["attempts"] == 1 and row["cancel_requested"]


def test_the_sweeper_leaves_a_lease_its_live_worker_could_not_renew_for_a_lock(dsn, conn):
    """What the sweeper does with an expired lease: a row someone holds locked it skips (SKIP
    LOCKED); once the lock is gone the lease has long run out, yet its worker is alive and says in
    its registry beat that it could not renew that row — so the sweeper leaves it for the renewal
    that follows. The same lease is reclaimed once the worker falls silent, and a lease the live
    worker did not report blocked is reclaimed as usual."""
    db.run_sync(
        conn,
        worker_store.register(
            worker_id="w", host="h", pid=1, queues=["default"], concurrency=2, heartbeat_interval=2.0
        ),
    )
    blocked, forgotten = (make_job(conn, job_type="record") for _ in range(2))
    db.run_sync(conn, job_store.claim(worker_id="w", queues=["default"], limit=2, lease_seconds=3))
    now = datetime.now(timezone.utc)
    db.run_sync(
        conn, worker_store.heartbeat(worker_id="w", status="running", processed=0, failed=0, leases_blocked=[blocked])
    )
    with psycopg.connect(dsn) as operator:
        operator.execute("SELECT 1 FROM jobqueue.jobs WHERE id = %s FOR UPDATE", (blocked,))
        reclaimed = db.run_sync(conn, job_store.reclaim_expired(now=now + timedelta(seconds=3.5)))
        assert [r[0] for r in reclaimed] == [forgotten]  # the locked row is skipped, the forgotten one goes
    again = db.run_sync(conn, job_store.reclaim_expired(now=now + timedelta(seconds=3.5)))
    assert again == []  # unlocked now, expired, but its live worker reported it blocked
    silent = db.run_sync(conn, job_store.reclaim_expired(now=now + timedelta(seconds=3.5 + 3.0)))
    assert [r[0] for r in silent] == [blocked]  # no beat for three of its intervals: the worker is gone


def test_a_lease_that_ran_out_while_the_database_was_down_gets_one_lease_after_it_restarts(dsn, conn):
    """The fault campaign's producers scenario (PostgreSQL stopped -m immediate for 2 s, leases of
    5 s, leader lease 3 s) dead-lettered max_attempts=1 jobs as LeaseExpired, some that never ran:
    their leases ran out while the server was down, and when it came back the sweeper reclaimed
    them before their live workers had reconnected to renew them (or to give back a claim whose
    reply the stop cut off). The sweeper's own hold after an outage needs to have seen the server
    before it; the leadership had moved during the outage to a process whose sweeper never ran. A worker cannot renew
    while the server is down, so a lease of a worker that has not
    stopped counts only from the server's start: it is reclaimed one lease (three of its worker's
    heartbeat intervals) after that, if not renewed meanwhile."""
    db.run_sync(
        conn,
        worker_store.register(
            worker_id="w", host="h", pid=1, queues=["default"], concurrency=2, heartbeat_interval=2.0
        ),
    )
    db.run_sync(
        conn,
        worker_store.register(
            worker_id="gone", host="h", pid=2, queues=["default"], concurrency=1, heartbeat_interval=2.0
        ),
    )
    held, stopped = make_job(conn, job_type="record"), make_job(conn, job_type="record")
    db.run_sync(conn, job_store.claim(worker_id="w", queues=["default"], limit=1, lease_seconds=6))
    db.run_sync(conn, job_store.claim(worker_id="gone", queues=["default"], limit=1, lease_seconds=6))
    db.run_sync(conn, worker_store.deregister(worker_id="gone"))
    started = conn.execute("SELECT pg_postmaster_start_time()").fetchone()[0]
    # Both leases ran out one second after the server (re)started, as if they had been taken before it.
    conn.execute(
        "UPDATE jobqueue.jobs SET locked_until = %s WHERE id = ANY(%s)",
        (started + timedelta(seconds=1), [held, stopped]),
    )
    soon = db.run_sync(conn, job_store.reclaim_expired(now=started + timedelta(seconds=2)))
    assert [r[0] for r in soon] == [stopped]  # a stopped worker holds nothing; the live one's lease waits
    later = db.run_sync(conn, job_store.reclaim_expired(now=started + timedelta(seconds=6.5)))
    assert [(r[0], r[1]) for r in later] == [(held, "pending")]  # a lease after the start, never renewed


def outcome(job) -> Outcome:
    return Outcome(job=job, kind=COMPLETED, duration_ms=1.0, result_json=json.dumps({"n": job.id.hex}))


def test_an_ack_batch_that_fails_as_busy_is_split_so_one_row_cannot_hold_the_rest(dsn, conn):
    """A wait the ack cannot skip (another transaction's uncommitted result row for one of the
    jobs) fails the whole batch at the lock timeout. The batch is split until the one row is
    isolated: the other outcomes are written, that one is kept and written once the wait is gone."""
    for _ in range(8):
        make_job(conn, job_type="record")
    jobs = db.run_sync(conn, job_store.claim(worker_id="w", queues=["default"], limit=8, lease_seconds=60))
    stuck = jobs[5]

    async def scenario() -> tuple[set, int, set]:
        pool = db.async_pool(dsn, min_size=1, max_size=2, settings=test_settings(dsn, lock_timeout=0.5).db)
        await pool.open(wait=True)
        flushed: set = set()
        acks = AckBuffer(pool, "w", batch_size=100, on_flushed=lambda batch, accepted: flushed.update(accepted))
        runner = asyncio.create_task(acks.run())
        try:
            async with await psycopg.AsyncConnection.connect(dsn) as other:
                await other.execute(
                    "INSERT INTO jobqueue.job_results (job_id, outcome, result) VALUES (%s, 'completed', '{}')",
                    (stuck.id,),
                )
                for job in jobs:
                    acks.add(outcome(job))
                await asyncio.wait_for(_until(lambda: len(flushed) == 7), 15)
                during = set(flushed)
                backlog = acks.backlog
                await other.rollback()
            await asyncio.wait_for(acks.drain(timeout=10), 12)
            return during, backlog, flushed
        finally:
            runner.cancel()
            await asyncio.gather(runner, return_exceptions=True)
            await pool.close()

    during, backlog, flushed = asyncio.run(scenario())
    assert during == {job.id for job in jobs} - {stuck.id} and backlog == 1
    assert flushed == {job.id for job in jobs}
    assert set(states(conn, [job.id for job in jobs]).values()) == {"completed"}


async def _until(predicate) -> None:
    while not predicate():
        await asyncio.sleep(0.02)
