"""One watch for the deadlines of every running attempt, instead of a timer per attempt.

`asyncio.timeout()` around each handler cost a timer handle, a context manager and a reschedule
per job: about a tenth of a no-op drain's worker CPU (py-spy). Here an attempt's deadline is one
dict entry; a single loop ticks every ``resolution`` seconds, does nothing unless the earliest
deadline has passed, and then cancels the tasks whose deadline it was, marking them `expired` so
the executor reports a `JobTimeout` — not the worker's own cancellation at shutdown. Deadlines
are kept to within ``resolution`` (50 ms).
"""

from __future__ import annotations

import asyncio
import math
import time


class DeadlineWatch:
    def __init__(self, resolution: float = 0.05) -> None:
        self.resolution = resolution
        self._deadlines: dict[asyncio.Task, float] = {}
        self._earliest = math.inf
        self._expired: set[asyncio.Task] = set()

    def watch(self, task: asyncio.Task, timeout: float | None) -> None:
        if timeout is None:
            return
        at = time.monotonic() + timeout
        self._deadlines[task] = at
        if at < self._earliest:
            self._earliest = at

    def forget(self, task: asyncio.Task) -> None:
        self._deadlines.pop(task, None)
        self._expired.discard(task)

    def expired(self, task: asyncio.Task) -> bool:
        """Was ``task`` cancelled because its deadline passed (rather than by someone else)?"""
        return task in self._expired

    def expire_due(self, now: float | None = None) -> int:
        """Cancel the tasks whose deadline has passed; how many."""
        now = time.monotonic() if now is None else now
        if now < self._earliest:
            return 0
        due = [task for task, at in self._deadlines.items() if at <= now]
        for task in due:
            del self._deadlines[task]
            self._expired.add(task)
            task.cancel()
        self._earliest = min(self._deadlines.values(), default=math.inf)
        return len(due)

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.resolution)
            self.expire_due()
