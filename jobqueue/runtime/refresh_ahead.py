"""A per-process cache whose entries are reloaded before they expire, one load at a time per key.

Why: the REST API caches API keys (2 s) and the client caches the tasks' encrypted fields (5 s).
With a plain expiring cache, every request that arrives once an entry has expired waits for a
database round trip, and under load they all do at once (32 connections meant up to 32 identical
lookups every 2 s, each adding a round trip to a request's latency: the p99 of a paced run).
Here an entry past half its lifetime is reloaded in the background while requests go on using it,
and concurrent misses of one key share a single load. What an entry promises does not change: no
value is ever used after ``ttl`` seconds from the load that produced it, so a revoked API key still
stops working within ``ttl``; only a key nobody used for half its lifetime costs a request a wait.

``load(key)`` returning None means "does not exist": nothing is cached (a flood of unknown keys
cannot grow memory) and the key's entry, if any, is dropped. ``ttl`` <= 0 caches nothing and
shares nothing: every ``get`` loads.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from typing import Awaitable, Callable, Generic, Hashable, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class RefreshAheadCache(Generic[K, V]):
    def __init__(
        self,
        load: Callable[[K], Awaitable[V | None]],
        ttl: float,
        *,
        max_entries: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._load = load
        self.ttl = ttl
        self._max_entries = max_entries
        self._clock = clock
        self._entries: OrderedDict[K, tuple[float, V]] = OrderedDict()  # key -> (expires at, value)
        self._loading: dict[K, asyncio.Future[V | None]] = {}
        #: loads started (misses and refreshes), for tests and the curious
        self.loads = 0

    async def get(self, key: K) -> V | None:
        if self.ttl <= 0:
            self.loads += 1
            return await self._load(key)
        now = self._clock()
        entry = self._entries.get(key)
        if entry is not None and entry[0] > now:
            self._entries.move_to_end(key)
            if entry[0] - now < self.ttl / 2 and key not in self._loading:
                self._start(key)  # in the background: nobody waits for it
            return entry[1]
        return await asyncio.shield(self._loading.get(key) or self._start(key))

    def _start(self, key: K) -> asyncio.Future[V | None]:
        self.loads += 1
        future = self._loading[key] = asyncio.ensure_future(self._fetch(key))
        future.add_done_callback(_consume)
        return future

    async def _fetch(self, key: K) -> V | None:
        try:
            started = self._clock()  # the value is as old as the load's start, not its end
            value = await self._load(key)
            if value is None:
                self._entries.pop(key, None)
            else:
                self._entries[key] = (started + self.ttl, value)
                self._entries.move_to_end(key)
                while len(self._entries) > self._max_entries:
                    self._entries.popitem(last=False)
            return value
        finally:
            del self._loading[key]


def _consume(future: asyncio.Future) -> None:
    """A load that failed (the database away) with nobody left waiting for it — a background
    refresh, or a miss whose requests were cancelled — leaves the entry to expire; its exception is
    retrieved here so asyncio does not log it as never retrieved."""
    if not future.cancelled():
        future.exception()
