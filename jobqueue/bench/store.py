"""Calls for the benchmark (queries.sql beside this module): server read-outs, jobqueue through its
public SQL interface, read-outs and clean-up of the bench's own queue, and the raw baseline's
statements. Only the bench runs them, so they are not in sql/queries/, which every jobqueue process
loads (`jobqueue.db.gateway.FileCall`)."""

from __future__ import annotations

import uuid
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from jobqueue.db.gateway import FileCall, no_result, scalar

T = TypeVar("T")


class Call(FileCall[T]):
    """This room's Call: its names are looked up in the bench's own queries.sql."""

    __slots__ = ()
    queries_file = Path(__file__).with_name("queries.sql")


#: The raw baseline's schema (fixed: SQL identifiers cannot be parameters).
RAW_SCHEMA = "jobqueue_bench_raw"

Counters = dict[str, tuple[int, ...]]


def _first_row(rows: list[tuple]) -> tuple:
    return rows[0]


def _by_first(rows: list[tuple]) -> dict:
    return {row[0]: tuple(row[1:]) for row in rows}


# --- the server --------------------------------------------------------------------------------


def server_settings() -> Call[tuple[str, int, str, str, str, str]]:
    return Call("bench_server_settings", {}, _first_row)


def data_directory() -> Call[tuple[str, int]]:
    return Call("bench_data_directory", {}, _first_row)


def wal_position() -> Call[tuple[str, str]]:
    """(insert LSN, flush LSN) as text."""
    return Call("bench_wal_position", {}, _first_row)


def checkpoints() -> Call[int]:
    return Call("bench_checkpoints", {}, scalar)


def table_counters(schema: str) -> Call[Counters]:
    """relname → (inserted, updated, HOT-updated, deleted, autovacuum runs, autoanalyze runs)."""
    return Call("bench_table_counters", {"schema": schema}, _by_first)


def stats_flush() -> Call[None]:
    return Call("bench_stats_flush", {}, no_result)


def table_sizes(table: str) -> Call[tuple[int, int]]:
    """(heap bytes, bytes of all its indexes) of a table named schema.table."""
    return Call("bench_table_sizes", {"table": table}, _first_row)


def index_sizes(table: str) -> Call[dict[str, tuple[int]]]:
    return Call("bench_index_sizes", {"table": table}, _by_first)


def hold_snapshot() -> Call[None]:
    return Call("bench_hold_snapshot", {}, no_result)


# --- jobqueue ----------------------------------------------------------------------------------


def sql_enqueue(*, job_type: str, payload: str, queue: str) -> Call[uuid.UUID]:
    return Call("bench_sql_enqueue", {"job_type": job_type, "payload": payload, "queue": queue}, scalar)


def sql_enqueue_many(jobs: str) -> Call[int]:
    return Call("bench_sql_enqueue_many", {"jobs": jobs}, scalar)


def completed_count(queue: str) -> Call[int]:
    return Call("bench_completed_count", {"queue": queue}, scalar)


def drain_span(queue: str) -> Call[tuple[datetime | None, datetime | None]]:
    return Call("bench_drain_span", {"queue": queue}, _first_row)


def finish_tenths(queue: str) -> Call[tuple[int, list[datetime] | None]]:
    return Call("bench_finish_tenths", {"queue": queue}, _first_row)


def exactly_once(queue: str) -> Call[tuple[int, int, int]]:
    return Call("bench_exactly_once", {"queue": queue}, _first_row)


def claimed_at(ids: list[uuid.UUID]) -> Call[list[tuple[uuid.UUID, datetime]]]:
    return Call("bench_claimed_at", {"ids": ids})


def workers_running(queue: str) -> Call[int]:
    return Call("bench_workers_running", {"queue": queue}, scalar)


def vacuum() -> Call[None]:
    return Call("bench_vacuum", {}, no_result)


def vacuum_after_prune() -> Call[None]:
    return Call("bench_vacuum_after_prune", {}, no_result)


def vacuum_count() -> Call[int]:
    return Call("bench_vacuum_count", {}, scalar)


def set_retention(queue: str) -> Call[None]:
    return Call("bench_set_retention", {"queue": queue}, no_result)


def delete_queue(queue: str) -> Call[None]:
    return Call("bench_delete_queue", {"queue": queue}, no_result)


def delete_queue_rows(queue: str) -> Call[None]:
    return Call("bench_delete_queue_rows", {"queue": queue}, no_result)


def delete_task_default(job_type: str) -> Call[None]:
    return Call("bench_delete_task_default", {"job_type": job_type}, no_result)


def delete_api_key(key_id: uuid.UUID) -> Call[None]:
    return Call("bench_delete_api_key", {"id": key_id}, no_result)


# --- the raw baseline --------------------------------------------------------------------------


def raw_exists() -> Call[bool]:
    return Call("bench_raw_exists", {}, scalar)


RAW_CREATE = (
    "bench_raw_create_schema",
    "bench_raw_create_table",
    "bench_raw_create_index",
    "bench_raw_create_notify",
    "bench_raw_create_trigger",
)


def raw_create() -> list[Call[None]]:
    """The statements that create the raw queue, in order."""
    return [Call(name, {}, no_result) for name in RAW_CREATE]


def raw_drop() -> Call[None]:
    return Call("bench_raw_drop", {}, no_result)


def raw_listen() -> Call[None]:
    return Call("bench_raw_listen", {}, no_result)


def raw_enqueue(*, queue: str, job_type: str, payload: str) -> Call[int]:
    return Call("bench_raw_enqueue", {"queue": queue, "job_type": job_type, "payload": payload}, scalar)


def raw_copy_statement() -> str:
    """The COPY of the raw bulk insert: rows are streamed, so it is not a Call (see raw.py)."""
    return Call("bench_raw_copy").sql


def raw_claim(*, queue: str, limit: int) -> Call[list[tuple[int, str, Any]]]:
    return Call("bench_raw_claim", {"queue": queue, "limit": limit})


def raw_ack(ids: list[int]) -> Call[None]:
    return Call("bench_raw_ack", {"ids": ids}, no_result)


def raw_delete_all() -> Call[None]:
    return Call("bench_raw_delete_all", {}, no_result)


def raw_prune() -> Call[int]:
    return Call("bench_raw_prune", {}, scalar)


def raw_vacuum() -> Call[None]:
    return Call("bench_raw_vacuum", {}, no_result)


def raw_drain_span() -> Call[tuple[int, datetime | None, datetime | None]]:
    return Call("bench_raw_drain_span", {}, _first_row)


def raw_finish_tenths() -> Call[tuple[int, list[datetime] | None]]:
    return Call("bench_raw_finish_tenths", {}, _first_row)


def raw_exactly_once() -> Call[tuple[int, int]]:
    return Call("bench_raw_exactly_once", {}, _first_row)


def raw_claimed_at(ids: list[int]) -> Call[list[tuple[int, datetime]]]:
    return Call("bench_raw_claimed_at", {"ids": ids})
