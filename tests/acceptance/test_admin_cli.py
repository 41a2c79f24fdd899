"""The operator's commands as a user types them: jobs, dlq, queues, workers, circuits."""

from __future__ import annotations

import json
from datetime import datetime

from tests.acceptance.test_cli import jobqueue
from tests.support.factories import job_row, make_job


def test_jobs_list_get_cancel_and_retry(dsn, conn):
    pending = make_job(conn, job_type="mail", queue="q1", priority="high")
    dead = make_job(conn, job_type="mail", queue="q1", state="dead_letter")
    other = make_job(conn, job_type="report", queue="q2")
    listed = jobqueue("jobs", "list", "--queue", "q1", dsn=dsn)
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[0].split() == ["ID", "JOB_TYPE", "QUEUE", "PRIORITY", "STATE", "ATTEMPTS", "CREATED_AT", "LAST_ERROR"]
    assert {line.split()[0] for line in lines[1:]} == {str(pending), str(dead)}
    as_json = json.loads(jobqueue("jobs", "list", "--job-type", "report", "--json", dsn=dsn).stdout)
    assert [job["id"] for job in as_json["jobs"]] == [str(other)] and as_json["next_cursor"] is None
    paged = jobqueue("jobs", "list", "--limit", "1", dsn=dsn).stdout
    assert "more: --cursor" in paged
    got = json.loads(jobqueue("jobs", "get", str(pending), dsn=dsn).stdout)  # as REST writes it
    assert (got["priority"], got["state"]) == ("high", "pending")
    assert datetime.fromisoformat(got["created_at"]).tzinfo is not None and "T" in got["created_at"]
    assert jobqueue("jobs", "cancel", str(pending), dsn=dsn).stdout.strip() == "cancelled"
    retried = jobqueue("jobs", "retry", str(dead), dsn=dsn)
    assert (retried.returncode, retried.stdout.strip()) == (0, "retried")
    assert job_row(conn, dead)["state"] == "pending"
    refused = jobqueue("jobs", "retry", str(other), dsn=dsn)
    assert (refused.returncode, refused.stdout.strip()) == (1, "not_dead")


def test_dlq_list_retry_all_and_purge_only_with_yes(dsn, conn):
    dead = [make_job(conn, job_type="mail", queue="q1", state="dead_letter") for _ in range(3)]
    make_job(conn, job_type="report", queue="q1", state="dead_letter")
    conn.execute("UPDATE jobqueue.jobs SET dead_reason = 'shed' WHERE id = %s", (dead[0],))
    listed = jobqueue("dlq", "list", dsn=dsn).stdout.splitlines()
    assert len(listed) == 1 + 4 and listed[0].split()[4] == "DEAD_REASON"
    assert next(line for line in listed if line.startswith(str(dead[0]))).split()[4] == "shed"
    as_json = json.loads(jobqueue("dlq", "list", "--json", dsn=dsn).stdout)["jobs"]
    assert {job["id"]: job["dead_reason"] for job in as_json}[str(dead[0])] == "shed"
    assert jobqueue("dlq", "retry-all", "--job-type", "mail", dsn=dsn).stdout.strip() == "retried 3 dead-letter jobs"
    assert {job_row(conn, j)["state"] for j in dead} == {"pending"}
    refused = jobqueue("dlq", "purge", dsn=dsn)
    assert refused.returncode == 2 and "--yes" in refused.stderr
    for command, says in (
        (["purge", "--before", "yesterday", "--yes"], "before: must be an ISO-8601 time"),
        (["purge", "--job-type", "", "--yes"], "job_type: must be a non-empty string"),
        (["retry-all", "--queue", ""], "queue: must be a non-empty string"),
    ):
        bad = jobqueue("dlq", *command, dsn=dsn)  # an empty filter used to match nothing and print 0
        assert bad.returncode == 2 and says in bad.stderr and "Traceback" not in bad.stderr, (command, bad.stderr)
    assert conn.execute("SELECT count(*) FROM jobqueue.jobs WHERE state = 'dead_letter'").fetchone() == (1,)
    assert json.loads(jobqueue("dlq", "purge", "--yes", "--json", dsn=dsn).stdout) == {"purged": 1}
    assert conn.execute("SELECT count(*) FROM jobqueue.jobs WHERE state = 'dead_letter'").fetchone() == (0,)


