"""Roles other than the suite's superuser, for privilege tests. Import the fixture by name."""

from __future__ import annotations

import uuid
from typing import Iterator

import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from tests.support.waiting import wait_until


@pytest.fixture
def reader_dsn(dsn, conn):
    """The test database as a role that may read everything and write nothing; dropped afterwards
    (request it before anything that keeps connections as the role, e.g. an API server).
    jobqueue_readonly lets it through row-level security (pg_read_all_data alone would see no job)."""
    yield from _login(dsn, conn, "reader", "LOGIN IN ROLE pg_read_all_data, jobqueue_readonly")


@pytest.fixture
def stranger_dsn(dsn, conn):
    """The test database as a login holding no jobqueue role at all: what PUBLIC may do (connect,
    LISTEN and NOTIFY on any channel) is all it may do. The attacker of the forged-notification tests."""
    yield from _login(dsn, conn, "stranger", "LOGIN")


def _login(dsn, conn, kind: str, options: str) -> Iterator[str]:
    role = f"jqtest_{kind}_{uuid.uuid4().hex[:8]}"
    conn.execute(sql.SQL("CREATE ROLE {} " + options).format(sql.Identifier(role)))
    try:
        yield make_conninfo(dsn, user=role)
    finally:
        _drop(conn, role)


@pytest.fixture
def login_as(dsn, conn):
    """``login_as("producer", producer="billing")``: the test database as a new login role holding
    ``jobqueue_<kind>`` (granted by `jobqueue roles`' function), its DSN; every role made is dropped
    afterwards. Request it before anything that keeps connections as the roles (an API, a worker)."""
    made: list[str] = []

    def login(kind: str, *, producer: str | None = None, name: str | None = None) -> str:
        role = name or f"jqtest_{kind}_{uuid.uuid4().hex[:8]}"
        conn.execute("SELECT jobqueue.create_login(%s)", (role,))
        made.append(role)
        conn.execute("SELECT jobqueue.grant_role(%s, %s, %s)", (kind, role, producer))
        return make_conninfo(dsn, user=role)

    yield login
    for role in made:
        conn.execute("DELETE FROM jobqueue.producer_roles WHERE role_name = %s", (role,))
        _drop(conn, role)


def _drop(conn, role: str) -> None:
    """Drop a test role once none of its sessions is left."""
    wait_until(
        lambda: (
            not conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (role,)
            ).fetchall()
        ),
        message=f"no session of {role}",
    )
    conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))
