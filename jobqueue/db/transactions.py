"""Several statements in one transaction, through the gateway (`jobqueue.db.gateway.run`): for the few
calls that cannot be one statement — one that needs a transaction-local setting made before it
(an action run for an API key: `jobqueue.client.acting`), and conversations whose next statement
depends on the last answer (the audit log's verification walks the chain a stretch at a time).
Each Call still runs, and has its errors translated, as `run` runs it; a failing BEGIN or COMMIT is
translated the same way. A transaction-local ``set_config(…, true)`` keeps to the transaction,
so it holds behind PgBouncer in transaction mode too.
"""

from __future__ import annotations

from typing import Any, Generator, Sequence, TypeVar

import psycopg

from jobqueue.db.gateway import Call, run, run_sync, translated_errors

T = TypeVar("T")


async def run_together(conn: psycopg.AsyncConnection, calls: Sequence[Call]) -> Any:
    """The calls in one transaction on ``conn`` (an autocommit connection); the last one's value.
    For a statement that needs a transaction-local setting made before it (``set_config(…, true)``
    keeps to the transaction, so it holds behind PgBouncer in transaction mode too)."""
    with translated_errors():  # BEGIN and COMMIT: the statements' own errors are translated already
        async with conn.transaction():
            for call in calls[:-1]:
                await run(conn, call)
            return await run(conn, calls[-1])


def run_together_sync(conn: psycopg.Connection, calls: Sequence[Call]) -> Any:
    with translated_errors():
        with conn.transaction():
            for call in calls[:-1]:
                run_sync(conn, call)
            return run_sync(conn, calls[-1])


#: A conversation with the database in several statements, each depending on the answer to the one
#: before: a generator that yields a Call, is sent its value, and returns the result — written once,
#: for the async and the sync gateway alike.
Steps = Generator[Call, Any, T]


async def run_steps(conn: psycopg.AsyncConnection, steps: Steps[T]) -> T:
    """``steps`` to their end, in one transaction on ``conn``."""
    with translated_errors():
        async with conn.transaction():
            try:
                call = next(steps)
                while True:
                    call = steps.send(await run(conn, call))
            except StopIteration as done:
                return done.value


def run_steps_sync(conn: psycopg.Connection, steps: Steps[T]) -> T:
    with translated_errors():
        with conn.transaction():
            try:
                call = next(steps)
                while True:
                    call = steps.send(run_sync(conn, call))
            except StopIteration as done:
                return done.value
