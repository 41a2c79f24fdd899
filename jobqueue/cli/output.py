"""How the operator's commands print, one rule for all of them: a table for a listing, a line for
a count or an outcome, JSON for one job, queue, breaker or limit (a record with nested fields); and
with ``--json``, which every operator command takes, JSON whatever the command — so a script can
always pass it. JSON is written as the REST API writes it (ISO 8601 times, priorities and states by
name). Also the leaf command's plumbing: ``--dsn``, ``--json`` and a one-shot client.
"""

from __future__ import annotations

import argparse
import enum
import json
from datetime import datetime
from typing import TYPE_CHECKING, Any, Callable, Sequence

from jobqueue.cli.common import settings_from_args
from jobqueue.model.errors import ValidationError
from jobqueue.model.jobs import Priority

if TYPE_CHECKING:
    from jobqueue.client import Client


def format_table(columns: Sequence[str], rows: list[dict[str, Any]]) -> str:
    """Columns padded to their widest value, headed by their names in capitals."""
    cells = [{c: c.upper() for c in columns}] + [
        {c: "-" if row.get(c) is None else str(row[c]) for c in columns} for row in rows
    ]
    widths = {c: max(len(r[c]) for r in cells) for c in columns}
    return "\n".join("  ".join(r[c].ljust(widths[c]) for c in columns).rstrip() for r in cells)


def to_json(value: Any) -> str:
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


def when(value: datetime | None) -> str | None:
    return value.isoformat(timespec="seconds") if value else None


def aware_time(field: str, text: str) -> datetime:
    """An option's time, with its UTC offset (a naive one would be read in whichever zone runs it)."""
    try:
        found = datetime.fromisoformat(text)
    except ValueError:
        found = None
    if found is None or found.tzinfo is None:
        raise ValidationError(
            field, f"must be an ISO-8601 time with a UTC offset, e.g. 2026-12-01T09:00:00+00:00 (got {text!r})"
        )
    return found


def say(args: argparse.Namespace, line: str, data: dict[str, Any]) -> None:
    """A count or an outcome: ``line`` for a person, ``data`` as JSON with ``--json``."""
    print(to_json(data) if args.json else line)


Use = Callable[["Client", argparse.Namespace], int]


def command(parser: argparse.ArgumentParser, use: Use) -> None:
    """A leaf command: ``--dsn``, ``--json``, and ``use`` run on a one-shot client."""
    parser.add_argument("--json", action="store_true", help="print JSON (for scripts)")
    parser.add_argument("--dsn")
    parser.set_defaults(func=lambda args: _with_client(args, use))


def _with_client(args: argparse.Namespace, use: Use) -> int:
    from jobqueue.cli.oneshot import open_client

    with open_client(settings_from_args(args)) as client:
        return use(client, args)
