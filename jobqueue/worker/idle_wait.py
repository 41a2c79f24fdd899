"""`IdleWait`: how long a worker that found nothing to claim sleeps, from every source that may end it.

The claim loop claims again as soon as the first of these says there may be work:

1. A wake-up (``wake``, an event anyone may set): a ``jobqueue_jobs`` NOTIFY for one of its
   claimable queues (coalesced per queue, `WAKE_GAP`), a queue resumed, a circuit closed, the limits
   re-read, an ack of a job that held a limit's slot, a retry it scheduled itself, a stop, the
   notifier reconnecting (a NOTIFY may have been lost).
2. The earliest future ``run_at`` among its claimable queues (``job_next_run_at``): a scheduled job
   or a retry falls due. The server's clock says how far off it is, as this host's may be off.
3. A spent global limit that may have room again (`Claimer.recheck_in`): its slots free up when
   other workers' acks commit, which nothing announces.
4. A circuit breaker's probe falling due (`Breakers.next_probe_in`).
5. A retry this worker scheduled itself (`retry_scheduled`): due by its own estimate, it keeps
   claiming every ``RETRY_WAKE_POLL`` seconds for ``RETRY_WAKE_GRACE`` more, because the retry's
   ``run_at`` counts from when its ack was written (a little later), and source 2 cannot be trusted
   that close to a claim: its bound, "after the last claim began", is that claim's start on this
   host's clock carried to the server's, off by the queries' latency; a ``run_at`` that close to the
   claim was missed under load until the next poll (CI: 30 s). While the ack is not written yet, it
   looks again every 10 ms.

And the poll interval at the latest: the fallback when LISTEN is unavailable. While no NOTIFY can
reach the worker (poll-only mode, LISTEN down), it first re-reads what the control channels would
have announced: the paused queues, the circuit breakers and the limits.
"""

from __future__ import annotations

import asyncio
import logging
import time

from jobqueue.db import gateway as db
from jobqueue.model.errors import DatabaseUnavailable
from jobqueue.store import jobs as job_store
from jobqueue.worker.breakers import Breakers
from jobqueue.worker.limit_watch import LimitWatch
from jobqueue.worker.paused import PausedQueues
from jobqueue.worker.ports import JobSource, OutcomeSink

log = logging.getLogger("jobqueue.worker")

#: How long after a retry it scheduled falls due (by its estimate) an idle worker keeps claiming
#: every RETRY_WAKE_POLL seconds, until the ack's run_at has surely passed (source 5 above).
RETRY_WAKE_GRACE = 0.5
RETRY_WAKE_POLL = 0.02
#: A ``jobqueue_jobs`` NOTIFY for a queue wakes an idle worker at once, unless one for that queue
#: did within the last WAKE_GAP seconds: then it wakes it once at the end of that gap.
WAKE_GAP = 0.02


class IdleWait:
    def __init__(
        self,
        pool,
        wake: asyncio.Event,
        *,
        poll_interval: float,
        listen: bool,
        connected: asyncio.Event,
        paused: PausedQueues,
        claimer: JobSource,
        breakers: Breakers,
        limits: LimitWatch,
        acks: OutcomeSink,
    ) -> None:
        self._pool = pool
        self._wake = wake
        self.poll_interval = poll_interval
        self._listen = listen
        self._connected = connected
        self._paused = paused
        self._claimer = claimer
        self._breakers = breakers
        self._limits = limits
        self._acks = acks
        self._next_wake_at: float | None = None  # a retry this worker scheduled falls due then (monotonic)

    def retry_scheduled(self, retry_in: float) -> None:
        """An attempt of this worker failed with a retry due in ``retry_in`` seconds (source 5)."""
        wake_at = time.monotonic() + retry_in
        if self._next_wake_at is None or wake_at < self._next_wake_at:
            self._next_wake_at = wake_at
            self._wake.set()

    async def wait(self) -> None:
        """Sleep until the first of the sources says there may be work, or the poll interval."""
        timeout = self.poll_interval
        if not (self._listen and self._connected.is_set()):
            await self._paused.refresh()  # no jobqueue_control NOTIFY can reach us: look it up
            await self._breakers.refresh()  # nor a jobqueue_circuits one
            await self._limits.refresh()  # nor a jobqueue_limits one
        next_run_in = await self._next_run_in()
        if next_run_in is not None:  # the server's clock says: this host's may be off
            timeout = min(timeout, max(next_run_in, 0.0) + 0.001)
        if self._claimer.recheck_in is not None:  # a spent limit may have room by then
            timeout = min(timeout, self._claimer.recheck_in)
        probe_in = self._breakers.next_probe_in()
        if probe_in is not None:  # a circuit breaker's probe falls due
            timeout = min(timeout, probe_in + 0.001)
        retry_in = self._retry_in()
        if retry_in is not None:
            timeout = min(timeout, retry_in)
        await self.sleep(timeout)

    async def _next_run_in(self) -> float | None:
        try:
            async with db.connection(self._pool) as conn:
                return await db.run(
                    conn,
                    job_store.next_run_in(
                        queues=self._paused.claimable(), since=time.monotonic() - self._claimer.last_claim_at + 0.001
                    ),
                )
        except DatabaseUnavailable:
            return None
        except Exception:
            log.exception("looking up the next scheduled job failed; polling instead")
            return None

    def _retry_in(self) -> float | None:
        """How long until a retry this worker scheduled is to be claimed (None: no such retry)."""
        if self._next_wake_at is None:
            return None
        remaining = self._next_wake_at - time.monotonic()
        if remaining > 0:
            return remaining
        if self._acks.queued:  # due, but its ack (which sets its run_at) is not written yet
            return 0.01
        if -remaining < RETRY_WAKE_GRACE:  # due by this worker's estimate: see source 5
            return RETRY_WAKE_POLL
        self._next_wake_at = None
        return None

    async def sleep(self, timeout: float) -> None:
        """Sleep ``timeout`` seconds, or until woken."""
        try:
            await asyncio.wait_for(self._wake.wait(), timeout)
        except asyncio.TimeoutError:
            pass
