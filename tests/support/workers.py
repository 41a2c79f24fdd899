"""Running workers in tests: in-process (a thread with its own event loop) or as real processes."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading

from jobqueue.app import JobQueue
from jobqueue.config import Settings
from jobqueue.process import WorkerProcess
from tests.support.settings import settings_of


def test_settings(dsn: str, **overrides) -> Settings:
    """Settings for fast tests: short poll, short leases, quick sweeps; ``overrides`` by their
    one-level names (`tests.support.settings`)."""
    base = dict(dsn=dsn, poll_interval=1.0, lease_seconds=10.0, sweep_interval=0.5, shutdown_grace=5.0)
    base.update(overrides)
    return settings_of(**base)


test_settings.__test__ = False  # a helper, not a test, although test modules import it by name


class WorkerThread:
    """A WorkerProcess on a private event loop in a thread; `stop()` is a graceful SIGTERM."""

    def __init__(self, app: JobQueue, settings: Settings) -> None:
        self.process = WorkerProcess(app, settings)
        self.worker = self.process.worker
        self.loop = asyncio.new_event_loop()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, daemon=True, name="test-worker")

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_until_complete(self.process.run())
        except BaseException as exc:  # surfaced by stop()
            self.error = exc
        finally:
            self.loop.close()

    def start(self, timeout: float = 15.0) -> "WorkerThread":
        self._thread.start()
        started = asyncio.run_coroutine_threadsafe(asyncio.wait_for(self.worker.started.wait(), timeout), self.loop)
        started.result(timeout + 1)
        return self

    def stop(self, timeout: float = 30.0) -> None:
        if self._thread.is_alive():
            self.loop.call_soon_threadsafe(self.process.request_stop)
            self._thread.join(timeout)
        assert not self._thread.is_alive(), "worker did not stop"
        if self.error is not None:
            raise self.error

    def __enter__(self) -> "WorkerThread":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def spawn_worker(
    dsn: str, app: str = "tests.support.apps:queue", *args: str, env: dict[str, str] | None = None
) -> subprocess.Popen:
    """`jobqueue-worker` as a real process (for SIGKILL/SIGTERM tests)."""
    environment = dict(os.environ, JOBQUEUE_DSN=dsn, PYTHONUNBUFFERED="1", **(env or {}))
    command = [
        sys.executable,
        "-c",
        "import sys; from jobqueue.cli import worker_main; sys.exit(worker_main())",
        "--app",
        app,
        *args,
    ]
    return subprocess.Popen(
        command,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
    )


def terminate(process: subprocess.Popen, sig: int = signal.SIGTERM, timeout: float = 30.0) -> str:
    if process.poll() is None:
        process.send_signal(sig)
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        output, _ = process.communicate()
    return output or ""
