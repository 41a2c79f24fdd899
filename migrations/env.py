"""Alembic environment: runs jobqueue's revisions against the DSN passed in by `jobqueue migrate`.

There is no alembic.ini at the top level (the layout keeps the root small); `jobqueue.store.migrate`
builds the Alembic Config in code and hands the DSN over through `config.attributes`.
"""

import psycopg
from alembic import context
from sqlalchemy import create_engine, pool

from jobqueue.store.migrate import VERSION_TABLE


def _connect(dsn: str, connect_timeout: int) -> psycopg.Connection:
    """``dsn`` carries the migration session's name and timeouts (jobqueue.store.migrate). No statement
    is prepared server-side: a one-shot gains nothing from it, and PgBouncer could not carry it."""
    conn = psycopg.connect(dsn, connect_timeout=connect_timeout)
    conn.prepare_threshold = None
    return conn


def run_migrations_online() -> None:
    dsn = context.config.attributes["dsn"]
    connect_timeout = context.config.attributes["connect_timeout"]
    engine = create_engine(
        "postgresql+psycopg://", creator=lambda: _connect(dsn, connect_timeout), poolclass=pool.NullPool
    )
    with engine.connect() as connection:
        context.configure(connection=connection, version_table=VERSION_TABLE, transaction_per_migration=True)
        with context.begin_transaction():
            context.run_migrations()


if context.is_offline_mode():
    raise SystemExit("jobqueue migrations run online only: use `jobqueue migrate`.")
run_migrations_online()
