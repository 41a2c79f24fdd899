"""A worker process and the supervisor of several: what `jobqueue-worker` actually runs.

One process = one asyncio loop with a `Worker` (claim loop), the maintenance services (elector,
sweeper, …) and one shared LISTEN connection. `--processes N` starts N such processes (spawned,
so each has its own interpreter and connections) and forwards SIGTERM/SIGINT to them; a child
that dies unexpectedly is restarted after a short pause, its jobs recovered by lease expiry.

A worker whose sync handlers are stuck past their deadline asks to be started afresh (the only way
to get threads back): it stops gracefully, then a lone process re-executes itself in place and a
supervised child exits with `RESTART_EXIT_CODE`, which its supervisor answers with a new child.
A process stopping while handlers are still stuck exits without waiting for their threads.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import multiprocessing
import os
import signal
import socket
import sys
import time

from jobqueue.app import JobQueue
from jobqueue.config import Settings
from jobqueue.db import gateway as db
from jobqueue.events.notifier import Notifier
from jobqueue.maintenance.runner import Maintenance
from jobqueue.model.errors import NotMigrated, PermissionDenied
from jobqueue.runtime.background import watch
from jobqueue.worker.metrics_server import METRICS_HOST
from jobqueue.worker.worker import Worker, new_worker_id

log = logging.getLogger("jobqueue.process")


def load_app(path: str) -> JobQueue:
    """Import ``module:attribute`` and check it is a JobQueue. The current directory is on the
    import path, as other worker commands do: ``jobqueue-worker --app myapp:queue`` run beside
    ``myapp.py`` finds it. What cannot be loaded is one clear `ValueError`, not a traceback."""
    module_name, _, attribute = path.partition(":")
    if not module_name or not attribute:
        raise ValueError(f"--app must look like module:attribute (got {path!r})")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and exc.name != module_name and not module_name.startswith(exc.name + "."):
            # the app was found; something it imports was not
            raise ValueError(
                f"--app {path}: importing {module_name!r} failed: no module named {exc.name!r} "
                "(is it installed in this environment?)"
            ) from None
        raise ValueError(
            f"--app {path}: no module named {exc.name!r} (run from the folder that holds it, or put it on PYTHONPATH)"
        ) from None
    except SyntaxError as exc:
        raise ValueError(f"--app {path}: {exc.filename}, line {exc.lineno}: {exc.msg}") from None
    try:
        app = getattr(module, attribute)
    except AttributeError:
        raise ValueError(f"--app {path}: module {module_name!r} has no attribute {attribute!r}") from None
    if not isinstance(app, JobQueue):
        raise TypeError(f"{path} is a {type(app).__name__}, not a jobqueue.JobQueue")
    return app


#: How long a starting worker tries to reach its database before it gives up with one clear line.
PREFLIGHT_TIMEOUT = 5


def preflight(settings: Settings) -> None:
    """Reach the database once, quickly, before anything starts: a wrong DSN or an unreachable
    server is `DatabaseUnavailable` in a few seconds (the command prints it and exits 2; an
    orchestrator starts the worker again), not a pool that waits 30 s and dies with a traceback."""
    if settings.worker.metrics_port:
        for index in range(settings.worker.processes):
            _check_listenable(settings.worker.metrics_port + index)
    conn = db.connect_sync(db.Session.of(settings.db, db.worker_name("preflight")), connect_timeout=PREFLIGHT_TIMEOUT)
    conn.close()


def _check_listenable(port: int) -> None:
    """--metrics-port: a port another process holds stops the start (exit 2), rather than a worker
    that starts without the figures it was asked to serve, or stops at once with status 0."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as asyncio's server will bind it
        try:
            probe.bind((METRICS_HOST, port))
        except OSError as exc:
            raise ValueError(
                f"--metrics-port: cannot listen on {METRICS_HOST}:{port} ({exc.strerror or exc})"
            ) from None


class WorkerProcess:
    """Everything one worker process runs: notifier, claim loop and (unless disabled) maintenance."""

    def __init__(self, app: JobQueue, settings: Settings) -> None:
        worker_id = new_worker_id()
        # One LISTEN connection, named like the worker's pool (JOBQUEUE_DIRECT_DSN when given: never a pooler).
        self.notifier = Notifier(db.Session.of(settings.db, db.worker_name(worker_id), direct=True).conninfo())
        self.worker = Worker(
            app,
            settings.worker,
            settings.db,
            settings.metrics,
            autoscale=settings.autoscale,
            backpressure=settings.backpressure,
            keys=settings.encryption.keys,
            worker_id=worker_id,
            notifier=self.notifier,
        )
        self.maintenance = (
            Maintenance.of(settings, self.notifier, self.worker.worker_id) if settings.worker.run_maintenance else None
        )
        for queue, makers in app.queues_not_served(settings.worker.queues).items():
            log.warning(
                "%s put jobs in queue %r, which this worker does not serve (--queues %s): a worker whose "
                "--queues include it must run them",
                ", ".join(makers),
                queue,
                ",".join(settings.worker.queues),
            )

    def request_stop(self) -> None:
        self.worker.request_stop()

    async def run(self) -> None:
        background = []
        if self.worker.database.listen:
            background.append(watch(asyncio.create_task(self.notifier.run(), name="notifier"), self.request_stop))
        if self.maintenance is not None:
            background.append(
                watch(asyncio.create_task(self.maintenance.run(), name="maintenance"), self.request_stop, fatal=_FATAL)
            )
        try:
            await self.worker.run()
        finally:
            for task in background:
                task.cancel()
            await asyncio.gather(*background, return_exceptions=True)
        for task in background:  # the worker stopped because of it: the process fails with it (exit 2)
            if not task.cancelled() and isinstance(task.exception(), _FATAL):
                raise task.exception()  # type: ignore[misc]


