"""The PostgreSQL the tests run against: JOBQUEUE_TEST_DSN, else a throwaway cluster started here.

Databases the suite creates are named ``jqtest_*`` and are the only ones it ever drops.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from pathlib import Path

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from jobqueue.store import migrate
from tests.harness.devdb import LocalCluster, free_port


class TestServer:
    """A server we may create and drop our own databases in."""

    def __init__(self, admin_dsn: str, cluster: LocalCluster | None = None, tempdir: str | None = None) -> None:
        self.admin_dsn = admin_dsn
        self.cluster = cluster
        self._tempdir = tempdir
        self.template = f"jqtest_template_{uuid.uuid4().hex[:8]}"

    @classmethod
    def throwaway(cls, *, durable: bool = False) -> "TestServer":
        """``durable``: fsync and synchronous_commit on, so a commit that answered survives a crash
        (``restart -m immediate``); the default turns them off for speed."""
        base = Path(os.environ.get("JOBQUEUE_TEST_TMP", tempfile.gettempdir()))
        tempdir = tempfile.mkdtemp(prefix="jobqueue-pg-", dir=base)
        os.chmod(tempdir, 0o755)
        cluster = LocalCluster(Path(tempdir) / "data", free_port(), fast=not durable)
        cluster.start()
        return cls(cluster.dsn(), cluster, tempdir)

    @classmethod
    def find(cls) -> "TestServer":
        dsn = os.environ.get("JOBQUEUE_TEST_DSN")
        if dsn:
            return cls(dsn)
        return cls.throwaway()

    def dsn_for(self, dbname: str) -> str:
        params = conninfo_to_dict(self.admin_dsn)
        params["dbname"] = dbname
        return make_conninfo(**params)

    def create_template(self) -> None:
        self._execute(f'CREATE DATABASE "{self.template}"')
        migrate.upgrade(self.dsn_for(self.template))

    def create_database(self, *, migrated: bool = True) -> str:
        name = f"jqtest_{uuid.uuid4().hex[:12]}"
        template = f' TEMPLATE "{self.template}"' if migrated else ""
        self._execute(f'CREATE DATABASE "{name}"{template}')
        return name

    def drop_database(self, name: str) -> None:
        assert name.startswith("jqtest_"), "the suite only drops databases it created"
        self._execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def _execute(self, statement: str) -> None:
        with psycopg.connect(self.admin_dsn, autocommit=True) as conn:
            conn.execute(statement)

    def close(self) -> None:
        if self.cluster is not None:
            self.cluster.stop(mode="immediate")
            shutil.rmtree(self._tempdir, ignore_errors=True)
        else:
            self.drop_database(self.template)
