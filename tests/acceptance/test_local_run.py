"""`make run` (tests/harness/localrun.py) as a user meets it: what it prints, one run at a time per
checkout and per port, the local admin key reused instead of a new one each run, Ctrl-C stopping
everything, and ``ONCE=1`` printing no key and no curl line for an API it then stops (issue 20)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import psycopg
import pytest

from jobqueue.client import Client
from tests.harness.devdb import free_port
from tests.support.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.xdist_group("local_run")  # jobqueue_local_* are roles of the whole cluster


class Run:
    """`python -m tests.harness.localrun` in ``checkout`` (its .run/ lives there), output collected."""

    def __init__(self, checkout: Path, dsn: str, port: int, **env: str) -> None:
        self.lines: list[str] = []
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.harness.localrun"],
            cwd=checkout,
            env=dict(os.environ, PYTHONPATH=str(ROOT), JOBQUEUE_DSN=dsn, JOBQUEUE_API_PORT=str(port), **env),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def wait_for(self, text: str, timeout: float = 60) -> None:
        wait_until(lambda: text in self.output or self.process.poll() is not None, timeout=timeout, message=text)
        assert text in self.output, self.output

    def finish(self, timeout: float = 60) -> int:
        code = self.process.wait(timeout)
        self._reader.join(5)
        return code

    def printed_key(self) -> str:
        found = re.search(r"local admin key \(([^)]*)\): (jq_\S+)", self.output)
        assert found, self.output
        return found.group(2)


def _live_workers(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT count(*) FROM jobqueue.workers WHERE status <> 'stopped'").fetchone()[0]


def _other_connections(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchone()[0]


def _live_local_admin_keys(dsn: str) -> list[str]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT key_prefix FROM jobqueue.api_keys WHERE producer_id = 'local' AND role = 'admin'"
            " AND revoked_at IS NULL"
        ).fetchall()
    return [prefix for (prefix,) in rows]


def test_make_run_serves_once_per_checkout_and_port_and_keeps_its_key(dsn, tmp_path):
    checkout, other_checkout = tmp_path / "clone", tmp_path / "another-clone"
    checkout.mkdir()
    other_checkout.mkdir()
    port = free_port()
    url = f"http://127.0.0.1:{port}"

    first = Run(checkout, dsn, port)
    try:
        first.wait_for("Ctrl-C stops everything")
        assert f"dashboard: {url}/dashboard" in first.output
        key = first.printed_key()
        assert "(new, kept in .run/admin-key)" in first.output
        assert (checkout / ".run" / "admin-key").read_text().strip() == key
        assert (checkout / ".run" / "admin-key").stat().st_mode & 0o077 == 0  # the owner's alone
        assert f"curl -s -X POST {url}/jobs -H 'Authorization: Bearer {key}'" in first.output
        root = httpx.get(url + "/")
        assert (root.status_code, root.headers["location"]) == (302, "/dashboard")
        assert httpx.get(url + "/workers", headers={"Authorization": f"Bearer {key}"}).status_code == 200
        assert _live_workers(dsn) == 1

        # a second run in the same checkout names the first and starts nothing
        second = Run(checkout, dsn, free_port())
        assert second.finish() == 1
        assert f"another `make run` is serving from this checkout (pid {first.process.pid})" in second.output
        assert f"API {url}" in second.output and "database:" not in second.output
        # one in another checkout, on the port the first one serves, is refused before it starts
        third = Run(other_checkout, dsn, port)
        assert third.finish() == 1
        assert f"port {port} on 127.0.0.1 is taken by another program" in third.output, third.output
        assert "database:" not in third.output
        assert _live_workers(dsn) == 1  # neither left a worker behind

        first.process.send_signal(signal.SIGINT)  # Ctrl-C
        assert first.finish() == 0
        assert "stopping the worker, the maintenance services and the API" in first.output
        assert "Traceback" not in first.output, first.output
        wait_until(lambda: _live_workers(dsn) == 0, timeout=10, message="the worker deregistered")
        with pytest.raises(httpx.ConnectError):
            httpx.get(url + "/healthz")
        assert not (checkout / ".run" / "make-run.json").exists()
    finally:
        first.process.kill()

    # ONCE=1: the demo and an answering API, then everything stops; no key minted, no curl line
    once = Run(checkout, dsn, port, ONCE="1")
    assert once.finish() == 0, once.output
    assert f"the REST API and the dashboard answered at {url}" in once.output
    assert "curl" not in once.output and "admin key" not in once.output
    assert "fail_permanent  dead_letter" in once.output  # the demo ran

    # the next run reuses the key, and revokes a stray one an earlier run left
    with Client(dsn, pool_size=1) as client:
        client.create_api_key("local", role="admin")
    assert len(_live_local_admin_keys(dsn)) == 2
    again = Run(checkout, dsn, port)
    try:
        again.wait_for("Ctrl-C stops everything")
        assert again.printed_key() == key and "(the same as last time" in again.output
        assert _live_local_admin_keys(dsn) == [key[:11]]
        again.process.send_signal(signal.SIGTERM)  # `kill` stops it as Ctrl-C does
        assert again.finish() == 0
    finally:
        again.process.kill()
    wait_until(lambda: _live_workers(dsn) == 0, timeout=10, message="the worker deregistered")


def test_a_key_of_another_database_is_not_reused(dsn, tmp_path):
    """The kept key names no key of this database (a new .pgdata, another JOBQUEUE_DSN): a new one."""
    (tmp_path / ".run").mkdir()
    (tmp_path / ".run" / "admin-key").write_text("jq_" + "x" * 43 + "\n")
    run = Run(tmp_path, dsn, free_port())
    try:
        run.wait_for("Ctrl-C stops everything")
        key = run.printed_key()
        assert key != "jq_" + "x" * 43 and "(new, kept in .run/admin-key)" in run.output
        assert (tmp_path / ".run" / "admin-key").read_text().strip() == key
    finally:
        run.process.send_signal(signal.SIGINT)
        assert run.finish() == 0


def test_no_process_outlives_a_killed_run(dsn, tmp_path):
    """Its processes have a process group of their own (Ctrl-C reaches the run alone, which stops
    each once), so they die with the run however it ends: SIGKILL too, which no handler sees. A
    run killed by an earlier version's closed pipe left the worker, maintenance and API serving."""
    port = free_port()
    run = Run(tmp_path, dsn, port)
    try:
        run.wait_for("Ctrl-C stops everything")
        run.process.kill()
        run.finish()
        wait_until(lambda: _live_workers(dsn) == 0, timeout=30, message="the worker stopped and deregistered")

        def api_gone() -> bool:
            try:
                httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1)
            except httpx.TransportError:
                return True
            return False

        wait_until(api_gone, timeout=30, message="the API stopped")
        wait_until(lambda: _other_connections(dsn) == 0, timeout=30, message="every connection of the run closed")
    finally:
        run.process.kill()
