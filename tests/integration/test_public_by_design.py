"""What row-level security does not hide, by PostgreSQL's design (docs/security.md, "What
PostgreSQL keeps public"): these tests keep that page true. A producer login reads none of
another producer's rows, yet the planner's estimates and the catalog's counters describe every
row. (LISTEN on the event channels is the other such path: tests/integration/api/test_events.py.)"""

from __future__ import annotations

import json
import uuid

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from tests.support.roles import login_as  # noqa: F401 (a fixture)
from tests.support.waiting import wait_until


@pytest.fixture
def bobs_payroll(conn):
    """2,000 of bob's jobs in his queue 'payroll', 20 of alice's, statistics gathered (autovacuum would)."""
    conn.execute(
        "SELECT id FROM jobqueue.enqueue_many(%s)",
        (json.dumps([{"job_type": "pay", "queue": "payroll", "producer_id": "bob"}] * 2000),),
    )
    conn.execute(
        "SELECT id FROM jobqueue.enqueue_many(%s)",
        (json.dumps([{"job_type": "mine", "queue": "mine", "producer_id": "alice"}] * 20),),
    )
    conn.execute("ANALYZE jobqueue.jobs")


def _estimate(session: psycopg.Connection, queue: str) -> float:
    plan = session.execute("EXPLAIN (FORMAT JSON) SELECT * FROM jobqueue.jobs WHERE queue = %s", (queue,)).fetchone()[0]
    return plan[0]["Plan"]["Plan Rows"]


def test_a_producer_login_sees_none_of_another_producers_rows_but_the_planner_estimates_them(login_as, bobs_payroll):  # noqa: F811
    alice = login_as("producer", producer="alice")
    with psycopg.connect(alice, autocommit=True) as session:
        assert session.execute("SELECT count(*) FROM jobqueue.jobs WHERE queue = 'payroll'").fetchone()[0] == 0
        # pg_stats hides the column statistics of a table under row-level security ...
        assert (
            session.execute(
                "SELECT count(*) FROM pg_stats WHERE schemaname = 'jobqueue' AND tablename = 'jobs'"
            ).fetchone()[0]
            == 0
        )
        # ... but the planner uses them (= on text is leakproof): bob's queue shows in the estimate.
        assert _estimate(session, "payroll") >= 100 * _estimate(session, "a-queue-nobody-uses")


def test_any_login_reads_the_job_tables_size_and_write_counters(conn, dsn, bobs_payroll):
    """Even a login with no jobqueue role: the catalog is readable by every role of the database."""
    role = f"jqtest_nobody_{uuid.uuid4().hex[:8]}"
    conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
    try:
        with psycopg.connect(make_conninfo(dsn, user=role), autocommit=True) as session:
            for statement in ("SELECT count(*) FROM jobqueue.jobs", "SELECT jobqueue.enqueue('x')"):
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    session.execute(statement)
            assert (
                session.execute("SELECT count(*) FROM pg_roles WHERE rolname = 'jobqueue_producer'").fetchone()[0] == 1
            )
            assert (
                session.execute(
                    "SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
                    "WHERE n.nspname = 'jobqueue' AND p.proname = 'enqueue_many_unchecked' "
                    "AND p.prosrc LIKE '%%job_problem%%'"
                ).fetchone()[0]
                == 1
            )
            assert (
                session.execute(
                    "SELECT c.reltuples FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                    "WHERE n.nspname = 'jobqueue' AND c.relname = 'jobs'"
                ).fetchone()[0]
                == 2020
            )
            wait_until(
                lambda: (
                    session.execute(
                        "SELECT n_live_tup FROM pg_stat_all_tables WHERE schemaname = 'jobqueue' AND relname = 'jobs'"
                    ).fetchone()[0]
                    == 2020
                ),
                message="the live-row counter (statistics reach the views within a second)",
            )
    finally:
        wait_until(
            lambda: (
                not conn.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (role,)
                ).fetchall()
            ),
            message=f"no session of {role}",
        )
        conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))
