"""Two apps sharing one database and one queue, with tasks of the same names, as real worker
processes (issue 17, §5): each worker claims only the job types it has handlers for, jobs nobody
serves wait (no attempt used) and are counted as such, and the breakers and limits one app
declares are its own — the other app's worker neither redefines nor removes them."""

from __future__ import annotations

import json
import subprocess
import sys

from jobqueue import Client
from tests.support.waiting import wait_until
from tests.support.workers import spawn_worker, terminate

SHOP, BILLING = "tests.support.shop_app:queue", "tests.support.billing_app:queue"


def jobqueue_cli(*args: str, dsn: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", "import sys; from jobqueue.cli import main; sys.exit(main())", *args, "--dsn", dsn],
        capture_output=True,
        text=True,
        timeout=60,
    )


def _started(worker) -> None:
    line = ""
    while "started" not in line:
        line = worker.stdout.readline()
        assert line or worker.poll() is None, "the worker exited before it started"


def _states(conn, job_type: str) -> dict[str, int]:
    return dict(
        conn.execute(
            "SELECT state, count(*) FROM jobqueue.jobs WHERE job_type = %s GROUP BY state", (job_type,)
        ).fetchall()
    )


def test_a_worker_claims_only_its_own_job_types_and_leaves_the_neighbours_pending(dsn, conn):
    """Before: billing's worker claimed the shop's greet jobs, failed them "no handler registered"
    and dead-lettered them after their retries, while the shop's worker was down."""
    with Client(dsn) as client:
        greets = client.enqueue_many([{"job_type": "greet"} for _ in range(5)])
        client.enqueue_many([{"job_type": "report"} for _ in range(5)])
        billing = spawn_worker(dsn, BILLING)
        try:
            _started(billing)
            wait_until(lambda: _states(conn, "report") == {"completed": 5}, timeout=30)
            # more claims, each reading the greets at the head of the queue: they stay untouched
            for n in range(6, 9):
                client.enqueue("report", {})
                wait_until(lambda: _states(conn, "report") == {"completed": n}, timeout=30)
            assert _states(conn, "greet") == {"pending": 5}
            assert (
                conn.execute(
                    "SELECT count(*) FROM jobqueue.jobs WHERE id = ANY(%s) AND attempts > 0", (greets,)
                ).fetchone()[0]
                == 0
            )
            assert conn.execute("SELECT count(*) FROM jobqueue.job_errors").fetchone()[0] == 0
            # visible as such: nobody serves greet in default (billing's worker serves the queue)
            assert [(u.queue, u.job_type, u.runnable) for u in client.unserved_jobs()] == [("default", "greet", 5)]
            listed = jobqueue_cli("jobs", "list", "--json", dsn=dsn)
            assert listed.returncode == 0 and len(json.loads(listed.stdout)["jobs"]) == 13
            assert (
                "note: 5 runnable jobs wait for a worker with a handler for their type (no live worker of their "
                "queue has one): greet in default (5)"
            ) in listed.stderr
            shop = spawn_worker(dsn, SHOP)
            try:
                _started(shop)
                wait_until(lambda: _states(conn, "greet") == {"completed": 5}, timeout=30)
                assert client.unserved_jobs() == []
                assert "note:" not in jobqueue_cli("jobs", "list", dsn=dsn).stderr
            finally:
                terminate(shop)
        finally:
            output = terminate(billing)
        assert all(client.get(job_id).result == {"greeted_by": "shop"} for job_id in greets)
    assert "no handler registered" not in output, output


def _declarations(conn) -> dict:
    members = conn.execute("SELECT job_type, circuit FROM jobqueue.circuit_job_types ORDER BY 1, 2").fetchall()
    breakers = conn.execute(
        "SELECT name, threshold, window_seconds, reset_after_seconds, state, forced_by_admin "
        "FROM jobqueue.circuits ORDER BY name"
    ).fetchall()
    limits = conn.execute(
        "SELECT scope, name, concurrency, rate, period_seconds, set_by FROM jobqueue.job_limits ORDER BY scope, name"
    ).fetchall()
    return {"members": members, "breakers": breakers, "limits": limits}


def test_another_apps_worker_with_same_named_tasks_leaves_this_apps_breakers_and_limits_alone(dsn, conn):
    """Before: starting billing's worker (charge and send_sms without breaker or limit) took charge
    out of the shop's payments-api breaker and deleted the shop's send_sms 100/m limit. An
    operator's changes (a limit set, a breaker held open) survive every restart, as before."""

    def start(app: str):
        worker = spawn_worker(dsn, app)
        _started(worker)
        return worker

    shop = start(SHOP)
    try:
        declared = _declarations(conn)
        assert declared["members"] == [("charge", "payments-api")]
        assert declared["limits"] == [
            ("job_type", "send_sms", None, 100, 60.0, "code"),
            ("queue", "exports", 2, None, None, "code"),
        ]
        for command in (
            ("limits", "set", "--queue", "exports", "--concurrency", "1"),
            ("circuits", "open", "payments-api"),
        ):
            assert jobqueue_cli(*command, dsn=dsn).returncode == 0
        expected = _declarations(conn)
        billing = start(BILLING)  # the shop's worker runs: billing's start must change nothing of it
        terminate(billing)
    finally:
        terminate(shop)
    assert _declarations(conn) == expected
    for app in (BILLING, SHOP, BILLING):  # either alone, in turn: still nothing of the shop's changes
        terminate(start(app))
        assert _declarations(conn) == expected, app
    assert expected["limits"][1] == ("queue", "exports", 1, None, None, "admin")
    assert expected["breakers"][0][4:] == ("open", True)
