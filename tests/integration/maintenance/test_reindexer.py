"""The reindexer: an index of the job table left mostly empty by deletes is rebuilt concurrently,
one per run, judged exactly (pgstattuple) or by an estimate that never mistakes a bulk load for
bloat; nothing happens while an old snapshot would stall a rebuild; what a failed rebuild left
behind is dropped on the next run."""

from __future__ import annotations

import asyncio

import psycopg
import pytest

from jobqueue.config import DbSettings, Settings
from jobqueue.db import gateway as db
from jobqueue.maintenance.reindexer import Reindexer, ReindexerOptions
from jobqueue.model.errors import DatabaseBusy
from jobqueue.store import reindex as reindex_store
from tests.support.settings import settings_of
from tests.support.waiting import wait_until

#: Small enough that a few tens of thousands of jobs are worth a rebuild in a test.
SMALL = {"min_waste_mb": 0.5}


def run(dsn: str, runs: int = 1, **options) -> list[int]:
    """``runs`` runs of one Reindexer (what each returned)."""

    async def main() -> list[int]:
        reindexer = Reindexer(db.Session(dsn, "test-reindexer"), ReindexerOptions(**{**SMALL, **options}))
        return [(await reindexer.run_once()).count for _ in range(runs)]

    return asyncio.run(main())


def index_file(conn, name: str) -> tuple[int, int]:
    """(relfilenode, bytes): a rebuild gives the index a new file."""
    return conn.execute(
        "SELECT relfilenode, pg_relation_size(oid) FROM pg_class WHERE relname = %s", (name,)
    ).fetchone()


def files(conn) -> dict[str, tuple[int, int]]:
    return {name: index_file(conn, name) for name in reindex_store.COVERED_INDEXES}


def load(conn, count: int) -> None:
    conn.execute(
        "INSERT INTO jobqueue.jobs (job_type, queue) SELECT 'x', 'q' || (g %% 7) FROM generate_series(1, %s) g",
        (count,),
    )


def bloat(conn, count: int = 60_000) -> dict[str, tuple[int, int]]:
    """``count`` jobs loaded and all but 100 deleted again, then vacuumed: the pages stay."""
    load(conn, count)
    conn.execute("VACUUM ANALYZE jobqueue.jobs")
    before = files(conn)
    conn.execute("DELETE FROM jobqueue.jobs WHERE seq > 100")
    # the delete's counters reach the statistics when this backend next flushes them; counted after
    # the ANALYZE they would look like changes since it (and the estimate would wait for the next)
    conn.execute("SELECT pg_stat_force_next_flush()")
    wait_until(
        lambda: conn.execute(
            "SELECT n_tup_del >= %s FROM pg_stat_user_tables WHERE relid = 'jobqueue.jobs'::regclass", (count - 100,)
        ).fetchone()[0],
        message="the delete in the statistics",
    )
    conn.execute("VACUUM ANALYZE jobqueue.jobs")
    assert files(conn) == before  # VACUUM gave nothing back
    return before


def all_valid(conn) -> bool:
    return conn.execute(
        "SELECT bool_and(indisvalid) FROM pg_index WHERE indrelid = 'jobqueue.jobs'::regclass"
    ).fetchone()[0]


def leftovers(conn) -> int:
    return conn.execute("SELECT count(*) FROM pg_class WHERE relname LIKE 'jobs_%%_cc%%'").fetchone()[0]


@pytest.fixture(params=["pgstattuple", "estimate", "no extension"])
def judged(request, conn) -> dict:
    """The three ways of judging bloat: pgstatindex() (migration 0010 installed it in the test
    cluster), the estimate asked for, and the estimate because the extension is not there."""
    if request.param == "no extension":
        conn.execute("DROP EXTENSION pgstattuple")
    return {"exact": request.param == "pgstattuple"}


def test_the_extension_is_there_for_the_exact_judgement(conn):
    assert conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'pgstattuple'").fetchone()


