"""Calls on the worker registry and task defaults (sql/queries/workers.sql)."""

from __future__ import annotations

import json
import uuid
from datetime import datetime
from typing import Sequence

from jobqueue.db.gateway import Call, any_row, no_result
from jobqueue.model.workers import WorkerInfo


def register(
    *,
    worker_id: str,
    host: str,
    pid: int,
    queues: Sequence[str],
    concurrency: int,
    heartbeat_interval: float = 10.0,
    concurrency_min: int | None = None,
    concurrency_target: int | None = None,
    job_types: Sequence[str] = (),
    app: str | None = None,
) -> Call[None]:
    return Call(
        "worker_register",
        {
            "app": app,
            "id": worker_id,
            "host": host,
            "pid": pid,
            "queues": list(queues),
            "concurrency": concurrency,
            "heartbeat_interval": heartbeat_interval,
            "concurrency_min": concurrency_min,
            "concurrency_target": concurrency_target,
            "job_types": sorted(job_types),
        },
        no_result,
    )


def set_concurrency_target(*, worker_id: str, target: int) -> Call[None]:
    return Call("worker_set_concurrency_target", {"id": worker_id, "target": target}, no_result)


def heartbeat(
    *,
    worker_id: str,
    status: str,
    processed: int,
    failed: int,
    stuck_handlers: int = 0,
    leases_blocked: Sequence[uuid.UUID] = (),
) -> Call[bool]:
    """``leases_blocked``: jobs whose lease the last renewal passed over as locked by another
    transaction (the sweeper leaves them to this worker while it beats)."""
    return Call(
        "worker_heartbeat",
        {
            "id": worker_id,
            "status": status,
            "processed": processed,
            "failed": failed,
            "stuck_handlers": stuck_handlers,
            "leases_blocked": list(leases_blocked),
        },
        any_row,
    )


def deregister(*, worker_id: str) -> Call[None]:
    return Call("worker_deregister", {"id": worker_id}, no_result)


def list_all() -> Call[list[WorkerInfo]]:
    return Call("worker_list", {}, lambda rows: [WorkerInfo(*r) for r in rows])


def mark_lost(*, missed_beats: float, now: datetime | None = None) -> Call[list[tuple[str, datetime]]]:
    return Call(
        "worker_mark_lost", {"missed_beats": missed_beats, "now": now}, lambda rows: [(r[0], r[1]) for r in rows]
    )


def forget(*, forget_after: float, now: datetime | None = None) -> Call[int]:
    return Call("worker_forget", {"forget_after": forget_after, "now": now}, lambda rows: len(rows))


def sync_task_defaults(
    max_attempts_by_type: dict[str, int], encrypted_fields_by_type: dict[str, list[str]] | None = None, *, app: str
) -> Call[list[tuple[str, str, str]]]:
    """App ``app``'s tasks, at worker start; returns ('task', job type, owner) for each whose
    attempts a live other app declared otherwise (kept as that app declared them)."""
    encrypted = encrypted_fields_by_type or {}
    return Call(
        "task_defaults_sync",
        {
            "app": app,
            "job_types": list(max_attempts_by_type),
            "max_attempts": list(max_attempts_by_type.values()),
            "encrypted_fields": [json.dumps(encrypted.get(job_type, [])) for job_type in max_attempts_by_type],
        },
        lambda rows: [tuple(row) for row in rows],
    )


def encrypted_fields() -> Call[dict[str, list[str]]]:
    """Job type → the payload fields its task declared encrypted (types without any left out)."""
    return Call("task_encrypted_fields", {}, lambda rows: {r[0]: list(r[1]) for r in rows})
