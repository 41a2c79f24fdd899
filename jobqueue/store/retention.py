"""Calls that delete finished jobs past their retention (sql/queries/retention.sql)."""

from __future__ import annotations

from datetime import datetime

from jobqueue.db import Call, scalar

FINISHED_STATES = ("completed", "cancelled", "dead_letter")


def prune_jobs(*, state: str, keep_seconds: float, limit: int, now: datetime | None = None) -> Call[int]:
    """Delete up to ``limit`` jobs in ``state`` finished longer ago than their queue's retention
    (``keep_seconds`` where the queue sets none), with their results and errors."""
    if state not in FINISHED_STATES:
        raise ValueError(f"only finished jobs are pruned, not {state!r}")
    return Call("retention_prune_jobs", {
        "state": state, "keep_seconds": keep_seconds, "limit": limit, "now": now,
    }, scalar)
