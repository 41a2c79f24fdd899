"""Ordering keys on real worker processes: 30 keys × 30 jobs on 2 processes × 20 slots — no two
jobs of one key overlap, each key runs in enqueue order, and the keys run in parallel."""

from __future__ import annotations

import signal
import time

import pytest

from jobqueue import Client
from tests.support import ledger_app
from tests.support.waiting import wait_until
from tests.support.workers import spawn_worker, terminate

pytestmark = pytest.mark.slow

KEYS, PER_KEY, SLEEP = 30, 30, 0.05


def test_30_keys_of_30_jobs_on_2_processes_run_one_at_a_time_per_key_in_order_and_in_parallel(dsn, conn):
    conn.execute(ledger_app.ORDERED_SCHEMA)
    worker = spawn_worker(dsn, "tests.support.ledger_app:queue", "--processes", "2", "--concurrency", "20")
    try:
        wait_until(
            lambda: conn.execute("SELECT count(*) FROM jobqueue.workers WHERE status = 'running'").fetchone()[0] == 2,
            timeout=30,
        )
        # interleaved: key 0's first job, key 1's first job, …, so every key's jobs are spread out
        jobs = [
            {
                "job_type": "ordered",
                "ordering_key": f"k{k}",
                "payload": {"key": f"k{k}", "n": n, "sleep": SLEEP},
                "priority": ("low", "critical", "normal")[(n + k) % 3],
            }  # priorities never reorder a key
            for n in range(PER_KEY)
            for k in range(KEYS)
        ]
        started = time.monotonic()
        with Client(dsn) as client:
            client.enqueue_many(jobs)
        wait_until(
            lambda: (
                conn.execute("SELECT count(*) FROM jobqueue.jobs WHERE state = 'completed'").fetchone()[0]
                == KEYS * PER_KEY
            ),
            timeout=120,
        )
        took = time.monotonic() - started
        both = conn.execute("SELECT count(DISTINCT locked_by) FROM jobqueue.jobs").fetchone()[0]
    finally:
        terminate(worker)
    runs = conn.execute("SELECT ordering_key, n, started, ended FROM public.ordered_runs ORDER BY started").fetchall()
    assert len(runs) == KEYS * PER_KEY
    by_key: dict[str, list] = {}
    for key, n, begun, ended in runs:
        by_key.setdefault(key, []).append((n, begun, ended))
    for key, seen in by_key.items():
        assert [n for n, _, _ in seen] == list(range(PER_KEY)), f"{key} ran out of order"
        for (_, _, ended), (_, begun, _) in zip(seen, seen[1:]):
            assert ended <= begun, f"two jobs of {key} overlapped"
    serial = KEYS * PER_KEY * SLEEP
    gaps = sorted(
        (b2 - e1).total_seconds() for seen in by_key.values() for (_, _, e1), (_, b2, _) in zip(seen, seen[1:])
    )
    print(
        f"took {took:.2f} s (serially at least {serial:.0f} s); "
        f"gap between a key's jobs: median {gaps[len(gaps) // 2] * 1000:.1f} ms"
    )
    assert took < serial / 3, f"{took:.1f} s, serially at least {serial:.0f} s"
    assert both == 2  # both processes took keys' jobs
    overlapping_keys = max(sum(1 for _, _, b, e in runs if b <= at < e) for _, _, at, _ in runs)
    assert overlapping_keys >= 10  # many keys at once


def test_a_worker_killed_with_keys_held_loses_no_job_and_breaks_no_order(dsn, conn):
    """SIGKILL while keys' heads run: their leases run out, the heads run again (their rows were
    in their transactions, rolled back with the kill), and every key goes on in order."""
    conn.execute(ledger_app.ORDERED_SCHEMA)
    keys, per_key = 5, 20
    with Client(dsn) as client:
        client.enqueue_many(
            [
                {"job_type": "ordered", "ordering_key": f"k{k}", "payload": {"key": f"k{k}", "n": n, "sleep": 0.1}}
                for n in range(per_key)
                for k in range(keys)
            ]
        )
    args = ("--concurrency", "10", "--lease", "2")
    env = {"JOBQUEUE_SWEEP_INTERVAL": "0.3"}
    done = lambda: conn.execute("SELECT count(*) FROM public.ordered_runs").fetchone()[0]  # noqa: E731
    victim = spawn_worker(dsn, "tests.support.ledger_app:queue", *args, env=env)
    try:
        wait_until(lambda: done() >= 20, timeout=60)
        victim.send_signal(signal.SIGKILL)
    finally:
        terminate(victim, signal.SIGKILL)
    held = conn.execute("SELECT count(*) FROM jobqueue.jobs WHERE state = 'processing'").fetchone()[0]
    rescuer = spawn_worker(dsn, "tests.support.ledger_app:queue", *args, env=env)
    try:
        wait_until(lambda: done() == keys * per_key, timeout=90)
    finally:
        terminate(rescuer)
    assert held > 0  # the kill left keys' heads running
    for k in range(keys):
        seen = conn.execute(
            "SELECT n, started, ended FROM public.ordered_runs WHERE ordering_key = %s ORDER BY started", (f"k{k}",)
        ).fetchall()
        assert [n for n, _, _ in seen] == list(range(per_key))
        assert all(a[2] <= b[1] for a, b in zip(seen, seen[1:]))
    assert conn.execute("SELECT count(*) FROM jobqueue.jobs WHERE attempts > 1").fetchone()[0] >= 1
