"""Least-privilege roles (migration 0019, docs/security.md "Roles"): each test logs in as a role
of its own, tries what it must not do (and gets a permission error) and does what it may."""

from __future__ import annotations

import asyncio
import re
import signal
import subprocess
import uuid
from datetime import datetime, timedelta, timezone

import psycopg
import pytest

from jobqueue import Client
from jobqueue.cli import main as cli_main
from jobqueue.db import gateway as db
from jobqueue.db.queries import queries
from jobqueue.maintenance.elector import Elector
from jobqueue.maintenance.historian import Historian
from jobqueue.maintenance.pruner import Pruner
from jobqueue.maintenance.reaper import Reaper
from jobqueue.maintenance.reindexer import Reindexer
from jobqueue.maintenance.scheduler import Scheduler
from jobqueue.maintenance.sweeper import Sweeper
from jobqueue.maintenance.vacuumer import Vacuumer, VacuumerOptions
from jobqueue.model.errors import PermissionDenied
from jobqueue.model.jobs import CancelOutcome, RetryOutcome
from jobqueue.runtime.clock import ManualClock
from tests.support import apps
from tests.support.factories import claim_params, finish_job, job_row, make_job
from tests.support.maintenance import insert_schedule, pools
from tests.support.roles import login_as  # noqa: F401 (a fixture)
from tests.support.workers import WorkerThread, spawn_worker, terminate, test_settings


def connect(dsn: str) -> psycopg.Connection:
    return psycopg.connect(dsn, autocommit=True)


def role_of(dsn: str) -> str:
    return psycopg.conninfo.conninfo_to_dict(dsn)["user"]


def refused(conn: psycopg.Connection, statement: str, params: tuple | dict = ()) -> str:
    """The statement's InsufficientPrivilege message (the test fails if it is allowed)."""
    with pytest.raises(psycopg.errors.InsufficientPrivilege) as caught:
        conn.execute(statement, params)
    return str(caught.value)


def test_a_producer_sees_and_cancels_only_its_own_jobs_results_and_errors(login_as, conn):  # noqa: F811
    a, b = login_as("producer"), login_as("producer")
    with connect(a) as pa, connect(b) as pb:
        mine = pa.execute("SELECT jobqueue.enqueue('x', '{\"card\": \"a\"}'::jsonb)").fetchone()[0]
        theirs = pb.execute("SELECT jobqueue.enqueue('x', '{\"card\": \"b\"}'::jsonb)").fetchone()[0]
        done = pb.execute('SELECT id FROM jobqueue.enqueue_many(\'[{"job_type": "y"}]\'::jsonb)').fetchone()[0]
        finish_job(conn, done, "completed", result={"secret": "b"})
        conn.execute(
            "INSERT INTO jobqueue.job_errors (job_id, attempt, error_type, message) VALUES (%s, 1, 'E', 'b failed')",
            (done,),
        )
        assert [row for row in pa.execute("SELECT id, producer_id, payload FROM jobqueue.jobs")] == [
            (mine, role_of(a), {"card": "a"})
        ]
        assert pa.execute("SELECT count(*) FROM jobqueue.job_results").fetchone()[0] == 0
        assert pa.execute("SELECT count(*) FROM jobqueue.job_errors").fetchone()[0] == 0
        assert pb.execute("SELECT result FROM jobqueue.job_results").fetchone()[0] == {"secret": "b"}
        assert pb.execute("SELECT message FROM jobqueue.job_errors").fetchone()[0] == "b failed"
        assert pa.execute("SELECT jobqueue.cancel(%s)", (theirs,)).fetchone()[0] == "not_found"
        assert pa.execute("SELECT jobqueue.cancel(%s)", (mine,)).fetchone()[0] == "cancelled"
    assert job_row(conn, theirs)["state"] == "pending"
    assert job_row(conn, mine)["state"] == "cancelled"


