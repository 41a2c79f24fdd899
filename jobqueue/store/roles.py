"""Calls on jobqueue's PostgreSQL roles (sql/queries/roles.sql): the group roles migration 0019
makes, granted to login roles."""

from __future__ import annotations

from datetime import timedelta
from typing import NamedTuple

from jobqueue.db.gateway import ActionCall, Call, no_result, scalar

#: What each group role is for (``jobqueue_<kind>``); docs/security.md "Roles" says what each may do.
KINDS = ("producer", "worker", "admin", "api", "readonly")


class RoleMember(NamedTuple):
    group: str
    member: str
    can_login: bool
    producer_id: str | None  # for jobqueue_producer: the producer id it acts as


def create_login(login: str, password: str | None) -> Call[bool]:
    return ActionCall("role_create_login", {"login": login, "password": password}, scalar)


def set_timeouts(login: str, *, statement_timeout: float, idle_timeout: float) -> Call[None]:
    """``login``'s statement and idle-in-transaction timeouts in this database, seconds (0: none)."""
    return ActionCall(
        "role_set_timeouts",
        {
            "login": login,
            "statement_timeout": timedelta(seconds=statement_timeout),
            "idle_timeout": timedelta(seconds=idle_timeout),
        },
        no_result,
    )


def grant(kind: str, login: str, producer: str | None = None) -> Call[str]:
    return ActionCall("role_grant", {"kind": kind, "login": login, "producer": producer}, scalar)


def revoke(kind: str, login: str) -> Call[str]:
    return ActionCall("role_revoke", {"kind": kind, "login": login}, scalar)


def _members(rows: list[tuple]) -> list[RoleMember]:
    return [RoleMember(*row) for row in rows]


def members() -> Call[list[RoleMember]]:
    return Call("role_members", {}, _members)
