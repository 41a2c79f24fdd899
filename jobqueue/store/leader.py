"""Calls on jobqueue.leaders (sql/queries/leader.sql)."""

from __future__ import annotations

from datetime import datetime

from jobqueue.db.gateway import Call, any_row


def attempt_elect(
    *, name: str, leader_id: str, ttl_seconds: float, now: datetime | None = None
) -> Call[tuple[bool, float | None]]:
    """(won, seconds until the lease held or lost to runs out)."""
    return Call(
        "leader_attempt_elect",
        {"name": name, "leader_id": leader_id, "ttl_seconds": ttl_seconds, "now": now},
        lambda rows: (rows[0][0], rows[0][1]),
    )


def resign(*, name: str, leader_id: str) -> Call[bool]:
    return Call("leader_resign", {"name": name, "leader_id": leader_id}, any_row)
