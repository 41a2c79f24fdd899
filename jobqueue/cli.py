"""Command line: `jobqueue <command>` and `jobqueue-worker`.

    jobqueue migrate [--revision head]        upgrade the database schema
    jobqueue downgrade REVISION               downgrade (``base`` removes jobqueue entirely)
    jobqueue enqueue TYPE [--payload JSON] …  enqueue one job, print its id
    jobqueue get ID | cancel ID               inspect or cancel a job
    jobqueue jobs|dlq|queues|workers …        the operator's commands (see jobqueue.admin_cli)
    jobqueue worker …                         same as jobqueue-worker
    jobqueue maintenance                      run only the leader-only services (sweeper, …)
    jobqueue schedule add|list|pause|resume|remove|run-now …   cron schedules (see jobqueue.schedule_cli)
    jobqueue demo [--count N]                 enqueue demo jobs and watch them finish
    jobqueue bench …                          the benchmark (see `jobqueue bench --help`)
    jobqueue bench api …                      load POST /jobs over HTTP: req/s, p50/p99
    jobqueue faults …                         the fault campaign (see `jobqueue faults --help`)
    jobqueue bench enqueue …                  enqueue with and without idempotency keys
    jobqueue api [--host] [--port] [--workers N]   serve the REST API (uvicorn)
    jobqueue apikey create --producer NAME [--admin] | list | revoke ID
    jobqueue keys generate [--id ID] | rotate [--batch-size N]   payload encryption keys (jobqueue.rotation)
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import sys
from typing import Sequence

from jobqueue import migrate
from jobqueue.config import Settings, concurrency_range, parse_weights
from jobqueue.errors import JobQueueError
from jobqueue.oneshot import open_client



def _settings(args: argparse.Namespace) -> Settings:
    settings = Settings.from_env()
    if getattr(args, "dsn", None):
        settings = settings.with_(dsn=args.dsn)
    return settings


def _add_worker_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--app", required=True, help="module:attribute of your JobQueue, e.g. jobqueue.demo:queue")
    parser.add_argument("--queues", help="comma-separated queue names (JOBQUEUE_QUEUES, default: default)")
    parser.add_argument("--concurrency", help="jobs run at once per process: N, or MIN:MAX to scale between them "
                        "with the queue's depth and the slots' utilization (JOBQUEUE_CONCURRENCY, default 10)")
    parser.add_argument("--processes", type=int, help="worker processes (JOBQUEUE_PROCESSES, default 1)")
    parser.add_argument("--lease", type=float, help="lease seconds before a silent worker's job is reclaimed (default 30)")
    parser.add_argument("--shutdown-grace", type=float, help="seconds running jobs get to finish on SIGTERM (default 30)")
    parser.add_argument("--priority-mode", choices=["strict", "weighted"], help="default strict")
    parser.add_argument("--priority-weights", help="weights critical,high,normal,low for weighted mode (default 8,4,2,1)")
    parser.add_argument("--poll-interval", type=float, help="fallback poll seconds when no NOTIFY arrives (default 5)")
    parser.add_argument("--no-maintenance", action="store_true", help="do not run the sweeper/leader services here")
    parser.add_argument("--metrics-port", type=int, help="serve this process's own figures at :PORT/metrics "
                        "(process i of --processes on PORT+i; JOBQUEUE_WORKER_METRICS_PORT, default off)")
    parser.add_argument("--dsn", help="PostgreSQL DSN (JOBQUEUE_DSN)")


def _worker_settings(args: argparse.Namespace) -> Settings:
    settings = _settings(args)
    changes: dict = {}
    if args.queues:
        changes["queues"] = tuple(q.strip() for q in args.queues.split(",") if q.strip())
    if args.concurrency is not None:
        changes["concurrency_min"], changes["concurrency"] = concurrency_range(args.concurrency, "--concurrency")
    for option, name in (("processes", "processes"), ("lease", "lease_seconds"),
                         ("shutdown_grace", "shutdown_grace"), ("priority_mode", "priority_mode"),
                         ("poll_interval", "poll_interval"), ("metrics_port", "worker_metrics_port")):
        value = getattr(args, option)
        if value is not None:
            changes[name] = value
    if args.priority_weights:
        changes["priority_weights"] = parse_weights(args.priority_weights)
    if args.no_maintenance:
        changes["run_maintenance"] = False
    return settings.with_(**changes)


def _run_worker(args: argparse.Namespace) -> int:
    from jobqueue.process import supervise

    return supervise(args.app, _worker_settings(args))


def _print_json(value: object) -> None:
    print(json.dumps(value, indent=2, default=str))


def _cmd_migrate(args: argparse.Namespace) -> int:
    session = migrate.migration_session(_settings(args))
    migrate.upgrade(session, args.revision)
    print(f"jobqueue schema at {migrate.current_revision(session)}")
    return 0


def _cmd_downgrade(args: argparse.Namespace) -> int:
    session = migrate.migration_session(_settings(args))
    migrate.downgrade(session, args.revision)
    print(f"jobqueue schema at {migrate.current_revision(session) or 'base (removed)'}")
    return 0


def _cmd_enqueue(args: argparse.Namespace) -> int:
    try:
        payload = json.loads(args.payload) if args.payload else None
    except json.JSONDecodeError as exc:
        print(f"error: payload: must be valid JSON ({exc})", file=sys.stderr)
        return 2
    options = {k: v for k, v in dict(priority=args.priority, queue=args.queue, delay=args.delay,
                                     max_attempts=args.max_attempts, idempotency_key=args.idempotency_key).items()
               if v is not None}
    with open_client(_settings(args)) as client:
        print(client.enqueue(args.job_type, payload, **options))
    return 0


def _cmd_get(args: argparse.Namespace) -> int:
    with open_client(_settings(args)) as client:
        _print_json(dataclasses.asdict(client.get(args.job_id)))
    return 0


def _cmd_cancel(args: argparse.Namespace) -> int:
    with open_client(_settings(args)) as client:
        outcome = client.cancel(args.job_id)
    print(outcome.value)
    return 0 if outcome.changed else 1


def _cmd_maintenance(args: argparse.Namespace) -> int:
    from jobqueue.maintenance.runner import run_standalone

    asyncio.run(run_standalone(_settings(args)))
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from jobqueue.demo_run import run_demo

    return run_demo(_settings(args), count=args.count, timeout=args.timeout)


def _cmd_api(args: argparse.Namespace) -> int:
    from jobqueue.api.serve import serve

    return serve(_settings(args), host=args.host, port=args.port, workers=args.workers, access_log=args.access_log)


def _cmd_apikey(args: argparse.Namespace) -> int:
    from jobqueue.api.keys_cli import run_apikey

    return run_apikey(args, _settings(args))


def _cmd_keys(args: argparse.Namespace) -> int:
    from jobqueue.rotation import run_keys

    return run_keys(args, _settings(args))


def _cmd_bench(args: argparse.Namespace) -> int:
    if args.target == "api":
        from jobqueue.api.bench import run_api_bench

        return run_api_bench(args, _settings(args))
    if args.target == "enqueue":
        from jobqueue.bench.keys import run_enqueue_bench

        return run_enqueue_bench(args, _settings(args))
    from jobqueue.bench import run_bench

    return run_bench(args, _settings(args))


def _cmd_faults(args: argparse.Namespace) -> int:
    from jobqueue.faults.campaign import run_faults

    return run_faults(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="jobqueue", description="PostgreSQL-only background jobs.")
    commands = parser.add_subparsers(dest="command", required=True)

    p = commands.add_parser("migrate", help="upgrade the schema")
    p.add_argument("--revision", default="head")
    p.add_argument("--dsn")
    p.set_defaults(func=_cmd_migrate)

    p = commands.add_parser("downgrade", help="downgrade the schema (base = remove jobqueue)")
    p.add_argument("revision")
    p.add_argument("--dsn")
    p.set_defaults(func=_cmd_downgrade)

    p = commands.add_parser("enqueue", help="enqueue one job and print its id")
    p.add_argument("job_type")
    p.add_argument("--payload", help="JSON payload")
    p.add_argument("--priority", choices=["critical", "high", "normal", "low"])
    p.add_argument("--queue")
    p.add_argument("--delay", type=float, help="seconds from now")
    p.add_argument("--max-attempts", type=int)
    p.add_argument("--idempotency-key")
    p.add_argument("--dsn")
    p.set_defaults(func=_cmd_enqueue)

    for name, func, text in (("get", _cmd_get, "show a job"), ("cancel", _cmd_cancel, "cancel a job")):
        p = commands.add_parser(name, help=text)
        p.add_argument("job_id")
        p.add_argument("--dsn")
        p.set_defaults(func=func)

    p = commands.add_parser("worker", help="run workers (same as jobqueue-worker)")
    _add_worker_options(p)
    p.set_defaults(func=_run_worker)

    p = commands.add_parser("maintenance", help="run only the leader-only maintenance services")
    p.add_argument("--dsn")
    p.set_defaults(func=_cmd_maintenance)

    from jobqueue.admin_cli import add_admin_commands

    add_admin_commands(commands, settings=_settings)

    from jobqueue.schedule_cli import add_schedule_commands

    add_schedule_commands(commands.add_parser("schedule", help="cron schedules: add, list, pause, resume, remove, run-now"),
                          settings=_settings)

    p = commands.add_parser("demo", help="enqueue demo jobs and watch them finish")
    p.add_argument("--count", type=int, default=5)
    p.add_argument("--timeout", type=float, default=30.0)
    p.add_argument("--dsn")
    p.set_defaults(func=_cmd_demo)

    p = commands.add_parser("bench", help="benchmark enqueue, drain and pick-up latency")
    from jobqueue.bench import add_arguments

    add_arguments(p)
    from jobqueue.api.bench import add_api_arguments

    add_api_arguments(p)
    p.set_defaults(func=_cmd_bench)

    p = commands.add_parser("faults", help="the fault campaign: crashes, restarts and poison jobs on a local cluster")
    from jobqueue.faults.campaign import add_arguments as add_fault_arguments

    add_fault_arguments(p)
    p.set_defaults(func=_cmd_faults)

    p = commands.add_parser("api", help="serve the REST API")
    p.add_argument("--host", help="interface to bind (JOBQUEUE_API_HOST, default 127.0.0.1)")
    p.add_argument("--port", type=int, help="port (JOBQUEUE_API_PORT, default 8000)")
    p.add_argument("--workers", type=int, help="server processes (JOBQUEUE_API_WORKERS, default 1)")
    p.add_argument("--access-log", action="store_true", help="log every request (off by default: it costs CPU)")
    p.add_argument("--dsn")
    p.set_defaults(func=_cmd_api)

    p = commands.add_parser("apikey", help="create, list or revoke REST API keys")
    from jobqueue.api.keys_cli import add_apikey_arguments

    add_apikey_arguments(p)
    p.set_defaults(func=_cmd_apikey)

    p = commands.add_parser("keys", help="payload encryption keys: generate a new one, rotate stored values to the current one")
    from jobqueue.rotation import add_keys_arguments

    add_keys_arguments(p)
    p.set_defaults(func=_cmd_keys)
    return parser


def _dispatch(args: argparse.Namespace) -> int:
    try:
        return args.func(args)
    except (JobQueueError, ValueError, TypeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def main(argv: Sequence[str] | None = None) -> int:
    return _dispatch(build_parser().parse_args(argv))


def worker_main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="jobqueue-worker", description="Run jobqueue workers.")
    _add_worker_options(parser)
    parser.set_defaults(func=_run_worker)
    return _dispatch(parser.parse_args(argv))
