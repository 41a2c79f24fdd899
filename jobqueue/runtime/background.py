"""Background tasks that must run until cancelled (ack flushing, heartbeats, LISTEN, maintenance,
the API's depth refresher): `watch` says so loudly when one ends on its own.

Without it an exception ends such a task silently: asyncio keeps it until shutdown gathers it
with ``return_exceptions=True``, and meanwhile a worker claims jobs it can no longer ack, or an
API process admits against depths it no longer refreshes.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Callable

log = logging.getLogger("jobqueue.background")


def watch(
    task: asyncio.Task, on_death: Callable[[], None] | None = None, *, fatal: tuple[type[BaseException], ...] = ()
) -> asyncio.Task:
    """Log an unexpected end of ``task`` with its exception and call ``on_death`` (a worker stops
    gracefully: its supervisor or orchestrator starts a fresh one). An exception of a ``fatal``
    type is not logged: the owner raises it once stopped (one line, no traceback)."""

    def ended(finished: asyncio.Task) -> None:
        if finished.cancelled():
            return
        exc = finished.exception()
        if fatal and isinstance(exc, fatal):
            if on_death is not None:
                on_death()
            return
        log.error(
            "background task %s ended unexpectedly: %r",
            finished.get_name(),
            exc,
            exc_info=(type(exc), exc, exc.__traceback__) if exc else None,
        )
        if on_death is not None:
            on_death()

    task.add_done_callback(ended)
    return task
