"""The vacuumer: the job table is vacuumed once enough dead rows wait, and not when there are few,
when an old snapshot would keep them anyway, or when someone else holds the table's lock."""

from __future__ import annotations

import asyncio

import psycopg

from jobqueue.db import gateway as db
from jobqueue.maintenance.vacuumer import Vacuumer, VacuumerOptions
from tests.support.maintenance import pools
from tests.support.waiting import wait_until


def vacuum(dsn: str, **options) -> int:
    async def main() -> int:
        async with pools(dsn) as (pool,):
            return (await Vacuumer(pool, db.Session(dsn, "test-vacuumer"), VacuumerOptions(**options)).run_once()).count

    return asyncio.run(main())


def vacuums(conn) -> int:
    return conn.execute(
        "SELECT vacuum_count FROM pg_stat_user_tables WHERE relid = 'jobqueue.jobs'::regclass"
    ).fetchone()[0]


def dead_rows(conn) -> int:
    return conn.execute(
        "SELECT n_dead_tup FROM pg_stat_user_tables WHERE relid = 'jobqueue.jobs'::regclass"
    ).fetchone()[0]


def pruned(dsn: str, conn, count: int = 20_000) -> None:
    """``count`` jobs inserted and deleted on a connection of their own, whose counters reach the
    statistics when it closes; autovacuum is kept off the table so the test decides who vacuums."""
    conn.execute("ALTER TABLE jobqueue.jobs SET (autovacuum_enabled = false)")
    with psycopg.connect(dsn, autocommit=True) as writer:
        writer.execute(
            "INSERT INTO jobqueue.jobs (job_type, queue) SELECT 'x', 'q' FROM generate_series(1, %s)", (count,)
        )
        writer.execute("DELETE FROM jobqueue.jobs")
    wait_until(lambda: dead_rows(conn) >= count, message="the deletes in the statistics")


def test_a_table_full_of_dead_rows_is_vacuumed_and_then_left_alone(dsn, conn):
    pruned(dsn, conn)
    pages = conn.execute("SELECT pg_relation_size('jobqueue.jobs')").fetchone()[0]
    assert vacuum(dsn, min_dead=10_000) == 1
    assert vacuums(conn) == 1 and dead_rows(conn) == 0
    assert conn.execute("SELECT pg_relation_size('jobqueue.jobs')").fetchone()[0] < pages  # the empty tail went
    assert conn.execute(
        "SELECT last_analyze IS NOT NULL FROM pg_stat_user_tables WHERE relid = 'jobqueue.jobs'::regclass"
    ).fetchone()[0]
    assert vacuum(dsn, min_dead=10_000) == 0  # nothing left to do
    assert vacuums(conn) == 1


def test_few_dead_rows_are_left_to_autovacuum(dsn, conn):
    pruned(dsn, conn)
    assert vacuum(dsn, min_dead=50_000) == 0
    conn.execute("INSERT INTO jobqueue.jobs (job_type, queue) SELECT 'x', 'q' FROM generate_series(1, 200000)")
    wait_until(
        lambda: conn.execute(
            "SELECT n_live_tup >= 200000 FROM pg_stat_user_tables WHERE relid = 'jobqueue.jobs'::regclass"
        ).fetchone()[0],
        message="live rows",
    )
    assert vacuum(dsn, min_dead=10_000) == 0  # 20,000 dead are under a fifth of 200,000 live
    assert vacuums(conn) == 0


def test_nothing_is_vacuumed_while_an_old_snapshot_still_sees_the_dead_rows(dsn, conn):
    with psycopg.connect(dsn) as holder:
        holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        holder.execute("SELECT count(*) FROM jobqueue.leaders")
        pruned(dsn, conn)
        wait_until(
            lambda: conn.execute(
                "SELECT 1 FROM pg_stat_activity WHERE pid = %s AND now() - xact_start > interval '0.3 s'",
                (holder.info.backend_pid,),
            ).fetchone(),
            message="an old snapshot",
        )
        assert vacuum(dsn, min_dead=10_000, max_xact_age=0.2) == 0
        assert vacuums(conn) == 0
        holder.rollback()
    assert vacuum(dsn, min_dead=10_000, max_xact_age=0.2) == 1


def test_a_table_someone_holds_is_skipped_without_waiting(dsn, conn):
    pruned(dsn, conn)
    with psycopg.connect(dsn) as holder:  # what a concurrent rebuild or VACUUM holds
        holder.execute("LOCK TABLE jobqueue.jobs IN SHARE UPDATE EXCLUSIVE MODE")
        assert vacuum(dsn, min_dead=10_000) == 0
        holder.rollback()
    assert vacuums(conn) == 0
    assert vacuum(dsn, min_dead=10_000) == 1
