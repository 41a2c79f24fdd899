"""The processes a scenario runs and hurts: `jobqueue-worker` processes and a `jobqueue api`.

`WorkerFleet` runs P single-process workers on the recording app, each with its own log file, and
restarts any that exits — the ones the campaign killed (SIGKILL scenario) and the ones that exited
by themselves, which it counts: an orchestrator would restart them too, but the report says so.
`stop()` is the graceful stop every deployment relies on: SIGTERM, then SIGKILL for a process still
running after the shutdown grace plus `STOP_MARGIN` seconds (reported: it ignored SIGTERM).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from jobqueue.api.serve import wait_ready

#: Seconds past the shutdown grace a stopping process may take before it counts as ignoring SIGTERM.
STOP_MARGIN = 10.0
#: How long the API process may take to answer /readyz (imports and a first pool on a loaded box).
API_READY_TIMEOUT = 60.0


def _jobqueue_command(entry: str, *args: str) -> list[str]:
    return [sys.executable, "-c", f"import sys; from jobqueue.cli import {entry}; sys.exit({entry}())", *args]


class _Process:
    """One child process with its log file, started again under the same name when asked."""

    def __init__(self, name: str, command: list[str], env: dict[str, str], logdir: Path) -> None:
        self.name = name
        self.command = command
        self.env = env
        self.log_path = logdir / f"{name}.log"
        self.popen: subprocess.Popen | None = None
        self.stopped = False  # SIGSTOP'ed by the campaign

    def start(self) -> None:
        with open(self.log_path, "a") as log:
            self.popen = subprocess.Popen(self.command, env=self.env, stdout=log, stderr=subprocess.STDOUT)

    def _started(self) -> subprocess.Popen:
        if self.popen is None:
            raise RuntimeError(f"{self.name} was never started")
        return self.popen

    @property
    def pid(self) -> int:
        return self._started().pid

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def signal(self, sig: int) -> None:
        if self.alive():
            os.kill(self.pid, sig)
        if sig == signal.SIGSTOP:
            self.stopped = True
        elif sig == signal.SIGCONT:
            self.stopped = False

    def kill(self) -> int:
        """SIGKILL, waited for; returns the pid it had."""
        pid = self.pid
        self.signal(signal.SIGKILL)
        self._started().wait()
        self.stopped = False
        return pid

    def terminate(self) -> None:
        """SIGTERM: the graceful stop (a stopped process is continued first, or it could not act on it)."""
        if self.alive():
            if self.stopped:
                self.signal(signal.SIGCONT)
            self._started().send_signal(signal.SIGTERM)

    def exited_by(self, deadline: float) -> bool:
        """Wait until ``deadline`` (monotonic); False, and SIGKILL, when it is still running then."""
        if self.popen is None:
            return True
        try:
            self.popen.wait(timeout=max(deadline - time.monotonic(), 0.0))
            return True
        except subprocess.TimeoutExpired:
            self.kill()
            return False


class WorkerFleet:
    def __init__(self, dsn: str, count: int, env: dict[str, str], logdir: Path, grace: float) -> None:
        environment = dict(os.environ, **env, JOBQUEUE_DSN=dsn, PYTHONUNBUFFERED="1")
        command = _jobqueue_command("worker_main", "--app", "tests.harness.faults.app:queue")
        self.workers = [_Process(f"worker-{i}", command, environment, logdir) for i in range(count)]
        self.grace = grace
        self.own_exits: list[tuple[str, int, int]] = []  # (name, pid, exit status) of unasked exits

    def start(self) -> None:
        for worker in self.workers:
            worker.start()

    def running(self) -> list[_Process]:
        return [w for w in self.workers if w.alive() and not w.stopped]

    def restart_exited(self) -> None:
        """Start again every worker that exited without being told to (counted in ``own_exits``)."""
        for worker in self.workers:
            if worker.popen is not None and not worker.alive():
                self.own_exits.append((worker.name, worker.pid, worker.popen.returncode))
                worker.start()

    def stop(self) -> list[str]:
        """Stop every worker gracefully, all at once; the names of those that ignored SIGTERM."""
        for worker in self.workers:
            worker.terminate()
        deadline = time.monotonic() + self.grace + STOP_MARGIN
        return [w.name for w in self.workers if not w.exited_by(deadline)]

    async def keep(self, interval: float = 0.5) -> None:
        """Run beside a scenario: restart workers that exit by themselves."""
        while True:
            self.restart_exited()
            await asyncio.sleep(interval)


class ApiProcess:
    """`jobqueue api` on ``port``; backpressure off, so only faults refuse submissions."""

    def __init__(self, dsn: str, port: int, logdir: Path) -> None:
        env = dict(
            os.environ,
            JOBQUEUE_DSN=dsn,
            JOBQUEUE_API_SOFT_LIMIT="1000000000",
            JOBQUEUE_API_HARD_LIMIT="1000000000",
            JOBQUEUE_API_TOTAL_SOFT_LIMIT="1000000000",
            JOBQUEUE_API_TOTAL_HARD_LIMIT="1000000000",
            PYTHONUNBUFFERED="1",
        )
        self.url = f"http://127.0.0.1:{port}"
        self.process = _Process("api", _jobqueue_command("main", "api", "--port", str(port)), env, logdir)
        self.ignored_sigterm = False

    async def start(self) -> None:
        self.process.start()
        if not await asyncio.to_thread(wait_ready, self.url, API_READY_TIMEOUT):
            raise RuntimeError(f"jobqueue api did not become ready at {self.url} (log: {self.process.log_path})")

    def kill(self) -> int:
        return self.process.kill()

    def stop(self) -> None:
        self.process.terminate()
        self.ignored_sigterm = not self.process.exited_by(time.monotonic() + 5 + STOP_MARGIN)
