"""`SharedStateCopy`: a worker's copy of state every worker shares through the database (open
circuit breakers, whether limits apply), kept fresh the same way for each.

It is re-read when a NOTIFY says the state changed (or the notifier reconnected, which may have
missed one: `request_refresh`; several in a row make one read), and every ``interval`` seconds as
the fallback when LISTEN is down. A read that fails keeps the last known copy: the worker goes on
with what it knew rather than stop claiming, and each user of a copy must be safe with a stale one.
"""

from __future__ import annotations

import abc
import asyncio
import logging
from typing import Generic, TypeVar

from jobqueue.db import gateway as db
from jobqueue.model.errors import DatabaseUnavailable, NotMigrated

T = TypeVar("T")


class SharedStateCopy(abc.ABC, Generic[T]):
    #: what is read, for the log ("the circuit breakers")
    what = "the shared state"

    def __init__(self, pool, *, interval: float, log: logging.Logger) -> None:
        self._pool = pool
        self.interval = interval
        self._log = log
        self._wanted = asyncio.Event()

    @abc.abstractmethod
    def sync(self) -> db.Call[list[tuple[str, str, str]]]:
        """The statement that writes the app's declarations, returning those it left to another app."""

    async def declare(self, conn, app: str) -> None:
        """Write the app's declarations (at worker start). One a live worker of another app made
        differently stays as that app made it (each app's declarations are its own): said here."""
        log_overruled(self._log, await db.run(conn, self.sync()), app)

    @abc.abstractmethod
    def _read(self) -> db.Call[T]:
        """The statement that reads the state."""

    @abc.abstractmethod
    def _apply(self, value: T) -> None:
        """Take a fresh read as the worker's copy."""

    def request_refresh(self, _payload: str = "") -> None:
        """A NOTIFY (or a reconnect): re-read soon."""
        self._wanted.set()

    async def run(self) -> None:
        """Re-read when asked, and every ``interval`` seconds regardless."""
        while True:
            try:
                await asyncio.wait_for(self._wanted.wait(), self.interval)
            except asyncio.TimeoutError:
                pass
            self._wanted.clear()
            await self.refresh()

    async def refresh(self) -> None:
        """Read now; keep the last known copy when that fails."""
        try:
            async with db.connection(self._pool) as conn:
                value = await db.run(conn, self._read())
        except (DatabaseUnavailable, NotMigrated) as exc:
            self._log.warning("reading %s failed (%s); keeping the last known state", self.what, exc)
            return
        except Exception:  # refused by the server: the worker goes on with what it knew
            self._log.exception("reading %s failed; keeping the last known state", self.what)
            return
        self._apply(value)


def log_overruled(log: logging.Logger, overruled: list[tuple[str, str, str]], app: str) -> None:
    """One warning per declaration (what, name, owning app) that a live worker of another app made
    differently: it stays as that app made it, and this app's start says so."""
    for what, name, owner in overruled:
        log.warning(
            "%s %r is declared otherwise by app %r, whose workers are running: it keeps that "
            "app's settings, not those of app %r (give it another name, or declare it alike)",
            what,
            name,
            owner,
            app,
        )
