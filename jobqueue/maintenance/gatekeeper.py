"""`Gatekeeper`: closes the enqueue gates of full queues for every path, SQL included (leader only).

The REST API refuses a job past a queue's hard limit from its own cached count; a producer
calling ``jobqueue.enqueue()`` in SQL, or a Python client, never passes through it. So the leader
counts the waiting jobs (pending, scheduled or waiting for a retry: `jobqueue.model.quotas`) with the
same bounded query and writes the gates that count closes into ``jobqueue.queue_gates``: each
queue at its hard limit, all queues at the total hard limit, new queue names once
``max_queues`` undeclared queues hold jobs. Every enqueue path probes that table (empty while
nothing is full) and refuses with SQLSTATE 53400 (`jobqueue.model.errors.QueueFull`).

The count is redone only when the job sequence shows enough submissions to close a gate, and at
least every ``max_age`` seconds (a queue drained reopens within that). A gate counts until
``valid_for`` after the count that closed it: should the leader go, gates open again rather
than hold a queue shut for ever. Between counts a queue can overshoot by what was submitted
meanwhile (as each API process can by the others' share).

Options (`GatekeeperOptions`, defaults; in the runner, `BackpressureSettings`, which the API and
workers share too): ``interval`` 1 s (``JOBQUEUE_API_DEPTH_REFRESH``), ``max_age`` 10 s
(``JOBQUEUE_API_DEPTH_MAX_AGE``), ``hard_limit`` 100,000 and ``total_hard_limit`` 400,000
(``JOBQUEUE_API_HARD_LIMIT``, ``_TOTAL_HARD_LIMIT``; a queue's own ``hard_limit`` in
``queue_settings`` wins), ``max_queues`` 1,000 (``JOBQUEUE_API_MAX_QUEUES``), ``stale_seconds`` 60
(a worker silent longer serves no queue), ``valid_for`` 3 x ``max_age``; and the ``clock``. A run
returns `Gated`: whether it counted, how many gates that count holds closed, and how many of them
it closed or opened. Its ``count`` is the gates that changed, so the loop logs a line
(``gatekeeper: counted the waiting jobs: 1 gate(s) closed, 1 closed in all``) only when one did; a
run that needed no count, or whose count changed nothing, logs at DEBUG only (it once logged
``gatekeeper: -1`` at INFO every second while nothing was submitted). Each gate that closes or
opens also has its own line, with its queue, reason and figures.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from jobqueue.db import gateway as db
from jobqueue.maintenance.base import Service, said
from jobqueue.model.quotas import Limits, Recount, closed_gates
from jobqueue.runtime.clock import Clock
from jobqueue.store import metrics as metrics_store
from jobqueue.store import queues as queue_store

log = logging.getLogger("jobqueue.gatekeeper")


@dataclass(frozen=True, slots=True)
class GatekeeperOptions:
    interval: float = 1.0
    max_age: float = 10.0
    hard_limit: int = 100_000
    total_hard_limit: int = 400_000
    max_queues: int = 1000
    stale_seconds: float = 60.0
    valid_for: float | None = None  # None: 3 x max_age


@dataclass(frozen=True, slots=True)
class Gated:
    counted: bool = False  # False: nothing submitted since the last count could close a gate
    closed: int = 0  # the gates that count holds closed (each queue at its hard limit, all queues, new queues)
    newly_closed: int = 0  # of those, the ones this count closed
    opened: int = 0  # gates this count opened again

    @property
    def count(self) -> int:
        return self.newly_closed + self.opened

    def describe(self) -> str:
        if not self.counted:
            return "no count needed (too few jobs submitted since the last one to close a gate)"
        changed = said((self.newly_closed, "gate(s) closed"), (self.opened, "gate(s) opened again"), nothing="")
        return "counted the waiting jobs: " + (
            f"{changed}, {self.closed:,} closed in all" if changed else f"no gate changed ({self.closed:,} closed)"
        )


class Gatekeeper(Service[Gated]):
    name = "gatekeeper"

    def __init__(self, pool, options: GatekeeperOptions = GatekeeperOptions(), *, clock: Clock | None = None) -> None:
        super().__init__(interval=options.interval, clock=clock)
        self._pool = pool
        self.max_age = options.max_age
        self.hard_limit = options.hard_limit
        self.total_hard_limit = options.total_hard_limit
        self.max_queues = options.max_queues
        self.stale_seconds = options.stale_seconds
        self.valid_for = 3 * options.max_age if options.valid_for is None else options.valid_for
        self._recount = Recount(max_age=options.max_age, clock=lambda: self.clock.now().timestamp())
        self._depths: dict[str, int] = {}
        self._undeclared = 0

    async def run_once(self) -> Gated:
        """Count if needed and write the gates."""
        async with db.connection(self._pool) as conn:
            settings = await db.run(conn, queue_store.all_settings())
            limits = Limits(
                self.hard_limit,
                self.hard_limit,
                self.total_hard_limit,
                self.total_hard_limit,
                self.max_queues,
                settings,
            )
            submitted = await db.run(conn, metrics_store.submitted())
            if not self._recount.needed(
                submitted, lambda growth: limits.within_reach(self._depths, self._undeclared, growth, hard=True)
            ):
                return Gated(counted=False)
            started = self._recount.started()
            counts = await db.run(conn, queue_store.waiting_counts(cap=limits.cap(), stale_seconds=self.stale_seconds))
            gates = closed_gates(counts, limits)
            changes = await db.run(conn, queue_store.replace_gates(gates, valid_for=self.valid_for))
        self._recount.counted(started, submitted)
        self._depths = counts.depths
        self._undeclared = len(limits.undeclared(counts.depths, counts.served))
        newly_closed = [gate for gate in gates if ("closed", gate.queue, gate.reason) in changes]
        for gate in newly_closed:
            log.warning(
                "enqueue gate closed: %s (%s waiting, limit %s)%s",
                gate.reason,
                gate.waiting,
                gate.quota,
                f" for queue {gate.queue!r}" if gate.queue else "",
            )
        opened = [(queue, reason) for change, queue, reason in changes if change == "opened"]
        for queue, reason in opened:
            log.info("enqueue gate open again: %s%s", reason, f" for queue {queue!r}" if queue else "")
        return Gated(counted=True, closed=len(gates), newly_closed=len(newly_closed), opened=len(opened))
