"""The worker's slots: each claimed job runs as an asyncio task (a sync handler in a thread), with a
deadline watched for it, and its outcome goes to its breaker, the counters and the acks, in that
order, while the attempt stays held (`HeldAttempts`: running, then finishing, then in the acks).

Kept apart from the claim loop (`jobqueue.worker.worker`), which only decides how many jobs to
claim and hands each one here: what happens to one attempt, from its start to its ack, or to its
release at shutdown, or to its failure as overdue while its handler runs on, is this module.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Callable

from jobqueue.app import JobQueue, TaskDef
from jobqueue.crypto.keyring import KeyRing
from jobqueue.model.jobs import Job
from jobqueue.observability.tracing import Tracing
from jobqueue.store.jobs import Attempt
from jobqueue.worker.attempts import HeldAttempts
from jobqueue.worker.breakers import Breakers
from jobqueue.worker.deadlines import DeadlineWatch
from jobqueue.worker.executor import RETRY, Outcome, attempt_timeout, execute, overdue_outcome
from jobqueue.worker.idle_wait import IdleWait
from jobqueue.worker.ports import OutcomeSink
from jobqueue.worker.progress import ProgressReports
from jobqueue.worker.spans import traced
from jobqueue.worker.stats import WorkerStats
from jobqueue.worker.status import WorkerStatus
from jobqueue.worker.threads import HandlerThreads
from jobqueue.worker.transactions import HandlerTransactions

log = logging.getLogger("jobqueue.worker")


class LentToHandlers:
    """What the worker lends each handler through its `Job` (`jobqueue.model.jobs.AttemptServices`):
    its transactions and its progress reports."""

    __slots__ = ("transactions", "reports")

    def __init__(self, transactions: HandlerTransactions, reports: ProgressReports) -> None:
        self.transactions = transactions
        self.reports = reports

    def transaction(self, job: Job):
        return self.transactions.begin(job, job.deadline)

    def progress(self, job: Job, done: float, total: float | None, message: str | None) -> None:
        self.reports.report(job.key, done, total, message)


class JobSlots:
    """Runs the jobs the claim loop starts, one task per attempt."""

    def __init__(
        self,
        app: JobQueue,
        *,
        attempts: HeldAttempts,
        status: WorkerStatus,
        threads: HandlerThreads,
        breakers: Breakers,
        stats: WorkerStats,
        acks: OutcomeSink,
        idle: IdleWait,
        deadline_grace: float,
        max_result_bytes: int,
        keys: KeyRing | None,
        tracing: Tracing | None,
        on_starving: Callable[[], None],
        lent: LentToHandlers,
    ) -> None:
        """``deadline_grace``: what a lease may outlive its deadline; half of it is what an async
        handler that swallowed its cancellation gets before its attempt fails as a timeout here,
        before the sweeper's would be written. ``on_starving``: stuck handlers hold the bound of
        threads (the worker restarts its process), called once. ``lent``: the handlers' transactions
        and progress reports."""
        self.app = app
        self.attempts = attempts
        self.status = status
        self.threads = threads
        self.breakers = breakers
        self.stats = stats
        self.acks = acks
        self.idle = idle
        self.max_result_bytes = max_result_bytes
        self.keys = keys
        self.tracing = tracing
        self.on_starving = on_starving
        self.lent = lent
        self.deadline_watch = DeadlineWatch(grace=deadline_grace / 2, on_overdue=self._overdue)
        self.released: set[Attempt] = set()  # given back at shutdown: nothing to ack
        self.abandoned: set[Attempt] = set()  # failed as overdue while their handler runs on
        self._overdue_acks: set[asyncio.Task] = set()
        self._starving_reported = False

    def release(self, attempts: list[Attempt]) -> None:
        """Shutdown gives these back to the queue: their tasks are cancelled and never acked."""
        self.released.update(attempts)
        for attempt in attempts:
            running = self.attempts.running.get(attempt)
            if running is not None:
                running[1].cancel()

    def start(self, job: Job) -> None:
        handler = self.app.tasks.get(job.job_type)  # None never, as claims take only the app's types
        timeout = attempt_timeout(job, handler)
        job.services = self.lent
        if timeout is not None:
            job.deadline = time.monotonic() + timeout
        task = asyncio.create_task(self._run(job, handler))
        self.deadline_watch.watch(task, timeout)
        self.attempts.running[job.key] = (job, task)

    async def _run(self, job: Job, task: TaskDef | None) -> None:
        # Taken now: a task still pending when its loop closes is finished by the garbage collector,
        # outside any loop, where asyncio.current_task() raises (and fails whatever runs then).
        this_task = asyncio.current_task()
        try:
            outcome = await traced(
                self.tracing,
                job,
                execute(
                    job,
                    task,
                    self.threads,
                    self.deadline_watch,
                    max_result_bytes=self.max_result_bytes,
                    keys=self.keys,
                    middleware=self.app.middlewares,
                ),
            )
        except asyncio.CancelledError:
            return  # released at shutdown: the job went back to pending, nothing to ack
        except Exception as exc:  # defensive: execute() classifies handler errors itself
            log.exception("job %s: executor failed", job.id)
            outcome = Outcome(
                job=job,
                kind="retry",
                duration_ms=0.0,
                retry_in=1.0,
                error_type=type(exc).__qualname__,
                message=str(exc),
            )
        finally:
            self.attempts.running.pop(job.key, None)
            self.deadline_watch.forget(this_task)  # type: ignore[arg-type]  # always set: we run in a task
            self.status.slot_freed.set()
            overdue = job.key in self.abandoned  # it ended at last: its attempt was failed already
            self.abandoned.discard(job.key)
        if job.key in self.released or overdue:
            return
        self.attempts.finishing.add(job.key)
        await self._finish(job, task, outcome)

    def _overdue(self, running: asyncio.Task) -> None:
        """An async handler still runs past its deadline and the grace: it swallowed its
        cancellation. Treated like a sync handler's stuck thread: its slot is free, its attempt
        fails as a JobTimeout now (not when the sweeper finds its lease run out), it is cancelled
        once more and counted stuck until it returns, and a worker whose stuck handlers reach the
        bound restarts."""
        attempt = next((key for key, (_, task) in self.attempts.running.items() if task is running), None)
        if attempt is None:
            return
        job, _ = self.attempts.running.pop(attempt)
        self.abandoned.add(attempt)
        self.status.slot_freed.set()
        running.cancel()
        self.threads.mark_stuck(running)
        log.error(
            "job %s attempt %d: its handler ignored the cancellation at its deadline and still runs; the "
            "attempt fails as a timeout and the handler counts as stuck",
            *attempt,
        )
        task = self.app.tasks.get(job.job_type)
        self.attempts.finishing.add(attempt)
        ack = asyncio.create_task(self._finish(job, task, overdue_outcome(job, task, self.deadline_watch.grace)))
        self._overdue_acks.add(ack)
        ack.add_done_callback(self._overdue_acks.discard)

    async def _finish(self, job: Job, task: TaskDef | None, outcome: Outcome) -> None:
        """Report the outcome to the breakers, count it, hand it to the acks; the attempt is in
        ``_finishing`` until then (still held: heartbeats renew it, a reconcile keeps it)."""
        try:
            await self.breakers.report(job, task, outcome)
        except BaseException:
            self.attempts.finishing.discard(job.key)
            raise
        finally:
            self.status.slot_freed.set()  # a report held the slot (see Worker._claim_loop)
        # The registry's counts mean what /metrics' do (WorkerStats).
        self.status.count(outcome)
        if outcome.kind == RETRY:
            self.idle.retry_scheduled(outcome.retry_in)
        self.stats.record(outcome)
        self.acks.add(outcome)
        self.attempts.finishing.discard(job.key)
        if self.threads.starving and not self._starving_reported:
            self._starving_reported = True
            log.error(
                "%d sync handlers are stuck past their deadline, or async ones ignoring their cancellation "
                "(limit %d): this worker stops claiming and restarts its process to get them back",
                self.threads.stuck,
                self.threads.max_stuck,
            )
            self.on_starving()
