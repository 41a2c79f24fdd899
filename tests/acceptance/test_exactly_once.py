"""Transactional completion under fire: workers SIGKILLed every ~1.5 s while 1,500 jobs write to the
application's own table in `job.transaction()` — every job completes and each one's row exists
exactly once, although many of them ran more than once."""

from __future__ import annotations

import random
import signal
import time

import pytest

from jobqueue import Client
from tests.support import ledger_app
from tests.support.workers import spawn_worker, terminate

pytestmark = pytest.mark.slow

JOBS = 1500


def test_1500_transactional_jobs_through_repeated_sigkills_each_write_exactly_once(dsn, conn):
    conn.execute(ledger_app.SCHEMA)
    with Client(dsn) as client:
        client.enqueue_many([{"job_type": "credit", "payload": {"amount": 1, "sleep": 0.05}} for _ in range(JOBS)])
    args = ("--concurrency", "20", "--lease", "2")
    env = {"JOBQUEUE_SWEEP_INTERVAL": "0.3", "LEDGER_DSN": dsn}
    rng = random.Random(21)
    kills = 0
    give_up = time.monotonic() + 240
    done = lambda: conn.execute("SELECT count(*) FROM jobqueue.jobs WHERE state = 'completed'").fetchone()[0]  # noqa: E731
    while done() < JOBS and time.monotonic() < give_up:
        worker = spawn_worker(dsn, "tests.support.ledger_app:queue", *args, env=env)
        time.sleep(rng.uniform(1.0, 2.0))
        if done() < JOBS:
            worker.send_signal(signal.SIGKILL)
            kills += 1
        terminate(worker, signal.SIGKILL if done() < JOBS else signal.SIGTERM)
        if kills >= 6 and done() < JOBS:  # enough kills seen: let one worker finish the rest
            worker = spawn_worker(dsn, "tests.support.ledger_app:queue", *args, env=env)
            while done() < JOBS and time.monotonic() < give_up:
                time.sleep(0.5)
            terminate(worker)
    assert done() == JOBS, conn.execute("SELECT state, count(*) FROM jobqueue.jobs GROUP BY 1").fetchall()
    rows, distinct = conn.execute("SELECT count(*), count(DISTINCT job_id) FROM public.ledger").fetchone()
    assert (rows, distinct) == (JOBS, JOBS)  # each job's effect once: no duplicate, none lost
    runs, rerun = conn.execute("SELECT count(*), count(*) - count(DISTINCT job_id) FROM public.runs").fetchone()
    retried = conn.execute("SELECT count(*) FROM jobqueue.jobs WHERE attempts > 1").fetchone()[0]
    print(f"kills={kills} runs={runs} reruns={rerun} jobs_retried={retried}")
    assert kills >= 3 and rerun > 0 and retried > 0, (kills, runs, rerun, retried)
    # the result of each job is the one its committed attempt returned, stored with it
    results = conn.execute(
        "SELECT count(*) FROM jobqueue.job_results WHERE outcome = 'completed' AND result = '{\"credited\": 1}'"
    ).fetchone()[0]
    assert results == JOBS
