"""The claim loop: one `Worker` per process claims jobs in batches and runs them concurrently.

How a worker spends its time:
- It claims no more jobs than it has free slots (`slots` minus running; `slots` is the concurrency,
  or with --concurrency MIN:MAX the target `worker.scaling.SlotScaler` sets), in one statement
  (`FOR UPDATE SKIP LOCKED`, priority then submission order), and sets a lease on each.
- Each job runs as an asyncio task (sync handlers in a thread pool); outcomes go to the batched
  `AckBuffer`; the slot is free as soon as the handler returns.
- It never claims from a paused queue (`jobqueue.queue_settings`): the paused set is read at
  start, on every ``jobqueue_control`` NOTIFY (sent when a queue is paused or resumed), every
  heartbeat interval, and — while no NOTIFY can reach it (poll-only mode, LISTEN down) — before
  each idle sleep and every ``PAUSED_POLL`` seconds.
- It never claims job types of an open circuit breaker (`Breakers.blocked`, kept fresh by the
  ``jobqueue_circuits`` NOTIFY); when a breaker's probe is due it claims that one job first, and it
  reports each breaker job's outcome to the breaker before the job's ack.
- It never starts more jobs than a global limit allows (`jobqueue.limits`, per job type or queue,
  across all workers): while one applies to its queues, each claim goes through the limits
  (`LimitWatch.active`, kept fresh by the ``jobqueue_limits`` NOTIFY; `Claimer.claim_limited`),
  and it looks again when a spent limit may have room (``Claimer.recheck_in``) or an ack of one of
  its limited jobs is written.
- With nothing to claim it sleeps until a NOTIFY for one of its queues, the earliest future
  `run_at` among them, or the poll interval (the fallback when LISTEN is unavailable).
- Notifications are hints (any login may send any of them): a ``jobqueue_cancel`` one makes it
  re-read the job's ``cancel_requested`` flag, never set it; wake-ups are coalesced per queue
  (`WAKE_GAP`: the first of a quiet period wakes it at once) and the re-reads a control channel
  asks for run at most once per `CONTROL_GAP`, so a flood of forged ones costs next to nothing.
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
  and an attempt on its way from the running set to the acks is held (``_finishing``). Any other
  claim error is logged and retried with backoff; only a missing schema ends the worker.
- Sync handlers past their deadline keep their thread; an async handler still running past its
  deadline and half the lease's grace swallowed its cancellation and is treated the same (its slot
  freed, its attempt failed as a timeout, counted stuck). When `HandlerThreads.starving`, the
  worker stops claiming and stops with `restart_requested` set, so its process is started afresh.
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

from jobqueue.app import JobQueue, TaskDef
from jobqueue.config import Settings
from jobqueue.db import gateway as db
from jobqueue.events import channels
from jobqueue.events.notifier import Coalescer, Notifier, Throttled
from jobqueue.model.errors import DatabaseUnavailable, NotMigrated
from jobqueue.model.jobs import Job
from jobqueue.observability import tracing
from jobqueue.runtime.background import watch
from jobqueue.store import jobs as job_store
from jobqueue.store import queues as queue_store
from jobqueue.store import schedules as schedule_store
from jobqueue.store import workers as worker_store
from jobqueue.store.jobs import Attempt, Deadlines
from jobqueue.worker.acks import AckBuffer
from jobqueue.worker.circuits import Breakers
from jobqueue.worker.claimer import Claimer
from jobqueue.worker.deadlines import DeadlineWatch
from jobqueue.worker.executor import CANCELLED, COMPLETED, RETRY, Outcome, attempt_timeout, execute, overdue_outcome
from jobqueue.worker.heartbeat import Heartbeat
from jobqueue.worker.limits import LimitWatch
from jobqueue.worker.metrics_server import MetricsServer
from jobqueue.worker.scaling import SlotScaler
from jobqueue.worker.spans import traced
from jobqueue.worker.stats import WorkerStats
from jobqueue.worker.threads import HandlerThreads

ACK_DRAIN_SECONDS = 5.0

log = logging.getLogger("jobqueue.worker")


def new_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


#: Seconds between re-reads of the paused queues while no NOTIFY can tell of a pause (poll-only
#: mode, or LISTEN down): a busy worker never idles, where it also re-reads them.
PAUSED_POLL = 0.5

#: Seconds a claim whose reply was lost may still commit, when no statement timeout bounds it.
LATE_COMMIT_WINDOW = 300.0

#: How long after a retry it scheduled falls due (by its estimate) an idle worker keeps claiming
#: every RETRY_WAKE_POLL seconds, until the ack's run_at has surely passed (see `_idle_wait`).
RETRY_WAKE_GRACE = 0.5
RETRY_WAKE_POLL = 0.02

#: A ``jobqueue_jobs`` NOTIFY for a queue wakes an idle worker at once, unless one for that queue
#: did within the last WAKE_GAP seconds: then it wakes it once at the end of that gap.
WAKE_GAP = 0.02
#: The paused queues, circuit breakers and limits are re-read on their channels' notifications:
#: CONTROL_BURST times at once, then at most once per CONTROL_GAP seconds. Real changes come in
#: small bursts (a worker's start declares its breakers, then one opens), which must not wait.
CONTROL_GAP = 0.25
CONTROL_BURST = 4
#: Running jobs named by ``jobqueue_cancel`` NOTIFYs are checked in the database at most once per
#: CANCEL_GAP seconds (the first at once); the heartbeat delivers the flag anyway.
CANCEL_GAP = 0.05
#: Job ids from cancel notifications waiting for that check; more are dropped (hints only).
MAX_CANCEL_HINTS = 10_000


class Worker:
    def __init__(self, app: JobQueue, settings: Settings, *, worker_id: str | None = None,
                 notifier: Notifier) -> None:
        app.check_keys(settings.encryption_keys)  # a task that encrypts, and no keys: refuse to start
        self.app = app
        self.settings = settings
        self.worker_id = worker_id or new_worker_id()
        self.queues = list(settings.queues)
        self.concurrency = settings.concurrency
        self.slots = settings.concurrency_min if settings.autoscaling else settings.concurrency  # what the claim loop fills
        self.pool = db.async_pool(settings.dsn, min_size=2, max_size=4, name=db.worker_name(self.worker_id),
                                  settings=settings)
        self.notifier = notifier  # run by WorkerProcess, which shares it with maintenance
        self._wake = asyncio.Event()
        self.acks = AckBuffer(self.pool, self.worker_id, batch_size=settings.ack_batch_size,
                              flush_interval=settings.ack_flush_interval, on_flushed=self._acked,
                              default_limits=(settings.api_soft_limit, settings.api_hard_limit))
        self.threads = HandlerThreads(self.concurrency, settings.stuck_handler_bound)
        self.heartbeat = Heartbeat(
            self.pool, self.worker_id, settings.lease_seconds,
            held=self._held, on_cancel_requested=self._mark_cancel_requested,
            on_lease_lost=self._lease_lost, counters=lambda: (self.processed, self.failed),
            status=lambda: "stopping" if self._stopping.is_set() else "running",
            stuck_handlers=lambda: self.threads.stuck)
        # Half of what the lease may outlive the deadline: the worker's own JobTimeout for an async
        # handler that swallowed its cancellation is written before the sweeper's would be.
        self.deadline_watch = DeadlineWatch(grace=self.heartbeat.deadline_grace / 2, on_overdue=self._overdue)
        self.limits = LimitWatch(self.pool, app, self.queues, interval=self.heartbeat.interval,
                                 on_read=self._wake.set)
        self.claimer = Claimer(self.pool, self.worker_id, settings, Deadlines(
            timeouts_json=json.dumps({name: task.timeout for name, task in app.tasks.items() if task.timeout}),
            default=settings.processing_ttl, grace=self.heartbeat.deadline_grace), limits=self.limits,
            served=list(app.tasks))
        self.breakers = Breakers(self.pool, app, interval=self.heartbeat.interval,
                                 retry_probe_after=settings.poll_interval, on_unblocked=self._wake.set)
        self.running: dict[Attempt, tuple[Job, asyncio.Task]] = {}
        self.stats = WorkerStats(self.pool, self.worker_id, self.concurrency, interval=settings.stats_interval,
                                 occupancy=lambda: len(self.running))
        self.scaler = SlotScaler(self.pool, self.worker_id, settings, queues=self._claimable, stats=self.stats,
                                 resize=self._resize) if settings.autoscaling else None
        self.tracing = tracing.from_env(service_name="jobqueue-worker")
        self.processed = 0
        self.failed = 0
        #: set when stuck handlers would starve this worker: its process should be started afresh
        self.restart_requested = False
        self._claim_uncertain = False  # the last claim failed in a way that may have committed
        self._late_commits_until = 0.0  # a lost claim may commit until then: reconcile every heartbeat interval
        self._claiming = asyncio.Lock()  # a claim and the start of its jobs, or a reconcile: never both at once
        self._finishing: set[Attempt] = set()  # out of the running set, not in the acks yet
        self._slot_freed = asyncio.Event()
        self._stopping = asyncio.Event()
        self._released: set[Attempt] = set()
        self._abandoned: set[Attempt] = set()  # failed as overdue while their handler runs on
        self._overdue_acks: set[asyncio.Task] = set()
        self._next_wake_at: float | None = None
        self._paused: set[str] = set()
        self._paused_refresh = Throttled(self._refresh_paused, gap=CONTROL_GAP, burst=CONTROL_BURST,
                                         name="paused-queues")
        self._wake_for = Coalescer(WAKE_GAP, lambda _queue: self._wake.set(), by_payload=True)
        self._cancel_hints: set[uuid.UUID] = set()
        self._cancel_check = Throttled(self._check_cancel_hints, gap=CANCEL_GAP, name="cancel-check")
        self.started = asyncio.Event()
        # Subscribe before anything runs: the notifier LISTENs to the channels known when it connects.
        self.notifier.subscribe(channels.JOBS, self._on_jobs_notification)
        self.notifier.subscribe(channels.CANCEL, self._on_cancel_notification)
        self.notifier.subscribe(channels.CONTROL, self._on_control_notification)
        self.notifier.subscribe(channels.CIRCUITS, Coalescer(CONTROL_GAP, self.breakers.request_refresh, burst=CONTROL_BURST))
        self.notifier.subscribe(channels.LIMITS, Coalescer(CONTROL_GAP, self.limits.request_refresh, burst=CONTROL_BURST))
        self.notifier.on_reconnect(self._on_reconnect)

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
        self._stopping.set()
        self._wake.set()
        self._slot_freed.set()

    def _resize(self, slots: int) -> None:
        self.slots = slots
        self._slot_freed.set()  # a claim loop waiting for a free slot looks again

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    # --- notifications ----------------------------------------------------------------------

    def _on_jobs_notification(self, queue: str) -> None:
        if queue in self.queues and queue not in self._paused:
            self._wake_for(queue)

    def _on_reconnect(self) -> None:
        """Notifications sent while LISTEN was down are lost: re-read what they would have said."""
        self._wake.set()
        self._paused_refresh.request()
        self.breakers.request_refresh()
        self.limits.request_refresh()
        self._cancel_hints.update(job.id for job, _ in self.running.values())  # a cancel NOTIFY missed?
        self._cancel_check.request()

    def _on_control_notification(self, _payload: str) -> None:
        self._paused_refresh.request()

    async def _refresh_paused(self) -> None:
        try:
            async with db.connection(self.pool) as conn:
                paused = await db.run(conn, queue_store.paused_among(self.queues))
        except (DatabaseUnavailable, NotMigrated):
            return  # keep the last known set; the next idle wait tries again
        except Exception:
            log.exception("reading the paused queues failed; keeping the last known set")
            return
        if paused != self._paused:
            log.info("paused queues: %s", ", ".join(sorted(paused)) or "none")
            resumed = bool(self._paused - paused)
            self._paused = paused
            if resumed:
                self._wake.set()

    async def _reread_paused(self) -> None:
        """The paused set, re-read on a timer as well (as the breakers and limits are): every
        heartbeat interval while LISTEN is up, to correct a notification whose read failed, and
        every PAUSED_POLL seconds while it is not — a busy poll-only worker never idles, and kept
        claiming a paused queue until its backlog was gone."""
        while True:
            listening = self.settings.listen and self.notifier.connected.is_set()
            await asyncio.sleep(self.heartbeat.interval if listening else PAUSED_POLL)
            await self._refresh_paused()

    def _claimable(self) -> list[str]:
        return [queue for queue in self.queues if queue not in self._paused] if self._paused else self.queues

    def _on_cancel_notification(self, payload: str) -> None:
        """Someone says a job was asked to stop: look at its row (soon, and once for many such
        notifications); only the row's ``cancel_requested`` reaches the handler."""
        try:
            job_id = uuid.UUID(payload)
        except ValueError:
            return
        if len(self._cancel_hints) < MAX_CANCEL_HINTS:
            self._cancel_hints.add(job_id)
            self._cancel_check.request()

    async def _check_cancel_hints(self) -> None:
        hints, self._cancel_hints = self._cancel_hints, set()
        named = hints.intersection(job.id for job, _ in self.running.values() if not job.cancel_requested)
        if not named:
            return  # ids of jobs this worker does not run (or knows to be cancelled): nothing to read
        try:
            async with db.connection(self.pool) as conn:
                requested = await db.run(conn, job_store.cancel_requested_among(sorted(named)))
        except DatabaseUnavailable as exc:
            log.warning("checking cancel requests failed (%s); the heartbeat delivers them", exc)
            return
        for job_id in requested:
            self._mark_cancel_requested(job_id)

    def _mark_cancel_requested(self, job_id: uuid.UUID) -> None:
        for job, _ in self.running.values():
            if job.id == job_id:
                job.cancel_requested = True

    def _lease_lost(self, attempt: Attempt) -> None:
        if attempt in self.running:
            log.warning("job %s attempt %d: lease lost (reclaimed by the sweeper); its outcome is written only if "
                        "no newer attempt has started by then", *attempt)

    def _held(self) -> list[Attempt]:
        return (list(self.running) + list(self._finishing) + list(self.breakers.reporting)
                + self.acks.pending_attempts())

    def _acked(self, batch: list[Outcome], accepted: set[uuid.UUID]) -> None:
        limited = self.claimer.limited_attempts
        if limited and any(outcome.job.key in limited for outcome in batch):
            limited.difference_update(outcome.job.key for outcome in batch)
            self._wake.set()  # a limit's slot is free again: claim, if there is room
        if len(accepted) == len(batch):  # every outcome written (the usual case): nothing to log
            return
        for outcome in batch:
            if outcome.job.id not in accepted:
                log.info("job %s attempt %d: outcome refused (a newer attempt started, or the job was finished "
                         "otherwise)", *outcome.job.key)

    # --- main loop ----------------------------------------------------------------------------

    async def run(self) -> None:
        await self.pool.open(wait=True, timeout=30)
        jobs = [(self.acks.run(), "acks"), (self.heartbeat.run(), "heartbeat"), (self.stats.run(), "stats"),
                (self.deadline_watch.run(), "deadlines"), (self.breakers.run(), "circuits"),
                (self.limits.run(), "limits"), (self._reread_paused(), "paused"),
                (self._reconcile_late_claims(), "reconcile")]
        if self.scaler is not None:
            jobs.append((self.scaler.run(), "autoscale"))
        if self.settings.worker_metrics_port:
            server = MetricsServer(self.stats, port=self.settings.worker_metrics_port, running=lambda: len(self.running),
                                   stuck_handlers=lambda: self.threads.stuck, concurrency=self.concurrency,
                                   slots=lambda: self.slots)
            jobs.append((server.run(), "metrics-server"))
        background = [watch(asyncio.create_task(job, name=name), self.request_stop) for job, name in jobs]
        try:
            await self._register()
            await self._refresh_paused()
            await self.breakers.refresh()
            await self.limits.refresh()
            if self.settings.listen:
                await self._wait_for_listen()
            else:
                log.info("poll-only mode (JOBQUEUE_LISTEN=0): checking for work every %.1fs", self.settings.poll_interval)
            self.started.set()
            log.info("worker %s started: queues=%s concurrency=%s", self.worker_id, self.queues,
                     f"{self.settings.concurrency_min}:{self.concurrency}" if self.scaler else self.concurrency)
            await self._claim_loop()
            await self._shutdown()
        finally:
            for task in background:
                task.cancel()
            self._paused_refresh.cancel()
            self._cancel_check.cancel()
            await asyncio.gather(*background, return_exceptions=True)
            await self.pool.close()

    async def _wait_for_listen(self) -> None:
        """LISTEN speeds pick-up up but is never required: without it the worker polls."""
        try:
            await asyncio.wait_for(self.notifier.connected.wait(), timeout=10)
        except asyncio.TimeoutError:
            log.warning("LISTEN connection not up after 10 s; polling every %.1fs until it is",
                        self.settings.poll_interval)

    async def _register(self) -> None:
        async with db.connection(self.pool) as conn:
            await db.run(conn, worker_store.register(
                worker_id=self.worker_id, host=socket.gethostname(), pid=os.getpid(),
                queues=self.queues, concurrency=self.concurrency, heartbeat_interval=self.heartbeat.interval,
                concurrency_min=self.settings.concurrency_min or None, concurrency_target=self.slots if self.scaler else None,
                job_types=list(self.app.tasks), app=self.app.name))
            if self.app.tasks:
                await db.run(conn, worker_store.sync_task_defaults(
                    self.app.max_attempts_by_type(), self.app.encrypted_fields_by_type()))
                await self.breakers.declare(conn, self.app.name)
            await self.limits.declare(conn, self.app.name)
            if self.app.schedules:  # @queue.periodic: create or redefine their rows
                await db.run(conn, schedule_store.sync(list(self.app.schedules.values()),
                                                       now=datetime.now(timezone.utc)))

    async def _claim_loop(self) -> None:
        backoff = 0.1
        while not self.stopping:
            # An outcome being reported to its breaker still holds its slot: the report may open the
            # breaker, and the next claim must know before it picks another job of its types.
            free = self.slots - len(self.running) - len(self.breakers.reporting)
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
                        await self.claimer.reconcile(self._held)
                        self._claim_uncertain = False
                    jobs = await self.breakers.probe(self._claimable(), free, self.claimer.claim_probe)
                    if len(jobs) < free:
                        jobs += await self.claimer.claim(self._claimable(), free - len(jobs), self.breakers.blocked)
                    for job in jobs:
                        self._start(job)
                backoff = 0.1
            except NotMigrated:
                raise  # a bad configuration: restarting cannot help, the operator must migrate
            except Exception as exc:  # an outage, a statement the server refused, a lost reply
                self._claim_uncertain = True
                self._late_commits_until = time.monotonic() + (self.settings.statement_timeout or LATE_COMMIT_WINDOW)
                if isinstance(exc, DatabaseUnavailable):
                    log.warning("claim failed (%s); retrying in %.1fs", exc, backoff)
                else:
                    log.exception("claim failed; retrying in %.1fs", backoff)
                await self._sleep(backoff)
                backoff = min(backoff * 2, self.settings.poll_interval)
                continue
            if len(jobs) < free:
                await self._idle_wait()

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
                    await self.claimer.reconcile(self._held)
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
                log.warning("%d finished jobs (%d bytes of results and errors) wait for their acks to be written; "
                            "not claiming until they are", self.acks.backlog, self.acks.backlog_bytes)
                warned = True

    def _acks_full(self) -> bool:
        """Too many outcomes, or too many bytes of them, wait to be written (max_unacked, _bytes)."""
        return (self.acks.backlog >= self.settings.unacked_bound
                or self.acks.backlog_bytes >= self.settings.max_unacked_bytes)

    async def _idle_wait(self) -> None:
        """Sleep until a NOTIFY, the earliest scheduled job, or the poll interval, whichever is first."""
        timeout = self.settings.poll_interval
        if not (self.settings.listen and self.notifier.connected.is_set()):
            await self._refresh_paused()  # no jobqueue_control NOTIFY can reach us: look it up
            await self.breakers.refresh()  # nor a jobqueue_circuits one
            await self.limits.refresh()  # nor a jobqueue_limits one
        try:
            async with db.connection(self.pool) as conn:
                next_run_in = await db.run(conn, job_store.next_run_in(
                    queues=self._claimable(), since=time.monotonic() - self.claimer.last_claim_at + 0.001))
        except DatabaseUnavailable:
            next_run_in = None
        except Exception:
            log.exception("looking up the next scheduled job failed; polling instead")
            next_run_in = None
        if next_run_in is not None:  # the server's clock says: this host's may be off
            timeout = min(timeout, max(next_run_in, 0.0) + 0.001)
        if self.claimer.recheck_in is not None:  # a spent limit may have room by then
            timeout = min(timeout, self.claimer.recheck_in)
        probe_in = self.breakers.next_probe_in()
        if probe_in is not None:  # a circuit breaker's probe falls due
            timeout = min(timeout, probe_in + 0.001)
        if self._next_wake_at is not None:  # a retry this worker scheduled itself
            remaining = self._next_wake_at - time.monotonic()
            if remaining > 0:
                timeout = min(timeout, remaining)
            elif self.acks.queued:  # due, but its ack (which sets its run_at) is not written yet
                timeout = min(timeout, 0.01)
            elif -remaining < RETRY_WAKE_GRACE:
                # Due by this worker's estimate; its run_at counts from when the ack was written, a
                # little later, so the claim just made may have come a few ms early. next_run_at cannot
                # be trusted with it: its bound, "after the last claim began", is that claim's start on
                # this host's clock carried to the server's, off by the queries' latency; a run_at that
                # close to the claim was missed under load until the next poll (CI: 30 s).
                timeout = min(timeout, RETRY_WAKE_POLL)
            else:
                self._next_wake_at = None
        await self._sleep(timeout)

    async def _sleep(self, timeout: float) -> None:
        try:
            await asyncio.wait_for(self._wake.wait(), timeout)
        except asyncio.TimeoutError:
            pass

    def _start(self, job: Job) -> None:
        handler = self.app.tasks.get(job.job_type)  # None never, as claims take only the app's types
        task = asyncio.create_task(self._run_job(job, handler))
        self.deadline_watch.watch(task, attempt_timeout(job, handler))
        self.running[job.key] = (job, task)

    async def _run_job(self, job: Job, task: TaskDef | None) -> None:
        # Taken now: a task still pending when its loop closes is finished by the garbage collector,
        # outside any loop, where asyncio.current_task() raises (and fails whatever runs then).
        this_task = asyncio.current_task()
        try:
            outcome = await traced(self.tracing, job, execute(
                job, task, self.threads, self.deadline_watch, max_result_bytes=self.settings.max_result_bytes,
                keys=self.settings.encryption_keys))
        except asyncio.CancelledError:
            return  # released at shutdown: the job went back to pending, nothing to ack
        except Exception as exc:  # defensive: execute() classifies handler errors itself
            log.exception("job %s: executor failed", job.id)
            outcome = Outcome(job=job, kind="retry", duration_ms=0.0, retry_in=1.0,
                              error_type=type(exc).__qualname__, message=str(exc))
        finally:
            self.running.pop(job.key, None)
            self.deadline_watch.forget(this_task)  # type: ignore[arg-type]  # always set: we run in a task
            self._slot_freed.set()
            overdue = job.key in self._abandoned  # it ended at last: its attempt was failed already
            self._abandoned.discard(job.key)
        if job.key in self._released or overdue:
            return
        self._finishing.add(job.key)
        await self._finish(job, task, outcome)

    def _overdue(self, running: asyncio.Task) -> None:
        """An async handler still runs past its deadline and the grace: it swallowed its
        cancellation. Treated like a sync handler's stuck thread: its slot is free, its attempt
        fails as a JobTimeout now (not when the sweeper finds its lease run out), it is cancelled
        once more and counted stuck until it returns, and a worker whose stuck handlers reach the
        bound restarts."""
        attempt = next((key for key, (_, task) in self.running.items() if task is running), None)
        if attempt is None:
            return
        job, _ = self.running.pop(attempt)
        self._abandoned.add(attempt)
        self._slot_freed.set()
        running.cancel()
        self.threads.mark_stuck(running)
        log.error("job %s attempt %d: its handler ignored the cancellation at its deadline and still runs; the "
                  "attempt fails as a timeout and the handler counts as stuck", *attempt)
        task = self.app.tasks.get(job.job_type)
        self._finishing.add(attempt)
        ack = asyncio.create_task(self._finish(job, task, overdue_outcome(job, task, self.deadline_watch.grace)))
        self._overdue_acks.add(ack)
        ack.add_done_callback(self._overdue_acks.discard)

    async def _finish(self, job: Job, task: TaskDef | None, outcome: Outcome) -> None:
        """Report the outcome to the breakers, count it, hand it to the acks; the attempt is in
        ``_finishing`` until then (still held: heartbeats renew it, a reconcile keeps it)."""
        try:
            await self.breakers.report(job, task, outcome)
        except BaseException:
            self._finishing.discard(job.key)
            raise
        finally:
            self._slot_freed.set()  # a report held the slot (see _claim_loop)
        # The registry's counts mean what /metrics' do (WorkerStats): every finished attempt is
        # processed; failed ones exclude an honoured cancel request.
        self.processed += 1
        if outcome.kind not in (COMPLETED, CANCELLED):
            self.failed += 1
            if outcome.kind == RETRY:
                wake_at = time.monotonic() + outcome.retry_in
                if self._next_wake_at is None or wake_at < self._next_wake_at:
                    self._next_wake_at = wake_at
                    self._wake.set()
        self.stats.record(outcome)
        self.acks.add(outcome)
        self._finishing.discard(job.key)
        if self.threads.starving and not self.restart_requested:
            log.error("%d sync handlers are stuck past their deadline, or async ones ignoring their cancellation "
                      "(limit %d): this worker stops claiming and restarts its process to get them back",
                      self.threads.stuck, self.threads.max_stuck)
            self.request_restart()

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
            self._released.update(attempts)
            for _, (_, task) in leftover:
                task.cancel()
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
