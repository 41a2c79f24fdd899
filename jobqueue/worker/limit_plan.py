"""`LimitPlan`: how one claim under the global limits (`jobqueue.limits`) is split into statements,
and what it took of each limit (see `Claimer.claim_limited`, and `LimitWatch` for whether a
worker's claims go through the limits at all).

From what ``limit_allowances`` grants: for each group of queues (each limited queue alone, the
others together) one claim per limited job type with room (``only`` that type, at most its room),
then one claim of everything else (the limited types blocked). Limited types come first: their room
is small and bounded, so they cannot crowd the others out. It counts what each limit took (the
starts recorded for rates) and when to look again: when a rate's window frees a start
(``free_in``), or ``RECHECK`` seconds for a spent concurrency limit (its slots free up when other
workers' acks commit, which nothing announces).
"""

from __future__ import annotations

from typing import Sequence

from jobqueue.model.jobs import Job
from jobqueue.model.limits import Allowance

#: Seconds before a worker looks again at a concurrency limit that had no room.
RECHECK = 0.2
JOB_TYPE, QUEUE = "job_type", "queue"


class LimitPlan:
    """The statements of one limited claim, and what they took of each limit.

    Per group: first one claim of the group's budget (`budget`) in which only the limited types
    whose room is smaller than the budget are blocked (`rest_blocked`: a type with room for the
    whole claim cannot overflow, and scanning for it separately would only cost a second scan);
    then each of those with room (`typed`), no further than the first claim reached (`horizon`);
    then the first claim's tail goes back so the group takes no more than its budget.
    """

    def __init__(
        self, allowances: list[Allowance], queues: Sequence[str], free: int, blocked: Sequence[str] = ()
    ) -> None:
        self.room = {(a.scope, a.name): a.allowance for a in allowances}
        self.queues = list(queues)
        self.remaining = free
        self.blocked = list(blocked)
        self.limited_types = sorted(a.name for a in allowances if a.scope == JOB_TYPE)
        self.started = {key: 0 for key in self.room}
        rate_waits = [a.free_in for a in allowances if a.allowance <= 0 and a.free_in is not None]
        self._spent = any(a.allowance <= 0 for a in allowances)
        self._rate_wait = min(rate_waits) if rate_waits else None

    def groups(self) -> list[tuple[list[str], str | None]]:
        """(queues, the limited queue among them or None): each limited queue with room alone,
        then the unlimited ones together."""
        limited = [q for q in self.queues if (QUEUE, q) in self.room]
        free = [q for q in self.queues if (QUEUE, q) not in self.room]
        return [([q], q) for q in limited if self.room[(QUEUE, q)] > 0] + ([(free, None)] if free else [])

    def budget(self, queue: str | None) -> int:
        """How many jobs the group may take, all types together."""
        return min(self.remaining, self.room[(QUEUE, queue)]) if queue is not None else self.remaining

    def typed_room(self, job_type: str, budget_left: int) -> int:
        """How many jobs of ``job_type`` its claim may take in the group."""
        if job_type in self.blocked:
            return 0
        return min(budget_left, self.room[(JOB_TYPE, job_type)])

    def typed(self, budget: int) -> list[str]:
        """The limited types claimed on their own: those whose room is smaller than the budget."""
        return [t for t in self.limited_types if self.room[(JOB_TYPE, t)] < budget]

    def rest_blocked(self, budget: int) -> list[str]:
        return self.blocked + self.typed(budget)

    def rest_marks(self, queue: str | None, budget: int) -> bool:
        """Does the first claim take jobs that hold a slot (a limited queue, a limited type unblocked)?"""
        return queue is not None or len(self.typed(budget)) < len(self.limited_types)

    @staticmethod
    def horizon(rest: Sequence[Job], asked: int) -> tuple[int, tuple | None]:
        """How far the others' claim scanned: all of it when it came back short, else up to the
        last job it took (claims return jobs in priority, then submission, order)."""
        if len(rest) < asked or not rest:
            return 3, None
        return rest[-1].priority, rest[-1].order_key

    def took(self, jobs: Sequence[Job], queue: str | None, *, sign: int = 1) -> None:
        """Count ``jobs`` as claimed in the group (``sign=-1``: given back)."""
        self.remaining -= sign * len(jobs)
        for job in jobs:
            keys = [(QUEUE, queue)] if queue is not None else []
            if (JOB_TYPE, job.job_type) in self.room:
                keys.append((JOB_TYPE, job.job_type))
            for key in keys:
                self.room[key] -= sign
                self.started[key] += sign
                if self.room[key] <= 0:
                    self._spent = True

    def holds_slot(self, job: Job) -> bool:
        """Was ``job`` claimed under a limit (its ack frees a slot)?"""
        return (JOB_TYPE, job.job_type) in self.room or (QUEUE, job.queue) in self.room

    def recheck_in(self) -> float | None:
        """Seconds until a limit that had no room may have some (None: none was spent)."""
        if not self._spent:
            return None
        return min(RECHECK, self._rate_wait) if self._rate_wait is not None else RECHECK
