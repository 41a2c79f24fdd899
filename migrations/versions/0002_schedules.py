"""Cron schedules and maintenance (schedules table, worker registry additions).

Revision ID: 0002_schedules
Revises: 0001_core
"""

from alembic import op

from jobqueue.db.queries import run_migration_script

revision = "0002_schedules"
down_revision = "0001_core"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_migration_script(op, "0002_schedules.up.sql")


def downgrade() -> None:
    run_migration_script(op, "0002_schedules.down.sql")
