"""Calls on jobqueue.event_listeners, and the job rows behind job events (sql/queries/events.sql)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import NamedTuple, Sequence

from jobqueue.db.gateway import Call, no_result


class EventRow(NamedTuple):
    """A job as read after a notification named it: what its events are checked against."""

    state: str
    attempts: int
    queue: str
    producer_id: str | None
    updated_at: datetime
    recent: bool  # changed within the ``recent_seconds`` asked for


def register_listener(listener_id: str, *, ttl: float) -> Call[None]:
    return Call("event_listener_register", {"listener_id": listener_id, "ttl": ttl}, no_result)


def unregister_listener(listener_id: str) -> Call[None]:
    return Call("event_listener_unregister", {"listener_id": listener_id}, no_result)


def job_rows(job_ids: Sequence[uuid.UUID], *, recent_seconds: float) -> Call[dict[uuid.UUID, EventRow]]:
    return Call(
        "event_jobs",
        {"ids": list(job_ids), "recent_seconds": recent_seconds},
        lambda rows: {r[0]: EventRow(*r[1:]) for r in rows},
    )
