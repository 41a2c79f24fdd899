"""RefreshAheadCache: one load per key for concurrent misses, reloads before expiry off the
request path, and never a value older than its ttl."""

import asyncio

import pytest

from jobqueue.runtime.refresh_ahead import RefreshAheadCache


class Source:
    """A loader whose answers and failures the test sets; each load waits for `release`."""

    def __init__(self) -> None:
        self.values: dict[str, object] = {"k": "v1"}
        self.calls = 0
        self.fail: Exception | None = None
        self.release = asyncio.Event()
        self.release.set()

    async def load(self, key: str) -> object:
        self.calls += 1
        await self.release.wait()
        if self.fail is not None:
            raise self.fail
        return self.values.get(key)


def cache_at(source: Source, now: list[float], ttl: float = 2.0) -> RefreshAheadCache:
    return RefreshAheadCache(source.load, ttl, clock=lambda: now[0])


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_concurrent_misses_share_one_load():
    async def scenario():
        source, now = Source(), [0.0]
        cache = cache_at(source, now)
        source.release.clear()
        waiting = [asyncio.ensure_future(cache.get("k")) for _ in range(32)]
        await settle()
        source.release.set()
        assert await asyncio.gather(*waiting) == ["v1"] * 32
        assert source.calls == 1

    asyncio.run(scenario())


def test_an_entry_in_use_is_reloaded_in_the_background_and_never_used_past_its_ttl():
    async def scenario():
        source, now = Source(), [0.0]
        cache = cache_at(source, now)
        assert await cache.get("k") == "v1"
        now[0] = 0.9  # first half of its life: used as it is
        assert await cache.get("k") == "v1" and source.calls == 1
        source.values["k"] = "v2"
        source.release.clear()
        now[0] = 1.5  # second half: answered at once from the entry, reloaded behind it
        assert await cache.get("k") == "v1"
        await settle()
        assert source.calls == 2
        assert await cache.get("k") == "v1" and source.calls == 2  # one reload at a time
        source.release.set()
        await settle()
        now[0] = 3.0  # past the first load's ttl, within the reload's (loaded at 1.5)
        assert await cache.get("k") == "v2" and source.calls == 2
        source.values["k"] = None  # revoked
        source.release.clear()
        now[0] = 5.0  # expired: this get waits for the load, which says the key is gone
        pending = asyncio.ensure_future(cache.get("k"))
        await settle()
        assert not pending.done()
        source.release.set()
        assert await pending is None
        assert await cache.get("k") is None and source.calls == 4  # unknown keys are never cached

    asyncio.run(scenario())


def test_a_failed_background_reload_keeps_the_entry_until_it_expires_then_fails_the_caller():
    async def scenario():
        source, now = Source(), [0.0]
        cache = cache_at(source, now)
        await cache.get("k")
        source.fail = ConnectionError("database away")
        now[0] = 1.5
        assert await cache.get("k") == "v1"
        await settle()
        now[0] = 1.9
        assert await cache.get("k") == "v1"
        await settle()
        now[0] = 2.0
        with pytest.raises(ConnectionError):
            await cache.get("k")

    asyncio.run(scenario())


def test_no_ttl_loads_every_time():
    async def scenario():
        source = Source()
        cache = RefreshAheadCache(source.load, 0.0)
        for _ in range(3):
            assert await cache.get("k") == "v1"
        assert source.calls == 3

    asyncio.run(scenario())
