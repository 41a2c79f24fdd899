"""`Breakers`: one worker's side of the circuit breakers it shares with every other worker.

What it does:
- At start it writes the app's breakers and the job types behind them (`sync`); from then on it
  keeps ``blocked``, the job types of every circuit that is not closed, which the claim skips.
  It re-reads them whenever a ``jobqueue_circuits`` NOTIFY arrives (the table's trigger sends one
  on every change of state), after the notifier reconnects, after a transition it made itself,
  and every ``interval`` seconds as the fallback when LISTEN is down or unavailable.
- It reports what the breaker must know before the job's ack is written (so that a job given back
  with `CircuitOpen` is blocked before it is pending again): a counted failure
  (`Outcome.counts_failure`), a `CircuitOpen` (opens the breaker now), and the outcome of a probe.
- When an open circuit's ``reset_after`` has passed (or a half-open circuit's probe job is no
  longer running), `probe` tries, in one transaction, to turn it half-open and claim one job of
  its types that this worker has handlers for; one worker wins (see circuit_probe_begin), and if
  there is no such job the transaction rolls back. A failed try is not repeated for
  ``retry_probe_after`` seconds.

Options and defaults (set by the worker): ``interval`` = the heartbeat interval (a third of the
lease: 10 s), ``retry_probe_after`` = the poll interval (5 s). ``clock``: the time the transitions
use (None: the database's ``now()``) and ``monotonic`` (when probes fall due), injectable for tests.
"""

from __future__ import annotations

import logging
import time
from typing import Awaitable, Callable, Sequence

from jobqueue.app import JobQueue, TaskDef
from jobqueue.db import gateway as db
from jobqueue.model.circuits import HALF_OPEN, OPEN
from jobqueue.model.jobs import Job
from jobqueue.runtime.clock import Clock
from jobqueue.store import circuits as circuit_store
from jobqueue.store.circuits import Blocking
from jobqueue.store.jobs import Attempt
from jobqueue.worker.executor import COMPLETED, SNOOZED, Outcome
from jobqueue.worker.shared_state import SharedStateCopy

log = logging.getLogger("jobqueue.worker.circuits")

#: Claims one job of the given types on the given connection (`Claimer.claim_probe`).
ClaimProbe = Callable[..., Awaitable[list[Job]]]


class _NoProbeJob(Exception):
    """No job to probe with: roll the half-open transition back."""


