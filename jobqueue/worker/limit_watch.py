"""`LimitWatch`: one worker's side of the global limits (`jobqueue.limits`): whether its claims must
go through them (how one such claim is split into statements is `LimitPlan`'s, in limit_plan.py).

It writes the app's declared limits at worker start (`sync`) and keeps ``active``: whether any
limit applies to the worker's queues (every job-type limit does; a queue limit, to that queue). It
re-reads on every ``jobqueue_limits`` NOTIFY (the table's trigger sends one on every change), after
the notifier reconnects, and every ``interval`` seconds as the fallback. A stale ``active`` is
never unsafe: a claim that believes there is no limit takes nothing once one exists (job_claim's
guard), so the worst a late NOTIFY costs is a short pause.

Options: ``interval`` = the heartbeat interval (10 s) for the fallback re-read.
"""

from __future__ import annotations

import logging
from typing import Callable, Sequence

from jobqueue.app import JobQueue
from jobqueue.db import gateway as db
from jobqueue.store import limits as limit_store
from jobqueue.worker.limit_plan import JOB_TYPE, QUEUE
from jobqueue.worker.shared_state import SharedStateCopy

log = logging.getLogger("jobqueue.worker.limits")


class LimitWatch(SharedStateCopy[bool]):
    what = "the limits"

    def __init__(
        self, pool, app: JobQueue, queues: Sequence[str], *, interval: float, on_read: Callable[[], None] = lambda: None
    ) -> None:
        """``on_read``: called after every read (the worker claims again: a claim made with the
        old copy may have left a job it can take now: a claim made while the copy says no limit
        applies, and one does, takes nothing — and a limit set and cleared between two reads,
        which coalesced notifications allow, leaves the copy as it was)."""
        super().__init__(pool, interval=interval, log=log)
        self.app = app
        self.queues = list(queues)
        self.active = False
        self._on_read = on_read

    def sync(self) -> db.Call[list[tuple[str, str, str]]]:
        """The app's limits, and the code limits it declared for its job types and queues and no
        longer declares (another app's stay: see limit_sync)."""
        declared = self.app.limits()
        named = {(d.scope, d.name) for d in declared}
        undeclared = [(JOB_TYPE, t) for t in self.app.tasks] + [(QUEUE, q) for q in self.queues]
        return limit_store.sync(declared, [key for key in undeclared if key not in named], app=self.app.name)

    def _read(self) -> db.Call[bool]:
        return limit_store.any_for(self.queues)

    def _apply(self, active: bool) -> None:
        if active != self.active:
            log.info("limits %s for queues %s", "apply" if active else "no longer apply", ", ".join(self.queues))
        self.active = active
        self._on_read()
