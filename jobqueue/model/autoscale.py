"""The autoscaling rule from the design notes, as one pure decision shared by a worker's slots and the fleet.

Two signals, measured over the same set of workers:
- depth per worker: runnable jobs (pending, or failed and due — what load shedding and
  ``jobqueue_queue_depth`` count; backpressure counts scheduled jobs too) divided by the live workers serving the queue.
  Above
  ``up_depth`` (100) it asks for more, below ``down_depth`` (10) for fewer.
- utilization: the busy share of the slots over the last window (0..1). Above ``up_utilization``
  (0.9) it asks for more, below ``down_utilization`` (0.2) for fewer.

`Rule.direction` combines them asymmetrically, as the cooldowns are: **up when either signal asks
for more** (a backlog, or slots that are all busy); **down only when both ask for fewer** (a small
backlog alone does not remove busy slots, idle slots alone do not when jobs wait). Otherwise hold.
`Rule.next` moves by ``step`` (2) and clamps to the bounds.

`Scaler` adds the cooldowns for a controller that acts on its own decisions (a worker's slots):
an increase only when ``up_cooldown`` (30 s) has passed since the last change, a decrease only
when ``down_cooldown`` (5 min) has — so a scale-up is never undone within five minutes. The clock
is injectable, so tests step time instead of sleeping.

The fleet's ``jobqueue_desired_workers`` gauge applies `Rule.next` to the live worker count with
bounds 2..100 (JOBQUEUE_AUTOSCALE_MIN_WORKERS / _MAX_WORKERS): a stateless answer to "how many
workers now", whose cooldowns are the platform's (the HPA behaviour in deploy/k8s/).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

UP, HOLD, DOWN = 1, 0, -1


@dataclass(frozen=True, slots=True)
class Rule:
    up_depth: float = 100.0
    down_depth: float = 10.0
    up_utilization: float = 0.9
    down_utilization: float = 0.2
    step: int = 2

    def __post_init__(self) -> None:
        if not 0 <= self.down_depth < self.up_depth:
            raise ValueError("autoscaling depth thresholds: 0 <= down < up")
        if not 0 <= self.down_utilization < self.up_utilization <= 1:
            raise ValueError("autoscaling utilization thresholds: 0 <= down < up <= 1")
        if self.step < 1:
            raise ValueError("the autoscaling step must be at least 1")

    def direction(self, depth_per_worker: float, utilization: float) -> int:
        """UP, DOWN or HOLD for these signals (see the module docstring)."""
        if depth_per_worker > self.up_depth or utilization > self.up_utilization:
            return UP
        if depth_per_worker < self.down_depth and utilization < self.down_utilization:
            return DOWN
        return HOLD

    def next(self, current: int, depth_per_worker: float, utilization: float, *, low: int, high: int) -> int:
        """``current`` moved one step in the signals' direction, within ``low``..``high``."""
        return max(low, min(high, current + self.step * self.direction(depth_per_worker, utilization)))


def depth_per_worker(runnable: int, workers: int) -> float:
    """Runnable jobs per live worker; with no worker alive, every job counts against one."""
    return runnable / max(workers, 1)


class Scaler:
    """The slot count of one worker: starts at ``low``, moves by the rule under the cooldowns."""

    def __init__(
        self,
        low: int,
        high: int,
        *,
        rule: Rule = Rule(),
        up_cooldown: float = 30.0,
        down_cooldown: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not 1 <= low <= high:
            raise ValueError(f"autoscaling bounds must satisfy 1 <= min <= max (got {low}:{high})")
        if up_cooldown < 0 or down_cooldown < 0:
            raise ValueError("autoscaling cooldowns must not be negative")
        self.low, self.high = low, high
        self.rule = rule
        self.up_cooldown = up_cooldown
        self.down_cooldown = down_cooldown
        self._clock = clock
        self.target = low
        self._changed_at: float | None = None  # no change yet: the first move is never held back

    def observe(self, depth_per_worker: float, utilization: float) -> int:
        """Take one decision from the signals; returns the (possibly new) target."""
        wanted = self.rule.next(self.target, depth_per_worker, utilization, low=self.low, high=self.high)
        if wanted == self.target:
            return self.target
        cooldown = self.up_cooldown if wanted > self.target else self.down_cooldown
        now = self._clock()
        if self._changed_at is not None and now - self._changed_at < cooldown:
            return self.target
        self.target = wanted
        self._changed_at = now
        return self.target
