"""`jobqueue bench api`: submission figures over real HTTP, load generator on the same machine.

It starts `jobqueue api` as a separate process (``--api-workers`` uvicorn processes) on a free port
— or uses ``--url`` — creates a producer key, and on a queue of its own (``bench-api-<random>``,
deleted afterwards, key revoked) measures ``POST /jobs``:
1. paced: ``--rate`` submissions per second for ``--duration`` seconds from ``--clients``
   connections. Each request has a scheduled send time and its latency counts from then, so a
   stalled server shows up in the percentiles instead of silently lowering the rate;
2. closed loop: the same connections submitting back to back for ``--duration`` / 2 seconds: the
   most requests per second this box sustains (client, API and Postgres sharing its cores).
Limits are raised for the API it starts so backpressure never interferes.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections import Counter

import httpx
import psycopg

from jobqueue.bench import percentile
from jobqueue.client import Client
from jobqueue.config import Settings


def add_api_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("target", nargs="?", choices=("engine", "api"), default="engine",
                        help="engine: enqueue, drain and pick-up (default); api: POST /jobs over HTTP")
    parser.add_argument("--rate", type=float, default=1000.0, help="api: paced submissions per second (default 1000)")
    parser.add_argument("--duration", type=float, default=10.0, help="api: seconds of paced load (default 10)")
    parser.add_argument("--clients", type=int, default=32, help="api: concurrent HTTP connections (default 32)")
    parser.add_argument("--api-workers", type=int, default=1, help="api: uvicorn processes to start (default 1)")
    parser.add_argument("--url", help="api: benchmark an API already running there instead of starting one")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _start_api(settings: Settings, port: int, workers: int) -> subprocess.Popen:
    env = dict(os.environ, JOBQUEUE_DSN=settings.dsn, JOBQUEUE_API_SOFT_LIMIT="1000000000",
               JOBQUEUE_API_HARD_LIMIT="1000000000")
    command = [sys.executable, "-c", "import sys; from jobqueue.cli import main; sys.exit(main())",
               "api", "--port", str(port), "--workers", str(workers)]
    return subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


async def _wait_ready(http: httpx.AsyncClient, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if (await http.get("/readyz")).status_code == 200:
                return
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError("the API did not become ready")
        await asyncio.sleep(0.1)


class Run:
    def __init__(self) -> None:
        self.latencies: list[float] = []
        self.statuses: Counter[int] = Counter()

    def line(self, label: str, elapsed: float) -> str:
        done = len(self.latencies)
        errors = {code: n for code, n in self.statuses.items() if code != 201}
        return (f"{label}: {done / elapsed:>7.0f} req/s   p50 {percentile(self.latencies, 0.5):.2f} ms   "
                f"p99 {percentile(self.latencies, 0.99):.2f} ms   max {max(self.latencies, default=0):.1f} ms   "
                f"({done} requests{', non-201: ' + str(errors) if errors else ', all 201'})")


async def _submit(http: httpx.AsyncClient, queue: str, i: int, run: Run, since: float) -> None:
    try:
        response = await http.post("/jobs", json={"job_type": "noop", "queue": queue, "payload": {"i": i}})
        run.statuses[response.status_code] += 1
    except httpx.TransportError:
        run.statuses[0] += 1
    run.latencies.append((time.perf_counter() - since) * 1000)


async def _paced(http: httpx.AsyncClient, queue: str, rate: float, duration: float, clients: int) -> tuple[Run, float]:
    run, total = Run(), int(rate * duration)
    counter = iter(range(total))
    start = time.perf_counter() + 0.05

    async def client() -> None:
        for i in counter:
            scheduled = start + i / rate
            delay = scheduled - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            await _submit(http, queue, i, run, scheduled)

    await asyncio.gather(*(client() for _ in range(clients)))
    return run, time.perf_counter() - start


async def _closed(http: httpx.AsyncClient, queue: str, duration: float, clients: int) -> tuple[Run, float]:
    run = Run()
    start = time.perf_counter()
    deadline = start + duration

    async def client(offset: int) -> None:
        i = offset
        while time.perf_counter() < deadline:
            await _submit(http, queue, i, run, time.perf_counter())
            i += clients

    await asyncio.gather(*(client(n) for n in range(clients)))
    return run, time.perf_counter() - start


def run_api_bench(args: argparse.Namespace, settings: Settings) -> int:
    return asyncio.run(_run(args, settings))


async def _run(args: argparse.Namespace, settings: Settings) -> int:
    queue = f"bench-api-{uuid.uuid4().hex[:8]}"
    with Client(settings=settings, pool_size=1) as admin:
        key, key_info = admin.create_api_key(queue)
    port = _free_port()
    server = None if args.url else _start_api(settings, port, args.api_workers)
    url = args.url or f"http://127.0.0.1:{port}"
    limits = httpx.Limits(max_connections=args.clients, max_keepalive_connections=args.clients)
    try:
        async with httpx.AsyncClient(base_url=url, limits=limits, timeout=30.0,
                                     headers={"Authorization": f"Bearer {key}"}) as http:
            await _wait_ready(http)
            print(f"jobqueue bench api: {url} ({'started here, ' + str(args.api_workers) + ' uvicorn process(es)' if server else 'given'}), "
                  f"{os.cpu_count()} cores shared by client, API and Postgres, queue {queue}")
            await _paced(http, queue, min(args.rate, 500.0), 1.0, args.clients)  # warm-up: connections, prepares
            run, elapsed = await _paced(http, queue, args.rate, args.duration, args.clients)
            print(run.line(f"paced {args.rate:g}/s ", elapsed))
            run, elapsed = await _closed(http, queue, args.duration / 2, args.clients)
            print(run.line(f"closed loop x{args.clients}", elapsed))
        return 0
    finally:
        if server is not None:
            server.send_signal(signal.SIGTERM)
            try:
                server.wait(timeout=15)
            except subprocess.TimeoutExpired:
                server.kill()
        with psycopg.connect(settings.dsn, autocommit=True) as conn:
            conn.execute("DELETE FROM jobqueue.jobs WHERE queue = %s", (queue,))
        with Client(settings=settings, pool_size=1) as admin:
            admin.revoke_api_key(key_info.id)
