"""Group commit of concurrent submissions (`jobqueue.client.coalesce`): callers that wait for a busy lane
share one statement, yet each gets exactly its own answer — its ids, or its own error."""

from __future__ import annotations

import asyncio

import psycopg
import pytest

from jobqueue import AsyncClient, ValidationError
from jobqueue.client.coalesce import SubmitCoalescer, is_outage
from jobqueue.db.gateway import translated_errors
from jobqueue.model.errors import DatabaseUnavailable, IdempotencyMismatch


def refuse_marked_jobs_like_a_server_limit(conn) -> None:
    """A trigger on this test's own database that fails a job whose payload holds "too_big" with
    54000 (program_limit_exceeded), as PostgreSQL fails an index entry over its size limit. Since
    migration 0017 no job the client accepts can reach that limit for real (names and keys are
    bounded), yet other limits of the server can still refuse one job of a group."""
    conn.execute("""
        CREATE FUNCTION public.refuse_too_big() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF NEW.payload ? 'too_big' THEN
                RAISE EXCEPTION USING ERRCODE = '54000',
                    MESSAGE = 'index row requires 8032 bytes, maximum size is 2704';
            END IF;
            RETURN NEW;
        END $$;
        CREATE TRIGGER jobs_test_limit BEFORE INSERT ON jobqueue.jobs
            FOR EACH ROW EXECUTE FUNCTION public.refuse_too_big();
    """)


def stored_payloads(conn) -> dict:
    return {row[0]: row[1] for row in conn.execute("SELECT id, payload FROM jobqueue.jobs WHERE job_type = 'c'")}


async def _blocked_lane(dsn: str, client: AsyncClient, key: str) -> tuple[psycopg.AsyncConnection, asyncio.Task]:
    """Occupy the client's only lane: its statement waits on another transaction's uncommitted
    holder of ``key`` until that transaction ends."""
    holder = await psycopg.AsyncConnection.connect(dsn)
    await holder.execute("SELECT jobqueue.enqueue('c', '{}', idempotency_key => %s)", (key,))
    first = asyncio.create_task(client.submit([{"job_type": "c", "idempotency_key": key, "payload": {"n": -1}}]))
    for _ in range(100):
        await asyncio.sleep(0.01)
        if client.coalescer.statements == 1:
            break
    await asyncio.sleep(0.1)
    assert not first.done()
    return holder, first


def test_waiting_callers_share_one_statement_and_each_get_their_own_ids(dsn, conn):
    async def scenario():
        async with AsyncClient(dsn, submit_lanes=1, coalesce_stall_after=30.0) as client:
            holder, first = await _blocked_lane(dsn, client, "gate")
            callers = [
                asyncio.create_task(
                    client.submit([{"job_type": "c", "payload": {"n": n, "k": k}} for k in range(n % 3 + 1)])
                )
                for n in range(20)
            ]
            await asyncio.sleep(0.1)
            await holder.rollback()  # the key is free: the first statement inserts, then the group goes
            await holder.close()
            return await first, await asyncio.gather(*callers), client.coalescer.statements

    first, answers, statements = asyncio.run(scenario())
    assert statements == 2  # the blocked one, then all twenty callers together
    payloads = stored_payloads(conn)
    assert len(payloads) == 1 + sum(n % 3 + 1 for n in range(20))
    assert first[0][1] is True and payloads[first[0][0]] == {"n": -1}
    for n, answer in enumerate(answers):
        assert [payloads[job_id] for job_id, _ in answer] == [{"n": n, "k": k} for k in range(n % 3 + 1)]
        assert all(created for _, created in answer)


