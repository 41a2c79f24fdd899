"""`jobqueue bench api`: submission figures over real HTTP, load generator on the same machine.

It starts `jobqueue api` as a separate process (``--api-workers`` uvicorn processes) on a free port
— or uses ``--url`` — creates a producer key, and on a queue of its own (``bench-api-<random>``,
deleted afterwards, key revoked) measures ``POST /jobs``:
1. paced: ``--rate`` submissions per second for ``--duration`` seconds from ``--clients``
   connections. Each request has a scheduled send time and its latency counts from then, so a
   stalled server shows up in the percentiles instead of silently lowering the rate;
2. closed loop: the same connections submitting back to back for ``--duration`` / 2 seconds: the
   most requests per second this box sustains (client, API and Postgres sharing its cores).
Limits are raised for the API it starts so backpressure never interferes. The load generator is a
minimal asyncio HTTP/1.1 client (see `Connection`), so it takes as little of the shared CPU as it can.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
import uuid
from collections import Counter
from urllib.parse import urlsplit

from jobqueue.api.serve import wait_ready
from jobqueue import db
from jobqueue.devdb import free_port
from jobqueue.bench import percentile, process_log, stop_process
from jobqueue.client import Client
from jobqueue.config import Settings
from jobqueue.store import bench as bench_store


def add_api_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("target", nargs="?", choices=("engine", "api", "enqueue"), default="engine",
                        help="engine: enqueue, drain and pick-up (default); api: POST /jobs over HTTP; "
                             "enqueue: the cost of idempotency keys on enqueue, against no keys")
    parser.add_argument("--rate", type=float, default=1000.0, help="api: paced submissions per second (default 1000)")
    parser.add_argument("--duration", type=float, default=10.0, help="api: seconds of paced load (default 10)")
    parser.add_argument("--clients", type=int, default=32, help="api: concurrent HTTP connections (default 32)")
    parser.add_argument("--api-workers", type=int, default=1, help="api: uvicorn processes to start (default 1)")
    parser.add_argument("--url", help="api: benchmark an API already running there instead of starting one")


def _start_api(settings: Settings, port: int, workers: int) -> subprocess.Popen:
    env = dict(os.environ, JOBQUEUE_DSN=settings.dsn, JOBQUEUE_API_SOFT_LIMIT="1000000000",
               JOBQUEUE_API_HARD_LIMIT="1000000000")
    command = [sys.executable, "-c", "import sys; from jobqueue.cli import main; sys.exit(main())",
               "api", "--port", str(port), "--workers", str(workers)]
    return subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=process_log("api"))


class Connection:
    """One keep-alive HTTP/1.1 connection that POSTs and reads the answer: a load generator has to
    cost far less than the server it measures (httpx's async pool spends more CPU per request
    than the API itself once dozens of connections are open)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, host: str, key: str) -> None:
        self.reader, self.writer = reader, writer
        self._head = (f"POST /jobs HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {key}\r\n"
                      "Content-Type: application/json\r\nContent-Length: ").encode()

    @classmethod
    async def open(cls, url: str, key: str) -> "Connection":
        parsed = urlsplit(url)
        reader, writer = await asyncio.open_connection(parsed.hostname, parsed.port or 80)
        return cls(reader, writer, parsed.netloc, key)

    async def post(self, body: bytes) -> tuple[int, bytes]:
        """The response's status and body."""
        self.writer.write(self._head + str(len(body)).encode() + b"\r\n\r\n" + body)
        status = int((await self.reader.readline()).split()[1])
        length = 0
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        return status, await self.reader.readexactly(length)

    def close(self) -> None:
        self.writer.close()


