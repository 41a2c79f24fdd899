"""Submission quotas: what counts toward a queue's limits, the limits, and when the bounded count
of waiting jobs must be redone. No I/O: the REST API's admission (`jobqueue.api.backpressure`)
and the maintenance leader's gates for every other path (`jobqueue.maintenance.gatekeeper`) both
decide with this.

- **What counts**: every waiting job — ``pending`` whether due or scheduled for later, and
  ``failed`` waiting for its retry (`jobs_claim_idx`, one capped count per queue). Scheduled jobs
  are stored like any other, so a queue that counted only runnable ones took every far-future
  job it was sent (a queue with hard limit 10 held 40 after 44 s, and grew on). Load shedding and
  autoscaling still measure the runnable depth: they are about the workers' load, not storage.
- **The limits**: per queue a soft and a hard limit (`jobqueue.queue_settings`, else
  ``JOBQUEUE_API_SOFT_LIMIT`` / ``_HARD_LIMIT``), the same two over all queues together
  (``JOBQUEUE_API_TOTAL_*``), and at most ``JOBQUEUE_API_MAX_QUEUES`` *undeclared* queues holding
  jobs: a queue is declared when a live worker serves it or an admin configured it (it has a
  ``queue_settings`` row). Past that a new queue name is refused; declared queues and queues that
  already hold jobs are not. Every queue is a row of /queues, a series per priority in /metrics
  and a probe in every count, and a name costs a producer nothing to invent.
- **When to count again** (`Recount`): counting walks every waiting entry (up to the cap), so it
  runs only when it could change a decision. The job sequence is free to read and no queue can
  have grown by more jobs than were submitted since the last count; the count is redone when
  that growth could reach a threshold, and at least every ``max_age`` seconds for what the
  sequence does not show (jobs finished, deleted or reclaimed, queues drained).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping

from jobqueue.model.queues import QueueSettings

#: The reasons a submission is refused for a full queue (REST ``error``, `QueueFull.reason`).
QUEUE_FULL, TOTAL_FULL, TOO_MANY_QUEUES = "queue_full", "total_full", "too_many_queues"
#: The queue of a gate that holds for every queue ('' is no queue's name).
EVERY_QUEUE = ""


@dataclass(frozen=True, slots=True)
class WaitingCounts:
    """One count: waiting jobs per queue (each capped), and the queues live workers serve."""

    depths: dict[str, int]
    served: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Gate:
    """A closed gate: ``queue`` ('' for every queue) refuses jobs for ``reason``; ``waiting`` is
    what the count found, ``quota`` the limit it reached."""

    queue: str
    reason: str
    waiting: int
    quota: int


@dataclass(frozen=True, slots=True)
class Limits:
    """The limits in force: defaults (the ``JOBQUEUE_API_*`` settings: `jobqueue.api.backpressure`
    builds them), overridden per queue by ``queue_settings``."""

    soft: int
    hard: int
    total_soft: int
    total_hard: int
    max_queues: int
    queue_settings: Mapping[str, QueueSettings] = field(default_factory=dict)

    def of(self, queue: str) -> tuple[int, int]:
        """(soft, hard) of one queue; the soft limit never above the hard one."""
        custom = self.queue_settings.get(queue)
        soft = custom.soft_limit if custom and custom.soft_limit else self.soft
        hard = custom.hard_limit if custom and custom.hard_limit else self.hard
        return min(soft, hard), hard

    def total(self) -> tuple[int, int]:
        """(soft, hard) of all queues' waiting jobs together."""
        return min(self.total_soft, self.total_hard), self.total_hard

    def cap(self) -> int:
        """Where a count of one queue may stop: just above the highest hard limit."""
        return max([self.hard] + [s.hard_limit for s in self.queue_settings.values() if s.hard_limit]) + 1

    def within_reach(self, depths: Mapping[str, int], undeclared: int, growth: int, *, hard: bool) -> bool:
        """Could ``growth`` more jobs, in any queues, bring one queue or all of them to a limit —
        the soft ones (throttling begins) or, with ``hard``, the hard ones (a gate closes) — or
        add one undeclared queue too many (a new queue takes at least one job)?"""
        level = 1 if hard else 0
        unseen = self.hard if hard else min(self.soft, self.hard)  # a queue the last count did not see
        if growth >= unseen or undeclared + growth >= self.max_queues:
            return True
        if sum(depths.values()) + growth >= self.total()[level]:
            return True
        return any(
            depths.get(queue, 0) + growth >= self.of(queue)[level]
            for queue in depths.keys() | self.queue_settings.keys()
        )

    def declared(self, queue: str, served: frozenset[str]) -> bool:
        return queue in served or queue in self.queue_settings

    def undeclared(self, depths: Mapping[str, int], served: frozenset[str]) -> set[str]:
        """The queues holding jobs that no live worker serves and no admin configured."""
        return {queue for queue, n in depths.items() if n > 0 and not self.declared(queue, served)}


def closed_gates(counts: WaitingCounts, limits: Limits) -> list[Gate]:
    """The gates a count closes: each queue at its hard limit, all queues at the total hard limit,
    and new queue names once `Limits.max_queues` undeclared queues hold jobs."""
    gates = [
        Gate(queue, QUEUE_FULL, n, limits.of(queue)[1])
        for queue, n in sorted(counts.depths.items())
        if n >= limits.of(queue)[1]
    ]
    total, total_hard = sum(counts.depths.values()), limits.total()[1]
    if total >= total_hard:
        gates.append(Gate(EVERY_QUEUE, TOTAL_FULL, total, total_hard))
    undeclared = len(limits.undeclared(counts.depths, counts.served))
    if undeclared >= limits.max_queues:
        gates.append(Gate(EVERY_QUEUE, TOO_MANY_QUEUES, undeclared, limits.max_queues))
    return gates


class Recount:
    """When the waiting jobs must be counted again (see the module docstring). ``clock`` is
    monotonic seconds."""

    def __init__(self, *, max_age: float, clock: Callable[[], float]) -> None:
        self.max_age = max_age
        self._clock = clock
        # (clock, job sequence at the count before it) of the last count: growth is measured from
        # one count further back, so jobs inserted but not yet committed when the last count ran
        # (invisible to it, yet already in the sequence) are still counted as growth.
        self._counted: tuple[float, int] | None = None
        self._submitted_at_last_count = 0

    def needed(self, submitted: int, could_reach: Callable[[int], bool]) -> bool:
        """``submitted`` is the job sequence now; ``could_reach(growth)`` whether that many more
        jobs could bring some count to a threshold."""
        if self._counted is None:
            return True
        counted_at, counted_submitted = self._counted
        growth = submitted - counted_submitted
        if growth < 0 or self._clock() - counted_at >= self.max_age:
            return True
        return could_reach(growth)

    def started(self) -> float:
        """Call as a count starts; pass the value to `counted` once it is done."""
        return self._clock()

    def counted(self, started: float, submitted: int) -> None:
        self._counted = (started, self._submitted_at_last_count)
        self._submitted_at_last_count = submitted