#: What ends a worker process rather than a background task being logged and the worker stopping
#: with status 0: a role the database refuses (docs/security.md: one `error:` line, exit 2) or a
#: missing schema. Retrying cannot help either.
_FATAL = (PermissionDenied, NotMigrated)


#: A worker process asking to be started afresh (EX_TEMPFAIL): its supervisor starts a new one
#: without counting it as a crash.
RESTART_EXIT_CODE = 75


async def serve(app: JobQueue, settings: Settings) -> Worker:
    """Run one worker process until SIGTERM/SIGINT (or a restart request), then shut down gracefully."""
    process = WorkerProcess(app, settings)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, process.request_stop)
    await process.run()
    return process.worker


def configure_logging() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(process)d %(name)s %(levelname)s %(message)s")


def run_worker_process(app_path: str, settings: Settings, *, restart_in_place: bool = False) -> None:
    configure_logging()
    runner = asyncio.Runner()
    worker = runner.run(serve(load_app(app_path), settings))
    if not worker.threads.stuck:
        # asyncio.run's last step: cancel what is left and wait for it. Not with a stuck async
        # handler, which swallows every cancellation: that wait would never end (it leaves below).
        runner.close()
    if worker.restart_requested and restart_in_place:
        log.warning("starting this worker process afresh (stuck handlers hold %d threads)", worker.threads.stuck)
        _flush_output()
        os.execv(sys.executable, [sys.executable, *sys.orig_argv[1:]])
    code = RESTART_EXIT_CODE if worker.restart_requested else 0
    if worker.threads.stuck:
        # Their threads may never return; interpreter shutdown must not wait for them or run
        # finalizers under them. Everything of ours is written and closed by now.
        log.warning("exiting with %d handlers still stuck past their deadline", worker.threads.stuck)
        _flush_output()
        os._exit(code)
    if code:
        sys.exit(code)


def _flush_output() -> None:
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()


#: More restarts than this within the window is a crash loop: the supervisor stops and exits 1,
#: as a single worker process failing the same way would, so an orchestrator sees it.
CRASH_LOOP_RESTARTS = 5
#: How a child may end when told to stop: cleanly; asking for a restart it no longer gets; or
#: killed by the forwarded SIGTERM while still starting, before it had claimed anything.
_CLEAN_STOPS = (0, RESTART_EXIT_CODE, -signal.SIGTERM)
CRASH_LOOP_WINDOW = 60.0


def supervise(app_path: str, settings: Settings) -> int:
    """Run ``settings.worker.processes`` worker processes until told to stop; returns an exit code."""
    load_app(app_path).check_keys(settings.encryption.keys)  # fail fast, in the parent, on a bad --app,
    preflight(settings)  # ... missing encryption keys or database
    if settings.worker.processes == 1:
        run_worker_process(app_path, settings, restart_in_place=True)
        return 0
    configure_logging()
    context = multiprocessing.get_context("spawn")
    stopping = False

    def start_child(index: int) -> multiprocessing.process.BaseProcess:
        own = settings
        if settings.worker.metrics_port:  # --metrics-port N: process i listens on N + i
            own = settings.with_(worker=settings.worker.with_(metrics_port=settings.worker.metrics_port + index))
        child = context.Process(target=run_worker_process, args=(app_path, own), daemon=False)
        child.start()
        return child

    children = [start_child(index) for index in range(settings.worker.processes)]

    def forward(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True
        for child in children:
            if child.is_alive() and child.pid:
                try:
                    os.kill(child.pid, signum)
                except ProcessLookupError:
                    pass

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    restarts: list[float] = []
    while True:
        for index, child in enumerate(children):
            child.join(timeout=0.2)
            if child.is_alive() or stopping:
                continue
            if child.exitcode == RESTART_EXIT_CODE:  # asked for it: stuck handlers, not a crash
                log.warning("worker process %s asked to be started afresh; starting a new one", child.pid)
                children[index] = start_child(index)
                continue
            now = time.monotonic()
            restarts = [at for at in restarts if now - at < CRASH_LOOP_WINDOW] + [now]
            if len(restarts) > CRASH_LOOP_RESTARTS:  # a bad DSN or schema: restarting cannot help
                log.error(
                    "worker processes exited %d times within %.0f s (last: %s with %s); giving up",
                    len(restarts),
                    CRASH_LOOP_WINDOW,
                    child.pid,
                    child.exitcode,
                )
                forward(signal.SIGTERM, None)
                for other in children:
                    other.join()
                return 1
            log.warning("worker process %s exited with %s; restarting it", child.pid, child.exitcode)
            time.sleep(1.0)
            children[index] = start_child(index)
        if stopping and not any(child.is_alive() for child in children):
            return 0 if all(child.exitcode in _CLEAN_STOPS for child in children) else 1
        if stopping:
            time.sleep(0.1)