def test_a_producer_writes_no_table_claims_nothing_and_enqueues_as_no_one_else(login_as, conn):  # noqa: F811
    producer = login_as("producer")
    job = make_job(conn, producer_id=role_of(producer))
    with connect(producer) as pc:
        assert "permission denied for table jobs" in refused(pc, "UPDATE jobqueue.jobs SET priority = 0")
        assert "permission denied for table jobs" in refused(pc, "DELETE FROM jobqueue.jobs")
        assert "permission denied for table jobs" in refused(pc, "INSERT INTO jobqueue.jobs (job_type) VALUES ('x')")
        # the invoker's-rights body behind enqueue() is no way around it
        assert re.search(
            r"permission denied for table (jobs|queue_gates)",  # the gates are read first
            refused(pc, "SELECT jobqueue.enqueue_unchecked('x')"),
        )
        assert "permission denied for table api_keys" in refused(pc, "SELECT * FROM jobqueue.api_keys")
        assert "permission denied for table workers" in refused(pc, "SELECT * FROM jobqueue.workers")
        assert "permission denied for view dead_letters" in refused(pc, "SELECT * FROM jobqueue.dead_letters")
        # the claim reads the limits first, then updates jobs: refused either way
        assert re.search(
            r"permission denied for table (jobs|job_limits)", refused(pc, queries()["job_claim"], claim_params())
        )
        message = refused(pc, "SELECT jobqueue.enqueue('x', producer_id => 'someone_else')")
        assert f"role {role_of(producer)} enqueues as producer '{role_of(producer)}', not 'someone_else'" in message
        refused(
            pc,
            'SELECT * FROM jobqueue.enqueue_many(\'[{"job_type": "x"}, '
            '{"job_type": "x", "producer_id": "someone_else"}]\'::jsonb)',
        )
    assert job_row(conn, job)["state"] == "pending"
    assert conn.execute("SELECT count(*) FROM jobqueue.jobs").fetchone()[0] == 1  # nothing was written


def test_the_python_client_as_a_producer_role_is_one_with_rest_and_sql(login_as, conn, dsn):  # noqa: F811
    """A login role mapped to producer "billing" sees what billing's API key submitted, and its own
    jobs are billing's; a permission error is PermissionDenied, not a driver error."""
    producer = login_as("producer", producer="billing")
    over_rest = make_job(conn, producer_id="billing")
    make_job(conn, producer_id="someone_else")
    with Client(producer, pool_size=1) as client:
        own = client.enqueue("record", {"n": 1})
        assert client.get(own).producer_id == "billing"
        assert client.get(over_rest).producer_id == "billing"
        assert {job.id for job in client.list_jobs().jobs} == {own, over_rest}
        assert client.cancel(own) == CancelOutcome.CANCELLED
        with pytest.raises(PermissionDenied, match="enqueues as producer 'billing', not 'other'"):
            client.enqueue("record", producer_id="other")
        with pytest.raises(PermissionDenied, match="permission denied for table api_keys"):
            client.api_keys()
    assert job_row(conn, own)["producer_id"] == "billing"


def test_a_worker_role_runs_jobs_end_to_end_but_reads_no_api_key_and_changes_no_schema(login_as, conn):  # noqa: F811
    producer, worker = login_as("producer"), login_as("worker")
    with connect(worker) as wc:
        assert "permission denied for table api_keys" in refused(wc, "SELECT * FROM jobqueue.api_keys")
        assert "permission denied for table producer_roles" in refused(wc, "SELECT * FROM jobqueue.producer_roles")
        refused(wc, "CREATE TABLE jobqueue.mine (id int)")
        assert "must be owner" in refused(wc, "ALTER TABLE jobqueue.jobs ADD COLUMN extra int")
        assert "must be owner" in refused(wc, "REINDEX INDEX jobqueue.jobs_pkey")
    apps.runs.clear()
    with Client(producer, pool_size=1) as client:
        ids = [client.enqueue("record", {"n": n}) for n in range(3)]
        with WorkerThread(apps.queue, test_settings(worker)):
            results = [client.wait(job_id, timeout=15) for job_id in ids]
    assert results == [{"ok": True, "n": n} for n in range(3)]
    assert {run[0] for run in apps.runs} == set(ids)
    assert conn.execute("SELECT count(*) FROM jobqueue.workers").fetchone()[0] == 1  # it registered as a worker


