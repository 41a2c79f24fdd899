"""Calls on the dashboard's per-minute throughput history (sql/queries/history.sql)."""

from __future__ import annotations

from datetime import datetime

from jobqueue.db.gateway import Call
from jobqueue.model.jobs import ThroughputMinute


def record(*, now: datetime | None = None) -> Call[int]:
    """Sample the running totals into this minute's row; 1 if written, 0 if a newer sample was there."""
    return Call("history_record", {"now": now}, len)


def prune(*, keep_seconds: float, now: datetime | None = None) -> Call[int]:
    return Call("history_prune", {"keep_seconds": keep_seconds, "now": now}, len)


def rates(*, minutes: int, now: datetime | None = None) -> Call[list[ThroughputMinute]]:
    return Call(
        "history_rates",
        {"minutes": minutes, "now": now},
        lambda rows: [ThroughputMinute(r[0], r[1], float(r[2]), float(r[3]), float(r[4])) for r in rows],
    )
