"""Schema migrations through Alembic, configured in code (no alembic.ini at the top level).

A database that cannot be reached is `DatabaseUnavailable` here too (Alembic would raise
SQLAlchemy's wrapper of the driver's error), within `CONNECT_TIMEOUT` seconds.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
import psycopg
from sqlalchemy.exc import DBAPIError

from jobqueue import db
from jobqueue.errors import NotMigrated
from jobqueue.paths import resource_dir
from jobqueue.store import meta as meta_store

VERSION_TABLE = "jobqueue_alembic_version"
CONNECT_TIMEOUT = 5  # seconds; a migration is a one-shot command


def alembic_config(dsn: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(resource_dir("migrations")))
    config.attributes["dsn"] = dsn
    config.attributes["connect_timeout"] = CONNECT_TIMEOUT
    return config


@contextlib.contextmanager
def _database_errors() -> Iterator[None]:
    """The driver's error under SQLAlchemy's wrapper, translated as every other statement's is."""
    try:
        yield
    except DBAPIError as exc:
        with db.translated_errors():
            raise exc.orig from None


def upgrade(dsn: str, revision: str = "head") -> None:
    with _database_errors():
        command.upgrade(alembic_config(dsn), revision)


def downgrade(dsn: str, revision: str = "base") -> None:
    with _database_errors():
        command.downgrade(alembic_config(dsn), revision)


def head_revision() -> str:
    return ScriptDirectory.from_config(alembic_config("")).get_current_head()


def current_revision(dsn: str) -> str | None:
    """The revision the database is at, or None when jobqueue was never migrated there."""
    with db.translated_errors():
        conn = psycopg.connect(dsn, autocommit=True, connect_timeout=CONNECT_TIMEOUT)
    with conn:
        try:
            return db.run_sync(conn, meta_store.schema_revision())
        except NotMigrated:
            return None


def is_up_to_date(dsn: str) -> bool:
    return current_revision(dsn) == head_revision()
