"""Factories for rows in the test database: jobs in any state without hand-written INSERTs."""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg

from jobqueue.model.jobs import Priority

_COLUMNS = (
    "queue",
    "job_type",
    "payload",
    "priority",
    "state",
    "attempts",
    "max_attempts",
    "run_at",
    "idempotency_key",
    "locked_by",
    "locked_until",
    "finished_at",
    "producer_id",
)


def make_job(
    conn: psycopg.Connection,
    *,
    state: str = "pending",
    job_type: str = "noop",
    queue: str = "default",
    payload: Any = None,
    priority: str | int = "normal",
    attempts: int | None = None,
    max_attempts: int = 4,
    run_at: datetime | None = None,
    idempotency_key: str | None = None,
    locked_by: str | None = None,
    locked_until: datetime | None = None,
    finished_at: datetime | None = None,
    producer_id: str | None = None,
) -> uuid.UUID:
    """Insert one job directly in ``state``, with the lease/attempt fields that state implies."""
    now = datetime.now(timezone.utc)
    if attempts is None:
        attempts = 0 if state == "pending" else 1
    if state == "processing":
        locked_by = locked_by or "test-worker"
        locked_until = locked_until or now + timedelta(seconds=30)
    if state in ("completed", "dead_letter", "cancelled"):
        finished_at = finished_at or now
    values = (
        queue,
        job_type,
        json.dumps(payload or {}),
        int(Priority.parse(priority)),
        state,
        attempts,
        max_attempts,
        run_at or now,
        idempotency_key,
        locked_by,
        locked_until,
        finished_at,
        producer_id,
    )
    row = conn.execute(
        f"INSERT INTO jobqueue.jobs ({', '.join(_COLUMNS)}) VALUES ({', '.join(['%s'] * len(_COLUMNS))}) RETURNING id",
        values,
    ).fetchone()
    if idempotency_key is not None:  # as enqueue does: the job takes its key unless another job holds it
        conn.execute(
            """INSERT INTO jobqueue.idempotency_keys (producer, key, job_id, fingerprint, expires_at)
                        SELECT coalesce(producer_id, ''), idempotency_key, id,
                               jobqueue.job_fingerprint(job_type, queue, payload), now() + interval '24 hours'
                        FROM jobqueue.jobs WHERE id = %s
                        ON CONFLICT DO NOTHING""",
            (row[0],),
        )
    return row[0]


def job_row(conn: psycopg.Connection, job_id: uuid.UUID) -> dict[str, Any]:
    with conn.cursor(row_factory=psycopg.rows.dict_row) as cur:
        return cur.execute("SELECT * FROM jobqueue.jobs WHERE id = %s", (job_id,)).fetchone()


def states(conn: psycopg.Connection, ids) -> dict:
    """{job id: state} of the given jobs (missing ones left out)."""
    return dict(conn.execute("SELECT id, state FROM jobqueue.jobs WHERE id = ANY(%s)", (list(ids),)).fetchall())


def count_jobs(conn: psycopg.Connection, queue: str | None = None) -> int:
    """Jobs in the table (of ``queue`` when given): what "nothing was written" tests count."""
    return conn.execute(
        "SELECT count(*) FROM jobqueue.jobs WHERE %(queue)s::text IS NULL OR queue = %(queue)s", {"queue": queue}
    ).fetchone()[0]


def finish_job(conn: psycopg.Connection, job_id: uuid.UUID, state: str, result: Any = None) -> None:
    """End a job as a worker (completed, dead_letter) or a cancel (cancelled) would, with its result row."""
    if state == "cancelled":
        assert conn.execute("SELECT jobqueue.cancel(%s)", (job_id,)).fetchone()[0] == "cancelled"
        return
    conn.execute(
        "UPDATE jobqueue.jobs SET state = %s, attempts = greatest(attempts, 1), finished_at = now(), "
        "updated_at = now() WHERE id = %s",
        (state, job_id),
    )
    conn.execute(
        "INSERT INTO jobqueue.job_results (job_id, outcome, result, error) VALUES (%s, %s, %s, %s)",
        (
            job_id,
            state,
            json.dumps(result) if state == "completed" else None,
            None if state == "completed" else json.dumps({"type": "E", "message": "gave up"}),
        ),
    )


def claim_params(**changes: Any) -> dict[str, Any]:
    """Every parameter of job_claim, for tests that run the claim statement by hand: one queue,
    no resume marks, no breakers, no limits — override what the test is about."""
    from jobqueue.store.jobs import Deadlines

    params: dict[str, Any] = {
        "queues": ["default"],
        "limit": 10,
        "worker_id": "w",
        "lease_seconds": 30,
        "now": None,
        "after_run_at": [],
        "after_seq": [],
        "blocked": [],
        "only": None,
        "limits_checked": False,
        "mark_limited": False,
        "until_level": 3,
        "until_run_at": None,
        "until_seq": None,
        "served": None,
        **Deadlines().params(),
    }
    return params | changes
