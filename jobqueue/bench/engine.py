"""jobqueue's side of every measurement, used as a new user would: `AsyncClient.enqueue` and
`enqueue_many`, `jobqueue-worker` processes running an async no-op task (`jobqueue.bench.app`)
with their defaults (maintenance included), `pause_queue`/`resume_queue`, and the leader's
`Pruner`, `Vacuumer` and `Reindexer`.

The queue is paused while jobs are loaded and the workers start, and resumed once every worker
process listens, so all of them start the drain together (a process starting late would leave
the drain to the others and measure fewer processes than asked for). Drain rates come from the
database: first claim (``started_at``) to last ack (``finished_at``)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import AsyncIterator, Awaitable, Callable

from jobqueue.bench import store
from jobqueue.bench.app import JOB_TYPE
from jobqueue.bench.common import NAME, Bench, bench_client, process_log, say, stop_process
from jobqueue.client import AsyncClient
from jobqueue.db import gateway as db
from jobqueue.maintenance.pruner import DAY, Pruner, PrunerOptions
from jobqueue.maintenance.reindexer import Reindexer
from jobqueue.maintenance.vacuumer import DEFAULT_MIN_DEAD, Vacuumer, VacuumerOptions
from jobqueue.store import reindex as reindex_store
from jobqueue.store.retention import FINISHED_STATES

#: What the worker logs once it listens (jobqueue.worker.worker); the bench waits for it so no
#: process misses the resume notification.
STARTED_LINE = " started: queues="
#: How long the bench waits for the table to be vacuumed after the prune.
VACUUM_WAIT = 60.0
#: Retention the bench's Pruner gives every other queue: it must prune nothing but the bench's.
KEEP_OTHERS = 100 * 365 * DAY


class JobqueueQueue:
    name = "jobqueue"
    schema = "jobqueue"
    table = "jobqueue.jobs"

    def __init__(self, bench: Bench) -> None:
        self.bench = bench

    def client(self, pool_size: int = 1) -> AsyncClient:
        return bench_client(self.bench.settings, pool_size)

    def reset(self) -> None:
        self.bench.run(store.delete_queue(self.bench.queue))

    def cleanup(self) -> None:
        """Everything the bench's queue left: its jobs (with results and errors), its settings and
        retention rows, its workers' registry and stats rows, and the bench task's default row."""
        self.reset()
        self.bench.run(store.delete_queue_rows(self.bench.queue))
        self.bench.run(store.delete_task_default(JOB_TYPE))

    async def pause(self) -> None:
        async with self.client() as client:
            await client.pause_queue(self.bench.queue, force=True)  # its first worker starts later, on purpose

    # --- producing ----------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def producer(self, pool_size: int = 1) -> AsyncIterator[Callable[[int], Awaitable[object]]]:
        """``enqueue(i)`` through `AsyncClient.enqueue` (each job its own commit)."""
        async with self.client(pool_size) as client:

            async def enqueue(i: int) -> object:
                return await client.enqueue(JOB_TYPE, {"i": i}, queue=self.bench.queue)

            yield enqueue

    def specs(self, start: int, stop: int) -> list[dict]:
        return [{"job_type": JOB_TYPE, "queue": self.bench.queue, "payload": {"i": i}} for i in range(start, stop)]

    async def load(self, count: int, chunk: int) -> float:
        """``enqueue_many`` of ``count`` no-op jobs, ``chunk`` per call; returns the seconds taken."""
        async with self.client() as client:
            started = time.perf_counter()
            for offset in range(0, count, chunk):
                await client.enqueue_many(self.specs(offset, min(count, offset + chunk)))
            return time.perf_counter() - started

    # --- working ------------------------------------------------------------------------------

    def vacuum(self) -> None:
        self.bench.run(store.vacuum())

    async def start_workers(self, processes: int, concurrency: int) -> "JobqueueWorkers":
        workers = JobqueueWorkers(self.bench, processes, concurrency)
        try:
            await workers.wait_listening()
        except BaseException:
            workers.stop()
            raise
        return workers

    async def release(self, workers: "JobqueueWorkers") -> None:
        async with self.client() as client:
            await client.resume_queue(self.bench.queue)

    def completed(self) -> int:
        return self.bench.run(store.completed_count(self.bench.queue))

    def span(self) -> tuple[int, datetime | None, datetime | None]:
        return (self.completed(), *self.bench.run(store.drain_span(self.bench.queue)))

    def tenths(self) -> tuple[int, list[datetime] | None]:
        return self.bench.run(store.finish_tenths(self.bench.queue))

    def exactly_once(self, expected: int) -> tuple[bool, str]:
        first_attempt, results, total = self.bench.run(store.exactly_once(self.bench.queue))
        return (
            first_attempt == total == expected,
            f"{first_attempt} completed on their first attempt of {total} jobs, {results} result rows",
        )

    def claimed_at(self, ids: list) -> dict:
        return dict(self.bench.run(store.claimed_at(ids)))

    async def prune(self) -> int:
        """The `Pruner` with retention 0 for the bench queue only, then the `Vacuumer` as the leader
        runs it (polled until the table has been vacuumed, by it or by autovacuum: the pruner's
        deletes reach the statistics it reads a moment later); returns jobs pruned. Like every run
        of the Pruner it also drops idempotency keys whose window has closed, in any queue: such a
        key no longer holds anything. The results and errors tables are vacuumed by the bench."""
        self.bench.run(store.set_retention(self.bench.queue))
        vacuums = self.bench.run(store.vacuum_count())
        async with self._pool() as pool:  # closed after: its backend's counters reach the statistics on exit
            pruner = Pruner(
                pool,
                PrunerOptions(retention={state: KEEP_OTHERS for state in FINISHED_STATES}, fire_history=KEEP_OTHERS),
            )
            pruned = (await pruner.run_once()).jobs
        async with self._pool() as pool:
            # its default bound, or the whole prune when the backlog was smaller than that
            vacuumer = Vacuumer(pool, self._session(), VacuumerOptions(min_dead=min(DEFAULT_MIN_DEAD, max(pruned, 1))))
            deadline = time.monotonic() + VACUUM_WAIT
            while not (await vacuumer.run_once()).vacuumed and self.bench.run(store.vacuum_count()) == vacuums:
                if time.monotonic() > deadline:
                    say(f"  jobqueue: the table was not vacuumed within {VACUUM_WAIT:.0f} s of the prune")
                    break
                await asyncio.sleep(0.5)
        self.bench.run(store.vacuum_after_prune())
        return pruned

    async def maintain(self) -> int:
        """The `Reindexer` as the leader runs it, one index per run until none is worth a rebuild;
        returns the indexes rebuilt (and leftovers dropped)."""
        reindexer = Reindexer(self._session())
        done = 0
        for _ in range(2 * len(reindex_store.COVERED_INDEXES)):
            rebuilt = (await reindexer.run_once()).count
            if not rebuilt:
                break
            done += rebuilt
        return done

    def _session(self) -> db.Session:
        return db.Session.of(self.bench.settings.db, NAME, dsn=self.bench.dsn, direct=True)

    @contextlib.asynccontextmanager
    async def _pool(self) -> AsyncIterator:
        pool = db.async_pool(self.bench.dsn, min_size=1, max_size=1, name=NAME, settings=self.bench.settings.db)
        await pool.open(wait=True)
        try:
            yield pool
        finally:
            await pool.close()


class JobqueueWorkers:
    """``jobqueue-worker --processes P --concurrency C`` on the bench queue, as a separate process."""

    def __init__(self, bench: Bench, processes: int, concurrency: int) -> None:
        self.bench, self.count = bench, processes
        self.log = process_log("workers")
        env = dict(os.environ, JOBQUEUE_DSN=getattr(bench.args, "worker_dsn", None) or bench.dsn)
        command = [
            sys.executable,
            "-c",
            "import sys; from jobqueue.cli import worker_main; sys.exit(worker_main())",
            "--app",
            "jobqueue.bench.app:queue",
            "--queues",
            bench.queue,
            "--processes",
            str(processes),
            "--concurrency",
            str(concurrency),
            "--shutdown-grace",
            "5",
        ]
        self.process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=self.log)

    def alive(self) -> bool:
        return self.process.poll() is None

    async def wait_listening(self, timeout: float = 60.0) -> None:
        """Until every process has registered and logged that it listens."""
        deadline = time.monotonic() + timeout
        log = Path(self.log.name)
        registered_at = None
        while True:
            if not self.alive():
                raise RuntimeError(f"the worker processes exited (status {self.process.returncode}); see {log}")
            registered = self.bench.run(store.workers_running(self.bench.queue))
            now = time.monotonic()
            if registered >= self.count:
                if log.read_text(errors="replace").count(STARTED_LINE) >= self.count:
                    return
                registered_at = registered_at or now
                if now - registered_at > 5:  # registered, but the log line changed: LISTEN follows at once
                    say(f"(workers registered but their '{STARTED_LINE.strip()}' log line was not seen; going on)")
                    return
            elif now > deadline:
                raise RuntimeError(
                    f"{registered} of {self.count} worker processes registered in {timeout:.0f} s; see {log}"
                )
            await asyncio.sleep(0.05)

    def stop(self) -> None:
        stop_process(self.process, timeout=30)
