"""A worker's copies of shared state (open circuit breakers, whether limits apply) through a
database outage: a read that fails keeps the last known copy — the worker neither crashes nor
forgets an open breaker — and the reads after the restart catch up (the first may still find the pool
waiting out its reconnect backoff, as a worker's next periodic read would not)."""

from __future__ import annotations

import asyncio

from jobqueue import AsyncClient
from jobqueue.db import gateway as db
from jobqueue.worker.breakers import Breakers
from jobqueue.worker.limit_watch import LimitWatch
from tests.support import circuit_app


async def caught_up(condition, *copies, within: float = 20.0) -> None:
    """Refresh the copies, as their periodic loop would, until ``condition`` holds."""
    deadline = asyncio.get_running_loop().time() + within
    while True:
        for copy in copies:
            await copy.refresh()
        if condition():
            return
        assert asyncio.get_running_loop().time() < deadline, "the copies never caught up"
        await asyncio.sleep(0.2)


def test_copies_survive_a_postgres_restart_and_catch_up_after_it(own_cluster):
    async def main():
        pool = db.async_pool(own_cluster, min_size=1, max_size=2, timeout=1.0)
        await pool.open(wait=True)
        try:
            breakers = Breakers(pool, circuit_app.queue, interval=10, retry_probe_after=0)
            limits = LimitWatch(pool, circuit_app.queue, ["default"], interval=10)
            async with db.connection(pool) as conn:
                await db.run(conn, breakers.sync())
            async with AsyncClient(own_cluster) as client:
                await client.open_circuit("flaky-api")
                await client.set_limit("job_type", "local_work", concurrency=1)
            await breakers.refresh()
            await limits.refresh()
            assert breakers.blocked == ["call_api", "call_api_checked"] and limits.active

            own_cluster.cluster.stop()
            await breakers.refresh()  # DatabaseUnavailable: logged, the copy kept
            await limits.refresh()
            assert breakers.blocked == ["call_api", "call_api_checked"] and limits.active

            own_cluster.cluster.start()
            async with AsyncClient(own_cluster) as client:
                await client.close_circuit("flaky-api")
                await client.clear_limit("job_type", "local_work")
            await caught_up(lambda: breakers.blocked == [] and not limits.active, breakers, limits)
        finally:
            await pool.close()

    asyncio.run(main())