def test_a_refused_job_fails_only_its_own_caller(dsn, conn):
    async def scenario():
        async with AsyncClient(dsn, submit_lanes=1, coalesce_stall_after=30.0) as client:
            holder, first = await _blocked_lane(dsn, client, "gate")
            good = [asyncio.create_task(client.submit([{"job_type": "c", "payload": {"n": n}}])) for n in range(3)]
            # Python lets it through; PostgreSQL's integer cannot hold it, so the statement fails.
            bad = asyncio.create_task(client.submit([{"job_type": "c", "max_attempts": 2**40}]))
            more = [asyncio.create_task(client.submit([{"job_type": "c", "payload": {"n": n}}])) for n in range(3, 5)]
            await asyncio.sleep(0.1)
            await holder.rollback()
            await holder.close()
            await first
            outcomes = await asyncio.gather(*good, bad, *more, return_exceptions=True)
            return outcomes, client.coalescer.statements

    outcomes, statements = asyncio.run(scenario())
    assert isinstance(outcomes[3], ValidationError)
    assert statements == 1 + 1 + 6  # blocked, the refused group, then each caller alone
    payloads = stored_payloads(conn)
    assert sorted(p.get("n") for p in payloads.values()) == [-1, 0, 1, 2, 3, 4]
    for n, outcome in zip([0, 1, 2, 3, 4], outcomes[:3] + outcomes[4:]):
        assert payloads[outcome[0][0]] == {"n": n}


def test_a_caller_that_gives_up_while_waiting_writes_nothing(dsn, conn):
    async def scenario():
        async with AsyncClient(dsn, submit_lanes=1, coalesce_stall_after=30.0) as client:
            holder, first = await _blocked_lane(dsn, client, "gate")
            quitter = asyncio.create_task(client.submit([{"job_type": "c", "payload": {"n": "quit"}}]))
            stayer = asyncio.create_task(client.submit([{"job_type": "c", "payload": {"n": "stay"}}]))
            await asyncio.sleep(0.05)
            quitter.cancel()  # e.g. the HTTP client hung up
            await holder.rollback()
            await holder.close()
            await first
            return await stayer

    asyncio.run(scenario())
    assert sorted(str(p["n"]) for p in stored_payloads(conn).values()) == ["-1", "stay"]


def test_a_lost_database_fails_every_caller_of_the_statement(dsn, conn):
    def kill_enqueues() -> None:
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid() AND query LIKE '%%enqueue_many%%'"
        )

    async def scenario():
        async with AsyncClient(
            dsn, submit_lanes=1, pool_size=2, coalesce_stall_after=30.0, coalesce_lock_wait=30.0
        ) as client:
            holder, first = await _blocked_lane(dsn, client, "gate")
            # the group holds the held key too, so its statement waits on the holder as well
            callers = [
                asyncio.create_task(client.submit([{"job_type": "c", "payload": {"n": 0}, "idempotency_key": "gate"}]))
            ]
            callers += [asyncio.create_task(client.submit([{"job_type": "c", "payload": {"n": n}}])) for n in (1, 2)]
            await asyncio.sleep(0.05)
            kill_enqueues()
            for _ in range(200):
                await asyncio.sleep(0.01)
                if client.coalescer.statements == 2:
                    break
            await asyncio.sleep(0.2)
            kill_enqueues()
            outcomes = await asyncio.gather(first, *callers, return_exceptions=True)
            await holder.rollback()
            await holder.close()
            return outcomes

    outcomes = asyncio.run(scenario())
    assert all(isinstance(outcome, DatabaseUnavailable) for outcome in outcomes), outcomes
    assert stored_payloads(conn) == {}


def test_a_statement_stuck_on_a_lock_stops_holding_its_lane(dsn, conn):
    """The lane's statement waits on another transaction: after stall_after the others go on."""

    async def scenario():
        async with AsyncClient(dsn, submit_lanes=1, coalesce_stall_after=0.1) as client:
            holder, first = await _blocked_lane(dsn, client, "gate")
            others = await asyncio.wait_for(
                asyncio.gather(*(client.submit([{"job_type": "c", "payload": {"n": n}}]) for n in range(5))), 5
            )
            still_blocked = not first.done()
            await holder.rollback()
            await holder.close()
            await first
            return others, still_blocked

    others, still_blocked = asyncio.run(scenario())
    assert still_blocked and all(answer[0][1] for answer in others)
    assert len(stored_payloads(conn)) == 1 + 5


