"""`Elector`: decides which process runs the leader-only maintenance services.

Leadership is a row in ``jobqueue.leaders`` with an expiry (a lease, not a session advisory lock,
so it works behind PgBouncer in transaction mode). The leader renews it every third of its TTL;
a candidate tries to take it at the same pace, and at once when a leader resigns (it NOTIFYs on
``jobqueue_leader`` when it shuts down cleanly). A leader that cannot renew (database unreachable)
stops considering itself leader when its own lease would have run out, so two processes never
act as leader at the same time for longer than clock skew between them.

Options: ``ttl`` seconds (default 15), ``name`` of the role (default "maintenance").
Runs in every worker process and in `jobqueue maintenance`; only one of them leads.
"""

from __future__ import annotations

import asyncio
import logging
import time

from jobqueue import db
from jobqueue.errors import DatabaseUnavailable
from jobqueue.store import leader as leader_store

log = logging.getLogger("jobqueue.leader")


class Elector:
    def __init__(self, pool, leader_id: str, *, name: str = "maintenance", ttl: float = 15.0) -> None:
        self._pool = pool
        self.leader_id = leader_id
        self.name = name
        self.ttl = ttl
        self._valid_until = 0.0
        self._wake = asyncio.Event()
        self.changed = asyncio.Event()

    @property
    def is_leader(self) -> bool:
        return time.monotonic() < self._valid_until

    def on_leader_notification(self, name: str) -> None:
        if name == self.name:
            self._wake.set()

    async def attempt(self) -> bool:
        was_leader = self.is_leader
        started = time.monotonic()
        try:
            async with db.connection(self._pool) as conn:
                won = await db.run(conn, leader_store.attempt_elect(
                    name=self.name, leader_id=self.leader_id, ttl_seconds=self.ttl))
        except DatabaseUnavailable as exc:
            log.warning("leader election for %s failed: %s", self.name, exc)
            won = False
            if was_leader and self.is_leader:
                return True  # keep acting until our lease would have run out
        self._valid_until = started + self.ttl if won else 0.0
        if won != was_leader:
            log.info("%s %s leadership of %s", self.leader_id, "gained" if won else "lost", self.name)
            self.changed.set()
        return won

    async def run(self) -> None:
        while True:
            await self.attempt()
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), self.ttl / 3)
            except asyncio.TimeoutError:
                pass

    async def resign(self) -> None:
        if not self.is_leader:
            return
        self._valid_until = 0.0
        try:
            async with db.connection(self._pool) as conn:
                await db.run(conn, leader_store.resign(name=self.name, leader_id=self.leader_id))
        except DatabaseUnavailable:
            pass
