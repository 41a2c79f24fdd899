"""Global limits across real `jobqueue-worker` processes: a concurrency of 1 never runs two jobs at
once, a rate never lets more than its starts into any window, other job types keep flowing, and
a worker killed while it holds a limited job gives the slot back when its lease is reclaimed."""

from __future__ import annotations

import signal

import pytest

from jobqueue import Client
from tests.support.waiting import wait_until
from tests.support.workers import spawn_worker, terminate

pytestmark = pytest.mark.slow  # worker processes start and stop: 15-20 s each on this box

APP = "tests.support.limits_app:queue"


@pytest.fixture
def log(conn):
    conn.execute(
        "CREATE TABLE public.limit_log (job_id uuid, job_type text, attempt int, pid int, mark text, at timestamptz)"
    )
    return conn


def _running(conn) -> int:
    return conn.execute("SELECT count(*) FROM jobqueue.workers WHERE status = 'running'").fetchone()[0]


def _completed(conn, ids) -> int:
    return conn.execute(
        "SELECT count(*) FROM jobqueue.jobs WHERE id = ANY(%s) AND state = 'completed'", (ids,)
    ).fetchone()[0]


def _intervals(conn, job_type: str) -> list[tuple]:
    """(start, end, pid) of each finished attempt, by start."""
    return conn.execute(
        """SELECT s.at, e.at, s.pid FROM public.limit_log s
                           JOIN public.limit_log e ON e.job_id = s.job_id AND e.attempt = s.attempt AND e.mark = 'end'
                           WHERE s.mark = 'start' AND s.job_type = %s ORDER BY s.at""",
        (job_type,),
    ).fetchall()


def test_concurrency_one_across_two_processes_never_runs_two_at_once_and_other_types_flow(dsn, log):
    # Each process alone serves one queue of the limited jobs: the limit (per job type, in every
    # queue) must hold them to one at a time between the two processes.
    workers = [spawn_worker(dsn, APP, "--concurrency", "4", "--queues", f"{own},default") for own in ("a", "b")]
    try:
        wait_until(lambda: _running(log) == 2, timeout=60)
        with Client(dsn) as client:
            limited = client.enqueue_many(
                [{"job_type": "one_at_a_time", "payload": {"seconds": 0.2}, "queue": "ab"[i % 2]} for i in range(8)]
            )
            free = client.enqueue_many([{"job_type": "free", "payload": {"seconds": 0.05}} for _ in range(16)])
        wait_until(lambda: _completed(log, free) == 16, timeout=30)
        limited_done_when_free_done = _completed(log, limited)
        wait_until(lambda: _completed(log, limited) == 8, timeout=60)
    finally:
        outputs = [terminate(worker) for worker in workers]
    assert limited_done_when_free_done < 8  # the free jobs did not wait behind the limited ones
    runs = _intervals(log, "one_at_a_time")
    assert len(runs) == 8
    for (_, end, _), (start, _, _) in zip(runs, runs[1:]):
        assert start >= end  # never two at once, on either process
    assert len({pid for _, _, pid in runs}) == 2  # each process ran its queue's
    for output in outputs:
        assert "Traceback" not in output, output


def test_a_rate_never_lets_more_than_its_starts_into_any_window(dsn, log):
    worker = [spawn_worker(dsn, APP, "--concurrency", "8", env={"JQ_TEST_RATE": "4/s"}) for _ in range(2)]
    try:
        wait_until(lambda: _running(log) == 2, timeout=60)
        with Client(dsn) as client:
            ids = client.enqueue_many([{"job_type": "rated"} for _ in range(12)])
        wait_until(lambda: _completed(log, ids) == 12, timeout=30)
    finally:
        outputs = [terminate(w) for w in worker]
    # started_at is the claim transaction's now(), the time the rate's log records
    starts = [
        row[0]
        for row in log.execute(
            "SELECT extract(epoch FROM started_at)::float8 FROM jobqueue.jobs WHERE id = ANY(%s) ORDER BY started_at",
            (ids,),
        ).fetchall()
    ]
    for first in starts:
        assert sum(first <= s < first + 1.0 for s in starts) <= 4
    assert starts[-1] - starts[0] >= 2.0  # 12 starts at 4 per second need two full windows after the first
    assert starts[-1] - starts[0] < 6.0  # and the workers came back for them when the window freed up
    for output in outputs:
        assert "Traceback" not in output, output


def test_a_worker_killed_holding_a_limited_job_gives_its_slot_back_when_the_lease_is_reclaimed(dsn, log):
    env = {"JOBQUEUE_SWEEP_INTERVAL": "0.3"}
    with Client(dsn) as client:
        held = client.enqueue("one_at_a_time", {"seconds": 600, "first_attempt_only": True})
    victim = spawn_worker(dsn, APP, "--lease", "2", "--no-maintenance")
    try:
        wait_until(
            lambda: log.execute("SELECT count(*) FROM public.limit_log WHERE job_id = %s", (held,)).fetchone()[0] == 1,
            timeout=30,
        )
        with Client(dsn) as client:
            waiting = client.enqueue("one_at_a_time", {"seconds": 0})
        victim.send_signal(signal.SIGKILL)
        victim.wait(10)
    finally:
        terminate(victim, signal.SIGKILL)
    rescuer = spawn_worker(dsn, APP, "--lease", "2", env=env)
    try:
        wait_until(lambda: _completed(log, [held, waiting]) == 2, timeout=60)
    finally:
        output = terminate(rescuer)
    runs = _intervals(log, "one_at_a_time")
    assert len(runs) == 2  # the killed attempt never ended; its retry and the waiting job did, one after the other
    assert runs[1][0] >= runs[0][1]
    assert "Traceback" not in output, output
