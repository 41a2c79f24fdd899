"""The two narrow interfaces the claim loop runs between: where jobs come from (`JobSource`, the
`Claimer`) and where their outcomes go (`OutcomeSink`, the `AckBuffer`).

The loop takes no more from either than this, and neither knows the loop: a test can put a fake in
either place, and the one interaction between the two is named (`JobSource.acked`: an ack
written frees the limit slots its attempts held).
"""

from __future__ import annotations

import asyncio
from typing import Callable, Protocol, Sequence

from jobqueue.model.jobs import Job
from jobqueue.store.jobs import Attempt
from jobqueue.worker.executor import Outcome


class JobSource(Protocol):
    #: monotonic time the last claim began (`IdleWait` asks what fell due since)
    last_claim_at: float
    #: after a limited claim: seconds until a limit it found spent may have room (None: none was)
    recheck_in: float | None

    async def claim(self, queues: Sequence[str], free: int, blocked: Sequence[str] = ()) -> list[Job]:
        """Up to ``free`` jobs of ``queues``, none of the ``blocked`` job types."""

    async def claim_probe(self, conn, queues: Sequence[str], job_types: Sequence[str]) -> list[Job]:
        """One job of ``job_types`` on ``conn`` (a half-open circuit's probe, in its transaction)."""

    async def reconcile(self, known: Callable[[], list[Attempt]]) -> int:
        """Release what the database says this worker holds beyond ``known()``."""

    def acked(self, attempts: Sequence[Attempt]) -> bool:
        """The acks of ``attempts`` are written; True if one held a limit's slot."""


class OutcomeSink(Protocol):
    #: set after every write: a claim loop waiting for room looks again
    flushed: asyncio.Event

    def add(self, outcome: Outcome) -> None: ...

    async def run(self) -> None:
        """Write what is added, in batches, until cancelled."""

    @property
    def backlog(self) -> int:
        """Outcomes finished but not written yet."""

    @property
    def backlog_bytes(self) -> int:
        """What they hold in results and errors."""

    @property
    def queued(self) -> int:
        """Outcomes not tried yet (written within a flush interval unless the database is down)."""

    def pending_attempts(self) -> list[Attempt]: ...

    async def drain(self, timeout: float) -> bool:
        """Wait until everything is written; False if not in time."""
