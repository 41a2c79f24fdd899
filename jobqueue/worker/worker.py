"""The claim loop: one `Worker` per process claims jobs in batches and runs them concurrently.

How a worker spends its time:
- It claims no more jobs than it has free slots (`slots` minus running; `slots` is the concurrency,
  or with --concurrency MIN:MAX the target `worker.slot_scaler.SlotScaler` sets), in one statement
  (`FOR UPDATE SKIP LOCKED`, priority then submission order), and sets a lease on each.
- Each job runs as an asyncio task (sync handlers in a thread pool) in `JobSlots`
  (jobqueue.worker.slots); outcomes go to the batched `AckBuffer`; the slot is free as soon as the
  handler returns.
- It never claims from a paused queue (`PausedQueues`, kept fresh by the ``jobqueue_control``
  NOTIFY and a timer).
- It never claims job types of an open circuit breaker (`Breakers.blocked`, kept fresh by the
  ``jobqueue_circuits`` NOTIFY); when a breaker's probe is due it claims that one job first, and it
  reports each breaker job's outcome to the breaker before the job's ack.
- It never starts more jobs than a global limit allows (`jobqueue.limits`, per job type or queue,
  across all workers): while one applies to its queues, each claim goes through the limits
  (`LimitWatch.active`, kept fresh by the ``jobqueue_limits`` NOTIFY; `Claimer.claim_limited`),
  and it looks again when a spent limit may have room (``Claimer.recheck_in``) or an ack of one of
  its limited jobs is written.
- With nothing to claim it sleeps until a NOTIFY for one of its queues, the earliest future
  `run_at` among them, a limit's or a breaker's recheck, a retry it scheduled, or the poll
  interval (the fallback when LISTEN is unavailable): `IdleWait` says why each.
- Notifications are hints (any login may send any of them), coalesced and throttled so that a
  flood of forged ones costs next to nothing (`WorkerNotifications`).
- `request_stop()` (SIGTERM): stop claiming, let running jobs finish within the grace period,
  release the rest back to `pending` at once, flush acks, mark the registry row stopped.

What it guards against:
- Each attempt is tracked as (job id, attempt): a job reclaimed from this worker and claimed by it
  again is two attempts, in the running table, the heartbeat and the acks alike.
- It stops claiming while more finished outcomes than ``max_unacked``, or more than
  ``max_unacked_bytes`` of their results and errors, wait to be written (acks failing must not pile
  finished jobs up in memory, all to be run again after a crash).
- A claim that fails in an unknown way (the connection dropped, maybe after the commit) is
  reconciled before the next one: attempts the database says it holds but it never saw are
  released without counting the attempt. As the lost statement may commit later still (through
  PgBouncer), the reconcile is repeated every heartbeat interval while it could be running (the
  statement timeout). A reconcile never overlaps a claim and the start of its jobs (``_claiming``),
  and keeps every attempt the worker holds, wherever it is on its way to the acks (`HeldAttempts`).
  Any other claim error is logged and retried with backoff; only a missing schema ends the worker.
- Sync handlers past their deadline keep their thread; an async handler still running past its
  deadline and half the lease's grace swallowed its cancellation and is treated the same (its slot
  freed, its attempt failed as a timeout, counted stuck). When `HandlerThreads.starving`, the
  worker stops claiming and stops with `restart_requested` set, so its process is started afresh.

Its parts depend on narrow views, never on the worker: what it holds (`HeldAttempts`: the heartbeat,
a reconcile, the cancel hints), what it shows (`WorkerStatus`: the registry beat, `WorkerStats`,
the metrics endpoint, the `SlotScaler`), one wake-up event (set by notifications, breakers, limits
and acks; `IdleWait` sleeps on it); the claimer is its source of jobs, the `AckBuffer` the sink of
their outcomes, and an ack written tells the claimer which limit slots came free (`Claimer.acked`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import time
import uuid
from datetime import datetime, timezone

from jobqueue.app import JobQueue
from jobqueue.config import AutoscaleSettings, BackpressureSettings, DbSettings, MetricsSettings, WorkerSettings
from jobqueue.crypto.keyring import KeyRing
from jobqueue.db import gateway as db
from jobqueue.events.notifier import Notifier
from jobqueue.model.errors import DatabaseUnavailable, NotMigrated
from jobqueue.observability import tracing
from jobqueue.observability.tracing import Tracing
from jobqueue.runtime.background import watch
from jobqueue.store import jobs as job_store
from jobqueue.store import schedules as schedule_store
from jobqueue.store import workers as worker_store
from jobqueue.store.jobs import Deadlines
from jobqueue.worker.acks import AckBuffer
from jobqueue.worker.attempts import HeldAttempts
from jobqueue.worker.breakers import Breakers
from jobqueue.worker.cancel_hints import CancelHints
from jobqueue.worker.claimer import Claimer
from jobqueue.worker.executor import Outcome
from jobqueue.worker.heartbeat import Heartbeat, beat_interval
from jobqueue.worker.idle_wait import IdleWait
from jobqueue.worker.limit_watch import LimitWatch
from jobqueue.worker.metrics_server import MetricsServer
from jobqueue.worker.notifications import WorkerNotifications
from jobqueue.worker.paused import PausedQueues
from jobqueue.worker.ports import JobSource, OutcomeSink
from jobqueue.worker.progress import ProgressReports
from jobqueue.worker.shared_state import log_overruled
from jobqueue.worker.slot_scaler import SlotScaler
from jobqueue.worker.slots import JobSlots, LentToHandlers
from jobqueue.worker.stats import WorkerStats
from jobqueue.worker.status import WorkerStatus
from jobqueue.worker.threads import HandlerThreads
from jobqueue.worker.transactions import HandlerTransactions

ACK_DRAIN_SECONDS = 5.0

log = logging.getLogger("jobqueue.worker")


def new_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


#: Seconds a claim whose reply was lost may still commit, when no statement timeout bounds it.
LATE_COMMIT_WINDOW = 300.0


class Worker:
    def __init__(
        self,
        app: JobQueue,
        settings: WorkerSettings,
        database: DbSettings,
        metrics: MetricsSettings,
        *,
        autoscale: AutoscaleSettings,
        backpressure: BackpressureSettings,
        keys: KeyRing | None,
        worker_id: str | None = None,
        notifier: Notifier,
    ) -> None:
        """The sections it reads: its own, the connections', the figures' (its counters, which
        workers are alive), the slot scaler's, the depth limits its retries are shed by (where a
        queue sets none), and the key ring."""
        app.check_keys(keys)  # a task that encrypts, and no keys: refuse to start
        self.app = app
        self.settings = settings
        self.database = database
        self.keys = keys
        self.worker_id = worker_id or new_worker_id()
        self.queues = list(settings.queues)
        self.concurrency = settings.concurrency
        self.pool = db.async_pool(
            database.dsn, min_size=2, max_size=4, name=db.worker_name(self.worker_id), settings=database
        )
        self.notifier = notifier  # run by WorkerProcess, which shares it with maintenance
        #: set by whatever may mean there is work: the idle claim loop wakes (`IdleWait`)
        self._wake = asyncio.Event()
        self.acks: OutcomeSink = AckBuffer(
            self.pool,
            self.worker_id,
            batch_size=settings.ack_batch_size,
            flush_interval=settings.ack_flush_interval,
            on_flushed=self._acked,
            backpressure=backpressure,
        )
        self.threads = HandlerThreads(self.concurrency, settings.stuck_handler_bound)
        interval = beat_interval(settings.lease_seconds)  # the heartbeat's: the shared state's fallback re-reads too
        self.limits = LimitWatch(self.pool, app, self.queues, interval=interval, on_read=self._wake.set)
        self.breakers = Breakers(
            self.pool, app, interval=interval, retry_probe_after=settings.poll_interval, on_unblocked=self._wake.set
        )
        self.attempts = HeldAttempts(self.breakers, self.acks)
        self.running = self.attempts.running  # attempt → (job, task): the jobs in the slots
        # slots: what the claim loop fills (an autoscaling worker starts at its minimum)
        self.status = WorkerStatus(
            concurrency=self.concurrency,
            running=self.running,
            threads=self.threads,
            slots=settings.concurrency_min if settings.autoscaling else settings.concurrency,
        )
        self.heartbeat = Heartbeat(
            self.pool, self.worker_id, settings.lease_seconds, attempts=self.attempts, status=self.status
        )
        self.claimer: JobSource = Claimer(
            self.pool,
            self.worker_id,
            settings,
            Deadlines(
                timeouts_json=json.dumps(app.timeouts_by_type()),
                default=settings.processing_ttl,
                grace=self.heartbeat.deadline_grace,
            ),
            limits=self.limits,
            served=list(app.tasks),
        )
        self.paused = PausedQueues(
            self.pool,
            self.queues,
            interval=interval,
            listen=database.listen,
            connected=notifier.connected,
            on_resumed=self._wake.set,
        )
        self.idle = IdleWait(
            self.pool,
            self._wake,
            poll_interval=settings.poll_interval,
            listen=database.listen,
            connected=notifier.connected,
            paused=self.paused,
            claimer=self.claimer,
            breakers=self.breakers,
            limits=self.limits,
            acks=self.acks,
        )
        self.stats = WorkerStats(self.pool, self.worker_id, self.status, interval=metrics.stats_interval)
        self.scaler = (
            SlotScaler(
                self.pool,
                self.worker_id,
                settings,
                autoscale,
                stale_seconds=metrics.worker_stale_seconds,
                queues=self.paused,
                stats=self.stats,
                slots=self.status,
            )
            if settings.autoscaling
            else None
        )
        #: set when stuck handlers would starve this worker: its process should be started afresh
        self.restart_requested = False
        self._claim_uncertain = False  # the last claim failed in a way that may have committed
        self._late_commits_until = 0.0  # a lost claim may commit until then: reconcile every heartbeat interval
        self._claiming = asyncio.Lock()  # a claim and the start of its jobs, or a reconcile: never both at once
        self._slot_freed = self.status.slot_freed
        self.slots = JobSlots(
            app,
            attempts=self.attempts,
            status=self.status,
            threads=self.threads,
            breakers=self.breakers,
            stats=self.stats,
            acks=self.acks,
            idle=self.idle,
            deadline_grace=self.heartbeat.deadline_grace,
            max_result_bytes=settings.max_result_bytes,
            keys=keys,
            tracing=tracing.from_env(service_name="jobqueue-worker"),
            on_starving=self.request_restart,
            lent=LentToHandlers(
                HandlerTransactions(database, self.worker_id, size=self.concurrency),
                ProgressReports(self.pool, self.worker_id),
            ),
        )
        self.started = asyncio.Event()
        self.notifications = WorkerNotifications(
            notifier,
            wake=self._wake,
            paused=self.paused,
            breakers=self.breakers,
            limits=self.limits,
            cancel_hints=CancelHints(self.pool, self.attempts),
        )

    @property
    def tracing(self) -> Tracing | None:
        """The spans of each attempt (None: OpenTelemetry not configured); a test may set its own."""
        return self.slots.tracing

    @tracing.setter
    def tracing(self, value: Tracing | None) -> None:
        self.slots.tracing = value

    # --- control --------------------------------------------------------------------------

    def request_stop(self) -> None:
        """Stop claiming; running jobs get the shutdown grace period to finish. A stop asked for
        (SIGTERM) wins over a restart the worker was about to make of itself."""
        self.restart_requested = False
        self._stop()

    def request_restart(self) -> None:
        """Stop as `request_stop` does, then have the process started afresh."""
        self._stop()
        self.restart_requested = True

    def _stop(self) -> None:
        self.status.stopping.set()
        self._wake.set()
        self._slot_freed.set()

    @property
    def stopping(self) -> bool:
        return self.status.stopping.is_set()

    def _acked(self, batch: list[Outcome], accepted: set[uuid.UUID]) -> None:
        """An ack batch was written (``accepted``: the outcomes the database took)."""
        if self.claimer.acked([outcome.job.key for outcome in batch]):
            self._wake.set()  # a limit's slot is free again: claim, if there is room
        if len(accepted) == len(batch):  # every outcome written (the usual case): nothing to log
            return
        for outcome in batch:
            if outcome.job.id not in accepted:
                log.info(
                    "job %s attempt %d: outcome refused (a newer attempt started, or the job was finished otherwise)",
                    *outcome.job.key,
                )

    # --- main loop ----------------------------------------------------------------------------

    async def run(self) -> None:
        await self.pool.open(wait=True, timeout=30)
        jobs = [
            (self.acks.run(), "acks"),
            (self.heartbeat.run(), "heartbeat"),
            (self.stats.run(), "stats"),
            (self.slots.deadline_watch.run(), "deadlines"),
            (self.breakers.run(), "circuits"),
            (self.limits.run(), "limits"),
            (self.paused.run(), "paused"),
            (self._reconcile_late_claims(), "reconcile"),
            (self.slots.lent.reports.run(), "progress"),
        ]
        if self.scaler is not None:
            jobs.append((self.scaler.run(), "autoscale"))
        if self.settings.metrics_port:
            server = MetricsServer(self.stats, self.status, port=self.settings.metrics_port)
            jobs.append((server.run(), "metrics-server"))
        background = [watch(asyncio.create_task(job, name=name), self.request_stop) for job, name in jobs]
        try:
            await self._register()
            await self.paused.refresh()
            await self.breakers.refresh()
            await self.limits.refresh()
            if self.database.listen:
                await self._wait_for_listen()
            else:
                log.info(
                    "poll-only mode (JOBQUEUE_LISTEN=0): checking for work every %.1fs", self.settings.poll_interval
                )
            self.started.set()
            log.info(
                "worker %s started: queues=%s concurrency=%s",
                self.worker_id,
                self.queues,
                f"{self.settings.concurrency_min}:{self.concurrency}" if self.scaler else self.concurrency,
            )
            await self._claim_loop()
            await self._shutdown()
        finally:
            for task in background:
                task.cancel()
            self.notifications.close()
            await asyncio.gather(*background, return_exceptions=True)
            await self.slots.lent.transactions.close()
            await self.pool.close()

    async def _wait_for_listen(self) -> None:
        """LISTEN speeds pick-up up but is never required: without it the worker polls."""
        try:
            await asyncio.wait_for(self.notifier.connected.wait(), timeout=10)
        except asyncio.TimeoutError:
            log.warning(
                "LISTEN connection not up after 10 s; polling every %.1fs until it is", self.settings.poll_interval
            )

    async def _register(self) -> None:
        async with db.connection(self.pool) as conn:
            await db.run(
                conn,
                worker_store.register(
                    worker_id=self.worker_id,
                    host=socket.gethostname(),
                    pid=os.getpid(),
                    queues=self.queues,
                    concurrency=self.concurrency,
                    heartbeat_interval=self.heartbeat.interval,
                    concurrency_min=self.settings.concurrency_min or None,
                    concurrency_target=self.status.slots if self.scaler else None,
                    job_types=list(self.app.tasks),
                    app=self.app.name,
                ),
            )
            if self.app.tasks:
                overruled = await db.run(
                    conn,
                    worker_store.sync_task_defaults(
                        self.app.max_attempts_by_type(), self.app.encrypted_fields_by_type(), app=self.app.name
                    ),
                )
                log_overruled(log, overruled, self.app.name)
                await self.breakers.declare(conn, self.app.name)
            await self.limits.declare(conn, self.app.name)
            if self.app.schedules:  # @queue.periodic: create or redefine their rows
                await db.run(
                    conn, schedule_store.sync(list(self.app.schedules.values()), now=datetime.now(timezone.utc))
                )

    async def _claim_loop(self) -> None:
        backoff = 0.1
        while not self.stopping:
            # An outcome being reported to its breaker still holds its slot: the report may open the
            # breaker, and the next claim must know before it picks another job of its types.
            free = self.status.slots - len(self.running) - len(self.breakers.reporting)
            if free <= 0:
                self._slot_freed.clear()
                await self._slot_freed.wait()
                continue
            if self._acks_full():
                await self._wait_for_acks()
                continue
            self._wake.clear()
            try:
                async with self._claiming:
                    if self._claim_uncertain:
                        await self.claimer.reconcile(self.attempts.held)
                        self._claim_uncertain = False
                    jobs = await self.breakers.probe(self.paused.claimable(), free, self.claimer.claim_probe)
                    if len(jobs) < free:
                        jobs += await self.claimer.claim(
                            self.paused.claimable(), free - len(jobs), self.breakers.blocked
                        )
                    for job in jobs:
                        self.slots.start(job)
                backoff = 0.1
            except NotMigrated:
                raise  # a bad configuration: restarting cannot help, the operator must migrate
            except Exception as exc:  # an outage, a statement the server refused, a lost reply
                self._claim_uncertain = True
                self._late_commits_until = time.monotonic() + (self.database.statement_timeout or LATE_COMMIT_WINDOW)
                if isinstance(exc, DatabaseUnavailable):
                    log.warning("claim failed (%s); retrying in %.1fs", exc, backoff)
                else:
                    log.exception("claim failed; retrying in %.1fs", backoff)
                await self.idle.sleep(backoff)
                backoff = min(backoff * 2, self.settings.poll_interval)
                continue
            if len(jobs) < free:
                await self.idle.wait()

    async def _reconcile_late_claims(self) -> None:
        """A claim whose reply was lost may commit after the reconcile that followed it (through
        PgBouncer, the statement runs on while the client's connection is gone): for as long as it
        could still be running (the statement timeout), reconcile again every heartbeat interval,
        so that its rows go back uncounted before their lease (three intervals) runs out."""
        while True:
            await asyncio.sleep(self.heartbeat.interval)
            if time.monotonic() >= self._late_commits_until:
                continue
            try:
                async with self._claiming:
                    await self.claimer.reconcile(self.attempts.held)
            except (DatabaseUnavailable, NotMigrated) as exc:
                log.warning("reconciling after a lost claim reply failed (%s); trying again", exc)
            except Exception:
                log.exception("reconciling after a lost claim reply failed; trying again")

    async def _wait_for_acks(self) -> None:
        """Too many finished outcomes are not written yet: claim again once some are. A fast
        drain touches the bound now and then (finished jobs pile up while an ack statement is in
        flight), which is the bound doing its job; only a wait of seconds means the acks fail."""
        waiting_since = time.monotonic()
        warned = False
        while self._acks_full() and not self.stopping:
            self.acks.flushed.clear()
            try:
                await asyncio.wait_for(self.acks.flushed.wait(), timeout=1.0)
            except asyncio.TimeoutError:
                pass
            if not warned and time.monotonic() - waiting_since > 2.0:
                log.warning(
                    "%d finished jobs (%d bytes of results and errors) wait for their acks to be written; "
                    "not claiming until they are",
                    self.acks.backlog,
                    self.acks.backlog_bytes,
                )
                warned = True

    def _acks_full(self) -> bool:
        """Too many outcomes, or too many bytes of them, wait to be written (max_unacked, _bytes)."""
        return (
            self.acks.backlog >= self.settings.unacked_bound
            or self.acks.backlog_bytes >= self.settings.max_unacked_bytes
        )

    # --- shutdown -------------------------------------------------------------------------------

    async def _shutdown(self) -> None:
        grace = self.settings.shutdown_grace
        if self.running:
            log.info("stopping: waiting up to %.1fs for %d running jobs", grace, len(self.running))
            tasks = [task for _, task in self.running.values()]
            await asyncio.wait(tasks, timeout=grace)
        leftover = list(self.running.items())
        if leftover:
            attempts = [attempt for attempt, _ in leftover]
            self.slots.release(attempts)
            try:
                async with db.connection(self.pool, timeout=db.SHUTDOWN_WAIT) as conn:
                    released = await db.run(conn, job_store.release_many(worker_id=self.worker_id, attempts=attempts))
                log.info("released %s unfinished jobs back to the queue", released)
            except DatabaseUnavailable as exc:
                log.warning("could not release jobs (%s); the sweeper will reclaim them when their lease ends", exc)
        # Buffered acks flush in milliseconds when the database is there; when it is not, a few
        # seconds of retries is all the stop can afford on top of the grace period it already spent.
        if not await self.acks.drain(timeout=ACK_DRAIN_SECONDS):
            log.warning("some acks were not written; those jobs will be retried after their lease")
        await self.stats.close()
        if self.tracing is not None:
            self.tracing.force_flush()
        try:
            async with db.connection(self.pool, timeout=db.SHUTDOWN_WAIT) as conn:
                await db.run(conn, worker_store.deregister(worker_id=self.worker_id))
        except DatabaseUnavailable:
            pass
