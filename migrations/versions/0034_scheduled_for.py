"""A cron job knows the tick it fired for: jobs.scheduled_for, set by fire_schedule.

Revision ID: 0034_scheduled_for
Revises: 0031_operator_guards
"""

from alembic import op

from jobqueue.db.queries import run_migration_script

revision = "0034_scheduled_for"
down_revision = "0031_operator_guards"  # at merge: the newest revision before it (0032-0033 are other branches')
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_migration_script(op, "0034_scheduled_for.up.sql")


def downgrade() -> None:
    run_migration_script(op, "0034_scheduled_for.down.sql")
