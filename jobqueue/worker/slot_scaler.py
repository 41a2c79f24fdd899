"""`SlotScaler`: a worker started with ``--concurrency MIN:MAX`` scales its own slots by the rule
in `jobqueue.model.autoscale` (depth per worker above 100 or utilization above 90 % → up; both below
10 / 20 % → down; step 2; cooldowns 30 s up, 5 min down; within MIN..MAX).

It starts at MIN. Every ``autoscale.interval`` seconds (default 5, `JOBQUEUE_AUTOSCALE_INTERVAL`)
it reads, in one statement (`queue_load`), each claimable queue's runnable depth and the live
workers serving it, takes the highest depth per worker among them (one backed-up queue is reason
enough for more slots; all must be quiet for fewer), measures the utilization of its slots since
the last decision (busy over available slot-seconds, from `WorkerStats`), and asks the `Scaler`.
A new target goes to the claim loop at once (``slots.resize``: the worker's `WorkerStatus`, whose
``slots`` the claim loop fills and `WorkerStats` measures utilization against; slots above the
target are not refilled, running jobs are never interrupted) and into the registry
(``jobqueue.workers.concurrency_target``, shown by ``/workers``). A failed read keeps the current
target and tries again at the next interval.

Options (`AutoscaleSettings`): interval 5 s, up_cooldown 30 s, down_cooldown 300 s, step 2; MIN and
MAX from `WorkerSettings`; ``stale_seconds`` (`MetricsSettings.worker_stale_seconds`, 60: which
workers count as live).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from typing import Callable, Protocol, Sequence

from jobqueue.config import AutoscaleSettings, WorkerSettings
from jobqueue.db import gateway as db
from jobqueue.model.autoscale import Rule, Scaler, depth_per_worker
from jobqueue.model.errors import DatabaseUnavailable
from jobqueue.store import queues as queue_store
from jobqueue.store import workers as worker_store
from jobqueue.worker.stats import WorkerStats

log = logging.getLogger("jobqueue.worker.scaling")


class Slots(Protocol):
    """The slots a worker fills, which the scaler moves."""

    def resize(self, slots: int) -> None: ...


class ClaimableQueues(Protocol):
    """The queues the worker claims from now (its paused ones left out)."""

    def claimable(self) -> Sequence[str]: ...


class SlotScaler:
    def __init__(
        self,
        pool,
        worker_id: str,
        worker: WorkerSettings,
        autoscale: AutoscaleSettings,
        *,
        stale_seconds: float,
        queues: ClaimableQueues,
        stats: WorkerStats,
        slots: Slots,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._pool = pool
        self.worker_id = worker_id
        self.interval = autoscale.interval
        self.stale_seconds = stale_seconds
        self.scaler = Scaler(
            worker.concurrency_min,
            worker.concurrency,
            rule=Rule(step=autoscale.step),
            up_cooldown=autoscale.up_cooldown,
            down_cooldown=autoscale.down_cooldown,
            clock=clock,
        )
        self._queues = queues
        self._stats = stats
        self._slots = slots
        self._measured = (stats.busy_total, stats.slot_total)
        self._reported: int | None = None  # the target the registry row shows

    @property
    def target(self) -> int:
        return self.scaler.target

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                await self.step()
            except DatabaseUnavailable as exc:
                log.warning("autoscaling: reading the queues failed (%s); keeping %d slots", exc, self.target)

    async def step(self) -> int:
        """One decision: read the signals, move the target if the rule and cooldowns allow."""
        queues = list(self._queues.claimable())
        rule = self.scaler.rule
        async with db.connection(self._pool) as conn:
            load = (
                await db.run(
                    conn,
                    queue_store.load(queues, per_worker=math.ceil(rule.up_depth), stale_seconds=self.stale_seconds),
                )
                if queues
                else {}
            )
            depth = max((depth_per_worker(runnable, workers) for runnable, workers in load.values()), default=0.0)
            before = self.target
            after = self.scaler.observe(depth, self._utilization())
            if after != before:
                log.info("autoscaling: %d -> %d slots (depth per worker %.1f)", before, after, depth)
                self._slots.resize(after)
            if after != self._reported:
                await db.run(conn, worker_store.set_concurrency_target(worker_id=self.worker_id, target=after))
                self._reported = after
        return after

    def _utilization(self) -> float:
        """Busy share of the slots since the last decision (0 when no time has been measured)."""
        self._stats.sample()
        busy, slots = self._stats.busy_total, self._stats.slot_total
        previous_busy, previous_slots = self._measured
        self._measured = (busy, slots)
        return (busy - previous_busy) / (slots - previous_slots) if slots > previous_slots else 0.0