def test_bloated_indexes_shrink_one_per_run_and_a_bulk_load_is_not_bloat(dsn, conn, judged):
    conn.execute("VACUUM ANALYZE jobqueue.jobs")  # statistics of an empty table, then a bulk load
    load(conn, 60_000)  # no VACUUM/ANALYZE since: reltuples still says 0
    healthy = files(conn)
    assert run(dsn, **judged) == [0]
    assert files(conn) == healthy

    before = bloat(conn)
    big = [name for name, (_, size) in before.items() if size > 1024 * 1024]
    assert {"jobs_pkey", "jobs_claim_idx"} <= set(big)

    async def first_run() -> tuple[int, float, float]:
        reindexer = Reindexer(db.Session(dsn, "test-reindexer"), ReindexerOptions(**SMALL, **judged))
        done = await reindexer.run_once()
        assert done.rebuilt in big, done
        return done.count, reindexer.next_delay(), reindexer.follow_up

    done, delay, follow_up = asyncio.run(first_run())
    assert done == 1
    assert delay <= follow_up  # more to rebuild: the next one follows soon, not an interval later
    rebuilt = [name for name in big if files(conn)[name][0] != before[name][0]]
    assert len(rebuilt) == 1  # one index at a time

    assert run(dsn, runs=len(big), **judged)[-1] == 0  # the others, one per run, then nothing
    after = files(conn)
    for name in big:
        assert after[name][0] != before[name][0], name
        assert after[name][1] < before[name][1] / 10, name
    assert leftovers(conn) == 0 and all_valid(conn)
    plan = conn.execute(
        "EXPLAIN SELECT id FROM jobqueue.jobs WHERE state = 'pending' AND queue = 'q1' "
        "ORDER BY priority, run_at, seq LIMIT 1"
    ).fetchall()
    assert "jobs_claim_idx" in str(plan)


def test_nothing_is_rebuilt_below_the_thresholds(dsn, conn, judged):
    before = bloat(conn)
    assert run(dsn, min_waste_mb=100, **judged) == [0]  # less to win than asked for
    assert run(dsn, factor=1000, min_waste_mb=0.5, **judged) == [0]  # not that many times too big
    assert files(conn) == before


def test_nothing_happens_while_an_old_snapshot_is_held(dsn, conn):
    before = bloat(conn)
    with psycopg.connect(dsn) as holder:  # a long report: REPEATABLE READ, its snapshot taken
        holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        holder.execute("SELECT count(*) FROM jobqueue.leaders")
        wait_until(
            lambda: conn.execute(
                "SELECT 1 FROM pg_stat_activity WHERE pid = %s AND now() - xact_start > interval '0.3 s'",
                (holder.info.backend_pid,),
            ).fetchone(),
            message="an old snapshot",
        )
        assert run(dsn, max_xact_age=0.2) == [0]
        assert files(conn) == before and leftovers(conn) == 0  # no rebuild even began
        holder.rollback()
    assert run(dsn, max_xact_age=0.2) == [1]