def test_queues_and_workers(dsn, conn):
    make_job(conn, queue="q1")
    paused = jobqueue("queues", "pause", "q1", dsn=dsn)
    assert json.loads(paused.stdout)["paused"] is True
    limits = json.loads(jobqueue("queues", "limits", "q1", "--soft", "10", "--hard", "20", dsn=dsn).stdout)
    assert (limits["soft_limit"], limits["hard_limit"]) == (10, 20)
    bad = jobqueue("queues", "limits", "q1", "--soft", "30", "--hard", "20", dsn=dsn)
    assert bad.returncode == 2 and "soft_limit" in bad.stderr
    shedding = json.loads(jobqueue("queues", "shedding", "q1", "on", dsn=dsn).stdout)
    assert (shedding["shed_low_retries"], shedding["soft_limit"]) == (True, 10)
    refused = jobqueue("queues", "shedding", "q1", "maybe", dsn=dsn)
    assert refused.returncode == 2 and "invalid choice" in refused.stderr
    table = jobqueue("queues", "list", dsn=dsn).stdout.splitlines()
    row = next(line.split() for line in table if line.startswith("q1 "))
    assert row[:3] == ["q1", "True", "1"] and row[-3:] == ["10", "20", "True"]
    assert jobqueue("workers", dsn=dsn).stdout.split() == [
        "ID",
        "STATUS",
        "QUEUES",
        "CONCURRENCY",
        "TARGET",
        "PROCESSED",
        "FAILED",
        "STUCK",
        "LAST_HEARTBEAT",
        "APP",
        "JOB_TYPES",
    ]
    assert json.loads(jobqueue("workers", "--json", dsn=dsn).stdout) == []


def test_circuits_list_open_and_close(dsn, conn):
    from jobqueue.db import gateway as db
    from jobqueue.store import circuits as circuit_store
    from tests.support import circuit_app

    app = circuit_app.queue
    db.run_sync(conn, circuit_store.sync(list(app.circuits.values()), app.circuit_by_type(), app=app.name))
    table = jobqueue("circuits", "list", dsn=dsn).stdout.splitlines()
    assert table[0].split() == [
        "NAME",
        "STATE",
        "FAILURES",
        "THRESHOLD",
        "WINDOW_S",
        "RESET_AFTER_S",
        "OPENED_AT",
        "JOB_TYPES",
        "DECLARED_BY",
    ]
    assert table[1].split() == [
        "flaky-api",
        "closed",
        "0",
        "3",
        "30",
        "1.5",
        "-",
        "call_api,call_api_checked",
        "circuit-tests",
    ]
    held = jobqueue("circuits", "open", "flaky-api", dsn=dsn)  # one breaker: JSON, as docs/operations.md says
    assert held.returncode == 0 and json.loads(held.stdout)["forced_by_admin"] is True
    assert json.loads(jobqueue("circuits", "open", "flaky-api", "--json", dsn=dsn).stdout)["state"] == "open"
    assert conn.execute("SELECT state, forced_by_admin FROM jobqueue.circuits").fetchone() == ("open", True)
    [listed] = json.loads(jobqueue("circuits", "list", "--json", dsn=dsn).stdout)
    assert (listed["name"], listed["state"], listed["forced_by_admin"]) == ("flaky-api", "open", True)
    assert json.loads(jobqueue("circuits", "close", "flaky-api", dsn=dsn).stdout)["state"] == "closed"
    assert conn.execute("SELECT state, forced_by_admin FROM jobqueue.circuits").fetchone() == ("closed", False)
    unknown = jobqueue("circuits", "open", "nobody", dsn=dsn)
    assert unknown.returncode == 2 and "no circuit breaker named 'nobody'" in unknown.stderr


