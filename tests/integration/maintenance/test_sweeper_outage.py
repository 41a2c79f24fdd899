"""After a PostgreSQL restart, or a sweep that could not reach it, the sweeper leaves expired leases
alone for one lease: live workers renew theirs first (their heartbeats could not reach the database
either), and only the jobs of workers that stay silent are reclaimed — one lease later than usual.
Without this, an outage longer than what the leases had left (a crash recovery on a loaded box took
13 s against a 5 s lease) burned an attempt of every job in flight and refused the acks of jobs
that had finished."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

import psycopg
import pytest

from jobqueue.db import gateway as db
from jobqueue.maintenance.sweeper import Sweeper, SweeperOptions, Swept
from jobqueue.model.errors import DatabaseUnavailable
from jobqueue.runtime.clock import ManualClock
from jobqueue.store import jobs as job_store
from tests.support.factories import job_row, make_job

pytestmark = pytest.mark.slow

GRACE = 10.0  # the sweeper's lease_seconds: the hold after an outage, on the manual clock


def _expired_jobs(dsn: str) -> tuple:
    """Two processing jobs whose leases ran out a second ago: one of a worker that will renew it
    (`live`), one of a worker that never comes back (`dead`)."""
    gone = datetime.now(timezone.utc) - timedelta(seconds=1)
    with psycopg.connect(dsn, autocommit=True) as conn:
        live = make_job(conn, state="processing", locked_by="live-worker", locked_until=gone)
        dead = make_job(conn, state="processing", locked_by="dead-worker", locked_until=gone)
    return live, dead


def _renew(dsn: str, job_id) -> None:
    """The live worker's heartbeat: the lease of its attempt 1, 30 s more."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        call = job_store.extend_leases(
            worker_id="live-worker", attempts=[(job_id, 1)], lease_seconds=30, deadline_grace=30
        )
        assert db.run_sync(conn, call).written, "the heartbeat found no lease to renew"


def _states(dsn: str, *ids) -> list[str]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return [job_row(conn, job_id)["state"] for job_id in ids]


async def _with_sweeper(dsn: str, scenario) -> None:
    pool = db.async_pool(dsn, min_size=1, max_size=2, timeout=2.0, check=True)
    await pool.open(wait=True)
    clock = ManualClock(datetime.now(timezone.utc))
    try:
        await scenario(Sweeper(pool, SweeperOptions(interval=1.0, lease_seconds=GRACE), clock=clock), clock)
    finally:
        await pool.close()


def test_after_a_restart_live_workers_renew_first_and_a_silent_ones_jobs_come_back_one_lease_later(own_cluster):
    async def scenario(sweeper: Sweeper, clock: ManualClock) -> None:
        assert await sweeper.run_once() == Swept()  # knows the server now; nothing expired yet
        own_cluster.cluster.stop(mode="immediate")
        own_cluster.cluster.start()
        live, dead = _expired_jobs(own_cluster)

        assert await sweeper.run_once() == Swept()  # the restart is seen: expired leases wait
        assert sweeper.holding_until == clock.now() + timedelta(seconds=GRACE)
        assert _states(own_cluster, live, dead) == ["processing", "processing"]

        _renew(own_cluster, live)  # the live worker's heartbeat gets through meanwhile
        clock.advance(GRACE - 1)
        assert await sweeper.run_once() == Swept() and _states(own_cluster, live, dead) == ["processing", "processing"]

        clock.advance(1)  # one lease after the database came back: the silent worker's job returns
        assert await sweeper.run_once() == Swept(reclaimed=1)
        assert _states(own_cluster, live, dead) == ["processing", "pending"]

    asyncio.run(_with_sweeper(own_cluster, scenario))


def test_a_sweep_that_could_not_reach_the_database_holds_expired_leases_once_it_is_back(own_cluster):
    async def scenario(sweeper: Sweeper, clock: ManualClock) -> None:
        live, dead = _expired_jobs(own_cluster)
        with psycopg.connect(own_cluster, autocommit=True) as conn:  # no outage yet: reclaimed at once
            conn.execute("UPDATE jobqueue.jobs SET locked_until = now() + interval '1 hour' WHERE id = %s", (live,))
        assert await sweeper.run_once() == Swept(reclaimed=1) and _states(own_cluster, live, dead) == [
            "processing",
            "pending",
        ]

        own_cluster.cluster.stop(mode="fast")
        with pytest.raises(DatabaseUnavailable):
            await sweeper.run_once()
        own_cluster.cluster.start()
        with psycopg.connect(own_cluster, autocommit=True) as conn:  # its lease ran out during the outage
            conn.execute("UPDATE jobqueue.jobs SET locked_until = now() - interval '1 second' WHERE id = %s", (live,))

        assert await sweeper.run_once() == Swept() and _states(own_cluster, live) == ["processing"]
        clock.advance(GRACE)
        assert await sweeper.run_once() == Swept(reclaimed=1) and _states(own_cluster, live) == [
            "pending"
        ]  # nobody renewed it

    asyncio.run(_with_sweeper(own_cluster, scenario))
