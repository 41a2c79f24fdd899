"""A worker whose app or settings carry a time that can never be stored refuses to start, in one
line, exit status 2 (issue 17, §3): a task timeout of inf made every claim of every job type fail
(Infinity is not JSON), a lease or processing TTL of inf or nan was accepted."""

from __future__ import annotations

import os
import subprocess
import sys

import psycopg
import pytest

WORKER = [sys.executable, "-c", "import sys; from jobqueue.cli import worker_main; sys.exit(worker_main())"]


@pytest.mark.parametrize(
    "declaration, env, says",
    [
        ('@queue.task("t", timeout=math.inf)', {}, "timeout: must be a finite number of seconds (got inf)"),
        ('@queue.task("t", backoff=Backoff(max=float("nan")))', {}, "backoff.max: must be a finite number"),
        ('@queue.task("t")', {"JOBQUEUE_LEASE_SECONDS": "inf"}, "JOBQUEUE_LEASE_SECONDS (--lease): must be a finite"),
        ('@queue.task("t")', {"JOBQUEUE_PROCESSING_TTL": "nan"}, "JOBQUEUE_PROCESSING_TTL: must be a finite"),
        (
            '@queue.task("t")',
            {"JOBQUEUE_PROCESSING_TTL": "3e11"},
            "JOBQUEUE_PROCESSING_TTL: must be more than 0 and at",
        ),
    ],
)
def test_a_time_that_cannot_be_stored_stops_the_worker_at_start_in_one_line(dsn, tmp_path, declaration, env, says):
    (tmp_path / "myapp.py").write_text(
        "import math\nfrom jobqueue import Backoff, JobQueue\nqueue = JobQueue()\n\n"
        f"{declaration}\nasync def t(job):\n    return None\n"
    )
    result = subprocess.run(
        [*WORKER, "--app", "myapp:queue", "--dsn", dsn],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **env},
    )
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert len(errors) == 1 and says in errors[0], result.stderr
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM jobqueue.workers").fetchone() == (0,)  # it never started