def test_a_caller_that_finds_no_lane_in_time_gets_unavailable_and_writes_nothing(dsn, conn):
    async def scenario():
        async with AsyncClient(dsn, submit_lanes=1, coalesce_stall_after=30.0, pool_timeout=0.5) as client:
            holder, first = await _blocked_lane(dsn, client, "gate")
            with pytest.raises(DatabaseUnavailable):
                await client.submit([{"job_type": "c", "payload": {"n": "late"}}])
            await holder.rollback()
            await holder.close()
            await first
            await asyncio.sleep(0.2)  # the lane is free again: the timed-out caller must not be sent now

    asyncio.run(scenario())
    assert [p["n"] for p in stored_payloads(conn).values()] == [-1]


def test_a_job_the_server_rejects_with_an_error_of_its_own_fails_only_its_caller(dsn, conn):
    """A job PostgreSQL refuses for a limit of its own (54000, reported like a connection problem
    by the driver): the group is replayed, the others are written."""
    refuse_marked_jobs_like_a_server_limit(conn)

    async def scenario():
        async with AsyncClient(dsn, submit_lanes=1, coalesce_stall_after=30.0) as client:
            holder, first = await _blocked_lane(dsn, client, "gate")
            callers = [asyncio.create_task(client.submit([{"job_type": "c", "payload": {"n": n}}])) for n in range(2)]
            callers.insert(1, asyncio.create_task(client.submit([{"job_type": "c", "payload": {"too_big": 1}}])))
            await asyncio.sleep(0.1)
            await holder.rollback()
            await holder.close()
            await first
            return await asyncio.gather(*callers, return_exceptions=True)

    outcomes = asyncio.run(scenario())
    assert isinstance(outcomes[1], ValidationError) and outcomes[1].field == "input"
    assert outcomes[0][0][1] and outcomes[2][0][1]
    assert sorted(p.get("n", -2) for p in stored_payloads(conn).values()) == [-1, 0, 1]


def test_a_refused_idempotency_mismatch_in_a_group_fails_only_its_caller(dsn, conn):
    """A repeat with idempotency_mismatch=reject whose job differs fails the combined statement;
    replayed alone, only its caller gets IdempotencyMismatch and the others' jobs are written."""
    paid = conn.execute("SELECT jobqueue.enqueue('c', '{\"n\": \"paid\"}', idempotency_key => 'paid')").fetchone()[0]

    async def scenario():
        async with AsyncClient(dsn, submit_lanes=1, coalesce_stall_after=30.0) as client:
            holder, first = await _blocked_lane(dsn, client, "gate")
            callers = [asyncio.create_task(client.submit([{"job_type": "c", "payload": {"n": n}}])) for n in range(2)]
            callers.insert(
                1,
                asyncio.create_task(
                    client.submit(
                        [
                            {
                                "job_type": "c",
                                "payload": {"n": "again"},
                                "idempotency_key": "paid",
                                "idempotency_mismatch": "reject",
                            }
                        ]
                    )
                ),
            )
            await asyncio.sleep(0.1)
            await holder.rollback()
            await holder.close()
            await first
            return await asyncio.gather(*callers, return_exceptions=True), client.coalescer.statements

    outcomes, statements = asyncio.run(scenario())
    assert statements == 1 + 1 + 3  # the blocked one, the group, then each caller alone
    assert isinstance(outcomes[1], IdempotencyMismatch) and outcomes[1].job_id == paid
    assert outcomes[0][0][1] and outcomes[2][0][1]
    assert sorted(str(p["n"]) for p in stored_payloads(conn).values()) == ["-1", "0", "1", "paid"]


