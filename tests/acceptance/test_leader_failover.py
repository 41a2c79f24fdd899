"""Leader failover with real processes: SIGKILL the leading `jobqueue maintenance` (or
`jobqueue-worker`), another takes over within the lease TTL, and no cron tick is lost or doubled —
nor across a PostgreSQL restart."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import timedelta

import psycopg
import pytest

from tests.support.maintenance import fired_ticks, insert_schedule
from tests.support.waiting import wait_until
from tests.support.workers import spawn_worker, terminate

pytestmark = pytest.mark.slow

TTL = 2.0
FAST = {"JOBQUEUE_LEADER_TTL": str(TTL), "JOBQUEUE_SWEEP_INTERVAL": "0.5"}


def spawn_maintenance(dsn: str) -> subprocess.Popen:
    environment = dict(os.environ, JOBQUEUE_DSN=dsn, PYTHONUNBUFFERED="1", **FAST)
    return subprocess.Popen(
        [sys.executable, "-c", "import sys; from jobqueue.cli import main; sys.exit(main())", "maintenance"],
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def leader(conn) -> tuple[str, int] | None:
    """(leader id, pid) of the live lease, if any."""
    row = conn.execute(
        "SELECT leader_id FROM jobqueue.leaders WHERE name = 'maintenance' AND expires_at > now()"
    ).fetchone()
    return (row[0], int(row[0].split(":")[1])) if row else None


def kill_leader_and_time_takeover(conn, processes: list[subprocess.Popen]) -> tuple[str, str, float]:
    """SIGKILL the leading process; returns (old leader, new leader, seconds until the new one led)."""
    old, pid = wait_until(lambda: leader(conn), timeout=20, message="a leader")
    victim = next(p for p in processes if p.pid == pid)
    victim.send_signal(signal.SIGKILL)
    killed = time.monotonic()
    victim.wait(10)
    new, _ = wait_until(
        lambda: (current := leader(conn)) and current[0] != old and current,
        timeout=TTL * 5,
        interval=0.01,
        message="a new leader",
    )
    return old, new, time.monotonic() - killed


def assert_every_second_fired_once(conn, name: str) -> list[str]:
    ticks = fired_ticks(conn, name)
    assert ticks == [ticks[0] + timedelta(seconds=i) for i in range(len(ticks))], "a tick was lost or doubled"
    return [r[0] for r in conn.execute("SELECT fired_by FROM jobqueue.schedule_fires ORDER BY fire_at")]


def test_killing_the_leading_maintenance_process(dsn, conn):
    insert_schedule(conn, "every-second", "* * * * * *")
    processes = [spawn_maintenance(dsn) for _ in range(3)]
    try:
        wait_until(lambda: len(fired_ticks(conn, "every-second")) >= 3, timeout=30)
        old, new, took = kill_leader_and_time_takeover(conn, processes)
        count = len(fired_ticks(conn, "every-second"))
        wait_until(lambda: len(fired_ticks(conn, "every-second")) >= count + 3, timeout=10)
    finally:
        for process in processes:
            terminate(process)
    assert took < TTL + 0.5, f"takeover took {took:.2f}s with a {TTL}s lease"
    fired_by = assert_every_second_fired_once(conn, "every-second")
    assert old in fired_by and new in fired_by and fired_by[-1] == new


def test_killing_the_leading_worker(dsn, conn):
    """Maintenance runs inside jobqueue-worker by default; its registry row turns lost too."""
    insert_schedule(conn, "every-second", "* * * * * *", job_type="record")
    workers = [spawn_worker(dsn, "tests.support.apps:queue", "--lease", "1.5", env=FAST) for _ in range(2)]
    try:
        wait_until(lambda: len(fired_ticks(conn, "every-second")) >= 3, timeout=30)
        old, new, took = kill_leader_and_time_takeover(conn, workers)
        count = len(fired_ticks(conn, "every-second"))
        wait_until(lambda: len(fired_ticks(conn, "every-second")) >= count + 3, timeout=10)
        wait_until(
            lambda: conn.execute("SELECT status FROM jobqueue.workers WHERE id = %s", (old,)).fetchone()[0] == "lost",
            timeout=10,
        )
    finally:
        for worker in workers:
            terminate(worker)
    assert took < TTL + 0.5, f"takeover took {took:.2f}s with a {TTL}s lease"
    fired_by = assert_every_second_fired_once(conn, "every-second")
    assert old in fired_by and fired_by[-1] == new


def test_ticks_due_during_a_postgres_restart_fire_after_it(own_cluster):
    dsn = own_cluster
    with psycopg.connect(dsn, autocommit=True) as conn:
        insert_schedule(conn, "every-second", "* * * * * *")
    process = spawn_maintenance(dsn)
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            wait_until(lambda: len(fired_ticks(conn, "every-second")) >= 2, timeout=30)
        own_cluster.cluster.stop(mode="fast")
        time.sleep(2.5)  # ticks fall due while the database is down
        own_cluster.cluster.start()
        restarted = time.time()
        with psycopg.connect(dsn, autocommit=True) as conn:
            wait_until(lambda: fired_ticks(conn, "every-second")[-1].timestamp() > restarted + 2, timeout=30)
            assert_every_second_fired_once(conn, "every-second")
    finally:
        output = terminate(process)
    assert "Traceback" not in output, output
    # it noticed (its LISTEN connection broke) and carried on; its services lost no cycle to the
    # dead pooled connections, which the maintenance pool's check replaced (test_restart.py)
    assert "notifier connection lost" in output
