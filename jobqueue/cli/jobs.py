"""The operator's commands on jobs and dead letters, with the REST API's filters.

    jobqueue jobs list [--state S] [--queue Q] [--job-type T] [--priority P] [--producer ID]
                       [--limit N] [--cursor C] [--json]      newest first, one page
    jobqueue jobs get ID | retry ID                           retry: a dead job back to pending
    jobqueue jobs cancel ID                                   one job
    jobqueue jobs cancel [--queue Q] [--job-type T] [--state S] [--before ISO-8601] [--producer ID] | --all
    jobqueue get ID | cancel ID                               the same as jobs get / jobs cancel ID
    jobqueue dlq list [--queue Q] [--job-type T] [--limit N] [--cursor C] [--json]
    jobqueue dlq retry ID | retry-all [--queue Q] [--job-type T]
    jobqueue dlq purge [--queue Q] [--job-type T] [--before ISO-8601] --yes

A cancel by filter with no filter at all is refused unless ``--all``: an empty filter matches every
live job. Every command takes ``--json`` (`jobqueue.cli.output`).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import TYPE_CHECKING, Any

from jobqueue.cli.output import aware_time, command, format_table, say, to_json, when
from jobqueue.model.errors import ValidationError
from jobqueue.model.jobs import JobState, RetryOutcome

if TYPE_CHECKING:
    from jobqueue.client import Client

JOB_COLUMNS = ("id", "job_type", "queue", "priority", "state", "attempts", "created_at", "last_error")
#: The dead-letter listing says why each job died instead of repeating its state.
DEAD_COLUMNS = ("id", "job_type", "queue", "priority", "dead_reason", "attempts", "created_at", "last_error")
#: What `jobs cancel` filters on: the options, as the client's parameters.
CANCEL_FILTERS = ("queue", "job_type", "state", "before", "producer")


def _job_rows(page) -> list[dict[str, Any]]:
    return [
        dict(
            id=j.id,
            job_type=j.job_type,
            queue=j.queue,
            priority=j.priority.label,
            state=j.state.value,
            dead_reason=j.dead_reason,
            attempts=f"{j.attempts}/{j.max_attempts}",
            created_at=when(j.created_at),
            last_error=f"{j.last_error_type}: {j.last_error}"[:80] if j.last_error_type else None,
        )
        for j in page.jobs
    ]


def _print_page(args: argparse.Namespace, page, columns: tuple[str, ...] = JOB_COLUMNS) -> int:
    if args.json:
        print(to_json({"jobs": [dataclasses.asdict(j) for j in page.jobs], "next_cursor": page.next_cursor}))
    else:
        print(format_table(columns, _job_rows(page)))
        if page.next_cursor:
            print(f"more: --cursor {page.next_cursor}")
    return 0


def _jobs_list(client: Client, args: argparse.Namespace) -> int:
    """One page of jobs, and on stderr (so --json stays JSON) a line naming the runnable jobs nobody
    serves, if there are any among the queues and type asked for: they would wait unnoticed."""
    status = _print_page(
        args,
        client.list_jobs(
            limit=args.limit,
            cursor=args.cursor,
            state=args.state,
            queue=args.queue,
            job_type=args.job_type,
            priority=args.priority,
            producer_id=args.producer,
        ),
    )
    unserved = [
        u for u in client.unserved_jobs() if args.queue in (None, u.queue) and args.job_type in (None, u.job_type)
    ]
    if unserved:
        listed = ", ".join(f"{u.job_type} in {u.queue} ({u.runnable})" for u in unserved)
        print(
            f"note: {sum(u.runnable for u in unserved)} runnable jobs wait for a worker with a handler for "
            f"their type (no live worker of their queue has one): {listed}",
            file=sys.stderr,
        )
    return status


def _list_options(parser: argparse.ArgumentParser, *, state: bool) -> None:
    if state:
        parser.add_argument("--state", choices=[s.value for s in JobState])
        parser.add_argument("--priority", choices=["critical", "high", "normal", "low"])
        parser.add_argument("--producer", help="only this producer's jobs")
    parser.add_argument("--queue")
    parser.add_argument("--job-type")
    parser.add_argument("--limit", type=int, default=50, help="jobs per page (1-500, default 50)")
    parser.add_argument("--cursor", help="the next_cursor of the previous page")


def _get(client: Client, args: argparse.Namespace) -> int:
    """A job is a nested record (payload, result, every attempt's error): JSON, with or without --json."""
    print(to_json(dataclasses.asdict(client.get(args.job_id))))
    return 0


def _cancel(client: Client, args: argparse.Namespace) -> int:
    """One job by id, or every job matching the filters."""
    filters = {name: getattr(args, name, None) for name in CANCEL_FILTERS}
    chosen = [name for name, value in filters.items() if value is not None]
    if args.job_id is not None:
        if chosen or getattr(args, "all", False):
            raise ValidationError(chosen[0] if chosen else "all", "give a job id or filters, not both")
        outcome = client.cancel(args.job_id)
        say(args, outcome.value, {"id": args.job_id, "outcome": outcome.value})
        return 0 if outcome.changed else 1
    before = aware_time("before", filters["before"]) if filters["before"] is not None else None
    done = client.cancel_jobs(
        queue=filters["queue"],
        job_type=filters["job_type"],
        state=filters["state"],
        before=before,
        producer_id=filters["producer"],
        all_jobs=args.all,
    )
    say(
        args,
        f"cancelled {done.cancelled} waiting jobs; asked {done.cancel_requested} running jobs to stop",
        dataclasses.asdict(done),
    )
    if not done.complete:
        print(
            "warning: some matching jobs stayed locked by other transactions and were left as they are; "
            "run the command again",
            file=sys.stderr,
        )
        return 1
    return 0


def _retry(client: Client, args: argparse.Namespace) -> int:
    outcome = client.retry_dead(args.job_id)
    say(args, outcome.value, {"id": args.job_id, "outcome": outcome.value})
    return 0 if outcome is RetryOutcome.RETRIED else 1


def _retry_all(client: Client, args: argparse.Namespace) -> int:
    retried = client.retry_dead_letters(queue=args.queue, job_type=args.job_type)
    say(args, f"retried {retried} dead-letter jobs", {"retried": retried})
    return 0


def _purge(client: Client, args: argparse.Namespace) -> int:
    if not args.yes:
        raise ValidationError("yes", "purging deletes dead jobs with their results and errors: add --yes")
    before = aware_time("before", args.before) if args.before else None
    purged = client.purge_dead_letters(queue=args.queue, job_type=args.job_type, before=before)
    say(args, f"purged {purged} dead-letter jobs", {"purged": purged})
    return 0


def _cancel_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("job_id", nargs="?", help="one job; or, instead, filters:")
    parser.add_argument("--queue")
    parser.add_argument("--job-type")
    parser.add_argument(
        "--state", help="pending, failed (waiting for a retry), processing or waiting (ordering key); default: all"
    )
    parser.add_argument("--before", help="only jobs created before this aware ISO-8601 time")
    parser.add_argument("--producer", help="only this producer's jobs")
    parser.add_argument("--all", action="store_true", help="no filter: cancel every live job")


def add_get(parser: argparse.ArgumentParser) -> None:
    """``jobqueue get ID`` and ``jobqueue jobs get ID``: one command, one output."""
    parser.add_argument("job_id")
    command(parser, _get)


def add_cancel(parser: argparse.ArgumentParser) -> None:
    """``jobqueue cancel`` and ``jobqueue jobs cancel``: one job by id, or by filter."""
    _cancel_options(parser)
    command(parser, _cancel)


def add_jobs(parser: argparse.ArgumentParser) -> None:
    """``jobqueue jobs``; this and `add_dlq` declare one command of `jobqueue.cli.main.COMMANDS`."""
    jobs = parser.add_subparsers(dest="action", required=True)
    p = jobs.add_parser("list", help="jobs newest first, with filters")
    _list_options(p, state=True)
    command(p, _jobs_list)
    add_get(jobs.add_parser("get", help="a job with its result and every attempt's error (JSON)"))
    add_cancel(jobs.add_parser("cancel", help="cancel a job, or every job matching filters"))
    p = jobs.add_parser("retry", help="a dead job back to pending")
    p.add_argument("job_id")
    command(p, _retry)


def add_dlq(parser: argparse.ArgumentParser) -> None:
    dlq = parser.add_subparsers(dest="action", required=True)
    p = dlq.add_parser("list", help="dead jobs newest first, with their last error")
    _list_options(p, state=False)
    command(
        p,
        lambda c, a: _print_page(
            a,
            c.list_jobs(limit=a.limit, cursor=a.cursor, state="dead_letter", queue=a.queue, job_type=a.job_type),
            DEAD_COLUMNS,
        ),
    )
    p = dlq.add_parser("retry", help="one dead job back to pending")
    p.add_argument("job_id")
    command(p, _retry)
    p = dlq.add_parser("retry-all", help="every matching dead job back to pending; says how many")
    p.add_argument("--queue")
    p.add_argument("--job-type")
    command(p, _retry_all)
    p = dlq.add_parser("purge", help="delete matching dead jobs with their results and errors")
    p.add_argument("--queue")
    p.add_argument("--job-type")
    p.add_argument("--before", help="only jobs that died before this aware ISO-8601 time")
    p.add_argument("--yes", action="store_true", help="yes, delete them")
    command(p, _purge)
