"""Transactional completion: ``async with job.transaction() as conn:`` (sync handlers: ``with``).

At-least-once delivery means a handler may run twice. When its effects are writes to the same
PostgreSQL, the attempt can be made exactly-once: the handler writes on the connection this hands
it, inside a transaction that stays open when the block ends, and the worker commits it only once
the handler has returned — after `job_complete_in_transaction` has marked the job completed, with
its result, in that same transaction. That statement is guarded as every ack is (the attempt this
worker holds: processing, same attempt, locked by it — or one the sweeper put back that no other
worker took since), and also refuses an attempt whose cancel was requested or whose deadline has
passed. So:

- the commit holds the handler's writes, the completion and the result, or none of them: a
  worker killed before it leaves nothing of the attempt behind, and the job runs again;
- once it committed the job never runs again: the completion is in it;
- a guard that fails (the lease ran out and another attempt took over, a cancel, the deadline)
  rolls the handler's writes back: the outcome is then a cancel or a retry, which the acks'
  own guards write or refuse as for any attempt;
- a handler that raises — inside the block or after it — rolls its writes back and fails as
  usual (retry, dead letter); so does one that runs past its deadline (its statements are bounded
  by what is left of it: statement and idle-in-transaction timeouts local to the transaction);
- a commit whose reply is lost is taken as a failure: if it did commit, the job is completed and
  the retry's ack is refused; if not, the job runs again — never completed without its writes.

The connections come from a pool of the worker's own for handlers (``concurrency`` connections at
most, opened on first use; a sync one for sync handlers), never from the pool its acks and
heartbeat use, so handlers holding transactions cannot starve the leases. They are made like every
other connection of the worker (`jobqueue.db.gateway.Session`), so ``JOBQUEUE_PGBOUNCER=1`` works:
a transaction is one server connection, and the settings are local to it. Ordering keys need the
default READ COMMITTED isolation: a keyed job cannot complete in another.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from dataclasses import replace
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from jobqueue.config import DbSettings
from jobqueue.db import gateway as db
from jobqueue.model.errors import JobCancelled, JobTimeout
from jobqueue.model.jobs import Job
from jobqueue.store import jobs as job_store
from jobqueue.worker.executor import CANCELLED, COMPLETED, RETRY, Outcome, error_outcome

log = logging.getLogger("jobqueue.worker.transactions")

#: How long a handler waits for a connection of the handlers' pool (then `DatabaseUnavailable`).
CONNECTION_WAIT = 10.0


class LeaseLost(Exception):
    """The attempt's transaction was rolled back: another attempt holds the job now (its lease ran
    out), or the job was finished otherwise."""


class TransactionLost(Exception):
    """The commit of the attempt's transaction failed or its reply was lost: retried as any failure
    (refused by the ack's guard if the commit did happen)."""


class HandlerTransactions:
    """The handlers' pools of one worker, and the `AttemptTransaction` each ``job.transaction()`` gets."""

    def __init__(self, database: DbSettings, worker_id: str, *, size: int) -> None:
        self.database = database
        self.worker_id = worker_id
        self.size = max(1, size)
        self._async: AsyncConnectionPool | None = None
        self._sync: ConnectionPool | None = None
        self._opening = threading.Lock()

    def begin(self, job: Job, deadline: float | None) -> "AttemptTransaction":
        """``deadline``: the attempt's, on `time.monotonic` (None: none)."""
        if job.open_transaction is not None:
            raise RuntimeError("job.transaction() is one per attempt: this attempt has one open already")
        return AttemptTransaction(self, job, deadline)

    async def async_pool(self) -> AsyncConnectionPool:
        if self._async is None:
            pool = db.async_pool(
                self.database.dsn,
                min_size=1,
                max_size=self.size,
                name=db.worker_name(self.worker_id) + ":tx",
                settings=self.database,
                timeout=CONNECTION_WAIT,
            )
            if self._async is None:
                self._async = pool
                await pool.open(wait=False)
        return self._async

    def sync_pool(self) -> ConnectionPool:
        with self._opening:
            if self._sync is None:
                self._sync = db.sync_pool(
                    self.database.dsn,
                    min_size=1,
                    max_size=self.size,
                    name=db.worker_name(self.worker_id) + ":tx",
                    settings=self.database,
                    timeout=CONNECTION_WAIT,
                )
                self._sync.open(wait=False)
            return self._sync

    async def close(self) -> None:
        if self._async is not None:
            await self._async.close()
        if self._sync is not None:
            await asyncio.to_thread(self._sync.close)


class AttemptTransaction:
    """One attempt's transaction: opened by the handler's block, committed (or rolled back) by
    `settle` once the handler has returned. The block's end leaves it open for that; an error in
    the block rolls it back at once. ``state``: open (in the block), held (block ended, waiting to
    be settled), done."""

    def __init__(self, owner: HandlerTransactions, job: Job, deadline: float | None) -> None:
        self.owner = owner
        self.job = job
        self.deadline = deadline
        self.conn: Any = None  # the psycopg connection (async or sync) while the transaction lasts
        self.state = "new"
        self.abandoned = False  # settled while a sync handler's thread is still in its block
        self.error: BaseException | None = None  # why a completion did not commit (shown to middleware)
        self._lock = threading.Lock()

    def _remaining(self) -> float:
        return 3600.0 if self.deadline is None else self.deadline - time.monotonic()

    def _refuse_start(self) -> None:
        self.job.raise_if_cancelled()
        if self._remaining() <= 0:
            raise JobTimeout("the attempt's deadline passed before its transaction began")

    def _check_end(self) -> None:
        if self.job.cancel_requested:
            raise JobCancelled(f"job {self.job.id} was cancelled: its transaction was rolled back")
        if self._remaining() <= 0:
            raise JobTimeout("the attempt's deadline passed: its transaction was rolled back")

    # --- async handlers -----------------------------------------------------------------------

    async def __aenter__(self):
        self._refuse_start()
        pool = await self.owner.async_pool()
        conn = await pool.getconn(timeout=min(CONNECTION_WAIT, max(self._remaining(), 0.001)))
        try:
            await conn.set_autocommit(False)
            await db.run(conn, job_store.transaction_begin(self._remaining()))
        except BaseException:
            await self._give_back_async(conn)
            raise
        self.conn, self.state, self.job.open_transaction = conn, "open", self
        return conn

    async def __aexit__(self, kind, exc, traceback) -> None:
        if exc is None:
            try:
                self._check_end()
            except BaseException:
                await self._rollback_async()
                raise
            self.state = "held"
            return
        await self._rollback_async()

    async def _rollback_async(self) -> None:
        conn, self.conn, self.state = self.conn, None, "done"
        if conn is not None:
            await self._give_back_async(conn)

    async def _give_back_async(self, conn) -> None:
        """Roll back what is open and return the connection (a broken one is discarded by the pool)."""
        try:
            if not conn.closed:
                await conn.rollback()
                await conn.set_autocommit(True)
        except Exception:
            await conn.close()
        pool = await self.owner.async_pool()
        await pool.putconn(conn)

    # --- sync handlers ------------------------------------------------------------------------

    def __enter__(self):
        self._refuse_start()
        pool = self.owner.sync_pool()
        conn = pool.getconn(timeout=min(CONNECTION_WAIT, max(self._remaining(), 0.001)))
        try:
            conn.autocommit = False
            db.run_sync(conn, job_store.transaction_begin(self._remaining()))
        except BaseException:
            self._give_back_sync(conn)
            raise
        self.conn, self.state, self.job.open_transaction = conn, "open", self
        return conn

    def __exit__(self, kind, exc, traceback) -> None:
        with self._lock:
            abandoned = self.abandoned
            if exc is None and not abandoned:
                try:
                    self._check_end()
                except BaseException:
                    self._rollback_sync()
                    raise
                self.state = "held"
                return
            self._rollback_sync()
        if abandoned and exc is None:
            raise JobTimeout("the attempt was given up (its deadline passed) while the block ran: rolled back")

    def _rollback_sync(self) -> None:
        conn, self.conn, self.state = self.conn, None, "done"
        if conn is not None:
            self._give_back_sync(conn)

    def _give_back_sync(self, conn) -> None:
        try:
            if not conn.closed:
                conn.rollback()
                conn.autocommit = True
        except Exception:
            conn.close()
        self.owner.sync_pool().putconn(conn)

    # --- the worker's side --------------------------------------------------------------------

    async def settle(self, outcome: Outcome) -> Outcome:
        """Commit the attempt's transaction with its completion, or roll it back; returns the
        outcome to hand to the acks (``written``: nothing left to write)."""
        with self._lock:
            if self.state == "open":  # a sync handler's thread is still in its block (given up on)
                self.abandoned = True
                return outcome
        if self.state != "held":
            return outcome
        if outcome.kind != COMPLETED:
            await self.abandon()
            return outcome
        if isinstance(self.conn, psycopg.AsyncConnection):
            return await self._settle(outcome)
        return await asyncio.to_thread(self._settle_sync, outcome)

    async def abandon(self) -> None:
        """Roll back whatever is held (the attempt failed, was released, or the worker stops)."""
        with self._lock:
            if self.state == "open":
                self.abandoned = True
                return
            if self.state != "held":
                return
        if isinstance(self.conn, psycopg.AsyncConnection):
            await self._rollback_async()
        else:
            await asyncio.to_thread(self._rollback_sync)

    def _completion(self, outcome: Outcome):
        return job_store.complete_in_transaction(
            worker_id=self.owner.worker_id,
            attempt=self.job.key,
            result_json=outcome.result_json,
            duration_ms=outcome.duration_ms,
        )

    async def _settle(self, outcome: Outcome) -> Outcome:
        conn = self.conn
        try:
            completed, cancelled = await db.run(conn, self._completion(outcome))
            if completed:
                await conn.commit()
        except Exception as exc:
            await self._rollback_async()
            return self._lost(outcome, exc)
        if not completed:
            await self._rollback_async()
            return self._refused(outcome, cancelled)
        await self._release_async()
        return replace(outcome, written=True)

    async def _release_async(self) -> None:
        conn, self.conn, self.state = self.conn, None, "done"
        await self._give_back_async(conn)

    def _settle_sync(self, outcome: Outcome) -> Outcome:
        conn = self.conn
        try:
            completed, cancelled = db.run_sync(conn, self._completion(outcome))
            if completed:
                conn.commit()
        except Exception as exc:
            self._rollback_sync()
            return self._lost(outcome, exc)
        self._rollback_sync()  # after a commit: nothing to roll back, the connection goes back
        if not completed:
            return self._refused(outcome, cancelled)
        return replace(outcome, written=True)

    def _refused(self, outcome: Outcome, cancelled: bool) -> Outcome:
        started = time.perf_counter() - outcome.duration_ms / 1000
        if cancelled:
            self.error = JobCancelled(f"job {outcome.job.id} was cancelled: its transaction was rolled back")
            return error_outcome(outcome.job, CANCELLED, started, self.error)
        self.error = LeaseLost(
            f"job {outcome.job.id} attempt {outcome.job.attempt}: no longer this worker's (its lease ran out and "
            "another attempt took over, or it passed its deadline): its transaction was rolled back"
        )
        return error_outcome(outcome.job, RETRY, started, self.error, retry_in=0.0)

    def _lost(self, outcome: Outcome, exc: Exception) -> Outcome:
        log.warning("job %s attempt %d: its transaction did not commit (%s)", *outcome.job.key, exc)
        started = time.perf_counter() - outcome.duration_ms / 1000
        self.error = TransactionLost(f"the attempt's transaction did not commit: {exc}")
        return error_outcome(outcome.job, RETRY, started, self.error, retry_in=1.0)
