"""Circuit breakers across real `jobqueue-worker` processes: a failing dependency opens the breaker
for all of them, no attempt is used while it is open, other work flows, a probe closes it."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest

from jobqueue import Client
from tests.support.waiting import wait_until
from tests.support.workers import spawn_worker, terminate

pytestmark = pytest.mark.slow

RESET_AFTER = 8.0


def _circuit(conn):
    return conn.execute(
        "SELECT state, opened_at, updated_at FROM jobqueue.circuits WHERE name = 'flaky-api'"
    ).fetchone()


def _attempts(conn, ids) -> dict:
    return dict(conn.execute("SELECT id, attempts FROM jobqueue.jobs WHERE id = ANY(%s)", (ids,)).fetchall())


def test_a_failing_dependency_opens_the_breaker_for_every_worker_and_a_probe_closes_it(dsn, conn, tmp_path):
    down = tmp_path / "down"
    down.touch()
    env = {"JQ_TEST_CIRCUIT_RESET_AFTER": str(RESET_AFTER)}
    workers = [spawn_worker(dsn, "tests.support.circuit_app:queue", "--concurrency", "2", env=env) for _ in range(2)]
    outputs: list[str] = []
    try:
        wait_until(
            lambda: conn.execute("SELECT count(*) FROM jobqueue.workers WHERE status = 'running'").fetchone()[0] == 2,
            timeout=60,
        )
        with Client(dsn) as client:
            ids = client.enqueue_many([{"job_type": "call_api", "payload": {"down": str(down)}} for _ in range(30)])
            wait_until(lambda: _circuit(conn)[0] == "open", timeout=30)
            opened_at = _circuit(conn)[1]
            # Attempts claimed before it opened finish (failing as usual); then nothing runs.
            wait_until(
                lambda: (
                    conn.execute("SELECT count(*) FROM jobqueue.jobs WHERE state = 'processing'").fetchone()[0] == 0
                ),
                timeout=10,
            )
            before = _attempts(conn, ids)
            local = client.enqueue_many([{"job_type": "local_work"} for _ in range(10)])
            wait_until(
                lambda: (
                    conn.execute(
                        "SELECT count(*) FROM jobqueue.jobs WHERE id = ANY(%s) AND state = 'completed'", (local,)
                    ).fetchone()[0]
                    == 10
                ),
                timeout=20,
            )
            time.sleep(1.0)
            after = _attempts(conn, ids)
            observed_until = conn.execute("SELECT now()").fetchone()[0]
            assert observed_until < opened_at + timedelta(seconds=RESET_AFTER), "the machine was too slow to observe"
            assert after == before  # open: no attempt used, on either worker
            untouched = [job_id for job_id, attempts in before.items() if attempts == 0]
            assert len(untouched) >= 10  # those claimed while the news spread ran and failed as usual
            assert conn.execute(
                "SELECT count(*) FROM jobqueue.jobs WHERE id = ANY(%s) AND state = 'pending'", (untouched,)
            ).fetchone()[0] == len(untouched)
            down.unlink()  # the dependency recovers before the reset: the first probe succeeds
            wait_until(
                lambda: (
                    conn.execute(
                        "SELECT count(*) FROM jobqueue.jobs WHERE id = ANY(%s) AND state = 'completed'", (ids,)
                    ).fetchone()[0]
                    == 30
                ),
                timeout=60,
            )
    finally:
        outputs = [terminate(worker) for worker in workers]
    state, _, closed_at = _circuit(conn)
    assert state == "closed" and closed_at >= opened_at + timedelta(seconds=RESET_AFTER)
    assert set(_attempts(conn, untouched).values()) == {1}  # each ran once, after the breaker closed
    for output in outputs:  # both processes stopped claiming, and were told when it closed
        assert "circuit 'flaky-api' is open: not claiming call_api, call_api_checked" in output, output
        assert "circuit 'flaky-api' is closed: claiming call_api, call_api_checked again" in output, output
        assert "Traceback" not in output
    probes = sum("probes it" in output for output in outputs)
    assert probes == 1  # exactly one worker ran the probe
