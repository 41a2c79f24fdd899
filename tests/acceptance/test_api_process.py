"""`jobqueue api` and `jobqueue apikey` as real processes: keys from the CLI, a job submitted over
HTTP and run by a real worker, a revoked key refused, a clean stop on SIGTERM."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import httpx

from jobqueue.api.serve import wait_ready
from tests.harness.devdb import free_port
from tests.support.waiting import wait_until
from tests.support.workers import spawn_worker, terminate

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def jobqueue(dsn: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", "import sys; from jobqueue.cli import main; sys.exit(main())", *args],
        env=dict(os.environ, JOBQUEUE_DSN=dsn),
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )


def test_api_process_serves_submissions_that_a_worker_runs(dsn):
    created = jobqueue(dsn, "apikey", "create", "--producer", "acme")
    assert created.returncode == 0, created.stderr
    key = created.stdout.strip()
    assert key.startswith("jq_") and "shown only this once" in created.stderr
    listing = jobqueue(dsn, "apikey", "list")
    assert "acme" in listing.stdout and key not in listing.stdout
    key_id = next(line.split()[0] for line in listing.stdout.splitlines() if line.endswith("acme"))

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    api = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from jobqueue.cli import main; sys.exit(main())",
            "api",
            "--port",
            str(port),
            "--workers",
            "2",
        ],
        env=dict(os.environ, JOBQUEUE_DSN=dsn, JOBQUEUE_API_KEY_CACHE_SECONDS="0.2"),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
    )
    worker = spawn_worker(dsn, "tests.support.apps:queue")
    try:
        assert wait_ready(url, timeout=30), "API ready"
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}) as client:
            submitted = client.post("/jobs", json={"job_type": "record", "payload": {"n": 3}})
            assert submitted.status_code == 201, submitted.text
            job_id = submitted.json()["id"]
            result = wait_until(
                lambda: (r := client.get(f"/jobs/{job_id}/result")).status_code == 200 and r,
                timeout=30,
                message="the worker's result",
            )
            assert result.json()["result"] == {"ok": True, "n": 3}
            assert client.get("/schema/openapi.json").json()["info"]["title"] == "jobqueue"

            revoked = jobqueue(dsn, "apikey", "revoke", key_id)
            assert revoked.returncode == 0, revoked.stderr
            wait_until(lambda: client.get("/jobs").status_code == 401, timeout=10, message="revocation")
    finally:
        worker_output = terminate(worker)
        api_output = terminate(api, timeout=20)
    assert api.returncode == 0, api_output
    assert "Traceback" not in api_output and "Traceback" not in worker_output


def test_a_producers_rate_limit_holds_across_two_api_processes(dsn):
    """Above the soft limit a producer gets its rate in all, not once per process: 2 processes,
    a burst of 10 and 2 jobs/s, 60 submissions on fresh connections (spread over both)."""
    key = jobqueue(dsn, "apikey", "create", "--producer", "busy").stdout.strip()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = dict(
        os.environ,
        JOBQUEUE_DSN=dsn,
        JOBQUEUE_API_SOFT_LIMIT="1",
        JOBQUEUE_API_HARD_LIMIT="100000",
        JOBQUEUE_API_RATE_LIMIT="2",
        JOBQUEUE_API_RATE_BURST="10",
        JOBQUEUE_API_DEPTH_REFRESH="0.05",
    )
    api = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from jobqueue.cli import main; sys.exit(main())",
            "api",
            "--port",
            str(port),
            "--workers",
            "2",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
    )
    try:
        assert wait_ready(url, timeout=30), "API ready"
        statuses = []
        started = time.monotonic()
        for n in range(60):
            with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}) as client:  # a new connection
                statuses.append(client.post("/jobs", json={"job_type": "record", "payload": {"n": n}}).status_code)
        elapsed = time.monotonic() - started
    finally:
        output = terminate(api, timeout=20)
    assert set(statuses) <= {201, 429}, statuses
    allowed = 1 + 10 + 2 * elapsed  # below the soft limit, then burst + rate over the time taken, in all
    assert 0 < statuses.count(201) <= allowed + 1, (statuses.count(201), elapsed)
    assert "Traceback" not in output


def test_apikey_create_with_allow_lists_from_the_command_line(dsn):
    created = jobqueue(
        dsn, "apikey", "create", "--producer", "billing", "--queues", "invoices,receipts", "--job-types", "render"
    )
    assert created.returncode == 0, created.stderr
    assert "(only queues invoices,receipts; job types render)" in created.stderr
    assert "billing (only queues invoices,receipts; job types render)" in jobqueue(dsn, "apikey", "list").stdout
    refused = jobqueue(dsn, "apikey", "create", "--producer", "ops", "--admin", "--queues", "x")
    assert refused.returncode != 0 and "allow-lists are for producer keys" in refused.stderr
    empty = jobqueue(dsn, "apikey", "create", "--producer", "billing", "--queues", ",")
    assert empty.returncode == 2 and "at least one name" in empty.stderr


def test_apikey_create_with_a_name_and_an_expiry(dsn, conn):
    created = jobqueue(dsn, "apikey", "create", "--producer", "ci-bot", "--name", "ci", "--expires", "30d")
    assert created.returncode == 0, created.stderr
    assert "created producer key 'ci'" in created.stderr and ", expires 20" in created.stderr
    assert conn.execute(
        "SELECT name, expires_at - created_at = interval '30 days' FROM jobqueue.api_keys"
    ).fetchone() == ("ci", True)
    table = jobqueue(dsn, "apikey", "list").stdout.splitlines()
    assert table[0].split() == ["ID", "NAME", "ROLE", "PREFIX", "CREATED", "EXPIRES", "STATE", "PRODUCER"]
    assert table[1].split()[1] == "ci" and table[1].split()[6] == "live" and table[1].endswith("ci-bot")
    [listed] = json.loads(jobqueue(dsn, "apikey", "list", "--json").stdout)
    assert (listed["name"], listed["producer_id"]) == ("ci", "ci-bot") and listed["expires_at"].startswith("20")
    for bad in ("inf", "-1d", "99999999d", "nan", "30 days", "0d", "1e400"):
        refused = jobqueue(dsn, "apikey", "create", "--producer", "ci-bot", f"--expires={bad}")
        lines = refused.stderr.strip().splitlines()
        assert refused.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: expires: "), (bad, lines)
    assert conn.execute("SELECT count(*) FROM jobqueue.api_keys").fetchone() == (1,)
    conn.execute("UPDATE jobqueue.api_keys SET expires_at = created_at + interval '1 second'")
    assert jobqueue(dsn, "apikey", "list").stdout.splitlines()[1].split()[6] == "expired"
