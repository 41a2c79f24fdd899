"""`CancelHints`: what a worker does with ``jobqueue_cancel`` notifications.

A notification is a hint (any login may send any of them): it names a job someone asked to stop,
and the worker only looks at that job's row, never sets the flag itself: `hint` keeps the id, and
at most once per ``CANCEL_GAP`` seconds (the first at once) one statement reads
``cancel_requested`` of the hinted jobs this worker runs (and does not know to be cancelled
already); only that flag reaches the handler (`HeldAttempts.cancel_requested`). Ids of jobs it
does not run cost no statement, and at most ``MAX_CANCEL_HINTS`` wait (more are dropped), so a
flood of forged ones costs next to nothing. After the notifier reconnects, every running job is
looked at (`recheck_running`: a notification may have been missed), and the heartbeat delivers the
flag in any case.
"""

from __future__ import annotations

import logging
import uuid

from jobqueue.db import gateway as db
from jobqueue.events.notifier import Throttled
from jobqueue.model.errors import DatabaseUnavailable
from jobqueue.store import jobs as job_store
from jobqueue.worker.attempts import HeldAttempts

log = logging.getLogger("jobqueue.worker")

#: Running jobs named by ``jobqueue_cancel`` NOTIFYs are checked in the database at most once per
#: CANCEL_GAP seconds (the first at once); the heartbeat delivers the flag anyway.
CANCEL_GAP = 0.05
#: Job ids from cancel notifications waiting for that check; more are dropped (hints only).
MAX_CANCEL_HINTS = 10_000


class CancelHints:
    def __init__(self, pool, attempts: HeldAttempts) -> None:
        self._pool = pool
        self._attempts = attempts
        self._hints: set[uuid.UUID] = set()
        self._check = Throttled(self.check, gap=CANCEL_GAP, name="cancel-check")

    def hint(self, payload: str) -> None:
        """A ``jobqueue_cancel`` notification: look at the job's row soon (once for many such)."""
        try:
            job_id = uuid.UUID(payload)
        except ValueError:
            return
        if len(self._hints) < MAX_CANCEL_HINTS:
            self._hints.add(job_id)
            self._check.request()

    def recheck_running(self) -> None:
        """The notifier reconnected: a cancel notification may have been missed for any running job."""
        self._hints.update(self._attempts.running_job_ids())
        self._check.request()

    async def check(self) -> None:
        hints, self._hints = self._hints, set()
        named = hints & self._attempts.running_job_ids(unless_cancel_requested=True)
        if not named:
            return  # ids of jobs this worker does not run (or knows to be cancelled): nothing to read
        try:
            async with db.connection(self._pool) as conn:
                requested = await db.run(conn, job_store.cancel_requested_among(sorted(named)))
        except DatabaseUnavailable as exc:
            log.warning("checking cancel requests failed (%s); the heartbeat delivers them", exc)
            return
        for job_id in requested:
            self._attempts.cancel_requested(job_id)

    def close(self) -> None:
        self._check.cancel()
