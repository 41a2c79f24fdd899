"""Core schema: jobs, results, attempt errors, workers, leaders, task defaults, enqueue/cancel functions, views.

Revision ID: 0001_core
Revises:
"""

from alembic import op

from jobqueue.db.queries import run_migration_script

revision = "0001_core"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_migration_script(op, "0001_core.up.sql")


def downgrade() -> None:
    run_migration_script(op, "0001_core.down.sql")
