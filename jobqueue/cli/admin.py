"""The operator's commands on queues, workers, circuit breakers and global limits (jobs and dead
letters: `jobqueue.cli.jobs`).

    jobqueue queues list [--json] | pause Q [--force] | resume Q | limits Q --soft N --hard N
    jobqueue workers [--json]
    jobqueue circuits list [--json] | open NAME | close NAME     open: held open until closed
    jobqueue limits list [--json]
    jobqueue limits set (--job-type T | --queue Q) [--concurrency N|none] [--rate 10/s|none]
    jobqueue limits clear (--job-type T | --queue Q)            a code limit returns at the next worker start

Listings print a table, a change the record it leaves (JSON); every command takes ``--json``
(`jobqueue.cli.output`). Bad input exits 2 naming the field, like every command.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
from typing import Any, Callable

from jobqueue.cli.output import command, format_table, say, to_json, when
from jobqueue.client import Client
from jobqueue.model.circuits import Circuit
from jobqueue.model.limits import KEEP, Limit

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
        print(to_json([dataclasses.asdict(q) for q in stats]))
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


def _queue_settings_printer(
    change: Callable[[Client, argparse.Namespace], Any],
) -> Callable[[Client, argparse.Namespace], int]:
    """A queue command that changes its settings and prints them as they now are, in JSON."""

    def run(client: Client, args: argparse.Namespace) -> int:
        print(to_json(dataclasses.asdict(change(client, args))))
        return 0

    return run


def _workers(client: Client, args: argparse.Namespace) -> int:
    workers = client.workers()
    if args.json:
        print(to_json([dataclasses.asdict(w) for w in workers]))
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
                    last_heartbeat=when(w.last_heartbeat),
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
        opened_at=when(c.opened_at),
        job_types=",".join(c.job_types),
        declared_by=c.declared_by or None,
    )


def _circuits(client: Client, args: argparse.Namespace) -> int:
    circuits = client.circuits()
    if args.json:
        print(to_json([dataclasses.asdict(c) for c in circuits]))
    else:
        print(format_table(CIRCUIT_COLUMNS, [_circuit_row(c) for c in circuits]))
    return 0


def _force_circuit(method: str, client: Client, args: argparse.Namespace) -> int:
    print(to_json(dataclasses.asdict(getattr(client, method)(args.name))))
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
        print(to_json([dict(dataclasses.asdict(lim), rate_text=lim.rate_text) for lim in limits]))
    else:
        print(format_table(LIMIT_COLUMNS, [_limit_row(lim) for lim in limits]))
    return 0


def _limit_target(args: argparse.Namespace) -> tuple[str, str]:
    return ("job_type", args.job_type) if args.job_type is not None else ("queue", args.queue)


def _set_limit(client: Client, args: argparse.Namespace) -> int:
    """The limit as it now is; a part not given stays as it was (``none`` removes it)."""
    scope, name = _limit_target(args)
    limit = client.set_limit(scope, name, concurrency=args.concurrency, rate=args.rate)
    print(to_json(dict(dataclasses.asdict(limit), rate_text=limit.rate_text)))
    return 0


def _clear_limit(client: Client, args: argparse.Namespace) -> int:
    scope, name = _limit_target(args)
    client.clear_limit(scope, name)
    say(args, "cleared", {"scope": scope, "name": name, "cleared": True})
    return 0


def _concurrency(text: str) -> int | None:
    if text.lower() == "none":
        return None
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, or none to remove it (got {text!r})") from None


def _rate(text: str) -> str | None:
    return None if text.lower() == "none" else text


def add_queues(parser: argparse.ArgumentParser) -> None:
    queues = parser.add_subparsers(dest="action", required=True)
    p = queues.add_parser("list", help="per queue: depth, scheduled, processing, retrying, dead, limits")
    command(p, _queues)
    p = queues.add_parser("pause", help="pause claiming from a queue (it keeps accepting jobs)")
    p.add_argument("queue")
    p.add_argument("--force", action="store_true", help="pause it even if no worker ever served it (yet)")
    command(p, _queue_settings_printer(lambda c, a: c.pause_queue(a.queue, force=a.force)))
    p = queues.add_parser("resume", help="resume claiming from a queue")
    p.add_argument("queue")
    command(p, _queue_settings_printer(lambda c, a: c.resume_queue(a.queue)))
    p = queues.add_parser("limits", help="backpressure limits of a queue (omit both: the defaults)")
    p.add_argument("queue")
    p.add_argument("--soft", type=int)
    p.add_argument("--hard", type=int)
    command(p, _queue_settings_printer(lambda c, a: c.set_queue_limits(a.queue, soft_limit=a.soft, hard_limit=a.hard)))
    p = queues.add_parser("shedding", help="above the soft limit, dead-letter retries of low jobs (reason shed)")
    p.add_argument("queue")
    p.add_argument("state", choices=("on", "off"))
    command(p, _queue_settings_printer(lambda c, a: c.set_queue_shedding(a.queue, a.state == "on")))


def add_workers(parser: argparse.ArgumentParser) -> None:
    command(parser, _workers)


def add_circuits(parser: argparse.ArgumentParser) -> None:
    circuits = parser.add_subparsers(dest="action", required=True)
    p = circuits.add_parser("list", help="every breaker: state, failures in its window, settings, job types")
    command(p, _circuits)
    for name, method, text in (
        ("open", "open_circuit", "hold a breaker open (no probe) until it is closed"),
        ("close", "close_circuit", "close a breaker now (its failure count starts afresh)"),
    ):
        p = circuits.add_parser(name, help=text)
        p.add_argument("name")
        command(p, functools.partial(_force_circuit, method))


def add_limits(parser: argparse.ArgumentParser) -> None:
    limits = parser.add_subparsers(dest="action", required=True)
    p = limits.add_parser("list", help="every limit: concurrency and jobs running, rate and starts in its window")
    command(p, _limits)
    for name, use, text in (
        ("set", _set_limit, "set a limit (an operator's wins over the code's until cleared)"),
        ("clear", _clear_limit, "remove a limit"),
    ):
        p = limits.add_parser(name, help=text)
        target = p.add_mutually_exclusive_group(required=True)
        target.add_argument("--job-type", help="limit this job type, in every queue")
        target.add_argument("--queue", help="limit this queue, all its job types together")
        if name == "set":
            p.add_argument(
                "--concurrency",
                type=_concurrency,
                default=KEEP,
                help="at most N running at once, across every worker (none: remove it; not given: kept as it is)",
            )
            p.add_argument(
                "--rate",
                type=_rate,
                default=KEEP,
                help="at most so many starts per window: 10/s, 100/m, 5/2s, 1000/h (none: remove it; not given: kept)",
            )
        command(p, use)
