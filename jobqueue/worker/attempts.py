"""`HeldAttempts`: the attempts one worker holds, wherever each is on its way from its claim to its ack.

An attempt is a (job id, attempt) pair (a job reclaimed from this worker and claimed by it again is
two attempts). The worker holds it while it is
- ``running``: started, until its handler returns (the running table: attempt → job and task);
- ``finishing``: out of the running table, not yet handed to the acks (`JobSlots._finish`);
- being reported to its circuit breaker (`Breakers.reporting`; it still holds its slot there);
- waiting in the `AckBuffer` to be written.

`held` is all of them: what the heartbeat renews, and what a reconcile after a lost claim reply
keeps (every other attempt the database says this worker holds was claimed by the lost statement
and never started). What a renewal reports back comes here too: a cancel request
(`cancel_requested`: the running job's flag, which its handler reads) and a lease lost to the
sweeper (`lease_lost`: logged; the attempt's late outcome is written only if no newer attempt has
started by then).
"""

from __future__ import annotations

import asyncio
import logging
import uuid

from jobqueue.model.jobs import Job
from jobqueue.store.jobs import Attempt
from jobqueue.worker.breakers import Breakers
from jobqueue.worker.ports import OutcomeSink

log = logging.getLogger("jobqueue.worker")


class HeldAttempts:
    def __init__(self, breakers: Breakers, acks: OutcomeSink) -> None:
        self.running: dict[Attempt, tuple[Job, asyncio.Task]] = {}
        self.finishing: set[Attempt] = set()
        self._breakers = breakers
        self._acks = acks

    def held(self) -> list[Attempt]:
        return (
            list(self.running) + list(self.finishing) + list(self._breakers.reporting) + self._acks.pending_attempts()
        )

    def running_job_ids(self, *, unless_cancel_requested: bool = False) -> set[uuid.UUID]:
        return {job.id for job, _ in self.running.values() if not (unless_cancel_requested and job.cancel_requested)}

    def cancel_requested(self, job_id: uuid.UUID) -> None:
        for job, _ in self.running.values():
            if job.id == job_id:
                job.cancel_requested = True

    def lease_lost(self, attempt: Attempt) -> None:
        if attempt in self.running:
            log.warning(
                "job %s attempt %d: lease lost (reclaimed by the sweeper); its outcome is written only if "
                "no newer attempt has started by then",
                *attempt,
            )
