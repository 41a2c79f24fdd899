"""Batched acknowledgements: outcomes are buffered and written a batch per statement.

Completions go out as one `job_complete_many`, failures as one `job_fail_many` (attempts a handler
gave back with `CircuitOpen` as one `job_release_many`), when the buffer
reaches its batch size (or ``MAX_BATCH_BYTES`` of results and errors) or a few milliseconds after
its first entry (River's batch completer and graphile-worker's batched completion are the
precedent: a round trip per job costs more than the job). When the database is unreachable the
outcomes stay buffered and are retried; if a lease runs out meanwhile, the sweeper hands the job to
someone else and our late ack is refused by its attempt guard — at-least-once, never lost. The
worker stops claiming while `backlog` (or `backlog_bytes`) is above its bound, so an outage cannot
pile up thousands of finished-but-unrecorded jobs in memory.

One locked row holds back no other outcome. The ack statements pass over a job whose row another
transaction holds locked (an operator's SELECT … FOR UPDATE, a cancel inside a caller's open
transaction) and answer it busy; its outcome is kept aside (``deferred``) and tried again after a
backoff (``DEFERRED_RETRY`` up to ``DEFERRED_RETRY_MAX``) while the others are written at once. A
batch that fails as a whole as busy (a wait the statement cannot skip: another transaction's
uncommitted result or error row for one of its jobs, a deadlock, a statement timeout) is split in
two and each half written with a short lock wait (``SPLIT_LOCK_WAIT``), and a half that fails
again is split in turn, so one such row is isolated in about log2(batch) statements and only it is
deferred. When both halves fail, the cause is not one row (a table lock): the batch stays for the
next try.

An outcome the server refuses for what it holds (not for an outage) is written on its own; a
completion whose result the server refuses becomes a dead letter carrying the server's reason —
once, instead of the job running again and again after its lease.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from typing import Callable

from jobqueue.config import BackpressureSettings
from jobqueue.db import gateway as db
from jobqueue.model.errors import DatabaseBusy, DatabaseUnavailable
from jobqueue.store import jobs as job_store
from jobqueue.store.jobs import Attempt
from jobqueue.worker.executor import CANCELLED, COMPLETED, DEAD, SNOOZED, Outcome

log = logging.getLogger("jobqueue.worker.acks")

#: An ack statement carries at most this much result/error text (PostgreSQL's messages stop at 1 GB).
MAX_BATCH_BYTES = 16 * 1024 * 1024
#: Seconds before an outcome passed over as busy is tried again, doubling up to the maximum.
DEFERRED_RETRY = 0.05
DEFERRED_RETRY_MAX = 1.0
#: The lock wait (seconds) of each half written after a batch failed as busy.
SPLIT_LOCK_WAIT = 0.2

#: (jobs written, jobs passed over as busy) of one write.
Written = tuple[set[uuid.UUID], set[uuid.UUID]]


class AckBuffer:
    def __init__(
        self,
        pool,
        worker_id: str,
        *,
        batch_size: int = 200,
        flush_interval: float = 0.005,
        on_flushed: Callable[[list[Outcome], set[uuid.UUID]], None] | None = None,
        backpressure: BackpressureSettings | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._pool = pool
        # The (soft, hard) queue depth limits load shedding applies where a queue sets none.
        limits = backpressure or BackpressureSettings()
        self.default_limits = (limits.soft_limit, limits.hard_limit)
        self.worker_id = worker_id
        self.batch_size = batch_size
        self.flush_interval = flush_interval
        self._clock = clock
        self._pending: list[Outcome] = []
        self._deferred: list[Outcome] = []  # passed over as busy: tried again at _retry_at
        self._retry_at = 0.0
        self._retry_delay = DEFERRED_RETRY
        self._bytes = 0
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self.flushed = asyncio.Event()  # set after every write: a worker waiting for room looks again
        self._on_flushed = on_flushed

    def add(self, outcome: Outcome) -> None:
        self._pending.append(outcome)
        self._bytes += outcome.size
        self._idle.clear()
        if len(self._pending) == 1 or len(self._pending) >= self.batch_size:
            self._wake.set()

    @property
    def backlog(self) -> int:
        """Outcomes finished but not written yet (deferred ones included)."""
        return len(self._pending) + len(self._deferred)

    @property
    def backlog_bytes(self) -> int:
        """What those outcomes hold in results and errors, in bytes (`Outcome.size`)."""
        return self._bytes

    @property
    def queued(self) -> int:
        """Outcomes not tried yet: written within a flush interval unless the database is down."""
        return len(self._pending)

    def pending_attempts(self) -> list[Attempt]:
        return [o.job.key for o in self._pending] + [o.job.key for o in self._deferred]

    async def run(self) -> None:
        """Flush until cancelled; a failed flush keeps its outcomes and retries with backoff."""
        retry_delay = 0.05
        while True:
            await self._wait()
            if 0 < len(self._pending) < self.batch_size:
                await asyncio.sleep(self.flush_interval)
            try:
                await self.flush()
                retry_delay = 0.05
            except DatabaseUnavailable as exc:
                log.warning("ack flush failed (%s); %d outcomes kept, retrying", exc, self.backlog)
                await asyncio.sleep(retry_delay)
                retry_delay = min(retry_delay * 2, 2.0)
                self._wake.set()

    async def _wait(self) -> None:
        """Until an outcome is added (or a drain asks), or the deferred ones are due."""
        timeout = max(self._retry_at - self._clock(), 0.0) if self._deferred else None
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._wake.wait(), timeout)
        self._wake.clear()

    async def drain(self, timeout: float) -> bool:
        """Wait until everything buffered is written; False if that did not happen in time."""
        self._wake.set()
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
            return True
        except asyncio.TimeoutError:
            return False

    async def flush(self) -> None:
        """Write what is pending, and the deferred outcomes when their retry is due."""
        waiting = bool(self._deferred)
        retrying = waiting and self._clock() >= self._retry_at
        if retrying:
            self._pending[:0], self._deferred = self._deferred, []  # older: first
        while self._pending:
            batch = self._next_batch()
            accepted, busy = await self._write_around_busy(batch)
            del self._pending[: len(batch)]
            done = [o for o in batch if o.job.id not in busy]
            self._deferred += [o for o in batch if o.job.id in busy]
            self._bytes -= sum(o.size for o in done)
            self.flushed.set()
            if self._on_flushed and done:
                self._on_flushed(done, accepted)
        if not self._deferred:
            self._retry_delay = DEFERRED_RETRY
            self._idle.set()
        elif retrying or not waiting:  # busy again: back off further; newly busy: the first delay
            self._retry_delay = min(self._retry_delay * 2, DEFERRED_RETRY_MAX) if retrying else DEFERRED_RETRY
            self._retry_at = self._clock() + self._retry_delay

    def _next_batch(self) -> list[Outcome]:
        size = 0
        for count, outcome in enumerate(self._pending[: self.batch_size]):
            size += outcome.size
            if size > MAX_BATCH_BYTES and count > 0:
                return self._pending[:count]
        return self._pending[: self.batch_size]

    async def _write_around_busy(self, batch: list[Outcome]) -> Written:
        try:
            return await self._write_or_each(batch)
        except DatabaseBusy as exc:
            if len(batch) == 1:
                log.info("job %s: its ack waits for a lock (%s); tried again shortly", batch[0].job.id, exc)
                return set(), {batch[0].job.id}
            log.info("an ack batch of %d failed as busy (%s); splitting it", len(batch), exc)
            return await self._split(batch)

    async def _split(self, batch: list[Outcome]) -> Written:
        """``batch`` just failed as busy: write each half, and split a half that fails again until
        the one outcome that blocks it is alone (kept as busy). Both halves failing means the
        block is not one row's: all of the batch is kept for the next try."""
        middle = len(batch) // 2
        accepted: set[uuid.UUID] = set()
        busy: set[uuid.UUID] = set()
        failed: list[list[Outcome]] = []
        for half in (batch[:middle], batch[middle:]):
            try:
                written, passed = await self._write_or_each(half, lock_wait=SPLIT_LOCK_WAIT)
            except DatabaseBusy:
                failed.append(half)
                continue
            accepted |= written
            busy |= passed
        if len(failed) == 2:
            return set(), {o.job.id for o in batch}
        for half in failed:
            if len(half) == 1:
                busy.add(half[0].job.id)
            else:
                written, passed = await self._split(half)
                accepted |= written
                busy |= passed
        return accepted, busy

    async def _write_or_each(self, batch: list[Outcome], lock_wait: float | None = None) -> Written:
        try:
            return await self._write(batch, lock_wait)
        except DatabaseUnavailable:
            raise
        except Exception:  # refused by the server: one outcome must not hold back the others
            return await self._write_each(batch, lock_wait)

    async def _write_each(self, batch: list[Outcome], lock_wait: float | None) -> Written:
        """The batch one outcome at a time. One the server still refuses is written as what it
        became: a completion whose result PostgreSQL cannot store is a dead letter with the
        server's reason; a failure whose error text it refuses is written with a short message. If
        even that is refused, it is dropped with its reason logged: its lease then runs out and the
        sweeper hands the job out again (at-least-once)."""
        accepted: set[uuid.UUID] = set()
        busy: set[uuid.UUID] = set()
        for outcome in batch:
            try:
                written, passed = await self._write([outcome], lock_wait)
                accepted |= written
                busy |= passed
                continue
            except DatabaseBusy:
                busy.add(outcome.job.id)
                continue
            except DatabaseUnavailable:
                raise
            except Exception as exc:
                refused = exc
            log.warning(
                "job %s: the database refused its outcome (%s); recording that instead", outcome.job.id, refused
            )
            try:
                written, passed = await self._write([_refused(outcome, refused)], lock_wait)
                accepted |= written
                busy |= passed
            except DatabaseUnavailable:
                raise
            except Exception:
                log.exception(
                    "job %s: the database refused its ack; dropped, the job runs again after its lease", outcome.job.id
                )
        return accepted, busy

    async def _write(self, batch: list[Outcome], lock_wait: float | None = None) -> Written:
        """``lock_wait``: seconds each statement may wait for a lock (None: the session's lock timeout)."""
        done = [o for o in batch if o.kind == COMPLETED and not o.written]
        snoozed = [o for o in batch if o.kind == SNOOZED]
        failed = [o for o in batch if o.kind not in (COMPLETED, SNOOZED)]
        # Committed with the handler's own transaction (jobqueue.worker.transactions): nothing to write.
        accepted: set[uuid.UUID] = {o.job.id for o in batch if o.written}
        busy: set[uuid.UUID] = set()
        kinds = sum(1 for part in (done, snoozed, failed) if part)
        if not kinds:
            return accepted, busy
        async with db.connection(self._pool) as conn, _together(conn, kinds > 1 or lock_wait is not None):
            if lock_wait is not None:
                await db.run(conn, job_store.ack_lock_wait(lock_wait))
            if done:
                completed = await db.run(
                    conn,
                    job_store.complete_many(
                        worker_id=self.worker_id,
                        ids=[o.job.id for o in done],
                        attempts=[o.job.attempt for o in done],
                        results=[o.result_json for o in done],
                        durations=[o.duration_ms for o in done],
                    ),
                )
                accepted.update(completed.written)
                busy |= completed.busy
            if failed:
                rows = await db.run(
                    conn,
                    job_store.fail_many(
                        worker_id=self.worker_id,
                        ids=[o.job.id for o in failed],
                        attempts=[o.job.attempt for o in failed],
                        actions=[_action(o) for o in failed],
                        retry_in=[o.retry_in for o in failed],
                        error_types=[o.error_type for o in failed],
                        messages=[o.message for o in failed],
                        tracebacks=[o.traceback for o in failed],
                        default_limits=self.default_limits,
                    ),
                )
                accepted.update(row[0] for row in rows.written)
                busy |= rows.busy
            if snoozed:
                released = await db.run(
                    conn, job_store.release_each(worker_id=self.worker_id, attempts=[o.job.key for o in snoozed])
                )
                accepted.update(released.written)
                busy |= released.busy
        return accepted, busy


def _refused(outcome: Outcome, reason: Exception) -> Outcome:
    """What to record when the server refused ``outcome`` itself (its result or error text)."""
    text = str(reason).replace("\x00", "\\x00")[:2000]
    if outcome.kind == COMPLETED:
        return Outcome(
            job=outcome.job,
            kind=DEAD,
            duration_ms=outcome.duration_ms,
            error_type="ResultRefused",
            message=f"PostgreSQL refused the handler's result: {text}",
        )
    return Outcome(
        job=outcome.job,
        kind=outcome.kind,
        duration_ms=outcome.duration_ms,
        retry_in=outcome.retry_in,
        error_type=outcome.error_type[:200] or "Error",
        message=f"(the original error text was refused by PostgreSQL: {text})",
    )


def _together(conn, both: bool):
    """One transaction when a batch writes more than one kind of outcome, so a retried batch never finds
    half of itself already written (one statement alone is its own transaction already), or when it sets
    its own lock wait (a setting local to that transaction)."""
    return conn.transaction() if both else contextlib.nullcontext()


def _action(outcome: Outcome) -> str:
    if outcome.kind == CANCELLED:
        return "cancel"
    if outcome.kind == DEAD:
        return "dead"
    return "retry"
