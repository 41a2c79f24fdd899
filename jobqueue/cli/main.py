"""Command line: `jobqueue <command>` and `jobqueue-worker`.

    jobqueue migrate [--revision head]        upgrade the database schema
    jobqueue downgrade REVISION               downgrade (``base`` removes jobqueue entirely)
    jobqueue enqueue TYPE [--payload JSON] …  enqueue one job, print its id
    jobqueue get ID | cancel ID               inspect or cancel a job
    jobqueue jobs|dlq|queues|workers …        the operator's commands (see jobqueue.cli.admin)
    jobqueue worker …                         same as jobqueue-worker
    jobqueue maintenance                      run only the leader-only services (sweeper, …)
    jobqueue schedule add|list|pause|resume|remove|run-now …   cron schedules (see jobqueue.cli.schedules)
    jobqueue demo [--count N]                 enqueue demo jobs and watch them finish
    jobqueue bench …                          the benchmark (see `jobqueue bench --help`)
    jobqueue bench api …                      load POST /jobs over HTTP: req/s, p50/p99
    jobqueue faults …                         the fault campaign (see `jobqueue faults --help`)
    jobqueue bench enqueue …                  enqueue with and without idempotency keys
    jobqueue api [--host] [--port] [--workers N]   serve the REST API (uvicorn)
    jobqueue apikey create --producer NAME [--admin] | list | revoke ID
    jobqueue keys generate [--id ID] | rotate [--batch-size N]   payload encryption keys (jobqueue.cli.keys)
    jobqueue roles grant|revoke|login --role KIND LOGIN | list   PostgreSQL roles (see jobqueue.cli.roles)
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import sys
from typing import Sequence

from jobqueue.cli.common import dispatch, settings_from_args
from jobqueue.cli.oneshot import open_client
from jobqueue.cli.worker import add_worker_options, run_worker
from jobqueue.store import migrate


def _print_json(value: object) -> None:
    print(json.dumps(value, indent=2, default=str))


def _cmd_migrate(args: argparse.Namespace) -> int:
    session = migrate.migration_session(settings_from_args(args))
    migrate.upgrade(session, args.revision)
    print(f"jobqueue schema at {migrate.current_revision(session)}")
    return 0


def _cmd_downgrade(args: argparse.Namespace) -> int:
    session = migrate.migration_session(settings_from_args(args))
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
    with open_client(settings_from_args(args)) as client:
        print(client.enqueue(args.job_type, payload, **options))
    return 0


def _cmd_get(args: argparse.Namespace) -> int:
    with open_client(settings_from_args(args)) as client:
        _print_json(dataclasses.asdict(client.get(args.job_id)))
    return 0


def _cmd_cancel(args: argparse.Namespace) -> int:
    with open_client(settings_from_args(args)) as client:
        outcome = client.cancel(args.job_id)
    print(outcome.value)
    return 0 if outcome.changed else 1


def _cmd_maintenance(args: argparse.Namespace) -> int:
    from jobqueue.maintenance.runner import run_standalone
    from jobqueue.process import configure_logging

    configure_logging()  # a service that runs for days says when it leads and what it did, as a worker does
    asyncio.run(run_standalone(settings_from_args(args)))
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from jobqueue.cli.demo import run_demo

    return run_demo(settings_from_args(args), count=args.count, timeout=args.timeout)


def _cmd_api(args: argparse.Namespace) -> int:
    from jobqueue.api.serve import serve

    return serve(settings_from_args(args), host=args.host, port=args.port, workers=args.workers, access_log=args.access_log)


def _cmd_apikey(args: argparse.Namespace) -> int:
    from jobqueue.cli.apikeys import run_apikey

    return run_apikey(args, settings_from_args(args))


def _cmd_roles(args: argparse.Namespace) -> int:
    from jobqueue.cli.roles import run_roles

    return run_roles(args, settings_from_args(args))


def _cmd_keys(args: argparse.Namespace) -> int:
    from jobqueue.cli.keys import run_keys

    return run_keys(args, settings_from_args(args))


def _cmd_bench(args: argparse.Namespace) -> int:
    if args.target == "api":
        from jobqueue.cli.bench.api_load import run_api_bench

        return run_api_bench(args, settings_from_args(args))
    if args.target == "enqueue":
        from jobqueue.cli.bench.keys import run_enqueue_bench

        return run_enqueue_bench(args, settings_from_args(args))
    from jobqueue.cli.bench import run_bench

    return run_bench(args, settings_from_args(args))


def _cmd_faults(args: argparse.Namespace) -> int:
    from jobqueue.cli.faults.campaign import run_faults

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
    add_worker_options(p)
    p.set_defaults(func=run_worker)

    p = commands.add_parser("maintenance", help="run only the leader-only maintenance services")
    p.add_argument("--dsn")
    p.set_defaults(func=_cmd_maintenance)

    from jobqueue.cli.admin import add_admin_commands

    add_admin_commands(commands, settings=settings_from_args)

    from jobqueue.cli.schedules import add_schedule_commands

    add_schedule_commands(commands.add_parser("schedule", help="cron schedules: add, list, pause, resume, remove, run-now"),
                          settings=settings_from_args)

    p = commands.add_parser("demo", help="enqueue demo jobs and watch them finish")
    p.add_argument("--count", type=int, default=5)
    p.add_argument("--timeout", type=float, default=30.0)
    p.add_argument("--dsn")
    p.set_defaults(func=_cmd_demo)

    p = commands.add_parser("bench", help="benchmark enqueue, drain and pick-up latency")
    from jobqueue.cli.bench import add_arguments

    add_arguments(p)
    from jobqueue.cli.bench.api_load import add_api_arguments

    add_api_arguments(p)
    p.set_defaults(func=_cmd_bench)

    p = commands.add_parser("faults", help="the fault campaign: crashes, restarts and poison jobs on a local cluster")
    from jobqueue.cli.faults.campaign import add_arguments as add_fault_arguments

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
    from jobqueue.cli.apikeys import add_apikey_arguments

    add_apikey_arguments(p)
    p.set_defaults(func=_cmd_apikey)

    p = commands.add_parser("keys", help="payload encryption keys: generate a new one, rotate stored values to the current one")
    from jobqueue.cli.keys import add_keys_arguments

    add_keys_arguments(p)
    p.set_defaults(func=_cmd_keys)

    p = commands.add_parser("roles", help="PostgreSQL roles: grant jobqueue's group roles to login roles, create logins")
    from jobqueue.cli.roles import add_roles_arguments

    add_roles_arguments(p)
    p.set_defaults(func=_cmd_roles)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return dispatch(build_parser().parse_args(argv))
