"""The raw baseline: a minimal queue written by hand, on the same cluster, measured in the same run.

What a competent engineer writes in an afternoon and no more (`bench_raw_*` in
queries.sql): one table, ``jobqueue_bench_raw.jobs`` (bigint identity id, queue,
job_type, payload jsonb, priority, state, run_at, created/claimed/finished timestamps), a partial
index on the runnable rows ``(queue, priority, run_at, id) WHERE state = 'pending'``, and a
statement-level trigger that NOTIFYs once per insert statement (idle workers sleep on LISTEN, as
jobqueue's do). Enqueue is one single-row ``INSERT … RETURNING id``; bulk is one COPY per chunk;
a worker is one process with one connection that claims a batch (``UPDATE … FROM (SELECT … ORDER
BY priority, run_at, id LIMIT n FOR UPDATE SKIP LOCKED)``, its own commit), runs an async no-op per
job, acks the batch with one ``UPDATE … WHERE id = ANY(…)``, and sleeps on LISTEN when nothing is
left. No leases, retries, results, errors, events or metrics: the floor jobqueue is compared with.

It talks to PostgreSQL through the same driver as jobqueue's client (psycopg, async), on the
bench's own connections (`common.session`: named jobqueue-bench, statements prepared from their
second run as jobqueue's are), so a ratio compares the SQL and the library, not two drivers. COPY streams its rows,
which a `Call` cannot
carry, so the bulk insert is the one statement here run on a cursor directly.

A raw worker process runs `main` (``DSN QUEUE BATCH``): it prints "ready" once it listens,
starts on a line "go" on stdin (exits on end of input instead) and stops on SIGTERM.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import subprocess
import sys
import time
from datetime import datetime
from typing import IO, AsyncIterator, Awaitable, Callable

import psycopg

from jobqueue.bench import store
from jobqueue.bench.app import JOB_TYPE
from jobqueue.bench.common import Bench, connect_async, process_log, stop_process
from jobqueue.config import Settings
from jobqueue.db import gateway as db

#: Seconds an idle raw worker sleeps when no NOTIFY comes (its fallback poll).
POLL_INTERVAL = 1.0


class RawQueueExists(RuntimeError):
    pass


class RawQueue:
    """The raw queue's side of every measurement (the same interface as `JobqueueQueue`)."""

    name = "raw"
    schema = store.RAW_SCHEMA
    table = f"{store.RAW_SCHEMA}.jobs"

    def __init__(self, bench: Bench) -> None:
        self.bench = bench
        self.created = False

    # --- its schema ---------------------------------------------------------------------------

    def create(self) -> None:
        """Create the schema, refusing to reuse one that exists: it may be another bench's, so it
        is never dropped unless this run created it."""
        if self.bench.run(store.raw_exists()):
            raise RawQueueExists(
                f"schema {store.RAW_SCHEMA} already exists: another bench is running on this database, or one was "
                f"killed before it could clean up. If none is running: DROP SCHEMA {store.RAW_SCHEMA} CASCADE"
            )
        first, *rest = store.raw_create()
        self.bench.run(first)
        self.created = True
        for call in rest:
            self.bench.run(call)

    def drop(self) -> None:
        if self.created:
            self.bench.run(store.raw_drop())
            self.created = False

    def reset(self) -> None:
        self.bench.run(store.raw_delete_all())

    # --- producing ----------------------------------------------------------------------------

    async def connect(self) -> psycopg.AsyncConnection:
        return await connect_async(self.bench.settings)

    @contextlib.asynccontextmanager
    async def producer(self, pool_size: int = 1) -> AsyncIterator[Callable[[int], Awaitable[object]]]:
        """``enqueue(i)``: one single-row INSERT, its own commit. With ``pool_size`` > 1, calls
        made concurrently use that many connections."""
        conns = [await self.connect() for _ in range(pool_size)]
        free: asyncio.Queue[psycopg.AsyncConnection] = asyncio.Queue()
        for conn in conns:
            free.put_nowait(conn)

        async def enqueue(i: int) -> int:
            conn = await free.get()
            try:
                return await db.run(
                    conn, store.raw_enqueue(queue=self.bench.queue, job_type=JOB_TYPE, payload=json.dumps({"i": i}))
                )
            finally:
                free.put_nowait(conn)

        try:
            yield enqueue
        finally:
            for conn in conns:
                await conn.close()

    async def load(self, count: int, chunk: int) -> float:
        """COPY ``count`` no-op jobs in statements of ``chunk`` rows; returns the seconds taken."""
        conn = await self.connect()
        copy_sql = store.raw_copy_statement()
        try:
            started = time.perf_counter()
            for offset in range(0, count, chunk):
                async with conn.cursor() as cursor, cursor.copy(copy_sql) as copy:
                    for i in range(offset, min(count, offset + chunk)):
                        await copy.write_row((self.bench.queue, JOB_TYPE, json.dumps({"i": i})))
            return time.perf_counter() - started
        finally:
            await conn.close()

    # --- working ------------------------------------------------------------------------------

    def vacuum(self) -> None:
        self.bench.run(store.raw_vacuum())

    async def start_workers(self, processes: int, batch: int) -> "RawWorkers":
        return RawWorkers(self.bench.dsn, self.bench.queue, processes, batch)  # blocks until they listen

    async def release(self, workers: "RawWorkers") -> None:
        workers.go()

    def completed(self) -> int:
        return self.bench.run(store.raw_drain_span())[0]

    def span(self) -> tuple[int, datetime | None, datetime | None]:
        return self.bench.run(store.raw_drain_span())

    def tenths(self) -> tuple[int, list[datetime] | None]:
        return self.bench.run(store.raw_finish_tenths())

    def exactly_once(self, expected: int) -> tuple[bool, str]:
        done, total = self.bench.run(store.raw_exactly_once())
        return done == total == expected, f"{done} done of {total} jobs"

    def claimed_at(self, ids: list) -> dict:
        return dict(self.bench.run(store.raw_claimed_at(ids)))

    async def prune(self) -> int:
        """What the hand-written queue does with finished jobs: one DELETE, then VACUUM; returns
        the jobs deleted."""
        pruned = self.bench.run(store.raw_prune())
        self.vacuum()
        return pruned

    async def maintain(self) -> int:
        """Nothing: the hand-written queue has no reindexer."""
        return 0


