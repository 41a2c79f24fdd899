"""The operator's commands: jobs, dead letters, queues, workers, circuit breakers and global limits, with the REST API's
filters.

    jobqueue jobs list [--state S] [--queue Q] [--job-type T] [--priority P] [--producer ID]
                       [--limit N] [--cursor C] [--json]      newest first, one page
    jobqueue jobs get ID | cancel ID | retry ID               retry: a dead job back to pending
    jobqueue dlq list [--queue Q] [--job-type T] [--limit N] [--cursor C] [--json]
    jobqueue dlq retry ID | retry-all [--queue Q] [--job-type T]
    jobqueue dlq purge [--queue Q] [--job-type T] [--before ISO-8601] --yes
    jobqueue queues list [--json] | pause Q | resume Q | limits Q --soft N --hard N
    jobqueue workers [--json]
    jobqueue circuits list [--json] | open NAME | close NAME     open: held open until closed
    jobqueue limits list [--json]
    jobqueue limits set (--job-type T | --queue Q) [--concurrency N] [--rate 10/s]
    jobqueue limits clear (--job-type T | --queue Q)            a code limit returns at the next worker start

Tables by default, ``--json`` for scripts. Bad input exits 2 naming the field, like every command.
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import functools
import json
import sys
from datetime import datetime
from typing import Any, Callable, Sequence

from jobqueue.cli.common import settings_from_args
from jobqueue.client import Client
from jobqueue.model.circuits import Circuit
from jobqueue.model.errors import ValidationError
from jobqueue.model.jobs import JobState, Priority, RetryOutcome
from jobqueue.model.limits import Limit


def format_table(columns: Sequence[str], rows: list[dict[str, Any]]) -> str:
    """Columns padded to their widest value, headed by their names in capitals."""
    cells = [{c: c.upper() for c in columns}] + [
        {c: "-" if row.get(c) is None else str(row[c]) for c in columns} for row in rows
    ]
    widths = {c: max(len(r[c]) for r in cells) for c in columns}
    return "\n".join("  ".join(r[c].ljust(widths[c]) for c in columns).rstrip() for r in cells)


def _json(value: Any) -> str:
    """As the REST API writes it: ISO 8601 times, priorities and states by name."""
    return json.dumps(_jsonable(value), indent=2, default=str)


def _jsonable(value: Any) -> Any:
    # walked before json.dumps: it writes an int enum (Priority) as its number without asking `default`
    if isinstance(value, dict):
        return {key: _jsonable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(item) for item in value]
    if isinstance(value, Priority):
        return value.label
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, datetime):
        return value.isoformat()
    return value


def _when(value: datetime | None) -> str | None:
    return value.isoformat(timespec="seconds") if value else None


JOB_COLUMNS = ("id", "job_type", "queue", "priority", "state", "attempts", "created_at", "last_error")
#: The dead-letter listing says why each job died instead of repeating its state.
DEAD_COLUMNS = ("id", "job_type", "queue", "priority", "dead_reason", "attempts", "created_at", "last_error")


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
            created_at=_when(j.created_at),
            last_error=f"{j.last_error_type}: {j.last_error}"[:80] if j.last_error_type else None,
        )
        for j in page.jobs
    ]


def _print_page(args: argparse.Namespace, page, columns: tuple[str, ...] = JOB_COLUMNS) -> int:
    if args.json:
        print(_json({"jobs": [dataclasses.asdict(j) for j in page.jobs], "next_cursor": page.next_cursor}))
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
    parser.add_argument("--json", action="store_true")


def _cancel(client: Client, args: argparse.Namespace) -> int:
    outcome = client.cancel(args.job_id)
    print(outcome.value)
    return 0 if outcome.changed else 1


def _retry(client: Client, args: argparse.Namespace) -> int:
    outcome = client.retry_dead(args.job_id)
    print(outcome.value)
    return 0 if outcome is RetryOutcome.RETRIED else 1


def _aware_time(field: str, text: str) -> datetime:
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        raise ValidationError(
            field, f"must be an ISO-8601 time with a UTC offset, e.g. 2026-12-01T09:00:00+00:00 (got {text!r})"
        ) from None


def _purge(client: Client, args: argparse.Namespace) -> int:
    if not args.yes:
        raise ValidationError("yes", "purging deletes dead jobs with their results and errors: add --yes")
    before = _aware_time("before", args.before) if args.before else None
    print(client.purge_dead_letters(queue=args.queue, job_type=args.job_type, before=before))
    return 0


QUEUE_COLUMNS = (
    "queue",
    "paused",
    "pending",
    "scheduled",
    "processing",
    "retrying",
    "dead",
    "oldest_s",
    "soft_limit",
    "hard_limit",
    "shed_low",
)


def _queues(client: Client, args: argparse.Namespace) -> int:
    stats = client.queue_stats()
    if args.json:
        print(_json([dataclasses.asdict(q) for q in stats]))
        return 0
    rows = [
        dict(
            queue=q.queue,
            paused=q.settings.paused,
            soft_limit=q.settings.soft_limit,
            hard_limit=q.settings.hard_limit,
            shed_low=q.settings.shed_low_retries,
            pending=sum(p.pending for p in q.levels),
            scheduled=sum(p.scheduled for p in q.levels),
            processing=sum(p.processing for p in q.levels),
            retrying=sum(p.failed for p in q.levels),
            dead=sum(p.dead for p in q.levels),
            oldest_s=round(max((p.oldest_age_seconds for p in q.levels), default=0.0), 1),
        )
        for q in stats
    ]
    print(format_table(QUEUE_COLUMNS, rows))
    return 0


WORKER_COLUMNS = (
    "id",
    "status",
    "queues",
    "concurrency",
    "target",
    "processed",
    "failed",
    "stuck",
    "last_heartbeat",
    "app",
    "job_types",
)


def _call_on_queue(method: str, client: Client, args: argparse.Namespace) -> Any:
    return getattr(client, method)(args.queue)


def _queue_settings_printer(
    change: Callable[[Client, argparse.Namespace], Any],
) -> Callable[[Client, argparse.Namespace], int]:
    """A queue command that changes its settings and prints them as they now are, in JSON."""

    def run(client: Client, args: argparse.Namespace) -> int:
        print(_json(dataclasses.asdict(change(client, args))))
        return 0

    return run


def _workers(client: Client, args: argparse.Namespace) -> int:
    workers = client.workers()
    if args.json:
        print(_json([dataclasses.asdict(w) for w in workers]))
        return 0
    print(
        format_table(
            WORKER_COLUMNS,
            [
                dict(
                    id=w.id,
                    status=w.status,
                    queues=",".join(w.queues),
                    concurrency=(f"{w.concurrency_min}:{w.concurrency}" if w.concurrency_min else w.concurrency),
                    target=w.concurrency_target or w.concurrency,
                    processed=w.jobs_processed,
                    failed=w.jobs_failed,
                    stuck=w.stuck_handlers,
                    last_heartbeat=_when(w.last_heartbeat),
                    app=w.app,
                    job_types=",".join(w.job_types),
                )
                for w in workers
            ],
        )
    )
    return 0


CIRCUIT_COLUMNS = (
    "name",
    "state",
    "failures",
    "threshold",
    "window_s",
    "reset_after_s",
    "opened_at",
    "job_types",
    "declared_by",
)


def _circuit_row(c: Circuit) -> dict[str, Any]:
    state = f"{c.state} (held by an operator)" if c.forced_by_admin else c.state
    return dict(
        name=c.name,
        state=state,
        failures=c.failures,
        threshold=c.threshold,
        window_s=f"{c.window_seconds:g}",
        reset_after_s=f"{c.reset_after_seconds:g}",
        opened_at=_when(c.opened_at),
        job_types=",".join(c.job_types),
        declared_by=c.declared_by or None,
    )


def _circuits(client: Client, args: argparse.Namespace) -> int:
    circuits = client.circuits()
    if args.json:
        print(_json([dataclasses.asdict(c) for c in circuits]))
    else:
        print(format_table(CIRCUIT_COLUMNS, [_circuit_row(c) for c in circuits]))
    return 0


def _force_circuit(method: str, client: Client, args: argparse.Namespace) -> int:
    print(format_table(CIRCUIT_COLUMNS, [_circuit_row(getattr(client, method)(args.name))]))
    return 0


LIMIT_COLUMNS = ("scope", "name", "concurrency", "running", "rate", "window_starts", "set_by", "declared_by")


def _limit_row(lim: Limit) -> dict[str, Any]:
    return dict(
        scope=lim.scope,
        name=lim.name,
        concurrency=lim.concurrency,
        running=lim.running,
        rate=lim.rate_text,
        window_starts=lim.window_starts if lim.rate is not None else None,
        set_by=lim.set_by,
        declared_by=lim.declared_by or None,
    )


def _limits(client: Client, args: argparse.Namespace) -> int:
    limits = client.limits()
    if args.json:
        print(_json([dict(dataclasses.asdict(lim), rate_text=lim.rate_text) for lim in limits]))
    else:
        print(format_table(LIMIT_COLUMNS, [_limit_row(lim) for lim in limits]))
    return 0


def _limit_target(args: argparse.Namespace) -> tuple[str, str]:
    return ("job_type", args.job_type) if args.job_type is not None else ("queue", args.queue)


def _set_limit(client: Client, args: argparse.Namespace) -> int:
    scope, name = _limit_target(args)
    print(
        format_table(
            LIMIT_COLUMNS, [_limit_row(client.set_limit(scope, name, concurrency=args.concurrency, rate=args.rate))]
        )
    )
    return 0


def _clear_limit(client: Client, args: argparse.Namespace) -> int:
    client.clear_limit(*_limit_target(args))
    print("cleared")
    return 0


def _command(parser: argparse.ArgumentParser, use: Callable[[Client, argparse.Namespace], int]) -> None:
    """A leaf command: ``--dsn``, and ``use`` run on a one-shot client."""
    from jobqueue.cli.oneshot import open_client

    parser.add_argument("--dsn")
    parser.set_defaults(func=lambda args: _with_client(open_client(settings_from_args(args)), use, args))


def add_jobs(parser: argparse.ArgumentParser) -> None:
    """``jobqueue jobs``; this and the other ``add_*`` below declare one command of `jobqueue.cli.main.COMMANDS`."""
    jobs = parser.add_subparsers(dest="action", required=True)
    p = jobs.add_parser("list", help="jobs newest first, with filters")
    _list_options(p, state=True)
    _command(p, _jobs_list)
    p = jobs.add_parser("get", help="a job with its result and every attempt's error (JSON)")
    p.add_argument("job_id")
    _command(p, lambda c, a: print(_json(dataclasses.asdict(c.get(a.job_id)))) or 0)
    for name, use, text in (("cancel", _cancel, "cancel a job"), ("retry", _retry, "a dead job back to pending")):
        p = jobs.add_parser(name, help=text)
        p.add_argument("job_id")
        _command(p, use)


def add_dlq(parser: argparse.ArgumentParser) -> None:
    dlq = parser.add_subparsers(dest="action", required=True)
    p = dlq.add_parser("list", help="dead jobs newest first, with their last error")
    _list_options(p, state=False)
    _command(
        p,
        lambda c, a: _print_page(
            a,
            c.list_jobs(limit=a.limit, cursor=a.cursor, state="dead_letter", queue=a.queue, job_type=a.job_type),
            DEAD_COLUMNS,
        ),
    )
    p = dlq.add_parser("retry", help="one dead job back to pending")
    p.add_argument("job_id")
    _command(p, _retry)
    p = dlq.add_parser("retry-all", help="every matching dead job back to pending; prints how many")
    p.add_argument("--queue")
    p.add_argument("--job-type")
    _command(p, lambda c, a: print(c.retry_dead_letters(queue=a.queue, job_type=a.job_type)) or 0)
    p = dlq.add_parser("purge", help="delete matching dead jobs with their results and errors")
    p.add_argument("--queue")
    p.add_argument("--job-type")
    p.add_argument("--before", help="only jobs that died before this aware ISO-8601 time")
    p.add_argument("--yes", action="store_true", help="yes, delete them")
    _command(p, _purge)


def add_queues(parser: argparse.ArgumentParser) -> None:
    queues = parser.add_subparsers(dest="action", required=True)
    p = queues.add_parser("list", help="per queue: depth, scheduled, processing, retrying, dead, limits")
    p.add_argument("--json", action="store_true")
    _command(p, _queues)
    for name, method in (("pause", "pause_queue"), ("resume", "resume_queue")):
        p = queues.add_parser(name, help=f"{name} claiming from a queue (it keeps accepting jobs)")
        p.add_argument("queue")
        _command(p, _queue_settings_printer(functools.partial(_call_on_queue, method)))
    p = queues.add_parser("limits", help="backpressure limits of a queue (omit both: the defaults)")
    p.add_argument("queue")
    p.add_argument("--soft", type=int)
    p.add_argument("--hard", type=int)
    _command(p, _queue_settings_printer(lambda c, a: c.set_queue_limits(a.queue, soft_limit=a.soft, hard_limit=a.hard)))
    p = queues.add_parser("shedding", help="above the soft limit, dead-letter retries of low jobs (reason shed)")
    p.add_argument("queue")
    p.add_argument("state", choices=("on", "off"))
    _command(p, _queue_settings_printer(lambda c, a: c.set_queue_shedding(a.queue, a.state == "on")))


def add_workers(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true")
    _command(parser, _workers)


def add_circuits(parser: argparse.ArgumentParser) -> None:
    circuits = parser.add_subparsers(dest="action", required=True)
    p = circuits.add_parser("list", help="every breaker: state, failures in its window, settings, job types")
    p.add_argument("--json", action="store_true")
    _command(p, _circuits)
    for name, method, text in (
        ("open", "open_circuit", "hold a breaker open (no probe) until it is closed"),
        ("close", "close_circuit", "close a breaker now (its failure count starts afresh)"),
    ):
        p = circuits.add_parser(name, help=text)
        p.add_argument("name")
        _command(p, functools.partial(_force_circuit, method))


def add_limits(parser: argparse.ArgumentParser) -> None:
    limits = parser.add_subparsers(dest="action", required=True)
    p = limits.add_parser("list", help="every limit: concurrency and jobs running, rate and starts in its window")
    p.add_argument("--json", action="store_true")
    _command(p, _limits)
    for name, use, text in (
        ("set", _set_limit, "set a limit (an operator's wins over the code's until cleared)"),
        ("clear", _clear_limit, "remove a limit"),
    ):
        p = limits.add_parser(name, help=text)
        target = p.add_mutually_exclusive_group(required=True)
        target.add_argument("--job-type", help="limit this job type, in every queue")
        target.add_argument("--queue", help="limit this queue, all its job types together")
        if name == "set":
            p.add_argument("--concurrency", type=int, help="at most N running at once, across every worker")
            p.add_argument("--rate", help="at most so many starts per window: 10/s, 100/m, 5/2s, 1000/h")
        _command(p, use)


def _with_client(client: Client, use: Callable[[Client, argparse.Namespace], int], args: argparse.Namespace) -> int:
    with client:
        return use(client, args)
