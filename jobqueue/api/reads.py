"""Where the API reads from: a standby when ``JOBQUEUE_READ_DSN`` names one, else the primary.

Status reads — ``GET /jobs``, ``GET /jobs/{id}`` and its result, the dead-letter listing,
``/queues``, ``/workers``, ``/metrics`` and the dashboard's figures — may be served by a streaming
replica, stale by its replication lag (usually milliseconds; the standby's
``pg_last_xact_replay_timestamp()`` tells). Everything that must see its own write stays on the
primary:

- writes, claims and the answer to a submission (its outcome is read on the primary);
- every read by an API key for ``JOBQUEUE_READ_AFTER_WRITE_SECONDS`` (default 5) after that key
  wrote (submitted, cancelled, paused a queue…): a producer polling the job it just created never
  gets a 404 for it from a replica that has not replayed it yet;
- a job the replica does not know (404) is looked up on the primary before the 404 is answered.

A replica that cannot be reached is skipped: the read goes to the primary and the replica is
tried again after ``RETRY_REPLICA_AFTER`` seconds, so an outage of the standby costs one failed
connection attempt per period, not one per request.
"""

from __future__ import annotations

import logging
import time
from typing import Awaitable, Callable, TypeVar

from jobqueue.client import AsyncClient
from jobqueue.model.errors import DatabaseUnavailable, JobNotFound

log = logging.getLogger("jobqueue.api.reads")

T = TypeVar("T")

#: Seconds the primary serves every read after the replica failed once.
RETRY_REPLICA_AFTER = 5.0


class ReadRouter:
    def __init__(
        self,
        primary: AsyncClient,
        replica: AsyncClient | None,
        *,
        after_write: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.primary = primary
        self.replica = replica
        self.after_write = after_write
        self._clock = clock
        self._last_write: dict[object, float] = {}
        self._replica_down_until = 0.0

    def wrote(self, who: object) -> None:
        """``who`` (an API key id) just changed something: its reads go to the primary for a while."""
        if self.replica is not None:
            now = self._clock()
            self._last_write[who] = now
            if len(self._last_write) > 10_000:  # forget writers whose window has passed
                self._last_write = {k: t for k, t in self._last_write.items() if now - t < self.after_write}

    def source(self, who: object | None) -> AsyncClient:
        """The client this reader's next read goes to."""
        if self.replica is None or self._clock() < self._replica_down_until:
            return self.primary
        wrote_at = self._last_write.get(who) if who is not None else None
        if wrote_at is not None and self._clock() - wrote_at < self.after_write:
            return self.primary
        return self.replica

    async def read(self, who: object | None, call: Callable[[AsyncClient], Awaitable[T]]) -> T:
        """``call`` on the replica when this reader may use it, else (or when it is down, or does
        not know the job) on the primary."""
        client = self.source(who)
        if client is self.primary:
            return await call(self.primary)
        try:
            return await call(client)
        except DatabaseUnavailable as exc:
            log.warning("read replica unavailable (%s); reading from the primary for %.0f s", exc, RETRY_REPLICA_AFTER)
            self._replica_down_until = self._clock() + RETRY_REPLICA_AFTER
        except JobNotFound:
            pass  # not replayed yet, or really absent: the primary decides
        return await call(self.primary)
