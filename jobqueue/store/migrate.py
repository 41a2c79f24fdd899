"""Schema migrations through Alembic, configured in code (no alembic.ini at the top level).

A database that cannot be reached is `DatabaseUnavailable` here too (Alembic would raise
SQLAlchemy's wrapper of the driver's error), within `CONNECT_TIMEOUT` seconds.

Migrations connect as ``jobqueue-migrate`` (`migration_session`): directly (``JOBQUEUE_DIRECT_DSN``
when given, bypassing PgBouncer), with no statement or idle-in-transaction timeout, since a
migration may rewrite a big table, but with the lock timeout: a migration queued behind a long
transaction for its exclusive lock would stall every claim queued behind it, so it gives up
(`DatabaseBusy`, nothing applied) and is simply run again.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy.exc import DBAPIError

from jobqueue.config import DbSettings
from jobqueue.db import gateway as db
from jobqueue.db.paths import resource_dir
from jobqueue.model.errors import NotMigrated
from jobqueue.store import meta as meta_store

VERSION_TABLE = "jobqueue_alembic_version"
CONNECT_TIMEOUT = 5  # seconds; a migration is a one-shot command


def migration_session(settings: DbSettings) -> db.Session:
    session = db.Session.of(settings, db.MIGRATE_NAME, direct=True)
    return session.with_(statement_timeout=0, idle_in_transaction_timeout=0)


def _session(target: str | db.Session) -> db.Session:
    """A DSN alone migrates with the default lock timeout."""
    return target if isinstance(target, db.Session) else migration_session(DbSettings(dsn=target))


def alembic_config(target: str | db.Session) -> Config:
    config = Config()
    config.set_main_option("script_location", str(resource_dir("migrations")))
    config.attributes["dsn"] = _session(target).conninfo() if target else ""
    config.attributes["connect_timeout"] = CONNECT_TIMEOUT
    return config


@contextlib.contextmanager
def _database_errors() -> Iterator[None]:
    """The driver's error under SQLAlchemy's wrapper, translated as every other statement's is."""
    try:
        yield
    except DBAPIError as exc:
        if not isinstance(exc.orig, BaseException):
            raise
        with db.translated_errors():
            raise exc.orig from None


def upgrade(target: str | db.Session, revision: str = "head") -> None:
    """``target``: a DSN, or `migration_session(settings.db)` (what `jobqueue migrate` passes)."""
    with _database_errors():
        command.upgrade(alembic_config(target), revision)


def downgrade(target: str | db.Session, revision: str = "base") -> None:
    with _database_errors():
        command.downgrade(alembic_config(target), revision)


def head_revision() -> str:
    head = ScriptDirectory.from_config(alembic_config("")).get_current_head()
    if head is None:
        raise RuntimeError("no migrations found (is the migrations/ folder missing?)")
    return head


def current_revision(target: str | db.Session) -> str | None:
    """The revision the database is at, or None when jobqueue was never migrated there."""
    with db.connect_sync(_session(target), connect_timeout=CONNECT_TIMEOUT) as conn:
        try:
            return db.run_sync(conn, meta_store.schema_revision())
        except NotMigrated:
            return None


def is_up_to_date(target: str | db.Session) -> bool:
    return current_revision(target) == head_revision()