def test_a_failed_rebuild_is_cleaned_up_on_the_next_run_and_a_rebuild_waits_past_timeouts(dsn, conn):
    """REINDEX CONCURRENTLY waits for every transaction that writes the table. On an ordinary
    connection the lock timeout cuts that wait, and the cut rebuild leaves an invalid
    ``_ccnew`` behind (which every write keeps updating): the next run drops it, then rebuilds.
    The reindexer's own connection has no such timeouts: it waits as long as it takes."""
    bloat(conn)
    settings = DbSettings(dsn=dsn, statement_timeout=0.2, lock_timeout=0.2)

    async def bounded_rebuild() -> None:
        async with await db.connect(db.Session.of(settings, "bounded")) as bounded:
            await db.run(bounded, reindex_store.rebuild("jobs_claim_idx"))

    with psycopg.connect(dsn) as holder:  # a young writing transaction
        holder.execute("INSERT INTO jobqueue.jobs (job_type, queue) VALUES ('x', 'q')")
        with pytest.raises(DatabaseBusy):
            asyncio.run(bounded_rebuild())
        holder.rollback()
    invalid = conn.execute(
        "SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE NOT i.indisvalid"
    ).fetchall()
    assert invalid == [("jobs_claim_idx_ccnew",)]

    assert run(dsn) == [2]  # the leftover dropped, then the most bloated index rebuilt
    assert leftovers(conn) == 0 and all_valid(conn)

    holder = psycopg.connect(dsn)
    holder.execute("INSERT INTO jobqueue.jobs (job_type, queue) VALUES ('x', 'q')")

    async def waits() -> int:
        reindexer = Reindexer(db.Session.of(settings, "test-reindexer"), ReindexerOptions(**SMALL))
        rebuilding = asyncio.create_task(reindexer.run_once())
        await asyncio.to_thread(
            wait_until,
            lambda: conn.execute(
                "SELECT 1 FROM pg_stat_activity WHERE application_name = 'test-reindexer' AND wait_event_type = 'Lock'"
                " AND query LIKE 'REINDEX%%' AND now() - query_start > interval '1 second'"
            ).fetchone(),
            timeout=10,
            message="a rebuild waiting past its timeouts",
        )
        assert not rebuilding.done()
        holder.commit()
        return (await asyncio.wait_for(rebuilding, 30)).count

    try:
        assert asyncio.run(waits()) == 1
    finally:
        holder.close()
    assert leftovers(conn) == 0 and all_valid(conn)


def test_only_the_job_table_indexes_and_their_leftovers_can_be_touched():
    with pytest.raises(ValueError):
        reindex_store.rebuild("idempotency_keys_pkey")
    with pytest.raises(ValueError):
        reindex_store.drop_leftover("jobs_pkey")  # an index, not a leftover
    with pytest.raises(ValueError):
        reindex_store.drop_leftover("schedules_pkey_ccnew")
    with pytest.raises(ValueError):
        ReindexerOptions(factor=0.5)


def test_the_vacuumer_and_reindexer_are_leader_services_unless_turned_off(dsn):
    from jobqueue.events.notifier import Notifier
    from jobqueue.maintenance.runner import Maintenance

    def names(**overrides) -> list[str]:
        settings = settings_of(dsn=dsn, **overrides)
        return [service.name for service in Maintenance.of(settings, Notifier(dsn), "me").services]

    assert {"reindexer", "vacuumer"} <= set(names())
    assert "reindexer" not in names(reindex_interval=0) and "vacuumer" not in names(vacuum_interval=0)
    for bad in (
        {"reindex_interval": -1},
        {"vacuum_interval": -1},
        {"reindex_factor": 0.9},
        {"vacuum_min_dead": -1},
        {"maintenance_xact_age": -1},
    ):
        with pytest.raises(ValueError):
            settings_of(dsn=dsn, **bad)
    env = Settings.from_env(
        {
            "JOBQUEUE_REINDEX_FACTOR": "3",
            "JOBQUEUE_REINDEX_MIN_WASTE_MB": "1",
            "JOBQUEUE_VACUUM_INTERVAL": "30",
            "JOBQUEUE_VACUUM_MIN_DEAD": "1000",
            "JOBQUEUE_MAINTENANCE_XACT_AGE": "5",
        }
    )
    assert (
        env.maintenance.reindex_factor,
        env.maintenance.reindex_min_waste_mb,
        env.maintenance.vacuum_interval,
        env.maintenance.vacuum_min_dead,
        env.maintenance.max_xact_age,
    ) == (3.0, 1.0, 30.0, 1000, 5.0)
    with pytest.raises(ValueError):
        Settings.from_env({"JOBQUEUE_VACUUM_MIN_DEAD": "many"})
