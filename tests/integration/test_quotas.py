"""Quotas hold on every path (issue 18): what the REST API refuses, SQL refuses too. Each test is
the attack, made as a real producer login over SQL: a payload of 20 MB, 50,000 jobs in one
enqueue_many, jobs past a queue's hard limit (or past the total, or on invented queue names), and a
producer session that holds a statement or a transaction open for ever."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from datetime import datetime, timezone
from typing import Callable

import psycopg
import pytest
from psycopg import errors as pg_errors
from psycopg import sql

from jobqueue import Client
from jobqueue.cli import main as cli_main
from jobqueue.config import ApiSettings, DbSettings
from jobqueue.db import gateway as db
from jobqueue.maintenance.gatekeeper import Gatekeeper, GatekeeperOptions
from jobqueue.model.errors import QueueFull, ValidationError
from jobqueue.model.names import MAX_BATCH_JOBS, MAX_PAYLOAD_BYTES
from jobqueue.runtime.clock import ManualClock
from tests.support.factories import count_jobs
from tests.support.maintenance import pools
from tests.support.roles import login_as  # noqa: F401 (a fixture)


def connect(dsn: str) -> psycopg.Connection:
    return psycopg.connect(dsn, autocommit=True)


def refused(conn: psycopg.Connection, error: type[Exception], statement: str, params: tuple = ()) -> psycopg.Error:
    with pytest.raises(error) as caught:
        conn.execute(statement, params)
    return caught.value


def payload_of_size(conn: psycopg.Connection, size: int) -> str:
    """JSON text whose jsonb is exactly ``size`` bytes as stored (pg_column_size)."""
    overhead = conn.execute("SELECT pg_column_size(jsonb_build_object('blob', repeat('x', 1000))) - 1000").fetchone()[0]
    text = json.dumps({"blob": "x" * (size - overhead)})
    assert conn.execute("SELECT pg_column_size(%s::jsonb)", (text,)).fetchone()[0] == size
    return text


# --- payloads and batches --------------------------------------------------------------------------


def test_a_sql_producer_cannot_store_a_20_mb_payload(login_as, conn):  # noqa: F811
    producer = login_as("producer")
    huge = json.dumps({"blob": "x" * (20 * 1024 * 1024)})
    with connect(producer) as pc:
        error = refused(pc, pg_errors.InvalidParameterValue, "SELECT jobqueue.enqueue('x', %s::jsonb)", (huge,))
        assert error.diag.column_name == "payload" and "at most 1048576 bytes" in error.diag.message_primary
        error = refused(
            pc,
            pg_errors.InvalidParameterValue,
            "SELECT * FROM jobqueue.enqueue_many(%s::jsonb)",
            (json.dumps([{"job_type": "x"}, {"job_type": "x", "payload": json.loads(huge)}]),),
        )
        assert error.diag.column_name == "jobs[1].payload"
        error = refused(
            pc,
            pg_errors.InvalidParameterValue,
            "SELECT jobqueue.enqueue('x', %s::jsonb, idempotency_key => 'k')",
            (huge,),
        )  # the keyed path too
        assert error.diag.column_name == "payload"
        # the bound itself: MAX_PAYLOAD_BYTES is accepted, one byte more is not
        pc.execute("SELECT jobqueue.enqueue('x', %s::jsonb)", (payload_of_size(conn, MAX_PAYLOAD_BYTES),))
        refused(
            pc,
            pg_errors.InvalidParameterValue,
            "SELECT jobqueue.enqueue('x', %s::jsonb)",
            (payload_of_size(conn, MAX_PAYLOAD_BYTES + 1),),
        )
    assert count_jobs(conn) == 1


def test_python_producers_get_the_same_bound_as_a_validation_error(dsn):
    with Client(dsn, pool_size=1) as client:
        with pytest.raises(ValidationError) as caught:
            client.enqueue("x", {"blob": "x" * (2 * 1024 * 1024)})
        assert caught.value.field == "payload"
        with pytest.raises(ValidationError) as caught:
            client.enqueue_many([{"job_type": "x"}, {"job_type": "x", "payload": {"blob": "x" * (2 * 1024 * 1024)}}])
        assert caught.value.field == "jobs[1].payload"


def test_a_cron_schedule_whose_every_fire_would_be_refused_is_refused_when_defined(conn):
    error = refused(
        conn,
        pg_errors.InvalidParameterValue,
        "INSERT INTO jobqueue.schedules (name, cron, job_type, payload) VALUES ('big', '* * * * *', 'x', %s)",
        (payload_of_size(conn, MAX_PAYLOAD_BYTES + 1),),
    )
    assert error.diag.column_name == "payload"


def test_a_sql_producer_cannot_enqueue_50000_jobs_in_one_statement(login_as, conn):  # noqa: F811
    producer = login_as("producer")
    with connect(producer) as pc:
        error = refused(
            pc,
            pg_errors.InvalidParameterValue,
            "SELECT count(*) FROM jobqueue.enqueue_many(%s::jsonb)",
            (json.dumps([{"job_type": "x"}] * 50_000),),
        )
        assert error.diag.column_name == "jobs"
        assert f"at most {MAX_BATCH_JOBS} jobs (got 50000)" in error.diag.message_primary
        assert count_jobs(conn) == 0
        done = pc.execute(
            "SELECT count(*) FROM jobqueue.enqueue_many(%s::jsonb)", (json.dumps([{"job_type": "x"}] * MAX_BATCH_JOBS),)
        ).fetchone()[0]
    assert done == MAX_BATCH_JOBS == count_jobs(conn)


def test_the_api_cannot_be_configured_past_what_the_database_takes():
    with pytest.raises(ValueError, match="JOBQUEUE_API_MAX_BATCH"):
        ApiSettings(max_batch=MAX_BATCH_JOBS + 1)


# --- the hard limits, for SQL producers ------------------------------------------------------------


def gatekeep(dsn: str, **options) -> Callable[[], int]:
    """``run()``: one run of a new gatekeeper (so each run counts) on a pool of its own: the gates
    it closed."""

    def run() -> int:
        async def once() -> int:
            async with pools(dsn) as (pool,):
                gated = await Gatekeeper(pool, GatekeeperOptions(**options)).run_once()
                assert gated.counted  # a new gatekeeper always counts
                return gated.closed

        return asyncio.run(once())

    return run


def queue_full(pc: psycopg.Connection, statement: str, params: tuple = ()) -> psycopg.Error:
    error = refused(pc, pg_errors.ConfigurationLimitExceeded, statement, params)
    assert error.diag.column_name == "queue"
    return error


def test_a_sql_producer_cannot_enqueue_past_a_queues_hard_limit(login_as, conn):  # noqa: F811
    """Issue 18: a job past a queue's hard limit was refused over REST and taken over SQL. Far-future
    jobs count: they are stored like any other (the REST limit counted only runnable ones)."""
    conn.execute("INSERT INTO jobqueue.queue_settings (queue, soft_limit, hard_limit) VALUES ('tight', 5, 10)")
    producer, worker = login_as("producer"), login_as("worker")
    run = gatekeep(worker)
    with connect(producer) as pc:
        for _ in range(10):
            pc.execute("SELECT jobqueue.enqueue('x', queue => 'tight', delay => interval '3000 days')")
        assert run() == 1  # as the worker login, as the maintenance leader runs it
        error = queue_full(pc, "SELECT jobqueue.enqueue('x', queue => 'tight')")
        assert json.loads(error.diag.message_detail) == {"reason": "queue_full", "queue": "tight"}
        assert "'tight' is at its hard limit (10 waiting jobs, limit 10)" in error.diag.message_primary
        queue_full(pc, "SELECT jobqueue.enqueue('x', queue => 'tight', idempotency_key => 'k')")
        queue_full(
            pc, 'SELECT * FROM jobqueue.enqueue_many(\'[{"job_type": "x"}, {"job_type": "x", "queue": "tight"}]\')'
        )
        assert count_jobs(conn, "tight") == 10 and count_jobs(conn) == 10  # nothing of the batch either
        pc.execute("SELECT jobqueue.enqueue('x', queue => 'roomy')")  # other queues are not held up
        conn.execute(
            "DELETE FROM jobqueue.jobs WHERE queue = 'tight' AND id IN "
            "(SELECT id FROM jobqueue.jobs WHERE queue = 'tight' LIMIT 1)"
        )
        assert run() == 0
        job = pc.execute("SELECT jobqueue.enqueue('x', queue => 'tight', idempotency_key => 'k')").fetchone()[0]
    assert count_jobs(conn, "tight") == 10
    # the refused enqueue held no key: this one made a job of its own
    assert conn.execute("SELECT job_id FROM jobqueue.idempotency_keys WHERE key = 'k'").fetchone()[0] == job


def test_the_python_client_gets_queue_full(dsn, conn):
    run = gatekeep(dsn, hard_limit=3)
    with Client(dsn, pool_size=1) as client:
        client.enqueue_many([{"job_type": "x", "queue": "small"}] * 3)
        run()
        with pytest.raises(QueueFull) as caught:
            client.enqueue("x", queue="small")
    assert caught.value.reason == "queue_full" and caught.value.queue == "small"


def test_a_sql_producer_cannot_pass_the_total_of_all_queues(login_as, conn):  # noqa: F811
    producer = login_as("producer")
    run = gatekeep(login_as("worker"), total_hard_limit=6)
    with connect(producer) as pc:
        for n in range(6):
            pc.execute("SELECT jobqueue.enqueue('x', queue => %s)", (f"spread-{n}",))
        run()
        error = queue_full(pc, "SELECT jobqueue.enqueue('x', queue => 'spread-0')")
        assert json.loads(error.diag.message_detail)["reason"] == "total_full"
        queue_full(pc, "SELECT jobqueue.enqueue('x', queue => 'spread-new')")


def test_a_sql_producer_cannot_invent_queues_past_the_cap(login_as, conn):  # noqa: F811
    """Each new queue name is a row in /queues and a series per priority in /metrics, and a probe in
    every count: past JOBQUEUE_API_MAX_QUEUES undeclared queues a new name is refused. Queues a live
    worker serves or an admin configured, and those already holding jobs, stay open."""
    producer, worker = login_as("producer"), login_as("worker")
    conn.execute("INSERT INTO jobqueue.queue_settings (queue, paused) VALUES ('configured', false)")
    conn.execute(
        "INSERT INTO jobqueue.workers (id, host, pid, queues, concurrency) VALUES ('w1', 'h', 1, '{served}', 1)"
    )
    run = gatekeep(worker, max_queues=3)
    with connect(producer) as pc:
        for n in range(3):
            pc.execute("SELECT jobqueue.enqueue('x', queue => %s)", (f"invented-{n}",))
        pc.execute("SELECT jobqueue.enqueue('x', queue => 'served')")  # declared: not counted
        assert run() == 1
        error = queue_full(pc, "SELECT jobqueue.enqueue('x', queue => 'invented-3')")
        assert json.loads(error.diag.message_detail) == {"reason": "too_many_queues", "queue": "invented-3"}
        queue_full(
            pc,
            'SELECT * FROM jobqueue.enqueue_many(\'[{"job_type": "x", "queue": "invented-0"}, '
            '{"job_type": "x", "queue": "invented-4"}]\')',
        )
        for known in ("invented-0", "served", "configured"):
            pc.execute("SELECT jobqueue.enqueue('x', queue => %s)", (known,))
            pc.execute("SELECT jobqueue.enqueue('x', queue => %s, idempotency_key => %s)", (known, known))
        pc.execute('SELECT * FROM jobqueue.enqueue_many(\'[{"job_type": "x", "queue": "invented-1"}]\')')
    assert count_jobs(conn, "invented-3") == 0


def test_a_gate_nobody_renews_opens_again(login_as, conn):  # noqa: F811
    """The gates are the leader's last count: a leader gone must not hold a queue shut for ever."""
    producer = login_as("producer")
    run = gatekeep(login_as("worker"), hard_limit=1)
    with connect(producer) as pc:
        pc.execute("SELECT jobqueue.enqueue('x', queue => 'once')")
        run()
        queue_full(pc, "SELECT jobqueue.enqueue('x', queue => 'once')")
        conn.execute("UPDATE jobqueue.queue_gates SET until = now() - interval '1 second'")
        pc.execute("SELECT jobqueue.enqueue('x', queue => 'once')")


