"""Through a real PgBouncer 1.18 (Debian's) in transaction pooling mode, with JOBQUEUE_PGBOUNCER=1:
migrations, CLI one-shots, worker processes, the REST API, cron and leader election all work,
with no server-side prepared statement (DuplicatePreparedStatement/InvalidSqlStatementName) and
with the timeouts applied by the role's settings, which jobqueue checks because it cannot send them."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
import time

import httpx
import pytest
from psycopg import sql

from jobqueue.api.serve import wait_ready
from jobqueue.client import AsyncClient, Client
from jobqueue.config import DbSettings, Settings
from jobqueue.db import gateway as db
from jobqueue.model.errors import DatabaseUnavailable
from tests.harness.devdb import free_port
from tests.integration.api.conftest import ApiServer
from tests.integration.api.test_events import EventReader
from tests.support import apps
from tests.support.maintenance import fired_ticks, insert_schedule
from tests.support.pgbouncer import MISSING, PgBouncer, binary
from tests.support.waiting import wait_until
from tests.support.workers import WorkerThread, spawn_worker, terminate

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

#: What the role is given on the server (docs/operations.md: PgBouncer) and what jobqueue is told to expect.
ROLE_WAITS = {"statement_timeout": "30s", "lock_timeout": "5s", "idle_in_transaction_session_timeout": "30s"}
ENV = {
    "JOBQUEUE_PGBOUNCER": "1",
    "JOBQUEUE_STATEMENT_TIMEOUT": "30",
    "JOBQUEUE_LOCK_TIMEOUT": "5",
    "JOBQUEUE_IDLE_IN_TRANSACTION_TIMEOUT": "30",
}
PREPARED_STATEMENT_ERRORS = ("DuplicatePreparedStatement", "InvalidSqlStatementName", "prepared statement")


@pytest.fixture
def bouncer(pg_server):
    if binary() is None:
        pytest.fail(MISSING)
    running = PgBouncer(pg_server.admin_dsn)
    yield running
    running.close()


def give_role_the_waits(conn, bouncer: PgBouncer) -> None:
    """The server-side configuration behind PgBouncer (docs/operations.md): the role's settings in this
    database, then RECONNECT so that server connections opened before take them too."""
    for name, value in ROLE_WAITS.items():
        conn.execute(
            sql.SQL("ALTER ROLE CURRENT_USER IN DATABASE {} SET {} = {}").format(
                sql.Identifier(conn.info.dbname), sql.Identifier(name), sql.Literal(value)
            )
        )
    bouncer.admin("RECONNECT")


def jobqueue(dsn: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", "import sys; from jobqueue.cli import main; sys.exit(main())", *args],
        env=dict(os.environ, JOBQUEUE_DSN=dsn, **ENV),
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )


def test_pgbouncer_mode_sends_no_startup_options_and_checks_the_role_applies_the_waits(bouncer, dsn, conn, caplog):
    through = bouncer.dsn_for(dsn)
    with pytest.raises(DatabaseUnavailable, match="unsupported startup parameter: options"):
        db.connect_sync(db.Session.of(DbSettings(dsn=through), "without-the-mode"))

    settings = Settings.from_env(dict(ENV, JOBQUEUE_DSN=through))
    assert settings.db.pgbouncer and not settings.db.listen  # poll-only: no LISTEN through a transaction pooler

    async def enqueue_twice() -> None:
        async with AsyncClient(settings=settings, pool_size=1) as client:
            for _ in range(2):
                await client.enqueue("x")

    with caplog.at_level(logging.WARNING, logger="jobqueue.db"):
        asyncio.run(enqueue_twice())
        assert "cannot set its timeouts" in caplog.text and "lock_timeout 0 vs 5000" in caplog.text
        caplog.clear()
        give_role_the_waits(conn, bouncer)
        asyncio.run(enqueue_twice())
        assert caplog.text == ""
    with Client(settings=settings, pool_size=1) as client:
        client.enqueue("x")
    with pytest.raises(ValueError, match="JOBQUEUE_DIRECT_DSN"):
        Settings.from_env(dict(ENV, JOBQUEUE_DSN=through, JOBQUEUE_LISTEN="1"))


def leader(conn) -> int | None:
    """The pid of the process holding the live maintenance lease."""
    row = conn.execute(
        "SELECT leader_id FROM jobqueue.leaders WHERE name = 'maintenance' AND expires_at > now()"
    ).fetchone()
    return int(row[0].split(":")[1]) if row else None


def application_names(conn) -> list[str]:
    return [
        row[0]
        for row in conn.execute("SELECT application_name FROM pg_stat_activity WHERE datname = current_database()")
    ]


def completed(conn, ids: list) -> int:
    return conn.execute(
        "SELECT count(*) FROM jobqueue.jobs WHERE id = ANY(%s::uuid[]) AND state = 'completed'",
        ([str(job_id) for job_id in ids],),
    ).fetchone()[0]


@pytest.mark.slow
def test_workers_api_cron_and_leader_election_through_pgbouncer(bouncer, dsn, conn):
    give_role_the_waits(conn, bouncer)
    through = bouncer.dsn_for(dsn)
    fast = {"JOBQUEUE_POLL_INTERVAL": "0.2", "JOBQUEUE_LEADER_TTL": "2", "JOBQUEUE_SWEEP_INTERVAL": "0.5", **ENV}
    migrated = jobqueue(through, "migrate")
    assert migrated.returncode == 0, migrated.stderr
    created = jobqueue(through, "apikey", "create", "--producer", "acme")
    assert created.returncode == 0, created.stderr
    key = created.stdout.strip()
    insert_schedule(conn, "every-second", "* * * * * *", job_type="record")
    workers = [spawn_worker(through, "tests.support.apps:queue", "--concurrency", "4", env=fast) for _ in range(2)]
    port = free_port()
    api = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from jobqueue.cli import main; sys.exit(main())",
            "api",
            "--port",
            str(port),
        ],
        env=dict(os.environ, JOBQUEUE_DSN=through, **ENV),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
    )
    try:
        with Client(settings=Settings.from_env(dict(fast, JOBQUEUE_DSN=through))) as client:
            ids = [client.enqueue("record", {"n": n}) for n in range(200)]
            ids += client.enqueue_many([{"job_type": "record", "payload": {"n": n}} for n in range(300)])
        assert wait_ready(f"http://127.0.0.1:{port}", timeout=30), "API ready"
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {key}"}) as http:
            for n in range(50):
                response = http.post("/jobs", json={"job_type": "record", "payload": {"n": n}})
                assert response.status_code == 201, response.text
                ids.append(response.json()["id"])
            batch = http.post("/jobs/batch", json={"jobs": [{"job_type": "record"}] * 50})
            assert batch.status_code == 201, batch.text
            ids += [job["id"] for job in batch.json()["jobs"]]
            events = http.get("/events")
            assert events.status_code == 503 and events.json()["error"] == "events_unavailable"
        wait_until(lambda: completed(conn, ids) == len(ids), timeout=60, message=f"{len(ids)} jobs completed")
        wait_until(lambda: len(fired_ticks(conn, "every-second")) >= 2, timeout=20, message="cron ticks")

        first = wait_until(lambda: leader(conn), timeout=10, message="a leader")
        victim = next(worker for worker in workers if worker.pid == first)
        victim.send_signal(signal.SIGTERM)  # resigns; its NOTIFY reaches nobody (no LISTEN here)
        second = wait_until(
            lambda: (pid := leader(conn)) and pid != first and pid, timeout=10, message="the other worker to take over"
        )
        ticks = len(fired_ticks(conn, "every-second"))
        wait_until(
            lambda: len(fired_ticks(conn, "every-second")) >= ticks + 2,
            timeout=20,
            message="cron ticks under the new leader",
        )
        # PgBouncer passes each client's name on to the server connection it lends it; the lender's
        # last borrower shows, so the worker's polling claims appear among the maintenance calls.
        wait_until(
            lambda: any(name.startswith("jobqueue-worker ") for name in application_names(conn)),
            timeout=10,
            message="a server connection named after the worker using it",
        )
    finally:
        outputs = [terminate(worker) for worker in workers] + [terminate(api, timeout=20)]
    assert second in (worker.pid for worker in workers)
    for output in outputs:
        assert not any(error in output for error in PREPARED_STATEMENT_ERRORS), output
        assert "Traceback" not in output and "cannot set its timeouts" not in output, output
    assert all(worker.returncode == 0 for worker in workers)  # uvicorn re-raises SIGTERM: the API's is -15


def test_with_a_direct_dsn_listen_bypasses_pgbouncer_wakes_workers_and_streams_events(bouncer, dsn, conn):
    """JOBQUEUE_DIRECT_DSN: LISTEN (a worker's wake-ups, the API's /events) goes straight to
    PostgreSQL; the pools still go through PgBouncer."""
    give_role_the_waits(conn, bouncer)
    through = bouncer.dsn_for(dsn)
    settings = Settings.from_env(dict(ENV, JOBQUEUE_DSN=through, JOBQUEUE_DIRECT_DSN=dsn, JOBQUEUE_POLL_INTERVAL="60"))
    assert settings.db.listen
    api = ApiServer(settings.with_(api=settings.api.with_(key_cache_seconds=0.0))).start()
    try:
        with Client(settings=settings, pool_size=1) as client, WorkerThread(apps.queue, settings):
            key = client.create_api_key("alice")[0]
            reader = EventReader(api.url, key)
            try:
                started = time.monotonic()
                job_id = client.enqueue("record", producer_id="alice")
                events = reader.take(3)
                took = time.monotonic() - started
            finally:
                reader.close()
    finally:
        api.stop()
    assert [(name, data["job_id"]) for name, data in events] == [
        ("job.queued", str(job_id)),
        ("job.started", str(job_id)),
        ("job.completed", str(job_id)),
    ]
    assert took < 10  # a NOTIFY woke the idle worker: its poll interval is 60 s


def test_transactions_ordering_keys_and_progress_through_pgbouncer(bouncer, dsn, conn):
    """job.transaction() is one server connection for its whole transaction, its deadline settings
    are local to it, and the ordering keys' locks are transaction locks: all of it works in
    PgBouncer's transaction mode."""
    from tests.support import ledger_app

    give_role_the_waits(conn, bouncer)
    conn.execute(ledger_app.SCHEMA + ledger_app.ORDERED_SCHEMA)
    through = bouncer.dsn_for(dsn)
    fast = {"JOBQUEUE_POLL_INTERVAL": "0.2", "LEDGER_DSN": dsn, **ENV}
    worker = spawn_worker(through, "tests.support.ledger_app:queue", "--concurrency", "8", env=fast)
    try:
        with Client(settings=Settings.from_env(dict(fast, JOBQUEUE_DSN=through))) as client:
            ids = client.enqueue_many(
                [{"job_type": "credit", "payload": {"amount": 2}} for _ in range(40)]
                + [{"job_type": "credit_sync"} for _ in range(10)]
                + [
                    {"job_type": "ordered", "ordering_key": f"k{n % 2}", "payload": {"key": f"k{n % 2}", "n": n // 2}}
                    for n in range(20)
                ]
            )
            reported = client.enqueue("report", {"steps": 3})
            ids.append(reported)
            wait_until(lambda: completed(conn, ids) == len(ids), timeout=60, message=f"{len(ids)} jobs completed")
            assert client.get(reported).progress.done == 3
    finally:
        output = terminate(worker)
    assert conn.execute("SELECT count(*), count(DISTINCT job_id) FROM public.ledger").fetchone() == (50, 50)
    for key in ("k0", "k1"):
        order = [
            r[0]
            for r in conn.execute("SELECT n FROM public.ordered_runs WHERE ordering_key = %s ORDER BY started", (key,))
        ]
        assert order == list(range(10))
    assert not any(error in output for error in PREPARED_STATEMENT_ERRORS), output
    assert "Traceback" not in output, output
