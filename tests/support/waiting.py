"""Waiting for conditions instead of sleeping for guessed durations."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Awaitable, Callable


def wait_until(
    predicate: Callable[[], Any], timeout: float = 10.0, interval: float = 0.02, message: str = "condition"
) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {message}")
        time.sleep(interval)


async def async_wait_until(
    predicate: Callable[[], Awaitable[Any]], timeout: float = 10.0, interval: float = 0.02, message: str = "condition"
) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = await predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {message}")
        await asyncio.sleep(interval)
