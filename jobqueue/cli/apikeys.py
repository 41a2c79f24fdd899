"""`jobqueue apikey create --producer NAME [--admin | --queues a,b --job-types x,y] | list | revoke ID`.

``create`` prints the new key alone on stdout (the only time it is ever shown: the database keeps
its SHA-256), so ``KEY=$(jobqueue apikey create --producer billing)`` works in scripts.
"""

from __future__ import annotations

import argparse
import sys

from jobqueue.cli.oneshot import open_client
from jobqueue.config import Settings
from jobqueue.model.api_keys import ApiKey


def add_apikey_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="apikey_action", required=True)
    p = actions.add_parser("create", help="create a key and print it (once)")
    p.add_argument("--producer", required=True, help="the producer id the key submits as")
    p.add_argument("--admin", action="store_true", help="may use the admin endpoints and see every job")
    p.add_argument("--queues", type=_names, help="comma-separated: the only queues the key may submit to")
    p.add_argument("--job-types", type=_names, help="comma-separated: the only job types the key may submit")
    p.add_argument("--dsn")
    p = actions.add_parser("list", help="list keys (never the keys themselves)")
    p.add_argument("--dsn")
    p = actions.add_parser("revoke", help="revoke a key by its id (from `apikey list`)")
    p.add_argument("key_id")
    p.add_argument("--dsn")


def run_apikey(args: argparse.Namespace, settings: Settings) -> int:
    with open_client(settings, pool_size=1) as client:
        if args.apikey_action == "create":
            key, info = client.create_api_key(
                args.producer, role="admin" if args.admin else "producer", queues=args.queues, job_types=args.job_types
            )
            print(key)
            print(
                f"created {info.role} key {info.id} for producer {info.producer_id!r}{_limits(info)}; "
                "it is shown only this once",
                file=sys.stderr,
            )
            return 0
        if args.apikey_action == "list":
            print(f"{'id':36}  {'role':8}  {'prefix':11}  {'created':25}  {'revoked':25}  producer")
            for listed in client.api_keys():
                revoked = listed.revoked_at.isoformat(timespec="seconds") if listed.revoked_at else "-"
                print(
                    f"{listed.id!s:36}  {listed.role:8}  {listed.key_prefix:11}  "
                    f"{listed.created_at.isoformat(timespec='seconds'):25}  {revoked:25}  "
                    f"{listed.producer_id}{_limits(listed)}"
                )
            return 0
        gone = client.revoke_api_key(args.key_id)
        if gone is None:
            print(f"error: no live key with id {args.key_id}", file=sys.stderr)
            return 1
        print(f"revoked key {gone.id} of producer {gone.producer_id!r}")
        return 0


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
