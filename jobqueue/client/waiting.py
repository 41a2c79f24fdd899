"""Waiting for a job to finish (`AsyncClient.wait`, and `Client.wait` through it), and what a
client answers for a finished job.

A client's waits share one `EventHub` — one LISTEN connection, opened by the first wait — and are
woken by their job's own events, not by polling: the job is read when waiting starts, on its final
event, and every `WAIT_RECHECK` seconds and after a reconnect in case an event was missed. Without
a LISTEN connection (``JOBQUEUE_LISTEN=0``) the job is read every `WAIT_POLL` seconds.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import replace
from typing import Any, Awaitable, Callable

from jobqueue.config import DbSettings
from jobqueue.crypto.envelopes import Binding, open_result
from jobqueue.crypto.keyring import KeyRing
from jobqueue.db import gateway as db
from jobqueue.events.hub import Connect, EventHub, EventsUnavailable, StoreRegistrar, Subscription
from jobqueue.model.errors import EncryptionError, JobFailed, WaitTimeout
from jobqueue.model.jobs import JobInfo, JobState

#: How often wait() reads the job anyway, in case its final event was missed; and how often it
#: polls when the process has no LISTEN connection.
WAIT_RECHECK = 5.0
WAIT_POLL = 0.5
_FINAL = (JobState.COMPLETED, JobState.DEAD_LETTER, JobState.CANCELLED)
_FINAL_EVENTS = ("job.completed", "job.dead_letter", "job.cancelled")


def outcome(info: JobInfo, keys: Any) -> Any:
    """What wait() answers for a finished job: its result (decrypted; `EncryptionKeyMissing` when
    this client lacks the key), or `JobFailed`."""
    if info.state is JobState.COMPLETED:
        return open_result(info.result, keys, Binding(info.producer_id, info.job_type, info.id))
    raise JobFailed(info)


def readable(info: JobInfo, keys: Any, decrypt: bool) -> JobInfo:
    """The job with its result decrypted when this client may and can; as stored otherwise (a
    status read does not fail for want of a key). The payload stays encrypted: only workers open it."""
    if not decrypt or info.result is None:
        return info
    try:
        result = open_result(info.result, keys, Binding(info.producer_id, info.job_type, info.id))
    except EncryptionError:
        return info
    return info if result is info.result else replace(info, result=result)


class Waiter:
    """The waits of one client. ``connect``: its pool's connections, on which the event hub
    registers the process as a listener and reads back the jobs notifications name."""

    def __init__(
        self, settings: DbSettings, keys: KeyRing | None, dsn: str, application_name: str, connect: Connect
    ) -> None:
        self.settings = settings
        self.keys = keys
        self.dsn = dsn
        self._application_name = application_name
        self._connect = connect
        self._events: EventHub | None = None  # opened by the first wait()

    async def stop(self) -> None:
        if self._events is not None:
            await self._events.stop()

    async def wait(
        self, job_id: uuid.UUID, timeout: float | None, get: Callable[[uuid.UUID], Awaitable[JobInfo]]
    ) -> Any:
        """`AsyncClient.wait`; ``get`` reads the job."""
        deadline = None if timeout is None else time.monotonic() + timeout
        subscription = await self._subscribe(job_id)
        try:
            while True:
                info = await get(job_id)
                if info.state in _FINAL:
                    return outcome(info, self.keys)
                if not await self._next_event(subscription, deadline):
                    raise WaitTimeout(f"job {job_id} did not finish within {timeout:g} s (it goes on)")
        finally:
            if subscription is not None and self._events is not None:
                self._events.unsubscribe(subscription)

    async def _subscribe(self, job_id: uuid.UUID) -> Subscription | None:
        """A subscription to ``job_id``'s events, or None when this process listens to nothing."""
        if self._events is None:
            listen = (
                db.Session.of(self.settings, self._application_name, dsn=self.dsn, direct=True).conninfo()
                if self.settings.listen
                else None
            )
            self._events = EventHub(StoreRegistrar(self._connect), listen, name="client-wait")
        try:
            return await self._events.subscribe(queue=None, job_id=job_id, producer_id=None)
        except EventsUnavailable:
            return None

    async def _next_event(self, subscription: Subscription | None, deadline: float | None) -> bool:
        """Until the job's next final event, a reconnect or the recheck interval (True: read the job
        again), or the deadline (False)."""
        recheck = time.monotonic() + (WAIT_RECHECK if subscription is not None else WAIT_POLL)
        while True:
            if deadline is not None and time.monotonic() >= deadline:
                return False
            remaining = (recheck if deadline is None else min(recheck, deadline)) - time.monotonic()
            if remaining <= 0:
                return True
            if subscription is None:
                await asyncio.sleep(remaining)
                continue
            try:
                event = await asyncio.wait_for(subscription.inbox.get(), remaining)
            except asyncio.TimeoutError:
                continue
            if event.event in _FINAL_EVENTS or event.event.startswith("stream."):
                return True
