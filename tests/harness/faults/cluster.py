"""Cluster control for the fault campaign: the PostgreSQL it may crash, and its harness connection.

`FaultCluster` wraps a `tests.harness.devdb.LocalCluster` the campaign owns (``make faults`` starts a
durable one in ``.pgdata-faults``: fsync and synchronous_commit on, so ``restart -m immediate`` is a
real crash and recovery), migrates a template database once, and gives each scenario a fresh
database cloned from it (``jobqueue_faults_<scenario>``, kept until the next run for inspection).
`Monitor` is the harness's own connection to a scenario's database: it reconnects by itself, so
the harness can keep reading through the faults it injects.
"""

from __future__ import annotations

import asyncio
import time
from datetime import datetime, timezone
from pathlib import Path

import psycopg
from psycopg import sql

from jobqueue.bench import store as bench_store
from jobqueue.db import gateway as db
from jobqueue.model.errors import DatabaseUnavailable
from jobqueue.store import migrate
from tests.harness.devdb import LocalCluster
from tests.harness.faults import store as faults_store

TEMPLATE = "jobqueue_faults_template"


def now() -> datetime:
    return datetime.now(timezone.utc)


def prepare_database(dsn: str) -> None:
    """Migrate the database at ``dsn`` and create the recording app's table in it."""
    migrate.upgrade(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        for call in faults_store.create_schema():
            db.run_sync(conn, call)


class FaultCluster:
    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        self._template_ready = False

    @classmethod
    def durable(cls, datadir: Path | str, port: int) -> "FaultCluster":
        """The campaign's own durable cluster in ``datadir`` (created and started when needed)."""
        cluster = LocalCluster(datadir, port, fast=False)
        cluster.start()
        return cls(cluster)

    def describe(self) -> str:
        with psycopg.connect(self.cluster.dsn(), autocommit=True) as conn:
            version, _, fsync, synchronous_commit, *_ = db.run_sync(conn, bench_store.server_settings())
        return (
            f"PostgreSQL {version} on port {self.cluster.port}, fsync={fsync}, synchronous_commit={synchronous_commit}"
        )

    def _admin(self, statement: sql.Composed) -> None:
        with psycopg.connect(self.cluster.dsn(), autocommit=True) as conn:
            conn.execute(statement)

    def _recreate(self, name: str, template: str | None = None) -> str:
        self._admin(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        create = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
        if template:
            create += sql.SQL(" TEMPLATE {}").format(sql.Identifier(template))
        self._admin(create)
        return self.cluster.dsn(name)

    def _prepare_template(self) -> None:
        prepare_database(self._recreate(TEMPLATE))
        self._template_ready = True

    def fresh_database(self, scenario: str) -> str:
        """A migrated database of its own for ``scenario`` (with the recording table); its DSN."""
        if not self._template_ready:
            self._prepare_template()
        return self._recreate(f"jobqueue_faults_{scenario.replace('-', '_')}", TEMPLATE)

    def restart(self, mode: str) -> float:
        """``pg_ctl stop -m mode`` then start; returns the seconds it took until connections work."""
        started = time.monotonic()
        self.cluster.stop(mode=mode)
        self.cluster.start()
        return time.monotonic() - started

    def ensure_running(self) -> None:
        if not self.cluster.running():
            self.cluster.start()

    def stop(self) -> None:
        self.cluster.stop(mode="fast")


class Monitor:
    """The harness's connection to one scenario's database, reconnecting through outages."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self._conn: psycopg.AsyncConnection | None = None

    async def run(self, call: db.Call, patience: float = 90.0):
        deadline = time.monotonic() + patience
        while True:
            try:
                if self._conn is None or self._conn.closed:
                    self._conn = await db.connect(self.dsn)
                return await db.run(self._conn, call)
            except DatabaseUnavailable:
                await self.close()
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.2)

    async def close(self) -> None:
        if self._conn is not None:
            await self._conn.close()
            self._conn = None
