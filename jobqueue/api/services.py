"""What one API process shares across requests, opened and closed with the app's lifespan.

- ``client``: the `AsyncClient` every handler goes through (it encrypts submissions' fields with
  the process's key ring, and never decrypts results: the API shows them redacted), with short timeouts
  (``JOBQUEUE_API_DB_TIMEOUT`` to get a pooled connection, ``JOBQUEUE_API_CONNECT_TIMEOUT`` to
  connect), so a database outage answers 503 within about a second or two, and the pool
  reconnects by itself when the database returns;
- ``store``: the statements only the API runs, on the client's pool (`jobqueue.api.store_access`);
- ``keys``: the API-key cache; ``cursors``: seals listing cursors (`jobqueue.api.cursors`);
  ``backpressure``: queue depths, limits and token buckets; ``name_warnings``: what a submission
  naming an unknown queue or job type is told (`jobqueue.api.name_warnings`);
- ``events``: the LISTEN connection feeding the SSE streams (open only while a stream is; none
  with ``JOBQUEUE_LISTEN=0``, and on ``JOBQUEUE_DIRECT_DSN`` when given);
- ``head_revision``: the schema revision this code expects (``/readyz`` compares it).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, TypeAlias

from litestar import Request
from litestar.di import NamedDependency

from jobqueue.api.auth import KeyCache
from jobqueue.api.backpressure import Backpressure, StreamQuota
from jobqueue.api.cursors import Cursors
from jobqueue.api.name_warnings import NameWarnings
from jobqueue.api.reads import ReadRouter
from jobqueue.api.store_access import ApiStore
from jobqueue.client import AsyncClient
from jobqueue.config import Settings
from jobqueue.db import gateway as db
from jobqueue.events.hub import EventHub, StoreRegistrar
from jobqueue.runtime.background import watch
from jobqueue.store import migrate


class Services:
    def __init__(self, settings: Settings) -> None:
        """The whole Settings: its clients take it (connections, key ring); the API's own section,
        the depth limits and the figures' settings go to the parts that read them."""
        self.settings = settings
        api = settings.api
        self.client = AsyncClient(
            settings=settings,
            application_name=db.API_NAME,
            pool_size=api.pool_size,
            pool_timeout=api.db_timeout,
            connect_timeout=api.connect_timeout,
            submit_lanes=api.submit_lanes,
            coalesce_max_jobs=api.max_batch,
            coalesce_stall_after=api.submit_stall,
            decrypt_results=False,
        )
        replica = (
            None
            if not api.read_dsn
            else AsyncClient(
                api.read_dsn,
                settings=settings,
                application_name=db.API_READ_NAME,
                pool_size=api.pool_size,
                pool_timeout=api.db_timeout,
                connect_timeout=api.connect_timeout,
                decrypt_results=False,
            )
        )
        self.reads = ReadRouter(self.client, replica, after_write=api.read_after_write)
        self.store = ApiStore(self.client)
        self.keys = KeyCache(self.store.api_key, api.key_cache_seconds)
        self.cursors = Cursors(self.store.api_secret)
        self.backpressure = Backpressure.of(self.store, settings)
        self.name_warnings = NameWarnings(self.store)
        listen = db.Session.of(settings.db, db.API_NAME, direct=True).conninfo() if settings.db.listen else None
        self.events = EventHub(
            StoreRegistrar(self.client.connection), listen, connect_timeout=api.db_timeout + api.connect_timeout
        )
        self.streams = StreamQuota(api.max_streams_per_key)
        self.head_revision = migrate.head_revision()
        self._tasks: list[asyncio.Task] = []

    async def start(self) -> None:
        await self.client.open()  # does not wait for the database: the API starts during an outage too
        if self.reads.replica is not None:
            await self.reads.replica.open()
        self._tasks = [watch(asyncio.create_task(self.backpressure.run(), name="api-depths"))]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks = []
        await self.events.stop()
        if self.reads.replica is not None:
            await self.reads.replica.close()
        await self.client.close()


#: How handlers take the services: ``services: ServicesDep`` (the app provides it).
ServicesDep: TypeAlias = NamedDependency[Services]


def services_of(request: Request[Any, Any, Any]) -> Services:
    """The services, for the submission handlers only: resolving a dependency costs Litestar about
    20 Python calls per request (4 % of a submission's); every other handler takes ``ServicesDep``."""
    services: Services = request.app.state["services"]
    return services