def test_the_gatekeeper_counts_only_when_submissions_could_close_a_gate(dsn, conn):
    """Like the API's depth refresher: the job sequence is free to read, the count is not."""
    clock = ManualClock(datetime.now(timezone.utc))

    async def scenario() -> list[tuple[bool, int]]:
        async with pools(dsn) as (pool,):
            gate = Gatekeeper(pool, GatekeeperOptions(hard_limit=10, max_age=30.0), clock=clock)
            seen = []
            for jobs, seconds in ((0, 0), (0, 1), (5, 1), (5, 1), (0, 30)):
                if jobs:
                    conn.execute("INSERT INTO jobqueue.jobs (job_type) SELECT 'x' FROM generate_series(1, %s)", (jobs,))
                clock.advance(seconds)
                gated = await gate.run_once()
                seen.append((gated.counted, conn.execute("SELECT count(*) FROM jobqueue.queue_gates").fetchone()[0]))
            return seen

    # the first run counts; nothing submitted; 5 jobs cannot reach 10; 10 can (and do); too old
    assert asyncio.run(scenario()) == [(True, 0), (False, 0), (False, 0), (True, 1), (True, 1)]


# --- timeouts on the logins `jobqueue roles login` makes ---------------------------------------------


def drop_role(conn: psycopg.Connection, role: str) -> None:
    conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (role,))
    conn.execute("DELETE FROM jobqueue.producer_roles WHERE role_name = %s", (role,))
    conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


