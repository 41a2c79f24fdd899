"""The `jobqueue` command line as a user runs it: migrate, enqueue, get, cancel, demo."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import uuid

import psycopg
import pytest

from tests.support.workers import WorkerThread, test_settings


def jobqueue(*args: str, dsn: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", "import sys; from jobqueue.cli import main; sys.exit(main())", *args, "--dsn", dsn],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_enqueue_get_cancel(dsn):
    created = jobqueue("enqueue", "echo", "--payload", '{"a": 1}', "--priority", "high", "--delay", "60", dsn=dsn)
    assert created.returncode == 0, created.stderr
    job_id = uuid.UUID(created.stdout.strip())
    shown = jobqueue("get", str(job_id), dsn=dsn)
    info = json.loads(shown.stdout)
    assert info["state"] == "pending" and info["payload"] == {"a": 1} and info["priority"] == "high"
    assert shown.stdout == jobqueue("jobs", "get", str(job_id), dsn=dsn).stdout  # one command, one format
    cancelled = jobqueue("cancel", str(job_id), dsn=dsn)
    assert (cancelled.returncode, cancelled.stdout.strip()) == (0, "cancelled")
    again = jobqueue("cancel", str(job_id), dsn=dsn)
    assert (again.returncode, again.stdout.strip()) == (1, "cancelled_already")


def test_ordering_keys_from_the_command_line_and_how_an_operator_unblocks_a_key(dsn, conn):
    head, nxt = (
        uuid.UUID(jobqueue("enqueue", "echo", "--ordering-key", "k", dsn=dsn).stdout.strip()) for _ in range(2)
    )
    shown = json.loads(jobqueue("get", str(nxt), dsn=dsn).stdout)
    assert (shown["state"], shown["ordering_key"], shown["progress"]) == ("waiting", "k", None)
    listed = jobqueue("jobs", "list", "--state", "waiting", dsn=dsn)
    assert listed.returncode == 0 and str(nxt) in listed.stdout, listed.stderr
    assert jobqueue("cancel", str(head), dsn=dsn).stdout.strip() == "cancelled"  # the head goes: the key moves on
    assert json.loads(jobqueue("get", str(nxt), dsn=dsn).stdout)["state"] == "pending"
    too_long = jobqueue("enqueue", "echo", "--ordering-key", "x" * 300, dsn=dsn)
    assert too_long.returncode == 2 and "ordering_key" in too_long.stderr
    assert conn.execute("SELECT count(*) FROM jobqueue.jobs").fetchone()[0] == 2


def test_bad_input_is_a_clear_error_and_writes_nothing(dsn, conn):
    bad_json = jobqueue("enqueue", "echo", "--payload", "{nope", dsn=dsn)
    assert bad_json.returncode == 2 and "payload" in bad_json.stderr
    negative = jobqueue("enqueue", "echo", "--delay", "-3", dsn=dsn)
    assert negative.returncode == 2 and "delay" in negative.stderr
    missing = jobqueue("get", str(uuid.uuid4()), dsn=dsn)
    assert missing.returncode == 2 and "no job with id" in missing.stderr
    assert conn.execute("SELECT count(*) FROM jobqueue.jobs").fetchone()[0] == 0


@pytest.mark.parametrize(
    "command",
    [
        ("enqueue", "echo"),
        ("migrate",),
        ("downgrade", "base"),
        ("schedule", "list"),
        ("apikey", "list"),
        ("demo", "--count", "1"),
        ("worker", "--app", "jobqueue.demo:queue"),
    ],
)
def test_unreachable_database_is_reported_not_a_traceback(command):
    started = time.monotonic()
    result = jobqueue(*command, dsn="postgresql://postgres@127.0.0.1:1/nothing?connect_timeout=1")
    assert result.returncode == 2, result.stderr
    assert "database unavailable" in result.stderr and "Traceback" not in result.stderr
    assert time.monotonic() - started < 15  # the command's own 5 s limit, not the library's 10 s wait


@pytest.mark.parametrize("command", [("enqueue", "echo"), ("get", str(uuid.uuid4())), ("apikey", "list")])
def test_a_refused_connection_is_reported_at_once_with_its_reason(command):
    """Nothing listens on port 1: the server's "Connection refused" in one message, without waiting
    out the pool's timeout or logging its retries."""
    started = time.monotonic()
    result = jobqueue(*command, dsn="postgresql://postgres@127.0.0.1:1/nothing")
    assert result.returncode == 2, result.stderr
    assert "database unavailable" in result.stderr and "Connection refused" in result.stderr, result.stderr
    assert "error connecting in" not in result.stderr and "Traceback" not in result.stderr, result.stderr
    assert time.monotonic() - started < 4  # interpreter start-up and imports, no 5 s wait