def busy_cpu_seconds() -> float | None:
    """CPU time the whole machine has spent busy (Linux ``/proc/stat``), or None elsewhere: with
    load generator, API and PostgreSQL on one box, their sum per request is the honest cost."""
    try:
        with open("/proc/stat") as stat:
            ticks = [int(value) for value in stat.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = ticks[3] + ticks[4]  # idle, iowait
    return (sum(ticks[:8]) - idle) / os.sysconf("SC_CLK_TCK")


class Run:
    def __init__(self) -> None:
        self.latencies: list[float] = []
        self.statuses: Counter[int] = Counter()
        self._busy_at_start = busy_cpu_seconds()

    def line(self, label: str, elapsed: float) -> str:
        done = len(self.latencies)
        errors = {code: n for code, n in self.statuses.items() if code != 201}
        busy_now = busy_cpu_seconds()
        cpu = ("" if busy_now is None or self._busy_at_start is None or not done
               else f"   machine CPU {(busy_now - self._busy_at_start) / done * 1e6:.0f} us/req")
        return (f"{label}: {done / elapsed:>7.0f} req/s   p50 {percentile(self.latencies, 0.5):.2f} ms   "
                f"p99 {percentile(self.latencies, 0.99):.2f} ms   max {max(self.latencies, default=0):.1f} ms{cpu}   "
                f"({done} requests{', non-201: ' + str(errors) if errors else ', all 201'})")


async def _submit(conn: Connection, queue: str, i: int, run: Run, since: float) -> None:
    try:
        status, _ = await conn.post(b'{"job_type":"noop","queue":"%s","payload":{"i":%d}}' % (queue.encode(), i))
    except (OSError, ValueError, IndexError, asyncio.IncompleteReadError):
        status = 0
    run.statuses[status] += 1
    run.latencies.append((time.perf_counter() - since) * 1000)


async def _paced(conns: list[Connection], queue: str, rate: float, duration: float) -> tuple[Run, float]:
    run, total = Run(), int(rate * duration)
    counter = iter(range(total))
    start = time.perf_counter() + 0.05

    async def client(conn: Connection) -> None:
        for i in counter:
            scheduled = start + i / rate
            delay = scheduled - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            await _submit(conn, queue, i, run, scheduled)

    await asyncio.gather(*(client(conn) for conn in conns))
    return run, time.perf_counter() - start


async def _closed(conns: list[Connection], queue: str, duration: float) -> tuple[Run, float]:
    run = Run()
    start = time.perf_counter()
    deadline = start + duration

    async def client(conn: Connection, offset: int) -> None:
        i = offset
        while time.perf_counter() < deadline:
            await _submit(conn, queue, i, run, time.perf_counter())
            i += len(conns)

    await asyncio.gather(*(client(conn, n) for n, conn in enumerate(conns)))
    return run, time.perf_counter() - start


def run_api_bench(args: argparse.Namespace, settings: Settings) -> int:
    return asyncio.run(_run(args, settings))


async def _run(args: argparse.Namespace, settings: Settings) -> int:
    queue = f"bench-api-{uuid.uuid4().hex[:8]}"
    with Client(settings=settings, pool_size=1, application_name=db.BENCH_NAME) as admin:
        key, key_info = admin.create_api_key(queue)
    port = free_port()
    server = None if args.url else _start_api(settings, port, args.api_workers)
    url = args.url or f"http://127.0.0.1:{port}"
    conns: list[Connection] = []
    try:
        if not await asyncio.to_thread(wait_ready, url, 30.0):
            raise RuntimeError(f"the API at {url} did not become ready")
        conns = [await Connection.open(url, key) for _ in range(args.clients)]
        where = f"started here, {args.api_workers} uvicorn process(es)" if server else "given"
        print(f"jobqueue bench api: {url} ({where}), {args.clients} connections, {os.cpu_count()} cores shared "
              f"by load generator, API and Postgres, queue {queue}")
        await _paced(conns, queue, min(args.rate, 500.0), 1.0)  # warm-up: connections, prepared statements
        run, elapsed = await _paced(conns, queue, args.rate, args.duration)
        print(run.line(f"paced {args.rate:g}/s ", elapsed))
        run, elapsed = await _closed(conns, queue, args.duration / 2)
        print(run.line(f"closed loop x{args.clients}", elapsed))
        return 0
    finally:
        for conn in conns:
            conn.close()
        if server is not None:
            stop_process(server, timeout=15)
        with db.connect_sync(db.Session.of(settings, db.BENCH_NAME)) as conn:
            db.run_sync(conn, bench_store.delete_queue(queue))
        with Client(settings=settings, pool_size=1, application_name=db.BENCH_NAME) as admin:
            admin.revoke_api_key(key_info.id)
