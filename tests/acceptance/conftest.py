"""Fixtures of the acceptance tests that several modules share."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from jobqueue.api.serve import wait_ready
from jobqueue.client import Client
from tests.harness.devdb import free_port
from tests.support.browser import CHROMIUM
from tests.support.workers import spawn_worker, terminate

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def dashboard_stack(dsn):
    """For the dashboard's browser tests: the API (a real `jobqueue api` process) and a real worker
    (`tests.support.apps:queue`, queue `default`) on a fresh database, snapshots refreshed every 0.5 s;
    yields (url, an admin key, a `Client`)."""
    assert os.path.exists(CHROMIUM), "chromium is missing: `make system-deps` installs Debian's chromium"
    port = free_port()
    env = dict(
        os.environ,
        JOBQUEUE_DSN=dsn,
        JOBQUEUE_METRICS_TTL="0.5",
        JOBQUEUE_STATS_INTERVAL="0.5",
        JOBQUEUE_API_KEY_CACHE_SECONDS="0",
    )
    api = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from jobqueue.cli import main; sys.exit(main())",
            "api",
            "--port",
            str(port),
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
    )
    worker = spawn_worker(dsn, "tests.support.apps:queue", "--concurrency", "8", env={"JOBQUEUE_STATS_INTERVAL": "0.5"})
    url = f"http://127.0.0.1:{port}"
    with Client(dsn, pool_size=2) as client:
        admin_key = client.create_api_key("ops", role="admin")[0]
        try:
            assert wait_ready(url, timeout=30), "API ready"
            yield url, admin_key, client
        finally:
            worker_output = terminate(worker)
            api_output = terminate(api, timeout=20)
    assert "Traceback" not in api_output, api_output
    assert "Traceback" not in worker_output, worker_output
