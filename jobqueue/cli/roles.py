"""`jobqueue roles grant|revoke|login|list`: jobqueue's PostgreSQL group roles on login roles.

    jobqueue roles grant --role producer|worker|admin|api|readonly LOGIN [--producer ID]
    jobqueue roles revoke --role KIND LOGIN
    jobqueue roles login --role KIND LOGIN [--password P] [--producer ID]   create (if missing), grant, print its DSN
                         [--statement-timeout S] [--idle-timeout S]
    jobqueue roles list

They run as JOBQUEUE_DSN's role, which needs CREATEROLE (or ADMIN OPTION on the group roles), as a
hand-written GRANT would. ``login`` prints the DSN for the new role on stdout (JOBQUEUE_DSN with the
user replaced, and its password only when ``--password`` was given), so
``WORKER_DSN=$(jobqueue roles login --role worker jq_worker)`` works in scripts (`make run` does).

``login`` also gives the role, in this database, a ``statement_timeout`` and an
``idle_in_transaction_session_timeout`` (``--statement-timeout`` / ``--idle-timeout`` seconds,
default ``JOBQUEUE_STATEMENT_TIMEOUT`` / ``JOBQUEUE_IDLE_IN_TRANSACTION_TIMEOUT``, 60 s each; 0:
none), so that no session of it — a producer's psql, a service's forgotten transaction — runs a
statement or holds a transaction (and with it the xmin horizon every vacuum waits for) open for
ever. They are the session's defaults: jobqueue's own processes send their own timeouts as startup
options, which win (the reindexer's unbounded REINDEX, JOBQUEUE_*_TIMEOUT of workers and the API),
and behind PgBouncer, where no option can be sent, the role's are what they get — the same values.
"""

from __future__ import annotations

import argparse
import sys

from psycopg.conninfo import conninfo_to_dict, make_conninfo

from jobqueue.config import Settings
from jobqueue.db import gateway as db
from jobqueue.model.errors import PermissionDenied
from jobqueue.store import roles as role_store


def add_roles_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="roles_action", required=True)
    for name, text in (
        ("grant", "grant a group role to an existing login role"),
        ("revoke", "take a group role back from a login role"),
        ("login", "create a login role if missing, grant it a group role, print its DSN"),
    ):
        p = actions.add_parser(name, help=text)
        p.add_argument("--role", required=True, choices=role_store.KINDS, help="which jobqueue_<role> group")
        p.add_argument("login", help="the login role's name")
        if name != "revoke":
            p.add_argument("--producer", help="producer roles: the producer id it acts as (default: its name)")
        if name == "login":
            p.add_argument("--password", help="set this password (default: none, for trust or peer auth)")
            p.add_argument(
                "--statement-timeout",
                type=float,
                metavar="SECONDS",
                help="the role's statement_timeout here (default JOBQUEUE_STATEMENT_TIMEOUT; 0: none)",
            )
            p.add_argument(
                "--idle-timeout",
                type=float,
                metavar="SECONDS",
                help="its idle_in_transaction_session_timeout (default JOBQUEUE_IDLE_IN_TRANSACTION_TIMEOUT; 0: none)",
            )
        p.add_argument("--dsn")
    p = actions.add_parser("list", help="who holds each group role")
    p.add_argument("--dsn")


def role_dsn(dsn: str, login: str, password: str | None) -> str:
    """``dsn`` as ``login``: the owner's password is never carried over."""
    params = conninfo_to_dict(dsn)
    params.pop("password", None)
    params["user"] = login
    if password is not None:
        params["password"] = password
    return make_conninfo("", **params)


def run_roles(args: argparse.Namespace, settings: Settings) -> int:
    try:
        return _run(args, settings)
    except PermissionDenied as exc:
        raise PermissionDenied(
            f"{exc} (`jobqueue roles` needs a role with CREATEROLE, or ADMIN OPTION on "
            "the jobqueue_* roles, as a hand-written GRANT would)"
        ) from exc


def _run(args: argparse.Namespace, settings: Settings) -> int:
    with db.connect_sync(db.Session.of(settings.db, db.CLI_NAME), connect_timeout=5) as conn:
        if args.roles_action == "list":
            print(f"{'group role':18}  {'member':30}  {'login':5}  producer id")
            for member in db.run_sync(conn, role_store.members()):
                print(
                    f"{member.group:18}  {member.member:30}  {'yes' if member.can_login else 'no':5}  "
                    f"{member.producer_id or '-'}"
                )
            return 0
        if args.roles_action == "revoke":
            group = db.run_sync(conn, role_store.revoke(args.role, args.login))
            print(f"revoked {group} from {args.login}", file=sys.stderr)
            return 0
        timeouts = ""
        with conn.transaction():
            created = (
                db.run_sync(conn, role_store.create_login(args.login, args.password))
                if args.roles_action == "login"
                else None
            )
            group = db.run_sync(conn, role_store.grant(args.role, args.login, args.producer))
            if args.roles_action == "login":
                statement = settings.db.statement_timeout if args.statement_timeout is None else args.statement_timeout
                idle = settings.db.idle_in_transaction_timeout if args.idle_timeout is None else args.idle_timeout
                db.run_sync(conn, role_store.set_timeouts(args.login, statement_timeout=statement, idle_timeout=idle))
                timeouts = (
                    f"; statement_timeout {_shown(statement)}, idle_in_transaction_session_timeout {_shown(idle)}"
                )
        made = "role" if created is None else "created login role" if created else "login role"
        print(f"{made} {args.login}: granted {group}{timeouts}", file=sys.stderr)
        if args.roles_action == "login":
            print(role_dsn(settings.db.dsn, args.login, args.password))
        return 0


def _shown(seconds: float) -> str:
    """As PostgreSQL's SHOW would put it, near enough: 500ms, 1s, 60s; none for 0."""
    if seconds <= 0:
        return "none"
    return f"{seconds:g}s" if seconds >= 1 and float(seconds).is_integer() else f"{round(seconds * 1000)}ms"
