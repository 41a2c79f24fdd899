"""The one shape every maintenance service has: options with defaults, `run_once`, a jittered loop.

Each service module has a small frozen dataclass of options with their defaults (``SweeperOptions``,
``PrunerOptions``, …; `Maintenance` builds them from the settings), documented in its docstring
with whether the service runs on the leader only (``leader_only``). A service does one bounded
piece of work per `run_once` and returns what it did: a small frozen result of its own
(``Swept``, ``Pruned``, …) that tests read. Its ``count`` says whether the run did something worth an
operator's attention (above zero) and its ``describe()`` says what, in words: the loop logs
``"<service>: <what it did>"`` (``scheduler: enqueued 1 cron job(s) for 1 due schedule(s)``) at INFO
when the count is above zero, and at DEBUG otherwise, so a service that runs every second with
nothing to do writes no INFO line (a bare ``scheduler: 1`` said nothing, and the gatekeeper's
``gatekeeper: -1`` came every second). The loop, here and nowhere else, runs it every `interval`
seconds (plus up to `jitter` of that, so many processes never line up) and only while this process
is the leader, when the service is leader-only. `wake()` cuts the
current sleep short (a NOTIFY, or this process becoming leader); a service that knows when its
next work is due (the scheduler) overrides `next_delay`. Time comes from an injectable clock, so
tests drive services without waiting. A database outage is logged and retried on the next tick,
never fatal.
"""

from __future__ import annotations

import abc
import asyncio
import logging
import random
from typing import Callable, Generic, Protocol, TypeVar

from jobqueue.model.errors import DatabaseUnavailable, PermissionDenied
from jobqueue.runtime.clock import Clock, SystemClock

log = logging.getLogger("jobqueue.maintenance")


class Result(Protocol):
    """What one run did."""

    @property
    def count(self) -> int:
        """How many items it touched or changed: above 0, the loop logs `describe` at INFO."""

    def describe(self) -> str:
        """What the run did, in words, for the log line (``enqueued 2 cron job(s)``)."""


def said(*parts: tuple[int, str], nothing: str = "nothing to do") -> str:
    """The parts whose number is not zero, as ``"<n> <what>"`` joined by commas, or ``nothing``:
    the one way every result puts its counts into words."""
    return ", ".join(f"{n:,} {what}" for n, what in parts if n) or nothing


R = TypeVar("R", bound=Result, covariant=True)


class Service(abc.ABC, Generic[R]):
    name = "service"
    leader_only = True

    def __init__(self, *, interval: float, jitter: float = 0.1, clock: Clock | None = None) -> None:
        self.interval = interval
        self.jitter = jitter
        self.clock = clock or SystemClock()
        self._wake = asyncio.Event()

    @abc.abstractmethod
    async def run_once(self) -> R:
        """Do one bounded batch of work; return what it did."""

    def next_delay(self) -> float:
        """Seconds to sleep after a run (a jittered interval unless the service knows better)."""
        return self.idle_delay()

    def idle_delay(self) -> float:
        return self.interval * (1 + random.random() * self.jitter)

    def retry_delay(self) -> float:
        """Seconds to wait after a failed run."""
        return self.idle_delay()

    def wake(self) -> None:
        self._wake.set()

    async def run(self, is_leader: Callable[[], bool]) -> None:
        while True:
            self._wake.clear()
            delay = self.idle_delay()
            if is_leader() or not self.leader_only:
                try:
                    result = await self.run_once()
                    if result.count > 0:
                        log.info("%s: %s", self.name, result.describe())
                    elif log.isEnabledFor(logging.DEBUG):
                        log.debug("%s: %s", self.name, result.describe())
                    delay = self.next_delay()
                except DatabaseUnavailable as exc:
                    log.warning("%s: database unavailable (%s)", self.name, exc)
                    delay = self.retry_delay()
                except PermissionDenied as exc:  # a role without the grant: what is missing, not a traceback
                    log.error("%s: %s (docs/security.md, Roles)", self.name, exc)
                    delay = self.retry_delay()
                except Exception:
                    log.exception("%s failed", self.name)
                    delay = self.retry_delay()
            await self.clock.sleep(delay, self._wake)
