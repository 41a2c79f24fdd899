"""`WorkerStatus`: what a worker's reporters read of it, in one object the claim loop keeps current,
instead of a callback each into the claim loop.

- ``running`` (jobs running now), ``slots`` (how many the claim loop fills: the concurrency, or the
  `SlotScaler`'s target with --concurrency MIN:MAX) and ``concurrency`` (the most it ever fills):
  `WorkerStats` samples the utilization from them, the `MetricsServer` shows them.
- ``processed`` and ``failed`` (every finished attempt; failed ones exclude an honoured cancel
  request, as /metrics counts them: `count`), ``state`` and ``stuck_handlers``: the heartbeat's
  registry beat writes them to ``jobqueue.workers``.
- `resize` is the one way ``slots`` changes (the scaler's): it sets ``slot_freed``, which the claim
  loop waits on while every slot is taken, so that it looks again at once.
"""

from __future__ import annotations

import asyncio
from typing import Sized

from jobqueue.worker.executor import CANCELLED, COMPLETED, Outcome
from jobqueue.worker.threads import HandlerThreads


class WorkerStatus:
    def __init__(self, *, concurrency: int, slots: int, running: Sized, threads: HandlerThreads) -> None:
        """``running``: the worker's running table (read, never changed, here)."""
        self.concurrency = concurrency
        self.slots = slots
        self.processed = 0
        self.failed = 0
        #: set when a slot may have come free (a job ended, the slots grew, the worker stops)
        self.slot_freed = asyncio.Event()
        self.stopping = asyncio.Event()
        self._running = running
        self._threads = threads

    @property
    def running(self) -> int:
        return len(self._running)

    @property
    def stuck_handlers(self) -> int:
        return self._threads.stuck

    @property
    def state(self) -> str:
        """What the registry row says: ``stopping`` once a stop was asked for, else ``running``."""
        return "stopping" if self.stopping.is_set() else "running"

    def count(self, outcome: Outcome) -> None:
        """One finished attempt, in the totals the registry shows."""
        self.processed += 1
        if outcome.kind not in (COMPLETED, CANCELLED):
            self.failed += 1

    def resize(self, slots: int) -> None:
        self.slots = slots
        self.slot_freed.set()  # a claim loop waiting for a free slot looks again
