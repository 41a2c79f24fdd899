"""Calls of the vacuumer (sql/queries/vacuum.sql), and the check it shares with the reindexer:
whether an old transaction holds the database's horizon back."""

from __future__ import annotations

from typing import NamedTuple

from jobqueue.db.gateway import Call, no_result, scalar, scalar_or_none


class Holder(NamedTuple):
    pid: int | None  # None: a prepared transaction
    seconds: float


def held_back(*, max_age: float) -> Call[Holder | None]:
    """The oldest transaction open for more than ``max_age`` seconds with a snapshot or an xid."""
    return Call("vacuum_held_back", {"max_age": max_age}, lambda rows: Holder(*rows[0]) if rows else None)


def jobs_due(*, min_dead: int, dead_fraction: float) -> Call[int | None]:
    """The job table's dead row versions when it is due a VACUUM, else None."""
    return Call("vacuum_jobs_due", {"min_dead": min_dead, "dead_fraction": dead_fraction}, scalar_or_none)


def vacuum_jobs() -> Call[None]:
    return Call("vacuum_jobs", {}, no_result)


def may_maintain() -> Call[bool]:
    """Whether this role may VACUUM and REINDEX the job table (owner, or MAINTAIN from PostgreSQL 17)."""
    return Call("vacuum_may_maintain", {}, scalar)
