"""The backlog figures (``--backlog N``): is the drain flat at a large backlog, and does the table
come back to size afterwards?

For each queue in turn: sizes of its table (heap, main fork) and of all its indexes at the start;
N jobs enqueued in bulk; VACUUM ANALYZE; sizes (loaded); the drain (``--processes`` ×
``--concurrency``, ``--hold-xmin`` holding a snapshot throughout); sizes (drained); how many times
autovacuum ran on the table during the drain; claims/s over the first and over the last tenth of
the drain, from the completion times the database stored; then the finished jobs are removed —
jobqueue's `Pruner` with retention 0 for the bench queue (no other queue's jobs qualify) and its
`Vacuumer`, the raw queue one DELETE and a VACUUM — sizes (pruned); then jobqueue's `Reindexer`
rebuilds what it finds bloated, one index per run until nothing is (the raw queue has nothing of
the kind) — sizes (maintained). Issue 10 asks for table plus indexes "back near their starting
size": `growth_left` is the share of the backlog's growth still there once all of that has run
(target: at most a tenth).

jobqueue's sizes are those of the whole ``jobqueue.jobs`` table: on a database of its own (``make
bench``) that is the bench's jobs alone.
"""

from __future__ import annotations

import time
from typing import Any

from jobqueue.bench import drain as drain_figures
from jobqueue.bench import store
from jobqueue.bench.common import Bench, say
from jobqueue.bench.drain import Side

MB = 1024 * 1024


def sizes(bench: Bench, side: Side) -> dict[str, Any]:
    heap, indexes = bench.run(store.table_sizes(side.table))
    return {
        "heap_mb": heap / MB,
        "index_mb": indexes / MB,
        "indexes_mb": {name: size / MB for name, (size,) in bench.run(store.index_sizes(side.table)).items()},
    }


def tenths(side: Side) -> dict[str, float]:
    """Completions per second over the first and the last tenth of the drained jobs."""
    count, marks = side.tenths()
    if not count or not marks or None in marks:
        return {"first_tenth_per_s": float("nan"), "last_tenth_per_s": float("nan"), "last_over_first": float("nan")}
    t0, t10, t90, t100 = marks
    tenth = count / 10
    first = tenth / max((t10 - t0).total_seconds(), 1e-6)
    last = tenth / max((t100 - t90).total_seconds(), 1e-6)
    return {"first_tenth_per_s": first, "last_tenth_per_s": last, "last_over_first": last / first}


async def backlog(bench: Bench, side: Side, count: int) -> dict[str, Any]:
    say(f"  {side.name}: backlog of {count} jobs")
    measured: dict[str, Any] = {"sizes": {"start": sizes(bench, side)}}
    measured["load"] = await drain_figures.load(bench, side, count)
    say(f"  {side.name}: loaded at {measured['load']['jobs_per_s']:,.0f} jobs/s")
    side.vacuum()
    measured["sizes"]["loaded"] = sizes(bench, side)
    measured["drain"] = await drain_figures.drain(bench, side, count, hold_xmin=bench.args.hold_xmin)
    measured["sizes"]["drained"] = sizes(bench, side)
    measured["autovacuum_runs"] = measured["drain"]["rows"]["tables"].get("jobs", {}).get("autovacuum_runs", 0)
    measured["tenths"] = tenths(side)
    started = time.perf_counter()
    measured["pruned"] = await side.prune()
    measured["prune_seconds"] = time.perf_counter() - started
    measured["sizes"]["pruned"] = sizes(bench, side)
    say(f"  {side.name}: pruned and vacuumed in {measured['prune_seconds']:.1f} s")
    started = time.perf_counter()
    measured["rebuilt"] = await side.maintain()
    measured["maintain_seconds"] = time.perf_counter() - started
    measured["sizes"]["maintained"] = sizes(bench, side)
    if measured["rebuilt"]:
        say(f"  {side.name}: {measured['rebuilt']} indexes rebuilt in {measured['maintain_seconds']:.1f} s")
    side.reset()
    return measured


def _total(measured: dict[str, Any], stage: str) -> float:
    return measured["sizes"][stage]["heap_mb"] + measured["sizes"][stage]["index_mb"]


def growth_left(measured: dict[str, Any]) -> float:
    """The share of what the backlog added to table + indexes that is still there once the finished
    jobs are pruned, vacuumed and the bloated indexes rebuilt (0: back to the starting size; 1:
    nothing given back)."""
    grown = _total(measured, "loaded") - _total(measured, "start")
    return (_total(measured, "maintained") - _total(measured, "start")) / grown if grown > 0 else float("nan")


def figures(measured: dict[str, dict[str, Any]]) -> dict[str, tuple]:
    """The report's (jobqueue, raw) pairs from both queues' measurements."""

    def pair(read) -> tuple:
        return read(measured["jobqueue"]), read(measured["raw"])

    result = {
        "backlog.load_jobs_per_s": pair(lambda m: m["load"]["jobs_per_s"]),
        "backlog.drain_jobs_per_s": pair(lambda m: m["drain"]["jobs_per_s"]),
        "backlog.first_tenth_per_s": pair(lambda m: m["tenths"]["first_tenth_per_s"]),
        "backlog.last_tenth_per_s": pair(lambda m: m["tenths"]["last_tenth_per_s"]),
        "backlog.last_over_first": pair(lambda m: m["tenths"]["last_over_first"]),
        "backlog.autovacuum_runs": pair(lambda m: m["autovacuum_runs"]),
        "backlog.growth_left": pair(growth_left),
        "backlog.prune_seconds": pair(lambda m: m["prune_seconds"]),
        "backlog.reindex_seconds": pair(lambda m: m["maintain_seconds"]),
        "backlog.rebuilt": pair(lambda m: m["rebuilt"]),
        "backlog.exactly_once": pair(lambda m: m["drain"]["exactly_once"]),
    }
    for stage in ("start", "loaded", "drained", "pruned", "maintained"):
        result[f"backlog.heap_mb.{stage}"] = pair(lambda m: m["sizes"][stage]["heap_mb"])
        result[f"backlog.index_mb.{stage}"] = pair(lambda m: m["sizes"][stage]["index_mb"])
    return result
