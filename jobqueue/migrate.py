"""Schema migrations through Alembic, configured in code (no alembic.ini at the top level)."""

from __future__ import annotations

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

import psycopg

from jobqueue.paths import resource_dir

VERSION_TABLE = "jobqueue_alembic_version"


def alembic_config(dsn: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(resource_dir("migrations")))
    config.attributes["dsn"] = dsn
    return config


def upgrade(dsn: str, revision: str = "head") -> None:
    command.upgrade(alembic_config(dsn), revision)


def downgrade(dsn: str, revision: str = "base") -> None:
    command.downgrade(alembic_config(dsn), revision)


def head_revision() -> str:
    return ScriptDirectory.from_config(alembic_config("")).get_current_head()


def current_revision(dsn: str) -> str | None:
    """The revision the database is at, or None when jobqueue was never migrated there."""
    with psycopg.connect(dsn) as conn:
        exists = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (f"public.{VERSION_TABLE}",)).fetchone()[0]
        if not exists:
            return None
        row = conn.execute(f"SELECT version_num FROM public.{VERSION_TABLE}").fetchone()  # constant name
        return row[0] if row else None


def is_up_to_date(dsn: str) -> bool:
    return current_revision(dsn) == head_revision()
