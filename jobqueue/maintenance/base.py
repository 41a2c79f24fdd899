"""The one shape every maintenance service has: options with defaults, `run_once`, a jittered loop.

A service does one bounded piece of work per `run_once` and returns how much it did; the loop
runs it every `interval` seconds (plus up to `jitter` of that, so many processes never line up)
and only while this process is the leader, when the service is leader-only. A database outage is
logged and retried on the next tick, never fatal.
"""

from __future__ import annotations

import abc
import asyncio
import logging
import random
from typing import Callable

from jobqueue.errors import DatabaseUnavailable

log = logging.getLogger("jobqueue.maintenance")


class Service(abc.ABC):
    name = "service"
    leader_only = True

    def __init__(self, *, interval: float, jitter: float = 0.1) -> None:
        self.interval = interval
        self.jitter = jitter

    @abc.abstractmethod
    async def run_once(self) -> int:
        """Do one bounded batch of work; return how many items it touched."""

    def next_delay(self) -> float:
        return self.interval * (1 + random.random() * self.jitter)

    async def run(self, is_leader: Callable[[], bool]) -> None:
        while True:
            if is_leader() or not self.leader_only:
                try:
                    done = await self.run_once()
                    if done:
                        log.info("%s: %d", self.name, done)
                except DatabaseUnavailable as exc:
                    log.warning("%s: database unavailable (%s)", self.name, exc)
                except Exception:
                    log.exception("%s failed", self.name)
            await asyncio.sleep(self.next_delay())