_WORKER = "import sys; from jobqueue.bench.raw import main; sys.exit(main(sys.argv[1:]))"


class RawWorkers:
    """``processes`` raw worker processes, started and listening (blocks until they are)."""

    def __init__(self, dsn: str, queue: str, processes: int, batch: int) -> None:
        self.processes = []
        try:
            for _ in range(processes):
                process = subprocess.Popen(
                    [sys.executable, "-c", _WORKER, dsn, queue, str(batch)],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=process_log("raw-worker"),
                    text=True,
                )
                self.processes.append(process)
            for process in self.processes:
                if _pipe(process.stdout).readline().strip() != "ready":
                    raise RuntimeError("a raw worker process did not start (see its log)")
        except BaseException:
            self.stop()
            raise

    def go(self) -> None:
        for process in self.processes:
            _pipe(process.stdin).write("go\n")
            _pipe(process.stdin).flush()

    def alive(self) -> bool:
        return all(process.poll() is None for process in self.processes)

    def stop(self) -> None:
        for process in self.processes:
            with contextlib.suppress(OSError):
                _pipe(process.stdin).close()  # a worker still waiting for "go" exits on end of input
        for process in self.processes:
            stop_process(process, timeout=10)


def _pipe(stream: IO[str] | None) -> IO[str]:
    """A raw worker's stdin or stdout: always a pipe, as it is started."""
    if stream is None:
        raise RuntimeError("a raw worker process was started without its pipes")
    return stream


async def noop(payload: object) -> None:
    return None


async def work(settings: Settings, queue: str, batch: int) -> None:
    listener = await connect_async(settings)
    conn = await connect_async(settings)
    wake, stopping = asyncio.Event(), asyncio.Event()
    loop = asyncio.get_running_loop()

    def stop() -> None:
        stopping.set()
        wake.set()

    loop.add_signal_handler(signal.SIGTERM, stop)

    async def listen() -> None:
        async for _ in listener.notifies():
            wake.set()

    await db.run(listener, store.raw_listen())
    listening = asyncio.create_task(listen())
    print("ready", flush=True)
    try:
        if (await loop.run_in_executor(None, sys.stdin.readline)).strip() != "go":
            return
        while not stopping.is_set():
            wake.clear()
            jobs = await db.run(conn, store.raw_claim(queue=queue, limit=batch))
            if jobs:
                await asyncio.gather(*(noop(payload) for _, _, payload in jobs))
                await db.run(conn, store.raw_ack([job_id for job_id, _, _ in jobs]))
                continue
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(wake.wait(), timeout=POLL_INTERVAL)
    finally:
        listening.cancel()
        with contextlib.suppress(asyncio.CancelledError, psycopg.Error):
            await listening
        await listener.close()
        await conn.close()


def main(argv: list[str]) -> int:
    dsn, queue, batch = argv
    settings = Settings.from_env()
    asyncio.run(work(settings.with_(db=settings.db.with_(dsn=dsn)), queue, int(batch)))
    return 0
