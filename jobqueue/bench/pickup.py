"""Pick-up latency on an idle worker: from the enqueue to the claim.

One worker process (jobqueue's, or a raw one) waits on LISTEN with nothing to do. The producer
enqueues a job (its own commit) and waits 20 ms before the next, so the worker is idle again each
time. The claim time is the claim statement's ``now()`` as the database stored it (same machine,
same clock). Issue 10's target counts from the enqueue's commit, which cannot be timestamped from
outside; the enqueue call returns right after it (its answer's way back), so ``p50_ms``/``p99_ms``
count from the call's return — the producer's own scheduling can skew a sample either way on a
loaded box. Counted from the moment the call started (``from_call_*``: the enqueue's whole round
trip included, what this project's earlier figures used) they are an upper bound. The first
samples warm the worker up (each waits for its claim) and are not counted.
"""

from __future__ import annotations

import asyncio
import time
from datetime import datetime, timezone
from typing import Any

from jobqueue.bench.common import Bench, percentile
from jobqueue.bench.drain import Side

WARM_UP = 20
SPACING = 0.02


async def _claims(side: Side, ids: list, timeout: float) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        claimed = side.claimed_at(ids)
        if len(claimed) == len(ids) or time.monotonic() > deadline:
            return claimed
        await asyncio.sleep(0.01)


async def pickup(bench: Bench, side: Side, samples: int) -> dict[str, Any]:
    workers: Any = await side.start_workers(1, bench.args.concurrency)  # the side's own kind
    try:
        await side.release(workers)
        async with side.producer() as enqueue:
            for i in range(WARM_UP):
                job_id = await enqueue(i)
                if not await _claims(side, [job_id], timeout=10.0):
                    raise RuntimeError(f"{side.name}: an idle worker did not pick a job up within 10 s")
            stamps: dict[object, tuple[datetime, datetime]] = {}
            for i in range(samples):
                called = datetime.now(timezone.utc)
                job_id = await enqueue(i)
                stamps[job_id] = (called, datetime.now(timezone.utc))
                await asyncio.sleep(SPACING)
            claimed = await _claims(side, list(stamps), timeout=30.0)
    finally:
        workers.stop()
    side.reset()
    from_call = [(claimed[job] - stamps[job][0]).total_seconds() * 1000 for job in claimed]
    from_return = [(claimed[job] - stamps[job][1]).total_seconds() * 1000 for job in claimed]
    return {
        "p50_ms": percentile(from_return, 0.5),
        "p99_ms": percentile(from_return, 0.99),
        "from_call_p50_ms": percentile(from_call, 0.5),
        "from_call_p99_ms": percentile(from_call, 0.99),
        "samples": len(claimed),
        "missed": samples - len(claimed),
    }