def test_demo_command_shows_jobs_finishing(dsn):
    from jobqueue.demo import queue

    with WorkerThread(queue, test_settings(dsn)):
        result = jobqueue("demo", "--count", "2", "--timeout", "20", dsn=dsn)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "fail_permanent  dead_letter" in result.stdout
    assert result.stdout.count("completed") == 5  # echo, flaky (second attempt), sleep, 2 x noop


def test_the_worker_finds_an_app_beside_it_and_says_clearly_what_it_cannot_load(dsn, tmp_path):
    """`jobqueue-worker --app myapp:queue` run from the folder that holds myapp.py (it failed with
    ModuleNotFoundError); a missing module or attribute, a missing package the app imports (once
    reported as the app itself missing) or a syntax error in it is one line, not a traceback."""
    (tmp_path / "myapp.py").write_text("from jobqueue import JobQueue\nqueue = JobQueue()\n")
    command = [sys.executable, "-c", "import sys; from jobqueue.cli import worker_main; sys.exit(worker_main())"]
    worker = subprocess.Popen(
        [*command, "--app", "myapp:queue", "--dsn", dsn],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        started = ""
        while "started" not in started and time.monotonic() < deadline and worker.poll() is None:
            started = worker.stdout.readline()
        assert "started" in started
    finally:
        worker.terminate()
        worker.wait(30)
    (tmp_path / "needs.py").write_text("import nosuch_dependency\n")
    (tmp_path / "broken.py").write_text("def f(:\n")
    for app, says in (
        ("nosuch:queue", "no module named 'nosuch' (run from the folder"),
        ("myapp:nope", "has no attribute 'nope'"),
        ("needs:queue", "importing 'needs' failed: no module named 'nosuch_dependency' (is it installed"),
        ("broken:queue", "broken.py, line 1: "),
    ):
        result = subprocess.run(
            [*command, "--app", app, "--dsn", dsn], cwd=tmp_path, capture_output=True, text=True, timeout=60
        )
        assert result.returncode == 2 and says in result.stderr and "Traceback" not in result.stderr


def test_a_worker_refuses_a_malformed_dsn_and_a_taken_metrics_port_in_one_line(dsn, tmp_path):
    """Both used to start a worker anyway: the DSN ended in psycopg's traceback, the port in a
    worker that logged "serving none" and then stopped at once with exit status 0."""
    (tmp_path / "myapp.py").write_text("from jobqueue import JobQueue\nqueue = JobQueue()\n")
    command = [
        sys.executable,
        "-c",
        "import sys; from jobqueue.cli import worker_main; sys.exit(worker_main())",
        "--app",
        "myapp:queue",
    ]
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        for extra, says in (
            (["--dsn", "notadsn"], "is not a PostgreSQL connection string"),
            (["--dsn", dsn, "--metrics-port", str(port)], f"cannot listen on 0.0.0.0:{port}"),
            (["--dsn", dsn, "--metrics-port", "99999"], "metrics port must be from 1 to 65535"),
        ):
            result = subprocess.run([*command, *extra], cwd=tmp_path, capture_output=True, text=True, timeout=60)
            assert result.returncode == 2 and says in result.stderr and "Traceback" not in result.stderr, result.stderr
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM jobqueue.workers").fetchone() == (0,)  # none registered


def test_a_worker_on_a_database_without_the_schema_stops_with_one_error_line(empty_dsn, tmp_path):
    """NotMigrated from the maintenance services or the claim loop, whichever meets it first, is
    the one `error:` line and exit 2 (the maintenance side used to be logged as a background task
    that 'ended unexpectedly', with its traceback, and the process exited 0)."""
    (tmp_path / "myapp.py").write_text("from jobqueue import JobQueue\nqueue = JobQueue()\n")
    command = [
        sys.executable,
        "-c",
        "import sys; from jobqueue.cli import worker_main; sys.exit(worker_main())",
        "--app",
        "myapp:queue",
        "--dsn",
        empty_dsn,
    ]
    result = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert len(errors) == 1 and "migrate" in errors[0], result.stderr
