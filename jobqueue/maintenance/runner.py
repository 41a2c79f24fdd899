"""Runs the elector and every maintenance service together, in a worker process or alone.

`jobqueue-worker` runs this beside its claim loop by default (`JOBQUEUE_MAINTENANCE=0` turns it
off); `jobqueue maintenance` runs it on its own. Whichever processes run it, one leads, and only
the leader's services work: the scheduler (cron), the pruner (retention), the reaper (lost workers),
the gatekeeper (the enqueue gates of full queues, for SQL producers too),
the historian (the dashboard's per-minute throughput), the vacuumer (the job table's dead rows, when autovacuum lags)
and the reindexer (its bloated
indexes). The sweeper (expired leases) runs in every such
process, so recovery never waits for an election. Becoming leader wakes them all at once; a
``jobqueue_schedules`` NOTIFY wakes the scheduler. Any login may send those two notifications,
as often as it likes: each wakes the elector or the scheduler at most once per
`MAINTENANCE_HINT_GAP` (the first of a quiet period at once), so a flood costs an election, a
write, twice a second at most.

Their pool (``jobqueue-maintenance <id>`` in ``pg_stat_activity``) checks each connection as it
hands it out: after a PostgreSQL restart every idle connection in it is dead, and without the
check each would cost a service one cycle (a leader not elected for a TTL). Services run every
few seconds at most, so the round trip is nothing; the worker's claim/ack pool has no check.
"""

from __future__ import annotations

import asyncio

from jobqueue.config import BackpressureSettings, DbSettings, MaintenanceSettings, Settings
from jobqueue.db import gateway as db
from jobqueue.events import channels
from jobqueue.events.notifier import Coalescer, Notifier
from jobqueue.maintenance.base import Service
from jobqueue.maintenance.elector import Elector
from jobqueue.maintenance.gatekeeper import Gatekeeper, GatekeeperOptions
from jobqueue.maintenance.historian import Historian, HistorianOptions
from jobqueue.maintenance.pruner import DAY, Pruner, PrunerOptions
from jobqueue.maintenance.reaper import Reaper, ReaperOptions
from jobqueue.maintenance.reindexer import Reindexer, ReindexerOptions
from jobqueue.maintenance.scheduler import Scheduler, SchedulerOptions
from jobqueue.maintenance.sweeper import Sweeper, SweeperOptions
from jobqueue.maintenance.vacuumer import Vacuumer, VacuumerOptions
from jobqueue.runtime.clock import Clock

#: a jobqueue_leader or jobqueue_schedules NOTIFY wakes the elector or the scheduler at once,
#: MAINTENANCE_HINT_BURST times, then at most once per MAINTENANCE_HINT_GAP seconds
MAINTENANCE_HINT_GAP = 0.5
MAINTENANCE_HINT_BURST = 4


