"""After a PostgreSQL restart every idle connection in the maintenance pool is dead. The pool
checks each connection it hands out, so the first election and the first run of each service after
the restart succeed: no service loses a cycle per dead connection, no leaderless TTL."""

from __future__ import annotations

import asyncio

import pytest

from jobqueue.events.notifier import Notifier
from jobqueue.maintenance.runner import Maintenance
from tests.support.workers import test_settings

pytestmark = pytest.mark.slow


def test_the_first_election_and_service_runs_after_a_restart_succeed(own_cluster):
    async def main() -> list:
        maintenance = Maintenance.of(test_settings(own_cluster), Notifier(own_cluster), "after-restart")
        pool = maintenance.pool
        await pool.open(wait=True)
        try:
            async with pool.connection(), pool.connection(), pool.connection():
                pass  # the pool now holds its three connections, as a busy leader's does
            assert pool.get_stats()["pool_available"] == 3
            own_cluster.cluster.stop(mode="fast")
            own_cluster.cluster.start()
            assert await maintenance.elector.attempt(), "the first election after the restart failed"
            return [await service.run_once() for service in maintenance.services]  # raises if one fails
        finally:
            await pool.close()

    ran = asyncio.run(main())
    # sweeper, scheduler, pruner, reaper, vacuumer, reindexer, historian, gatekeeper: each ran
    assert len(ran) == 8
