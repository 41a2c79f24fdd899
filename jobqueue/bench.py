"""`jobqueue bench`: enqueue, drain and pick-up figures on the database you point it at.

What it measures, on a queue of its own (``bench-<random>``, deleted afterwards):
1. single enqueue: jobs enqueued one by one through the async client (each its own commit):
   jobs/s and latency p50/p99;
2. bulk enqueue: the same jobs through `enqueue_many` in chunks: jobs/s;
3. drain: P worker processes x C concurrency run the no-op jobs; jobs/s is measured in the
   database, from the first claim to the last completion, so process start-up is not counted;
4. pick-up latency on an idle worker: from the enqueue call (so including its commit) to the
   job's claim, p50/p99;
and checks that every job completed exactly once (one attempt, one result row).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import datetime, timezone

import psycopg

from jobqueue import db
from jobqueue.client import AsyncClient
from jobqueue.config import Settings
from jobqueue.store import bench as bench_store


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--jobs", type=int, default=50_000, help="jobs to drain (default 50000)")
    parser.add_argument("--single", type=int, default=2_000, help="jobs enqueued one by one (default 2000)")
    parser.add_argument("--processes", type=int, default=2, help="worker processes for the drain (default 2)")
    parser.add_argument("--concurrency", type=int, default=200, help="concurrency per process (default 200)")
    parser.add_argument("--pickup-samples", type=int, default=200, help="pick-up latency samples (default 200)")
    parser.add_argument("--chunk", type=int, default=5_000, help="jobs per enqueue_many call (default 5000)")
    parser.add_argument("--hold-xmin", action="store_true",
                        help="hold an open snapshot (as a long report query would) during the drain, so dead "
                             "row versions cannot be vacuumed: shows how the queue degrades under a held xmin")
    parser.add_argument("--runs", type=int, default=3, help="enqueue: runs per mode, the median is shown (default 3)")
    parser.add_argument("--batches", type=int, default=20, help="enqueue: enqueue_many calls per run (default 20)")
    parser.add_argument("--batch-size", type=int, default=1000, help="enqueue: jobs per enqueue_many call (default 1000)")
    parser.add_argument("--dsn", help="PostgreSQL DSN (JOBQUEUE_DSN)")


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))
    return ordered[index]


async def _single_enqueue(client: AsyncClient, queue: str, count: int) -> list[float]:
    latencies = []
    for i in range(count):
        started = time.perf_counter()
        await client.enqueue("noop", {"i": i}, queue=queue)
        latencies.append((time.perf_counter() - started) * 1000)
    return latencies


async def _bulk_enqueue(client: AsyncClient, queue: str, count: int, chunk: int) -> float:
    started = time.perf_counter()
    for offset in range(0, count, chunk):
        size = min(chunk, count - offset)
        await client.enqueue_many([{"job_type": "noop", "queue": queue, "payload": {"i": offset + i}}
                                   for i in range(size)])
    return time.perf_counter() - started


def _start_workers(settings: Settings, queue: str, processes: int, concurrency: int) -> subprocess.Popen:
    env = dict(os.environ, JOBQUEUE_DSN=settings.dsn)
    command = [sys.executable, "-c", "import sys; from jobqueue.cli import worker_main; sys.exit(worker_main())",
               "--app", "jobqueue.demo:queue", "--queues", queue, "--processes", str(processes),
               "--concurrency", str(concurrency), "--shutdown-grace", "5"]
    return subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=process_log("workers"))


def _wait_drained(conn: psycopg.Connection, queue: str, expected: int, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    done = 0
    while time.monotonic() < deadline:
        done = db.run_sync(conn, bench_store.completed_count(queue))
        if done >= expected:
            break
        time.sleep(0.2)
    return done


async def _pickup(client: AsyncClient, conn: psycopg.Connection, queue: str, samples: int) -> list[float]:
    committed: dict[uuid.UUID, datetime] = {}
    for _ in range(samples):
        # Measured from just before the enqueue call: an upper bound that includes the enqueue
        # round trip, because the commit itself cannot be timestamped from outside.
        before = datetime.now(timezone.utc)
        job_id = await client.enqueue("noop", queue=queue)
        committed[job_id] = before
        await asyncio.sleep(0.02)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        rows = db.run_sync(conn, bench_store.claimed_at(list(committed)))
        if len(rows) == len(committed):
            break
        time.sleep(0.1)
    return [(started - committed[job_id]).total_seconds() * 1000 for job_id, started in rows]


def _session(settings: Settings) -> db.Session:
    """The benchmark's own connections: no timeouts (a VACUUM, a snapshot held through the drain)."""
    return db.Session.of(settings, db.BENCH_NAME).unbounded().with_(idle_in_transaction_timeout=0)


