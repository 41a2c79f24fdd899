"""Batched acknowledgements: outcomes are buffered and written a batch per statement.

Completions go out as one `job_complete_many`, failures as one `job_fail_many` (attempts a handler
gave back with `CircuitOpen` as one `job_release_many`), when the buffer
reaches its batch size (or ``MAX_BATCH_BYTES`` of results and errors) or a few milliseconds after
its first entry (River's batch completer and graphile-worker's batched completion are the
precedent: a round trip per job costs more than the job). When the database is unreachable the
outcomes stay buffered and are retried; if a lease runs out meanwhile, the sweeper hands the job to
someone else and our late ack is refused by its attempt guard — at-least-once, never lost. The
worker stops claiming while `backlog` is above its bound, so an outage cannot pile up thousands of
finished-but-unrecorded jobs in memory.

An outcome the server refuses for what it holds (not for an outage) is written on its own; a
completion whose result the server refuses becomes a dead letter carrying the server's reason —
once, instead of the job running again and again after its lease.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from typing import Callable

from jobqueue import db
from jobqueue.config import Settings
from jobqueue.errors import DatabaseUnavailable
from jobqueue.store import jobs as job_store
from jobqueue.store.jobs import Attempt
from jobqueue.worker.executor import CANCELLED, COMPLETED, DEAD, SNOOZED, Outcome

log = logging.getLogger("jobqueue.worker.acks")

#: An ack statement carries at most this much result/error text (PostgreSQL's messages stop at 1 GB).
MAX_BATCH_BYTES = 16 * 1024 * 1024


class AckBuffer:
    def __init__(self, pool, worker_id: str, *, batch_size: int = 200, flush_interval: float = 0.005,
                 on_flushed: Callable[[list[Outcome], set[uuid.UUID]], None] | None = None,
                 default_limits: tuple[int, int] | None = None) -> None:
        self._pool = pool
        # The (soft, hard) queue depth limits load shedding applies where a queue sets none.
        defaults = Settings()
        self.default_limits = default_limits or (defaults.api_soft_limit, defaults.api_hard_limit)
        self.worker_id = worker_id
        self.batch_size = batch_size
        self.flush_interval = flush_interval
        self._pending: list[Outcome] = []
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self.flushed = asyncio.Event()  # set after every write: a worker waiting for room looks again
        self._on_flushed = on_flushed

    def add(self, outcome: Outcome) -> None:
        self._pending.append(outcome)
        self._idle.clear()
        if len(self._pending) == 1 or len(self._pending) >= self.batch_size:
            self._wake.set()

    @property
    def backlog(self) -> int:
        """Outcomes finished but not written yet."""
        return len(self._pending)

    def pending_attempts(self) -> list[Attempt]:
        return [o.job.key for o in self._pending]

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
            batch = self._next_batch()
            try:
                accepted = await self._write(batch)
            except DatabaseUnavailable:
                raise
            except Exception:  # refused by the server: one outcome must not hold back the others
                accepted = await self._write_each(batch)
            del self._pending[: len(batch)]
            self.flushed.set()
            if self._on_flushed:
                self._on_flushed(batch, accepted)
        self._idle.set()

    def _next_batch(self) -> list[Outcome]:
        size = 0
        for count, outcome in enumerate(self._pending[: self.batch_size]):
            size += outcome.size
            if size > MAX_BATCH_BYTES and count > 0:
                return self._pending[:count]
        return self._pending[: self.batch_size]

    async def _write_each(self, batch: list[Outcome]) -> set[uuid.UUID]:
        """The batch one outcome at a time. One the server still refuses is written as what it
        became: a completion whose result PostgreSQL cannot store is a dead letter with the
        server's reason; a failure whose error text it refuses is written with a short message. If
        even that is refused, it is dropped with its reason logged: its lease then runs out and the
        sweeper hands the job out again (at-least-once)."""
        accepted: set[uuid.UUID] = set()
        for outcome in batch:
            try:
                accepted |= await self._write([outcome])
                continue
            except DatabaseUnavailable:
                raise
            except Exception as exc:
                refused = exc
            log.warning("job %s: the database refused its outcome (%s); recording that instead", outcome.job.id, refused)
            try:
                accepted |= await self._write([_refused(outcome, refused)])
            except DatabaseUnavailable:
                raise
            except Exception:
                log.exception("job %s: the database refused its ack; dropped, the job runs again after its lease",
                              outcome.job.id)
        return accepted

    async def _write(self, batch: list[Outcome]) -> set[uuid.UUID]:
        done = [o for o in batch if o.kind == COMPLETED]
        snoozed = [o for o in batch if o.kind == SNOOZED]
        failed = [o for o in batch if o.kind not in (COMPLETED, SNOOZED)]
        accepted: set[uuid.UUID] = set()
        kinds = sum(1 for part in (done, snoozed, failed) if part)
        async with db.connection(self._pool) as conn, _together(conn, kinds > 1):
            if done:
                completed: list[uuid.UUID] = await db.run(conn, job_store.complete_many(
                    worker_id=self.worker_id,
                    ids=[o.job.id for o in done], attempts=[o.job.attempt for o in done],
                    results=[o.result_json for o in done], durations=[o.duration_ms for o in done]))
                accepted.update(completed)
            if failed:
                rows = await db.run(conn, job_store.fail_many(
                    worker_id=self.worker_id,
                    ids=[o.job.id for o in failed], attempts=[o.job.attempt for o in failed],
                    actions=[_action(o) for o in failed], retry_in=[o.retry_in for o in failed],
                    error_types=[o.error_type for o in failed], messages=[o.message for o in failed],
                    tracebacks=[o.traceback for o in failed], default_limits=self.default_limits))
                accepted.update(row[0] for row in rows)
            if snoozed:
                released = await db.run(conn, job_store.release_each(
                    worker_id=self.worker_id, attempts=[o.job.key for o in snoozed]))
                accepted.update(released)
        return accepted


def _refused(outcome: Outcome, reason: Exception) -> Outcome:
    """What to record when the server refused ``outcome`` itself (its result or error text)."""
    text = str(reason).replace("\x00", "\\x00")[:2000]
    if outcome.kind == COMPLETED:
        return Outcome(job=outcome.job, kind=DEAD, duration_ms=outcome.duration_ms, error_type="ResultRefused",
                       message=f"PostgreSQL refused the handler's result: {text}")
    return Outcome(job=outcome.job, kind=outcome.kind, duration_ms=outcome.duration_ms, retry_in=outcome.retry_in,
                   error_type=outcome.error_type[:200] or "Error",
                   message=f"(the original error text was refused by PostgreSQL: {text})")


def _together(conn, both: bool):
    """One transaction when a batch writes more than one kind of outcome, so a retried batch never finds
    half of itself already written (one statement alone is its own transaction already)."""
    return conn.transaction() if both else contextlib.nullcontext()


def _action(outcome: Outcome) -> str:
    if outcome.kind == CANCELLED:
        return "cancel"
    if outcome.kind == DEAD:
        return "dead"
    return "retry"
