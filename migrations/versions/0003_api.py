"""REST API (API keys, queue pause state).

Revision ID: 0003_api
Revises: 0002_schedules
"""

from alembic import op

from jobqueue.db.queries import run_migration_script

revision = "0003_api"
down_revision = "0002_schedules"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_migration_script(op, "0003_api.up.sql")


def downgrade() -> None:
    run_migration_script(op, "0003_api.down.sql")
