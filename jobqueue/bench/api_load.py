"""`jobqueue bench api`: submission figures over real HTTP, load generator on the same machine.

It starts `jobqueue api` as a separate process (``--api-workers`` uvicorn processes) on a free port
— or uses ``--url`` — creates a producer key, and on a queue of its own (``bench-api-<random>``,
deleted afterwards with the key) measures ``POST /jobs``:
1. paced: ``--rate`` submissions per second for ``--duration`` seconds from ``--clients``
   connections, latency counted from each request's scheduled send time;
2. closed loop: the same connections submitting back to back for ``--duration`` / 2 seconds: the
   most requests per second this box sustains (client, API and Postgres sharing its cores).
The load generator and the API process are `jobqueue.bench.http`'s; `jobqueue bench --rest` puts
the same two figures in the benchmark's table.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import uuid

from jobqueue.bench import store as bench_store
from jobqueue.bench.common import bench_client, connect
from jobqueue.bench.http import ApiServer, Connection, closed, paced, wait_ready
from jobqueue.config import Settings
from jobqueue.db import gateway as db


def add_api_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "target",
        nargs="?",
        choices=("engine", "api", "enqueue"),
        default="engine",
        help="engine: the benchmark against the raw baseline (default); api: POST /jobs over HTTP; "
        "enqueue: the cost of idempotency keys on enqueue, against no keys",
    )
    parser.add_argument(
        "--rate", type=float, default=1000.0, help="api, --rest: paced submissions per second (default 1000)"
    )
    parser.add_argument("--duration", type=float, default=10.0, help="api, --rest: seconds of paced load (default 10)")
    parser.add_argument("--clients", type=int, default=32, help="api, --rest: concurrent HTTP connections (default 32)")
    parser.add_argument(
        "--api-workers", type=int, default=1, help="api, --rest: uvicorn processes to start (default 1)"
    )
    parser.add_argument("--url", help="api: benchmark an API already running there instead of starting one")


def run_api_bench(args: argparse.Namespace, settings: Settings) -> int:
    return asyncio.run(_run(args, settings))


async def _run(args: argparse.Namespace, settings: Settings) -> int:
    queue = f"bench-api-{uuid.uuid4().hex[:8]}"
    async with bench_client(settings) as admin:
        key, key_info = await admin.create_api_key(queue)
    server = None if args.url else ApiServer(settings, args.api_workers)
    url = server.url if server is not None else args.url
    conns: list[Connection] = []
    try:
        if server is not None:
            await server.wait_ready()
        elif not await wait_ready(url, 30.0):
            raise RuntimeError(f"the API at {url} did not become ready")
        conns = [await Connection.open(url, key) for _ in range(args.clients)]
        where = f"started here, {args.api_workers} uvicorn process(es)" if server else "given"
        print(
            f"jobqueue bench api: {url} ({where}), {args.clients} connections, {os.cpu_count()} cores shared "
            f"by load generator, API and Postgres, queue {queue}"
        )
        await paced(conns, queue, min(args.rate, 500.0), 1.0)  # warm-up: connections, prepared statements
        print((await paced(conns, queue, args.rate, args.duration)).line(f"paced {args.rate:g}/s "))
        print((await closed(conns, queue, args.duration / 2)).line(f"closed loop x{args.clients}"))
        return 0
    finally:
        for conn in conns:
            conn.close()
        if server is not None:
            server.stop()
        with connect(settings) as admin_conn:
            db.run_sync(admin_conn, bench_store.delete_queue(queue))
            db.run_sync(admin_conn, bench_store.delete_api_key(key_info.id))
