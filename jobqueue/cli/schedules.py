"""`jobqueue schedule …`: cron schedules from the command line — the same rows as Python, REST and SQL.

    jobqueue schedule add NAME CRON JOB_TYPE [--timezone ZONE] [--payload JSON] [--priority P]
                          [--queue Q] [--max-attempts N] [--misfire fire_once|fire_all|skip]
                          [--misfire-limit N] [--paused]
    jobqueue schedule list [--json]
    jobqueue schedule pause NAME | resume NAME | remove NAME
    jobqueue schedule run-now NAME          enqueue one job from it now, print the job id

Invalid input (an expression croniter refuses, an unknown zone, a name taken) exits with status 2
and a message naming the field.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from typing import Any, Callable

from jobqueue.cli.common import settings_from_args
from jobqueue.cli.output import format_table as table
from jobqueue.model.errors import ValidationError
from jobqueue.model.jobs import Priority
from jobqueue.model.schedules import DEFAULT_MISFIRE_LIMIT, DEFAULT_MISFIRE_POLICY, MISFIRE_POLICIES, Schedule

COLUMNS = (
    "name",
    "cron",
    "timezone",
    "job_type",
    "queue",
    "state",
    "next_fire_at",
    "last_fire_at",
    "misfire",
    "source",
)


def _row(schedule: Schedule) -> dict[str, str]:
    state = "error" if schedule.error else "enabled" if schedule.enabled else "paused"
    misfire = schedule.misfire_policy + (f"({schedule.misfire_limit})" if schedule.misfire_policy == "fire_all" else "")
    return dict(
        name=schedule.name,
        cron=schedule.cron,
        timezone=schedule.timezone,
        job_type=schedule.job_type,
        queue=schedule.queue,
        state=state,
        misfire=misfire,
        source=schedule.source,
        next_fire_at=schedule.next_fire_at.isoformat() if schedule.next_fire_at else "-",
        last_fire_at=schedule.last_fire_at.isoformat() if schedule.last_fire_at else "-",
    )


def format_table(schedules: list[Schedule]) -> str:
    errors = [f"  {s.name}: {s.error}" for s in schedules if s.error]
    return "\n".join([table(COLUMNS, [_row(s) for s in schedules])] + (["errors:"] + errors if errors else []))


def _payload(raw: str | None) -> object:
    try:
        return json.loads(raw) if raw else None
    except json.JSONDecodeError as exc:
        raise ValidationError("payload", f"must be valid JSON ({exc})") from None


def add_schedule_commands(parser: argparse.ArgumentParser) -> None:
    """Add the ``schedule`` subcommands to ``parser``."""
    actions = parser.add_subparsers(dest="action", required=True)

    def run(args: argparse.Namespace, use: Callable) -> Any:
        from jobqueue.cli.oneshot import open_client

        with open_client(settings_from_args(args)) as client:
            return use(client.schedules.with_source("cli"))

    def add(args: argparse.Namespace) -> int:
        options = dict(
            timezone=args.timezone,
            payload=_payload(args.payload),
            priority=args.priority,
            queue=args.queue,
            max_attempts=args.max_attempts,
            misfire_policy=args.misfire,
            misfire_limit=args.misfire_limit,
            enabled=not args.paused,
        )
        schedule = run(args, lambda s: s.add(args.name, args.cron, args.job_type, **options))
        when = schedule.next_fire_at.isoformat() if schedule.next_fire_at and schedule.enabled else "paused"
        print(
            f"added schedule {schedule.name}: {schedule.cron} ({schedule.timezone}) -> {schedule.job_type};"
            f" next fire: {when}"
        )
        return 0

    def list_(args: argparse.Namespace) -> int:
        schedules = run(args, lambda s: s.list())
        if args.json:
            print(json.dumps([dataclasses.asdict(s) for s in schedules], indent=2, default=str))
        else:
            print(format_table(schedules))
        return 0

    def by_name(verb: str, method: str) -> Callable[[argparse.Namespace], int]:
        def command(args: argparse.Namespace) -> int:
            result = run(args, lambda s: getattr(s, method)(args.name))
            print(result if method == "run_now" else f"{verb} schedule {args.name}")
            return 0

        return command

    p = actions.add_parser("add", help="create a cron schedule")
    p.add_argument("name")
    p.add_argument("cron", help="croniter expression, 5 fields (or 6, seconds last), e.g. '*/5 * * * *'")
    p.add_argument("job_type")
    p.add_argument("--timezone", default="UTC", help="IANA zone the expression is read in (default UTC)")
    p.add_argument("--payload", help="JSON payload of each job")
    p.add_argument("--priority", default=Priority.NORMAL.label, choices=[level.label for level in Priority])
    p.add_argument("--queue", default="default")
    p.add_argument("--max-attempts", type=int)
    p.add_argument(
        "--misfire",
        default=DEFAULT_MISFIRE_POLICY,
        choices=MISFIRE_POLICIES,
        help="ticks missed while no scheduler ran: fire one job, each (up to --misfire-limit), or none",
    )
    p.add_argument("--misfire-limit", type=int, default=DEFAULT_MISFIRE_LIMIT)
    p.add_argument("--paused", action="store_true", help="create it paused")
    p.set_defaults(func=add)

    p = actions.add_parser("list", help="show every schedule")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=list_)

    for action, verb, method, text in (
        ("pause", "paused", "pause", "stop firing (until resumed)"),
        ("resume", "resumed", "resume", "fire again, from now on"),
        ("remove", "removed", "remove", "delete the schedule"),
        ("run-now", "ran", "run_now", "enqueue one job from it now; prints its id"),
    ):
        p = actions.add_parser(action, help=text)
        p.add_argument("name")
        p.set_defaults(func=by_name(verb, method))

    for sub in actions.choices.values():
        sub.add_argument("--dsn", help="PostgreSQL DSN (JOBQUEUE_DSN)")
