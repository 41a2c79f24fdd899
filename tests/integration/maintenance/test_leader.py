"""Leader election: one leader at a time, a resign hands over at once, a silent leader is
replaced right when its lease runs out."""

from __future__ import annotations

import asyncio
import time

from jobqueue.events.notifier import Notifier
from jobqueue.maintenance.elector import Elector
from tests.support.maintenance import pools


def test_of_three_candidates_exactly_one_leads(dsn):
    async def main() -> list[bool]:
        async with pools(dsn, 3) as opened:
            electors = [Elector(pool, f"p{i}", ttl=5) for i, pool in enumerate(opened)]
            results = []
            for _ in range(5):
                results.append(await asyncio.gather(*(e.attempt() for e in electors)))
            return results

    rounds = asyncio.run(main())
    assert all(sum(round_) == 1 for round_ in rounds)
    assert len({round_.index(True) for round_ in rounds}) == 1  # the leader renews, the others wait


def test_a_resigning_leader_hands_over_at_once(dsn):
    async def main() -> float:
        async with pools(dsn, 2) as (first_pool, second_pool):
            leader = Elector(first_pool, "leader", ttl=30)
            candidate = Elector(second_pool, "candidate", ttl=30)
            notifier = Notifier(dsn)
            notifier.subscribe("jobqueue_leader", candidate.on_leader_notification)
            listening = asyncio.create_task(notifier.run())
            await asyncio.wait_for(notifier.connected.wait(), 5)
            assert await leader.attempt()
            gained = asyncio.Event()
            candidate.on_change(lambda leading: leading and gained.set())
            running = asyncio.create_task(candidate.run())
            await asyncio.sleep(0.2)
            assert not candidate.is_leader
            started = time.monotonic()
            await leader.resign()
            await asyncio.wait_for(gained.wait(), 5)
            took = time.monotonic() - started
            for task in (running, listening):
                task.cancel()
            await asyncio.gather(running, listening, return_exceptions=True)
            return took

    assert asyncio.run(main()) < 1.0  # with a 30 s lease: the NOTIFY, not the expiry


def test_a_silent_leader_is_replaced_when_its_lease_runs_out(dsn):
    ttl = 1.5

    async def main() -> float:
        async with pools(dsn, 2) as (first_pool, second_pool):
            leader = Elector(first_pool, "leader", ttl=ttl)
            candidate = Elector(second_pool, "candidate", ttl=ttl)
            assert await leader.attempt()
            renewed = time.monotonic()  # its last renewal: it dies now, without resigning
            gained = asyncio.Event()
            candidate.on_change(lambda leading: leading and gained.set())
            running = asyncio.create_task(candidate.run())
            await asyncio.wait_for(gained.wait(), 10)
            took = time.monotonic() - renewed
            assert not await leader.attempt()  # the old one, back, finds itself replaced
            running.cancel()
            await asyncio.gather(running, return_exceptions=True)
            return took

    took = asyncio.run(main())
    assert ttl <= took < ttl + 0.5  # at the expiry, not a polling period later


def test_an_election_answered_after_its_own_ttl_does_not_make_a_leader(dsn):
    """Through a failover the election's pool wait can outlast the TTL: the lease it then wins may
    already have been taken and lost meanwhile as far as the others know, so it is not leadership."""
    ttl = 0.5

    async def main():
        async with pools(dsn) as (pool,):
            elector = Elector(pool, "slow", ttl=ttl)
            changes: list[bool] = []
            elector.on_change(changes.append)

            async def hold_every_connection() -> None:
                async with pool.connection(), pool.connection():
                    await asyncio.sleep(ttl + 0.3)

            holding = asyncio.create_task(hold_every_connection())
            await asyncio.sleep(0.05)
            won = await elector.attempt()
            await holding
            return won, elector.is_leader, changes

    assert asyncio.run(main()) == (False, False, [])
