"""Calls for the benchmark (sql/queries/bench.sql): its read-outs and the clean-up of its queue."""

from __future__ import annotations

import uuid
from datetime import datetime

from jobqueue.db import Call, no_result, scalar


def server_settings() -> Call[tuple[str, str]]:
    return Call("bench_server_settings", {}, lambda rows: rows[0])


def completed_count(queue: str) -> Call[int]:
    return Call("bench_completed_count", {"queue": queue}, scalar)


def drain_span(queue: str) -> Call[tuple[datetime | None, datetime | None]]:
    return Call("bench_drain_span", {"queue": queue}, lambda rows: rows[0])


def exactly_once(queue: str) -> Call[tuple[int, int, int]]:
    return Call("bench_exactly_once", {"queue": queue}, lambda rows: rows[0])


def claimed_at(ids: list[uuid.UUID]) -> Call[list[tuple[uuid.UUID, datetime]]]:
    return Call("bench_claimed_at", {"ids": ids}, lambda rows: rows)


def delete_queue(queue: str) -> Call[None]:
    return Call("bench_delete_queue", {"queue": queue}, no_result)


def hold_snapshot() -> Call[None]:
    return Call("bench_hold_snapshot", {}, no_result)


def vacuum() -> Call[None]:
    return Call("bench_vacuum", {}, no_result)
