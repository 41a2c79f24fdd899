"""`jobqueue audit list|verify`: the audit log (docs/security.md "Audit log").

    jobqueue audit list [--actor A] [--action ACTION|AREA] [--target T] [--since ISO-8601]
                        [--producer ID] [--limit N] [--cursor C] [--json]     newest first, one page
    jobqueue audit verify [--json]      recompute the hash chain; exit 1 naming the first broken entry

``list`` pages as ``jobqueue jobs list`` does (a bounded stretch of the log per page: a short page
may still print a cursor). ``verify`` reads the whole chain in one snapshot, from the anchor
retention left to the head; it prints the head's hash, worth keeping somewhere else: an entry
rewritten later, hash and all, no longer leads to it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json

from jobqueue.cli.output import aware_time, command, format_table, to_json
from jobqueue.client import Client
from jobqueue.model.audit import ACTIONS, AREAS, AuditEntry

ENTRY_COLUMNS = ("seq", "at", "actor", "action", "target", "from", "details")


def _row(entry: AuditEntry) -> dict[str, object]:
    via = f"key {str(entry.api_key_id)[:8]}" if entry.api_key_id else entry.db_role
    where = f"{via} {entry.client_addr}" if entry.client_addr else via
    return dict(
        seq=entry.seq,
        at=entry.at.isoformat(timespec="seconds"),
        actor=entry.actor,
        action=entry.action,
        target=entry.target,
        details=json.dumps(entry.details, separators=(",", ":"))[:60] if entry.details else None,
        **{"from": f"{where} ({entry.application_name})" if entry.application_name else where},
    )


def _list(client: Client, args: argparse.Namespace) -> int:
    page = client.audit_log(
        limit=args.limit,
        cursor=args.cursor,
        actor=args.actor,
        action=args.action,
        target=args.target,
        since=aware_time("since", args.since) if args.since else None,
        producer_id=args.producer,
    )
    if args.json:
        print(to_json({"entries": [dataclasses.asdict(e) for e in page.entries], "next_cursor": page.next_cursor}))
        return 0
    print(format_table(ENTRY_COLUMNS, [_row(e) for e in page.entries]))
    if page.next_cursor:
        print(f"more: --cursor {page.next_cursor}")
    return 0


def _verify(client: Client, args: argparse.Namespace) -> int:
    verdict = client.verify_audit_log()
    if args.json:
        print(to_json(dict(dataclasses.asdict(verdict), intact=verdict.intact)))
    elif verdict.intact:
        print(
            f"audit log intact: {verdict.checked} entries checked (seq {verdict.first_seq} to {verdict.last_seq}), "
            f"head hash {verdict.head_hash}"
        )
    else:
        print(f"audit log broken: {verdict.problem}")
    return 0 if verdict.intact else 1


def add_audit(parser: argparse.ArgumentParser) -> None:
    """``jobqueue audit``, one command of `jobqueue.cli.main.COMMANDS`."""
    commands = parser.add_subparsers(dest="audit_command", required=True)
    p = commands.add_parser("list", help="entries newest first, with filters")
    p.add_argument("--actor", help="the API key's producer id, or the login role")
    p.add_argument("--action", help=f"an action ({', '.join(ACTIONS)}) or its area ({', '.join(AREAS)})")
    p.add_argument("--target", help="a job id, queue, breaker, job_type:NAME / queue:NAME of a limit, key id…")
    p.add_argument("--since", help="only entries written at or after this aware ISO-8601 time")
    p.add_argument("--producer", help="only this producer's own entries")
    p.add_argument("--limit", type=int, default=50, help="entries per page (1-500, default 50)")
    p.add_argument("--cursor", help="the next_cursor of the previous page")
    command(p, _list)
    p = commands.add_parser("verify", help="recompute the hash chain; exit 1 naming the first broken entry")
    command(p, _verify)