class Maintenance:
    def __init__(
        self,
        settings: MaintenanceSettings,
        database: DbSettings,
        notifier: Notifier,
        leader_id: str,
        *,
        lease_seconds: float,
        poll_interval: float,
        backpressure: BackpressureSettings,
        stale_seconds: float,
        clock: Clock | None = None,
    ) -> None:
        """Besides its own section and the connections': the workers' lease (the sweeper waits it out
        after an outage) and poll interval (the scheduler's, without LISTEN), the depth limits (the
        gatekeeper) and how long a silent worker still serves its queues."""
        name = db.maintenance_name(leader_id)
        self.pool = db.async_pool(database.dsn, min_size=1, max_size=3, name=name, settings=database, check=True)
        self.elector = Elector(self.pool, leader_id, ttl=settings.leader_ttl)
        self.scheduler = Scheduler(
            self.pool,
            SchedulerOptions(misfire_grace=settings.misfire_grace, interval=60.0 if database.listen else poll_interval),
            fired_by=leader_id,
            clock=clock,
        )
        self.services: list[Service] = [
            Sweeper(self.pool, SweeperOptions(interval=settings.sweep_interval, lease_seconds=lease_seconds)),
            self.scheduler,
            Pruner(
                self.pool,
                PrunerOptions(
                    interval=settings.prune_interval,
                    retention={
                        "completed": settings.retention_completed_days * DAY,
                        "cancelled": settings.retention_cancelled_days * DAY,
                        "dead_letter": settings.retention_dead_letter_days * DAY,
                    },
                    audit_log=settings.retention_audit_days * DAY,
                ),
                clock=clock,
            ),
            Reaper(self.pool, ReaperOptions(interval=settings.sweep_interval), clock=clock),
            Gatekeeper(
                self.pool,
                GatekeeperOptions(
                    interval=backpressure.depth_refresh,
                    max_age=backpressure.depth_max_age,
                    hard_limit=backpressure.hard_limit,
                    total_hard_limit=backpressure.total_hard_limit,
                    max_queues=backpressure.max_queues,
                    stale_seconds=stale_seconds,
                ),
                clock=clock,
            ),
        ]
        if settings.history_interval > 0:
            self.services.append(
                Historian(self.pool, HistorianOptions(interval=settings.history_interval), clock=clock)
            )
        direct = db.Session.of(database, name, direct=True)  # VACUUM and REINDEX: long, session-bound
        if settings.vacuum_interval > 0:
            self.services.append(
                Vacuumer(
                    self.pool,
                    direct,
                    VacuumerOptions(
                        interval=settings.vacuum_interval,
                        min_dead=settings.vacuum_min_dead,
                        max_xact_age=settings.max_xact_age,
                    ),
                    clock=clock,
                )
            )
        if settings.reindex_interval > 0:
            self.services.append(
                Reindexer(
                    direct,
                    ReindexerOptions(
                        interval=settings.reindex_interval,
                        factor=settings.reindex_factor,
                        min_waste_mb=settings.reindex_min_waste_mb,
                        max_xact_age=settings.max_xact_age,
                    ),
                    clock=clock,
                )
            )
        notifier.subscribe(
            channels.LEADER,
            Coalescer(
                MAINTENANCE_HINT_GAP, self.elector.on_leader_notification, by_payload=True, burst=MAINTENANCE_HINT_BURST
            ),
        )
        notifier.subscribe(
            channels.SCHEDULES,
            Coalescer(MAINTENANCE_HINT_GAP, lambda _name: self.scheduler.wake(), burst=MAINTENANCE_HINT_BURST),
        )
        self.elector.on_change(self._wake_services)

    @classmethod
    def of(cls, settings: Settings, notifier: Notifier, leader_id: str, *, clock: Clock | None = None) -> "Maintenance":
        """The sections and values it reads, taken from ``settings``."""
        return cls(
            settings.maintenance,
            settings.db,
            notifier,
            leader_id,
            lease_seconds=settings.worker.lease_seconds,
            poll_interval=settings.worker.poll_interval,
            backpressure=settings.backpressure,
            stale_seconds=settings.metrics.worker_stale_seconds,
            clock=clock,
        )

    def _wake_services(self, _leading: bool) -> None:
        for service in self.services:
            service.wake()

    async def run(self) -> None:
        await self.pool.open(wait=False)
        tasks = [asyncio.create_task(self.elector.run(), name="elector")]
        tasks += [asyncio.create_task(s.run(lambda: self.elector.is_leader), name=s.name) for s in self.services]
        try:
            await asyncio.gather(*tasks)
        finally:
            await _to_the_end(self._stop(tasks))

    async def _stop(self, tasks: list[asyncio.Task]) -> None:
        for task in tasks:
            task.cancel()
        try:
            # bounded too: a service stuck in a cancel it swallowed must not hold the shielded cleanup
            done, _ = await asyncio.wait(tasks, timeout=db.SHUTDOWN_WAIT)
            for task in done:
                if not task.cancelled():
                    task.exception()  # retrieved: what it ended with was logged by the service loop
            await self.elector.resign()
        finally:
            await self.pool.close()


async def _to_the_end(cleanup) -> None:
    """Run ``cleanup`` to its end even when the caller is cancelled meanwhile, then re-raise the cancel.

    A service that fails (a role refused its table) ends `Maintenance.run` while the worker may be
    failing too; the worker then cancels maintenance in the middle of this cleanup. Interrupted, the
    pool was never closed: its connection workers outlived the loop, and `asyncio.run`'s final
    cancel hit one while it was connecting — psycopg_pool swallows that cancel and waits on its
    queue for ever, so the process hung at exit, deaf to SIGTERM. Every step here is bounded
    (`db.SHUTDOWN_WAIT`, the pool's close timeout)."""
    task = asyncio.ensure_future(cleanup)
    cancelled: asyncio.CancelledError | None = None
    while not task.done():
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError as exc:
            if task.done():  # the cleanup itself was cancelled, not us
                raise
            cancelled = exc
    if cancelled is not None:
        raise cancelled
    task.result()


async def run_standalone(settings: Settings) -> None:
    """`jobqueue maintenance`: the services without a claim loop, until SIGTERM/SIGINT."""
    import os
    import signal
    import socket

    leader_id = f"{socket.gethostname()}:{os.getpid()}:maintenance"
    notifier = Notifier(db.Session.of(settings.db, db.maintenance_name(leader_id), direct=True).conninfo())
    maintenance = Maintenance.of(settings, notifier, leader_id)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    tasks = [asyncio.create_task(maintenance.run())]
    if settings.db.listen:
        tasks.append(asyncio.create_task(notifier.run()))
    await stop.wait()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
