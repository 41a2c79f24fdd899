"""Time as the maintenance services see it, injectable so tests never wait real minutes.

`SystemClock` is wall-clock UTC and sleeps with asyncio (woken early by an event). `ManualClock`
stands still until a test moves it; its sleepers wake when it passes their deadline, so a test can
drive a scheduler through a month of ticks in a second.

`db_now()` is the time to compare the database's own timestamps with (heartbeats, leases): None
for the system clock, so the statement uses the server's ``now()`` — a host whose clock is off
must not judge times the database wrote — and the test's time for a manual clock.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(timezone.utc)

    def db_now(self) -> datetime | None:
        return None

    async def sleep(self, seconds: float, wake: asyncio.Event) -> None:
        """Sleep `seconds`, or less when `wake` is set."""
        if wake.is_set():
            return
        try:
            await asyncio.wait_for(wake.wait(), max(seconds, 0.0))
        except asyncio.TimeoutError:
            pass


class ManualClock:
    """A clock that moves only when told (`set`, `advance`). Safe to move from another thread."""

    def __init__(self, start: datetime) -> None:
        if start.tzinfo is None:
            raise ValueError("ManualClock needs a timezone-aware start")
        self._now = start

    def now(self) -> datetime:
        return self._now

    def db_now(self) -> datetime | None:
        return self._now

    def set(self, when: datetime) -> None:
        self._now = when

    def advance(self, seconds: float) -> datetime:
        self._now += timedelta(seconds=seconds)
        return self._now

    async def sleep(self, seconds: float, wake: asyncio.Event) -> None:
        deadline = self._now + timedelta(seconds=max(seconds, 0.0))
        while self._now < deadline and not wake.is_set():
            await asyncio.sleep(0.001)


Clock = SystemClock | ManualClock
