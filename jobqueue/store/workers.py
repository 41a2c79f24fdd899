"""Calls on the worker registry and task defaults (sql/queries/workers.sql)."""

from __future__ import annotations

from typing import Sequence

from jobqueue.db import Call


def register(*, worker_id: str, host: str, pid: int, queues: Sequence[str], concurrency: int) -> Call[None]:
    return Call("worker_register", {
        "id": worker_id, "host": host, "pid": pid, "queues": list(queues), "concurrency": concurrency,
    }, lambda rows: None)


def heartbeat(*, worker_id: str, status: str, processed: int, failed: int) -> Call[bool]:
    return Call("worker_heartbeat", {
        "id": worker_id, "status": status, "processed": processed, "failed": failed,
    }, lambda rows: bool(rows))


def deregister(*, worker_id: str) -> Call[None]:
    return Call("worker_deregister", {"id": worker_id}, lambda rows: None)


def sync_task_defaults(max_attempts_by_type: dict[str, int]) -> Call[None]:
    return Call("task_defaults_sync", {
        "job_types": list(max_attempts_by_type), "max_attempts": list(max_attempts_by_type.values()),
    }, lambda rows: None)
