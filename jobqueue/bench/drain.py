"""Load and drain figures, measured the same way for jobqueue and for the raw baseline.

`load`: ``count`` no-op jobs in bulk (`enqueue_many` / COPY, ``--chunk`` per call): jobs/s, and
what the database wrote for them. `drain`: ``--processes`` worker processes × ``--concurrency``
run them (jobqueue's processes are `jobqueue-worker`, the raw ones `raw.py`'s loop), started and
listening before the jobs are released, so start-up is not counted; jobs/s is measured in the
database, from the first claim to the last completion. `life` is the two in a row, with a VACUUM
ANALYZE between (both tables start the drain from fresh statistics and no dead rows).

What the database did in each window, per job:
- WAL bytes: ``pg_current_wal_insert_lsn()`` before and after (whole cluster: keep it quiet);
- heap row versions written (inserted + updated, HOT or not) over every table of the queue's
  schema, from ``pg_stat_user_tables`` — counts of the work itself, which noise cannot blur;
- B-tree entries inserted, from the WAL records of the window (``pg_waldump``; no statistics
  view counts index insertions), when this machine can read the server's ``pg_wal``;
- checkpoints that ran (a checkpoint makes the next change to each page write a full-page image,
  so a window with one writes more WAL; the records' FPI bytes are reported).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from jobqueue.bench.common import (
    Bench,
    btree_insertions,
    hold_snapshot,
    row_versions,
    say,
    settled_counters,
    wal_bytes,
    wal_point,
)
from jobqueue.bench.engine import JobqueueQueue
from jobqueue.bench.raw import RawQueue

Side = JobqueueQueue | RawQueue


def _work(bench: Bench, side: Side, jobs: int, before, after, start, end) -> dict[str, Any]:
    rows = row_versions(before, after, side.schema)
    records = bench.wal.records(bench, start, end) if bench.wal else None
    insertions = btree_insertions(records)
    return {
        "wal_bytes_per_job": wal_bytes(start, end) / jobs,
        "heap_versions_per_job": rows["written"] / jobs,
        "btree_insertions_per_job": None if insertions is None else insertions / jobs,
        "fpi_bytes_per_job": None if records is None else records["FPI"][1] / jobs,
        "checkpoints": end.checkpoints - start.checkpoints,
        "rows": rows,
        "wal_records_per_job": None
        if records is None
        else {kind: round(count / jobs, 3) for kind, (count, _) in sorted(records.items()) if count},
    }


async def load(bench: Bench, side: Side, count: int) -> dict[str, Any]:
    before = settled_counters(bench)
    start = wal_point(bench)
    elapsed = await side.load(count, bench.args.chunk)
    end = wal_point(bench)
    after = settled_counters(bench)
    return {"jobs_per_s": count / elapsed, "seconds": elapsed, **_work(bench, side, count, before, after, start, end)}


async def _wait_drained(side: Side, workers, expected: int, timeout: float) -> int:
    """Until ``expected`` jobs are done. Each count is timed and the next one waits ten times as
    long, so counting a large backlog never takes a noticeable share of the CPU the drain uses."""
    deadline = time.monotonic() + timeout
    while True:
        started = time.monotonic()
        done = side.completed()
        if done >= expected or time.monotonic() > deadline:
            return done
        if not workers.alive():
            raise RuntimeError(f"{side.name} worker processes exited during the drain (see their logs)")
        await asyncio.sleep(min(5.0, max(0.05, 10 * (time.monotonic() - started))))


async def drain(bench: Bench, side: Side, count: int, *, hold_xmin: bool) -> dict[str, Any]:
    args = bench.args
    before = settled_counters(bench)
    workers: Any = await side.start_workers(args.processes, args.concurrency)  # the side's own kind
    holder = None
    try:
        holder = hold_snapshot(bench.settings) if hold_xmin else None
        start = wal_point(bench)
        await side.release(workers)
        done = await _wait_drained(side, workers, count, timeout=max(300.0, count / 200))
        end = wal_point(bench)
    finally:
        if holder is not None:
            holder.close()
        workers.stop()
    after = settled_counters(bench)
    done, first, last = side.span()
    seconds = (last - first).total_seconds() if first and last else float("nan")
    once, detail = side.exactly_once(count)
    say(
        f"  {side.name} drain: {done} jobs in {seconds:.2f} s = {done / seconds:,.0f} jobs/s"
        f"{', snapshot held' if hold_xmin else ''}; exactly once: {'yes' if once else 'NO'} ({detail})"
    )
    return {
        "jobs_per_s": done / seconds if seconds > 0 else float("nan"),
        "seconds": seconds,
        "done": done,
        "exactly_once": once,
        "exactly_once_detail": detail,
        **_work(bench, side, max(done, 1), before, after, start, end),
    }


async def life(bench: Bench, side: Side, count: int, *, hold_xmin: bool) -> dict[str, Any]:
    loaded = await load(bench, side, count)
    side.vacuum()
    return {"load": loaded, "drain": await drain(bench, side, count, hold_xmin=hold_xmin)}
