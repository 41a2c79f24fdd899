"""Enqueue figures, each path beside the raw baseline's single-row INSERT or COPY.

One at a time, each job its own commit (jobs/s, p50, p99 of the call):
- the Python client, `AsyncClient.enqueue`, one producer;
- ``SELECT jobqueue.enqueue(…)`` from a plain psycopg connection, one producer;
- the Python client with 8 concurrent producers (a pool of 8 connections), against 8 raw
  producers with a connection each.
In bulk, ``--chunk`` (1,000) jobs per call (jobs/s), against raw COPY of the same chunks (measured
with the drain's load, `drain.py`):
- `AsyncClient.enqueue_many`; ``jobqueue.enqueue_many(jsonb)`` in SQL; ``POST /jobs/batch`` to a
  `jobqueue api` process started for it (and, with ``--rest``, the paced and closed-loop
  ``POST /jobs`` figures of `jobqueue bench api` on the same process).
Every path is warmed up first (connections, prepared statements); all producers run in this
process through the same driver. The jobs written here are deleted after each path.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from typing import AsyncContextManager, AsyncIterator, Awaitable, Callable

from jobqueue.bench import store
from jobqueue.bench.app import JOB_TYPE
from jobqueue.bench.common import Bench, connect_async, percentile, rate_and_latency, say
from jobqueue.bench.engine import JobqueueQueue
from jobqueue.bench.http import ApiServer, Connection, closed, paced
from jobqueue.bench.raw import RawQueue
from jobqueue.db import gateway as db

Enqueue = Callable[[int], Awaitable[object]]
WARM_UP = 200


async def _produce(enqueue: Enqueue, count: int, producers: int) -> tuple[list[float], float]:
    """``count`` calls spread over ``producers`` concurrent loops; (latencies in ms, seconds)."""
    latencies: list[float] = []

    async def loop(first: int, calls: int) -> None:
        for i in range(first, first + calls):
            started = time.perf_counter()
            await enqueue(i)
            latencies.append((time.perf_counter() - started) * 1000)

    share, extra = divmod(count, producers)
    started = time.perf_counter()
    await asyncio.gather(*(loop(p * share, share + (1 if p < extra else 0)) for p in range(producers)))
    return latencies, time.perf_counter() - started


async def _one_path(producer: AsyncContextManager[Enqueue], count: int, producers: int) -> dict[str, float]:
    async with producer as enqueue:
        await _produce(enqueue, min(WARM_UP, count), producers)
        latencies, elapsed = await _produce(enqueue, count, producers)
    return rate_and_latency(latencies, count, elapsed)


@contextlib.asynccontextmanager
async def sql_producer(bench: Bench) -> AsyncIterator[Enqueue]:
    """``SELECT jobqueue.enqueue(…)`` on a connection of the bench's own (autocommit: its own commit)."""
    conn = await connect_async(bench.settings)

    async def enqueue(i: int) -> object:
        return await db.run(conn, store.sql_enqueue(job_type=JOB_TYPE, payload=json.dumps({"i": i}), queue=bench.queue))

    try:
        yield enqueue
    finally:
        await conn.close()


async def enqueue_one(bench: Bench, jq: JobqueueQueue, raw: RawQueue) -> dict[str, tuple]:
    count = bench.args.single
    say(f"  enqueue one by one: {count} jobs per path")
    results = {}
    for name, producer, producers, side in (
        ("raw", raw.producer(1), 1, raw),
        ("client", jq.producer(1), 1, jq),
        ("sql", sql_producer(bench), 1, jq),
        ("raw_x8", raw.producer(8), 8, raw),
        ("client_x8", jq.producer(8), 8, jq),
    ):
        results[name] = await _one_path(producer, count, producers)
        side.reset()
    figures = {}
    for path, baseline in (("client", "raw"), ("sql", "raw"), ("client_x8", "raw_x8")):
        for measure in ("jobs_per_s", "p50_ms", "p99_ms"):
            figures[f"enqueue_one.{path}.{measure}"] = (results[path][measure], results[baseline][measure])
    return figures


async def bulk_sql(bench: Bench, jq: JobqueueQueue, count: int, chunk: int) -> float:
    """``jobqueue.enqueue_many(jsonb)`` in SQL, ``chunk`` jobs per statement: jobs/s."""
    conn = await connect_async(bench.settings)
    try:
        await db.run(conn, store.sql_enqueue_many(json.dumps(jq.specs(0, min(chunk, count)))))  # warm-up
        jq.reset()
        started = time.perf_counter()
        for offset in range(0, count, chunk):
            await db.run(conn, store.sql_enqueue_many(json.dumps(jq.specs(offset, min(count, offset + chunk)))))
        elapsed = time.perf_counter() - started
    finally:
        await conn.close()
    jq.reset()
    return count / elapsed


async def bulk_rest(bench: Bench, jq: JobqueueQueue, count: int, chunk: int) -> dict[str, float]:
    """``POST /jobs/batch`` of ``chunk`` jobs, one connection, to a `jobqueue api` process: jobs/s;
    with ``--rest`` also the paced p99 and the closed-loop req/s of ``POST /jobs``."""
    args = bench.args
    async with jq.client() as admin:
        key, key_info = await admin.create_api_key(bench.queue)
    server = ApiServer(bench.settings, args.api_workers)
    conns: list[Connection] = []
    try:
        await server.wait_ready()
        conn = await Connection.open(server.url, key)
        conns.append(conn)

        async def batch(start: int, stop: int) -> None:
            status, _ = await conn.post(json.dumps({"jobs": jq.specs(start, stop)}).encode(), b"/jobs/batch")
            if status != 201:
                raise RuntimeError(f"POST /jobs/batch answered {status} (see the API log)")

        await batch(0, min(chunk, count))  # warm-up
        jq.reset()
        started = time.perf_counter()
        for offset in range(0, count, chunk):
            await batch(offset, min(count, offset + chunk))
        figures = {"batch_jobs_per_s": count / (time.perf_counter() - started)}
        jq.reset()
        if args.rest:
            conns += [await Connection.open(server.url, key) for _ in range(args.clients - 1)]
            await paced(conns, bench.queue, min(args.rate, 500.0), 1.0)  # warm-up
            run = await paced(conns, bench.queue, args.rate, args.duration)
            say("  " + run.line(f"REST paced {args.rate:g}/s"))
            figures["paced_p99_ms"] = percentile(run.latencies, 0.99)
            figures["paced_errors"] = sum(run.errors.values())
            run = await closed(conns, bench.queue, args.duration / 2)
            say("  " + run.line(f"REST closed loop x{len(conns)}"))
            figures["closed_req_per_s"] = run.rate
            figures["closed_errors"] = sum(run.errors.values())
            jq.reset()
        return figures
    finally:
        for conn in conns:
            conn.close()
        server.stop()
        bench.run(store.delete_api_key(key_info.id))


async def bulk(bench: Bench, jq: JobqueueQueue) -> dict[str, object]:
    count, chunk = bench.args.jobs, bench.args.chunk
    say(f"  bulk: {count} jobs per path, {chunk} per call (SQL enqueue_many, REST /jobs/batch)")
    rest = await bulk_rest(bench, jq, count, chunk)
    return {"sql": await bulk_sql(bench, jq, count, chunk), **{f"rest_{k}": v for k, v in rest.items()}}
