"""`WorkerNotifications`: what each channel's notifications do to a worker.

Notifications are hints (any login may send any of them): each only makes the worker look again
at what the database holds, and at a bounded rate, so a flood of forged ones costs next to nothing.

- ``jobqueue_jobs`` (a job became runnable in a queue): wakes the idle worker (`IdleWait`) when the
  queue is one it claims from and not paused; coalesced per queue (`WAKE_GAP`: the first of a quiet
  period wakes it at once, later ones once at the end of the gap).
- ``jobqueue_cancel`` (a job was asked to stop): `CancelHints` re-reads that job's flag, never sets it.
- ``jobqueue_control`` (a queue paused or resumed), ``jobqueue_circuits`` (a breaker changed),
  ``jobqueue_limits`` (a limit changed): a re-read of the paused queues, the breakers or the limits,
  ``CONTROL_BURST`` times at once and then at most once per ``CONTROL_GAP`` seconds each.
- A reconnect of the notifier (what was sent meanwhile is lost): wakes the worker and re-reads all
  of it, the cancel flags of every running job included.
"""

from __future__ import annotations

import asyncio

from jobqueue.events import channels
from jobqueue.events.notifier import Coalescer, Notifier, Throttled
from jobqueue.worker.breakers import Breakers
from jobqueue.worker.cancel_hints import CancelHints
from jobqueue.worker.idle_wait import WAKE_GAP
from jobqueue.worker.limit_watch import LimitWatch
from jobqueue.worker.paused import PausedQueues

#: The paused queues, circuit breakers and limits are re-read on their channels' notifications:
#: CONTROL_BURST times at once, then at most once per CONTROL_GAP seconds. Real changes come in
#: small bursts (a worker's start declares its breakers, then one opens), which must not wait.
CONTROL_GAP = 0.25
CONTROL_BURST = 4


class WorkerNotifications:
    def __init__(
        self,
        notifier: Notifier,
        *,
        wake: asyncio.Event,
        paused: PausedQueues,
        breakers: Breakers,
        limits: LimitWatch,
        cancel_hints: CancelHints,
    ) -> None:
        """Subscribes at once: the notifier LISTENs to the channels known when it connects, so
        this is made before anything runs."""
        self._wake = wake
        self._paused = paused
        self._breakers = breakers
        self._limits = limits
        self._cancel_hints = cancel_hints
        self._wake_for = Coalescer(WAKE_GAP, lambda _queue: wake.set(), by_payload=True)
        self._paused_refresh = Throttled(paused.refresh, gap=CONTROL_GAP, burst=CONTROL_BURST, name="paused-queues")
        notifier.subscribe(channels.JOBS, self._on_jobs)
        notifier.subscribe(channels.CANCEL, cancel_hints.hint)
        notifier.subscribe(channels.CONTROL, self._paused_refresh.request)
        notifier.subscribe(channels.CIRCUITS, Coalescer(CONTROL_GAP, breakers.request_refresh, burst=CONTROL_BURST))
        notifier.subscribe(channels.LIMITS, Coalescer(CONTROL_GAP, limits.request_refresh, burst=CONTROL_BURST))
        notifier.on_reconnect(self._on_reconnect)

    def _on_jobs(self, queue: str) -> None:
        if self._paused.claims_from(queue):
            self._wake_for(queue)

    def _on_reconnect(self) -> None:
        """Notifications sent while LISTEN was down are lost: re-read what they would have said."""
        self._wake.set()
        self._paused_refresh.request()
        self._breakers.request_refresh()
        self._limits.request_refresh()
        self._cancel_hints.recheck_running()

    def close(self) -> None:
        """Stop the re-reads and checks still pending (at the worker's end)."""
        self._paused_refresh.cancel()
        self._cancel_hints.close()
