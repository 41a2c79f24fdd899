"""The connections jobqueue opens: each names what opened it in pg_stat_activity, each has bounded
waits (statement, lock, idle in transaction) that surface as `DatabaseBusy`/`DatabaseUnavailable`,
the statements that must wait long are exempt, and a read-only or under-privileged role gives a
clear error (never a driver exception)."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time

import httpx
import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from jobqueue import cli
from jobqueue.cli.oneshot import open_client
from jobqueue.client import Client
from jobqueue.client.validation import NewJob
from jobqueue.config import DbSettings, Settings
from jobqueue.db import gateway as db
from jobqueue.model.errors import DatabaseBusy, DatabaseUnavailable, PermissionDenied
from jobqueue.store import meta as meta_store
from jobqueue.store import migrate
from tests.integration.api.conftest import ApiServer, api_settings
from tests.support import apps
from tests.support.factories import make_job
from tests.support.gate import TcpGate
from tests.support.roles import reader_dsn  # noqa: F401 (a fixture)
from tests.support.waiting import wait_until
from tests.support.workers import WorkerThread, terminate, test_settings

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def backends(conn: psycopg.Connection) -> list[tuple[str, str]]:
    """(application_name, last query) of every other client connection to this test's database
    that has finished starting: an autovacuum worker of the database (no name: not ours), or a
    backend seen while it still authenticates (its startup packet's name not read yet, state
    NULL), made the check fail about once a full run."""
    return conn.execute(
        "SELECT application_name, query FROM pg_stat_activity "
        "WHERE datname = current_database() AND pid <> pg_backend_pid() "
        "AND backend_type = 'client backend' AND state IS NOT NULL"
    ).fetchall()


def test_every_connection_names_what_opened_it(dsn, conn):
    settings = test_settings(dsn)
    standalone = subprocess.Popen(
        [sys.executable, "-c", "import sys; from jobqueue.cli import main; sys.exit(main())", "maintenance"],
        env=dict(os.environ, JOBQUEUE_DSN=dsn),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    api = ApiServer(api_settings(dsn)).start()
    try:
        with (
            Client(dsn, settings=settings) as client,
            Client(dsn, settings=settings, application_name="billing"),
            open_client(settings),
            WorkerThread(apps.queue, settings) as worker,
        ):
            key = client.create_api_key("alice")[0]
            with httpx.stream("GET", api.url + "/events", headers={"Authorization": f"Bearer {key}"}) as stream:
                assert stream.status_code == 200  # its LISTEN connection is open now
                worker_id = worker.worker.worker_id
                expected = {
                    "jobqueue-client",
                    "billing",
                    "jobqueue-cli",
                    f"jobqueue-worker {worker_id}",
                    f"jobqueue-maintenance {worker_id}",
                    "jobqueue-api",
                    f"jobqueue-maintenance {socket.gethostname()}:{standalone.pid}:maintenance",
                }
                seen = wait_until(
                    lambda: (rows := backends(conn)) and expected <= {name for name, _ in rows} and rows,
                    timeout=15,
                    message=f"connections named {expected}",
                )
    finally:
        api.stop()
        terminate(standalone)
    assert {name for name, _ in seen} == expected, "a connection jobqueue opened has no name of its own"
    listeners = {name for name, query in seen if query.startswith("LISTEN")}
    assert {f"jobqueue-worker {worker_id}", "jobqueue-api"} <= listeners


def settings_of(conn: psycopg.Connection) -> tuple[str, str, str]:
    return conn.execute(
        "SELECT current_setting('statement_timeout'), current_setting('lock_timeout'), "
        "current_setting('idle_in_transaction_session_timeout')"
    ).fetchone()


def test_pools_and_own_connections_get_the_configured_waits_a_callers_connection_is_left_alone(dsn):
    settings = DbSettings(dsn=dsn, statement_timeout=12.5, lock_timeout=0, idle_in_transaction_timeout=3)
    wanted = ("12500ms", "0", "3s")

    async def pooled_and_own() -> list[tuple]:
        pool = db.async_pool(dsn, settings=settings, name="waits")
        await pool.open(wait=True)
        try:
            async with db.connection(pool) as conn:
                from_pool = await (
                    await conn.execute(
                        "SELECT current_setting('statement_timeout'), "
                        "current_setting('lock_timeout'), current_setting("
                        "'idle_in_transaction_session_timeout')"
                    )
                ).fetchone()
        finally:
            await pool.close()
        async with await db.connect(dsn, settings=settings) as own:
            from_own = await (await own.execute("SELECT current_setting('statement_timeout')")).fetchone()
        return [from_pool, from_own]

    from_pool, from_own = asyncio.run(pooled_and_own())
    assert from_pool == wanted and from_own == ("12500ms",)
    with db.connect_sync(db.Session.of(settings, "sync")) as conn:
        assert settings_of(conn) == wanted
    # the DSN's own options win where they clash (and are kept where they do not)
    with db.connect_sync(
        db.Session.of(
            settings.with_(dsn=make_conninfo(dsn, options="-c lock_timeout=4s -c search_path=elsewhere")), "x"
        )
    ) as conn:
        assert settings_of(conn) == ("12500ms", "4s", "3s")
        assert conn.execute("SHOW search_path").fetchone() == ("elsewhere",)

    with (
        psycopg.connect(dsn, autocommit=True) as mine,
        Client(dsn, settings=Settings(db=settings), pool_size=1) as client,
    ):
        before = settings_of(mine), mine.prepare_threshold
        client.submit([{"job_type": "x"}] * 3, connection=mine)
        client.submit([{"job_type": "x"}] * 3, connection=mine)
        assert (settings_of(mine), mine.prepare_threshold) == before


@pytest.mark.parametrize(
    "waits",
    [dict(lock_timeout=0.3, statement_timeout=0), dict(lock_timeout=0, statement_timeout=0.3)],
    ids=["lock", "statement"],
)
def test_a_statement_blocked_by_a_lock_gives_up_within_its_timeout_as_database_busy(dsn, conn, waits):
    job_id = make_job(conn)
    with (
        psycopg.connect(dsn) as holder,
        Client(dsn, settings=Settings(db=DbSettings(dsn=dsn, **waits)), pool_size=1) as client,
    ):
        holder.execute("LOCK TABLE jobqueue.jobs IN ACCESS EXCLUSIVE MODE")
        started = time.monotonic()
        with pytest.raises(DatabaseBusy, match=f"{next(k for k, v in waits.items() if v).split('_')[0]} timeout"):
            client.get(job_id)
        assert time.monotonic() - started < 2.0
        holder.rollback()
        assert client.get(job_id).id == job_id  # the same pooled connection goes on


def test_a_connection_left_idle_in_a_transaction_is_closed_by_the_server(dsn, conn):
    async def main() -> None:
        own = await db.connect(dsn, settings=DbSettings(dsn=dsn, idle_in_transaction_timeout=0.3), autocommit=False)
        try:
            pid = own.info.backend_pid
            await db.run(own, meta_store.schema_revision())  # a transaction opened, then left idle
            wait_until(
                lambda: not conn.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone(),
                timeout=5,
                message="the server to end the idle transaction",
            )
            with pytest.raises(DatabaseUnavailable, match="idle-in-transaction timeout"):
                await db.run(own, meta_store.schema_revision())
        finally:
            await own.close()

    asyncio.run(main())


def test_migrations_run_without_a_statement_timeout_even_where_the_database_sets_one(empty_dsn, conn):
    dbname = conninfo_to_dict(empty_dsn)["dbname"]
    conn.execute(sql.SQL("ALTER DATABASE {} SET statement_timeout = 1").format(sql.Identifier(dbname)))  # 1 ms
    with psycopg.connect(empty_dsn) as other, pytest.raises(psycopg.errors.QueryCanceled):
        other.execute("SELECT pg_sleep(0.05)")  # the database's setting is in force for everyone else
    migrate.upgrade(empty_dsn)
    assert migrate.is_up_to_date(empty_dsn)
    with db.connect_sync(migrate.migration_session(DbSettings(dsn=empty_dsn))) as migrating:
        assert settings_of(migrating) == ("0", "10s", "0")  # a migration still gives up on a lock
        assert migrating.execute("SHOW application_name").fetchone() == ("jobqueue-migrate",)


def test_a_read_only_server_is_unavailable_not_an_internal_error(dsn, conn):
    """What a connection that lands on a standby during a failover sees (SQLSTATE 25006)."""
    dbname = conninfo_to_dict(dsn)["dbname"]
    conn.execute(sql.SQL("ALTER DATABASE {} SET default_transaction_read_only = on").format(sql.Identifier(dbname)))
    with Client(dsn, pool_size=1) as client:
        with pytest.raises(DatabaseUnavailable, match="read-only"):
            client.enqueue("x")
    assert cli.main(["enqueue", "x", "--dsn", dsn]) == 2


def test_a_pooled_connection_to_a_demoted_server_is_dropped_not_reused(dsn):
    """After a failover a pooled connection that still reaches the old primary, now read-only
    (25006; simulated with a session turned read-only), is closed on its first failure, so the next
    call gets a fresh connection — not the same refusal again and again."""
    enqueue = NewJob.build("x").call()

    async def run_async() -> None:
        pool = db.async_pool(dsn, min_size=1, max_size=1)
        await pool.open()
        try:
            async with db.connection(pool) as conn:
                await conn.execute("SET default_transaction_read_only = on")
                demoted = conn.info.backend_pid
            with pytest.raises(DatabaseUnavailable, match="read-only"):
                async with db.connection(pool) as conn:
                    await db.run(conn, enqueue)
            async with db.connection(pool) as conn:
                assert conn.info.backend_pid != demoted
                await db.run(conn, enqueue)
        finally:
            await pool.close()

    asyncio.run(run_async())
    with db.sync_pool(dsn, min_size=1, max_size=1) as pool:
        with db.connection_sync(pool) as conn:
            conn.execute("SET default_transaction_read_only = on")
            demoted = conn.info.backend_pid
        with pytest.raises(DatabaseUnavailable, match="read-only"):
            with db.connection_sync(pool) as conn:
                db.run_sync(conn, enqueue)
        with db.connection_sync(pool) as conn:
            assert conn.info.backend_pid != demoted
            db.run_sync(conn, enqueue)


def test_a_missing_privilege_is_permission_denied_and_the_cli_says_so(reader_dsn, conn, capsys):  # noqa: F811
    job_id = make_job(conn)
    with Client(reader_dsn, pool_size=1) as client:
        assert client.get(job_id).id == job_id
        with pytest.raises(PermissionDenied, match="permission denied for function enqueue"):
            client.enqueue("x")
    assert cli.main(["enqueue", "x", "--dsn", reader_dsn]) == 2
    error = capsys.readouterr().err
    assert error.startswith("error: ") and "permission denied" in error and "Traceback" not in error


@pytest.mark.parametrize("kind", ["async", "sync"])
def test_a_pool_reconnects_within_about_a_second_of_the_server_coming_back(dsn, kind):
    """psycopg_pool retries a failed connection after 1, 2, 4, 8, 16 s: a worker whose server was
    down for 8 s (a crash recovery on a loaded machine) got its connection back 6 s after the
    server was up again, past its 5 s leases, and the fault campaign's producers scenario lost
    jobs to the sweeper. Every jobqueue pool now tries at least once a second."""
    params = conninfo_to_dict(dsn)
    with TcpGate(params.get("host", "127.0.0.1"), int(params["port"])) as gate:
        gated = make_conninfo(dsn, host="127.0.0.1", port=str(gate.port))
        outage = 7.5  # attempts at about 0, 1, 3, 7 s: the next uncapped one would come at 15 s

        async def async_back() -> float:
            pool = db.async_pool(gated, min_size=1, max_size=1, timeout=30)
            await pool.open(wait=False)
            try:
                await asyncio.sleep(outage)
                gate.open()
                opened = time.monotonic()
                async with db.connection(pool, timeout=30) as conn:
                    await conn.execute("SELECT 1")
                return time.monotonic() - opened
            finally:
                await pool.close()

        def sync_back() -> float:
            pool = db.sync_pool(gated, min_size=1, max_size=1, timeout=30)
            pool.open(wait=False)
            try:
                time.sleep(outage)
                gate.open()
                opened = time.monotonic()
                with pool.connection(timeout=30) as conn:
                    conn.execute("SELECT 1")
                return time.monotonic() - opened
            finally:
                pool.close()

        back_after = asyncio.run(async_back()) if kind == "async" else sync_back()
    assert back_after < db.RECONNECT_MAX_DELAY + 1.5, back_after
