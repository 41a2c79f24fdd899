"""Helpers for maintenance-service tests: pools on the test database, schedule rows, fired jobs."""

from __future__ import annotations

import contextlib
from datetime import datetime
from typing import AsyncIterator

import psycopg

from jobqueue.db import gateway as db


@contextlib.asynccontextmanager
async def pools(dsn: str, count: int = 1) -> AsyncIterator[list]:
    """``count`` open async pools, one per simulated process."""
    opened = [db.async_pool(dsn, min_size=1, max_size=2, name=f"test-{i}") for i in range(count)]
    for pool in opened:
        await pool.open(wait=True)
    try:
        yield opened
    finally:
        for pool in opened:
            await pool.close()


def insert_schedule(
    conn: psycopg.Connection,
    name: str,
    cron: str,
    *,
    job_type: str = "tick",
    timezone: str = "UTC",
    next_fire_at: datetime | None = None,
    **columns,
) -> int:
    """A schedule row written the way an operator would in psql (the trigger still checks it)."""
    fields = {
        "name": name,
        "cron": cron,
        "job_type": job_type,
        "timezone": timezone,
        "next_fire_at": next_fire_at,
        **columns,
    }
    names = ", ".join(fields)
    marks = ", ".join(["%s"] * len(fields))
    return conn.execute(
        f"INSERT INTO jobqueue.schedules ({names}) VALUES ({marks}) RETURNING id", list(fields.values())
    ).fetchone()[0]


def fired_ticks(conn: psycopg.Connection, name: str) -> list[datetime]:
    """run_at of every job the schedule created, in order (a job's run_at is its tick)."""
    rows = conn.execute(
        "SELECT run_at FROM jobqueue.jobs WHERE producer_id = %s ORDER BY run_at", (f"schedule:{name}",)
    ).fetchall()
    return [r[0] for r in rows]
