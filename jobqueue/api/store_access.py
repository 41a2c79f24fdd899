"""`ApiStore`: the statements only the REST API runs — its own plumbing, kept out of the public
client — each on a connection of the API's `AsyncClient` pool (`AsyncClient.connection`), so they
share its size, timeouts and login.

- ``api_key`` / ``api_secret``: authentication (`jobqueue.api.auth.KeyCache`) and the key that seals
  listing cursors (`jobqueue.api.cursors`);
- ``submitted_total`` / ``waiting_counts``: what the depth refresher of `jobqueue.api.backpressure`
  reads; ``known_names``: what a submission's warnings compare with (`jobqueue.api.name_warnings`);
  ``schema_revision``: what ``/readyz`` compares.

The event streams' registrar is `jobqueue.events.hub.StoreRegistrar` (client waits use it too), and
``/metrics`` collects on a connection of whichever client `jobqueue.api.reads` chose.
"""

from __future__ import annotations

from typing import TypeVar

from jobqueue.client import AsyncClient
from jobqueue.db import gateway as db
from jobqueue.model.api_keys import ApiKey
from jobqueue.model.queues import KnownNames
from jobqueue.model.quotas import WaitingCounts
from jobqueue.store import api_keys as key_store
from jobqueue.store import meta as meta_store
from jobqueue.store import metrics as metrics_store
from jobqueue.store import queues as queue_store

T = TypeVar("T")


class ApiStore:
    def __init__(self, client: AsyncClient) -> None:
        self.client = client

    async def run(self, call: db.Call[T]) -> T:
        async with self.client.connection() as conn:
            return await db.run(conn, call)

    async def api_key(self, key: str) -> ApiKey | None:
        """The live key matching ``key``, or None (unknown or revoked)."""
        return await self.run(key_store.lookup(key))

    async def api_secret(self, name: str) -> bytes | None:
        """A secret the REST API's processes share (``jobqueue.api_secrets``; ``cursor`` seals
        listing cursors), or None. Readable by the API and admin roles only."""
        return await self.run(key_store.secret(name))

    async def submitted_total(self) -> int:
        """Jobs ever submitted (the job sequence, rolled-back enqueues included): one cheap read."""
        return await self.run(metrics_store.submitted())

    async def waiting_counts(self, *, cap: int, stale_seconds: float) -> WaitingCounts:
        """Waiting jobs per queue (pending, scheduled or waiting for a retry), each count capped at
        ``cap`` (bounded cost), and the queues live workers serve."""
        return await self.run(queue_store.waiting_counts(cap=cap, stale_seconds=stale_seconds))

    async def known_names(self) -> KnownNames:
        """The queues and job types a submission may name without a warning (`jobqueue.api.name_warnings`)."""
        return await self.run(queue_store.known_names())

    async def schema_revision(self) -> str | None:
        return await self.run(meta_store.schema_revision())