def test_roles_login_bounds_a_producers_statements_and_idle_transactions(conn, dsn, capsys):
    """Issue 18: producer logins had no statement or idle-in-transaction timeout, so one session
    could run a statement, or hold a transaction (and the xmin horizon) open, for ever."""
    login = f"jqtest_cli_{uuid.uuid4().hex[:8]}"
    try:
        assert (
            cli_main(
                [
                    "roles",
                    "login",
                    "--role",
                    "producer",
                    login,
                    "--statement-timeout",
                    "0.5",
                    "--idle-timeout",
                    "1",
                    "--dsn",
                    dsn,
                ]
            )
            == 0
        )
        out, err = capsys.readouterr()
        assert "statement_timeout 500ms, idle_in_transaction_session_timeout 1s" in err
        with connect(out.strip()) as pc:
            assert pc.execute("SHOW statement_timeout").fetchone()[0] == "500ms"
            refused(pc, pg_errors.QueryCanceled, "SELECT pg_sleep(3)")
        with psycopg.connect(out.strip()) as pc:  # a transaction left open
            pc.execute("SELECT jobqueue.enqueue('x')")
            time.sleep(2)
            with pytest.raises((pg_errors.IdleInTransactionSessionTimeout, psycopg.OperationalError)):
                pc.execute("SELECT 1")  # the server ended the session, and its transaction
        assert count_jobs(conn) == 0
        # the defaults: JOBQUEUE_STATEMENT_TIMEOUT and JOBQUEUE_IDLE_IN_TRANSACTION_TIMEOUT (60 s each)
        assert cli_main(["roles", "login", "--role", "producer", login, "--dsn", dsn]) == 0
        with connect(capsys.readouterr()[0].strip()) as pc:
            assert [
                pc.execute(f"SHOW {name}").fetchone()[0]
                for name in ("statement_timeout", "idle_in_transaction_session_timeout")
            ] == ["1min", "1min"]
        assert cli_main(["roles", "login", "--role", "producer", login, "--statement-timeout", "-1", "--dsn", dsn]) == 2
    finally:
        drop_role(conn, login)


def test_worker_and_api_logins_keep_the_timeouts_their_processes_ask_for(conn, dsn, capsys):
    """jobqueue's own connections send their timeouts as startup options, which win over the role's:
    the reindexer's unbounded session, the worker's and the API's JOBQUEUE_*_TIMEOUT."""
    made = []
    try:
        for kind in ("worker", "api"):
            login = f"jqtest_{kind}_{uuid.uuid4().hex[:8]}"
            made.append(login)
            assert cli_main(["roles", "login", "--role", kind, login, "--statement-timeout", "0.5", "--dsn", dsn]) == 0
            role_dsn = capsys.readouterr()[0].strip()
            settings = DbSettings(dsn=role_dsn, statement_timeout=120.0)
            session = db.Session.of(settings, "test")
            with db.connect_sync(session) as own:
                assert own.execute("SHOW statement_timeout").fetchone()[0] == "2min"
            with db.connect_sync(session.unbounded()) as reindexer:
                assert reindexer.execute("SHOW statement_timeout").fetchone()[0] == "0"
                reindexer.execute("SELECT pg_sleep(0.8)")  # past the role's 0.5 s
    finally:
        for login in made:
            drop_role(conn, login)
