"""Sync handlers that block forever (and async ones that swallow their cancellation), against real
`jobqueue-worker` processes.

Before: every pool thread stayed blocked, the other sync jobs stayed pending behind them while the
worker heartbeated "running", and SIGTERM never ended the process (the executor's threads were
joined at exit)."""

from __future__ import annotations

import signal
import time

import pytest

from jobqueue import Client
from tests.support.waiting import wait_until
from tests.support.workers import spawn_worker, terminate

pytestmark = pytest.mark.slow


def states(conn, ids) -> dict:
    return dict(conn.execute("SELECT id, state FROM jobqueue.jobs WHERE id = ANY(%s)", (list(ids),)).fetchall())


def enqueue(dsn, blockers: int, others: int, blocker: str = "blocks_forever") -> tuple[list, list]:
    with Client(dsn) as client:
        blocked = client.enqueue_many([{"job_type": blocker, "max_attempts": 1} for _ in range(blockers)])
        rest = client.enqueue_many([{"job_type": "record_sync"} for _ in range(others)])
    return blocked, rest


@pytest.mark.parametrize("processes", ["1", "2"])
def test_stuck_handlers_restart_the_worker_and_the_other_jobs_complete(dsn, conn, processes):
    """Two handlers stuck for good in a worker of two slots would starve it: it stops claiming,
    restarts its process (in place when alone, through the supervisor under --processes), and
    every other job completes. The stuck handlers' attempts failed as timeouts."""
    worker = spawn_worker(
        dsn,
        "tests.support.apps:queue",
        "--concurrency",
        "2",
        "--processes",
        processes,
        "--lease",
        "3",
        "--shutdown-grace",
        "1",
    )
    try:
        blocked, rest = enqueue(dsn, blockers=4, others=30)
        wait_until(
            lambda: set(states(conn, rest).values()) == {"completed"}, timeout=60, message="the other jobs to complete"
        )
        wait_until(lambda: set(states(conn, blocked).values()) == {"dead_letter"}, timeout=30)
        assert worker.poll() is None  # still serving
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(20) == 0
    finally:
        output = terminate(worker, signal.SIGKILL)
    assert "sync handlers are stuck past their deadline, or async ones ignoring their cancellation" in output
    if processes == "1":
        assert "starting this worker process afresh" in output
    else:
        assert "asked to be started afresh; starting a new one" in output
    errors = conn.execute(
        "SELECT DISTINCT error_type FROM jobqueue.job_errors WHERE job_id = ANY(%s)", (blocked,)
    ).fetchall()
    assert errors == [("JobTimeout",)]


@pytest.mark.parametrize("blocker", ["blocks_forever", "swallows_cancel"])
def test_sigterm_ends_a_worker_whose_handler_is_stuck_within_the_grace(dsn, conn, blocker):
    """A sync handler blocked for good, or an async one that swallows every cancellation (before,
    asyncio.run's last step waited for its task for ever: the process never exited)."""
    worker = spawn_worker(
        dsn, "tests.support.apps:queue", "--concurrency", "4", "--shutdown-grace", "2", "--lease", "3"
    )
    try:
        blocked, rest = enqueue(dsn, blockers=1, others=3, blocker=blocker)
        wait_until(lambda: states(conn, blocked) == {blocked[0]: "dead_letter"}, timeout=30)
        wait_until(lambda: set(states(conn, rest).values()) == {"completed"}, timeout=30)
        wait_until(
            lambda: conn.execute("SELECT stuck_handlers FROM jobqueue.workers").fetchone() == (1,),
            timeout=20,
            message="the registry to show the stuck handler",
        )
        stopping = time.monotonic()
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(15) == 0
        stopped_in = time.monotonic() - stopping
    finally:
        output = terminate(worker, signal.SIGKILL)
    assert stopped_in < 2 + 5, output
    assert "exiting with 1 handlers still stuck past their deadline" in output
    assert conn.execute("SELECT status FROM jobqueue.workers").fetchone() == ("stopped",)