def test_an_admin_retries_a_dead_letter_and_a_reader_reads_the_views_only(login_as, conn):  # noqa: F811
    admin, reader = login_as("admin"), login_as("readonly")
    dead = make_job(conn, state="dead_letter", producer_id="p")
    finish_job(conn, dead, "dead_letter")
    with connect(reader) as rc:
        assert [row[0] for row in rc.execute("SELECT id FROM jobqueue.dead_letters")] == [dead]
        assert rc.execute("SELECT count(*) FROM jobqueue.queue_stats").fetchone()[0] >= 1
        assert "permission denied for table jobs" in refused(rc, "UPDATE jobqueue.jobs SET priority = 0")
        assert "permission denied for table api_keys" in refused(rc, "SELECT * FROM jobqueue.api_keys")
        refused(rc, "SELECT jobqueue.enqueue('x')")
    with Client(admin, pool_size=1) as client:
        assert client.retry_dead(dead) == RetryOutcome.RETRIED
        key, _ = client.create_api_key("p")
        assert [k.producer_id for k in client.api_keys()] == ["p"]
    assert job_row(conn, dead)["state"] == "pending"
    with connect(admin) as ac:
        refused(ac, "TRUNCATE jobqueue.jobs")
        assert "must be owner" in refused(ac, "DROP TABLE jobqueue.jobs")


def test_the_workers_claim_plan_is_the_owners_row_level_security_adds_nothing(login_as, dsn):  # noqa: F811
    worker = login_as("worker")
    statement = (
        "EXPLAIN (COSTS OFF) SELECT id FROM jobqueue.jobs WHERE state = 'pending' AND queue = 'default' "
        "AND priority = 2 ORDER BY run_at, seq LIMIT 10 FOR UPDATE SKIP LOCKED"
    )
    with connect(dsn) as owner, connect(worker) as wc:
        assert [r[0] for r in wc.execute(statement)] == [r[0] for r in owner.execute(statement)]
    producer = login_as("producer")
    with connect(producer) as pc:  # a producer's reads are filtered by its id, once per statement
        plan = "\n".join(r[0] for r in pc.execute("EXPLAIN (COSTS OFF) SELECT id FROM jobqueue.jobs"))
    assert "Filter: (producer_id = $0)" in plan and "InitPlan" in plan


