"""A worker's copies of shared state (open circuit breakers, whether limits apply) through a
database outage: a read that fails keeps the last known copy — the worker neither crashes nor
forgets an open breaker — and the first read after the restart catches up."""

from __future__ import annotations

import asyncio

from jobqueue import AsyncClient, db
from jobqueue.worker.circuits import Breakers
from jobqueue.worker.limits import LimitWatch
from tests.support import circuit_app


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
            await breakers.refresh()
            await limits.refresh()
            assert breakers.blocked == [] and not limits.active
        finally:
            await pool.close()

    asyncio.run(main())
