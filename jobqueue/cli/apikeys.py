"""`jobqueue apikey create --producer NAME [--admin | --queues a,b --job-types x,y] [--name N] [--expires 30d]
| list [--json] | revoke ID`.

``create`` prints the new key alone on stdout (the only time it is ever shown: the database keeps
its SHA-256), so ``KEY=$(jobqueue apikey create --producer billing)`` works in scripts. ``--expires``
takes 30d, 12h, 90m, 45s or 2w (at most 3650 days); the API refuses the key from then on.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from datetime import datetime, timezone

from jobqueue.cli.oneshot import open_client
from jobqueue.cli.output import format_table, to_json, when
from jobqueue.config import Settings
from jobqueue.model.api_keys import ApiKey
from jobqueue.model.durations import parse_span
from jobqueue.model.errors import ValidationError


def add_apikey_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="apikey_action", required=True)
    p = actions.add_parser("create", help="create a key and print it (once)")
    p.add_argument("--producer", required=True, help="the producer id the key submits as")
    p.add_argument("--admin", action="store_true", help="may use the admin endpoints and see every job")
    p.add_argument("--queues", type=_names, help="comma-separated: the only queues the key may submit to")
    p.add_argument("--job-types", type=_names, help="comma-separated: the only job types the key may submit")
    p.add_argument("--name", help="what the key is for (shown in `apikey list`), e.g. ci")
    p.add_argument("--expires", help="the API refuses the key after this long: 30d, 12h, 90m (default: never)")
    p.add_argument("--dsn")
    p = actions.add_parser("list", help="list keys (never the keys themselves)")
    p.add_argument("--json", action="store_true", help="print JSON (for scripts)")
    p.add_argument("--dsn")
    p = actions.add_parser("revoke", help="revoke a key by its id (from `apikey list`)")
    p.add_argument("key_id")
    p.add_argument("--dsn")


def run_apikey(args: argparse.Namespace, settings: Settings) -> int:
    with open_client(settings, pool_size=1) as client:
        if args.apikey_action == "create":
            key, info = client.create_api_key(
                args.producer,
                role="admin" if args.admin else "producer",
                queues=args.queues,
                job_types=args.job_types,
                name=args.name,
                expires_in=None if args.expires is None else _span(args.expires),
            )
            print(key)
            expiry = f", expires {info.expires_at.isoformat(timespec='seconds')}" if info.expires_at else ""
            named = f" {info.name!r}" if info.name else ""
            print(
                f"created {info.role} key{named} {info.id} for producer {info.producer_id!r}{_limits(info)}{expiry}; "
                "it is shown only this once",
                file=sys.stderr,
            )
            return 0
        if args.apikey_action == "list":
            keys = client.api_keys()
            if args.json:
                print(to_json([dataclasses.asdict(k) for k in keys]))
            else:
                now = datetime.now(timezone.utc)
                print(format_table(COLUMNS, [_row(k, now) for k in keys]))
            return 0
        gone = client.revoke_api_key(args.key_id)
        if gone is None:
            print(f"error: no live key with id {args.key_id}", file=sys.stderr)
            return 1
        print(f"revoked key {gone.id} of producer {gone.producer_id!r}")
        return 0


COLUMNS = ("id", "name", "role", "prefix", "created", "expires", "state", "producer")


def _row(key: ApiKey, now: datetime) -> dict[str, object]:
    state = "revoked" if key.revoked_at else "expired" if key.expired(now) else "live"
    return dict(
        id=key.id,
        name=key.name,
        role=key.role,
        prefix=key.key_prefix,
        created=when(key.created_at),
        expires=when(key.expires_at) or "never",
        state=state,
        producer=f"{key.producer_id}{_limits(key)}",
    )


def _span(text: str) -> float:
    """``--expires``, refused as one ``error: expires: …`` line (exit 2), nothing created."""
    try:
        return parse_span(text)
    except ValueError as exc:
        raise ValidationError("expires", str(exc)) from None


def _names(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        raise argparse.ArgumentTypeError("give at least one name, comma-separated")
    return names


def _limits(key: ApiKey) -> str:
    parts = [
        f"{label} {','.join(names)}"
        for label, names in (("queues", key.queues), ("job types", key.job_types))
        if names is not None
    ]
    return f" (only {'; '.join(parts)})" if parts else ""