@pytest.mark.parametrize("run", range(3))  # the hang was a race: most starts, not all
def test_a_worker_logged_in_as_a_producer_stops_with_one_error_line_and_status_2(login_as, run):  # noqa: F811
    """docs/security.md: a component under the wrong role stops with one `error:` line, exit 2.
    The maintenance services fail first (leaders), the claim loop next (workers); cancelled in the
    middle of its cleanup, maintenance left its pool open, and asyncio.run's final cancel, swallowed
    by the pool's connecting worker, hung the process for ever, deaf to SIGTERM."""
    worker = spawn_worker(login_as("producer", producer="billing"))
    try:
        output, _ = worker.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        output = terminate(worker, signal.SIGKILL, timeout=5)
        pytest.fail(f"the worker did not exit within 30 s:\n{output}")
    assert worker.returncode == 2, output
    assert "Traceback" not in output, output
    errors = [line for line in output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "the database refused this role: permission denied for table" in errors[0], output


def test_roles_cli_creates_grants_lists_and_revokes(conn, dsn, capsys):
    login = f"jqtest_cli_{uuid.uuid4().hex[:8]}"
    try:
        assert cli_main(["roles", "login", "--role", "producer", login, "--producer", "billing", "--dsn", dsn]) == 0
        out, err = capsys.readouterr()
        assert f"user={login}" in out and f"created login role {login}: granted jobqueue_producer" in err
        with connect(out.strip()) as pc:  # the printed DSN logs in, and acts as billing
            job_id = pc.execute("SELECT jobqueue.enqueue('x')").fetchone()[0]
        assert job_row(conn, job_id)["producer_id"] == "billing"
        assert cli_main(["roles", "grant", "--role", "readonly", login, "--dsn", dsn]) == 0
        assert cli_main(["roles", "list", "--dsn", dsn]) == 0
        listed = capsys.readouterr().out
        assert f"jobqueue_producer   {login}" in listed and "billing" in listed
        assert f"jobqueue_readonly   {login}" in listed
        assert cli_main(["roles", "revoke", "--role", "producer", login, "--dsn", dsn]) == 0
        assert not conn.execute("SELECT pg_has_role(%s, 'jobqueue_producer', 'MEMBER')", (login,)).fetchone()[0]
        assert conn.execute("SELECT count(*) FROM jobqueue.producer_roles").fetchone()[0] == 0
        capsys.readouterr()
        assert cli_main(["roles", "grant", "--role", "worker", "no_such_role_here", "--dsn", dsn]) == 2
        assert "login_role: no role named no_such_role_here" in capsys.readouterr().err
        assert cli_main(["roles", "login", "--role", "worker", "postgres", "--dsn", dsn]) == 2
        assert "is a superuser" in capsys.readouterr().err
    finally:
        conn.execute("DELETE FROM jobqueue.producer_roles")
        conn.execute(psycopg.sql.SQL("DROP ROLE IF EXISTS {}").format(psycopg.sql.Identifier(login)))


def test_a_role_that_may_not_create_roles_is_told_so(login_as, capsys):  # noqa: F811
    admin = login_as("admin")  # no CREATEROLE
    assert cli_main(["roles", "login", "--role", "worker", f"jqtest_x_{uuid.uuid4().hex[:6]}", "--dsn", admin]) == 2
    assert "permission denied to create role" in capsys.readouterr().err


def test_every_table_is_granted_to_admins_and_readers_and_api_keys_to_no_worker(conn):
    """A guard for later migrations: a new table without grants would be a permission error in
    production only (the suite runs as a superuser)."""
    tables = [
        row[0]
        for row in conn.execute(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = 'jobqueue' AND c.relkind IN ('r', 'v', 'p') ORDER BY 1"
        )
    ]
    for table in tables:
        qualified = f"jobqueue.{table}"
        privilege = conn.execute(
            "SELECT has_table_privilege('jobqueue_admin', %s, 'SELECT'), "
            "has_table_privilege('jobqueue_readonly', %s, 'SELECT'), "
            "has_table_privilege('jobqueue_worker', %s, 'SELECT')",
            (qualified, qualified, qualified),
        ).fetchone()
        secret = table in ("api_keys", "producer_roles", "api_secrets")
        # the API's cursor key: only the API needs it (and admins, to rotate it)
        assert privilege == (True, table not in ("api_keys", "api_secrets"), not secret), (table, privilege)


def test_migrating_again_and_downgrading_keep_roles_other_databases_use(pg_server, empty_dsn, conn):
    """The roles exist cluster-wide already (the template made them): a second database migrates
    all the same; downgrading it leaves them, since every other test database still holds grants."""
    from jobqueue.store import migrate

    migrate.upgrade(empty_dsn)
    migrate.downgrade(empty_dsn, "0018_listing")
    # the five group roles by name: logins other tests made in this cluster (make run's jobqueue_local_*) also
    # start with jobqueue_, and made a count of the prefix depend on which tests ran before
    groups = ["jobqueue_producer", "jobqueue_worker", "jobqueue_admin", "jobqueue_api", "jobqueue_readonly"]
    assert conn.execute("SELECT count(*) FROM pg_roles WHERE rolname = ANY(%s)", (groups,)).fetchone()[0] == 5
    with connect(empty_dsn) as down:
        assert down.execute("SELECT relrowsecurity FROM pg_class WHERE oid = 'jobqueue.jobs'::regclass").fetchone() == (
            False,
        )
        assert not down.execute("SELECT has_schema_privilege('jobqueue_worker', 'jobqueue', 'USAGE')").fetchone()[0]
        assert down.execute(
            "SELECT prosecdef, proconfig, has_function_privilege('public', oid, 'EXECUTE') "
            "FROM pg_proc WHERE proname = 'enqueue' AND pronamespace = 'jobqueue'::regnamespace "
            "AND proargtypes[1] = 'jsonb'::regtype"
        ).fetchone() == (False, None, True)
    migrate.upgrade(empty_dsn)


@pytest.mark.slow
def test_a_downgrade_drops_the_roles_no_database_uses_and_keeps_one_a_login_holds(own_cluster):
    """On a cluster of its own (the session's has many databases holding grants): once the only
    jobqueue database is downgraded, nothing refers to the roles but a login granted one."""
    from jobqueue.store import migrate

    with connect(own_cluster) as oc:
        oc.execute("CREATE ROLE jqtest_holder LOGIN IN ROLE jobqueue_producer")
        migrate.downgrade(own_cluster, "0018_listing")
        left = [row[0] for row in oc.execute("SELECT rolname FROM pg_roles WHERE rolname LIKE 'jobqueue\\_%'")]
        assert left == ["jobqueue_producer"]
        migrate.upgrade(own_cluster)  # made again, the one that stayed is found
        assert oc.execute("SELECT count(*) FROM pg_roles WHERE rolname LIKE 'jobqueue\\_%'").fetchone()[0] == 5


def test_the_leaders_services_do_their_work_as_the_worker_role(login_as, conn):  # noqa: F811
    """Sweeper, scheduler, pruner, reaper, historian and the election as jobqueue_worker, each
    with work to do; the vacuumer and reindexer stand aside (PostgreSQL < 17: only the owner may)."""
    worker = login_as("worker")
    long_ago = datetime.now(timezone.utc) - timedelta(days=400)
    expired = make_job(conn, state="processing", locked_until=datetime.now(timezone.utc) - timedelta(minutes=1))
    old = make_job(conn, state="completed", finished_at=long_ago)
    insert_schedule(conn, "tick", "* * * * *")
    clock = ManualClock(datetime.now(timezone.utc))
    conn.execute(
        "INSERT INTO jobqueue.workers (id, host, pid, queues, concurrency, last_heartbeat) "
        "VALUES ('gone', 'h', 1, '{default}', 1, now() - interval '1 hour')"
    )

    async def run() -> list[int]:
        async with pools(worker) as (pool,):
            assert await Elector(pool, "leader-w").attempt()
            session = db.Session.of(test_settings(worker).db, "test-maintenance")
            scheduler = Scheduler(pool, fired_by="leader-w", clock=clock)
            await scheduler.run_once()  # plans the first tick
            clock.set(clock.now() + timedelta(minutes=1))
            services = [
                Sweeper(pool),
                scheduler,
                Pruner(pool),
                Reaper(pool),
                Historian(pool),
                Vacuumer(pool, session, VacuumerOptions(min_dead=0, dead_fraction=0)),
                Reindexer(session),
            ]
            return [(await service.run_once()).count for service in services]

    done = asyncio.run(run())
    assert all(count >= 1 for count in done[:4]) and done[5:] == [0, 0], done
    assert conn.execute("SELECT count(*) FROM jobqueue.throughput_history").fetchone()[0] == 1
    assert job_row(conn, expired)["state"] == "pending" and job_row(conn, old) is None
    assert conn.execute("SELECT count(*) FROM jobqueue.jobs WHERE producer_id = 'schedule:tick'").fetchone()[0] == 1
