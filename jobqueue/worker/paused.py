"""`PausedQueues`: which of a worker's queues are paused (``jobqueue.queue_settings``), so that it
never claims from one.

The paused set is read at start (`refresh`); on every ``jobqueue_control`` NOTIFY (sent when a
queue is paused or resumed) and after the notifier reconnects (throttled: `WorkerNotifications`);
and on a timer (`run`): every ``interval`` (the heartbeat interval) while LISTEN is up, to correct
a notification whose read failed, and every ``PAUSED_POLL`` seconds while no NOTIFY can reach the
worker (poll-only mode, or LISTEN down) — a busy poll-only worker never idles (where `IdleWait`
reads it too), and kept claiming a paused queue until its backlog was gone. A read that fails keeps
the last known set. A queue resumed wakes the idle worker (``on_resumed``).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Callable, Sequence

from jobqueue.db import gateway as db
from jobqueue.model.errors import DatabaseUnavailable, NotMigrated
from jobqueue.store import queues as queue_store

log = logging.getLogger("jobqueue.worker")

#: Seconds between re-reads of the paused queues while no NOTIFY can tell of a pause (poll-only
#: mode, or LISTEN down): a busy worker never idles, where it also re-reads them.
PAUSED_POLL = 0.5


class PausedQueues:
    def __init__(
        self,
        pool,
        queues: Sequence[str],
        *,
        interval: float,
        listen: bool,
        connected: asyncio.Event,
        on_resumed: Callable[[], None],
    ) -> None:
        """``listen``: the worker LISTENs at all (JOBQUEUE_LISTEN); ``connected``: the notifier's
        connection is up (both: a NOTIFY can reach it)."""
        self._pool = pool
        self.queues = list(queues)
        self.interval = interval
        self._listen = listen
        self._connected = connected
        self._on_resumed = on_resumed
        #: the worker's queues that are paused, as last read
        self.names: set[str] = set()

    def claimable(self) -> list[str]:
        """The worker's queues that are not paused (the list itself while none is)."""
        return [queue for queue in self.queues if queue not in self.names] if self.names else self.queues

    def claims_from(self, queue: str) -> bool:
        return queue in self.queues and queue not in self.names

    async def refresh(self) -> None:
        """Read now; keep the last known set when that fails."""
        try:
            async with db.connection(self._pool) as conn:
                paused = await db.run(conn, queue_store.paused_among(self.queues))
        except (DatabaseUnavailable, NotMigrated):
            return  # keep the last known set; the next idle wait tries again
        except Exception:
            log.exception("reading the paused queues failed; keeping the last known set")
            return
        if paused != self.names:
            log.info("paused queues: %s", ", ".join(sorted(paused)) or "none")
            resumed = bool(self.names - paused)
            self.names = paused
            if resumed:
                self._on_resumed()

    async def run(self) -> None:
        """Re-read on the timer, until cancelled."""
        while True:
            listening = self._listen and self._connected.is_set()
            await asyncio.sleep(self.interval if listening else PAUSED_POLL)
            await self.refresh()
