"""Command line: `jobqueue <command>` and `jobqueue-worker`.

    jobqueue migrate [--revision head]        upgrade the database schema
    jobqueue downgrade REVISION               downgrade (``base`` removes jobqueue entirely)
    jobqueue enqueue TYPE [--payload JSON] …  enqueue one job, print its id
    jobqueue get ID | cancel ID|--queue Q …   inspect or cancel jobs (the same as jobs get|cancel)
    jobqueue jobs|dlq|queues|workers …        the operator's commands (jobqueue.cli.jobs, jobqueue.cli.admin)
    jobqueue worker …                         same as jobqueue-worker
    jobqueue maintenance                      run only the leader-only services (sweeper, …)
    jobqueue audit list [--actor --action --target --since] [--json] | verify   the audit log (jobqueue.cli.audit)
    jobqueue schedule add|list|pause|resume|remove|run-now …   cron schedules (see jobqueue.cli.schedules)
    jobqueue demo [--count N]                 enqueue demo jobs and watch them finish
    jobqueue bench …                          the benchmark (see `jobqueue bench --help`)
    jobqueue bench api …                      load POST /jobs over HTTP: req/s, p50/p99
    jobqueue bench enqueue …                  enqueue with and without idempotency keys
    jobqueue api [--host] [--port] [--workers N]   serve the REST API (uvicorn)
    jobqueue apikey create --producer NAME [--admin] | list | revoke ID
    jobqueue keys generate [--id ID] | rotate [--batch-size N]   payload encryption keys (jobqueue.cli.keys)
    jobqueue roles grant|revoke|login --role KIND LOGIN | list   PostgreSQL roles (see jobqueue.cli.roles)

A one-shot command must start at once, so this module imports next to nothing: `COMMANDS` names
every command with its line in ``--help``, and a command's module (its arguments, its handler, and
what they need: psycopg, the client, alembic, litestar, uvicorn, the benchmark) is imported only
when that command is the one on the command line. `jobqueue --help` loads none of them.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from typing import Any, Callable, Sequence

from jobqueue.cli.common import dispatch, run_command, settings_from_args

#: Adds one command's arguments (and its ``func``) to the parser `jobqueue <command>` parses.
Declare = Callable[[argparse.ArgumentParser], None]


def _cmd_migrate(args: argparse.Namespace) -> int:
    from jobqueue.store import migrate

    session = migrate.migration_session(settings_from_args(args).db)
    migrate.upgrade(session, args.revision)
    print(f"jobqueue schema at {migrate.current_revision(session)}")
    return 0


def _cmd_downgrade(args: argparse.Namespace) -> int:
    from jobqueue.store import migrate

    session = migrate.migration_session(settings_from_args(args).db)
    migrate.downgrade(session, args.revision)
    print(f"jobqueue schema at {migrate.current_revision(session) or 'base (removed)'}")
    return 0


def _cmd_enqueue(args: argparse.Namespace) -> int:
    from jobqueue.cli.oneshot import open_client

    try:
        payload = json.loads(args.payload) if args.payload else None
    except json.JSONDecodeError as exc:
        print(f"error: payload: must be valid JSON ({exc})", file=sys.stderr)
        return 2
    options = {
        k: v
        for k, v in dict(
            priority=args.priority,
            queue=args.queue,
            delay=args.delay,
            max_attempts=args.max_attempts,
            idempotency_key=args.idempotency_key,
            ordering_key=args.ordering_key,
        ).items()
        if v is not None
    }
    with open_client(settings_from_args(args)) as client:
        job_id = client.enqueue(args.job_type, payload, **options)
        print(job_id)
        job = client.get(job_id)  # the queue it went to, whatever supplied it
        for line in client.name_warnings([(job.queue, job.job_type)]):  # accepted all the same
            print(f"warning: {line}", file=sys.stderr)
    return 0


def _cmd_maintenance(args: argparse.Namespace) -> int:
    import asyncio

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

    return serve(
        settings_from_args(args), host=args.host, port=args.port, workers=args.workers, access_log=args.access_log
    )


def _cmd_bench(args: argparse.Namespace) -> int:
    if args.target == "api":
        from jobqueue.bench.api_load import run_api_bench

        return run_api_bench(args, settings_from_args(args))
    if args.target == "enqueue":
        from jobqueue.bench.keys import run_enqueue_bench

        return run_enqueue_bench(args, settings_from_args(args))
    from jobqueue.bench.run import run_bench

    return run_bench(args, settings_from_args(args))


# --- declaring the commands ------------------------------------------------------------------


def _migrate(p: argparse.ArgumentParser) -> None:
    p.add_argument("--revision", default="head")
    p.add_argument("--dsn")
    p.set_defaults(func=_cmd_migrate)


def _downgrade(p: argparse.ArgumentParser) -> None:
    p.add_argument("revision")
    p.add_argument("--dsn")
    p.set_defaults(func=_cmd_downgrade)


def _enqueue(p: argparse.ArgumentParser) -> None:
    p.add_argument("job_type")
    p.add_argument("--payload", help="JSON payload")
    p.add_argument("--priority", choices=["critical", "high", "normal", "low"])
    p.add_argument("--queue")
    p.add_argument("--delay", type=float, help="seconds from now")
    p.add_argument("--max-attempts", type=int)
    p.add_argument("--idempotency-key")
    p.add_argument("--ordering-key", help="jobs with the same key run one at a time, in enqueue order")
    p.add_argument("--dsn")
    p.set_defaults(func=_cmd_enqueue)


def _maintenance(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dsn")
    p.set_defaults(func=_cmd_maintenance)


def _demo(p: argparse.ArgumentParser) -> None:
    p.add_argument("--count", type=int, default=5)
    p.add_argument("--timeout", type=float, default=30.0)
    p.add_argument("--dsn")
    p.set_defaults(func=_cmd_demo)


def _api(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", help="interface to bind (JOBQUEUE_API_HOST, default 127.0.0.1)")
    p.add_argument("--port", type=int, help="port (JOBQUEUE_API_PORT, default 8000)")
    p.add_argument("--workers", type=int, help="server processes (JOBQUEUE_API_WORKERS, default 1)")
    p.add_argument("--access-log", action="store_true", help="log every request (off by default: it costs CPU)")
    p.add_argument("--dsn")
    p.set_defaults(func=_cmd_api)


def _bench(p: argparse.ArgumentParser) -> None:
    from jobqueue.bench.api_load import add_api_arguments
    from jobqueue.bench.run import add_arguments

    add_arguments(p)
    add_api_arguments(p)
    p.set_defaults(func=_cmd_bench)


def _lazy(module: str, declare: str, run: str | None = None) -> Declare:
    """A command declared in ``module`` by ``declare(parser)``, imported only when it is parsed; it
    runs ``run(args, settings)`` (when given; else ``declare`` sets the parser's ``func`` itself)."""

    def declare_lazily(p: argparse.ArgumentParser) -> None:
        found: Any = importlib.import_module(module)
        getattr(found, declare)(p)
        if run is not None:
            p.set_defaults(func=lambda args: getattr(found, run)(args, settings_from_args(args)))

    return declare_lazily


#: Every `jobqueue` command, in ``--help``'s order: its name, its line there, and what declares it.
COMMANDS: tuple[tuple[str, str, Declare], ...] = (
    ("migrate", "upgrade the schema", _migrate),
    ("downgrade", "downgrade the schema (base = remove jobqueue)", _downgrade),
    ("enqueue", "enqueue one job and print its id", _enqueue),
    ("get", "show a job (the same as jobs get)", _lazy("jobqueue.cli.jobs", "add_get")),
    ("cancel", "cancel a job, or jobs by filter (the same as jobs cancel)", _lazy("jobqueue.cli.jobs", "add_cancel")),
    ("worker", "run workers (same as jobqueue-worker)", _lazy("jobqueue.cli.worker", "add_worker_command")),
    ("maintenance", "run only the leader-only maintenance services", _maintenance),
    ("jobs", "list, show, cancel or retry jobs", _lazy("jobqueue.cli.jobs", "add_jobs")),
    ("dlq", "the dead-letter queue", _lazy("jobqueue.cli.jobs", "add_dlq")),
    ("queues", "queue figures, pause/resume, limits, shedding", _lazy("jobqueue.cli.admin", "add_queues")),
    ("workers", "the worker registry", _lazy("jobqueue.cli.admin", "add_workers")),
    ("circuits", "circuit breakers: state, hold open, close", _lazy("jobqueue.cli.admin", "add_circuits")),
    ("limits", "global concurrency and rate limits per job type or queue", _lazy("jobqueue.cli.admin", "add_limits")),
    ("audit", "the audit log: list who did what, verify its hash chain", _lazy("jobqueue.cli.audit", "add_audit")),
    (
        "schedule",
        "cron schedules: add, list, pause, resume, remove, run-now",
        _lazy("jobqueue.cli.schedules", "add_schedule_commands"),
    ),
    ("demo", "enqueue demo jobs and watch them finish", _demo),
    ("bench", "benchmark enqueue, drain and pick-up latency", _bench),
    ("api", "serve the REST API", _api),
    (
        "apikey",
        "create, list or revoke REST API keys",
        _lazy("jobqueue.cli.apikeys", "add_apikey_arguments", "run_apikey"),
    ),
    (
        "keys",
        "payload encryption keys: generate a new one, rotate stored values to the current one",
        _lazy("jobqueue.cli.keys", "add_keys_arguments", "run_keys"),
    ),
    (
        "roles",
        "PostgreSQL roles: grant jobqueue's group roles to login roles, create logins",
        _lazy("jobqueue.cli.roles", "add_roles_arguments", "run_roles"),
    ),
)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The `jobqueue` parser. Every command is listed; only ``command``'s arguments are declared
    (its module imported) — all of them when ``command`` is None (the tests' and docs' full parser)."""
    parser = argparse.ArgumentParser(prog="jobqueue", description="PostgreSQL-only background jobs.")
    commands = parser.add_subparsers(dest="command", required=True)
    for name, text, declare in COMMANDS:
        p = commands.add_parser(name, help=text)
        if command is None or command == name:
            declare(p)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    # The top-level parser has no option but -h, so the command, if any, is the first argument.
    command = args[0] if args and not args[0].startswith("-") else ""
    return run_command(lambda: dispatch(build_parser(command).parse_args(args)))
