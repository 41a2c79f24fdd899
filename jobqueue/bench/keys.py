"""`jobqueue bench enqueue`: what idempotency keys cost an enqueue, against a baseline without
keys measured in the same run.

On a queue of its own (``bench-enq-<random>``, deleted afterwards with its keys), ``--runs`` times,
each mode right after the others so that drift on the machine hits them alike:
- single: ``--single`` jobs enqueued one by one through the async client, each its own commit
  (jobs/s, p50, p99 of the call);
- bulk: ``--batches`` calls of `enqueue_many` with ``--batch-size`` jobs each (jobs/s);
for three modes: no key (the baseline), a new key per job (the job takes it), and a repeat of a held
key (the job is not created, the holder is returned). Prints the median of the runs per figure and
its ratio to the baseline.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
import uuid
from typing import Callable

from jobqueue.bench import store
from jobqueue.bench.common import Bench, bench_client, open_bench, percentile
from jobqueue.client import AsyncClient
from jobqueue.config import Settings

MODES = ("no key", "new key", "held key")
Keys = Callable[[int], "str | None"]


def _keys(mode: str, run: int) -> Keys:
    tag = f"{run}-{uuid.uuid4().hex[:6]}"
    if mode == "no key":
        return lambda i: None
    if mode == "new key":
        return lambda i: f"bench-{tag}-{i}"
    return lambda i: f"bench-held-{i % 100}"  # taken in the warm-up: later calls all repeat a held key


async def _single(client: AsyncClient, queue: str, count: int, key: Keys) -> tuple[float, float, float]:
    latencies = []
    for i in range(count):
        started = time.perf_counter()
        await client.enqueue("noop", {"i": i}, queue=queue, idempotency_key=key(i))
        latencies.append((time.perf_counter() - started) * 1000)
    return count / (sum(latencies) / 1000), percentile(latencies, 0.5), percentile(latencies, 0.99)


async def _bulk(client: AsyncClient, queue: str, batches: int, size: int, key: Keys) -> float:
    elapsed = 0.0
    for b in range(batches):
        jobs = [
            {"job_type": "noop", "queue": queue, "payload": {"i": i}, "idempotency_key": key(b * size + i)}
            for i in range(size)
        ]
        started = time.perf_counter()
        await client.enqueue_many(jobs)
        elapsed += time.perf_counter() - started
    return batches * size / elapsed


def run_enqueue_bench(args: argparse.Namespace, settings: Settings) -> int:
    bench = open_bench(settings, args, "bench-enq")
    server = bench.server
    print(
        f"jobqueue bench enqueue on {server['where']} (fsync={server['fsync']}, synchronous_commit="
        f"{server['synchronous_commit']}, {os.cpu_count()} cores), queue {bench.queue}: {args.runs} runs of "
        f"{args.single} single enqueues and {args.batches} x enqueue_many({args.batch_size}) per mode"
    )
    return asyncio.run(_run(bench))


async def _run(bench: Bench) -> int:
    args, queue = bench.args, bench.queue
    single: dict[str, list[tuple[float, float, float]]] = {mode: [] for mode in MODES}
    bulk: dict[str, list[float]] = {mode: [] for mode in MODES}
    try:
        async with bench_client(bench.settings, pool_size=2) as client:
            for mode in MODES:  # warm-up: prepared statements, and the held keys
                await _single(client, queue, 200, _keys(mode, -1))
                await _bulk(client, queue, 2, args.batch_size, _keys(mode, -1))
            for run in range(args.runs):
                for mode in MODES:
                    single[mode].append(await _single(client, queue, args.single, _keys(mode, run)))
                for mode in MODES:
                    bulk[mode].append(await _bulk(client, queue, args.batches, args.batch_size, _keys(mode, run)))
                bench.run(store.vacuum())
    finally:
        bench.run(store.delete_queue(queue))  # its jobs, with their results and idempotency keys
        bench.conn.close()
    base_rate = statistics.median(r[0] for r in single["no key"])
    base_bulk = statistics.median(bulk["no key"])
    for mode in MODES:
        rate, p50, p99 = (statistics.median(r[i] for r in single[mode]) for i in range(3))
        print(f"single, {mode:<8}: {rate:>7.0f} jobs/s ({rate / base_rate:.2f}x)   p50 {p50:.3f} ms   p99 {p99:.3f} ms")
    for mode in MODES:
        rate = statistics.median(bulk[mode])
        print(f"bulk,   {mode:<8}: {rate:>7.0f} jobs/s ({rate / base_bulk:.2f}x)")
    return 0
