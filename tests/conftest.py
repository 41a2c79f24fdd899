"""Fixtures shared by every test: a real PostgreSQL, a migrated template, a database per test.

- ``pg_server`` (session): JOBQUEUE_TEST_DSN, else a throwaway cluster (initdb + pg_ctl, fsync
  off, as the postgres user when run as root). No server is a failure, never a skip.
- ``dsn``: a fresh database cloned from the migrated template, dropped afterwards — for tests
  that commit (SKIP LOCKED races, LISTEN/NOTIFY, subprocesses).
- ``conn``: a connection to such a database (autocommit), for quick inspection and factories.
"""

from __future__ import annotations

import psycopg
import pytest

from tests.support.pg import TestServer


@pytest.fixture(scope="session")
def pg_server():
    server = TestServer.find()
    server.create_template()
    yield server
    server.close()


@pytest.fixture
def dsn(pg_server):
    name = pg_server.create_database()
    yield pg_server.dsn_for(name)
    pg_server.drop_database(name)


@pytest.fixture
def empty_dsn(pg_server):
    """A database without the jobqueue schema (migration tests)."""
    name = pg_server.create_database(migrated=False)
    yield pg_server.dsn_for(name)
    pg_server.drop_database(name)


@pytest.fixture
def conn(dsn):
    with psycopg.connect(dsn, autocommit=True) as connection:
        yield connection


@pytest.fixture(autouse=True)
def _no_ambient_dsn(monkeypatch):
    """Code under test must get its DSN from the test, never from the developer's environment."""
    monkeypatch.delenv("JOBQUEUE_DSN", raising=False)
    yield


class _OwnClusterDsn(str):
    """A DSN string that also carries the LocalCluster behind it (for restart tests)."""

    cluster = None


@pytest.fixture
def own_cluster():
    """A migrated database on a cluster of this test's own, which it may stop and start at will
    (the session's server may be shared via JOBQUEUE_TEST_DSN, so it is never restarted)."""
    server = TestServer.throwaway()
    try:
        server.create_template()
        dsn = _OwnClusterDsn(server.dsn_for(server.template))
        # The throwaway cluster commits asynchronously (synchronous_commit off): without a checkpoint
        # a test's `stop -m immediate` could lose the last migration's commit.
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CHECKPOINT")
        dsn.cluster = server.cluster
        yield dsn
    finally:
        server.close()
