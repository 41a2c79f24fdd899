"""`jobqueue-worker --concurrency MIN:MAX` with a real process: under a backlog its slots rise step
by step to MAX (registry, its own /metrics, and the jobs it runs at once); once the queue is empty
and the slots idle they fall back to MIN. Cooldowns shortened through the environment."""

from __future__ import annotations

import json

import httpx

from tests.harness.devdb import free_port
from tests.support.prometheus import parse
from tests.support.waiting import wait_until
from tests.support.workers import spawn_worker, terminate

FAST = {
    "JOBQUEUE_AUTOSCALE_INTERVAL": "0.2",
    "JOBQUEUE_AUTOSCALE_UP_COOLDOWN": "0.5",
    "JOBQUEUE_AUTOSCALE_DOWN_COOLDOWN": "1",
    "JOBQUEUE_STATS_INTERVAL": "0.3",
}


def _target(conn) -> tuple[int | None, int | None, int] | None:
    row = conn.execute(
        "SELECT concurrency_min, concurrency_target, concurrency FROM jobqueue.workers WHERE status = 'running'"
    ).fetchone()
    return row


def _scraped_target(port: int) -> float | None:
    try:
        samples = parse(httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2).text)
    except httpx.TransportError:
        return None
    return next((v for (name, _), v in samples.items() if name == "jobqueue_worker_concurrency_target"), None)


def test_slots_rise_under_a_backlog_and_fall_back_when_it_is_gone(conn, dsn):
    port = free_port()
    worker = spawn_worker(
        dsn, "tests.support.apps:queue", "--concurrency", "1:7", "--metrics-port", str(port), env=FAST
    )
    try:
        wait_until(lambda: _target(conn), timeout=30, message="the worker registered")
        assert _target(conn) == (1, 1, 7)  # starts at MIN
        assert wait_until(lambda: _scraped_target(port), timeout=10, message="metrics") == 1
        conn.execute(
            "SELECT * FROM jobqueue.enqueue_many(%s::jsonb)",
            (json.dumps([{"job_type": "slow", "payload": {"seconds": 0.4}}] * 400),),
        )
        seen: list[int] = []

        def risen() -> bool:
            target = _target(conn)[1]
            if not seen or seen[-1] != target:
                seen.append(target)
            return target == 7

        wait_until(risen, timeout=30, message="slots rose to MAX")
        assert seen[0] == 1 and seen[-1] == 7
        assert all(b - a in (1, 2) for a, b in zip(seen, seen[1:])), seen  # step 2 (the last one clamped)
        assert wait_until(lambda: _scraped_target(port) == 7, timeout=5, message="/metrics shows the target")
        running = wait_until(
            lambda: conn.execute("SELECT count(*) FROM jobqueue.jobs WHERE state = 'processing'").fetchone()[0] >= 5,
            timeout=10,
            message="it runs more jobs at once",
        )
        assert running
        conn.execute("DELETE FROM jobqueue.jobs WHERE state = 'pending'")  # the backlog is gone
        wait_until(lambda: _target(conn)[1] == 1, timeout=30, message="slots fell back to MIN")
        peak = conn.execute("SELECT count(*) FROM jobqueue.jobs WHERE state = 'processing'").fetchone()[0]
        assert peak <= 1
    finally:
        output = terminate(worker)
    assert "autoscaling: 1 -> 3 slots" in output, output


def test_a_bad_concurrency_range_is_one_clear_line(dsn):
    worker = spawn_worker(dsn, "tests.support.apps:queue", "--concurrency", "8:2")
    output, _ = worker.communicate(timeout=30)
    assert worker.returncode == 2
    assert "--concurrency" in output and "Traceback" not in output
