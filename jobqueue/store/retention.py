"""Calls that delete finished jobs past their retention, and idempotency keys past their window
(sql/queries/retention.sql)."""

from __future__ import annotations

from datetime import datetime

from jobqueue.db.gateway import Call, scalar

FINISHED_STATES = ("completed", "cancelled", "dead_letter")


def prune_jobs(*, state: str, keep_seconds: float, limit: int, now: datetime | None = None) -> Call[int]:
    """Delete up to ``limit`` jobs in ``state`` finished longer ago than their queue's retention
    (``keep_seconds`` where the queue sets none), with their results, errors and idempotency keys."""
    if state not in FINISHED_STATES:
        raise ValueError(f"only finished jobs are pruned, not {state!r}")
    return Call(
        "retention_prune_jobs", {"state": state, "keep_seconds": keep_seconds, "limit": limit, "now": now}, scalar
    )


def prune_idempotency_keys(*, limit: int, now: datetime | None = None) -> Call[int]:
    """Delete up to ``limit`` idempotency keys whose window closed (the keys are free already)."""
    return Call("retention_prune_idempotency_keys", {"limit": limit, "now": now}, scalar)
