"""The reindexer: a live-state index bloated by churn is rebuilt concurrently (and what a failed
rebuild left behind is dropped first); a healthy one is left alone."""

from __future__ import annotations

import asyncio

import psycopg
import pytest

from jobqueue import db
from jobqueue.config import Settings
from jobqueue.errors import DatabaseBusy
from jobqueue.maintenance.reindexer import Reindexer
from jobqueue.store import reindex as reindex_store
from tests.support.maintenance import pools
from tests.support.waiting import wait_until


def reindex(dsn: str, **options) -> list[int]:
    """Two runs on one connection pool: the second must not be hurt by the first (prepared statements)."""
    async def main() -> list[int]:
        async with pools(dsn) as (pool,):
            reindexer = Reindexer(pool, db.Session(dsn, "test-reindexer"), **options)
            return [await reindexer.run_once(), await reindexer.run_once()]
    return asyncio.run(main())


def index_file(conn, name: str) -> tuple[int, int]:
    return conn.execute("SELECT relfilenode, pg_relation_size(oid) FROM pg_class WHERE relname = %s",
                        (name,)).fetchone()


def test_a_bloated_claim_index_is_rebuilt_and_a_healthy_one_left_alone(dsn, conn):
    conn.execute("INSERT INTO jobqueue.jobs (job_type, queue) SELECT 'x', 'q' || (g % 7) FROM generate_series(1, 60000) g")
    conn.execute("VACUUM ANALYZE jobqueue.jobs")
    healthy = index_file(conn, "jobs_claim_idx")
    assert reindex(dsn, min_pages=50) == [0, 0]
    assert index_file(conn, "jobs_claim_idx") == healthy

    conn.execute("DELETE FROM jobqueue.jobs WHERE seq > 100")  # a burst drained: the pages stay
    conn.execute("VACUUM ANALYZE jobqueue.jobs")
    assert index_file(conn, "jobs_claim_idx")[1] == healthy[1]
    with pytest.raises(psycopg.errors.UniqueViolation):  # a rebuild that died half-way leaves this
        conn.execute("CREATE UNIQUE INDEX CONCURRENTLY jobs_claim_idx_ccnew ON jobqueue.jobs (job_type)")
    assert reindex(dsn, min_pages=50) == [1, 0]

    rebuilt = index_file(conn, "jobs_claim_idx")
    assert rebuilt[0] != healthy[0] and rebuilt[1] < healthy[1] / 10
    leftovers = conn.execute("SELECT count(*) FROM pg_class WHERE relname LIKE 'jobs_claim_idx_cc%'").fetchone()[0]
    assert leftovers == 0
    assert conn.execute("SELECT bool_and(indisvalid) FROM pg_index WHERE indrelid = 'jobqueue.jobs'::regclass").fetchone()[0]
    plan = conn.execute("EXPLAIN SELECT id FROM jobqueue.jobs WHERE state = 'pending' AND queue = 'q1' "
                        "ORDER BY priority, run_at, seq LIMIT 1").fetchall()
    assert "jobs_claim_idx" in str(plan)


def test_only_the_live_state_indexes_can_be_rebuilt():
    with pytest.raises(ValueError):
        reindex_store.rebuild("jobs_pkey")


def test_the_reindexer_is_a_leader_service_unless_turned_off(dsn):
    from jobqueue.maintenance.runner import Maintenance
    from jobqueue.notifier import Notifier

    def names(**overrides) -> list[str]:
        settings = Settings(dsn=dsn, **overrides)
        return [service.name for service in Maintenance(settings, Notifier(dsn), "me").services]

    assert "reindexer" in names() and "reindexer" not in names(reindex_interval=0)
    with pytest.raises(ValueError):
        Settings(dsn=dsn, reindex_interval=-1)


def test_a_rebuild_waits_out_older_transactions_past_the_statement_and_lock_timeouts(dsn, conn):
    """REINDEX CONCURRENTLY waits for every transaction that writes the table: harmless, and it
    must not be cut after JOBQUEUE_LOCK_TIMEOUT like an ordinary statement (which it would be)."""
    settings = Settings(dsn=dsn, statement_timeout=0.2, lock_timeout=0.2)
    holder = psycopg.connect(dsn)  # a writing transaction left open: every rebuild waits for it
    holder.execute("INSERT INTO jobqueue.jobs (job_type, queue) VALUES ('x', 'q')")

    async def main() -> int:
        pool = db.async_pool(dsn, settings=settings, name="test-reindexer")
        await pool.open(wait=True)
        try:
            async with await db.connect(db.Session.of(settings, "bounded")) as bounded:
                with pytest.raises(DatabaseBusy):  # an ordinary connection gives the same wait up
                    await db.run(bounded, reindex_store.rebuild("jobs_claim_idx"))
            reindexer = Reindexer(pool, db.Session.of(settings, "test-reindexer"), factor=0, min_pages=0)
            rebuilding = asyncio.create_task(reindexer.run_once())
            waited = await asyncio.to_thread(wait_until, lambda: conn.execute(
                "SELECT 1 FROM pg_stat_activity WHERE application_name = 'test-reindexer' AND wait_event_type = 'Lock'"
                " AND query LIKE '%CONCURRENTLY%' AND now() - query_start > interval '1 second'").fetchone(),
                timeout=10, message="a rebuild waiting past its timeouts")
            assert waited and not rebuilding.done()
            holder.commit()
            return await asyncio.wait_for(rebuilding, 30)
        finally:
            holder.close()
            await pool.close()

    assert asyncio.run(main()) == 4  # every live-state index, the leftover of the cut rebuild dropped first
    assert conn.execute("SELECT count(*) FROM pg_class WHERE relname LIKE 'jobs_%_cc%'").fetchone()[0] == 0
    assert conn.execute("SELECT bool_and(indisvalid) FROM pg_index WHERE indrelid = 'jobqueue.jobs'::regclass").fetchone()[0]
