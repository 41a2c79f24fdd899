"""One watch for the deadlines of every running attempt, instead of a timer per attempt.

`asyncio.timeout()` around each handler cost a timer handle, a context manager and a reschedule
per job: about a tenth of a no-op drain's worker CPU (py-spy). Here an attempt's deadline is one
dict entry; a single loop ticks every ``resolution`` seconds, does nothing unless the earliest
deadline has passed, and then cancels the tasks whose deadline it was, marking them `expired` so
the executor reports a `JobTimeout` — not the worker's own cancellation at shutdown. Deadlines
are kept to within ``resolution`` (50 ms).

A task that is still running ``grace`` seconds after its deadline cancelled it has swallowed the
cancellation (an async handler catching `asyncio.CancelledError`): it is handed to ``on_overdue``
once, which treats it as a stuck handler (the worker gives its slot back, fails its attempt and
counts it, as for a sync handler's thread that cannot be stopped).
"""

from __future__ import annotations

import asyncio
import math
import time
from typing import Callable


class DeadlineWatch:
    def __init__(
        self, resolution: float = 0.05, *, grace: float = 0.0, on_overdue: Callable[[asyncio.Task], None] | None = None
    ) -> None:
        self.resolution = resolution
        self.grace = grace
        self._on_overdue = on_overdue
        self._deadlines: dict[asyncio.Task, float] = {}
        self._overdue_at: dict[asyncio.Task, float] = {}  # cancelled at their deadline: done by then?
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
        self._overdue_at.pop(task, None)
        self._expired.discard(task)

    def expired(self, task: asyncio.Task) -> bool:
        """Was ``task`` cancelled because its deadline passed (rather than by someone else)?"""
        return task in self._expired

    def expire_due(self, now: float | None = None) -> int:
        """Cancel the tasks whose deadline has passed, and hand on those still running past it
        and the grace; how many were cancelled."""
        now = time.monotonic() if now is None else now
        if now < self._earliest:
            return 0
        due = [task for task, at in self._deadlines.items() if at <= now]
        for task in due:
            at = self._deadlines.pop(task)
            self._expired.add(task)
            task.cancel()
            if self._on_overdue is not None:
                self._overdue_at[task] = at + self.grace
        for task in [task for task, at in self._overdue_at.items() if at <= now]:
            del self._overdue_at[task]
            if not task.done():
                self._on_overdue(task)  # type: ignore[misc]  # only filled with a callback
        self._earliest = min(
            min(self._deadlines.values(), default=math.inf), min(self._overdue_at.values(), default=math.inf)
        )
        return len(due)

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.resolution)
            self.expire_due()
