"""Handlers that write to the application's own table (``ledger``) in `Job.transaction()`, for the
transactional-completion tests; ``runs`` (autocommit, outside the transaction) records every start,
so a test can tell a job that ran twice from one whose effect was written twice."""

from __future__ import annotations

import asyncio
import os
import threading
import time

import psycopg

from jobqueue import JobQueue
from jobqueue.model.jobs import Job

queue = JobQueue("ledger")

#: Set by a test to let the "hold" handlers return (they wait for it after their writes).
release = threading.Event()

SCHEMA = """
CREATE TABLE IF NOT EXISTS public.ledger (job_id uuid NOT NULL, attempt integer NOT NULL, amount integer NOT NULL);
CREATE TABLE IF NOT EXISTS public.runs (job_id uuid NOT NULL, attempt integer NOT NULL, at timestamptz DEFAULT now());
"""


async def _started(job: Job) -> None:
    """Record the start on a connection of its own (committed at once, whatever the attempt's fate)."""
    dsn = os.environ.get("LEDGER_DSN") or os.environ.get("JOBQUEUE_DSN")
    if dsn:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            await conn.execute("INSERT INTO public.runs (job_id, attempt) VALUES (%s, %s)", (job.id, job.attempt))


@queue.task("credit")
async def credit(job: Job):
    payload = job.payload or {}
    await _started(job)
    async with job.transaction() as conn:
        await conn.execute(
            "INSERT INTO public.ledger (job_id, attempt, amount) VALUES (%s, %s, %s)",
            (job.id, job.attempt, payload.get("amount", 1)),
        )
        if payload.get("sleep"):
            await asyncio.sleep(payload["sleep"])
        result = {"credited": payload.get("amount", 1)}
    if payload.get("fail_after"):
        raise RuntimeError("failed after the block: the block's writes roll back")
    if payload.get("hold"):
        while not release.is_set():
            await asyncio.sleep(0.02)
    if payload.get("until_cancelled"):
        while not job.cancel_requested:
            await asyncio.sleep(0.02)
    return result


@queue.task("credit_sync")
def credit_sync(job: Job):
    payload = job.payload or {}
    with job.transaction() as conn:
        conn.execute(
            "INSERT INTO public.ledger (job_id, attempt, amount) VALUES (%s, %s, %s)",
            (job.id, job.attempt, payload.get("amount", 1)),
        )
        if payload.get("fail_inside"):
            raise ValueError("failed inside the block")
    return {"credited": payload.get("amount", 1), "thread": threading.current_thread().name}


@queue.task("credit_late", timeout=1)
async def credit_late(job: Job):
    async with job.transaction() as conn:
        await conn.execute(
            "INSERT INTO public.ledger (job_id, attempt, amount) VALUES (%s, %s, 1)", (job.id, job.attempt)
        )
    await asyncio.sleep(5)  # past its deadline: cancelled there, and its writes roll back
    return {"never": True}


@queue.task("credit_twice")
async def credit_twice(job: Job):
    async with job.transaction():
        pass
    async with job.transaction():  # one per attempt: refused
        pass


@queue.task("report")
async def report(job: Job):
    payload = job.payload or {}
    for done in range(1, payload.get("steps", 3) + 1):
        await job.progress(done, payload.get("steps", 3), f"step {done}")
        await asyncio.sleep(payload.get("pause", 0.05))
    if payload.get("bad") is not None:
        await job.progress(float(payload["bad"]), 10)  # raises: a NaN, an infinity, a huge figure
    if payload.get("hold"):
        while not release.is_set():
            await asyncio.sleep(0.02)
    return {"steps": payload.get("steps", 3)}


@queue.task("report_sync")
def report_sync(job: Job):
    for done in range(100):
        job.progress(done, 100)  # a tight loop: coalesced, a few writes a second
    job.progress(100, 100, "done")
    time.sleep(0.6)
    return None


ORDERED_SCHEMA = """
CREATE TABLE IF NOT EXISTS public.ordered_runs (
    ordering_key text NOT NULL, n integer NOT NULL, started timestamptz NOT NULL, ended timestamptz NOT NULL
);
"""


@queue.task("ordered")
async def ordered(job: Job):
    """Records when it ran (the database's clock), in its own transaction: a run that did not
    complete leaves no row."""
    payload = job.payload or {}
    async with job.transaction() as conn:
        started = (await (await conn.execute("SELECT clock_timestamp()")).fetchone())[0]
        await asyncio.sleep(payload.get("sleep", 0.05))
        await conn.execute(
            "INSERT INTO public.ordered_runs VALUES (%s, %s, %s, clock_timestamp())",
            (payload["key"], payload["n"], started),
        )
