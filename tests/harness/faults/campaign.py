"""`python -m tests.harness.faults` (`make faults`): run the fault campaign on a durable local cluster
and print its table.

    python -m tests.harness.faults [--jobs N] [--scenario NAME ...] [--workers P] [--concurrency C] [--json]

It starts (or reuses) its own PostgreSQL cluster in ``--datadir`` (default ``.pgdata-faults``,
port ``--port``, default a free one) — never the ``.pgdata`` one ``make run`` uses, and never a server
given by JOBQUEUE_DSN, since it crashes and restarts the cluster — migrates a template database,
runs each scenario on a fresh database cloned from it and stops the cluster at the end. Exit
status 1 when any scenario lost a job, ran one more often than at-least-once allows, left one in a
wrong state, was wedged or saw an unclean error; 0 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
from pathlib import Path

from jobqueue.cli.common import dispatch
from tests.harness.devdb import free_port
from tests.harness.faults.cluster import FaultCluster
from tests.harness.faults.report import Row, exit_status, render
from tests.harness.faults.scenarios import SCENARIOS, Config, run_scenario


def add_arguments(parser: argparse.ArgumentParser) -> None:
    defaults = Config()
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.description = (
        "Crash, stop and restart workers, PostgreSQL and the API while jobs drain, feed poison\n"
        "jobs, and print one table: lost jobs, duplicate executions (and how many at-least-once\n"
        "allows), wrong end states, recovery time. Exit status 1 if any scenario failed.\n"
        "Scenarios:\n" + "\n".join(f"  {s.name:<13} {s.summary}" for s in SCENARIOS.values())
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=defaults.jobs,
        help=f"jobs per scenario (default {defaults.jobs}; fewer only for quick checks)",
    )
    parser.add_argument(
        "--scenario",
        action="append",
        choices=list(SCENARIOS),
        metavar="NAME",
        help="run only this scenario (repeatable; default: all, in the order listed above)",
    )
    parser.add_argument(
        "--workers", type=int, default=defaults.workers, help=f"jobqueue-worker processes (default {defaults.workers})"
    )
    parser.add_argument(
        "--concurrency",
        type=int,
        default=defaults.concurrency,
        help=f"concurrency per worker (default {defaults.concurrency})",
    )
    parser.add_argument(
        "--lease", type=float, default=defaults.lease, help=f"lease seconds of the workers (default {defaults.lease:g})"
    )
    parser.add_argument(
        "--timeout",
        type=float,
        help="seconds a scenario may take before it is reported wedged (default 120 + 0.03 per job)",
    )
    parser.add_argument("--json", action="store_true", help="print the rows (with every fault) as JSON")
    parser.add_argument(
        "--datadir", default=".pgdata-faults", help="the campaign's own cluster (default .pgdata-faults)"
    )
    parser.add_argument(
        "--port",
        type=int,
        default=int(os.environ.get("JOBQUEUE_FAULTS_PORT", "0")) or None,
        help="its port (JOBQUEUE_FAULTS_PORT, default: a free one, so it never collides with another local cluster)",
    )
    parser.add_argument("--logdir", default=".run/faults", help="worker and API logs, one folder per scenario")


def config_from(args: argparse.Namespace) -> Config:
    if args.jobs < 1 or args.workers < 1 or args.concurrency < 1 or args.lease <= 0:
        raise ValueError("--jobs, --workers and --concurrency must be at least 1, --lease positive")
    return Config(
        jobs=args.jobs,
        workers=args.workers,
        concurrency=args.concurrency,
        lease=args.lease,
        timeout=args.timeout,
        logdir=Path(args.logdir),
    )


async def run_campaign(cluster: FaultCluster, config: Config, names: list[str], progress=print) -> list[Row]:
    rows = []
    for name in names:
        progress(f"[faults] {name}: {SCENARIOS[name].summary} ...")
        row = await run_scenario(name, cluster, config)
        progress(f"[faults] {name}: {row.status} (lost {row.lost}, duplicates {row.duplicates}, allowed {row.allowed})")
        rows.append(row)
    return rows


def run_faults(args: argparse.Namespace) -> int:
    config = config_from(args)
    logging.getLogger("psycopg.pool").setLevel(logging.ERROR)  # the harness's own reconnects during outages
    names = args.scenario or list(SCENARIOS)
    cluster = FaultCluster.durable(args.datadir, args.port or free_port())
    quiet = (lambda _line: None) if args.json else print
    try:
        header = (
            f"fault campaign: {config.jobs:,} jobs per scenario, {config.workers} workers x "
            f"{config.concurrency}, lease {config.lease:g} s, {os.cpu_count()} cores; {cluster.describe()}"
        )
        rows = asyncio.run(run_campaign(cluster, config, names, quiet))
    finally:
        cluster.stop()
    if args.json:
        print(json.dumps([row.as_dict() for row in rows], indent=2))
    else:
        print(render(rows, header))
    return exit_status(rows)


def main(argv: list[str] | None = None) -> int:
    """Bad options exit 2 with one line (`dispatch`), as jobqueue's own commands do."""
    parser = argparse.ArgumentParser(prog="python -m tests.harness.faults")
    add_arguments(parser)
    parser.set_defaults(func=run_faults)
    return dispatch(parser.parse_args(argv))
