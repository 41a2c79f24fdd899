"""`Elector`: decides which process runs the leader-only maintenance services.

Leadership is a row in ``jobqueue.leaders`` with an expiry (a lease, not a session advisory lock,
so it works behind PgBouncer in transaction mode). The leader renews it every third of its TTL.
A candidate that loses learns when the current lease runs out and tries again right then, so
when a leader dies its successor takes over within one TTL of its last renewal; when a leader
shuts down cleanly it resigns and NOTIFYs ``jobqueue_leader``, and a candidate takes over at once.
A leader that cannot renew (database unreachable) stops considering itself leader when its own
lease would have run out, so two processes never act as leader at the same time for longer than
clock skew between them. Listeners (`on_change`) hear of every gain and loss — the maintenance
runner wakes its services with it, so a new leader starts work at once.

Options: ``ttl`` seconds (default 15, `JOBQUEUE_LEADER_TTL`), ``name`` of the role (default
"maintenance"). Runs in every worker process and in `jobqueue maintenance`; only one of them leads.

It is not a `Service`, though it has the same parts (`attempt` is its run_once, returning whether
this process leads; `run` its loop): every other service runs at an interval and only while this
process leads, and logs and retries whatever fails, while the elector runs everywhere, at the
cadence the lease sets (a third of the TTL, or right when the current lease runs out), and only an
outage is retried: any other failure ends the maintenance runner, as it always did.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Callable

from jobqueue.db import gateway as db
from jobqueue.model.errors import DatabaseUnavailable
from jobqueue.store import leader as leader_store

log = logging.getLogger("jobqueue.leader")

_AFTER_EXPIRY = 0.01  # seconds past the observed expiry before trying again


class Elector:
    def __init__(self, pool, leader_id: str, *, name: str = "maintenance", ttl: float = 15.0) -> None:
        if ttl <= 0:
            raise ValueError("the leader TTL must be positive")
        self._pool = pool
        self.leader_id = leader_id
        self.name = name
        self.ttl = ttl
        self._valid_until = 0.0
        self._retry_in = ttl / 3
        self._wake = asyncio.Event()
        self._listeners: list[Callable[[bool], None]] = []

    @property
    def is_leader(self) -> bool:
        return time.monotonic() < self._valid_until

    def on_change(self, listener: Callable[[bool], None]) -> None:
        """Call ``listener(is_leader)`` whenever this process gains or loses leadership."""
        self._listeners.append(listener)

    def on_leader_notification(self, name: str) -> None:
        if name == self.name:
            self._wake.set()

    async def attempt(self) -> bool:
        was_leader = self.is_leader
        started = time.monotonic()
        try:
            async with db.connection(self._pool) as conn:
                won, expires_in = await db.run(
                    conn, leader_store.attempt_elect(name=self.name, leader_id=self.leader_id, ttl_seconds=self.ttl)
                )
        except DatabaseUnavailable as exc:
            log.warning("leader election for %s failed: %s", self.name, exc)
            self._retry_in = self.ttl / 3
            if was_leader and self.is_leader:
                return True  # keep acting until our lease would have run out
            won = False
        else:
            # A candidate comes back when the current lease runs out (or at once on a resign).
            self._retry_in = (
                self.ttl / 3
                if won or expires_in is None
                else min(max(expires_in + _AFTER_EXPIRY, _AFTER_EXPIRY), self.ttl)
            )
        self._valid_until = started + self.ttl if won else 0.0
        # An answer that took longer than the TTL (a pool wait through a failover) is a lease that
        # may already belong to another process: not leadership, and not announced as such.
        won = won and self.is_leader
        if won != was_leader:
            log.info("%s %s leadership of %s", self.leader_id, "gained" if won else "lost", self.name)
            for listener in self._listeners:
                listener(won)
        return won

    async def run(self) -> None:
        while True:
            self._wake.clear()
            await self.attempt()
            try:
                await asyncio.wait_for(self._wake.wait(), self._retry_in)
            except asyncio.TimeoutError:
                pass

    async def resign(self) -> None:
        if not self.is_leader:
            return
        self._valid_until = 0.0
        try:
            async with db.connection(self._pool, timeout=db.SHUTDOWN_WAIT) as conn:
                await db.run(conn, leader_store.resign(name=self.name, leader_id=self.leader_id))
        except DatabaseUnavailable:
            pass
