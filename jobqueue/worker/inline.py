"""`InlineRunner`: jobs run in the caller's process, one at a time, by the worker's own parts — what
the test mode (`jobqueue.testing`: ``perform_job``, ``drain``) drives.

- `run`: one attempt as `JobSlots` runs it: `run_attempt` (deadline, decryption, result limits,
  the app's middleware) in a task of its own under a `DeadlineWatch`, a sync handler on
  `HandlerThreads`; an async handler that swallows its deadline's cancellation is failed as a
  timeout after the grace (``overdue_outcome``) and left running, counted stuck.
- `drain`: claims one job at a time with the worker's claim (`Claimer.claim_limited`: priority
  then submission order, the app's job types only, within any global limits), runs it, and writes
  its outcome with the worker's ack statements (`AckBuffer.flush`), until nothing is due — jobs the
  handlers enqueue meanwhile included. ``with_scheduled``: when nothing is due, the waiting jobs due
  soonest (scheduled ones, and retries waiting out their backoff) are brought forward
  (``job_bring_forward``) and the drain goes on. A job type whose handler raised `CircuitOpen`
  (its job given back, the attempt not counted) is not claimed again in that drain, as an open
  breaker's types are not. More than ``limit`` attempts: `DrainLimitExceeded` (a handler that
  enqueues forever, a task that always retries), the job it claimed last given back uncounted.

What it leaves out: heartbeats (a claim's lease lasts until the attempt's deadline and its grace
instead), LISTEN, the registry, circuit breakers' counts and probes, paused queues, and the worker's
declarations at start (task defaults, breakers, limits, schedules): it runs what is due, as one
worker with one slot would.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import socket
import time
import uuid
from typing import Sequence

from jobqueue.app import JobQueue
from jobqueue.config import BackpressureSettings, WorkerSettings
from jobqueue.crypto.keyring import KeyRing
from jobqueue.db import gateway as db
from jobqueue.model.errors import JobQueueError, JobTimeout
from jobqueue.model.jobs import Job
from jobqueue.store import job_admin
from jobqueue.store import jobs as job_store
from jobqueue.store.jobs import Deadlines
from jobqueue.worker.acks import DEFERRED_RETRY, AckBuffer
from jobqueue.worker.claimer import Claimer
from jobqueue.worker.deadlines import DeadlineWatch
from jobqueue.worker.executor import SNOOZED, Ran, attempt_timeout, overdue_outcome, run_attempt
from jobqueue.worker.heartbeat import beat_interval
from jobqueue.worker.threads import HandlerThreads

#: Seconds a drain waits for an ack another transaction's row lock holds back before it gives up.
ACK_WAIT = 30.0


class DrainLimitExceeded(JobQueueError):
    """A drain ran its ``limit`` of attempts and jobs were still due."""


def inline_worker_id() -> str:
    return f"inline:{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


class InlineRunner:
    """Use it as ``async with InlineRunner(...) as runner:`` (its deadline watch runs meanwhile)."""

    def __init__(
        self,
        app: JobQueue,
        settings: WorkerSettings,
        *,
        keys: KeyRing | None,
        pool=None,
        backpressure: BackpressureSettings | None = None,
        worker_id: str | None = None,
    ) -> None:
        """``pool``: where `drain` claims and acks (a psycopg pool, or anything whose
        ``connection()`` yields a connection); `run` alone needs none."""
        self.app = app
        self.settings = settings
        self.keys = keys
        self.worker_id = worker_id or inline_worker_id()
        self.grace = beat_interval(settings.lease_seconds)  # the worker's deadline grace (its heartbeat's)
        self.threads = HandlerThreads(1, settings.stuck_handler_bound, name="jobqueue-inline")
        self.deadline_watch = DeadlineWatch(grace=self.grace / 2, on_overdue=self._overdue)
        self._overdue_waiters: dict[asyncio.Task, asyncio.Future] = {}
        self._watching: asyncio.Task | None = None
        self.pool = pool
        if pool is not None:
            # No heartbeat renews a claim's lease: it lasts until the attempt's deadline and grace.
            longest = max([settings.processing_ttl, *app.timeouts_by_type().values()])
            self.claimer = Claimer(
                pool,
                self.worker_id,
                dataclasses.replace(settings, lease_seconds=max(settings.lease_seconds, longest + self.grace)),
                Deadlines(
                    timeouts_json=json.dumps(app.timeouts_by_type()),
                    default=settings.processing_ttl,
                    grace=self.grace,
                ),
                served=list(app.tasks),
            )
            self.acks = AckBuffer(pool, self.worker_id, backpressure=backpressure)

    async def __aenter__(self) -> "InlineRunner":
        self._watching = asyncio.create_task(self.deadline_watch.run(), name="jobqueue-inline-deadlines")
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._watching is not None:
            self._watching.cancel()
            await asyncio.gather(self._watching, return_exceptions=True)

    async def run(self, job: Job) -> Ran:
        """One attempt of ``job``, under its deadline, with the app's middleware."""
        task = self.app.tasks.get(job.job_type)
        attempt = asyncio.create_task(
            run_attempt(
                job,
                task,
                self.threads,
                self.deadline_watch,
                max_result_bytes=self.settings.max_result_bytes,
                keys=self.keys,
                middleware=self.app.middlewares,
            )
        )
        overdue = asyncio.get_running_loop().create_future()
        self._overdue_waiters[attempt] = overdue
        self.deadline_watch.watch(attempt, attempt_timeout(job, task))
        try:
            await asyncio.wait({attempt, overdue}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:  # the caller gave up (a test's timeout): so does the attempt
            attempt.cancel()
            raise
        finally:
            self._overdue_waiters.pop(attempt, None)
        if not attempt.done():  # it swallowed its deadline's cancellation: failed without it
            self.threads.mark_stuck(attempt)
            outcome = overdue_outcome(job, task, self.deadline_watch.grace)
            return Ran(outcome, error=JobTimeout(outcome.message))
        self.deadline_watch.forget(attempt)
        return attempt.result()

    def _overdue(self, running: asyncio.Task) -> None:
        running.cancel()
        waiter = self._overdue_waiters.get(running)
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def drain(self, queues: Sequence[str] | None, *, with_scheduled: bool, limit: int) -> list[Ran]:
        """Claim, run and ack until nothing is due (``queues`` None: every queue holding jobs of
        the app's types, looked up again whenever nothing is due)."""
        ran: list[Ran] = []
        blocked: set[str] = set()
        listed = list(queues) if queues is not None else await self._waiting_queues()
        while True:
            jobs = await self.claimer.claim_limited(listed, 1, sorted(blocked)) if listed else []
            if not jobs:
                if queues is None and (found := await self._waiting_queues()) != listed:
                    listed = found
                    continue
                if with_scheduled and listed and await self._bring_forward(listed, blocked):
                    continue
                return ran
            job = jobs[0]
            if len(ran) >= limit:
                await self._run_call(job_store.release_many(worker_id=self.worker_id, attempts=[job.key]))
                raise DrainLimitExceeded(
                    f"drain ran {limit} attempts and jobs are still due (a handler that enqueues jobs without "
                    "end, or a task that retries without end?): raise limit= if that many is expected"
                )
            done = await self.run(job)
            if done.outcome.kind == SNOOZED:
                blocked.add(job.job_type)
            await self._ack(done)
            ran.append(done)

    async def _ack(self, done: Ran) -> None:
        self.acks.add(done.outcome)
        await self.acks.flush()
        give_up = time.monotonic() + ACK_WAIT
        while self.acks.backlog:  # held back by another transaction's lock on the row
            if time.monotonic() > give_up:
                raise TimeoutError(f"job {done.outcome.job.id}: its ack waited {ACK_WAIT:g} s for a row lock")
            await asyncio.sleep(DEFERRED_RETRY)
            await self.acks.flush()
        self.claimer.acked([done.outcome.job.key])

    async def _waiting_queues(self) -> list[str]:
        return await self._run_call(job_admin.waiting_queues(list(self.app.tasks)))

    async def _bring_forward(self, queues: Sequence[str], blocked: set[str]) -> bool:
        served = [name for name in self.app.tasks if name not in blocked]
        return bool(served) and bool(await self._run_call(job_admin.bring_forward(queues, served)))

    async def _run_call(self, call: db.Call):
        async with db.connection(self.pool) as conn:
            return await db.run(conn, call)
