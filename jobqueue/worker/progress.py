"""Progress reports: what handlers tell with ``job.progress(done, total, message)``, written to the
job's row a few times a second at most, never with the handler waiting for the database.

A report only replaces the attempt's latest one in memory (from any thread: sync handlers report
from theirs) and wakes the writer. The writer writes every attempt's latest report in one statement
(`job_progress_many`), then sleeps ``interval`` (0.25 s): a handler reporting in a tight loop costs
the database at most four small updates a second, however many it makes, and all running
attempts share each one. The statement writes only for the attempt this worker holds (a report of
an attempt that lost its lease is dropped), passes over rows another transaction holds locked, and
announces a ``job.progress`` event while an event stream is open. An attempt that finished before
its last report was written still gets it written (the statement takes the attempt that this
worker finished too), so a job shorter than the interval still shows how far it got.

During an outage the write fails: the reports are kept — only the latest per attempt, so memory
stays bounded by the running attempts — and written when the database answers again; a report
newer than the kept one replaces it. Nothing here ever blocks or fails a handler: only a bad figure raises, in
`jobqueue.model.jobs.Job.progress`, before it gets here.
"""

from __future__ import annotations

import asyncio
import logging
import threading

from jobqueue.db import gateway as db
from jobqueue.store import jobs as job_store
from jobqueue.store.jobs import Attempt

log = logging.getLogger("jobqueue.worker.progress")

#: Seconds between two writes of the progress reports (each writes every attempt's latest).
WRITE_INTERVAL = 0.25
#: Seconds before a failed write is tried again (the reports are kept meanwhile).
RETRY_AFTER = 1.0

Report = tuple[float, float | None, str | None]


class ProgressReports:
    def __init__(self, pool, worker_id: str, *, interval: float = WRITE_INTERVAL) -> None:
        self._pool = pool
        self.worker_id = worker_id
        self.interval = interval
        self._latest: dict[Attempt, Report] = {}
        self._lock = threading.Lock()
        self._wake = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self.written = 0  # reports the database took (for tests and curiosity)

    def report(self, attempt: Attempt, done: float, total: float | None, message: str | None) -> None:
        """Keep this as the attempt's latest report (any thread); the writer writes it soon."""
        with self._lock:
            first = not self._latest
            self._latest[attempt] = (done, total, message)
        if first and self._loop is not None:
            try:
                if threading.get_ident() == self._loop_thread:
                    self._wake.set()
                else:
                    self._loop.call_soon_threadsafe(self._wake.set)
            except RuntimeError:  # the loop closed: the worker is gone
                pass

    @property
    def pending(self) -> int:
        return len(self._latest)

    async def run(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        while True:
            await self._wake.wait()
            self._wake.clear()
            delay = self.interval if await self.write() else RETRY_AFTER
            await asyncio.sleep(delay)
            if self._latest:
                self._wake.set()

    async def write(self) -> bool:
        """Write what is pending; False when the database could not take it (kept for later)."""
        with self._lock:
            batch, self._latest = self._latest, {}
        if not batch:
            return True
        try:
            async with db.connection(self._pool) as conn:
                self.written += await db.run(
                    conn,
                    job_store.record_progress(
                        worker_id=self.worker_id,
                        reports=[(attempt, *report) for attempt, report in batch.items()],
                    ),
                )
            return True
        except Exception as exc:  # an outage, or anything else: a report is never worth the worker
            log.info("progress reports not written (%s); %d kept for the next try", exc, len(batch))
            with self._lock:
                for attempt, report in batch.items():
                    self._latest.setdefault(attempt, report)  # a newer report wins
            return False