def test_jobs_cancel_by_filter_says_how_many_and_refuses_an_empty_filter(dsn, conn):
    waiting = [make_job(conn, job_type="mail", queue="q1") for _ in range(3)]
    running = make_job(conn, job_type="mail", queue="q1", state="processing")
    other = make_job(conn, job_type="report", queue="q1")
    for command, says in (
        ([], "all: name at least one filter"),  # an empty filter matches every live job
        (["--state", "completed"], "state: must be one of pending, failed, processing"),
        (["--before", "yesterday"], "before: must be an ISO-8601 time"),
        (["--before", "2030-01-01T00:00:00"], "before: must be an ISO-8601 time with a UTC offset"),
        ([str(other), "--queue", "q1"], "give a job id or filters, not both"),
    ):
        refused = jobqueue("jobs", "cancel", *command, dsn=dsn)
        lines = refused.stderr.strip().splitlines()
        assert refused.returncode == 2 and len(lines) == 1 and says in lines[0], (command, refused.stderr)
    assert conn.execute("SELECT count(*) FROM jobqueue.jobs WHERE state = 'cancelled'").fetchone() == (0,)
    done = jobqueue("jobs", "cancel", "--queue", "q1", "--job-type", "mail", dsn=dsn)
    assert (done.returncode, done.stdout.strip()) == (0, "cancelled 3 waiting jobs; asked 1 running jobs to stop")
    assert {job_row(conn, j)["state"] for j in waiting} == {"cancelled"} and job_row(conn, running)["cancel_requested"]
    assert job_row(conn, other)["state"] == "pending"
    everything = jobqueue("cancel", "--all", "--json", dsn=dsn)  # the top-level command is the same one
    assert json.loads(everything.stdout) == {"cancelled": 1, "cancel_requested": 0, "complete": True}


def test_pausing_an_unknown_queue_is_refused_unless_forced(dsn, conn):
    refused = jobqueue("queues", "pause", "nosuchqueue", dsn=dsn)
    lines = refused.stderr.strip().splitlines()
    assert refused.returncode == 2 and len(lines) == 1 and "no queue named 'nosuchqueue' is known" in lines[0]
    assert "--force" in lines[0] and refused.stdout == ""
    assert conn.execute("SELECT count(*) FROM jobqueue.queue_settings").fetchone() == (0,)
    forced = jobqueue("queues", "pause", "nosuchqueue", "--force", dsn=dsn)
    assert forced.returncode == 0 and json.loads(forced.stdout)["paused"] is True


def test_enqueue_warns_about_a_job_type_or_queue_nobody_serves_and_accepts_the_job(dsn, conn):
    typo = jobqueue("enqueue", "sned_email", "--queue", "mial", dsn=dsn)
    assert typo.returncode == 0 and job_row(conn, typo.stdout.strip())["queue"] == "mial"  # stdout: the id alone
    warnings = typo.stderr.strip().splitlines()
    assert len(warnings) == 2 and all(line.startswith("warning: ") for line in warnings)
    assert "'sned_email'" in warnings[0] and "'mial'" in warnings[1]
    conn.execute("INSERT INTO jobqueue.served_names (kind, name) VALUES ('queue', 'mial'), ('job_type', 'sned_email')")
    quiet = jobqueue("enqueue", "sned_email", "--queue", "mial", dsn=dsn)
    assert quiet.returncode == 0 and quiet.stderr == ""


def test_every_operator_command_takes_json(dsn, conn):
    """One rule (docs/operations.md): --json is accepted everywhere and prints JSON."""
    dead = make_job(conn, job_type="mail", queue="q1", state="dead_letter")
    for command in (
        ["jobs", "list"],
        ["jobs", "get", str(dead)],
        ["jobs", "retry", str(dead)],
        ["jobs", "cancel", str(dead)],
        ["dlq", "list"],
        ["dlq", "retry-all"],
        ["queues", "list"],
        ["queues", "pause", "q1"],
        ["queues", "resume", "q1"],
        ["workers"],
        ["circuits", "list"],
        ["limits", "list"],
        ["limits", "set", "--queue", "q1", "--concurrency", "2"],
        ["limits", "clear", "--queue", "q1"],
        ["apikey", "list"],
    ):
        done = jobqueue(*command, "--json", dsn=dsn)
        assert done.returncode in (0, 1), (command, done.stderr)
        json.loads(done.stdout)  # not a table, not a bare word