class Breakers(SharedStateCopy[list[Blocking]]):
    what = "the circuit breakers"

    def __init__(
        self,
        pool,
        app: JobQueue,
        *,
        interval: float,
        retry_probe_after: float,
        on_unblocked: Callable[[], None] = lambda: None,
        clock: Clock | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(pool, interval=interval, log=log)
        self._handled = frozenset(app.tasks)
        self.app = app
        self.retry_probe_after = retry_probe_after
        self._on_unblocked = on_unblocked
        self._clock = clock
        self._monotonic = monotonic
        #: job types of circuits not closed: the claim skips them
        self.blocked: list[str] = []
        self.circuits: dict[str, Blocking] = {}
        self._probe_at: dict[str, float] = {}  # circuit → monotonic time its probe falls due (from the database)
        self._retry_at: dict[str, float] = {}  # circuit → monotonic time before which this worker tries no probe again
        self._probes: dict[Attempt, str] = {}  # attempts this worker runs as probes → their circuit
        #: attempts finished but not yet handed to the acks, while their outcome is reported here
        #: (the worker still holds them: its heartbeat and a reconcile must count them)
        self.reporting: set[Attempt] = set()

    def _now(self):
        return self._clock.now() if self._clock is not None else None

    # --- the blocked set --------------------------------------------------------------------

    def sync(self) -> db.Call[list[circuit_store.Overruled]]:
        """The statement that writes the app's breakers and job types (run at worker start): its
        own, never another app's (see circuit_sync)."""
        return circuit_store.sync(list(self.app.circuits.values()), self.app.circuit_by_type(), app=self.app.name)

    def _read(self) -> db.Call[list[Blocking]]:
        """The circuits that are not closed."""
        return circuit_store.blocking(now=self._now())

    def _apply(self, rows: list[Blocking], read_at: float | None = None) -> None:
        """``read_at``: the monotonic time of the read (now), from which probes fall due."""
        read_at = self._monotonic() if read_at is None else read_at
        circuits = {row.name: row for row in rows}
        for name, row in circuits.items():
            before = self.circuits.get(name)
            if before is None or (before.state, before.forced_by_admin) != (row.state, row.forced_by_admin):
                log.warning(
                    "circuit %r is %s%s: not claiming %s",
                    name,
                    row.state.replace("_", "-"),
                    " (held open by an operator)" if row.forced_by_admin else "",
                    ", ".join(row.job_types),
                )
            if row.probe_in is None:
                self._probe_at.pop(name, None)
            else:
                self._probe_at[name] = read_at + row.probe_in
        for name in self.circuits.keys() - circuits.keys():
            log.info("circuit %r is closed: claiming %s again", name, ", ".join(self.circuits[name].job_types))
            self._probe_at.pop(name, None)
            self._retry_at.pop(name, None)
        blocked = sorted({job_type for row in rows for job_type in row.job_types})
        unblocked = set(self.blocked) - set(blocked)
        self.circuits, self.blocked = circuits, blocked
        if unblocked:
            self._on_unblocked()

    # --- probes -------------------------------------------------------------------------------

    def next_probe_in(self) -> float | None:
        """Seconds until this worker may try a probe (None: no circuit it can probe)."""
        due = [self._due(name) for name in self._probe_at if self._probe_types(name)]
        return max(min(due) - self._monotonic(), 0.0) if due else None

    def _due(self, name: str) -> float:
        """When this worker may try the circuit's probe: when it is due, and not soon after a try."""
        return max(self._probe_at[name], self._retry_at.get(name, 0.0))

    def _probe_types(self, name: str) -> list[str]:
        row = self.circuits.get(name)
        return [t for t in row.job_types if t in self._handled] if row is not None else []

    async def probe(self, queues: Sequence[str], limit: int, claim_probe: ClaimProbe) -> list[Job]:
        """Probe jobs of the circuits due for one, at most ``limit``; errors propagate (the claim
        loop treats them as a claim's: the transaction may have committed)."""
        started: list[Job] = []
        now = self._monotonic()
        for name in list(self._probe_at):
            if len(started) >= limit or not queues:
                break
            types = self._probe_types(name)
            if self._due(name) > now or not types:
                continue
            self._retry_at[name] = now + self.retry_probe_after
            job = await self._try_probe(self.circuits[name], queues, types, claim_probe)
            if job is not None:
                log.info("circuit %r: half-open, job %s (%s) probes it", name, job.id, job.job_type)
                self._probes[job.key] = name
                started.append(job)
        return started

    async def _try_probe(
        self, row: Blocking, queues: Sequence[str], types: list[str], claim_probe: ClaimProbe
    ) -> Job | None:
        stale = row.probe_job_id if row.state == HALF_OPEN else None
        try:
            async with db.connection(self._pool) as conn, conn.transaction():
                if await db.run(conn, circuit_store.probe_begin(row.name, stale_probe=stale, now=self._now())) is None:
                    return None  # another worker won it, or an operator holds it open
                jobs = await claim_probe(conn, queues, types)
                if not jobs:
                    raise _NoProbeJob
                await db.run(conn, circuit_store.probe_claimed(row.name, jobs[0].id))
        except _NoProbeJob:
            return None
        return jobs[0]

    # --- outcomes -----------------------------------------------------------------------------

    async def report(self, job: Job, task: TaskDef | None, outcome: Outcome) -> None:
        """Tell the breaker what this attempt says about its dependency (nothing for most jobs).
        Never raises: the job's ack comes next whatever happens here."""
        probe_of = self._probes.pop(job.key, None)
        breaker = task.circuit if task is not None else None
        if probe_of is not None:
            result = (
                "success"
                if outcome.kind == COMPLETED
                else "failure"
                if outcome.kind == SNOOZED or outcome.counts_failure
                else "inconclusive"
            )
            call = circuit_store.probe_finished(probe_of, job.id, result, now=self._now())
        elif breaker is not None and outcome.kind == SNOOZED:
            call = circuit_store.trip(breaker.name, now=self._now())
        elif breaker is not None and outcome.counts_failure:
            call = circuit_store.record_failure(breaker.name, now=self._now())
        else:
            return
        name = probe_of or (breaker.name if breaker else "")
        self.reporting.add(job.key)
        try:
            async with db.connection(self._pool) as conn:
                state = await db.run(conn, call)
        except Exception as exc:  # an outage, or the table gone: the ack must still be written
            log.warning("circuit %r: could not record job %s's outcome (%s)", name, job.id, exc)
            return
        finally:
            self.reporting.discard(job.key)
        if probe_of is not None or state == OPEN:  # it changed: act on it before the next claim
            await self.refresh()
