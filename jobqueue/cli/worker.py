"""`jobqueue-worker` (and `jobqueue worker`): the options that turn a command line into worker Settings."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Sequence

from jobqueue.cli.common import dispatch, run_command, settings_from_args

if TYPE_CHECKING:  # jobqueue.config brings psycopg: imported once a worker's settings are built
    from jobqueue.config import Settings


def add_worker_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--app", required=True, help="module:attribute of your JobQueue, e.g. jobqueue.demo:queue")
    parser.add_argument("--queues", help="comma-separated queue names (JOBQUEUE_QUEUES, default: default)")
    parser.add_argument(
        "--concurrency",
        help="jobs run at once per process: N, or MIN:MAX to scale between them "
        "with the queue's depth and the slots' utilization (JOBQUEUE_CONCURRENCY, default 10)",
    )
    parser.add_argument("--processes", type=int, help="worker processes (JOBQUEUE_PROCESSES, default 1)")
    parser.add_argument(
        "--lease", type=float, help="lease seconds before a silent worker's job is reclaimed (default 30)"
    )
    parser.add_argument(
        "--shutdown-grace", type=float, help="seconds running jobs get to finish on SIGTERM (default 30)"
    )
    parser.add_argument("--priority-mode", choices=["strict", "weighted"], help="default strict")
    parser.add_argument(
        "--priority-weights", help="weights critical,high,normal,low for weighted mode (default 8,4,2,1)"
    )
    parser.add_argument("--poll-interval", type=float, help="fallback poll seconds when no NOTIFY arrives (default 5)")
    parser.add_argument("--no-maintenance", action="store_true", help="do not run the sweeper/leader services here")
    parser.add_argument(
        "--metrics-port",
        type=int,
        help="serve this process's own figures at :PORT/metrics "
        "(process i of --processes on PORT+i; JOBQUEUE_WORKER_METRICS_PORT, default off)",
    )
    parser.add_argument("--dsn", help="PostgreSQL DSN (JOBQUEUE_DSN)")


def worker_settings(args: argparse.Namespace) -> Settings:
    """Every option but --dsn (settings_from_args) sets a field of the worker section."""
    from jobqueue.config import concurrency_range, parse_weights

    settings = settings_from_args(args)
    changes: dict = {}
    if args.queues:
        changes["queues"] = tuple(q.strip() for q in args.queues.split(",") if q.strip())
    if args.concurrency is not None:
        changes["concurrency_min"], changes["concurrency"] = concurrency_range(args.concurrency, "--concurrency")
    for option, name in (
        ("processes", "processes"),
        ("lease", "lease_seconds"),
        ("shutdown_grace", "shutdown_grace"),
        ("priority_mode", "priority_mode"),
        ("poll_interval", "poll_interval"),
        ("metrics_port", "metrics_port"),
    ):
        value = getattr(args, option)
        if value is not None:
            changes[name] = value
    if args.priority_weights:
        changes["priority_weights"] = parse_weights(args.priority_weights)
    if args.no_maintenance:
        changes["run_maintenance"] = False
    return settings.with_(worker=settings.worker.with_(**changes))


def run_worker(args: argparse.Namespace) -> int:
    from jobqueue.process import supervise

    return supervise(args.app, worker_settings(args))


def add_worker_command(parser: argparse.ArgumentParser) -> None:
    """`jobqueue-worker`'s options and handler, on its own parser or on `jobqueue worker`'s."""
    add_worker_options(parser)
    parser.set_defaults(func=run_worker)


def worker_main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="jobqueue-worker", description="Run jobqueue workers.")
    add_worker_command(parser)
    return run_command(lambda: dispatch(parser.parse_args(argv)))