def test_a_held_key_in_a_group_makes_only_its_own_caller_wait(dsn, conn):
    """Another transaction holds caller K's idempotency key uncommitted. Grouped with K, the other
    callers must not wait for that transaction: the group's lock wait is cut short, and each
    caller goes again alone — the others at once, K waiting for the holder."""

    async def scenario():
        async with AsyncClient(dsn, submit_lanes=1, coalesce_stall_after=30.0) as client:
            holder, first = await _blocked_lane(dsn, client, "gate")
            keyed_holder = await psycopg.AsyncConnection.connect(dsn)
            await keyed_holder.execute("SELECT jobqueue.enqueue('c', '{\"n\": \"held\"}', idempotency_key => 'k')")
            keyed = asyncio.create_task(
                client.submit([{"job_type": "c", "idempotency_key": "k", "payload": {"n": "k"}}])
            )
            others = [asyncio.create_task(client.submit([{"job_type": "c", "payload": {"n": n}}])) for n in range(4)]
            await asyncio.sleep(0.05)
            await holder.rollback()  # the lane frees: K and the others go as one group
            await holder.close()
            await first
            started = asyncio.get_running_loop().time()
            done = await asyncio.gather(*others)
            others_took = asyncio.get_running_loop().time() - started
            assert not keyed.done()  # K still waits for the transaction holding its key
            await keyed_holder.commit()
            await keyed_holder.close()
            return others_took, done, await keyed

    others_took, done, keyed = asyncio.run(scenario())
    assert others_took < 2.0  # the group gave up its lock wait after 0.2 s (not the 10 s lock timeout)
    assert all(answer[0][1] for answer in done)
    held = conn.execute("SELECT id FROM jobqueue.jobs WHERE payload->>'n' = 'held'").fetchone()[0]
    assert keyed == [(held, False)]  # K got the holder's job, committed meanwhile


def test_groups_stop_at_max_jobs_and_keep_arrival_order():
    sent: list[list[int]] = []
    grouped_flags: list[bool] = []

    async def scenario():
        gate = asyncio.Event()

        async def run(jobs, grouped):
            sent.append(list(jobs))
            grouped_flags.append(grouped)
            if len(sent) == 1:
                await gate.wait()
            return [(job, True) for job in jobs]

        coalescer = SubmitCoalescer(run, lanes=1, max_jobs=5)
        first = asyncio.create_task(coalescer.submit([0]))
        await asyncio.sleep(0)
        callers = [asyncio.create_task(coalescer.submit(list(range(10 * n, 10 * n + 2)))) for n in range(1, 6)]
        await asyncio.sleep(0)
        gate.set()
        await first
        return await asyncio.gather(*callers)

    answers = asyncio.run(scenario())
    assert sent == [[0], [10, 11, 20, 21], [30, 31, 40, 41], [50, 51]]
    assert grouped_flags == [False, True, True, False]  # a statement of several callers says so
    assert [[job for job, _ in answer] for answer in answers] == [[10 * n, 10 * n + 1] for n in range(1, 6)]


@pytest.mark.parametrize(
    "options",
    [
        dict(lanes=0, max_jobs=10),
        dict(lanes=1, max_jobs=0),
        dict(lanes=1, max_jobs=10, max_wait=0),
        dict(lanes=1, max_jobs=10, stall_after=0),
    ],
)
def test_coalescer_settings_are_checked(options):
    with pytest.raises(ValueError):
        SubmitCoalescer(lambda jobs, grouped: None, **options)  # type: ignore[arg-type, return-value]


def test_outages_are_told_from_refusals():
    """Only a lost or unreachable database fails a whole group; what the server refused (deadlock,
    lock timeout, a limit) is replayed caller by caller."""

    def unavailable(cause: Exception) -> Exception:  # what db.run raises for the driver's error
        try:
            with translated_errors():
                raise cause
        except Exception as translated:
            return translated

    assert is_outage(unavailable(psycopg.OperationalError("connection refused")))  # no SQLSTATE: no server
    assert is_outage(unavailable(psycopg.errors.ConnectionFailure("gone")))
    assert is_outage(unavailable(psycopg.errors.AdminShutdown("terminating connection")))
    assert not is_outage(unavailable(psycopg.errors.DeadlockDetected("deadlock detected")))
    assert not is_outage(unavailable(psycopg.errors.LockNotAvailable("lock timeout")))
    assert not is_outage(ValidationError("input", "refused"))
