"""`jobqueue bench`: the figures of issue 10, each beside a raw baseline measured in the same run.

One invocation, on the database it is given (``make bench``: a durable local cluster):
1. creates the raw baseline's schema (`raw.py`) and picks a queue name of its own, ``bench-<random>``;
2. runs ``--runs`` times (default 3; the box is noisy, so the table shows medians and ranges):
   - default: enqueue one by one and in bulk on every path (`enqueue.py`), load and drain
     ``--jobs`` jobs with WAL and work per job (`drain.py`), pick-up latency (`pickup.py`), and
     with ``--rest`` the REST figures of `jobqueue bench api`;
   - ``--backlog N``: the backlog figures instead (`backlog.py`);
   jobqueue and the raw queue take turns going first from one run to the next;
3. prints one table (`report.py`) — figure, jobqueue, raw, ratio, the issue's target, met? — or
   with ``--json`` the same for machines; progress goes to stderr;
4. deletes everything it created, also when it fails: its queue's jobs and rows, its task's
   default row, its API key, the raw schema. It never writes anything else.
Exit status: 0, or 1 if a job did not run exactly once or a phase failed, 2 on bad options or a
leftover raw schema.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import signal
from typing import Any

from jobqueue.bench import backlog, drain, enqueue, pickup, report, store
from jobqueue.bench.common import Bench, WalReader, open_bench, say
from jobqueue.bench.engine import JobqueueQueue
from jobqueue.bench.raw import RawQueue, RawQueueExists
from jobqueue.config import Settings


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1 (got {value})")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--runs",
        type=_positive,
        default=3,
        help="repeat and print medians and ranges (default 3); enqueue: runs per mode",
    )
    parser.add_argument(
        "--jobs", type=_positive, default=20_000, help="jobs to drain, and jobs per bulk path (default 20000)"
    )
    parser.add_argument("--single", type=_positive, default=2_000, help="jobs per enqueue-one path (default 2000)")
    parser.add_argument("--chunk", type=_positive, default=1_000, help="jobs per bulk call (default 1000)")
    parser.add_argument("--processes", type=_positive, default=2, help="worker processes for drains (default 2)")
    parser.add_argument(
        "--concurrency",
        type=_positive,
        default=200,
        help="concurrency per jobqueue worker process, and the raw claim's batch (default 200)",
    )
    parser.add_argument("--pickup-samples", type=_positive, default=200, help="pick-up latency samples (default 200)")
    parser.add_argument(
        "--backlog",
        type=_positive,
        metavar="N",
        help="the backlog figures instead: N jobs enqueued, drained, pruned (e.g. 1000000)",
    )
    parser.add_argument(
        "--hold-xmin",
        action="store_true",
        help="hold an open snapshot (as a long report query would) during each drain, so dead "
        "row versions cannot be vacuumed: shows how each queue degrades under a held xmin",
    )
    parser.add_argument(
        "--rest",
        action="store_true",
        help="also measure POST /jobs paced (--rate for --duration s) and closed loop (--clients)",
    )
    parser.add_argument(
        "--batches", type=_positive, default=20, help="enqueue: enqueue_many calls per run (default 20)"
    )
    parser.add_argument(
        "--batch-size", type=_positive, default=1000, help="enqueue: jobs per enqueue_many call (default 1000)"
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of the table")
    parser.add_argument("--dsn", help="PostgreSQL DSN (JOBQUEUE_DSN)")
    parser.add_argument(
        "--worker-dsn",
        help="jobqueue's drain workers connect with this DSN instead, e.g. as a "
        "jobqueue_worker login (`jobqueue roles login --role worker NAME`), to measure the roles",
    )


def run_bench(args: argparse.Namespace, settings: Settings) -> int:
    return asyncio.run(_main(args, settings))


async def _default_run(bench: Bench, jq: JobqueueQueue, raw: RawQueue, order: tuple) -> dict[str, Any]:
    args = bench.args
    await jq.pause()
    figures: dict[str, tuple] = dict(await enqueue.enqueue_one(bench, jq, raw))
    bulk = await enqueue.bulk(bench, jq)
    lives = {}
    for side in order:
        say(f"  {side.name}: load {args.jobs} jobs in bulk, drain them")
        lives[side.name] = await drain.life(bench, side, args.jobs, hold_xmin=args.hold_xmin)
    mine, base = lives["jobqueue"], lives["raw"]
    copy_rate = base["load"]["jobs_per_s"]
    figures["bulk.client.jobs_per_s"] = (mine["load"]["jobs_per_s"], copy_rate)
    figures["bulk.sql.jobs_per_s"] = (bulk["sql"], copy_rate)
    figures["bulk.rest.jobs_per_s"] = (bulk["rest_batch_jobs_per_s"], copy_rate)
    for phase in ("load", "drain"):
        for measure in ("wal_bytes_per_job", "heap_versions_per_job", "btree_insertions_per_job"):
            figures[f"{phase}.{measure}"] = (mine[phase][measure], base[phase][measure])
    figures["drain.jobs_per_s"] = (mine["drain"]["jobs_per_s"], base["drain"]["jobs_per_s"])
    figures["drain.exactly_once"] = (mine["drain"]["exactly_once"], base["drain"]["exactly_once"])
    pickups = {}
    for side in order:
        say(f"  {side.name}: pick-up, {args.pickup_samples} samples")
        pickups[side.name] = await pickup.pickup(bench, side, args.pickup_samples)
    for measure in ("p50_ms", "p99_ms", "from_call_p50_ms", "from_call_p99_ms"):
        figures[f"pickup.{measure}"] = (pickups["jobqueue"][measure], pickups["raw"][measure])
    if args.rest:
        figures["rest.paced_p99_ms"] = (bulk["rest_paced_p99_ms"], None)
        figures["rest.closed_req_per_s"] = (bulk["rest_closed_req_per_s"], None)
    return {"figures": figures, "details": {"bulk": bulk, "life": lives, "pickup": pickups}}


async def _backlog_run(bench: Bench, jq: JobqueueQueue, raw: RawQueue, order: tuple) -> dict[str, Any]:
    await jq.pause()
    measured = {side.name: await backlog.backlog(bench, side, bench.args.backlog) for side in order}
    start = measured["jobqueue"]["sizes"]["start"]
    if start["index_mb"] > 1 and start["heap_mb"] < 1:
        note = (
            f"jobqueue.jobs started with {start['index_mb']:.0f} MB of indexes and an empty heap: space left by "
            f"earlier runs (indexes give nothing back without REINDEX), which the backlog reuses; the raw table "
            f"starts new, so the size figures compare unequal starts"
        )
        if note not in bench.notes:
            bench.notes.append(note)
    return {"figures": backlog.figures(measured), "details": measured}


def _machine() -> dict[str, Any]:
    model = ""
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            model = next((line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")), "")
    except OSError:
        pass
    memory = ""
    try:
        with open("/proc/meminfo") as meminfo:
            memory = f"{int(meminfo.readline().split()[1]) / 1024 / 1024:.1f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    return {"cores": os.cpu_count(), "cpu": model, "memory": memory, "system": platform.platform()}


async def _main(args: argparse.Namespace, settings: Settings) -> int:
    load_before = os.getloadavg()
    bench = open_bench(settings, args, "bench")
    jq, raw = JobqueueQueue(bench), RawQueue(bench)
    runs: list[dict[str, Any]] = []
    status = 0
    loop, main = asyncio.get_running_loop(), asyncio.current_task()
    if main is None:
        raise RuntimeError("the bench must run inside a task")
    for signum in (signal.SIGINT, signal.SIGTERM):  # stop where we are, then clean up
        loop.add_signal_handler(signum, main.cancel)
    try:
        raw.create()
        if not args.backlog:
            bench.wal, why = WalReader.find(bench)
            if bench.wal is None:
                bench.notes.append(f"index entries inserted are not counted: {why}")
        if args.backlog and args.hold_xmin:
            bench.notes.append(
                "issue 10's target under a held snapshot: drain >= 0.5x the plain drain; compare "
                "'drain: jobs/s' with a run without --hold-xmin"
            )
        say(f"jobqueue bench: queue {bench.queue}, raw baseline in schema {store.RAW_SCHEMA}, {args.runs} run(s)")
        for index in range(args.runs):
            say(f"run {index + 1}/{args.runs}")
            order = (jq, raw) if index % 2 == 0 else (raw, jq)
            runs.append(await (_backlog_run if args.backlog else _default_run)(bench, jq, raw, order))
    except RawQueueExists as exc:
        say(f"jobqueue bench: {exc}")
        return 2
    except asyncio.CancelledError:
        say("jobqueue bench: interrupted; cleaning up")
        return 130
    except Exception as exc:  # report what was measured, clean up, and say what failed
        say(f"jobqueue bench: a phase failed: {type(exc).__name__}: {exc}")
        bench.notes.append(f"run {len(runs) + 1} failed: {type(exc).__name__}: {exc}")
        status = 1
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)
        _clean_up(jq, raw)
        bench.conn.close()
    sections = report.BACKLOG_SECTIONS if args.backlog else report.DEFAULT_SECTIONS
    summary = report.summarize([run["figures"] for run in runs], sections)
    if any(
        entry["target"] == report.YES.text and (entry["met"] is False or (entry["raw"] or {}).get("all") is False)
        for entry in summary.values()
    ):
        status = 1  # a job of either queue that did not run exactly once makes every figure suspect
    document = {
        "args": {key: value for key, value in vars(args).items() if key != "func"},
        "server": bench.server,
        "machine": _machine(),
        "load_average": {"before": load_before, "after": os.getloadavg()},
        "wal_records": (
            f"B-tree insertions counted in the WAL with {bench.wal.binary}"
            if bench.wal
            else "not counted (see note)"
            if not args.backlog
            else "not measured with --backlog"
        ),
        "notes": bench.notes,
        "summary": summary,
        "runs": runs,
    }
    print(report.to_json(document) if args.json else report.render(document))
    return status


def _clean_up(jq: JobqueueQueue, raw: RawQueue) -> None:
    for step in (jq.cleanup, raw.drop):
        try:
            step()
        except Exception as exc:  # one failed step must not keep the others from running
            say(f"jobqueue bench: clean-up step {step.__qualname__} failed: {exc}")
