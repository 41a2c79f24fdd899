"""Batched acknowledgements: outcomes are buffered and written a batch per statement.

Completions go out as one `job_complete_many`, failures as one `job_fail_many`, when the buffer
reaches its batch size or a few milliseconds after its first entry (River's batch completer and
graphile-worker's batched completion are the precedent: a round trip per job costs more than the
job). When the database is unreachable the outcomes stay buffered and are retried; if a lease
runs out meanwhile, the sweeper hands the job to someone else and our late ack is refused by its
state/attempt guard — at-least-once, never lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from typing import Callable

from jobqueue import db
from jobqueue.errors import DatabaseUnavailable
from jobqueue.store import jobs as job_store
from jobqueue.worker.executor import CANCELLED, COMPLETED, DEAD, Outcome

log = logging.getLogger("jobqueue.worker.acks")


class AckBuffer:
    def __init__(self, pool, worker_id: str, *, batch_size: int = 200, flush_interval: float = 0.005,
                 on_flushed: Callable[[list[Outcome], set[uuid.UUID]], None] | None = None) -> None:
        self._pool = pool
        self.worker_id = worker_id
        self.batch_size = batch_size
        self.flush_interval = flush_interval
        self._pending: list[Outcome] = []
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._on_flushed = on_flushed

    def add(self, outcome: Outcome) -> None:
        self._pending.append(outcome)
        self._idle.clear()
        if len(self._pending) == 1 or len(self._pending) >= self.batch_size:
            self._wake.set()

    def pending_ids(self) -> list[uuid.UUID]:
        return [o.job.id for o in self._pending]

    async def run(self) -> None:
        """Flush until cancelled; a failed flush keeps its outcomes and retries with backoff."""
        retry_delay = 0.05
        while True:
            await self._wake.wait()
            self._wake.clear()
            if len(self._pending) < self.batch_size:
                await asyncio.sleep(self.flush_interval)
            try:
                await self.flush()
                retry_delay = 0.05
            except DatabaseUnavailable as exc:
                log.warning("ack flush failed (%s); %d outcomes kept, retrying", exc, len(self._pending))
                await asyncio.sleep(retry_delay)
                retry_delay = min(retry_delay * 2, 2.0)
                self._wake.set()

    async def drain(self, timeout: float) -> bool:
        """Wait until everything buffered is written; False if that did not happen in time."""
        self._wake.set()
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
            return True
        except asyncio.TimeoutError:
            return False

    async def flush(self) -> None:
        while self._pending:
            batch = self._pending[: self.batch_size]
            try:
                accepted = await self._write(batch)
            except DatabaseUnavailable:
                raise
            except Exception:  # refused by the server: one outcome must not hold back the others
                accepted = await self._write_each(batch)
            del self._pending[: len(batch)]
            if self._on_flushed:
                self._on_flushed(batch, accepted)
        self._idle.set()

    async def _write_each(self, batch: list[Outcome]) -> set[uuid.UUID]:
        """The batch one outcome at a time; one still refused is dropped with its reason logged: its
        lease then runs out and the sweeper hands the job out again (at-least-once)."""
        accepted: set[uuid.UUID] = set()
        for outcome in batch:
            try:
                accepted |= await self._write([outcome])
            except DatabaseUnavailable:
                raise
            except Exception:
                log.exception("job %s: the database refused its ack; dropped, the job runs again after its lease",
                              outcome.job.id)
        return accepted

    async def _write(self, batch: list[Outcome]) -> set[uuid.UUID]:
        done = [o for o in batch if o.kind == COMPLETED]
        failed = [o for o in batch if o.kind != COMPLETED]
        accepted: set[uuid.UUID] = set()
        async with db.connection(self._pool) as conn, _together(conn, done and failed):
            if done:
                accepted.update(await db.run(conn, job_store.complete_many(
                    worker_id=self.worker_id,
                    ids=[o.job.id for o in done], attempts=[o.job.attempt for o in done],
                    results=[o.result_json for o in done], durations=[o.duration_ms for o in done])))
            if failed:
                rows = await db.run(conn, job_store.fail_many(
                    worker_id=self.worker_id,
                    ids=[o.job.id for o in failed], attempts=[o.job.attempt for o in failed],
                    actions=[_action(o) for o in failed], retry_in=[o.retry_in for o in failed],
                    error_types=[o.error_type for o in failed], messages=[o.message for o in failed],
                    tracebacks=[o.traceback for o in failed]))
                accepted.update(row[0] for row in rows)
        return accepted


def _together(conn, both: object):
    """One transaction when a batch writes completions and failures, so a retried batch never finds
    half of itself already written (one statement alone is its own transaction already)."""
    return conn.transaction() if both else contextlib.nullcontext()


def _action(outcome: Outcome) -> str:
    if outcome.kind == CANCELLED:
        return "cancel"
    if outcome.kind == DEAD:
        return "dead"
    return "retry"