def _hold_snapshot(settings: Settings) -> psycopg.Connection:
    """A transaction that keeps its snapshot (and so the cluster's xmin horizon) until closed."""
    holder = db.connect_sync(_session(settings), autocommit=False)  # the snapshot lives until close()
    holder.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
    db.run_sync(holder, bench_store.hold_snapshot())
    return holder


def process_log(name: str):
    """A file for a child process's log: a pipe nobody reads would fill up and block the child."""
    handle = tempfile.NamedTemporaryFile("w", prefix=f"jobqueue-bench-{name}-", suffix=".log", delete=False)
    print(f"({name} log: {handle.name})")
    return handle


def stop_process(process: subprocess.Popen, timeout: float) -> None:
    """SIGTERM (a graceful stop), then SIGKILL if it has not exited within ``timeout`` seconds."""
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()


def open_bench(settings: Settings, prefix: str) -> tuple[str, psycopg.Connection, str]:
    """A queue of the benchmark's own (``<prefix>-<random>``), an autocommit connection, and a line
    saying where it runs and how durable that server is."""
    queue = f"{prefix}-{uuid.uuid4().hex[:8]}"
    conn = db.connect_sync(_session(settings))
    fsync, synchronous_commit = db.run_sync(conn, bench_store.server_settings())
    return queue, conn, (f"on {conn.info.host}:{conn.info.port}/{conn.info.dbname} (fsync={fsync}, "
                         f"synchronous_commit={synchronous_commit}, {os.cpu_count()} cores), queue {queue}")


def run_bench(args: argparse.Namespace, settings: Settings) -> int:
    return asyncio.run(_run(args, settings))


async def _run(args: argparse.Namespace, settings: Settings) -> int:
    queue, conn, where = open_bench(settings, "bench")
    print(f"jobqueue bench {where}")
    workers = None
    try:
        async with AsyncClient(settings=settings, pool_size=2, application_name=db.BENCH_NAME) as client:
            await _single_enqueue(client, queue, min(200, args.single))  # warm-up (prepared statements)
            db.run_sync(conn, bench_store.delete_queue(queue))
            latencies = await _single_enqueue(client, queue, args.single)
            total = sum(latencies) / 1000
            print(f"single enqueue : {args.single / total:>9.0f} jobs/s   "
                  f"p50 {percentile(latencies, 0.5):.3f} ms   p99 {percentile(latencies, 0.99):.3f} ms")
            db.run_sync(conn, bench_store.delete_queue(queue))

            elapsed = await _bulk_enqueue(client, queue, args.jobs, args.chunk)
            print(f"bulk enqueue   : {args.jobs / elapsed:>9.0f} jobs/s   ({args.jobs} jobs, chunks of {args.chunk})")
            db.run_sync(conn, bench_store.vacuum())

            holder = _hold_snapshot(settings) if args.hold_xmin else None
            workers = _start_workers(settings, queue, args.processes, args.concurrency)
            done = _wait_drained(conn, queue, args.jobs, timeout=max(120, args.jobs / 500))
            if holder is not None:
                holder.close()
            first, last = db.run_sync(conn, bench_store.drain_span(queue))
            span = (last - first).total_seconds() if first and last else float("nan")
            print(f"drain          : {done / span:>9.0f} jobs/s   ({done} jobs, {args.processes} processes x "
                  f"{args.concurrency} concurrency, {span:.2f} s first claim -> last ack"
                  f"{', snapshot held throughout' if args.hold_xmin else ''})")
            once = db.run_sync(conn, bench_store.exactly_once(queue))
            exactly_once = once[0] == once[1] == once[2] == args.jobs
            print(f"exactly once   : {'yes' if exactly_once else 'NO'} "
                  f"({once[0]} completed on their first attempt, {once[1]} results, {once[2]} jobs)")

            db.run_sync(conn, bench_store.delete_queue(queue))
            await asyncio.sleep(1.0)  # let the workers go idle
            pickups = await _pickup(client, conn, queue, args.pickup_samples)
            print(f"pick-up        : p50 {percentile(pickups, 0.5):.2f} ms   p99 {percentile(pickups, 0.99):.2f} ms "
                  f"({len(pickups)} samples, enqueue call -> claim on an idle worker)")
            return 0 if exactly_once else 1
    finally:
        if workers is not None:
            stop_process(workers, timeout=30)
        db.run_sync(conn, bench_store.delete_queue(queue))
        conn.close()
