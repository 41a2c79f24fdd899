"""Two apps declaring a task of the same name differently (`jobqueue.task_defaults`): the attempts
of the app that declared it first stay while its workers live, and a field either app encrypts is
sealed by every producer — another app's worker start never narrows what is encrypted.

Before: each worker start rewrote the job type's row with its own app's task (last writer wins), so
a neighbour's worker without ``encrypted=["card"]`` made every producer store the card in plain text.
"""

from __future__ import annotations

import logging
import os

from jobqueue.db import gateway as db
from jobqueue.store import workers as worker_store


def _live_worker(conn, app: str, worker_id: str) -> None:
    db.run_sync(
        conn,
        worker_store.register(
            worker_id=worker_id,
            host="h",
            pid=os.getpid(),
            queues=["default"],
            concurrency=1,
            job_types=["charge"],
            app=app,
        ),
    )


def _declare(conn, app: str, max_attempts: int, encrypted: list[str]) -> list[tuple[str, str, str]]:
    return db.run_sync(conn, worker_store.sync_task_defaults({"charge": max_attempts}, {"charge": encrypted}, app=app))


def _row(conn) -> tuple:
    return conn.execute(
        "SELECT max_attempts, encrypted_fields, declared_by FROM jobqueue.task_defaults WHERE job_type = 'charge'"
    ).fetchone()


def test_a_neighbour_app_neither_takes_over_the_attempts_nor_narrows_the_encrypted_fields(conn):
    _live_worker(conn, "shop", "shop-1")
    assert _declare(conn, "shop", 5, ["card"]) == []
    _live_worker(conn, "billing", "billing-1")
    overruled = _declare(conn, "billing", 2, ["ssn"])
    assert overruled == [("task", "charge", "shop")]  # the billing worker logs it
    max_attempts, encrypted, owner = _row(conn)
    assert (max_attempts, owner) == (5, "shop")
    assert sorted(encrypted) == ["card", "ssn"]  # both apps' fields are sealed by every producer
    assert set(db.run_sync(conn, worker_store.encrypted_fields())["charge"]) == {"card", "ssn"}  # what producers read
    # the shop restarts: its own declaration again, billing's field stays sealed
    assert _declare(conn, "shop", 5, ["card"]) == []
    assert set(_row(conn)[1]) == {"card", "ssn"}


def test_an_app_drops_only_its_own_encrypted_field_and_takes_over_once_the_owner_is_gone(conn):
    _live_worker(conn, "shop", "shop-1")
    _declare(conn, "shop", 5, ["card"])
    _live_worker(conn, "billing", "billing-1")
    _declare(conn, "billing", 2, ["ssn"])
    _declare(conn, "billing", 2, [])  # a new billing version encrypts nothing itself
    assert set(_row(conn)[1]) == {"card"}
    _declare(conn, "shop", 5, [])  # and a new shop version neither
    assert list(_row(conn)[1]) == []
    # the shop's workers are gone: billing's start now sets the attempts
    conn.execute("UPDATE jobqueue.workers SET status = 'stopped' WHERE app = 'shop'")
    assert _declare(conn, "billing", 2, []) == []
    assert _row(conn)[0::2] == (2, "billing")


def test_the_worker_logs_a_task_another_live_app_declared_otherwise(conn, caplog):
    from jobqueue.worker.shared_state import log_overruled

    _live_worker(conn, "shop", "shop-1")
    _declare(conn, "shop", 5, [])
    _live_worker(conn, "billing", "billing-1")
    with caplog.at_level(logging.WARNING):
        log_overruled(logging.getLogger("t"), _declare(conn, "billing", 2, []), "billing")
    assert "task 'charge' is declared otherwise by app 'shop'" in caplog.text
